"""What every experiment script does around its measurements (the packet-size sweep and the reproductions).

On the host: refuse without root, find the tools before anything is built, tidy what
killed runs left, lock the run directory, then measure here (a host kernel with ESP)
or re-run the same script inside User-Mode Linux; stop cleanly on SIGINT, SIGTERM or
SIGHUP (exit 128 + signal, the run directory marked interrupted); render the report
on the host, where plotting is fast.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Sequence

from experiments import progress
from experiments.machine import hand_to_guest
from testbed import backends, handoff, rundir
from testbed.capabilities import Needs
from testbed.errors import Refused, Terminated, add_debug_option
from testbed.options import add_kernel_options, add_speed_probe_option, backend_options
from testbed.record import Bound, TransactionRecord, as_record

#: The exit status of a run that ended but could not measure every point (without --allow-failures).
INCOMPLETE = 3


def add_output_options(p: argparse.ArgumentParser, default_out: str, dry_run_help: str) -> None:
    """--out, --dry-run, --no-report, --allow-failures, -v, --debug and the kernel options, as every
    experiment has them."""
    o = p.add_argument_group("output")
    o.add_argument("--out", metavar="DIR", help=f"run directory; an existing one is resumed (default: {default_out})")
    o.add_argument("--dry-run", action="store_true", help=dry_run_help)
    o.add_argument("--allow-failures", action="store_true",
                   help=f"exit 0 when some points could not be measured (every attempt failed); without it such "
                        f"a run exits {INCOMPLETE}, its last line saying how many and why")
    o.add_argument("--no-report", action="store_true", help="do not write the report or print the tables")
    o.add_argument("-v", "--verbose", action="count", default=0, help="log what is being done (-vv: debug)")
    add_debug_option(o)
    add_kernel_options(p)
    add_speed_probe_option(p)


def runs_dir(repo: str) -> str:
    """Where run directories go by default: ``runs/`` in the checkout the code runs from, or, for an
    installed copy (no checkout around it: ``setup.py`` is not beside the packages), in the current
    directory."""
    return os.path.join(repo if os.path.exists(os.path.join(repo, "setup.py")) else os.getcwd(), "runs")


def out_dir_of(out: str | None, repo: str, name: str) -> str:
    """The run directory: ``--out`` or ``runs/<date>-<name>`` (:func:`runs_dir`); refused if a file is in the way."""
    path = os.path.abspath(out or os.path.join(runs_dir(repo), time.strftime("%Y%m%d-%H%M%S") + f"-{name}"))
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(f"--out {path}: exists and is not a directory")
    return path


def add_bench_out(p, name: str) -> None:
    """``--out DIR`` of a benchmark that writes a run directory (:mod:`analysis.benchpage`)."""
    p.add_argument("--out", metavar="DIR",
                   help=f"where results.json and report.html (the plots) go (default: runs/<date>-bench-{name} "
                        "in the checkout)")


def bench_out(args, argv: Sequence[str], name: str) -> list[str]:
    """Settle a benchmark's ``--out`` here, before a guest boots (it and this process agree on
    the directory); ``argv`` with that ``--out`` for :func:`follow`."""
    args.out = out_dir_of(args.out, os.path.dirname(os.path.dirname(os.path.abspath(__file__))), f"bench-{name}")
    return [*argv, "--out", args.out]


def check_tools() -> None:
    """The programs a sweep starts, found before anything is built or booted."""
    for tool, package in (("iperf3", "iperf3"), ("mnexec", "mininet")):
        if not shutil.which(tool):
            raise Refused(f"{tool} not found: install Debian's {package} package "
                          f"(apt-get install {package}, or scripts/install.sh)")


def report_leftovers(prog: str) -> None:
    """Remove what killed runs provably left; name the command for what may still be in use."""
    from testbed import clean, netns

    for path in clean.remove_dead_leftovers():
        print(f"{prog}: removed {path}, left by a killed run", file=sys.stderr)
    others = netns.list_ours()
    if others:
        print(f"{prog}: note: {len(others)} testbed namespaces exist ({', '.join(others[:3])}"
              f"{', ...' if len(others) > 3 else ''}): another run in progress, or one that was killed; "
              "if none is running, `sudo ipsec-testbed clean` removes them", file=sys.stderr)


def typed_command() -> list[str] | None:
    """The job as one front-door command line (the host's, also inside UML), for meta.json."""
    return list(handoff.current().command) or None


def command_started() -> float:
    """When this job started on the host, in Unix time (now where :func:`run` did not say): a guest
    shares the host's wall clock, so a time budget counted from it includes the guest's boot."""
    started = handoff.current().started_unix
    return time.time() if started is None else started


def progress_callback(bar, task, prefix: str = "") -> Callable:
    """A sweep ``progress(point, record, done, total)`` that drives a rich progress ``task``: ``record``
    is None before the point, then its :class:`~testbed.record.Record` (or its results.jsonl line),
    a transactions part's (:mod:`experiments.reproduce`) a
    :class:`~testbed.record.TransactionRecord`."""
    def progress(point, record, done, total):
        label = (f"{prefix}{point.profile} {point.rate_mbit:g} Mbit/s {point.size_bytes} B IPv{point.ip_version} "
                 f"{point.transport}{f' x{point.clients}' if point.clients > 1 else ''}"
                 f"{f' arm {point.arm}' if point.arm else ''} rep {point.repetition + 1}")
        if record is None:
            bar.update(task, total=total, completed=done, description=label)
            return
        record = as_record(record)
        if record.failed:
            bar.update(task, completed=done, description=f"{label}: FAILED ({record.error})")
        elif isinstance(record, TransactionRecord):  # its timing: no goodput, no bound
            bar.update(task, completed=done, description=f"{label}: {record.mean_ms:.2f} ms")
        else:
            bound, goodput = record.bound, record.goodput_mbps
            flag = (f" [{bound}-bound]" if bound in (Bound.CPU, Bound.OTHER)
                    else " [ANOMALY, left out of the means]" if bound is Bound.ANOMALY else "")
            if goodput is None:
                value = "no goodput"
            elif goodput < 0:  # counters that went backwards: no figure to show
                value = "no goodput (its counters went backwards)"
            else:
                value = f"{goodput:.2f} Mbit/s"
            bar.update(task, completed=done, description=f"{label}: {value}{flag}")
    return progress


def progress_bar():
    """The progress bar every experiment shows (:mod:`experiments.progress`: bar, n of N, elapsed, ETA)."""
    return progress.progress_bar()


def follow(prog: str, command: Sequence[str], argv: list[str], args, needs: Needs,
           interactive: bool = False, channel_fds: tuple[int, int] | None = None) -> int | None:
    """Where the work of ``ipsec-testbed COMMAND...`` should run, acted on: how every job honours ``--kernel``.

    Prints the decision.  Returns None when the work runs here (on the kernel this process
    runs on: the host's, or inside the guest already); otherwise runs ``ipsec-testbed COMMAND...
    ARGV...`` on the chosen backend and returns its exit status (1 when no kernel can run it, 125 when the
    guest could not run).  ``channel_fds``: the job's end of a :class:`testbed.channel.Channel`, handed to it.
    """
    from experiments import doctor

    choice = doctor.choose(getattr(args, "kernel", backends.AUTO), needs, backend_options(args))
    if choice.backend is not None and not choice.backend.runs_here and choice.backend.inside():
        return None
    print(f"kernel: {choice.name or 'none'} ({choice.reason})", file=sys.stderr)
    if choice.backend is None:
        return 1
    if choice.backend.runs_here:
        return None
    t0 = time.monotonic()
    try:
        rc = choice.backend.run(doctor.guest_command(command, argv), interactive=interactive,
                                modules=doctor.kernel_modules(), cpu=getattr(args, "host_cpu", None),
                                speed_probe=not interactive and not getattr(args, "no_speed_probe", False),
                                channel_fds=channel_fds)
    except backends.BackendError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 125
    print(f"({choice.backend.title} run: {time.monotonic() - t0:.0f} s, boot included)", file=sys.stderr)
    return rc


def run(prog: str, command: Sequence[str], args, argv: list[str], out_dir: str, needs: Needs,
        measure: Callable[[], int], report: Callable[[], None], on_interrupt: Callable[[str], None],
        missing: Callable[[], str | None] = lambda: None) -> int:
    """Measure (here or in a guest) with ``measure()``, then ``report()`` on the host; see the module docstring.

    ``command`` names the job as the front door does (``("sweep",)``, ``("reproduce", "003")``);
    ``args`` carries the kernel options (``add_kernel_options``) and ``no_report``; ``argv``
    is what the job was given, passed on to the guest with ``--out`` and ``--no-report``.
    ``needs`` is what the work needs of a kernel.  ``on_interrupt(signal_name)`` marks the run
    directory when a signal ends the run.  ``missing()`` says, from the run directory, what a run
    that ended could not measure (``measure()`` says it too): after a report it is said again, as the
    last line.
    """
    if os.geteuid() != 0:
        print(f"{prog}: needs root (network namespaces, xfrm, tc); run it with sudo", file=sys.stderr)
        return 1
    if handoff.received() is None:  # on the host: the job as one command, however it was started, and now
        handoff.hand(command=("ipsec-testbed", *command, *argv), started_unix=time.time())
    check_tools()
    on_host = backends.current().runs_here
    if on_host:
        report_leftovers(prog)
        hand_to_guest()  # meta.json's versions and CPU model, found here once
    # The host holds the lock for the whole run, guest included (a guest's flock on hostfs
    # is its own kernel's and would not keep a second run on the host out).
    with rundir.locked(out_dir) if on_host else contextlib.nullcontext():
        try:
            # In a guest the work measures and the host renders: importing plotly in a guest is slow.
            rc = follow(prog, command, [*argv, "--out", out_dir, "--no-report"], args, needs)
            if rc is None:
                rc = measure()
        except (KeyboardInterrupt, Terminated) as e:
            signum = e.signum if isinstance(e, Terminated) else signal.SIGINT  # SIGTERM, or SIGHUP
            why = signal.Signals(signum).name
            on_interrupt(why)
            print(f"\n{prog}: stopped by {why}; the points measured so far are in {out_dir}; run the same "
                  f"command with --out {out_dir} to finish", file=sys.stderr)
            return 128 + signum
    if rc in (0, INCOMPLETE) and not args.no_report:
        report()  # a partial run's report too: it says which points are missing
        line = missing()
        if line:
            print(line, file=sys.stderr)
    return rc

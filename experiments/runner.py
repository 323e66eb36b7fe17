"""Runs a :class:`~experiments.job.Job`: here, or on a kernel with what the work needs.

::

    run(job)  on the host: refuse without root, find the tools before anything is built, tidy
              what killed runs left, lock the run directory, choose the kernel, then
                  the work here                      (a host kernel with ESP)
                  or the same job in a guest         (the Job in the hand-off; ``python -m cli.job``)
              stop cleanly on SIGINT, SIGTERM or SIGHUP (exit 128 + signal, the run directory
              marked interrupted)
    run(job)  in a guest: the work, nothing else (the host holds the lock and says what it chose)

The command line (``cli/``) only makes the job and, once :func:`run` returns, renders the report
on the host, where plotting is fast.  What a kind of work does is one function each here:
:func:`measure`, :func:`dry_run`, :func:`missing_line`, :func:`note_interrupted`, :func:`needs`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from analysis import store
from analysis.history import KINDS
from experiments import reproduce
from experiments.engine import probe
from experiments.engine.plan import (
    SweepSpec,
    estimate_seconds,
    plan_points,
    precision_of,
    unmeasured,
    unusable_profiles,
)
from experiments.engine.sweep import by_point, run_sweep, summary
from experiments.engine.sweep import note_interrupted as note_sweep_interrupted
from experiments.engine.turns import Turns
from experiments.job import INCOMPLETE, BenchWork, Job, ReproductionWork, SweepWork
from experiments.machine import hand_to_guest
from experiments.progress import progress_bar, progress_callback
from testbed import backends, handoff, kernelbuild, kernelsource, measuring, rundir, umlkernel
from testbed.capabilities import Needs
from testbed.errors import Refused, Terminated
from testbed.record import Bound
from testbed.rundir import load_existing

#: What a guest runs: the job it was handed (``-P``: the guest starts in the user's directory, whose
#: files must not stand in for the project's).
GUEST_ENTRY = ("-P", "-m", "cli.job")

__all__ = ["INCOMPLETE", "run", "measure", "dry_run", "missing_line", "note_interrupted", "needs", "spawn",
           "run_apart", "sweep_apart", "received", "runs_dir", "out_dir_of"]


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


def requested_kernel(job: Job) -> str | None:
    """The kernel the job names (``--uml-kernel``, else ``$IPSEC_TESTBED_UML_KERNEL``); None for the default."""
    return job.kernel.uml_kernel or os.environ.get(umlkernel.KERNEL_ENV)


def prepare_kernel(job: Job) -> Job:
    """Build the UML kernel the job names (``--uml-kernel`` or ``$IPSEC_TESTBED_UML_KERNEL``) on first use;
    at once when it is in the cache.  A bad name or a step of the recipe that fails is one line.

    Work with WireGuard and no kernel named gets the project's kernel where the automatic choice (Debian's)
    has no WireGuard: the job is returned with that choice, so that every tunnel it compares runs on the
    one kernel.  A kernel named that has no WireGuard is refused in one line naming the one that has."""
    requested = requested_kernel(job)
    wireguard = "wireguard" in needs(job).capabilities and job.kernel.kernel != backends.HostBackend.name
    if not requested and wireguard:
        requested = kernel_for_wireguard()
        if requested:
            job = job.with_(kernel=dataclasses.replace(job.kernel, uml_kernel=requested))
            print("kernel: WireGuard is not in Debian's linux.uml: every profile of this run runs on the "
                  "project's kernel (--uml-kernel recipe), which has it", file=sys.stderr)
    if not requested:
        return job
    counted = job.kernel.counted
    try:
        kernelbuild.ensure(requested, variant=kernelbuild.variant_for(counted))
    except (kernelsource.KernelNameError, kernelbuild.BuildError) as e:
        raise Refused(str(e)) from None
    if wireguard and not counted:
        try:
            kernel = umlkernel.select(requested)
        except umlkernel.KernelUnavailableError:
            return job
        if kernel.has("wireguard") is False:
            raise Refused(f"profile wireguard needs a kernel with WireGuard (CONFIG_WIREGUARD), and "
                          f"{kernel.describe()} has none: --uml-kernel recipe (the project's kernel) has it")
    return job


def kernel_for_wireguard() -> str | None:
    """The UML kernel to name for work with WireGuard when none is named: the project's (``recipe``) where the
    automatic choice has no WireGuard (Debian's), or is not built yet; None when the automatic choice has it."""
    try:
        automatic = umlkernel.automatic()
    except umlkernel.KernelUnavailableError:
        return kernelsource.RECIPE  # not built yet on this CPU: the project's kernel, which has WireGuard
    return kernelsource.RECIPE if automatic.has("wireguard") is False else None


def check_tools(job: Job | None = None) -> None:
    """The programs a sweep starts, found before anything is built or booted (the probe's tool where the job
    probes round trips)."""
    tools = [("iperf3", "iperf3"), ("mnexec", "mininet")]
    if job is not None and isinstance(job.work, SweepWork) and job.work.spec.latency_probe:
        tool = job.work.spec.probe_tool
        tools.append((tool, probe.PACKAGES[tool]))
    for tool, package in tools:
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


# -- what each kind of work does -------------------------------------------------------------------

def needs(job: Job) -> Needs:
    """What the job's work needs of a kernel (ESP for IPsec profiles, ...)."""
    from experiments import doctor

    work = job.work
    if isinstance(work, SweepWork):
        return doctor.needs(work.spec.profiles)
    if isinstance(work, ReproductionWork):
        return doctor.needs(p for part in work.parts for p in part.spec.profiles)
    if isinstance(work, BenchWork):
        return Needs(work.needs)
    return doctor.needs(work.profiles)


def measure(job: Job) -> int:
    """Measure what ``job`` still misses into its run directory (the lock is the caller's), print
    what was measured, and return the exit status: 0, or :data:`~experiments.job.INCOMPLETE` when
    some points could not be measured (0 with ``allow_failures``)."""
    if isinstance(job.work, ReproductionWork):
        return reproduce.measure_parts(job)
    if isinstance(job.work, SweepWork):
        return _measure_sweep(job)
    raise TypeError(f"a {job.kind} job measures nothing into a run directory")


def _measure_sweep(job: Job) -> int:
    spec, out_dir, turns = job.work.spec, job.out_dir, job.work.turns
    with progress_bar() as bar:
        progress = progress_callback(bar, bar.add_task("sweep", total=None))
        # the caller holds the run directory's lock (taken on the host, before any guest boots)
        counts = run_sweep(spec, out_dir, progress, command_line=list(job.command) or None, lock=False,
                           started_unix=job.started_unix, turns=Turns(turns) if turns else None,
                           concurrent_with=job.beside)
    failed = f"; {counts['failed']} FAILED (run the same command again to retry them)" if counts["failed"] else ""
    bounds = summary(out_dir)
    classes = ", ".join(f"{bounds.get(b, 0)} {b}" for b in Bound)
    print(f"measured {counts['measured']} points ({counts['already']} were already there) into {out_dir}{failed}",
          file=sys.stderr)
    print(f"what bounded them: {classes} (anomalies are left out of the means)", file=sys.stderr)
    if job.beside:
        print(f"WARNING: measured beside another testbed run, {job.beside}: its load is in every figure "
              "(each record's concurrent_with says so)", file=sys.stderr)
    records = load_existing(out_dir)
    dropped = backlog_drops_line(records)
    if dropped:
        print(dropped, file=sys.stderr)
    groups = by_point(records)
    for line in unusable_profiles(spec, groups).values():
        print(line, file=sys.stderr)
    print(precision_line(job, counts["over_budget"], groups), file=sys.stderr)
    missing = missing_line(job, groups)
    if missing:
        print(missing, file=sys.stderr)
        return 0 if job.allow_failures else INCOMPLETE
    return 0


def backlog_drops_line(records) -> str | None:
    """One line on the windows in which the receiving kernel dropped packets the shaper had let through
    (its receive backlog full: the emulating CPU fell behind the link), or None when none did (pure)."""
    hit = [r for r in records if not r.failed and (r.receive_backlog_drops or 0) > 0]
    if not hit:
        return None
    shares = [r.receive_backlog_drops / r.link_packets for r in hit if r.link_packets]
    most = f", up to {max(shares):.1%} of the shaper's packets" if shares else ""
    return (f"after the shaper: in {len(hit)} of {sum(1 for r in records if not r.failed)} windows the receiving "
            f"kernel dropped packets from its full receive backlog{most}: the emulating CPU fell behind the link, "
            "so the loss is the emulator's, not the link's (receive_backlog_drops)")


def missing_line(job: Job, groups: dict | None = None) -> str | None:
    """One line on the points the job's run directory still misses, and why; None when it has them
    all (``groups``: a sweep's records by point, when they have been read already)."""
    if isinstance(job.work, ReproductionWork):
        return reproduce.missing_line(job.out_dir)
    if not isinstance(job.work, SweepWork):
        return None
    spec, out_dir = job.work.spec, job.out_dir
    groups = by_point(load_existing(out_dir)) if groups is None else groups
    missing = unmeasured(spec, groups)
    if not missing:
        return None
    reasons = [r.error for p in missing for r in groups.get(p.point_key(), []) if r.failed]
    why = f"; the last error: {reasons[-1]}" if reasons else ""
    return (f"INCOMPLETE: {len(missing)} of {len(plan_points(spec, 1))} points could not be measured{why} "
            f"(the same command with --out {shlex.quote(out_dir)} tries them again; --allow-failures exits 0)")


def precision_line(job: Job, over_budget: bool, groups: dict | None = None) -> str:
    """How many points of a sweep's ``job`` are as precise as asked, and why the others are not
    (``groups``: the run's records by point, when they have been read already)."""
    spec, out_dir = job.work.spec, job.out_dir
    p = precision_of(spec, by_point(load_existing(out_dir)) if groups is None else groups)
    line = (f"precision: {p['precise']} of {p['points']} points within {spec.precision_pct:g} % (goodput) and "
            f"{spec.cpu_precision_pct:g} % (CPU per GB)")
    why = []
    if p["at_most"]:
        why.append(f"{p['at_most']} had their {spec.most_repetitions} repetitions")
    if p["unusable"]:
        why.append(f"{p['unusable']} of profiles whose every repetition was an anomaly (above)")
    if p["short"]:
        cause = f"the time budget ({spec.budget_s:g} s, --budget)" if over_budget else "failures or an interruption"
        why.append(f"{p['short']} stopped short by {cause}")
    if p["disturbed"]:
        why.append(f"{p['disturbed']} of them short of {spec.repetitions} windows free of other work on the host "
                   "(foreign_cpu_pct)")
    line += f"; {', '.join(why)}" if why else ""
    if p["short"]:
        # a run on the same directory measures only what is missing: here, the extra repetitions
        more = " --budget 0" if over_budget else ""
        line += f"\n(the same command with --out {shlex.quote(out_dir)}{more} adds the repetitions they lack)"
    return line


def note_interrupted(job: Job, why: str) -> None:
    """Mark the job's run directory as ended by ``why`` (its measuring process, in a guest the host
    killed, could not)."""
    if isinstance(job.work, ReproductionWork):
        reproduce.note_interrupted(job.out_dir, job.work.parts, why)
    elif isinstance(job.work, SweepWork):
        note_sweep_interrupted(job.out_dir, why)


def dry_run(job: Job) -> int:
    """Print what ``job`` would measure, into where, and how long it would take; measure nothing."""
    if isinstance(job.work, ReproductionWork):
        return reproduce.dry_run(job.work.parts, job.out_dir, job.work.scale, job.work.budget_s, job.work.seed)
    spec, out_dir = job.work.spec, job.out_dir
    done = by_point(load_existing(out_dir))
    points = plan_points(spec)
    todo = [p for p in points if len(done.get(p.point_key(), [])) <= p.repetition]
    for p in todo:
        print(f"{p.topology} {p.profile:>22s} {p.mode} IPv{p.ip_version} {p.transport} {p.rate_mbit:g} Mbit/s "
              f"{p.size_mode} {p.size_bytes} B rep {p.repetition}")
    most = len(plan_points(spec, spec.most_repetitions)) - (len(points) - len(todo))
    more = (f", up to {most} if every point needs {spec.most_repetitions} repetitions "
            f"(~{estimate_seconds(spec, most) / 60:.1f} min" if spec.adaptive else "")
    if spec.adaptive:
        more += f"; the extra repetitions stop at {spec.budget_s:g} s, --budget)" if spec.budget_s else ")"
    print(f"{len(todo)} of {len(points)} points to measure into {out_dir}{more}; estimated "
          f"{estimate_seconds(spec, len(todo)) / 60:.1f} min for these, plus a User-Mode Linux boot if the "
          "host kernel cannot run them", file=sys.stderr)
    return 0


# -- where the work runs ---------------------------------------------------------------------------

def received() -> Job | None:
    """In a guest: the job the host handed it (None on the host)."""
    handed = handoff.received()
    if handed is None or not handed.job:
        return None
    return Job.from_json(handed.job)


def _choose(job: Job):
    from experiments import doctor

    return doctor.choose(job.kernel.kernel, needs(job), job.kernel.options())


def elsewhere(job: Job, prog: str, *, interactive: bool = False,
              channel_fds: tuple[int, int] | None = None) -> int | None:
    """Where ``job`` should run, acted on: how every job honours its kernel choice.

    Prints the decision.  Returns None when the work runs here (on the kernel this process runs on:
    the host's, or inside the guest already); otherwise runs the job on the chosen backend (the Job in
    the hand-off) and returns its exit status (1 when no kernel can run it, 125 when the guest could
    not run).  ``channel_fds``: the job's end of a :class:`testbed.channel.Channel`, handed to it.
    """
    from experiments import doctor

    choice = _choose(job)
    if choice.backend is not None and not choice.backend.runs_here and choice.backend.inside():
        return None
    print(f"kernel: {choice.name or 'none'} ({choice.reason})", file=sys.stderr)
    if choice.backend is None:
        return 1
    if choice.backend.runs_here:
        return None
    handoff.hand(job=job.to_json())
    t0 = time.monotonic()
    try:
        rc = choice.backend.run([sys.executable, *GUEST_ENTRY], interactive=interactive,
                                modules=doctor.kernel_modules(), cpu=job.kernel.host_cpu,
                                speed_probe=not interactive and job.kernel.speed_probe, channel_fds=channel_fds,
                                keep_awake=job.kernel.keep_awake)
    except backends.BackendError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 125
    print(f"({choice.backend.title} run: {time.monotonic() - t0:.0f} s, boot included)", file=sys.stderr)
    return rc


def run(job: Job, prog: str, here: Callable[[Job], int] = measure, *, interactive: bool = False,
        channel_fds: tuple[int, int] | None = None) -> int:
    """Run ``job``'s work, ``here(job)``, on the kernel its choice and needs select; see the module
    docstring.  Returns the work's exit status (128 + signal when a signal ended it).

    ``interactive`` gives a guest this terminal (the demo's command line); ``channel_fds``: the job's
    end of a :class:`testbed.channel.Channel` (the web demo's), handed to a guest."""
    if os.geteuid() != 0:
        print(f"{prog}: needs root (network namespaces, xfrm, tc); run it with sudo", file=sys.stderr)
        return 1
    if job.started_unix is None:
        job = job.with_(started_unix=time.time())
    check_tools(job)
    on_host = backends.current().runs_here
    if on_host and isinstance(job.work, (SweepWork, ReproductionWork)):
        check_history(job)
    with measuring.exclusive(job.command, job.out_dir, job.allow_concurrent) if on_host else \
            contextlib.nullcontext(measuring.Hold()) as hold:
        if hold.concurrent is not None:
            job = job.with_(beside=f"{hold.concurrent.command} (pid {hold.concurrent.pid})")
            print(f"{prog}: WARNING: measuring beside another testbed run, {hold.concurrent.describe()} "
                  "(--allow-concurrent): every record says so", file=sys.stderr)
        if on_host:
            job = prepare_kernel(job)
            report_leftovers(prog)
            hand_to_guest()  # meta.json's versions and CPU model, found here once
        return _run_held(job, prog, here, on_host, interactive, channel_fds)


def _run_held(job: Job, prog: str, here: Callable[[Job], int], on_host: bool, interactive: bool,
              channel_fds: tuple[int, int] | None) -> int:
    # The host holds the lock for the whole run, guest included (a guest's flock on hostfs
    # is its own kernel's and would not keep a second run on the host out).
    measuring_work = isinstance(job.work, (SweepWork, ReproductionWork))
    lock = rundir.locked(job.out_dir) if on_host and measuring_work else contextlib.nullcontext()
    with lock:
        try:
            # In a guest the work measures and the host renders: importing plotly in a guest is slow.
            rc = elsewhere(job.with_(report=False), prog, interactive=interactive, channel_fds=channel_fds)
            if rc is None:
                rc = here(job)
        except (KeyboardInterrupt, Terminated) as e:
            signum = e.signum if isinstance(e, Terminated) else signal.SIGINT  # SIGTERM, or SIGHUP
            why = signal.Signals(signum).name
            if not measuring_work:
                raise  # no run directory to mark: the caller's unwinding says the rest
            note_interrupted(job, why)
            print(f"\n{prog}: stopped by {why}; the points measured so far are in {job.out_dir}; run the same "
                  f"command with --out {job.out_dir} to finish", file=sys.stderr)
            return 128 + signum
    if on_host and measuring_work and job.out_dir:
        rc = keep_in_history(job, prog, rc)
    return rc


def history_kind(command: Sequence[str]) -> str:
    """What a command line did, as the history's rows say it (``regress --bisect``'s steps: bisect)."""
    words = [w for w in command[1:] if not w.startswith("-")]  # (past the front door's own options: -v)
    word = words[0] if words else "sweep"
    if word == "regress" and "--bisect" in command:
        return "bisect"
    return word if word in KINDS else "sweep"


def check_history(job: Job) -> None:
    """Refuse, before anything is measured, a history the run could not add its figures to."""
    try:
        history = store.open_store(job.history)
        if history is not None:
            with history:
                history.migrate()
    except store.StoreError as e:
        raise Refused(f"{e} (or --history off)") from None


def keep_in_history(job: Job, prog: str, rc: int) -> int:
    """The run's rows added to the results history (``--history``; :mod:`analysis.store`); ``rc``, or 1 when
    the history refused them (the run directory keeps every figure all the same)."""
    if not os.path.exists(job.out_dir):
        return rc
    kernel = None if job.kernel.kernel == backends.HostBackend.name else requested_kernel(job)
    try:
        kept = store.keep_run(job.out_dir, history_kind(job.command), kernel, job.history)
    except (store.StoreError, rundir.ResultsError) as e:
        print(f"{prog}: {e}; the run's figures are in {job.out_dir}", file=sys.stderr)
        return rc or 1
    if kept and kept[0]:
        print(f"{prog}: {kept[0]} figures added to the history in {kept[1]} (ipsec-testbed history)", file=sys.stderr)
    return rc


#: The file in a run directory that holds the job a process of its own was given (:func:`spawn`).
JOB_FILE = "job.json"


def spawn(job: Job, **popen: object) -> subprocess.Popen:
    """``job`` in a process of its own on this machine (it boots its own guest where it needs one):
    the job written to ``JOB_FILE`` in its run directory, then ``python -m cli.job FILE``.  ``popen``:
    :class:`subprocess.Popen`'s keyword arguments (where its output goes, a session of its own)."""
    os.makedirs(job.out_dir, exist_ok=True)
    path = os.path.join(job.out_dir, JOB_FILE)
    rundir.atomic_write(path, job.dumps() + "\n")
    return subprocess.Popen([sys.executable, *GUEST_ENTRY, path], **popen)


def run_apart(job: Job, log: str | None = None) -> int:
    """:func:`spawn` ``job`` and wait for it; its output (both streams) into the file ``log``, or nowhere
    (stdin closed: nothing it runs may wait on this terminal).  Returns its exit status."""
    with open(log or os.devnull, "wb") as out:
        return spawn(job, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT).wait()


def sweep_apart(spec: SweepSpec, out_dir: str, log: str | None = None, command: Sequence[str] = ()) -> int:
    """``spec`` swept into ``out_dir`` on the kernel chosen for it, in a process of its own and without a report
    (:func:`run_apart`): a benchmark's sweep, or a calibration's.  ``command``: the command line it stands for,
    for meta.json and the history.  Returns its exit status."""
    job = Job(SweepWork(spec), out_dir=os.path.abspath(out_dir), report=False, command=tuple(command),
              started_unix=time.time())
    return run_apart(job, log)

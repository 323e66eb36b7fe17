"""What several benchmarks share: the sweep command a benchmark's sweep stands for, the front door, and the
part of a benchmark that runs where the kernel under test is.

Not a benchmark (``ipsec-testbed bench`` lists the modules without a leading underscore).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence

from experiments import runner
from experiments.engine.plan import SweepSpec, default_sweep, fitting_probe_rate
from experiments.job import BenchWork, Job, KernelChoice
from testbed.capabilities import Needs

#: The sweep's options by the spec's field each sets (``ipsec-testbed sweep --help``), for :func:`sweep_command` ...
SWEEP_OPTIONS = {"topology": "--topology", "clients": "--clients", "mode": "--mode", "keying": "--keying",
                 "rates_mbit": "--rates", "sizes": "--sizes", "size_mode": "--size-mode", "ip_versions": "--ip",
                 "transports": "--transport", "udp_bitrate": "--udp-bitrate", "duration_s": "--duration",
                 "warmup_s": "--warmup", "precision_pct": "--precision", "cpu_precision_pct": "--cpu-precision",
                 "pmtu": "--pmtu", "mtu": "--mtu", "socket_buffer": "--socket-buffer", "probe_per_s": "--probe-rate",
                 "probe_tool": "--probe-tool", "arms": "--arms"}
#: ... which says these fields its own way.
_SAID_APART = {"profiles", "repetitions", "max_repetitions", "budget_s", "plain", "latency_probe"}


def sweep_command(spec: SweepSpec) -> tuple[str, ...]:
    """``ipsec-testbed sweep`` with the options that make ``spec`` of the default sweep: what a benchmark's sweep
    is, for people to read or run and for its meta.json (never parsed here).  ValueError for a spec no options
    make (``arm_filters``)."""
    default = default_sweep()
    words = ["ipsec-testbed", "sweep"]
    for field in dataclasses.fields(spec):
        value, usual = getattr(spec, field.name), getattr(default, field.name)
        if field.name == "probe_per_s":
            usual = fitting_probe_rate(spec.rates_mbit, spec.ip_versions)  # the default on the spec's links
        if value == usual or field.name in _SAID_APART:
            continue
        if field.name not in SWEEP_OPTIONS:
            raise ValueError(f"no option of ipsec-testbed sweep sets {field.name} (here {value!r})")
        words += [SWEEP_OPTIONS[field.name], _word(value)]
    ipsec = [p for p in spec.profiles if p != "none"]
    if ipsec != [p for p in default.profiles if p != "none"]:
        words += ["--profiles", ",".join(ipsec)]
    if (spec.repetitions, spec.max_repetitions) != (default.repetitions, default.max_repetitions):
        words += ["--repetitions", str(spec.repetitions)]  # given alone: exactly that many
        if spec.most_repetitions != spec.repetitions:
            words += ["--max-repetitions", str(spec.max_repetitions)]
    if spec.budget_s != default.budget_s:
        words += ["--budget", _word(spec.budget_s or 0.0)]
    if not spec.plain:
        words.append("--no-plain")
    if not spec.latency_probe:
        words.append("--no-latency-probe")
    return tuple(words)


def _word(value: object) -> str:
    """A spec's value as the sweep's option takes it: a list comma-separated, a number as short as it stays exact."""
    if isinstance(value, tuple):
        return ",".join(_word(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}" if float(f"{value:g}") == value else repr(value)
    return str(value)


def front_door() -> list[str]:
    """``ipsec-testbed`` as a person runs it (this Python's), for a benchmark that measures a whole command."""
    beside = os.path.join(os.path.dirname(sys.executable), "ipsec-testbed")
    return [beside] if os.access(beside, os.X_OK) else [shutil.which("ipsec-testbed") or "ipsec-testbed"]


def out_dir(out: str | None, name: str) -> str:
    """A benchmark's run directory: ``--out``, or ``runs/<date>-bench-NAME`` in the checkout (or here)."""
    return runner.out_dir_of(out, os.path.dirname(os.path.dirname(os.path.abspath(__file__))), f"bench-{name}")


def root_out_dir(name: str, out: str | None, needs_root_for: str) -> str:
    """A benchmark's run directory (:func:`out_dir`), made, once a missing root is refused in one line
    (``SystemExit(1)``)."""
    if os.geteuid() != 0:
        print(f"{name}: needs root ({needs_root_for}); run it with sudo", file=sys.stderr)
        raise SystemExit(1)
    path = out_dir(out, name)
    os.makedirs(path, exist_ok=True)
    return path


def bench_job(name: str, args: argparse.Namespace, kernel: KernelChoice, needs: Needs) -> Job:
    """A benchmark's :class:`~experiments.job.Job`: its parsed options ``args`` (JSON values) travel as they
    are; ``needs``: what its work needs of a kernel."""
    options = {k: v for k, v in vars(args).items() if k not in ("kernel", "uml_kernel", "uml_modules", "uml_mem",
                                                                  "no_speed_probe")}
    out = options.get("out")
    return Job(BenchWork(name, options, needs.capabilities), out_dir=out if out and os.path.isabs(out) else None,
               kernel=kernel, command=("ipsec-testbed", "bench", name, *sys.argv[1:]), started_unix=time.time())


def options_of(job: Job) -> argparse.Namespace:
    """The benchmark's options, as its parser made them, where its ``in_guest`` runs."""
    return argparse.Namespace(**job.work.options)


def run_here_or_there(job: Job, body: Callable[[argparse.Namespace], int]) -> int:
    """``body(options)`` on the kernel ``job``'s choice and needs select: in this process, or in a guest
    that runs the benchmark's ``in_guest(job)``, which calls ``body`` there."""
    prog = f"ipsec-testbed bench {job.work.name}"
    return runner.run(job, prog, lambda j: body(options_of(j)))


def run_beside_plain(name: str, args: argparse.Namespace, why: str | None, needs_root_for: str,
                     body: Callable[[argparse.Namespace], int]) -> int:
    """A benchmark of ``args.profiles`` beside plain: its bad options (``why``) and a missing root refused in
    one line each, plain put first, and ``body`` run where the kernel under test is (:func:`run_here_or_there`)."""
    from cli.options import kernel_choice
    from experiments import doctor

    if why:
        print(f"ipsec-testbed bench {name}: error: {why}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print(f"{name}: needs root ({needs_root_for}); run it with sudo", file=sys.stderr)
        return 1
    args.profiles = ["none", *[p for p in args.profiles if p != "none"]]
    args.out = out_dir(args.out, name)
    return run_here_or_there(bench_job(name, args, kernel_choice(args), doctor.needs(tuple(args.profiles))), body)


def profiles_and_rate_refusal(profiles: Sequence[str], rate_mbit: float) -> str | None:
    """Why ``--profiles`` or ``--rate`` cannot run, in one line, or None."""
    from ipsec.profiles import parse_profile
    from topologies.shaping import MAX_RATE_MBIT

    try:
        for name in profiles:
            parse_profile(name)
    except ValueError as e:
        return f"--profiles: {e}"
    if not 0 < rate_mbit <= MAX_RATE_MBIT:
        return f"--rate must be Mbit/s in (0, {MAX_RATE_MBIT:g}], not {rate_mbit:g}"
    return None

"""What several benchmarks share: a sweep made from the sweep's own words, run in a process of its own,
and the part of a benchmark that runs where the kernel under test is.

Not a benchmark (``ipsec-testbed bench`` lists the modules without a leading underscore).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence

from experiments import runner
from experiments.job import BenchWork, Job, KernelChoice
from testbed.capabilities import Needs


def sweep_job(words: Sequence[str], out_dir: str) -> Job:
    """The job ``ipsec-testbed sweep WORDS...`` runs, into ``out_dir`` and without a report: a benchmark
    that times or checks a sweep gives the words a person would."""
    from cli.sweep import build_parser, job_from

    words = list(words)
    return job_from(build_parser().parse_args([*words, "--out", out_dir, "--no-report"]), words)


def run_sweep(words: Sequence[str], out_dir: str, log: str | None = None) -> int:
    """:func:`sweep_job` run in a process of its own (its output into ``log``, or nowhere); its exit status."""
    return runner.run_apart(sweep_job(words, out_dir), log)


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

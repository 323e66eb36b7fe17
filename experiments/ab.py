"""Two kernels, one suite, interleaved: A/B comparisons for kernel developers.

Paired (:func:`paired_jobs`, :func:`run_paired`; what ``regress --ab`` does wherever two guests
fit in memory): both kernels up at once, in two guests on the same host CPU, taking turns
window by window in ABBA order (:mod:`experiments.engine.turns`), so that each of B's windows
has one of A's beside it in time and B/A is judged pair by pair.

In turn (:func:`plan_ab`, :func:`run_ab`; where two guests do not fit):

::

    round 1: A then B       run_dir/a  run_dir/b
    round 2: B then A       (each run measures only the repetitions its kernel still
    round 3: A then B        misses: the sweep's resume does the interleaving)

Each round boots each kernel once, in alternating order (ABBA), and measures its share of
the repetitions there (by default one: a round per repetition), so slow drifts of the
machine (thermal, other load) fall on both kernels alike.  A kernel
is a backend's name (``host``: the running kernel, ``uml``: the UML kernel chosen by default), a
UML kernel by its origin (``debian``: Debian's linux.uml, ``recipe``: the project's) or the path
of a kernel image a backend boots (a UML kernel built from a tree with ``make ARCH=um``).
The comparison itself is :mod:`analysis.regress`
with A as the baseline.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Sequence

from experiments import runner
from experiments.engine import turns
from experiments.job import Job
from ipsec.slowdown import filters_for


def _on(job: Job, kernel: str, out_dir: str, **spec_changes) -> Job:
    """``job`` (a sweep's) on ``kernel`` (:meth:`KernelChoice.named`) into ``out_dir``, its spec changed: a name
    is the counted backend's kernel when ``job`` runs there (``--kernel qemu``)."""
    kernel_choice = job.kernel.naming(kernel)
    spec = dataclasses.replace(job.work.spec, **spec_changes)
    return job.with_(work=dataclasses.replace(job.work, spec=spec), out_dir=out_dir, kernel=kernel_choice)


def plan_ab(job: Job, kernels: tuple[str, str], repetitions: int, rounds: int | None = None) -> list[tuple[str, Job]]:
    """The runs, in order: (label "a" or "b", the sweep's job into ``job.out_dir/LABEL``).  Pure but for
    kernel paths.

    ``job`` is the suite's sweep; ``rounds`` boots of each kernel (default: one per repetition), in
    ABBA order; round ``k`` measures the kernel's repetitions up to ``ceil(k * repetitions / rounds)``.
    """
    if repetitions < 2:
        raise ValueError("an A/B comparison needs at least 2 repetitions per kernel")
    rounds = repetitions if rounds is None else rounds
    if not 1 <= rounds <= repetitions:
        raise ValueError(f"rounds must be 1..{repetitions} (the repetitions), not {rounds}")
    runs = []
    for k in range(1, rounds + 1):
        upto = -(-k * repetitions // rounds)
        for label in ("a", "b") if k % 2 else ("b", "a"):
            runs.append((label, _on(job, kernels["ab".index(label)], os.path.join(job.out_dir, label),
                                    repetitions=upto, max_repetitions=upto)))
    return runs


def run_ab(job: Job, kernels: tuple[str, str], repetitions: int, sweep: Callable[[Job], int],
           say: Callable[[str], None] = lambda s: None, rounds: int | None = None) -> tuple[str, str]:
    """Measure the suite's sweep ``job`` on both kernels, interleaved, each run by ``sweep(job)`` (which
    returns its exit status); returns the two run directories."""
    runs = plan_ab(job, kernels, repetitions, rounds)
    for n, (label, side) in enumerate(runs, 1):
        say(f"A/B run {n} of {len(runs)}: kernel {label.upper()} ({kernels['ab'.index(label)]}), "
            f"round {(n + 1) // 2}, repetitions up to {side.work.spec.repetitions}")
        rc = sweep(side)
        if rc != 0:
            raise RuntimeError(f"the sweep on kernel {label.upper()} failed (exit {rc}); its run directory "
                               f"{side.out_dir} keeps what was measured")
    return os.path.join(job.out_dir, "a"), os.path.join(job.out_dir, "b")


def paired_jobs(job: Job, kernels: tuple[str, str], repetitions: int, cpu: int | None,
                arms: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())) -> dict[str, Job]:
    """The two sweeps of a paired A/B (pure but for kernel paths): label -> the suite's sweep ``job`` on
    that kernel, into ``job.out_dir/LABEL``.  Each measures exactly ``repetitions`` windows per point
    (no adaptive extras: the windows must pair up one to one), takes its turns in
    ``job.out_dir/turns``, and runs pinned to host CPU ``cpu``, the same for both; ``arms[i]``: side i's
    arms (``(N,)``: N extra instructions per ESP packet)."""
    if repetitions < 2:
        raise ValueError("an A/B comparison needs at least 2 repetitions per kernel")
    turns_dir = os.path.join(job.out_dir, "turns")
    out = {}
    for (label, kernel), side_arms in zip(zip("ab", kernels, strict=True), arms, strict=True):
        side = _on(job, kernel, os.path.join(job.out_dir, label), repetitions=repetitions,
                   max_repetitions=repetitions, arms=tuple(side_arms),
                   arm_filters=filters_for([n for side in arms for n in side]))  # one chain on both sides
        # counted windows do not depend on what else the machine does: the two sides run at once, each at its own
        # pace, and pair up by their order (the n-th window of each); no turn, no shared CPU
        if side.kernel.counted:
            out[label] = side
            continue
        out[label] = side.with_(work=dataclasses.replace(side.work, turns=os.path.join(turns_dir, label)),
                                kernel=side.kernel.with_(host_cpu=cpu))
    return out


def run_paired(jobs: dict[str, Job], out_dir: str, say: Callable[[str], None] = lambda s: None,
               timeout_s: float = 600.0) -> tuple[str, str]:
    """Both sweeps at once, each a process of its own (:func:`experiments.runner.spawn`; its output in
    ``out_dir/LABEL.log``), their windows handed out by :func:`experiments.engine.turns.take_turns`; the
    two run directories.

    Raises RuntimeError naming the side that failed, with the end of its log.
    """
    for label in "ab":
        if os.path.exists(os.path.join(out_dir, label, "results.jsonl")):
            raise RuntimeError(f"{os.path.join(out_dir, label)} holds results already: a paired A/B measures both "
                               "sides together from the start; give another --out")
    turns_dir = os.path.join(out_dir, "turns")
    shutil.rmtree(turns_dir, ignore_errors=True)
    os.makedirs(turns_dir)
    procs: dict[str, subprocess.Popen] = {}
    logs = {label: os.path.join(out_dir, f"{label}.log") for label in "ab"}
    try:
        for label, job in jobs.items():
            with open(logs[label], "wb") as log:
                procs[label] = runner.spawn(job, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        say(f"both kernels booting; their output in {logs['a']} and {logs['b']}")
        paired = None  # counted sides take no turns
        if any(job.work.turns for job in jobs.values()):
            paired = turns.take_turns(turns_dir, lambda label: procs[label].poll() is None, say, timeout_s)
        for proc in procs.values():
            proc.wait()
    finally:
        for proc in procs.values():
            if proc.poll() is None:  # interrupted, or a side hung: end its guest, which ends the rest
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
    for label, proc in procs.items():
        if proc.returncode != 0:
            with open(logs[label], errors="replace") as f:
                tail = f.read()[-1500:].strip()
            raise RuntimeError(f"the sweep on kernel {label.upper()} failed (exit {proc.returncode}); the end of "
                               f"{logs[label]}:\n{tail}")
    say(f"{paired} windows measured on both kernels, each beside the other's" if paired is not None else
        "both kernels measured, each at its own pace")
    return os.path.join(out_dir, "a"), os.path.join(out_dir, "b")


def as_arms(records_a: Sequence, records_b: Sequence) -> list:
    """Both sides' records as the arms a and b of one run (:func:`analysis.regress.compare_arms`)."""
    return [dataclasses.replace(r, arm=label) for label, records in (("a", records_a), ("b", records_b))
            for r in records]

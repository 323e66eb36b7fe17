"""Two kernels, one suite, interleaved: A/B comparisons for kernel developers.

Paired (:func:`paired_argv`, :func:`run_paired`; what ``regress --ab`` does wherever two guests
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

from experiments.catalogue.suites import sweep_argv, sweep_process
from experiments.engine import turns
from testbed import backends, umlkernel


def kernel_options(kernel: str) -> list[str]:
    """``ipsec-testbed sweep``'s options that select ``kernel``: a backend's name, a UML kernel named
    by its origin (``debian``, ``recipe``: :mod:`testbed.umlkernel`), or a kernel image a backend
    boots (the path of a UML kernel built with ``make ARCH=um``)."""
    if kernel in backends.names():
        return ["--kernel", kernel]
    if kernel in umlkernel.NAMED:
        return ["--kernel", backends.UmlBackend.name, "--uml-kernel", kernel]
    backend = backends.booting(kernel)
    return ["--kernel", backend.name, "--uml-kernel", os.path.abspath(kernel)]


def plan_ab(sweep_args: Sequence[str], kernels: tuple[str, str], repetitions: int, out_dir: str,
            rounds: int | None = None) -> list[tuple[str, list[str]]]:
    """The runs, in order: (label "a" or "b", the sweep's arguments).  Pure.

    ``rounds`` boots of each kernel (default: one per repetition), in ABBA order; round ``k``
    measures the kernel's repetitions up to ``ceil(k * repetitions / rounds)``.
    """
    if repetitions < 2:
        raise ValueError("an A/B comparison needs at least 2 repetitions per kernel")
    rounds = repetitions if rounds is None else rounds
    if not 1 <= rounds <= repetitions:
        raise ValueError(f"rounds must be 1..{repetitions} (the repetitions), not {rounds}")
    options = {label: kernel_options(k) for label, k in zip("ab", kernels, strict=True)}
    runs = []
    for k in range(1, rounds + 1):
        upto = -(-k * repetitions // rounds)
        for label in ("a", "b") if k % 2 else ("b", "a"):
            runs.append((label, sweep_argv(sweep_args, os.path.join(out_dir, label), options[label],
                                              "--repetitions", str(upto), "--max-repetitions", str(upto))))
    return runs


def run_ab(sweep_args: Sequence[str], kernels: tuple[str, str], repetitions: int, out_dir: str,
           sweep: Callable[[list[str]], int], say: Callable[[str], None] = lambda s: None,
           rounds: int | None = None) -> tuple[str, str]:
    """Measure the suite on both kernels, interleaved, each run by ``sweep(argv)`` (``ipsec-testbed
    sweep``'s main, which returns its exit status); returns the two run directories."""
    runs = plan_ab(sweep_args, kernels, repetitions, out_dir, rounds)
    for n, (label, cmd) in enumerate(runs, 1):
        upto = cmd[cmd.index("--repetitions") + 1]
        say(f"A/B run {n} of {len(runs)}: kernel {label.upper()} ({kernels['ab'.index(label)]}), "
            f"round {(n + 1) // 2}, repetitions up to {upto}")
        rc = sweep(cmd)
        if rc != 0:
            raise RuntimeError(f"the sweep on kernel {label.upper()} failed (exit {rc}); its run directory "
                               f"{os.path.join(out_dir, label)} keeps what was measured")
    return os.path.join(out_dir, "a"), os.path.join(out_dir, "b")


def paired_argv(sweep_args: Sequence[str], kernels: tuple[str, str], repetitions: int, out_dir: str,
                cpu: int | None, extra: Sequence[Sequence[str]] = ((), ())) -> dict[str, list[str]]:
    """The two sweeps of a paired A/B (pure but for kernel paths): label -> ``ipsec-testbed sweep``'s
    arguments.  Each measures exactly ``repetitions`` windows per point (no adaptive extras: the
    windows must pair up one to one), takes its turns in ``out_dir/turns``, and runs pinned to
    host CPU ``cpu``, the same for both; ``extra[i]``: more options for side i (``--arms N``)."""
    if repetitions < 2:
        raise ValueError("an A/B comparison needs at least 2 repetitions per kernel")
    turns_dir = os.path.join(out_dir, "turns")
    out = {}
    for (label, kernel), more in zip(zip("ab", kernels, strict=True), extra, strict=True):
        out[label] = sweep_argv(sweep_args, os.path.join(out_dir, label), kernel_options(kernel),
                                "--repetitions", str(repetitions), "--max-repetitions", str(repetitions),
                                "--turns", os.path.join(turns_dir, label),
                                *(["--host-cpu", str(cpu)] if cpu is not None else []), *more)
    return out


def run_paired(argvs: dict[str, list[str]], out_dir: str, say: Callable[[str], None] = lambda s: None,
               timeout_s: float = 600.0) -> tuple[str, str]:
    """Both sweeps at once, each a process of its own (its output in ``out_dir/LABEL.log``), their
    windows handed out by :func:`experiments.engine.turns.take_turns`; the two run directories.

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
        for label, argv in argvs.items():
            with open(logs[label], "wb") as log:
                procs[label] = subprocess.Popen(sweep_process(argv), stdin=subprocess.DEVNULL, stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True)
        say(f"both kernels booting; their output in {logs['a']} and {logs['b']}")
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
    say(f"{paired} windows measured on both kernels, each beside the other's")
    return os.path.join(out_dir, "a"), os.path.join(out_dir, "b")


def as_arms(records_a: Sequence, records_b: Sequence) -> list:
    """Both sides' records as the arms a and b of one run (:func:`analysis.regress.compare_arms`)."""
    return [dataclasses.replace(r, arm=label) for label, records in (("a", records_a), ("b", records_b))
            for r in records]

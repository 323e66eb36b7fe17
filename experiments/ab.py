"""Two kernels, one suite, interleaved: A/B comparisons for kernel developers.

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

import os
from collections.abc import Callable, Sequence

from experiments.catalogue.suites import sweep_argv
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

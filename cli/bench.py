"""``ipsec-testbed bench NAME``: the project's benchmarks, the scripts that print its speed and accuracy figures.

Each benchmark is a module of ``benchmarks/`` with a ``main(argv)``; this command lists them
and runs one in this process (a benchmark whose work runs where the kernel under test is also has an
``in_guest(job)``: :mod:`cli.job`).
"""
from __future__ import annotations

import ast
import importlib
import os
import sys
from collections.abc import Sequence

from testbed import measuring
from testbed.errors import Refused, fail

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")


def names() -> list[str]:
    return sorted(f[:-3] for f in os.listdir(HERE) if f.endswith(".py") and not f.startswith("_"))


def summary(name: str) -> str:
    """The first line of a benchmark's docstring, read without importing it."""
    with open(os.path.join(HERE, f"{name}.py")) as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    return doc.splitlines()[0] if doc else ""


def usage() -> str:
    lines = ["usage: ipsec-testbed bench NAME [OPTIONS]", "",
             "Run one of the project's benchmarks: each prints figures (speed, accuracy, noise) with what they",
             "were measured on. `ipsec-testbed bench NAME --help` says what NAME measures and how long it takes.",
             "Most need root. Current figures: docs/figures.md; every dated run: docs/log/measurements.md.", "",
             "benchmarks:"]
    lines += [f"  {n:22s} {summary(n)}" for n in names()]
    lines += ["", "Every benchmark also takes --allow-concurrent: measure even while another testbed run measures on",
              "this machine (refused otherwise, naming it).", "",
              "examples:", "  sudo ipsec-testbed bench shaping_accuracy --kernel uml",
              "  sudo ipsec-testbed bench sweep_precision"]
    return "\n".join(lines) + "\n"


def load(name: str):
    """The benchmark module ``name``."""
    return importlib.import_module(f"benchmarks.{name}")


def main(argv: Sequence[str]) -> int:
    """``argv``: NAME, then that benchmark's options."""
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), end="", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    name = argv[0]
    if name not in names():
        return fail("ipsec-testbed bench", f"error: unknown benchmark {name!r}; benchmarks: {', '.join(names())}", 2)
    module = load(name)
    rest = argv[1:]
    concurrent = "--allow-concurrent" in rest  # every benchmark takes it: measured beside another run
    rest = [a for a in rest if a != "--allow-concurrent"]
    saved = sys.argv[0]
    sys.argv[0] = f"ipsec-testbed bench {name}"  # what the benchmark's --help and errors call it
    try:
        if "-h" in rest or "--help" in rest:
            return module.main(rest) or 0
        with measuring.exclusive(("ipsec-testbed", "bench", *argv), None, concurrent):
            return module.main(rest) or 0
    except Refused as e:
        return fail(f"ipsec-testbed bench {name}", str(e), 1)
    finally:
        sys.argv[0] = saved

"""``ipsec-testbed reproduce SEED``: one seed's experiment, measured and judged against the paper.

The seeds' experiments are data (:mod:`experiments.catalogue`); the engine that measures them
and the options every seed shares are :mod:`experiments.reproduce`'s.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence

from experiments.catalogue import reproduction, reproductions
from experiments.reproduce import main as reproduce
from testbed.errors import fail


def usage() -> str:
    lines = ["usage: ipsec-testbed reproduce SEED [OPTIONS]", "",
             "Reproduce a seed's published experiment: measure its parts into one run directory, then judge",
             "the seed's claims against the measurement (holds / fails / not testable here) in report.html.",
             "Each seed has options of its own: `ipsec-testbed reproduce SEED --help`.", "", "seeds:"]
    for r in reproductions():
        lines.append(f"  {r.seed}  {r.doc.strip().splitlines()[0].removeprefix(f'Seed {r.seed}: ')}")
    lines += ["", "examples:", "  sudo ipsec-testbed reproduce 003 --dry-run     # the parts, their points and time",
              "  sudo ipsec-testbed reproduce 003               # measure, then report.html with the verdicts",
              "  ipsec-testbed report runs/<date>-seed003       # the verdicts again, from the run directory"]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    """``argv``: SEED, then that seed's options."""
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), end="", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    try:
        repro = reproduction(argv[0])
    except ValueError as e:
        return fail("ipsec-testbed reproduce", f"error: {e}", 2)
    return reproduce(repro, argv[1:])

"""The documentation pages generated from the code (``docs/cli.md``, ``docs/records.md``): written, or checked.

Each generator is a module with ``render()`` and a ``main`` that hands both to :func:`main`;
a unit test of each compares its page with ``render()``, so a page cannot drift from the code.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from testbed.rundir import atomic_write

REPO = Path(__file__).resolve().parents[1]


def main(module: str, page: Path, render: Callable[[], str], source: str, argv: Sequence[str] | None = None) -> int:
    """``python -m MODULE [--check]``: write ``page`` from ``render()``, or say whether it is current
    (exit 1 when not); ``source`` names what the page is generated from."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=f"Write {page.relative_to(REPO)} from "
                                f"{source}.")
    p.add_argument("--check", action="store_true", help=f"only check that {page.relative_to(REPO)} is current")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        if not page.exists() or page.read_text() != text:
            print(f"{page.relative_to(REPO)} is not what {source} says: run `python -m {module}`",
                  file=sys.stderr)
            return 1
        return 0
    atomic_write(page, text)
    print(f"wrote {page.relative_to(REPO)}")
    return 0

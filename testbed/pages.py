"""The documentation pages generated from the code (``docs/cli.md``, ``docs/records.md``, ``docs/meta.md``):
written, or checked.

Each generator is a module with a ``render()`` per page and a ``main`` that hands them to :func:`main`
(or :func:`main_pages`); a unit test of each compares its pages with their ``render()``, so a page cannot
drift from the code.
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
    return main_pages(module, [(page, render)], source, argv)


def main_pages(module: str, renders: Sequence[tuple[Path, Callable[[], str]]], source: str,
               argv: Sequence[str] | None = None) -> int:
    """:func:`main` for a generator of several pages: each ``(page, render)`` written, or checked
    (exit 1 when one is not current)."""
    names = " and ".join(str(page.relative_to(REPO)) for page, _ in renders)
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=f"Write {names} from {source}.")
    verb = "is" if len(renders) == 1 else "are"
    p.add_argument("--check", action="store_true", help=f"only check that {names} {verb} current")
    args = p.parse_args(argv)
    stale = 0
    for page, render in renders:
        text = render()
        if args.check:
            if not page.exists() or page.read_text() != text:
                print(f"{page.relative_to(REPO)} is not what {source} says: run `python -m {module}`",
                      file=sys.stderr)
                stale = 1
            continue
        atomic_write(page, text)
        print(f"wrote {page.relative_to(REPO)}")
    return stale

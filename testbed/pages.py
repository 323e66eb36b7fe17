"""The documentation pages generated from the code (``docs/cli.md``, ``docs/records.md``, ``docs/meta.md``).

Each page has a ``render()`` beside what it describes (:mod:`cli.reference`, :mod:`testbed.recordpage`);
``python -m cli.pages`` writes them all, ``--check`` says which are stale, and a unit test of each
compares its page with its ``render()``, so a page cannot drift from the code.
"""
from __future__ import annotations

from pathlib import Path

from testbed.rundir import atomic_write

REPO = Path(__file__).resolve().parents[1]
#: How the pages are written again, for the messages that say a page is stale.
COMMAND = "python -m cli.pages"


def is_current(page: Path, text: str) -> bool:
    return page.exists() and page.read_text() == text


def write(page: Path, text: str) -> None:
    atomic_write(page, text)

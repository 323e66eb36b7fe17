"""``python -m cli.pages [--check]``: write every documentation page generated from the code, or check them.

    docs/cli.md       every command's --help (cli.reference)
    docs/records.md   the result record (testbed.recordpage, from testbed/record.py)
    docs/meta.md      meta.json (testbed.recordpage, from testbed/record.py)

For developers: the unit tests fail when a page and the code disagree, and say to run this.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from testbed import pages


def generated() -> list[tuple[Path, Callable[[], str], str]]:
    """(page, render, what it is generated from) for every generated page."""
    from cli import reference
    from testbed import recordpage

    return [(reference.PAGE, reference.render, "the parsers"),
            (recordpage.PAGE, recordpage.render, "testbed/record.py"),
            (recordpage.META_PAGE, recordpage.render_meta, "testbed/record.py")]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"python -m {__name__}", description="Write the documentation pages "
                                "generated from the code (docs/cli.md, docs/records.md, docs/meta.md).")
    p.add_argument("--check", action="store_true", help="only check that they are current (exit 1 when not)")
    args = p.parse_args(argv)
    stale = 0
    for page, render, source in generated():
        text = render()
        name = page.relative_to(pages.REPO)
        if args.check:
            if not pages.is_current(page, text):
                print(f"{name} is not what {source} says: run `{pages.COMMAND}`", file=sys.stderr)
                stale = 1
            continue
        pages.write(page, text)
        print(f"wrote {name}")
    return stale


if __name__ == "__main__":
    sys.exit(main())

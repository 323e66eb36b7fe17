"""docs/cli.md: every command's ``--help``, generated from their parsers.

    .venv/bin/python -m cli.pages            # write docs/cli.md (and the other generated pages)
    .venv/bin/python -m cli.pages --check    # exit 1 if one is not what the code says

The reference is the parsers' own help, so it cannot say what they do not accept;
``tests/unit/test_cli_reference.py`` fails when a parser changed and the page was not
regenerated.  The help is laid out for a fixed width, whatever the terminal's.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from cli import bench, reproduce
from cli.main import build_parser
from cli.report import build_parser as report_parser
from cli.reproduce import build_parser as seed_parser
from cli.sweep import build_parser as sweep_parser
from experiments.catalogue import reproductions

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "cli.md"
WIDTH = 100


@contextlib.contextmanager
def _width(columns: int) -> Iterator[None]:
    """argparse lays out help for $COLUMNS."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(columns)
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def sections() -> list[tuple[str, str]]:
    """(title, help text) of the ``ipsec-testbed`` command, each of its subcommands, each seed and benchmark."""
    out = []
    with _width(WIDTH):
        main = build_parser()
        main.prog = "ipsec-testbed"
        out.append(("ipsec-testbed", main.format_help()))
        for action in main._subparsers._group_actions:  # argparse keeps its subcommands here
            for name, sub in action.choices.items():
                if name == "report":  # listed here, parsed by cli.report
                    sub = report_parser()
                elif name == "sweep":
                    sub = sweep_parser()
                if name == "reproduce":
                    out.append(("ipsec-testbed reproduce", reproduce.usage()))
                    out += [(r.prog, seed_parser(r).format_help()) for r in reproductions()]
                elif name == "bench":  # their parsers are built when they run: their summaries here
                    out.append(("ipsec-testbed bench", bench.usage()))
                else:
                    sub.prog = f"ipsec-testbed {name}"
                    out.append((f"ipsec-testbed {name}", sub.format_help()))
                    for verbs in (sub._subparsers._group_actions if sub._subparsers else ()):
                        for verb, parser in verbs.choices.items():  # `ipsec-testbed kernel build` ...
                            parser.prog = f"ipsec-testbed {name} {verb}"
                            out.append((parser.prog, parser.format_help()))
    return out


def render() -> str:
    helps = sections()
    parts = ["# Command reference", "",
             "Every command's `--help`, generated from their parsers by `python -m cli.pages` (a unit test",
             "fails when this page and the parsers disagree). The scripts `experiments/packet_size_sweep.py` and",
             "`experiments/seed00N_*.py` are the same as `ipsec-testbed sweep` and `ipsec-testbed reproduce N`.", ""]
    parts += [f"- [`{title}`](#{_anchor(title)})" for title, _ in helps]
    for title, text in helps:
        parts += ["", f"## {title}", "", "```text", text.rstrip(), "```"]
    return "\n".join(parts) + "\n"


def _anchor(title: str) -> str:
    return "".join(c for c in title.lower().replace(" ", "-") if c.isalnum() or c in "-_")

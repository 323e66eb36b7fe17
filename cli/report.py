"""The ``report`` command: turn run directories into report.html and a table on the terminal.

    ipsec-testbed report RUN_DIR                 # writes RUN_DIR/report.html, prints the table
    ipsec-testbed report RUN_DIR OTHER_RUN...    # the first run's report plus a comparison
    ipsec-testbed report RUN_DIR --out FILE      # the page somewhere else
    ipsec-testbed report SEED_RUN [--markdown F] # a seed reproduction: published numbers, claims judged

:func:`main` parses the command line (``ipsec-testbed`` hands it the words from ``report`` on);
:func:`render` does the work, and is what a job that measured calls on the host once it is done.
The analysis modules compute and render; this is the one place that writes their files or prints them.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from analysis.run import RunData
from cli.options import Parser
from testbed.rundir import ResultsError, atomic_write, read_meta

log = logging.getLogger("ipsec-testbed.report")

EPILOG = """\
examples:
  ipsec-testbed report runs/20261122-0640            # report.html in the run directory
  ipsec-testbed report runs/host-run runs/uml-run    # compare two kernels point by point
  ipsec-testbed report runs/x --out /tmp/x.html
  ipsec-testbed report runs/repro/seed003            # a reproduction: claims, published numbers, ratios
  ipsec-testbed report runs/seed003-uml runs/seed003-host   # the same claims judged on two runs

Needs no root: it only reads results.jsonl and meta.json.
"""


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="ipsec-testbed report",
        description="Aggregate a sweep's results (means, 95 % confidence intervals, IPsec/plain ratios),\n"
                    "write a self-contained HTML report and print the table. For a seed reproduction's run\n"
                    "(experiments/seed00N_*.py): the seed's published numbers and claims next to this run's,\n"
                    "each claim judged from the data, in report.html and comparison.json.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                   help="run directories (each with results.jsonl and meta.json); with several, the report "
                        "of the first one also compares them all")
    p.add_argument("--out", metavar="FILE", type=Path,
                   help="where to write the HTML (default: report.html in the first RUN_DIR)")
    p.add_argument("--no-html", action="store_true", help="print the table only, write nothing")
    p.add_argument("--markdown", metavar="FILE", type=Path,
                   help="for a seed reproduction run: also write its claims and tables as Markdown")
    p.add_argument("-v", "--verbose", action="store_true", help="log what is being read")
    return p


def _labels(runs: Sequence[RunData]) -> list[str]:
    """Runs labelled by backend and kernel; the directory name added where two would read the same."""
    counts = Counter(r.label for r in runs)
    return [f"{r.label} ({Path(r.run_dir).name})" if counts[r.label] > 1 else r.label for r in runs]


def main(argv: Sequence[str]) -> int:
    """``ipsec-testbed report ARGV...`` (``argv`` with or without the word ``report`` first)."""
    argv = list(argv)
    args = build_parser().parse_args(argv[1:] if argv[:1] == ["report"] else argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    return render(args.run_dirs, out=args.out, html=not args.no_html, markdown=args.markdown)


def render(run_dirs: Sequence[str], out: Path | None = None, html: bool = True, markdown: Path | None = None) -> int:
    """Print the tables of ``run_dirs`` (the first one's, compared with the others) and write the first
    one's report.html (or ``out``; nothing with ``html`` False; ``markdown``: a reproduction's claims
    and tables as Markdown too); returns the exit status."""
    # imported here so that --help does not wait for plotly
    from rich.console import Console
    from rich.measure import Measurement

    from analysis.page import foreign_load_text, render_html
    from analysis.tables import compare_table, terminal_table

    console = Console()
    if is_reproduction(run_dirs[0]):
        return _reproduction_report(run_dirs, out, html, markdown)
    runs = []
    for run_dir in run_dirs:
        if not Path(run_dir).is_dir():
            print(f"ipsec-testbed report: {run_dir}: not a directory", file=sys.stderr)
            return 1
        try:
            run = RunData.from_dir(run_dir)
        except ResultsError as e:
            print(f"ipsec-testbed report: {e}", file=sys.stderr)
            return 1
        if not run.aggregates:
            print(f"ipsec-testbed report: {run_dir}: no measured points in results.jsonl", file=sys.stderr)
            return 1
        runs.append(run)
    runs = [dataclasses.replace(r, label=label) for r, label in zip(runs, _labels(runs), strict=True)]

    first = runs[0]
    tables = [terminal_table(first.aggregates, first.ratios,
                             title=f"{first.run_dir}: {first.label} — goodput per point "
                                   "(mean of repetitions, 95 % CI)")]
    if len(runs) > 1:
        tables.append(compare_table(runs))
    for table in tables:
        # never crop a column: on a narrow terminal (or a pipe, 80 columns) let the lines run long
        needed = Measurement.get(console, console.options, table).minimum
        console.print(table, width=max(console.width, needed), crop=False)
    foreign = foreign_load_text(first.records)
    if foreign:
        print(f"warning: {foreign}", file=sys.stderr)
    if not html:
        return 0
    out = out or Path(first.run_dir) / "report.html"
    page = render_html(first.records, first.meta, compare=runs if len(runs) > 1 else ())
    try:  # a crash never leaves half a report where a whole one was
        atomic_write(out, page)
    except OSError as e:
        print(f"ipsec-testbed report: cannot write {out}: {e.strerror}", file=sys.stderr)
        return 1
    print(f"report: {out} ({len(page) / 1e6:.1f} MB, opens offline)", file=sys.stderr)
    return 0


def is_reproduction(run_dir: str) -> bool:
    """Whether ``run_dir`` is a seed reproduction's (its meta.json names the seed and parts).

    Quietly False otherwise."""
    return read_meta(run_dir).is_reproduction  # else the sweep path says what is wrong with the directory


def _reproduction_report(run_dirs: Sequence[str], out: Path | None, html: bool, markdown: Path | None) -> int:
    """A seed reproduction's run (experiments/seed00N_*.py): its comparison report; with several, their claims."""
    from analysis import reproduction, reproduction_report

    datas = []
    for run_dir in run_dirs:
        if not is_reproduction(run_dir):
            print(f"ipsec-testbed report: {run_dir}: not a seed reproduction run (cannot compare it with "
                  f"{run_dirs[0]})", file=sys.stderr)
            return 1
        try:
            datas.append(reproduction.evaluate(run_dir))
        except (reproduction.ReproductionError, ValueError) as e:
            print(f"ipsec-testbed report: {e}", file=sys.stderr)
            return 1
    reproduction_report.print_summary(run_dirs[0], datas[0])
    if markdown:
        text = reproduction_report.markdown(datas[0])
        if len(datas) > 1:
            text += "\n" + reproduction_report.markdown_compared(run_dirs, datas)
        markdown.write_text(text, encoding="utf-8")  # a path of the user's (/dev/stdout too): not renamed over
    if len(datas) > 1:
        reproduction_report.print_claims_compared(run_dirs, datas)
    if not html:
        return 0
    out = out or Path(run_dirs[0]) / "report.html"
    try:
        reproduction_report.write_report(run_dirs[0], out=str(out), compare=list(zip(run_dirs, datas, strict=True)),
                                         data=datas[0])
    except OSError as e:
        print(f"ipsec-testbed report: cannot write {out}: {e.strerror}", file=sys.stderr)
        return 1
    print(f"report: {out} (and comparison.json beside the run's results)", file=sys.stderr)
    return 0


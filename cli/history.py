"""``ipsec-testbed history``: every run's figures across kernels, runs and runners, with their change points."""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

from testbed import historyplace as place

#: What --metric takes (analysis.regress.METRICS, named here so that --help needs no analysis import).
METRIC_NAMES = ("goodput_mbps", "cpu_s_per_gb", "cpu_us_per_packet", "instructions_per_packet", "instructions_per_byte")
KINDS = ("sweep", "regress", "bisect", "reproduce", "bench")

PROG = "ipsec-testbed history"
DESCRIPTION = """\
Every sweep, regress run (each arm, each --bisect step) and reproduction adds its figures to a results
history: per point and metric, the run's mean with its 95 % interval, on which kernel (name, version, git
commit, the recipe's build), backend and clock, machine, testbed commit and date. This command shows it:
a table per series (one point's metric on one clock) with its kernels in order (by version, then by place in
their git history, then by first run) and the change points that FD.io CSIT's jumpavg finds among them,
labelled regression or progression with their size.

Counted figures (--kernel qemu: instructions) are the same on every machine, so rows from many runners make
one history; timed ones (CPU time in UML) are comparable only on one machine, and a chart never mixes the two.
"""
EPILOG = f"""\
examples:
  ipsec-testbed history                                   # the table, from your own history
  ipsec-testbed history --page history.html               # the page: each series, change points, click a run
  ipsec-testbed history --check                           # exit 1 when last night's kernels start a regression
  ipsec-testbed history --kcidb results.json              # KernelCI's format (kcidb-submit sends it)
  ipsec-testbed history --history ci.sqlite --merge cell-*.sqlite    # a CI's cells into one history
  ipsec-testbed history --history postgresql://ci@db/ipsec --check   # a team's shared history

The history: --history, else ${place.ENV}, else {place.default_path()}.
exit status: 0; 1 with --check when a kernel of the last night starts a regression group; 2 on bad input
"""


def add_parser(sub) -> None:
    p = sub.add_parser("history", help="every run's figures across kernels and runners; change points; "
                       "the nightly gate (--check); KernelCI's format (--kcidb)",
                       description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--history", metavar="PATH|URL", help=f"the history to read (and --merge into): an SQLite file or "
                   f"a postgresql:// URL (default: ${place.ENV}, else {place.default_path()})")
    p.add_argument("--clock", choices=("instructions", "time"), help="only figures on this clock")
    p.add_argument("--metric", choices=METRIC_NAMES, help="only this metric")
    p.add_argument("--point", metavar="TEXT", help="only points whose name contains TEXT")
    p.add_argument("--kind", choices=KINDS, help="only rows of this kind of run")
    p.add_argument("--page", metavar="FILE", help="write the history page (self-contained HTML) to FILE")
    p.add_argument("--check", action="store_true", help="the nightly gate: exit 1 when a kernel first measured "
                   "since --since starts a regression group in any series")
    p.add_argument("--since", metavar="DATE", help="with --check: the kernels it gates, by their first run's date "
                   "(ISO 8601, UTC; default: 20 h before the newest run, the last night's)")
    p.add_argument("--kcidb", metavar="FILE", help="write the rows as KernelCI's KCIDB JSON, checked by kcidb-io")
    p.add_argument("--origin", default="ipsec_testbed", help="the KCIDB origin (the name KernelCI gave you; "
                   "default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the series, their kernels, runs and change points as "
                   "JSON instead of the tables (with --check: the kernels it gated and the regressions too)")
    p.add_argument("--merge", nargs="+", metavar="STORE", help="first add the rows of these histories (SQLite files "
                   "or URLs; runs already here are skipped): a CI's matrix cells into one")
    p.add_argument("--add", nargs="+", metavar="RUN_DIR", help="first add the figures of these run directories "
                   "(runs made with --history off, or before there was a history)")
    p.add_argument("--kernel-name", metavar="NAME", help="with --add: the name of the kernel they ran (default: "
                   "what their meta.json says)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from analysis import history as hist
    from analysis import store as st

    try:
        return _run(args)
    except (st.StoreError, hist.HistoryError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from analysis import history as hist
    from analysis import store as st

    if place.location(args.history) is None:
        raise hist.HistoryError(f"the history is off (--history or ${place.ENV} is {place.OFF}): name one to read")
    writing = bool(args.merge or args.add)
    store = st.open_store(args.history, create=writing)
    with store:
        if args.add:
            for run_dir in args.add:
                if not os.path.isdir(run_dir):
                    raise hist.HistoryError(f"--add {run_dir}: no such run directory")
                n = store.keep(hist.rows_of_run(run_dir, "sweep", args.kernel_name))
                print(f"{run_dir}: {n} figures added", file=sys.stderr)
        for other in args.merge or ():
            with st.open_store(other, create=False) as source:
                n = store.merge(source.rows())
            print(f"{place.describe(other)}: {n} figures of new runs merged", file=sys.stderr)
        rows = store.rows(clock=args.clock, metric=args.metric, kind=args.kind)
        where = place.describe(store.where)
    if args.point:
        rows = [r for r in rows if args.point in r.point]
    if not rows:
        print(f"{PROG}: no figures in {where}{' match' if args.clock or args.metric or args.point else ''} "
              "(sweeps, regress runs and reproductions add theirs)", file=sys.stderr)
        return 1 if args.check else 0
    if args.page or args.metric:
        hist.one_clock(rows)
    series = hist.series_of(rows)  # (once: jumpavg's classification of every series is the work)
    if not args.json:
        print_table(rows, where, series)
    if args.page:
        from analysis import historypage

        print(f"page: {historypage.write(rows, args.page, where, series)}")
    if args.kcidb:
        from analysis import kcidb

        document = kcidb.write(rows, args.kcidb, args.origin)
        print(f"KCIDB: {args.kcidb} ({len(document['checkouts'])} checkouts, {len(document['builds'])} builds, "
              f"{len(document['tests'])} tests; valid by kcidb-io's schema {document['version']['major']}."
              f"{document['version']['minor']})")
    since = args.since or hist.since_default(rows)
    new, alarms = hist.check(rows, since, series)
    if args.json:
        print(json.dumps({"history": where, "series": [series_json(s) for s in series],
                          **({"check": {"since": since, "kernels": new, "regressions": [
                              {"series": a.series.name, "kernel": a.kernel, "change": a.group.change}
                              for a in alarms]}} if args.check else {})}, indent=1))
        return 1 if args.check and alarms else 0
    if args.check:
        for a in alarms:
            print(f"REGRESSION: {a.line()}")
        names = ", ".join(short(k) for k in new) or "none"
        print(f"check: {len(new)} kernel(s) first measured since {since} ({names}): "
              + (f"{len(alarms)} regression(s) start at them" if alarms else "no regression starts at them"))
        return 1 if alarms else 0
    return 0


def series_json(s) -> dict:
    return {"name": s.name, "clock": s.clock, "backend": s.backend, "machine": s.machine, "point": s.point,
            "arm": s.arm, "metric": s.metric,
            "kernels": [{"kernel": k, "runs": list(r)} for k, r in zip(s.kernels, s.runs, strict=True)],
            "groups": [{"kernels": list(g.kernels), "mean": g.mean, "stdev": g.stdev, "label": g.label,
                        "change": g.change} for g in s.groups]}


def short(kernel: str) -> str:
    """A kernel's name for a table: each path by its last part, commits by 12 digits."""
    parts = []
    for part in kernel.split("+"):
        kind, colon, path = part.rpartition(":") if part.startswith(("patch:", "config:")) else ("", "", part)
        head, at, ref = path.partition("@")
        parts.append(f"{kind}{colon}{os.path.basename(head.rstrip('/')) or head}{at}{ref}")
    return re.sub(r"\b([0-9a-f]{12})[0-9a-f]{28}\b", r"\1", "+".join(parts))


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def print_table(rows, where: str, series) -> None:
    """A table per series (:func:`analysis.history.series_of` the rows)."""
    from rich.console import Console
    from rich.table import Table

    from analysis.regress import METRICS

    console = Console(highlight=False)
    console.print(f"{len(rows)} figures of {len({r.run_id for r in rows})} runs in {where}")
    for s in series:
        _, unit, better = METRICS[s.metric]
        clock = "counted" if s.clock == "instructions" else "timed"
        console.print(f"\n[bold]{s.name}[/] ({unit}, {clock}; {'higher' if better > 0 else 'lower'} is better)")
        table = Table()
        table.add_column("kernel", overflow="fold", min_width=20)
        for column in ("runs", "mean", "range of runs"):
            table.add_column(column, justify="right", no_wrap=True)
        table.add_column("change point", no_wrap=True)
        for kernel, runs in zip(s.kernels, s.runs, strict=True):  # (Row.key: a name and a version, or a commit)
            g = s.group_of(kernel)
            starts = g.kernels[0] == kernel
            change = f"{g.label} {g.change * 100:+.2f} %" if starts and g.label else ""
            colour = {"regression": "red", "progression": "green"}.get(g.label if starts else "", "")
            spread = f"{_fmt(min(runs))}..{_fmt(max(runs))}"
            table.add_row(short(kernel), str(len(runs)), _fmt(sum(runs) / len(runs)), spread,
                          f"[{colour}]{change}[/]" if colour else change)
        console.print(table)

"""How precise the default sweep's figures are, and what the adaptive repetitions cost.

    sudo ipsec-testbed bench sweep_precision                   # adaptive, then fixed 3 repetitions
    sudo ipsec-testbed bench sweep_precision --runs 3          # the adaptive sweep three times
    sudo ipsec-testbed bench sweep_precision --reuse DIR ...   # only the figures of run directories

Runs `ipsec-testbed sweep` on its defaults as a user would (booting User-Mode
Linux when the host kernel has no ESP), timed from the command's start to its end, and then
the same sweep with a fixed 3 repetitions per point (the sweep before the repetitions
adapted). For every run it prints, per point, the 95 % confidence interval's half-width in
percent of the mean, of the goodput and of the CPU cost per gigabyte (as the sweep reports
it: at the run's common machine speed where a speed probe timed the windows; and as
measured), the repetitions used and what bounded the point; then the wall time, the widest
and median intervals, how many points meet the targets (goodput within --precision, CPU per
GB within --cpu-precision), and how many repetitions were anomalies (left out of the
figures). With two runs or more it also sets their CPU per GB side by side, at the points
whose CPU was not saturated: how much each point's mean moved between runs (coefficient of
variation), and how many pairs of runs agreed within their intervals (the difference of
the means within the root of the sum of the squared half-widths), at common speed and as
measured.  Exit status 0 when it ran.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from benchmarks import _common
from experiments import runner
from experiments.engine.plan import SweepSpec, default_sweep
from testbed.record import Bound

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The sweep before its repetitions adapted: the default one with a fixed 3 repetitions per point.
FIXED = {"repetitions": 3, "max_repetitions": 3}


def timed_sweep(spec: SweepSpec, label: str) -> tuple[str, float]:
    """``spec`` swept into a new directory: the directory and the sweep's wall time."""
    out = tempfile.mkdtemp(prefix="itb-bench-precision-")
    command = _common.sweep_command(spec)
    print(f"{label}: {' '.join(command)} --out {out}", flush=True)
    t0 = time.monotonic()
    rc = runner.sweep_apart(spec, out, command=command)
    wall = time.monotonic() - t0
    if rc != 0:
        sys.exit(f"sweep_precision: the sweep failed (exit {rc}); its directory: {out}")
    return out, wall


def half_width_pct(summary) -> float | None:
    if summary is None or summary.ci95 is None or not summary.mean:
        return None
    return 100.0 * summary.ci95 / abs(summary.mean)


def describe(run_dir: str, wall: float | None, label: str, goodput_target: float, cpu_target: float) -> dict:
    from analysis.format import bound_text
    from analysis.stats import aggregate
    from testbed.rundir import load_results

    records = load_results(run_dir)
    aggs = aggregate(records)
    print(f"\n{label}: {run_dir}")
    print(f"  {'profile':<13}{'rate':>6}{'size':>6}{'n':>3}{'goodput CI %':>14}{'CPU/GB CI %':>13}"
          f"{'as measured':>13}  bound")
    g_widths, c_widths, m_widths = [], [], []
    for a in aggs:
        g, c = half_width_pct(a.goodput), half_width_pct(a.cpu_s_per_gb)
        m = half_width_pct(a.cpu_s_per_gb_as_measured)
        g_widths.append(g)
        c_widths.append(c)
        m_widths.append(m)
        fmt = lambda x: "–" if x is None else f"{x:.2f}"  # noqa: E731
        print(f"  {str(a.profile):<13}{a.rate_mbit:>6g}{a.size_bytes:>6}{a.goodput.n:>3}{fmt(g):>14}{fmt(c):>13}"
              f"{fmt(m):>13}  {bound_text(a)}")
    anomalies = sum(1 for r in records if r.bound is Bound.ANOMALY)
    known_g = [w for w in g_widths if w is not None]
    known_c = [w for w in c_widths if w is not None]
    reps = sum(a.goodput.n for a in aggs)
    out = {"wall": wall, "points": len(aggs), "repetitions": reps, "anomalies": anomalies,
           "g_max": max(known_g, default=None), "g_median": statistics.median(known_g) if known_g else None,
           "c_max": max(known_c, default=None), "c_median": statistics.median(known_c) if known_c else None,
           "g_met": sum(1 for w in g_widths if w is not None and w <= goodput_target),
           "c_met": sum(1 for w in c_widths if w is not None and w <= cpu_target),
           "m_met": sum(1 for w in m_widths if w is not None and w <= cpu_target)}
    print(f"  wall time: {'–' if wall is None else f'{wall:.0f} s ({wall / 60:.1f} min)'}; "
          f"{out['points']} points, {reps} repetitions, {anomalies} anomal{'y' if anomalies == 1 else 'ies'} "
          f"(left out)")
    print(f"  goodput CI half-width: median {out['g_median']:.2f} %, widest {out['g_max']:.2f} %; "
          f"within {goodput_target:g} %: {out['g_met']} of {len(aggs)} points")
    if known_c:
        print(f"  CPU per GB CI half-width: median {out['c_median']:.2f} %, widest {out['c_max']:.2f} %; "
              f"within {cpu_target:g} %: {out['c_met']} of {len(aggs)} points "
              f"({out['m_met']} as measured, without the speed probe's adjustment)")
    return out


def between_runs(run_dirs: list[str]) -> None:
    """Each unsaturated point's CPU per GB across runs: the spread of its means, and how often
    two runs' intervals hold the difference of their means (at common speed and as measured)."""
    import itertools
    import math

    from analysis.stats import aggregate
    from testbed.rundir import load_results

    points: dict[tuple, list] = {}
    for d in run_dirs:
        for a in aggregate(load_results(d)):
            if a.cpu_s_per_gb is not None and not a.cpu_saturated:
                points.setdefault((a.profile, a.rate_mbit, a.size_bytes), []).append(
                    (a.cpu_s_per_gb, a.cpu_s_per_gb_as_measured))
    cvs: list[list[float]] = [[], []]
    held, pairs = [0, 0], 0
    for runs in points.values():
        if len(runs) < 2:
            continue
        for i in (0, 1):
            means = [r[i].mean for r in runs]
            cvs[i].append(statistics.stdev(means) / statistics.fmean(means))
        for a, b in itertools.combinations(runs, 2):
            pairs += 1
            for i in (0, 1):
                if a[i].ci95 is not None and b[i].ci95 is not None:
                    held[i] += abs(a[i].mean - b[i].mean) <= math.hypot(a[i].ci95, b[i].ci95)
    if not pairs:
        return
    print(f"\nbetween {len(run_dirs)} runs, CPU per GB at the {len(cvs[0])} points whose CPU was not saturated:")
    for i, what in enumerate(("at common speed", "as measured")):
        print(f"  {what:<16} median CV of the point's means {100 * statistics.median(cvs[i]):.1f} % (widest "
              f"{100 * max(cvs[i]):.1f} %); pairs of runs within their intervals: {held[i]} of {pairs}")
    print("  (each run's costs are at its own common speed: the runs' own speeds still differ)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sweep_precision", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1, metavar="N", help="adaptive sweeps to run (default: 1)")
    ap.add_argument("--no-fixed", action="store_true", help="skip the fixed-3-repetitions sweep")
    ap.add_argument("--reuse", nargs="+", metavar="DIR", help="only print the figures of these run directories")
    ap.add_argument("--precision", type=float, default=default_sweep().precision_pct, metavar="PERCENT",
                    help="the goodput target to count against (default: the sweep's, %(default)s)")
    ap.add_argument("--cpu-precision", type=float, default=default_sweep().cpu_precision_pct, metavar="PERCENT",
                    help="the CPU-per-GB target to count against (default: the sweep's, %(default)s)")
    args = ap.parse_args(argv)
    if args.reuse:
        for d in args.reuse:
            describe(d, None, "run", args.precision, args.cpu_precision)
        between_runs(args.reuse)
        return 0
    if os.geteuid() != 0:
        sys.exit("sweep_precision: needs root; run with sudo")
    results, adaptive_dirs = [], []
    for i in range(args.runs):
        d, wall = timed_sweep(default_sweep(), f"adaptive sweep {i + 1} of {args.runs}")
        adaptive_dirs.append(d)
        results.append(("adaptive", describe(d, wall, f"adaptive {i + 1}", args.precision, args.cpu_precision)))
    if not args.no_fixed:
        d, wall = timed_sweep(default_sweep(**FIXED), "fixed 3 repetitions")
        results.append(("fixed 3", describe(d, wall, "fixed 3 repetitions", args.precision, args.cpu_precision)))
    print("\nsummary")
    print(f"  {'sweep':<10}{'wall s':>8}{'reps':>6}{'anom.':>6}{'goodput CI % med/max':>22}"
          f"{'CPU/GB CI % med/max':>22}{'CPU within target':>19}{'as measured':>13}")
    for name, r in results:
        print(f"  {name:<10}{r['wall']:>8.0f}{r['repetitions']:>6}{r['anomalies']:>6}"
              f"{r['g_median']:>11.2f} /{r['g_max']:>8.2f}{r['c_median'] or 0:>11.2f} /{r['c_max'] or 0:>8.2f}"
              f"{r['c_met']:>12} of {r['points']}{r['m_met']:>13}")
    between_runs(adaptive_dirs)
    return 0


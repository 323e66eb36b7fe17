"""How often the regression gate cries wolf: repeated identical runs compared with each other.

    sudo ipsec-testbed bench regress_false_alarms                    # smoke suite, 4 runs
    sudo ipsec-testbed bench regress_false_alarms --suite quick --runs 6

Runs a suite N times exactly as `ipsec-testbed regress` does (the sweep script, in UML when
the host kernel has no ESP), then uses each run as the baseline of every other one:
N x (N - 1) comparisons of every point.  Nothing changed between the runs, so every point
flagged is a false alarm; the rate printed is flagged / compared.  For contrast the same
comparisons are made against baselines made 10% faster (every sample / 0.9): the share
of points flagged then is the gate's detection rate for a real 10% drop.
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import time

from experiments import runner
from experiments.job import Job, SweepWork

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str] | None = None) -> int:
    from experiments.catalogue.suites import SUITES, suite_spec

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=tuple(SUITES), default="smoke")
    ap.add_argument("--runs", type=int, default=4, help="identical runs (default: %(default)s)")
    ap.add_argument("--max-drop", type=float, default=5.0, metavar="PERCENT")
    ap.add_argument("--confidence", type=float, default=95.0, metavar="PERCENT")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("regress_false_alarms: needs root; run with sudo")
    if args.runs < 2:
        sys.exit("regress_false_alarms: --runs must be at least 2")
    from analysis import regress
    from testbed.record import FIELD
    from testbed.rundir import load_meta, load_results

    out = tempfile.mkdtemp(prefix="itb-bench-regress-")
    dirs = []
    for n in range(args.runs):
        d = os.path.join(out, f"run{n}")
        t0 = time.monotonic()
        rc = runner.run_apart(Job(SweepWork(suite_spec(args.suite)), out_dir=d, report=False))
        if rc != 0:
            sys.exit(f"run {n + 1} failed (exit {rc})")
        print(f"run {n + 1} of {args.runs}: {time.monotonic() - t0:.0f} s", flush=True)
        dirs.append(d)
    runs = [(load_results(d), load_meta(d)) for d in dirs]
    drop, conf = args.max_drop / 100, args.confidence / 100
    compared = flagged = detected = 0
    worst = 1.0
    for (_i, (base_rec, base_meta)), (_j, (rec, _)) in itertools.permutations(enumerate(runs), 2):
        baseline = regress.make_baseline(base_rec, base_meta)
        verdicts = regress.compare(baseline, rec, drop, conf)
        compared += len(verdicts)
        flagged += sum(v.regressed for v in verdicts)
        worst = min(worst, *(v.ratio for v in verdicts))
        for p in baseline["points"]:  # a baseline's point: its goodput samples under the field's name
            p[FIELD.goodput_mbps] = [g / 0.9 for g in p[FIELD.goodput_mbps]]
        detected += sum(v.regressed for v in regress.compare(baseline, rec, drop, conf))
    pairs = args.runs * (args.runs - 1)
    print(f"\nsuite {args.suite}: {args.runs} identical runs, {pairs} ordered pairs, {compared} point comparisons "
          f"(max drop {args.max_drop:g}%, confidence {args.confidence:g}%)")
    print(f"false alarms: {flagged} of {compared} = {100 * flagged / compared:.2f}% "
          f"(lowest now/baseline ratio seen: {worst:.3f})")
    print(f"a real 10% drop (baselines made 10% faster): flagged {detected} of {compared} = "
          f"{100 * detected / compared:.1f}%")
    print(f"run directories: {out}")
    return 0


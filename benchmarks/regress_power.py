"""What the regression gate detects: injected slowdowns of kernel IPsec, and identical arms.

    sudo ipsec-testbed bench regress_power                 # 10 trials, about 50 min in UML
    sudo ipsec-testbed bench regress_power --trials 3 --out runs/power

One trial is one run of the suite (default ``detect``) with five arms side by side, in the
ABBA order the sweep keeps (a b c d e, then e d c b a, ...)::

    arm   a      b      c      d      e
    ESP   as is  +5 %   as is  +2 %   +10 %      (extra BPF instructions per ESP packet,
                                                   calibrated: ipsec.slowdown, experiments.injection)

and four comparisons, each judged by the gate exactly as ``regress --suite detect
--inject-slowdown P`` judges its arm b against its arm a (paired repetitions, the suite's
metrics and tolerance):

    identical  c against a      nothing differs: a flag is a false alarm
    5 %        b against a      neighbours in every round, as in the two-arm suite
    2 %        d against c      neighbours
    10 %       e against c      one arm apart: a little more drift between them than in the suite

Printed: per kind, how many trials the gate flagged (any metric, and per metric), and the
slowdown as measured (CPU per packet at the CPU-bound point, arm against its reference)
next to the one requested; then one timed run of the real two-arm command, the suite's wall
time with its boot.  For contrast, the gate as CI uses it with a saved baseline: each
trial's arm a as the baseline of every other trial's arms (another boot, unpaired, so the
machine's drift between runs counts as noise).  Every trial is kept (``trials.jsonl`` in --out) and a second run of the
benchmark on the same --out goes on from there.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time

from benchmarks import _common
from experiments import runner

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: arm label -> (requested slowdown in %, the arm its comparison is against)
ARMS = {"a": (0.0, None), "b": (5.0, "a"), "c": (0.0, "a"), "d": (2.0, "c"), "e": (10.0, "c")}
KINDS = (("identical", "c"), ("2 %", "d"), ("5 %", "b"), ("10 %", "e"))


def main(argv: list[str] | None = None) -> int:
    from experiments.catalogue.suites import GATE_DEFAULTS, SUITES

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=tuple(SUITES), default="detect")
    ap.add_argument("--trials", type=int, default=10, help="trials (default: %(default)s)")
    ap.add_argument("--out", default=os.path.join(REPO, "runs", "regress-power"),
                    help="where the trials' runs go (default: %(default)s)")
    ap.add_argument("--no-suite-run", action="store_true", help="skip the timed two-arm run at the end")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("regress_power: needs root; run with sudo")
    if args.suite not in GATE_DEFAULTS:
        sys.exit(f"regress_power: suite {args.suite} has no gate settings for detection")
    from analysis import regress
    from experiments import injection
    from experiments.catalogue.suites import gate_defaults, suite_spec
    from testbed.rundir import load_meta, load_results

    spec = suite_spec(args.suite)
    gate = gate_defaults(args.suite)
    os.makedirs(args.out, exist_ok=True)
    say = lambda m: print(f"regress_power: {m}", flush=True)  # noqa: E731

    cal = injection.calibrated(args.suite, spec, injection.kernel_identity("auto"), runner.sweep_apart, args.out, say)
    counts = {arm: cal.instructions_for(pct) for arm, (pct, _) in ARMS.items()}
    say("arms: " + ", ".join(f"{a} {ARMS[a][0]:g} % ({n} instructions)" for a, n in counts.items()))
    log_path = os.path.join(args.out, "trials.jsonl")
    trials = []
    if os.path.exists(log_path):
        with open(log_path) as f:
            trials = [json.loads(line) for line in f if line.strip()]
    for t in range(len(trials), args.trials):
        run_dir = os.path.join(args.out, f"trial{t + 1:02d}")
        t0 = time.monotonic()
        rc = runner.sweep_apart(dataclasses.replace(spec, arms=tuple(counts[a] for a in ARMS)), run_dir)
        if rc != 0:
            sys.exit(f"regress_power: trial {t + 1} failed (exit {rc}); see {run_dir}")
        records, meta = load_results(run_dir), load_meta(run_dir)
        trial = {"trial": t + 1, "seconds": time.monotonic() - t0, "run_dir": run_dir, "kinds": {}}
        for kind, arm in KINDS:
            base = ARMS[arm][1]
            verdicts = regress.compare_arms(records, meta, base, arm, gate["arms_max_drop"] / 100, 0.95,
                                            gate["metrics"])
            e = injection.effect(records, arm, base)
            trial["kinds"][kind] = {
                "arm": arm, "against": base, "instructions": counts[arm], "measured_pct": e.pct,
                "flagged": any(v.regressed for v in verdicts),
                "metrics": {v.metric: {"ratio": v.ratio, "bound": v.bound, "regressed": v.regressed}
                            for v in verdicts}}
        trials.append(trial)
        with open(log_path, "a") as f:
            f.write(json.dumps(trial) + "\n")
        say(f"trial {t + 1} of {args.trials} ({trial['seconds']:.0f} s): " + "; ".join(
            f"{k} {'FLAGGED' if v['flagged'] else 'ok'} ({v['measured_pct']:+.1f} %)"
            for k, v in trial["kinds"].items()))

    n = len(trials)
    print(f"\nsuite {args.suite}, gate: {', '.join(regress.METRICS[m][0] for m in gate['metrics'])}, "
          f"tolerance {gate['arms_max_drop']:g} %, 95 % confidence, paired arms; {n} trials of "
          f"{statistics.mean(t['seconds'] for t in trials):.0f} s (five arms)")
    print(f"calibration: {cal.us_per_instruction * 1e3:.2f} ns per instruction, {cal.us_per_packet:.1f} µs per "
          f"packet at {cal.point}, measured {cal.measured}")
    print(f"{'kind':10s} {'requested':>9s} {'measured (mean, min..max)':>27s} {'flagged':>8s}   per metric")
    for kind, arm in KINDS:
        rows = [t["kinds"][kind] for t in trials]
        measured = [r["measured_pct"] for r in rows]
        per_metric = ", ".join(f"{regress.METRICS[m][0]} {sum(r['metrics'][m]['regressed'] for r in rows)}/{n}"
                               for m in gate["metrics"])
        print(f"{kind:10s} {ARMS[arm][0]:8g}% {statistics.mean(measured):+9.1f} % ({min(measured):+.1f}.."
              f"{max(measured):+.1f}) {sum(r['flagged'] for r in rows):5d}/{n}   {per_metric}")
    if n >= 2:
        cross_boot(trials, gate)
    if not args.no_suite_run:
        t0 = time.monotonic()
        proc = subprocess.run([*_common.front_door(), "regress", "--suite", args.suite,
                               "--inject-slowdown", "5", "--out",
                               os.path.join(args.out, time.strftime("suite-run-%Y%m%d-%H%M%S"))],
                              cwd=REPO, capture_output=True, text=True)
        wall = time.monotonic() - t0
        last = [line for line in proc.stdout.splitlines() if line.startswith("injected slowdown")]
        print(f"\nthe two-arm suite as a user runs it (regress --suite {args.suite} --inject-slowdown 5, "
              f"calibration cached): {wall:.0f} s with the boot, exit {proc.returncode} "
              f"({'flagged' if proc.returncode == 0 else 'not flagged' if proc.returncode == 1 else 'error'})")
        if last:
            print(f"  {last[0]}")
    return 0


def cross_boot(trials: list[dict], gate: dict) -> None:
    """The gate against a baseline saved from another run (another boot), as CI uses it: arm a of
    each trial as the baseline of every other trial's arms, unpaired (no drift cancels)."""
    import itertools

    from analysis import regress
    from testbed.rundir import load_meta, load_results

    runs = [(load_results(t["run_dir"]), load_meta(t["run_dir"])) for t in trials]
    # each trial's arm a as a baseline, and each trial's arms, made once for every tolerance
    baselines = [regress.make_baseline(regress.arm_records(records, "a"), meta) for records, meta in runs]
    arms = [{arm: regress.arm_records(records, arm) for _, arm in KINDS} for records, _ in runs]
    pairs = list(itertools.permutations(range(len(runs)), 2))
    print(f"\nagainst a baseline from another run (arm a of each trial the baseline of every other trial's "
          f"arms, unpaired: {len(pairs)} comparisons per kind), flagged at each tolerance "
          f"(the suite's: {gate['max_drop']:g} %):")
    for tolerance in sorted({0.5, 1.0, 2.0, 3.0, 5.0, gate["max_drop"]}):
        flagged = {kind: 0 for kind, _ in KINDS}
        for i, j in pairs:
            baseline, now = baselines[i], arms[j]
            for kind, arm in KINDS:
                verdicts = regress.compare(baseline, now[arm], tolerance / 100, 0.95, gate["metrics"])
                flagged[kind] += any(v.regressed for v in verdicts)
        print(f"  {tolerance:4g} %: " + ", ".join(f"{kind} {flagged[kind]}/{len(pairs)}" for kind, _ in KINDS))


"""What the paired kernel A/B detects: two guests, one with its ESP path made slower.

    sudo ipsec-testbed bench ab_power                       # 10 trials of 0, 2, 5, 10 %: about 80 min in UML
    sudo ipsec-testbed bench ab_power --trials 3 --levels 0,5 --out runs/ab-power

One trial at one level is one run of ``ipsec-testbed regress --ab uml uml --suite detect
--inject-slowdown LEVEL``: kernels A and B are the same UML kernel, up at once in two guests on
one host CPU, taking turns window by window (ABBA); B's guest has a BPF program adding the
calibrated number of instructions to every ESP packet's way (LEVEL % more CPU per packet at
the suite's CPU-bound point), A's the same program adding none.  The gate judges B against A
pair by pair, on the suite's metrics and its tolerance between arms.

Printed per level: how many trials the gate flagged B (any metric, and per metric), the
slowdown as measured (CPU per packet, B / A pair by pair) next to the one requested, and the
trials' wall time, the longest included.  Level 0 is A/A: a flag there is a false alarm.
Every trial is kept (``trials.jsonl`` in --out, with its run directory) and a second run of the
benchmark on the same --out goes on from there.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from benchmarks import _common

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: What issue 31 asks of the paired A/B: A/A flagged at most 1 time in 10, 5 % at least 9 in 10.
TARGETS = {0.0: ("at most", 0.1), 5.0: ("at least", 0.9)}


def levels(text: str) -> tuple[float, ...]:
    try:
        out = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected percentages like 0,2,5,10, not {text!r}") from None
    if not out or any(not 0 <= x < 100 for x in out):
        raise argparse.ArgumentTypeError(f"levels must be in 0..100, not {text!r}")
    return out


def trial(out: str, suite: str, level: float, k: int) -> dict:
    """One paired A/B at ``level``; its JSON verdicts, wall time and exit status."""
    run_dir = os.path.join(out, f"trial{k:02d}-{level:g}pct")
    verdicts = os.path.join(run_dir + ".json")
    shutil.rmtree(run_dir, ignore_errors=True)  # a trial that failed before (not in trials.jsonl): again
    t0 = time.monotonic()
    with open(run_dir + ".log", "wb") as log:
        rc = subprocess.call([*_common.front_door(), "regress", "--ab", "uml", "uml", "--suite", suite,
                              "--inject-slowdown", f"{level:g}", "--json", verdicts, "--out", run_dir],
                             cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    seconds = time.monotonic() - t0
    if rc not in (0, 1) or not os.path.exists(verdicts):
        with open(run_dir + ".log", errors="replace") as f:
            raise RuntimeError(f"trial {k} at {level:g} % failed (exit {rc}): {f.read()[-1500:]}")
    with open(verdicts) as f:
        data = json.load(f)
    flagged = sorted({v["metric"] for v in data["verdicts"] if v["regressed"]})
    return {"trial": k, "level": level, "flagged": flagged, "measured_pct": data["measured_pct"],
            "ratio": data["ratio"], "seconds": seconds, "run_dir": run_dir}


def report(done: list[dict], want: tuple[float, ...]) -> None:
    metrics = sorted({m for t in done for m in t["flagged"]} | {"goodput_mbps", "cpu_us_per_packet"})
    print(f"{'level':>6s} {'trials':>6s} {'flagged':>8s} " + " ".join(f"{m:>18s}" for m in metrics)
          + f" {'measured %':>11s} {'wall s (max)':>13s}  target")
    for level in want:
        ts = [t for t in done if t["level"] == level]
        if not ts:
            continue
        flagged = sum(bool(t["flagged"]) for t in ts)
        per = " ".join(f"{sum(m in t['flagged'] for t in ts):>18d}" for m in metrics)
        measured = statistics.mean(t["measured_pct"] for t in ts)
        wall = f"{statistics.mean(t['seconds'] for t in ts):.0f} ({max(t['seconds'] for t in ts):.0f})"
        target = ""
        if level in TARGETS:
            how, share = TARGETS[level]
            ok = flagged <= share * len(ts) if how == "at most" else flagged >= share * len(ts)
            target = f"flagged {how} {share * len(ts):g} of {len(ts)}: {'MET' if ok else 'NOT MET'}"
        print(f"{level:>5g}% {len(ts):>6d} {flagged:>8d} {per} {measured:>+10.1f}% {wall:>13s}  {target}")
    print("flagged: trials in which the gate judged B worse than A on any metric; level 0 is A/A (a flag is a "
          "false alarm). measured: CPU per packet at the suite's CPU-bound point, B / A pair by pair, mean over "
          "the trials.")


def main(argv: list[str] | None = None) -> int:
    from experiments.catalogue.suites import SUITES

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=tuple(SUITES), default="detect", help="(default: %(default)s)")
    ap.add_argument("--trials", type=int, default=10, help="trials per level (default: %(default)s)")
    ap.add_argument("--levels", type=levels, default=(0.0, 2.0, 5.0, 10.0), metavar="PCT,...",
                    help="slowdowns of B's ESP path, in %% (default: 0,2,5,10)")
    ap.add_argument("--out", default=os.path.join(REPO, "runs", "ab-power"),
                    help="where the trials go (default: %(default)s)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("ab_power: needs root (two guests, namespaces, BPF); run it with sudo", file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "trials.jsonl")
    done: list[dict] = []
    if os.path.exists(path):
        with open(path) as f:
            done = [json.loads(line) for line in f if line.strip()]
        print(f"{len(done)} trials already in {path}", file=sys.stderr)
    try:
        for k in range(args.trials):  # the levels inside each trial, so that drift falls on all alike
            for level in args.levels:
                if any(t["trial"] == k and t["level"] == level for t in done):
                    continue
                print(f"trial {k + 1} of {args.trials}, B {level:g} % slower ...", file=sys.stderr, flush=True)
                t = trial(args.out, args.suite, level, k)
                print(f"  flagged: {', '.join(t['flagged']) or 'nothing'}; measured {t['measured_pct']:+.1f} %; "
                      f"{t['seconds']:.0f} s", file=sys.stderr, flush=True)
                done.append(t)
                with open(path, "a") as f:
                    f.write(json.dumps(t) + "\n")
    except KeyboardInterrupt:
        print("ab_power: interrupted; the trials so far are kept", file=sys.stderr)
    except RuntimeError as e:
        print(f"ab_power: {e}", file=sys.stderr)
        report(done, args.levels)
        return 1
    report(done, args.levels)
    return 0


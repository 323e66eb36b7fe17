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

import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from experiments.benchmark import Benchmark, front_door, option
from experiments.catalogue.suites import SUITES

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: What issue 31 asks of the paired A/B: A/A flagged at most 1 time in 10, 5 % at least 9 in 10.
TARGETS = {0.0: ("at most", 0.1), 5.0: ("at least", 0.9)}
TRIALS_FILE = "trials.jsonl"


@dataclasses.dataclass(frozen=True)
class Options:
    """Which suite, how many trials of which slowdowns, and where they are kept; checked on construction."""

    suite: str = option("detect", "the suite each trial's A/B runs", choices=tuple(SUITES))
    trials: int = option(10, "trials per level")
    levels: tuple[float, ...] = option((0.0, 2.0, 5.0, 10.0), "slowdowns of B's ESP path, in %", metavar="PCT,...")
    out: str = option(os.path.join(REPO, "runs", "ab-power"), "where the trials go")

    def __post_init__(self) -> None:
        if self.trials < 0:
            raise ValueError(f"--trials must be a count (0: only the report of those kept), not {self.trials}")
        if not self.levels or any(not 0 <= x < 100 for x in self.levels):
            raise ValueError(f"--levels must be percentages in 0..100, not {','.join(f'{x:g}' for x in self.levels)}")


@dataclasses.dataclass(frozen=True)
class Trial:
    """One paired A/B at one level: the metrics the gate flagged, the slowdown measured, its wall time and run."""

    trial: int
    level: float
    flagged: tuple[str, ...]
    measured_pct: float
    ratio: float
    seconds: float
    run_dir: str

    @classmethod
    def from_json(cls, data: dict) -> Trial:
        return cls(**{**data, "flagged": tuple(data["flagged"])})


@dataclasses.dataclass(frozen=True)
class Result:
    """Every trial done (those kept from before included); ``error``: why a trial failed and the rest did not run."""

    trials: tuple[Trial, ...]
    error: str = ""


def trial(out: str, suite: str, level: float, k: int) -> Trial:
    """One paired A/B at ``level``: its verdicts, wall time and run directory."""
    run_dir = os.path.join(out, f"trial{k:02d}-{level:g}pct")
    verdicts = os.path.join(run_dir + ".json")
    shutil.rmtree(run_dir, ignore_errors=True)  # a trial that failed before (not in trials.jsonl): again
    t0 = time.monotonic()
    with open(run_dir + ".log", "wb") as log:
        rc = subprocess.call([*front_door(), "regress", "--ab", "uml", "uml", "--suite", suite,
                              "--inject-slowdown", f"{level:g}", "--json", verdicts, "--out", run_dir],
                             cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    seconds = time.monotonic() - t0
    if rc not in (0, 1) or not os.path.exists(verdicts):
        with open(run_dir + ".log", errors="replace") as f:
            raise RuntimeError(f"trial {k} at {level:g} % failed (exit {rc}): {f.read()[-1500:]}")
    with open(verdicts) as f:
        data = json.load(f)
    flagged = tuple(sorted({v["metric"] for v in data["verdicts"] if v["regressed"]}))
    return Trial(k, level, flagged, data["measured_pct"], data["ratio"], seconds, run_dir)


def run(args: Options) -> Result:
    """The trials not yet in ``args.out``, the levels taking turns within each; every trial kept as it ends."""
    path = os.path.join(args.out, TRIALS_FILE)
    done: list[Trial] = []
    if os.path.exists(path):
        with open(path) as f:
            done = [Trial.from_json(json.loads(line)) for line in f if line.strip()]
        print(f"{len(done)} trials already in {path}", file=sys.stderr)
    try:
        for k in range(args.trials):  # the levels inside each trial, so that drift falls on all alike
            for level in args.levels:
                if any(t.trial == k and t.level == level for t in done):
                    continue
                print(f"trial {k + 1} of {args.trials}, B {level:g} % slower ...", file=sys.stderr, flush=True)
                t = trial(args.out, args.suite, level, k)
                print(f"  flagged: {', '.join(t.flagged) or 'nothing'}; measured {t.measured_pct:+.1f} %; "
                      f"{t.seconds:.0f} s", file=sys.stderr, flush=True)
                done.append(t)
                with open(path, "a") as f:
                    f.write(json.dumps(dataclasses.asdict(t)) + "\n")
    except KeyboardInterrupt:
        print("ab_power: interrupted; the trials so far are kept", file=sys.stderr)
    except RuntimeError as e:
        print(f"ab_power: {e}", file=sys.stderr)
        return Result(tuple(done), str(e))
    return Result(tuple(done))


def page(args: Options, result: Result) -> str:
    """Per level: the trials flagged (any metric, and per metric), the slowdown measured, the wall time, the target."""
    done = result.trials
    metrics = sorted({m for t in done for m in t.flagged} | {"goodput_mbps", "cpu_us_per_packet"})
    lines = [f"{'level':>6s} {'trials':>6s} {'flagged':>8s} " + " ".join(f"{m:>18s}" for m in metrics)
             + f" {'measured %':>11s} {'wall s (max)':>13s}  target"]
    for level in args.levels:
        ts = [t for t in done if t.level == level]
        if not ts:
            continue
        flagged = sum(bool(t.flagged) for t in ts)
        per = " ".join(f"{sum(m in t.flagged for t in ts):>18d}" for m in metrics)
        measured = statistics.mean(t.measured_pct for t in ts)
        wall = f"{statistics.mean(t.seconds for t in ts):.0f} ({max(t.seconds for t in ts):.0f})"
        target = ""
        if level in TARGETS:
            how, share = TARGETS[level]
            ok = flagged <= share * len(ts) if how == "at most" else flagged >= share * len(ts)
            target = f"flagged {how} {share * len(ts):g} of {len(ts)}: {'MET' if ok else 'NOT MET'}"
        lines.append(f"{level:>5g}% {len(ts):>6d} {flagged:>8d} {per} {measured:>+10.1f}% {wall:>13s}  {target}")
    lines.append("flagged: trials in which the gate judged B worse than A on any metric; level 0 is A/A (a flag is a "
                 "false alarm). measured: CPU per packet at the suite's CPU-bound point, B / A pair by pair, mean "
                 "over the trials.")
    return "\n".join(lines)


BENCHMARK = Benchmark("ab_power", Options, run, page, root="two guests, namespaces, BPF",
                      status=lambda result: 1 if result.error else 0)

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

import dataclasses
import itertools
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

from analysis import regress
from experiments import runner
from experiments.benchmark import Benchmark, option
from experiments.catalogue.suites import SUITES, suite_spec
from experiments.job import Job, SweepWork
from testbed.record import FIELD, Meta, Record
from testbed.rundir import load_meta, load_results

#: The drop the contrast plants: every sample of a baseline divided by this.
FASTER = 0.9


@dataclasses.dataclass(frozen=True)
class Options:
    """Which suite, how many times, and the gate's rule; checked on construction."""

    suite: str = option("smoke", "the suite run again and again", choices=tuple(SUITES))
    runs: int = option(4, "identical runs")
    max_drop: float = option(5.0, "the gate's tolerance: the drop it lets pass", metavar="PERCENT")
    confidence: float = option(95.0, "the gate's confidence", metavar="PERCENT")

    def __post_init__(self) -> None:
        if self.runs < 2:
            raise ValueError(f"--runs must be at least 2 (each run the baseline of another), not {self.runs}")
        for flag, value in (("--max-drop", self.max_drop), ("--confidence", self.confidence)):
            if not 0 < value < 100:
                raise ValueError(f"{flag} must be a percentage in (0, 100), not {value:g}")


@dataclasses.dataclass(frozen=True)
class Result:
    """Every ordered pair's point comparisons counted: flagged as they are (false alarms) and against baselines
    made 10 % faster (detected); the lowest now/baseline ratio seen; where the runs are."""

    compared: int
    flagged: int
    detected: int
    worst: float
    out: str


def run(args: Options) -> Result:
    """The suite ``args.runs`` times, each a process of its own, then every run against every other."""
    out = tempfile.mkdtemp(prefix="itb-bench-regress-")
    dirs = []
    for n in range(args.runs):
        d = os.path.join(out, f"run{n}")
        t0 = time.monotonic()
        rc = runner.run_apart(Job(SweepWork(suite_spec(args.suite)), out_dir=d, report=False))
        if rc != 0:
            sys.exit(f"run {n + 1} failed (exit {rc})")
        print(f"run {n + 1} of {args.runs}: {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        dirs.append(d)
    return judge([(load_results(d), load_meta(d)) for d in dirs], args.max_drop, args.confidence, out)


def judge(runs: Sequence[tuple[Sequence[Record], Meta | Mapping[str, Any]]], max_drop: float, confidence: float,
          out: str = "") -> Result:
    """Each of ``runs`` (records, meta) the baseline of every other, by the gate's rule (``max_drop`` and
    ``confidence`` in percent), as it is and made 10 % faster.  Pure."""
    drop, conf = max_drop / 100, confidence / 100
    compared = flagged = detected = 0
    worst = 1.0
    for (base_rec, base_meta), (rec, _) in itertools.permutations(runs, 2):
        baseline = regress.make_baseline(base_rec, base_meta)
        verdicts = regress.compare(baseline, rec, drop, conf)
        compared += len(verdicts)
        flagged += sum(v.regressed for v in verdicts)
        worst = min(worst, *(v.ratio for v in verdicts))
        for p in baseline["points"]:  # a baseline's point: its goodput samples under the field's name
            p[FIELD.goodput_mbps] = [g / FASTER for g in p[FIELD.goodput_mbps]]
        detected += sum(v.regressed for v in regress.compare(baseline, rec, drop, conf))
    return Result(compared, flagged, detected, worst, out)


def page(args: Options, result: Result) -> str:
    """The false alarms and the detections, each of every point comparison."""
    compared = result.compared
    return "\n".join([
        f"suite {args.suite}: {args.runs} identical runs, {args.runs * (args.runs - 1)} ordered pairs, {compared} "
        f"point comparisons (max drop {args.max_drop:g}%, confidence {args.confidence:g}%)",
        f"false alarms: {result.flagged} of {compared} = {100 * result.flagged / compared:.2f}% "
        f"(lowest now/baseline ratio seen: {result.worst:.3f})",
        f"a real 10% drop (baselines made 10% faster): flagged {result.detected} of {compared} = "
        f"{100 * result.detected / compared:.1f}%",
        f"run directories: {result.out}"])


BENCHMARK = Benchmark("regress_false_alarms", Options, run, page, root="the suite's sweeps: namespaces, guests")

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

import dataclasses
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from analysis import regress
from experiments import injection, runner
from experiments.benchmark import Benchmark, front_door, option
from experiments.catalogue.suites import GATE_DEFAULTS, SUITES, gate_defaults, suite_spec
from experiments.engine.plan import SweepSpec
from testbed.errors import Refused
from testbed.record import Meta, Record
from testbed.rundir import load_meta, load_results

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: arm label -> (requested slowdown in %, the arm its comparison is against)
ARMS = {"a": (0.0, None), "b": (5.0, "a"), "c": (0.0, "a"), "d": (2.0, "c"), "e": (10.0, "c")}
KINDS = (("identical", "c"), ("2 %", "d"), ("5 %", "b"), ("10 %", "e"))
TRIALS_FILE = "trials.jsonl"
#: What the sweeps of the calibration and the trials stand for, in their meta.json and the history.
COMMAND = ("ipsec-testbed", "bench", "regress_power")


@dataclasses.dataclass(frozen=True)
class MetricVerdict:
    """The gate's verdict on one metric, as ``trials.jsonl`` keeps it."""

    ratio: float  # the arm's / its reference's
    bound: float  # the ratio's one-sided bound, on the worse side
    regressed: bool


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One kind's comparison in one trial: its arm and the arm it is judged against, the arm's extra
    instructions, the slowdown as measured, whether the gate flagged any metric, and its verdict per metric."""

    arm: str
    against: str
    instructions: int
    measured_pct: float
    flagged: bool
    metrics: Mapping[str, MetricVerdict]


@dataclasses.dataclass(frozen=True)
class Trial:
    """One run of the suite with five arms: its wall time, run directory and each kind's comparison (a line of
    ``trials.jsonl``)."""

    trial: int
    seconds: float
    run_dir: str
    kinds: Mapping[str, Comparison]

    @classmethod
    def from_json(cls, data: dict) -> Trial:
        """The trial a line of ``trials.jsonl`` holds."""
        kinds = {kind: Comparison(**{**c, "metrics": {m: MetricVerdict(**v) for m, v in c["metrics"].items()}})
                 for kind, c in data["kinds"].items()}
        return cls(**{**data, "kinds": kinds})


@dataclasses.dataclass(frozen=True)
class CrossBoot:
    """The gate against a baseline saved from another trial (another boot), unpaired: per tolerance (%), the
    comparisons it flagged of each kind, of ``pairs`` per kind."""

    pairs: int
    flagged: tuple[tuple[float, Mapping[str, int]], ...]


@dataclasses.dataclass(frozen=True)
class SuiteRun:
    """The real two-arm command, timed: its wall time with the boot, its exit status and its verdict's line."""

    wall_s: float
    returncode: int
    verdict: str  # "" when it printed none


@dataclasses.dataclass(frozen=True)
class Result:
    """The gate's settings, the calibration, every trial (those kept from before included), the gate against
    saved baselines (two trials or more) and the timed two-arm command (unless skipped)."""

    gate: Mapping[str, Any]
    calibration: injection.Calibration
    trials: tuple[Trial, ...]
    cross_boot: CrossBoot | None
    suite_run: SuiteRun | None


@dataclasses.dataclass(frozen=True)
class Options:
    """Which suite, how many trials, where they are kept; checked on construction."""

    suite: str = option("detect", "the suite each trial runs, its IPsec points in five arms",
                        choices=tuple(SUITES))
    trials: int = option(10, "trials")
    out: str = option(os.path.join(REPO, "runs", "regress-power"), "where the trials' runs go")
    no_suite_run: bool = option(False, "skip the timed two-arm run at the end")

    def __post_init__(self) -> None:
        if self.suite not in GATE_DEFAULTS:
            raise ValueError(f"--suite {self.suite} has no gate settings for detection; suites with them: "
                             f"{', '.join(GATE_DEFAULTS)}")
        if self.trials < 0:
            raise ValueError(f"--trials must be a count (0: only the report of those kept), not {self.trials}")


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def sweep(spec: SweepSpec, run_dir: str) -> int:
    """``spec`` swept into ``run_dir`` apart, as this benchmark's; its exit status."""
    return runner.sweep_apart(spec, run_dir, command=COMMAND)


def trial(spec: SweepSpec, gate: Mapping[str, Any], counts: Mapping[str, int], number: int, out: str) -> Trial:
    """Trial ``number``: the suite with the five arms, each kind judged by the gate."""
    run_dir = os.path.join(out, f"trial{number:02d}")
    t0 = time.monotonic()
    rc = sweep(dataclasses.replace(spec, arms=tuple(counts[a] for a in ARMS)), run_dir)
    if rc != 0:
        raise Refused(f"trial {number} failed (exit {rc}); see {run_dir}")
    seconds = time.monotonic() - t0
    return judge(load_results(run_dir), load_meta(run_dir), gate, counts, number, seconds, run_dir)


def judge(records: Sequence[Record], meta: Meta, gate: Mapping[str, Any], counts: Mapping[str, int], number: int,
          seconds: float, run_dir: str) -> Trial:
    """Each kind of a trial's records judged by the gate as ``regress`` judges its arms (pure)."""
    kinds = {}
    for kind, arm in KINDS:
        base = ARMS[arm][1]
        verdicts = regress.compare_arms(records, meta, base, arm, gate["arms_max_drop"] / 100, 0.95, gate["metrics"])
        kinds[kind] = Comparison(arm, base, counts[arm], injection.effect(records, arm, base).pct,
                                 any(v.regressed for v in verdicts),
                                 {v.metric: MetricVerdict(v.ratio, v.bound, v.regressed) for v in verdicts})
    return Trial(number, seconds, run_dir, kinds)


def cross_boot(trials: tuple[Trial, ...], gate: Mapping[str, Any]) -> CrossBoot:
    """The gate against a baseline saved from another run (another boot), as CI uses it: arm a of
    each trial as the baseline of every other trial's arms, unpaired (no drift cancels)."""
    runs = [(load_results(t.run_dir), load_meta(t.run_dir)) for t in trials]
    # each trial's arm a as a baseline, and each trial's arms, made once for every tolerance
    baselines = [regress.make_baseline(regress.arm_records(records, "a"), meta) for records, meta in runs]
    arms = [{arm: regress.arm_records(records, arm) for _, arm in KINDS} for records, _ in runs]
    pairs = list(itertools.permutations(range(len(runs)), 2))
    rows = []
    for tolerance in sorted({0.5, 1.0, 2.0, 3.0, 5.0, gate["max_drop"]}):
        flagged = {kind: 0 for kind, _ in KINDS}
        for i, j in pairs:
            baseline, now = baselines[i], arms[j]
            for kind, arm in KINDS:
                verdicts = regress.compare(baseline, now[arm], tolerance / 100, 0.95, gate["metrics"])
                flagged[kind] += any(v.regressed for v in verdicts)
        rows.append((tolerance, flagged))
    return CrossBoot(len(pairs), tuple(rows))


def suite_run(args: Options) -> SuiteRun:
    """The two-arm suite as a user runs it (``regress --inject-slowdown 5``, the calibration cached), timed."""
    t0 = time.monotonic()
    proc = subprocess.run([*front_door(), "regress", "--suite", args.suite, "--inject-slowdown", "5", "--out",
                           os.path.join(args.out, time.strftime("suite-run-%Y%m%d-%H%M%S"))],
                          cwd=REPO, capture_output=True, text=True)
    wall = time.monotonic() - t0
    last = [line for line in proc.stdout.splitlines() if line.startswith("injected slowdown")]
    return SuiteRun(wall, proc.returncode, last[0] if last else "")


def run(args: Options) -> Result:
    """The calibration (cached), the trials not yet in ``args.out`` (each kept as it ends), the gate against
    saved baselines, and the timed two-arm command."""
    path = os.path.join(args.out, TRIALS_FILE)
    trials: list[Trial] = []
    if os.path.exists(path):
        with open(path) as f:
            trials = [Trial.from_json(json.loads(line)) for line in f if line.strip()]
    if not trials and not args.trials:
        raise Refused(f"no trials in {path} and none asked for (--trials 0)")
    spec, gate = suite_spec(args.suite), gate_defaults(args.suite)
    cal = injection.calibrated(args.suite, spec, injection.kernel_identity("auto"), sweep, args.out, say)
    counts = {arm: cal.instructions_for(pct) for arm, (pct, _) in ARMS.items()}
    say("arms: " + ", ".join(f"{a} {ARMS[a][0]:g} % ({n} instructions)" for a, n in counts.items()))
    for number in range(len(trials) + 1, args.trials + 1):
        t = trial(spec, gate, counts, number, args.out)
        trials.append(t)
        with open(path, "a") as f:
            f.write(json.dumps(dataclasses.asdict(t)) + "\n")
        say(f"trial {number} of {args.trials} ({t.seconds:.0f} s): " + "; ".join(
            f"{k} {'FLAGGED' if c.flagged else 'ok'} ({c.measured_pct:+.1f} %)" for k, c in t.kinds.items()))
    return Result(gate, cal, tuple(trials), cross_boot(tuple(trials), gate) if len(trials) >= 2 else None,
                  None if args.no_suite_run else suite_run(args))


def page(args: Options, result: Result) -> str:
    """Per kind: the trials flagged (any metric, and per metric) and the slowdown measured against the one
    requested; the gate against saved baselines; the two-arm command's wall time."""
    gate, cal, trials = result.gate, result.calibration, result.trials
    n = len(trials)
    lines = [f"suite {args.suite}, gate: {', '.join(regress.METRICS[m][0] for m in gate['metrics'])}, "
             f"tolerance {gate['arms_max_drop']:g} %, 95 % confidence, paired arms; {n} trials of "
             f"{statistics.mean(t.seconds for t in trials):.0f} s (five arms)",
             f"calibration: {cal.us_per_instruction * 1e3:.2f} ns per instruction, {cal.us_per_packet:.1f} µs per "
             f"packet at {cal.point}, measured {cal.measured}",
             f"{'kind':10s} {'requested':>9s} {'measured (mean, min..max)':>27s} {'flagged':>8s}   per metric"]
    for kind, arm in KINDS:
        rows = [t.kinds[kind] for t in trials]
        measured = [r.measured_pct for r in rows]
        per_metric = ", ".join(f"{regress.METRICS[m][0]} {sum(r.metrics[m].regressed for r in rows)}/{n}"
                               for m in gate["metrics"])
        lines.append(f"{kind:10s} {ARMS[arm][0]:8g}% {statistics.mean(measured):+9.1f} % ({min(measured):+.1f}.."
                     f"{max(measured):+.1f}) {sum(r.flagged for r in rows):5d}/{n}   {per_metric}")
    if result.cross_boot:
        cb = result.cross_boot
        lines += ["", f"against a baseline from another run (arm a of each trial the baseline of every other "
                  f"trial's arms, unpaired: {cb.pairs} comparisons per kind), flagged at each tolerance "
                  f"(the suite's: {gate['max_drop']:g} %):"]
        lines += [f"  {tolerance:4g} %: " + ", ".join(f"{kind} {flagged[kind]}/{cb.pairs}" for kind, _ in KINDS)
                  for tolerance, flagged in cb.flagged]
    if result.suite_run:
        s = result.suite_run
        lines += ["", f"the two-arm suite as a user runs it (regress --suite {args.suite} --inject-slowdown 5, "
                  f"calibration cached): {s.wall_s:.0f} s with the boot, exit {s.returncode} "
                  f"({'flagged' if s.returncode == 0 else 'not flagged' if s.returncode == 1 else 'error'})"]
        if s.verdict:
            lines.append(f"  {s.verdict}")
    return "\n".join(lines)


BENCHMARK = Benchmark("regress_power", Options, run, page, root="the trials' sweeps and the calibration's: "
                      "namespaces, guests, BPF")

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

import dataclasses
import itertools
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence

from analysis.format import bound_text
from analysis.stats import Summary, aggregate
from experiments import runner
from experiments.benchmark import Benchmark, option
from experiments.engine.plan import SweepSpec, default_sweep, describe_changes
from testbed.errors import Refused
from testbed.record import Bound
from testbed.rundir import load_results

#: The sweep before its repetitions adapted: the default one with a fixed 3 repetitions per point.
FIXED = {"repetitions": 3, "max_repetitions": 3}
DEFAULT = default_sweep()


@dataclasses.dataclass(frozen=True)
class Options:
    """Which sweeps, or which run directories, and the targets to count against; checked on construction."""

    runs: int = option(1, "adaptive sweeps to run (default: 1)", metavar="N", show_default=False)
    no_fixed: bool = option(False, "skip the fixed-3-repetitions sweep")
    reuse: tuple[str, ...] = option((), "only print the figures of these run directories", nargs="+", metavar="DIR")
    precision: float = option(DEFAULT.precision_pct, "the goodput target to count against (default: the sweep's, "
                              f"{DEFAULT.precision_pct})", metavar="PERCENT", show_default=False)
    cpu_precision: float = option(DEFAULT.cpu_precision_pct, "the CPU-per-GB target to count against (default: the "
                                  f"sweep's, {DEFAULT.cpu_precision_pct})", metavar="PERCENT", show_default=False)

    def __post_init__(self) -> None:
        if self.runs < 0 or (self.runs == 0 and self.no_fixed and not self.reuse):
            raise ValueError(f"--runs must be a count of adaptive sweeps (0 only with the fixed one), not {self.runs}")
        for d in self.reuse:
            if not os.path.isdir(d):
                raise ValueError(f"--reuse must name run directories, not {d}")
        for flag, value in (("--precision", self.precision), ("--cpu-precision", self.cpu_precision)):
            if not 0 < value <= 100:
                raise ValueError(f"{flag} must be a percentage in (0, 100], not {value:g}")


@dataclasses.dataclass(frozen=True)
class PointWidths:
    """One point of a sweep: its 95 % confidence intervals' half-widths in percent of the mean (None: no
    interval), of the goodput and of the CPU per GB at common speed and as measured; what bounded it."""

    profile: str
    rate_mbit: float
    size_bytes: int
    n: int
    goodput_pct: float | None
    cpu_pct: float | None
    as_measured_pct: float | None
    bound: str


@dataclasses.dataclass(frozen=True)
class Run:
    """One sweep's figures: ``sweep`` (adaptive, fixed 3; "" for a run directory given), its label and directory,
    its wall time (None: not run here), its points and the repetitions that were anomalies (left out)."""

    sweep: str
    label: str
    run_dir: str
    wall_s: float | None
    points: tuple[PointWidths, ...]
    anomalies: int

    @property
    def repetitions(self) -> int:
        return sum(p.n for p in self.points)

    def widths(self, field: str) -> list[float]:
        """The points' known half-widths of ``field`` (``goodput_pct``, ``cpu_pct``, ``as_measured_pct``)."""
        return [w for p in self.points if (w := getattr(p, field)) is not None]

    def met(self, field: str, target: float) -> int:
        """The points whose half-width of ``field`` is within ``target`` percent."""
        return sum(w <= target for w in self.widths(field))


@dataclasses.dataclass(frozen=True)
class BetweenRuns:
    """The unsaturated points' CPU per GB across runs, at common speed and as measured (each a pair): the median
    and widest coefficient of variation of a point's means, and the pairs of runs agreeing within their
    intervals."""

    runs: int
    points: int
    pairs: int
    median_cv: tuple[float, float]
    widest_cv: tuple[float, float]
    held: tuple[int, int]


@dataclasses.dataclass(frozen=True)
class Result:
    """Every sweep's figures, and the adaptive sweeps' (or the run directories') CPU per GB between them."""

    runs: tuple[Run, ...]
    between: BetweenRuns | None


def timed_sweep(spec: SweepSpec, label: str) -> tuple[str, float]:
    """``spec`` swept into a new directory: the directory and the sweep's wall time."""
    out = tempfile.mkdtemp(prefix="itb-bench-precision-")
    print(f"{label}: {describe_changes(spec)}, into {out}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    rc = runner.sweep_apart(spec, out, command=("ipsec-testbed", "bench", "sweep_precision"))
    wall = time.monotonic() - t0
    if rc != 0:
        raise Refused(f"the sweep failed (exit {rc}); its directory: {out}")
    print(f"{label}: {wall:.0f} s", file=sys.stderr, flush=True)
    return out, wall


def half_width_pct(summary: Summary | None) -> float | None:
    if summary is None or summary.ci95 is None or not summary.mean:
        return None
    return 100.0 * summary.ci95 / abs(summary.mean)


def describe(run_dir: str, wall: float | None, label: str, sweep: str = "") -> Run:
    """The figures of the sweep in ``run_dir``."""
    records = load_results(run_dir)
    points = tuple(PointWidths(str(a.profile), a.rate_mbit, a.size_bytes, a.goodput.n, half_width_pct(a.goodput),
                               half_width_pct(a.cpu_s_per_gb), half_width_pct(a.cpu_s_per_gb_as_measured),
                               bound_text(a))
                   for a in aggregate(records))
    return Run(sweep, label, run_dir, wall, points, sum(1 for r in records if r.bound is Bound.ANOMALY))


def between_runs(run_dirs: Sequence[str]) -> BetweenRuns | None:
    """Each unsaturated point's CPU per GB across runs: the spread of its means, and how often
    two runs' intervals hold the difference of their means (at common speed and as measured)."""
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
        return None
    return BetweenRuns(len(run_dirs), len(cvs[0]), pairs, (statistics.median(cvs[0]), statistics.median(cvs[1])),
                       (max(cvs[0]), max(cvs[1])), (held[0], held[1]))


def run(args: Options) -> Result:
    """The adaptive sweeps and the fixed one, each run apart and timed (or the run directories given), read."""
    if args.reuse:
        return Result(tuple(describe(d, None, "run") for d in args.reuse), between_runs(args.reuse))
    runs = []
    for i in range(args.runs):
        d, wall = timed_sweep(default_sweep(), f"adaptive sweep {i + 1} of {args.runs}")
        runs.append(describe(d, wall, f"adaptive {i + 1}", "adaptive"))
    if not args.no_fixed:
        d, wall = timed_sweep(default_sweep(**FIXED), "fixed 3 repetitions")
        runs.append(describe(d, wall, "fixed 3 repetitions", "fixed 3"))
    return Result(tuple(runs), between_runs([r.run_dir for r in runs if r.sweep == "adaptive"]))


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def run_text(r: Run, goodput_target: float, cpu_target: float) -> list[str]:
    """One sweep's points, then its wall time, widest and median intervals and the points within the targets."""
    lines = ["", f"{r.label}: {r.run_dir}",
             f"  {'profile':<13}{'rate':>6}{'size':>6}{'n':>3}{'goodput CI %':>14}{'CPU/GB CI %':>13}"
             f"{'as measured':>13}  bound"]
    lines += [f"  {p.profile:<13}{p.rate_mbit:>6g}{p.size_bytes:>6}{p.n:>3}{_pct(p.goodput_pct):>14}"
              f"{_pct(p.cpu_pct):>13}{_pct(p.as_measured_pct):>13}  {p.bound}" for p in r.points]
    g, c = r.widths("goodput_pct"), r.widths("cpu_pct")
    lines += [f"  wall time: {'–' if r.wall_s is None else f'{r.wall_s:.0f} s ({r.wall_s / 60:.1f} min)'}; "
              f"{len(r.points)} points, {r.repetitions} repetitions, {r.anomalies} "
              f"anomal{'y' if r.anomalies == 1 else 'ies'} (left out)",
              f"  goodput CI half-width: median {_pct(_median(g))} %, widest {_pct(max(g, default=None))} %; "
              f"within {goodput_target:g} %: {r.met('goodput_pct', goodput_target)} of {len(r.points)} points"]
    if c:
        lines.append(f"  CPU per GB CI half-width: median {_pct(_median(c))} %, widest {_pct(max(c))} %; "
                     f"within {cpu_target:g} %: {r.met('cpu_pct', cpu_target)} of {len(r.points)} points "
                     f"({r.met('as_measured_pct', cpu_target)} as measured, without the speed probe's adjustment)")
    return lines


def page(args: Options, result: Result) -> str:
    """Every sweep's figures; for sweeps run here, the summary of them side by side; the runs' CPU per GB
    between them."""
    lines = [line for r in result.runs for line in run_text(r, args.precision, args.cpu_precision)]
    if not args.reuse:
        lines += ["", "summary",
                  f"  {'sweep':<10}{'wall s':>8}{'reps':>6}{'anom.':>6}{'goodput CI % med/max':>22}"
                  f"{'CPU/GB CI % med/max':>22}{'CPU within target':>19}{'as measured':>13}"]
        for r in result.runs:
            g, c = r.widths("goodput_pct"), r.widths("cpu_pct")
            lines.append(f"  {r.sweep:<10}{r.wall_s or 0:>8.0f}{r.repetitions:>6}{r.anomalies:>6}"
                         f"{_median(g) or 0:>11.2f} /{max(g, default=0):>8.2f}{_median(c) or 0:>11.2f} /"
                         f"{max(c, default=0):>8.2f}{r.met('cpu_pct', args.cpu_precision):>12} of "
                         f"{len(r.points)}{r.met('as_measured_pct', args.cpu_precision):>13}")
    b = result.between
    if b:
        lines += ["", f"between {b.runs} runs, CPU per GB at the {b.points} points whose CPU was not saturated:"]
        for i, what in enumerate(("at common speed", "as measured")):
            lines.append(f"  {what:<16} median CV of the point's means {100 * b.median_cv[i]:.1f} % (widest "
                         f"{100 * b.widest_cv[i]:.1f} %); pairs of runs within their intervals: {b.held[i]} of "
                         f"{b.pairs}")
        lines.append("  (each run's costs are at its own common speed: the runs' own speeds still differ)")
    return "\n".join(lines).lstrip("\n")


def root(args: Options) -> str:
    """Root to run the sweeps; none to read run directories."""
    return "" if args.reuse else "the sweeps: namespaces, guests"


BENCHMARK = Benchmark("sweep_precision", Options, run, page, root=root)

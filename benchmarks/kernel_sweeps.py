"""Do two UML kernels give the same sweep?  The default sweep on each, point by point.

    sudo ipsec-testbed bench kernel_sweeps [--kernels debian recipe] [--out DIR] [SWEEP ARGS...]
    sudo ipsec-testbed bench kernel_sweeps --reuse DIR_A DIR_B

Runs ``ipsec-testbed sweep`` (its defaults, or the SWEEP ARGS given) once on each
kernel (``--uml-kernel`` words or paths: Debian's, the project's), one after the other, into
DIR/a and DIR/b; or reads two run directories.  Then, for every point: what bounded it on each
kernel (the class most of its repetitions had), its anomalies, and its goodput's mean with 95 %
interval on each; the two agree when each mean lies within the other's interval.  The last
lines count the points whose class differs, the anomalies, and the points whose means disagree.
For the paired, interleaved comparison of two kernels use `ipsec-testbed regress --ab`.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
import time

from analysis.stats import Aggregate, Summary, aggregate
from experiments.benchmark import Benchmark, front_door, option
from testbed import kernelsource, rundir
from testbed.errors import Refused
from testbed.record import Bound


@dataclasses.dataclass(frozen=True)
class Options:
    """The two kernels and the sweep's options, or two run directories; checked on construction."""

    kernels: tuple[str, ...] = option(("debian", "recipe"), "the two kernels, as --uml-kernel takes them (default: "
                                      "debian recipe)", nargs=2, metavar=("A", "B"), show_default=False)
    # not `out`: no run directory of the benchmark's own (ipsec-testbed bench would make runs/<date>-bench-...)
    out_dir: str | None = option(None, "where DIR/a and DIR/b go (default: a new temporary directory)",
                                 flag="--out", metavar="DIR")
    reuse: tuple[str, ...] = option((), "compare two run directories, run nothing", nargs=2,
                                    metavar=("DIR_A", "DIR_B"))
    sweep_args: tuple[str, ...] = option((), "the sweep's own options (ipsec-testbed sweep --help), given to it on "
                                    "both kernels", metavar="SWEEP ARGS", rest=True)

    def __post_init__(self) -> None:
        if self.reuse:
            for d in self.reuse:
                if not os.path.isdir(d):
                    raise ValueError(f"--reuse must name two run directories; {d} is none")
            return
        if len(self.kernels) != 2:
            raise ValueError(f"--kernels must be two kernels, not {' '.join(self.kernels)}")
        for kernel in self.kernels:
            try:
                kernelsource.parse(kernel)
            except kernelsource.KernelNameError as e:
                raise ValueError(f"--kernels: {e}") from None


def sweep(kernel: str, out_dir: str, args: tuple[str, ...]) -> float:
    """The sweep with the user's options ``args`` on ``kernel`` into ``out_dir``, run as the user would (the
    front door: the options are theirs to give, and the sweep's own parser reads them); its wall time.  Its
    output goes to stderr with the progress, so that stdout is the page."""
    words = ["sweep", "--kernel", "uml", "--uml-kernel", kernel, *args, "--out", out_dir, "--no-report"]
    print(f"$ ipsec-testbed {' '.join(words)}", file=sys.stderr, flush=True)
    started = time.monotonic()
    rc = subprocess.run([*front_door(), *words], stdin=subprocess.DEVNULL, stdout=sys.stderr).returncode
    if rc != 0:
        raise Refused(f"the sweep on {kernel} failed (exit {rc})")
    return time.monotonic() - started


@dataclasses.dataclass(frozen=True)
class Run:
    """One side's run directory and the kernel its meta.json names."""

    name: str  # A or B
    run_dir: str
    kernel_origin: str | None
    kernel_version: str | None
    kernel_path: str | None


@dataclasses.dataclass(frozen=True)
class Side:
    """A point on one kernel: what bounded most of its repetitions, its anomalies, its goodput (Mbit/s)."""

    bound: Bound | None
    anomalies: int
    goodput: Summary

    @classmethod
    def of(cls, a: Aggregate | None) -> Side | None:
        return None if a is None else cls(a.bound, a.n_anomaly, a.goodput)


@dataclasses.dataclass(frozen=True)
class Compared:
    """One point on both kernels (None: not in that run)."""

    profile: str
    rate_mbit: float
    size_bytes: int
    a: Side | None
    b: Side | None

    @property
    def agree(self) -> str:
        """``yes`` when each mean lies within the other's interval, ``overlap`` when the intervals overlap, else
        ``NO`` (a point in one run only too)."""
        if self.a is None or self.b is None:
            return "NO"
        ga, gb = self.a.goodput, self.b.goodput
        if ga.ci95 is None or gb.ci95 is None:
            return "NO"
        apart = abs(ga.mean - gb.mean)
        return "yes" if apart <= ga.ci95 and apart <= gb.ci95 else "overlap" if apart <= ga.ci95 + gb.ci95 else "NO"


@dataclasses.dataclass(frozen=True)
class Result:
    """The two runs compared point by point; the kernels and each sweep's wall time where they were run here."""

    runs: tuple[Run, Run]
    points: tuple[Compared, ...]
    kernels: tuple[str, ...] = ()
    seconds: tuple[float, ...] = ()
    out_dir: str = ""

    @property
    def differ(self) -> int:
        """Points whose bound class differs."""
        return sum(p.a.bound != p.b.bound for p in self.points if p.a and p.b)

    @property
    def anomalies(self) -> int:
        return sum(p.a.anomalies + p.b.anomalies for p in self.points if p.a and p.b)

    @property
    def disagree(self) -> int:
        """Points whose goodput intervals are apart, or that are in one run only."""
        return sum(p.agree == "NO" for p in self.points)


def compare(dir_a: str, dir_b: str) -> tuple[tuple[Run, Run], tuple[Compared, ...]]:
    """The two run directories' points side by side, ordered by rate, size and profile."""
    runs = []
    for name, d in zip("AB", (dir_a, dir_b), strict=True):
        meta = rundir.read_meta(d)
        runs.append(Run(name, d, meta.kernel_origin, meta.kernel_version, meta.kernel_path))
    points = [{(a.profile, a.rate_mbit, a.size_bytes): a for a in aggregate(rundir.load_existing(d))}
              for d in (dir_a, dir_b)]
    keys = sorted(set(points[0]) | set(points[1]), key=lambda k: (k[1], k[2], k[0]))
    return (runs[0], runs[1]), tuple(Compared(*k, Side.of(points[0].get(k)), Side.of(points[1].get(k))) for k in keys)


def run(args: Options) -> Result:
    """The sweep on each kernel in turn, then the comparison; or, with --reuse, the comparison alone."""
    if args.reuse:
        return Result(*compare(*args.reuse))
    out = args.out_dir or tempfile.mkdtemp(prefix="itb-kernel-sweeps-")
    times = tuple(sweep(kernel, os.path.join(out, label), args.sweep_args)
                  for kernel, label in zip(args.kernels, "ab", strict=True))
    return Result(*compare(os.path.join(out, "a"), os.path.join(out, "b")), args.kernels, times, out)


def _ci(s: Summary) -> str:
    return f"{s.mean:8.3f} ± {s.ci95:6.3f} (n={s.n:2d})" if s.ci95 is not None else f"{s.mean:8.3f}"


def page(args: Options, result: Result) -> str:
    """Each run's kernel, then every point on both (class, anomalies, goodput), then the counts."""
    lines = []
    if result.kernels:
        lines += [f"A = {result.kernels[0]} ({result.seconds[0]:.0f} s), B = {result.kernels[1]} "
                  f"({result.seconds[1]:.0f} s), run directories {result.out_dir}"]
    for r in result.runs:
        kernel = {"kernel_origin": r.kernel_origin, "kernel_version": r.kernel_version, "kernel_path": r.kernel_path}
        lines.append(f"{r.name}: {r.run_dir} {kernel}")
    lines += ["", f"{'point':34s} {'class A':>8s} {'class B':>8s} {'anom':>5s}  {'goodput A (Mbit/s)':>22s}  "
              f"{'goodput B (Mbit/s)':>22s}  B/A     agree"]
    for p in result.points:
        if p.a is None or p.b is None:
            lines.append(f"{(p.profile, p.rate_mbit, p.size_bytes)}: only in {'B' if p.a is None else 'A'}")
            continue
        ga, gb = p.a.goodput, p.b.goodput
        label = f"{p.profile:12s} {p.rate_mbit:6g} Mbit/s  {p.size_bytes:5d} B"
        lines.append(f"{label:34s} {p.a.bound or '-':>8s} {p.b.bound or '-':>8s} {p.a.anomalies + p.b.anomalies:5d}  "
                     f"{_ci(ga):>22s}  {_ci(gb):>22s}  {gb.mean / ga.mean:6.4f}  {p.agree}")
    lines += ["", f"{len(result.points)} points: {result.differ} with a different bound class, {result.anomalies} "
              f"anomalous repetitions; goodput intervals apart at {result.disagree} (each mean within the other's "
              "interval, or the intervals overlapping, at the others)"]
    return "\n".join(lines)


# No root of its own: --reuse reads files, and each sweep refuses a missing root itself (in one line), as before.
BENCHMARK = Benchmark("kernel_sweeps", Options, run, page)

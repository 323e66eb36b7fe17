"""The sweep's own overhead and the spread of its repetitions.

    sudo ipsec-testbed bench sweep_overhead                  # runs the default sweep
    sudo ipsec-testbed bench sweep_overhead -- --rates 10    # sweep options after --

Runs `ipsec-testbed sweep` as a user would, with the options given after -- (booting UML when
the host kernel has no ESP), into a fresh directory and without its report, and prints:

- wall time against the sum of every point's warm-up and window: the rest is the
  testbed's overhead (network builds, IPsec switching, process starts, a guest's boot),
  also given net of one guest run of `true` (boot and power-off);
- where the time between one window's start and the next went, phase by phase (each record's ``phases_s``:
  IPsec switched, the unloaded reference and its flood, the clients started, the warm-up, the window, the test
  stopped and wound up, the record built; ``experiments.engine.phases``), and the median time between window
  starts against the target of 2.5 s;
- per point, the spread across repetitions (coefficient of variation of goodput).

    ipsec-testbed bench sweep_overhead --from RUN_DIR      # the same for a sweep already run (no root)
"""
from __future__ import annotations

import collections
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

from experiments.benchmark import Benchmark, front_door, option
from experiments.engine import phases
from testbed import backends, rundir
from testbed.errors import Refused
from testbed.record import Record

#: The time between window starts the default sweep should keep to (issue 60): 2 s windows, 0.3 s warm-ups.
GAP_TARGET_S = 2.5


@dataclasses.dataclass(frozen=True)
class Options:
    """The sweep's own options, or a sweep already run; checked on construction."""

    sweep_args: tuple[str, ...] = option((), "options for ipsec-testbed sweep (after --)", positional=True,
                                         nargs="*")
    run_dir: str | None = option(None, "say where the time went in a sweep already run, instead of running one",
                                 flag="--from", metavar="RUN_DIR")

    def __post_init__(self) -> None:
        if self.run_dir is not None and not os.path.isdir(self.run_dir):
            raise ValueError(f"--from must be a sweep's run directory, not {self.run_dir}")
        if self.run_dir is not None and self.sweep_args:
            raise ValueError(f"--from reads a sweep already run, so takes no sweep options, not "
                             f"{' '.join(self.sweep_args)}")


@dataclasses.dataclass(frozen=True)
class Phase:
    """One phase of the time between window starts, over the points that say where their time went."""

    name: str
    median_s: float
    mean_s: float
    max_s: float
    share: float  # of all the points' time


@dataclasses.dataclass(frozen=True)
class Phases:
    """Where the time between window starts went: the gaps between them, and each phase of the points' time
    (``outside`` last: all but the warm-up and the window)."""

    gaps_s: tuple[float, ...]
    points: int  # the records with phases_s
    total_s: float
    phases: tuple[Phase, ...]


@dataclasses.dataclass(frozen=True)
class Overhead:
    """A sweep run now: its wall time against its warm-ups and windows, and a guest's boot on its kernel."""

    kernel: str  # the run's kernel, for people
    wall_s: float
    points: int
    measured_s: float  # every point's warm-up and window
    ahead: int  # points whose clients were started during the previous point's warm-up
    boot_s: float  # one guest run of `true` (0: the sweep ran on this kernel)
    guest: str  # that guest's name


@dataclasses.dataclass(frozen=True)
class Spread:
    """One point's goodput across its repetitions."""

    profile: str
    rate_mbit: float
    size_bytes: int
    mean: float
    stdev: float
    cv_pct: float
    n: int


@dataclasses.dataclass(frozen=True)
class Result:
    """The sweep's run directory and where its time went; for a sweep run now, its overhead and each point's
    spread too."""

    run_dir: str
    phases: Phases
    overhead: Overhead | None = None
    spread: tuple[Spread, ...] = ()


def boot_s(backend) -> float:
    """Wall time of a trivial command on ``backend`` (a guest's boot and power-off), median of 3."""
    from experiments.doctor import kernel_modules

    if backend.runs_here:
        return 0.0
    times = []
    for _ in range(3):
        t0 = time.monotonic()
        backend.run(["true"], modules=kernel_modules())
        times.append(time.monotonic() - t0)
    return statistics.median(times)


def gaps_s(records: Sequence[Record]) -> list[float]:
    """The seconds between successive windows' starts."""
    starts = sorted(r.window_start_unix for r in records if r.window_start_unix is not None)
    return [b - a for a, b in zip(starts, starts[1:], strict=False)]


def where_time_went(records: Sequence[Record]) -> Phases:
    """The gaps between window starts and each phase of the records' ``phases_s`` (pure)."""
    timed = [r.phases_s for r in records if r.phases_s]
    total = sum(sum(t.values()) for t in timed)
    rows = []
    for name in sorted({p for t in timed for p in t}, key=phases.place):
        rows.append(_phase(name, [t.get(name, 0.0) for t in timed], total))
    if timed:
        rows.append(_phase("outside", [phases.outside(t) for t in timed], total))
    return Phases(tuple(gaps_s(records)), len(timed), total, tuple(rows))


def _phase(name: str, each: list[float], total: float) -> Phase:
    return Phase(name, statistics.median(each), statistics.mean(each), max(each), sum(each) / total)


def spread(records: Sequence[Record]) -> tuple[Spread, ...]:
    """Each point's goodput across its repetitions: mean, standard deviation, coefficient of variation (pure)."""
    groups = collections.defaultdict(list)
    for r in records:
        groups[(r.profile, r.rate_mbit, r.size_bytes, r.ip_version, r.transport)].append(r.goodput_mbps)
    rows = []
    for (profile, rate, size, _ipv, _tr), vals in sorted(groups.items()):
        mean = statistics.mean(vals)
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
        rows.append(Spread(profile, rate, size, mean, sd, 100 * sd / mean if mean else 0.0, len(vals)))
    return tuple(rows)


def records_of(run_dir: str) -> list[Record]:
    """The sweep records of ``run_dir``; refused when it holds none."""
    records = rundir.load_results(run_dir)
    if not records:
        raise Refused(f"{run_dir} holds no sweep records")
    return records


def run(args: Options) -> Result:
    """The sweep run as a user runs it, with their options, timed whole (or a sweep already run, read)."""
    if args.run_dir:
        return Result(args.run_dir, where_time_went(records_of(args.run_dir)))
    out = tempfile.mkdtemp(prefix="itb-bench-sweep-")
    # the user's own sweep options, read by the sweep's parser: the command as they would run it, timed whole
    words = ["sweep", *args.sweep_args, "--out", out, "--no-report"]
    print(f"running: ipsec-testbed {' '.join(words)}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    rc = subprocess.run([*front_door(), *words], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL).returncode
    wall = time.monotonic() - t0
    if rc != 0:
        raise Refused(f"the sweep failed (exit {rc}); its directory: {out}")
    records, meta = records_of(out), rundir.read_meta(out)
    backend = backends.get(meta.backend, backends.Options(kernel=meta.kernel_path, crypto=meta.qemu_crypto)) \
        if meta.backend in backends.names() else None
    print(f"backend: {meta.kernel_label()}; timing a guest's boot ...", file=sys.stderr, flush=True)
    boot = boot_s(backend) if backend else 0.0
    overhead = Overhead(meta.kernel_label(), wall, len(records), sum(r.duration_s + r.warmup_s for r in records),
                        sum(bool(r.clients_ahead) for r in records), boot, backend.title if backend else "")
    return Result(out, where_time_went(records), overhead, spread(records))


def page(args: Options, result: Result) -> str:
    """The overhead of a sweep run now, where the time between window starts went, and the spread of each point."""
    lines = []
    o = result.overhead
    if o:
        lost = o.wall_s - o.measured_s
        lines += [f"backend: {o.kernel}",
                  f"points: {o.points}; wall time {o.wall_s:.1f} s; warm-ups and windows {o.measured_s:.1f} s "
                  f"({o.points} x (warm-up + window))",
                  f"points whose iperf3 clients were started during the previous point's warm-up: {o.ahead} of "
                  f"{o.points} (the others paid for starting them)",
                  f"testbed overhead: {lost:.1f} s = {100 * lost / o.measured_s:.1f}% of the measurement time"]
        if o.boot_s:
            net = lost - o.boot_s
            lines.append(f"one {o.guest} run of `true` (measured now): {o.boot_s:.2f} s; overhead beyond it: "
                         f"{net:.1f} s = {100 * net / o.measured_s:.1f}% (target <= 15%: "
                         f"{'MET' if net <= 0.15 * o.measured_s else 'NOT MET'})")
    lines += phases_text(result.phases)
    if o:
        lines += ["", f"{'profile':>14s} {'Mbit/s':>7s} {'size':>5s}  {'mean':>8s} {'stdev':>7s} {'CV %':>6s}  n"]
        lines += [f"{s.profile:>14s} {s.rate_mbit:7g} {s.size_bytes:5d}  {s.mean:8.2f} {s.stdev:7.3f} "
                  f"{s.cv_pct:6.2f}  {s.n}" for s in result.spread]
        cvs = [s.cv_pct for s in result.spread]
        if cvs:
            lines += ["", f"spread across repetitions: median CV {statistics.median(cvs):.2f}%, max {max(cvs):.2f}%"]
        lines.append(f"run directory: {result.run_dir}")
    return "\n".join(lines)


def phases_text(p: Phases) -> list[str]:
    """Where the time between window starts went, phase by phase, and the median time between window starts
    against :data:`GAP_TARGET_S`."""
    lines = []
    if p.gaps_s:
        median = statistics.median(p.gaps_s)
        lines.append(f"between window starts: median {median:.2f} s (min {min(p.gaps_s):.2f}, max "
                     f"{max(p.gaps_s):.2f}) over {len(p.gaps_s)}; target <= {GAP_TARGET_S} s: "
                     f"{'MET' if median <= GAP_TARGET_S else 'NOT MET'}")
    if not p.points:
        return [*lines, "no record says where its time went (phases_s: sweeps since the phases were kept)"]
    lines += ["", f"where a point's time went ({p.points} points, {p.total_s:.1f} s; median and mean per point, "
              "share of all):", f"{'phase':>10s} {'median s':>9s} {'mean s':>7s} {'max s':>6s} {'share':>6s}"]
    for ph in p.phases:
        lines.append(f"{ph.name:>10s} {ph.median_s:9.3f} {ph.mean_s:7.3f} {ph.max_s:6.2f} {100 * ph.share:5.1f}%"
                     + ("  (all but the warm-up and the window)" if ph.name == "outside" else ""))
    return lines


def root(args: Options) -> str:
    """Root to run the sweep; none to read one already run."""
    return "" if args.run_dir else "the sweep: namespaces, guests"


BENCHMARK = Benchmark("sweep_overhead", Options, run, page, root=root)

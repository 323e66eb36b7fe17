"""Is this machine quiet enough for precise CPU costs?  The spread of one point's CPU, taken apart.

    sudo ipsec-testbed bench cpu_noise                        # 10 Mbit/s, MSS 1000, 15 repetitions
    sudo ipsec-testbed bench cpu_noise --rate 10 --size 250 --repetitions 30

Runs the packet-size sweep (``ipsec-testbed sweep``, booting User-Mode Linux when
the host kernel has no ESP, as ``./run sweep`` does) on one size and one rate, plain and
--profile, a fixed number of repetitions, and, on the host beside it, samples the guest's
cpuacct cgroup every 50 ms: its CPU nanoseconds and, from ``/proc/PID/schedstat`` of its
processes, how many times the host put them on a CPU (timeslices).  In User-Mode Linux
every guest system call, page fault and context switch is a host context switch, so the
timeslices count the guest's work independently of how fast the CPU ran it.

Per point it prints the coefficient of variation (CV) between repetitions of the packets the
shaper sent, of the guest's host timeslices, of its CPU seconds, and of the CPU per timeslice,
and how many repetitions a point with that CPU spread needs for a 95 % confidence interval
within --cpu-precision of its mean (what the default sweep's extra repetitions must buy
within its time budget).  When the packets and timeslices repeat closely but the CPU per
timeslice does not, the same work cost different CPU time: the spread is the machine's,
not the testbed's.  Where a speed probe timed each window on a spare host CPU
(testbed.speedprobe) it also prints the probe's CV, its correlation with the CPU per GB,
and the CPU per GB's CV at the run's common speed (what the sweep's precision is judged
on): when the probe tracks the machine, that CV is the smaller.  Exit status 0 when it ran.

Run it on an otherwise idle machine: anything else on the guest's CPU adds to the spread it measures.
"""
from __future__ import annotations

import dataclasses
import glob
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence

from analysis.stats import at_common_speed, repetitions_for
from experiments import runner
from experiments.benchmark import Benchmark, check_profiles_and_rate, option
from experiments.engine.plan import MAX_REPETITIONS, SweepSpec, default_sweep, describe_changes
from testbed.backends.umlmeter import CPUACCT_ROOT as CPUACCT
from testbed.errors import Refused
from testbed.record import Record, usable
from testbed.rundir import load_results

EVERY_S = 0.05
#: What the sweep's job says it was started by (meta.json, the history).
COMMAND = ("ipsec-testbed", "bench", "cpu_noise")


@dataclasses.dataclass(frozen=True)
class Options:
    """The point whose spread is taken apart; checked on construction."""

    rate: float = option(10.0, "the shaped link's rate in Mbit/s", metavar="MBIT")
    size: int = option(1000, "the TCP MSS", metavar="BYTES")
    profile: str = option("aes-gcm-256", "the IPsec profile measured beside the plain baseline")
    repetitions: int = option(15, "repetitions of each point, at least 3", metavar="N")
    cpu_precision: float = option(default_sweep().cpu_precision_pct, "the target the repetitions needed are "
                                  "counted for, as the sweep's --cpu-precision", metavar="PERCENT")

    def __post_init__(self) -> None:
        check_profiles_and_rate((self.profile,), self.rate, "--profile")
        if not 88 <= self.size <= 1460:
            raise ValueError(f"--size must be a TCP MSS in 88..1460 (IPv4 at MTU 1500), not {self.size}")
        if not 3 <= self.repetitions <= MAX_REPETITIONS:
            raise ValueError(f"--repetitions must be 3..{MAX_REPETITIONS} (at least 3 for a spread to mean "
                             f"something), not {self.repetitions}")
        if not 0 < self.cpu_precision <= 100:
            raise ValueError(f"--cpu-precision must be a percentage in (0, 100], not {self.cpu_precision:g}")
        self.sweep()  # what the sweep itself refuses, before anything runs

    def sweep(self) -> SweepSpec:
        """One size and one rate, plain and --profile, exactly --repetitions of each."""
        return default_sweep(rates_mbit=(self.rate,), sizes=(self.size,), profiles=(self.profile,),
                             repetitions=self.repetitions, max_repetitions=self.repetitions)


class GuestSampler(threading.Thread):
    """On the host: the newest testbed guest's CPU ns and its processes' timeslices so far, every 50 ms.

    Processes come and go (every guest process is a host process), so the timeslices are
    summed as each process's increments since the previous sample; a process first seen
    counts from there."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, int, int]] = []  # (wall time, CPU ns, timeslices so far)
        self.cgroup: str | None = None
        self.done = threading.Event()

    def run(self) -> None:
        allowed = sorted(os.sched_getaffinity(0))
        if len(allowed) > 1:  # this thread only, off the CPU the guest is pinned to (uml.guest_cpu)
            os.sched_setaffinity(0, allowed[:-1])
        before = set(glob.glob(f"{CPUACCT}/itb-*"))
        seen: dict[int, int] = {}
        slices = 0
        while not self.done.wait(EVERY_S):
            if self.cgroup is None:
                new = set(glob.glob(f"{CPUACCT}/itb-*")) - before
                if not new:
                    continue
                self.cgroup = new.pop()
            try:
                with open(f"{self.cgroup}/cpuacct.usage") as f:
                    cpu_ns = int(f.read())
                with open(f"{self.cgroup}/tasks") as f:
                    pids = [int(p) for p in f.read().split()]
            except (OSError, ValueError):
                continue
            now: dict[int, int] = {}
            for pid in pids:
                try:
                    with open(f"/proc/{pid}/schedstat") as f:
                        now[pid] = int(f.read().split()[2])
                except (OSError, ValueError, IndexError):
                    pass
            slices += sum(n - seen[p] for p, n in now.items() if p in seen and n >= seen[p])
            seen = now
            self.samples.append((time.time(), cpu_ns, slices))

    def over(self, t0: float, t1: float) -> tuple[float, float] | None:
        """CPU seconds and timeslices between the samples nearest ``t0`` and ``t1``, scaled to ``t1 - t0``."""
        inside = [s for s in self.samples if t0 - EVERY_S <= s[0] <= t1 + EVERY_S]
        if len(inside) < 2:
            return None
        a = min(inside, key=lambda s: abs(s[0] - t0))
        b = min(inside, key=lambda s: abs(s[0] - t1))
        if b[0] <= a[0]:
            return None
        scale = (t1 - t0) / (b[0] - a[0])
        return (b[1] - a[1]) / 1e9 * scale, (b[2] - a[2]) * scale


def cv(values: list[float]) -> float:
    """Coefficient of variation (sample standard deviation over the mean)."""
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if len(values) > 1 and mean else float("nan")


def correlation(xs: list[float], ys: list[float]) -> float:
    try:
        return statistics.correlation(xs, ys)
    except statistics.StatisticsError:  # fewer than two values, or one series constant
        return float("nan")


@dataclasses.dataclass(frozen=True)
class Repetition:
    """One repetition with host samples over its window: the record's figures and the guest's host timeslices."""

    packets: float
    cpu_s: float
    timeslices: float
    speed_probe_ns: float | None
    cpu_s_per_gb: float | None  # at the run's common speed
    cpu_s_per_gb_measured: float | None

    @property
    def measured_per_gb(self) -> float | None:
        """The CPU per GB as measured (before the common speed)."""
        return self.cpu_s_per_gb if self.cpu_s_per_gb_measured is None else self.cpu_s_per_gb_measured


@dataclasses.dataclass(frozen=True)
class Point:
    """A point's repetitions that had host samples over their windows."""

    profile: str
    rate_mbit: float
    size_bytes: int
    repetitions: tuple[Repetition, ...]

    @property
    def label(self) -> str:
        return f"{self.profile} {self.rate_mbit:g} Mbit/s {self.size_bytes} B"


@dataclasses.dataclass(frozen=True)
class Result:
    """The sweep (its changes from the default sweep, its directory), the host's samples, and each point."""

    sweep: str
    out: str
    cgroup: str | None
    samples: int
    repetitions: int  # usable repetitions of the sweep, sampled or not
    points: tuple[Point, ...]


def points_of(records: Sequence[Record], over: Callable[[float, float], tuple[float, float] | None]
              ) -> tuple[Point, ...]:
    """``records`` grouped by point, each with the timeslices ``over`` (:meth:`GuestSampler.over`) gives its
    window; a repetition without samples there is left out."""
    points: dict[tuple, list[Repetition]] = {}
    for rec in records:
        got = over(rec.window_start_unix, rec.window_start_unix + rec.window_s)
        if got is not None and got[1] > 0:
            points.setdefault((rec.profile, rec.rate_mbit, rec.size_bytes), []).append(Repetition(
                float(rec.link_packets), rec.cpu_s, got[1], rec.speed_probe_ns, rec.cpu_s_per_gb,
                rec.cpu_s_per_gb_measured))
    return tuple(Point(*key, tuple(reps)) for key, reps in sorted(points.items()))


def page(args: Options, result: Result) -> str:
    """Per point the spreads taken apart, then the speed probe's where it timed every window."""
    target = args.cpu_precision
    lines = [f"sweep: {result.sweep}, into {result.out}",
             f"guest cgroup: {result.cgroup}; {result.samples} samples, {result.repetitions} repetitions"]
    if not result.points:
        lines.append("no repetition had host samples over its window (did the sweep run in a guest?)")
        return "\n".join(lines)
    lines.append(f"{'point':<30}{'n':>3}{'packets CV':>11}{'timeslices':>11}{'CV':>6}{'CPU s':>7}{'CV':>6}"
                 f"{'CPU/slice':>10}{'CV':>6}{'corr':>6}{'reps for ' + format(target, 'g') + ' %':>15}")
    for point in result.points:
        rows = point.repetitions
        if len(rows) < 3:
            lines.append(f"{point.label}: {len(rows)} repetitions with host samples, too few")
            continue
        packets = [r.packets for r in rows]
        cpu = [r.cpu_s for r in rows]
        slices = [r.timeslices for r in rows]
        per_slice = [c / s for c, s in zip(cpu, slices, strict=True)]
        need = repetitions_for(cv(cpu), target / 100)
        lines.append(f"{point.label:<30}{len(rows):>3}{100 * cv(packets):>10.2f}%"
                     f"{statistics.fmean(slices):>11.0f}{100 * cv(slices):>5.1f}%{statistics.fmean(cpu):>7.3f}"
                     f"{100 * cv(cpu):>5.1f}%{1e6 * statistics.fmean(per_slice):>8.1f}µs{100 * cv(per_slice):>5.1f}%"
                     f"{correlation(cpu, slices):>6.2f}{need if need else '> 50':>15}")
    probed = [p for p in result.points if all(r.speed_probe_ns for r in p.repetitions)]
    if probed:
        lines.append(f"\n{'point':<30}{'probe CV':>9}{'corr':>6}{'CPU/GB CV':>10}{'at common speed':>16}"
                     f"{'reps for ' + format(target, 'g') + ' %':>15}")
        for point in probed:
            rows = point.repetitions
            if len(rows) < 3:
                continue
            probe = [r.speed_probe_ns for r in rows]
            measured = [r.measured_per_gb for r in rows]
            common = [r.cpu_s_per_gb for r in rows]
            need = repetitions_for(cv(common), target / 100)
            lines.append(f"{point.label:<30}{100 * cv(probe):>8.1f}%"
                         f"{correlation(probe, measured):>6.2f}{100 * cv(measured):>9.1f}%{100 * cv(common):>15.1f}%"
                         f"{need if need else '> 50':>15}")
        lines.append("probe: the speed probe's ns per operation over each window; corr: its correlation with the "
                     "CPU per GB")
    lines.append("CV: standard deviation over the mean between repetitions; timeslices: times the host ran the "
                 "guest's processes in the window; corr: correlation of CPU s with timeslices; reps: what a 95 % CI "
                 "of the CPU within the target takes at this spread")
    return "\n".join(lines)


def run(args: Options) -> Result:
    """The sweep, in a process of its own, with the guest sampled on the host beside it."""
    out = tempfile.mkdtemp(prefix="itb-bench-cpunoise-")
    spec = args.sweep()
    said = describe_changes(spec)
    print(f"sweep: {said}, into {out}", file=sys.stderr, flush=True)
    sampler = GuestSampler()
    sampler.start()
    try:
        rc = runner.sweep_apart(spec, out, command=COMMAND)
    finally:
        sampler.done.set()
        sampler.join()
    if rc:
        raise Refused(f"the sweep failed (exit {rc}); its directory: {out}")
    records = [r for r in at_common_speed(load_results(out)) if usable(r)]
    return Result(said, out, sampler.cgroup, len(sampler.samples), len(records), points_of(records, sampler.over))


BENCHMARK = Benchmark("cpu_noise", Options, run, page, root="namespaces, the host's cgroup and /proc files",
                      status=lambda result: 0 if result.points else 1)

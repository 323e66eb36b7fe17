"""Does each CPU of this machine run at one speed, and does one CPU's speed tell another's?

    ipsec-testbed bench cpu_speed                    # 60 s, 1-s bins, every CPU this process may use
    ipsec-testbed bench cpu_speed --seconds 120 --work arith

The same fixed work runs on every CPU at once, one process pinned to each, counted in bins of ``--bin``
seconds: by default the speed probe's operation (:mod:`testbed.speedprobe`: pipe round trips between two
processes on the CPU and fresh pages faulted in, the kind of work a User-Mode Linux guest makes of every
system call), or with ``--work arith`` a loop of arithmetic alone.  Nothing else should run meanwhile: it keeps
every CPU busy, and a figure is only the machine's while nothing else measures.

Per CPU it prints the operations per second, their coefficient of variation (CV) between bins, the slowest
and the fastest bin against the mean, and how long the speed stayed on one side of its median (the median run,
in seconds: a machine whose speed moves in runs of seconds needs windows much longer than that, or many of
them, before a mean settles).  Then the correlation between each two CPUs' bins: a guest is pinned to the last
CPU (:func:`testbed.backends.uml.guest_cpu`) and the speed probe times the first spare one, so the probe can
put a guest's CPU costs at one speed only as far as that correlation goes.  Exit status 0 when it ran.
"""
from __future__ import annotations

import dataclasses
import itertools
import multiprocessing
import os
import signal
import statistics
import sys
import time
from collections.abc import Sequence

from experiments.benchmark import Benchmark, option

#: Above this correlation between two CPUs' bins, one CPU's speed is taken to tell the other's.
TRACKS = 0.7
WORKS = ("switches", "arith")


@dataclasses.dataclass(frozen=True)
class CpuSpeed:
    """One CPU's bins, summarised."""

    cpu: int
    per_s: float  # operations per second, the mean over the bins
    cv_pct: float  # between bins
    slowest: float  # the slowest bin over the mean
    fastest: float
    run_s: float  # median length of a run of bins on one side of the median, in seconds


def summarise(cpu: int, counts: Sequence[int], bin_s: float) -> CpuSpeed:
    """A :class:`CpuSpeed` from one CPU's operations per bin (pure)."""
    if len(counts) < 2:
        raise ValueError(f"CPU {cpu}: {len(counts)} bins; a spread needs two")
    mean = statistics.fmean(counts)
    if mean <= 0:
        raise ValueError(f"CPU {cpu}: no operation completed")
    middle = statistics.median(counts)
    runs = [len(list(run)) for _, run in itertools.groupby(c >= middle for c in counts)]
    return CpuSpeed(cpu, mean / bin_s, 100 * statistics.stdev(counts) / mean, min(counts) / mean,
                    max(counts) / mean, statistics.median(runs) * bin_s)


def correlation(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Pearson's correlation of two equally long series (pure); None when either does not vary."""
    n = min(len(a), len(b))
    if n < 3:
        raise ValueError(f"a correlation needs three bins or more, not {n}")
    try:
        return statistics.correlation(a[:n], b[:n])
    except statistics.StatisticsError:  # one series constant
        return None


def _arith() -> None:
    x = 0
    for i in range(2000):
        x += i * i


def _worker(cpu: int, work: str, start: float, bins: int, bin_s: float, out) -> None:
    """On ``cpu``: ``work`` until ``start + bins * bin_s`` (monotonic), the operations of each bin sent to ``out``."""
    from testbed import speedprobe

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it ends the workers
    os.sched_setaffinity(0, {cpu})
    if work == "switches":
        to_partner, from_partner = speedprobe.partner()  # on the same CPU

        def one() -> None:
            speedprobe.operation(to_partner, from_partner)
    else:
        one = _arith
    counts = [0] * bins
    while time.monotonic() < start:
        time.sleep(0.001)
    end = start + bins * bin_s
    while True:
        one()
        now = time.monotonic()
        if now >= end:
            break
        counts[int((now - start) / bin_s)] += 1
    out.send(counts)
    out.close()


def measure(cpus: Sequence[int], work: str, seconds: float, bin_s: float) -> dict[int, list[int]]:
    """Every CPU's operations per bin, all of them working at once."""
    bins = max(2, round(seconds / bin_s))
    ctx = multiprocessing.get_context("fork")
    start = time.monotonic() + 0.5  # every worker started and pinned before the first bin opens
    pipes, procs = {}, []
    try:
        for cpu in cpus:
            mine, theirs = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_worker, args=(cpu, work, start, bins, bin_s, theirs), daemon=True)
            p.start()
            theirs.close()
            pipes[cpu] = mine
            procs.append(p)
        got = {cpu: pipe.recv() for cpu, pipe in pipes.items()}
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join()
    return got


@dataclasses.dataclass(frozen=True)
class Options:
    """What to time, and for how long; checked on construction."""

    seconds: float = option(60.0, "how long")
    bin: float = option(1.0, "each bin", metavar="SECONDS")
    work: str = option("switches", "switches: the speed probe's operation (default); arith: arithmetic alone",
                       choices=WORKS, show_default=False)
    cpus: tuple[int, ...] | None = option(None, "the CPUs (default: every one this process may use)", metavar="N,...")

    def __post_init__(self) -> None:
        if self.work not in WORKS:
            raise ValueError(f"--work must be one of {', '.join(WORKS)}, not {self.work!r}")
        if self.cpus is not None:
            allowed = sorted(os.sched_getaffinity(0))
            if not set(self.cpus) <= set(allowed) or len(set(self.cpus)) != len(self.cpus):
                raise ValueError(f"--cpus must name each CPU once, among those this process may use "
                                 f"({','.join(map(str, allowed))}), not {','.join(map(str, self.cpus))}")
        if not 0.05 <= self.bin <= 60:
            raise ValueError(f"--bin must be 0.05..60 s, not {self.bin:g}")
        if not 3 * self.bin <= self.seconds <= 3600:
            raise ValueError(f"--seconds must be 3 bins ({3 * self.bin:g} s) to 3600 s, not {self.seconds:g}")


@dataclasses.dataclass(frozen=True)
class Pair:
    """Two CPUs' bins against each other: their correlation, None when either does not vary."""

    a: int
    b: int
    r: float | None


@dataclasses.dataclass(frozen=True)
class Result:
    """The kernel it ran on, every CPU's speed and every pair's correlation; ``interrupted``: nothing measured."""

    release: str = ""
    speeds: tuple[CpuSpeed, ...] = ()
    pairs: tuple[Pair, ...] = ()
    interrupted: bool = False


def heading(args: Options, cpus: int, release: str) -> str:
    """What is timed, on how many CPUs of which kernel: said as it starts and above the table."""
    return (f"{cpus} CPU(s) ({release}); {args.work} on each at once, {args.seconds:g} s in bins of "
            f"{args.bin:g} s")


def run(args: Options) -> Result:
    """Every CPU's bins, all of them working at once, summarised."""
    cpus = list(args.cpus or sorted(os.sched_getaffinity(0)))
    release = os.uname().release
    print(heading(args, len(cpus), release), file=sys.stderr, flush=True)
    try:
        got = measure(cpus, args.work, args.seconds, args.bin)
    except KeyboardInterrupt:
        print("cpu_speed: interrupted; nothing measured", file=sys.stderr)
        return Result(release, interrupted=True)
    return Result(release, tuple(summarise(cpu, got[cpu], args.bin) for cpu in cpus),
                  tuple(Pair(a, b, correlation(got[a], got[b])) for i, a in enumerate(cpus) for b in cpus[i + 1:]))


def page(args: Options, result: Result) -> str:
    """Each CPU's speed and spread, then each pair's correlation and what it says."""
    if result.interrupted:
        return ""
    lines = [heading(args, len(result.speeds), result.release),
             f"{'CPU':>4s} {'ops/s':>10s} {'CV':>6s} {'slowest':>8s} {'fastest':>8s} {'median run':>11s}"]
    for s in result.speeds:
        lines.append(f"{s.cpu:>4d} {s.per_s:>10.0f} {s.cv_pct:>5.1f}% {s.slowest:>8.2f} {s.fastest:>8.2f} "
                     f"{s.run_s:>9.1f} s")
    for p in result.pairs:
        said = ("does not vary" if p.r is None else
                "one tells the other's speed" if p.r >= TRACKS else
                "one does not tell the other's speed: a probe on one cannot set the other's costs to one speed")
        lines.append(f"CPUs {p.a} and {p.b}, bin by bin: correlation {'–' if p.r is None else f'{p.r:.2f}'}: {said}")
    return "\n".join(lines)


BENCHMARK = Benchmark("cpu_speed", Options, run, page,
                      status=lambda result: 130 if result.interrupted else 0)

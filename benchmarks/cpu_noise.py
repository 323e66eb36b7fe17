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
"""
from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import tempfile
import threading
import time

from benchmarks import _common
from experiments import runner
from experiments.engine.plan import default_sweep
from testbed.backends.umlmeter import CPUACCT_ROOT as CPUACCT

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVERY_S = 0.05


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


def judge(run_dir: str, sampler: GuestSampler, cpu_target: float) -> int:
    from analysis.stats import at_common_speed, repetitions_for
    from testbed.record import Record, usable
    from testbed.rundir import load_results

    records = [r for r in at_common_speed(load_results(run_dir)) if usable(r)]
    points: dict[tuple, list[tuple[Record, float, float]]] = {}
    for rec in records:
        got = sampler.over(rec.window_start_unix, rec.window_start_unix + rec.window_s)
        if got is not None and got[1] > 0:
            points.setdefault((rec.profile, rec.rate_mbit, rec.size_bytes), []).append((rec, *got))
    print(f"guest cgroup: {sampler.cgroup}; {len(sampler.samples)} samples, {len(records)} repetitions")
    if not points:
        print("no repetition had host samples over its window (did the sweep run in a guest?)")
        return 1
    print(f"{'point':<30}{'n':>3}{'packets CV':>11}{'timeslices':>11}{'CV':>6}{'CPU s':>7}{'CV':>6}"
          f"{'CPU/slice':>10}{'CV':>6}{'corr':>6}{'reps for ' + format(cpu_target, 'g') + ' %':>15}")
    for (profile, rate, size), rows in sorted(points.items()):
        if len(rows) < 3:
            print(f"{profile} {rate:g} Mbit/s {size} B: {len(rows)} repetitions with host samples, too few")
            continue
        packets = [float(r.link_packets) for r, _, _ in rows]
        cpu = [r.cpu_s for r, _, _ in rows]
        slices = [s for _, _, s in rows]
        per_slice = [c / s for c, s in zip(cpu, slices, strict=True)]
        need = repetitions_for(cv(cpu), cpu_target / 100)
        print(f"{profile + f' {rate:g} Mbit/s {size} B':<30}{len(rows):>3}{100 * cv(packets):>10.2f}%"
              f"{statistics.fmean(slices):>11.0f}{100 * cv(slices):>5.1f}%{statistics.fmean(cpu):>7.3f}"
              f"{100 * cv(cpu):>5.1f}%{1e6 * statistics.fmean(per_slice):>8.1f}µs{100 * cv(per_slice):>5.1f}%"
              f"{correlation(cpu, slices):>6.2f}{need if need else '> 50':>15}")
    probed = {key: rows for key, rows in points.items() if all(r.speed_probe_ns for r, _, _ in rows)}
    if probed:
        print(f"\n{'point':<30}{'probe CV':>9}{'corr':>6}{'CPU/GB CV':>10}{'at common speed':>16}"
              f"{'reps for ' + format(cpu_target, 'g') + ' %':>15}")
        for (profile, rate, size), rows in sorted(probed.items()):
            if len(rows) < 3:
                continue
            probe = [r.speed_probe_ns for r, _, _ in rows]
            measured = [r.cpu_s_per_gb if r.cpu_s_per_gb_measured is None else r.cpu_s_per_gb_measured
                        for r, _, _ in rows]
            common = [r.cpu_s_per_gb for r, _, _ in rows]
            need = repetitions_for(cv(common), cpu_target / 100)
            print(f"{profile + f' {rate:g} Mbit/s {size} B':<30}{100 * cv(probe):>8.1f}%"
                  f"{correlation(probe, measured):>6.2f}{100 * cv(measured):>9.1f}%{100 * cv(common):>15.1f}%"
                  f"{need if need else '> 50':>15}")
        print("probe: the speed probe's ns per operation over each window; corr: its correlation with the CPU per GB")
    print("CV: standard deviation over the mean between repetitions; timeslices: times the host ran the guest's "
          "processes in the window; corr: correlation of CPU s with timeslices; reps: what a 95 % CI of the CPU "
          "within the target takes at this spread")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Run it on an otherwise idle machine: anything else on the guest's CPU "
                                        "adds to the spread it measures.")
    ap.add_argument("--rate", type=float, default=10.0, metavar="MBIT",
                    help="the shaped link's rate in Mbit/s (default: %(default)g)")
    ap.add_argument("--size", type=int, default=1000, metavar="BYTES", help="the TCP MSS (default: %(default)d)")
    ap.add_argument("--profile", default="aes-gcm-256",
                    help="the IPsec profile measured beside the plain baseline (default: %(default)s)")
    ap.add_argument("--repetitions", type=int, default=15, metavar="N",
                    help="repetitions of each point, at least 3 (default: %(default)d)")
    ap.add_argument("--cpu-precision", type=float, default=default_sweep().cpu_precision_pct, metavar="PERCENT",
                    help="the target the repetitions needed are counted for, as the sweep's --cpu-precision "
                         "(default: %(default)g)")
    args = ap.parse_args(argv)
    if args.repetitions < 3:
        ap.error("--repetitions must be at least 3 for a spread to mean something")
    if os.geteuid() != 0:
        sys.exit("cpu_noise: needs root (namespaces, the host's cgroup and /proc files): run it with sudo")
    out = tempfile.mkdtemp(prefix="itb-bench-cpunoise-")
    spec = default_sweep(rates_mbit=(args.rate,), sizes=(args.size,), profiles=(args.profile,),
                         repetitions=args.repetitions, max_repetitions=args.repetitions)
    command = _common.sweep_command(spec)
    print(f"{' '.join(command)} --out {out}", flush=True)
    sampler = GuestSampler()
    sampler.start()
    rc = runner.sweep_apart(spec, out, command=command)
    sampler.done.set()
    sampler.join()
    if rc:
        sys.exit(f"cpu_noise: the sweep failed (exit {rc}); its directory: {out}")
    return judge(out, sampler, args.cpu_precision)


"""The sweep's own overhead and the spread of its repetitions.

    sudo ipsec-testbed bench sweep_overhead                  # runs the default sweep
    sudo ipsec-testbed bench sweep_overhead -- --rates 10    # sweep options after --

Runs `ipsec-testbed sweep` as a user would (booting UML when the host
kernel has no ESP) into a fresh directory, and prints:

- wall time against the sum of every point's warm-up and window: the rest is the
  testbed's overhead (network builds, IPsec switching, process starts, a guest's boot),
  also given net of one guest run of `true` (boot and power-off);
- per point, the spread across repetitions (coefficient of variation of goodput).
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time

from benchmarks import _common
from experiments import runner

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep_args", nargs="*", help="options for ipsec-testbed sweep (after --)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("sweep_overhead: needs root; run with sudo")
    from experiments import doctor

    out = tempfile.mkdtemp(prefix="itb-bench-sweep-")
    job = _common.sweep_job(args.sweep_args, out)
    choice = doctor.choose(job.kernel.kernel, runner.needs(job), job.kernel.options())
    print(f"running: ipsec-testbed sweep {' '.join(args.sweep_args)} --out {out}\n"
          f"backend: {choice.name} ({choice.reason})", flush=True)
    t0 = time.monotonic()
    rc = runner.run_apart(job)
    wall = time.monotonic() - t0
    if rc != 0:
        sys.exit(f"the sweep failed (exit {rc})")
    from testbed.rundir import load_results

    records = load_results(out)
    measured = sum(r.duration_s + r.warmup_s for r in records)
    boot = boot_s(choice.backend) if choice.backend else 0.0
    overhead = wall - measured
    print(f"points: {len(records)}; wall time {wall:.1f} s; warm-ups and windows {measured:.1f} s "
          f"({len(records)} x (warm-up + window))")
    ahead = sum(bool(r.clients_ahead) for r in records)
    print(f"points whose iperf3 clients were started during the previous point's warm-up: {ahead} of "
          f"{len(records)} (the others paid for starting them)")
    print(f"testbed overhead: {overhead:.1f} s = {100 * overhead / measured:.1f}% of the measurement time")
    if boot:
        net = overhead - boot
        print(f"one {choice.backend.title} run of `true` (measured now): {boot:.2f} s; "
              f"overhead beyond it: {net:.1f} s = "
              f"{100 * net / measured:.1f}% (target <= 15%: {'MET' if net <= 0.15 * measured else 'NOT MET'})")
    groups = collections.defaultdict(list)
    for r in records:
        groups[(r.profile, r.rate_mbit, r.size_bytes, r.ip_version, r.transport)].append(r.goodput_mbps)
    print(f"\n{'profile':>14s} {'Mbit/s':>7s} {'size':>5s}  {'mean':>8s} {'stdev':>7s} {'CV %':>6s}  n")
    cvs = []
    for (profile, rate, size, _ipv, _tr), vals in sorted(groups.items()):
        mean = statistics.mean(vals)
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
        cv = 100 * sd / mean if mean else 0.0
        cvs.append(cv)
        print(f"{profile:>14s} {rate:7g} {size:5d}  {mean:8.2f} {sd:7.3f} {cv:6.2f}  {len(vals)}")
    if cvs:
        print(f"\nspread across repetitions: median CV {statistics.median(cvs):.2f}%, max {max(cvs):.2f}%")
    print(f"run directory: {out}")
    return 0


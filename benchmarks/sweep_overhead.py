#!/usr/bin/env python3
"""The sweep's own overhead and the spread of its repetitions.

    sudo .venv/bin/python benchmarks/sweep_overhead.py                  # runs the default sweep
    sudo .venv/bin/python benchmarks/sweep_overhead.py -- --rates 10    # sweep options after --

Runs experiments/packet_size_sweep.py as a user would (booting UML when the host
kernel has no ESP) into a fresh directory, and prints:

- wall time against the sum of the measurement windows (iperf3's warm-up plus its
  measured seconds, per point): the rest is the testbed's overhead (network builds,
  IPsec switching, process starts, the UML boot), also given net of one UML boot;
- per point, the spread across repetitions (coefficient of variation of goodput).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def uml_boot_s() -> float:
    """Boot-to-command time of one UML guest, measured now (median of 3)."""
    from testbed import uml

    class First:
        at = None

        def write(self, b):
            self.at = self.at or time.monotonic()
            return len(b)

        def flush(self):
            pass
    times = []
    for _ in range(3):
        out = First()
        t0 = time.monotonic()
        uml.run(uml.build_spec(["echo", "up"], mem="2G"), stdout=out, stderr=First())
        times.append(out.at - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep_args", nargs="*", help="options for packet_size_sweep.py (after --)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("sweep_overhead: needs root; run with sudo")
    from testbed import kernel

    out = tempfile.mkdtemp(prefix="itb-bench-sweep-")
    cmd = [sys.executable, os.path.join(REPO, "experiments", "packet_size_sweep.py"), *args.sweep_args,
           "--out", out, "--no-report"]
    backend = kernel.choose_backend("auto")
    print(f"running: {' '.join(cmd[1:])}\nbackend: {backend.name} ({backend.reason})", flush=True)
    t0 = time.monotonic()
    rc = subprocess.call(cmd, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    if rc != 0:
        sys.exit(f"the sweep failed (exit {rc})")
    records = [json.loads(l) for l in open(os.path.join(out, "results.jsonl"))]
    measured = sum(r["duration_s"] + r["omit_s"] for r in records)
    boot = uml_boot_s() if backend.name == "uml" else 0.0
    overhead = wall - measured
    print(f"points: {len(records)}; wall time {wall:.1f} s; measurement windows {measured:.1f} s "
          f"({len(records)} x (warm-up + duration))")
    if all("measured_s" in r for r in records):
        actual = sum(r["measured_s"] + r["omit_s"] for r in records)
        print(f"(iperf3's receivers measured {actual:.1f} s in all, warm-ups included: each test ran "
              f"{(actual - measured) / len(records):.2f} s past its configured window; the figures below "
              "count that as overhead)")
    ahead = sum(bool(r.get("clients_ahead")) for r in records)
    print(f"points whose iperf3 clients were started during the previous point's warm-up: {ahead} of "
          f"{len(records)} (the others paid for starting them)")
    print(f"testbed overhead: {overhead:.1f} s = {100 * overhead / measured:.1f}% of the measurement time")
    if boot:
        net = overhead - boot
        print(f"one UML boot (measured now): {boot:.2f} s; overhead beyond it: {net:.1f} s = "
              f"{100 * net / measured:.1f}% (target <= 15%: {'MET' if net <= 0.15 * measured else 'NOT MET'})")
    groups = collections.defaultdict(list)
    for r in records:
        groups[(r["profile"], r["rate_mbit"], r["size_bytes"], r["ip_version"], r["transport"])].append(
            r["goodput_mbps"])
    print(f"\n{'profile':>14s} {'Mbit/s':>7s} {'size':>5s}  {'mean':>8s} {'stdev':>7s} {'CV %':>6s}  n")
    cvs = []
    for (profile, rate, size, ipv, tr), vals in sorted(groups.items()):
        mean = statistics.mean(vals)
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
        cv = 100 * sd / mean if mean else 0.0
        cvs.append(cv)
        print(f"{profile:>14s} {rate:7g} {size:5d}  {mean:8.2f} {sd:7.3f} {cv:6.2f}  {len(vals)}")
    if cvs:
        print(f"\nspread across repetitions: median CV {statistics.median(cvs):.2f}%, max {max(cvs):.2f}%")
    print(f"run directory: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

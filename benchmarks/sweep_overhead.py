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

import argparse
import collections
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import _common
from testbed import backends, rundir

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
    ap.add_argument("--from", dest="run_dir", metavar="RUN_DIR",
                    help="say where the time went in a sweep already run, instead of running one")
    args = ap.parse_args(argv)
    if args.run_dir:
        records = rundir.load_results(args.run_dir)
        if not records:
            sys.exit(f"sweep_overhead: {args.run_dir} holds no sweep records")
        print_phases(records)
        return 0
    if os.geteuid() != 0:
        sys.exit("sweep_overhead: needs root; run with sudo")
    out = tempfile.mkdtemp(prefix="itb-bench-sweep-")
    # the user's own sweep options, read by the sweep's parser: the command as they would run it, timed whole
    words = ["sweep", *args.sweep_args, "--out", out, "--no-report"]
    print(f"running: ipsec-testbed {' '.join(words)}", flush=True)
    t0 = time.monotonic()
    rc = subprocess.run([*_common.front_door(), *words], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL).returncode
    wall = time.monotonic() - t0
    if rc != 0:
        sys.exit(f"the sweep failed (exit {rc})")
    records, meta = rundir.load_results(out), rundir.read_meta(out)
    backend = backends.get(meta.backend, backends.Options(kernel=meta.kernel_path, crypto=meta.qemu_crypto)) \
        if meta.backend in backends.names() else None
    print(f"backend: {meta.kernel_label()}", flush=True)
    measured = sum(r.duration_s + r.warmup_s for r in records)
    boot = boot_s(backend) if backend else 0.0
    overhead = wall - measured
    print(f"points: {len(records)}; wall time {wall:.1f} s; warm-ups and windows {measured:.1f} s "
          f"({len(records)} x (warm-up + window))")
    ahead = sum(bool(r.clients_ahead) for r in records)
    print(f"points whose iperf3 clients were started during the previous point's warm-up: {ahead} of "
          f"{len(records)} (the others paid for starting them)")
    print(f"testbed overhead: {overhead:.1f} s = {100 * overhead / measured:.1f}% of the measurement time")
    if boot:
        net = overhead - boot
        print(f"one {backend.title} run of `true` (measured now): {boot:.2f} s; "
              f"overhead beyond it: {net:.1f} s = "
              f"{100 * net / measured:.1f}% (target <= 15%: {'MET' if net <= 0.15 * measured else 'NOT MET'})")
    print_phases(records)
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


#: The time between window starts the default sweep should keep to (issue 60): 2 s windows, 0.3 s warm-ups.
GAP_TARGET_S = 2.5


def gaps_s(records) -> list[float]:
    """The seconds between successive windows' starts."""
    starts = sorted(r.window_start_unix for r in records if r.window_start_unix is not None)
    return [b - a for a, b in zip(starts, starts[1:], strict=False)]


def print_phases(records) -> None:
    """Where the time between window starts went, phase by phase (records with ``phases_s``), and the median
    time between window starts against :data:`GAP_TARGET_S`."""
    from experiments.engine import phases

    gaps = gaps_s(records)
    if gaps:
        median = statistics.median(gaps)
        print(f"between window starts: median {median:.2f} s (min {min(gaps):.2f}, max {max(gaps):.2f}) over "
              f"{len(gaps)}; target <= {GAP_TARGET_S} s: {'MET' if median <= GAP_TARGET_S else 'NOT MET'}")
    timed = [r.phases_s for r in records if r.phases_s]
    if not timed:
        print("no record says where its time went (phases_s: sweeps since the phases were kept)")
        return
    names = sorted({p for t in timed for p in t}, key=phases.place)
    total = sum(sum(t.values()) for t in timed)
    print(f"\nwhere a point's time went ({len(timed)} points, {total:.1f} s; median and mean per point, "
          f"share of all):")
    print(f"{'phase':>10s} {'median s':>9s} {'mean s':>7s} {'max s':>6s} {'share':>6s}")
    for name in names:
        each = [t.get(name, 0.0) for t in timed]
        print(f"{name:>10s} {statistics.median(each):9.3f} {statistics.mean(each):7.3f} {max(each):6.2f} "
              f"{100 * sum(each) / total:5.1f}%")
    outside = [phases.outside(t) for t in timed]
    print(f"{'outside':>10s} {statistics.median(outside):9.3f} {statistics.mean(outside):7.3f} "
          f"{max(outside):6.2f} {100 * sum(outside) / total:5.1f}%  (all but the warm-up and the window)")

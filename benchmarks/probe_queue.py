"""Is the latency probe right?  Its delay under load against the wait the shaper's queue predicts.

    sudo ipsec-testbed bench probe_queue RUN_DIR      # a sweep's run directory, measured with the probe
    sudo ipsec-testbed bench probe_queue              # runs the default sweep first (about 5 min)

Where a shaped link bounds a point, the flows keep the shaper's queue filled, and a probe packet sent the
data's way waits behind what is queued: the queue's mean backlog over the window (the monitor samples it every
0.1 s: the record's ``queue_mean_bytes``) divided by the link's rate is the wait the queue predicts.  The probe
times the same wait its own way, irtt's one-way delay from the client to the server on one clock
(``probe_up_ms``).  Per rate this prints how many link-bound points were compared, their ratio
measured / predicted (median, least, most) and how many lie within ±10 % of the prediction.  Points bound by
anything but the link are left out (their queue is not the wait).  Exit status 0 when it ran.
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile

from benchmarks import _common
from testbed.record import Bound

TOLERANCE = 0.10


def compare(records) -> dict[float, list[float]]:
    """measured / predicted queueing delay of each link-bound probed point, by rate (pure)."""
    ratios: dict[float, list[float]] = collections.defaultdict(list)
    for r in records:
        if r.bound is not Bound.LINK or r.probe_up_ms is None or not r.queue_mean_bytes or not r.rate_mbit:
            continue
        predicted_ms = r.queue_mean_bytes / (r.rate_mbit * 1e6 / 8) * 1000
        if predicted_ms > 0:
            ratios[r.rate_mbit].append(r.probe_up_ms / predicted_ms)
    return ratios


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", nargs="?", help="a sweep's run directory (default: run the default sweep now)")
    args = ap.parse_args(argv)
    from testbed.rundir import load_results

    run_dir = args.run_dir
    if run_dir is None:
        if os.geteuid() != 0:
            sys.exit("probe_queue: measuring needs root; run with sudo, or give a run directory")
        run_dir = tempfile.mkdtemp(prefix="itb-bench-probe-queue-")
        print(f"running the default sweep into {run_dir}", flush=True)
        rc = _common.run_sweep([], run_dir)
        if rc != 0:
            sys.exit(f"probe_queue: the sweep failed (exit {rc})")
    if not os.path.isdir(run_dir):
        sys.exit(f"probe_queue: {run_dir} is not a directory")
    ratios = compare(load_results(run_dir))
    if not ratios:
        sys.exit(f"probe_queue: no link-bound point with the probe in {run_dir} (measured with --no-latency-probe?)")
    print(f"{'rate Mbit/s':>11s} {'points':>6s} {'median':>7s} {'least':>6s} {'most':>6s}  within ±{TOLERANCE:.0%}")
    for rate in sorted(ratios):
        values = ratios[rate]
        inside = sum(abs(v - 1) <= TOLERANCE for v in values)
        print(f"{rate:11g} {len(values):6d} {statistics.median(values):7.3f} {min(values):6.3f} {max(values):6.3f}"
              f"  {inside} of {len(values)}")
    print("(the probe's one-way delay the data's way / the queue's mean backlog over the link's rate)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

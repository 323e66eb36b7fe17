"""Does the latency probe change the goodput it rides beside?  Sweeps with and without it, alternated.

    sudo ipsec-testbed bench probe_overhead                           # vpn_gateway, aes-gcm-256, 10 Mbit/s
    sudo ipsec-testbed bench probe_overhead --rate 100 --pairs 6 --sizes 100,1460
    sudo ipsec-testbed bench probe_overhead --probe-tool irtt          # irtt's UDP probe instead of ICMP echo

Runs ``ipsec-testbed sweep`` as a user would, one repetition per run, alternately with the latency probe
(the default) and with ``--no-latency-probe``, in ABBA order (on, off, off, on, ...) so that a drift of the
machine falls on both alike.  Per point it prints the mean goodput with and without the probe, their paired
difference with its 95 % interval, and the point's own interval (the 95 % half-width of its goodput
without the probe): the probe passes where the difference is smaller than that.

A probe that crosses the path's bottleneck takes its own bytes of it, in the data's direction: a link-bound flow
beside it gives up the probe's share of the link (:func:`experiments.engine.plan.probe_share`, the tunnel's
bytes counted), 0.08 % of a 10 Mbit/s link for plain's 10 echoes a second, 0.13 % through AES-GCM-256.  Where
every window of a point was link-bound, its line also gives that predicted cost and what the difference shows
beyond it (the difference plus the prediction, with the same interval): the probe disturbs the flow beyond its
bytes (its timing, drops in the queue it shares) only where that residual is beyond the point's own interval.
Where the guest's CPU bounds a point, the probe's cost is CPU time, not link, and no prediction is printed.
Exit status 0 when it ran.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import statistics
import sys
import tempfile
import time

from benchmarks import _common
from cli.options import csv
from experiments import runner
from experiments.engine.plan import DEFAULT_PROBE_PER_S, default_sweep, probe_share
from experiments.engine.probe import TOOLS
from testbed.record import Bound


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topology", default="vpn_gateway")
    ap.add_argument("--profile", default="aes-gcm-256", help="the tunnel beside plain (default: %(default)s)")
    ap.add_argument("--rate", type=float, default=10.0, help="Mbit/s (default: %(default)s)")
    ap.add_argument("--sizes", type=csv(int), default="100,1460",
                    help="TCP MSS, comma-separated (default: %(default)s)")
    ap.add_argument("--pairs", type=int, default=4, help="runs with the probe and without, each (default: 4)")
    ap.add_argument("--probe-tool", choices=TOOLS, default=TOOLS[0],
                    help="the probe's tool in the runs with it (the sweep's --probe-tool; default: %(default)s)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("probe_overhead: needs root; run with sudo")
    if args.pairs < 2:
        sys.exit("probe_overhead: --pairs must be at least 2 (an interval needs two pairs)")
    from analysis.stats import t_critical_95
    from testbed.rundir import load_results

    base = tempfile.mkdtemp(prefix="itb-bench-probe-")
    spec = default_sweep(topology=args.topology, profiles=(args.profile,), rates_mbit=(args.rate,), sizes=args.sizes,
                         repetitions=1, max_repetitions=1)
    order = [k % 4 in (0, 3) for k in range(2 * args.pairs)]  # ABBA: on, off, off, on, ...
    goodput: dict[tuple, dict[bool, list[float]]] = collections.defaultdict(lambda: {True: [], False: []})
    link_bound: dict[tuple, bool] = collections.defaultdict(lambda: True)  # every window of the point's
    t0 = time.monotonic()
    for k, on in enumerate(order):
        out = os.path.join(base, f"{k:02d}-{'probe' if on else 'none'}")
        print(f"run {k + 1} of {len(order)}: {'with' if on else 'without'} the probe", flush=True)
        run = dataclasses.replace(spec, probe_tool=args.probe_tool) if on else \
            dataclasses.replace(spec, latency_probe=False)
        rc = runner.sweep_apart(run, out, command=_common.sweep_command(run))
        if rc != 0:
            sys.exit(f"probe_overhead: the sweep failed (exit {rc}); its directory: {out}")
        for r in load_results(out):
            point = (r.profile, r.size_bytes, r.ip_version)
            goodput[point][on].append(r.goodput_mbps)
            link_bound[point] &= r.bound is Bound.LINK
    print(f"\n{len(order)} sweeps in {time.monotonic() - t0:.0f} s; {args.topology}, {args.rate:g} Mbit/s, "
          f"one repetition per sweep, the probe by {args.probe_tool}\n")
    print(f"{'profile':>14s} {'size':>5s} {'with probe':>11s} {'without':>9s} {'difference (95 % CI)':>24s} "
          f"{'own interval':>13s}  verdict")
    beyond_bytes = []
    for (profile, size, ip_version), by in sorted(goodput.items()):
        pairs = list(zip(by[True], by[False], strict=False))
        diffs = [a - b for a, b in pairs]
        n = len(diffs)
        mean_diff = statistics.fmean(diffs)
        half = t_critical_95(n - 1) * statistics.stdev(diffs) / n ** 0.5 if n > 1 else float("nan")
        without = by[False]
        own = t_critical_95(len(without) - 1) * statistics.stdev(without) / len(without) ** 0.5
        verdict = "within" if abs(mean_diff) < own else "BEYOND"
        print(f"{profile:>14s} {size:5d} {statistics.fmean(by[True]):11.3f} {statistics.fmean(without):9.3f} "
              f"{mean_diff:+11.4f} ± {half:.4f} Mbit/s {own:9.4f}  {verdict} the point's own interval")
        if link_bound[(profile, size, ip_version)]:
            cost = statistics.fmean(without) * probe_share(DEFAULT_PROBE_PER_S, args.rate, ip_version, profile)
            residual = mean_diff + cost
            beyond_bytes.append(abs(residual) >= own)
            print(f"{'':>14s} {'':5s} {'its bytes:':>21s} {-cost:+11.4f} Mbit/s predicted; beyond them "
                  f"{residual:+.4f} ± {half:.4f}: {'BEYOND' if beyond_bytes[-1] else 'within'} the point's own "
                  "interval")
        else:
            print(f"{'':>14s} {'':5s} {'':>21s} not every window link-bound: the probe's cost there is CPU time, "
                  "no prediction")
    if beyond_bytes:
        print(f"\nbeyond the probe's own bytes: {sum(not b for b in beyond_bytes)} of {len(beyond_bytes)} link-bound "
              "points within their own intervals")
    print(f"\nrun directories: {base}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

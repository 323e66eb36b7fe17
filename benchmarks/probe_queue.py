"""Is the latency probe right?  Its delay under load against the wait the shaper's queue predicts.

    sudo ipsec-testbed bench probe_queue RUN_DIR      # a sweep's run directory, measured with the probe
    sudo ipsec-testbed bench probe_queue              # runs the default sweep first (about 5 min)

Where a shaped link bounds a point, the flows keep the shaper's queue filled, and a probe packet sent the
data's way waits behind what is queued: the queue's mean backlog over the window (the monitor samples it every
0.1 s: the record's ``queue_mean_bytes``) divided by the link's rate is the wait the queue predicts.  The probe
times the same wait its own way: irtt's one-way delay from the client to the server on one clock
(``probe_up_ms``); ping (``sweep --probe-tool ping``), which times the round trip alone, by its median under
load less the unloaded one (``probe_rtt_ms - idle_rtt_ms``: a sweep's flows go one way, so the replies' way
has no queue).  Per rate this prints how many link-bound points were compared, their ratio
measured / predicted (median, least, most) and how many lie within ±10 % of the prediction.  Points bound by
anything but the link are left out (their queue is not the wait).

Then the same against what the queue's *configured* size predicts, before any measurement: tbf holds at
most ``limit = rate * latency + burst`` bytes (:mod:`topologies.shaping`, the burst as the run's kernel sizes
it), a wait of ``limit / rate`` when full; a TCP flow (CUBIC, Linux's default) fills it until a packet is
dropped, then backs off by its β (0.3), so its queue saws between ``(1 - β)`` and all of the limit and waits
``(1 - β / 2) * limit / rate`` on the mean.  Exit status 0 when it ran.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import statistics
import sys
import tempfile

from benchmarks import _common
from experiments import runner
from experiments.engine.plan import default_sweep
from testbed.record import Bound

TOLERANCE = 0.10
#: CUBIC's multiplicative decrease (RFC 9438: the window after a loss is 0.7 of what it was).
CUBIC_BETA = 0.3


def configured_wait_ms(rate_mbit: float, backend: str | None, latency_ms: float = 50.0, mtu: int = 1500) -> float:
    """The mean wait a TCP flow's sawtooth keeps in a full tbf of the testbed's sizing (pure): ``(1 - β / 2)``
    of its limit over its rate."""
    from testbed import backends
    from topologies.shaping import ShapingSpec, default_burst_bytes

    spec = ShapingSpec(rate_mbit=rate_mbit, latency_ms=latency_ms)
    burst_time = backends.get(backend).shaper_burst_s if backend in backends.names() else backends.get(
        "host").shaper_burst_s
    limit = spec.rate_bytes_per_s * latency_ms / 1000 + default_burst_bytes(spec.rate_bytes_per_s, mtu,
                                                                              burst_time_s=burst_time)
    return (1 - CUBIC_BETA / 2) * limit / spec.rate_bytes_per_s * 1000


def queue_delay_ms(r) -> float | None:
    """The probe's delay the data's way in record ``r`` (pure): irtt's one-way delay, or ping's round trip
    less the unloaded one; None without either."""
    if r.probe_up_ms is not None:
        return r.probe_up_ms
    if r.probe_rtt_ms is not None and r.idle_rtt_ms is not None:
        return r.probe_rtt_ms - r.idle_rtt_ms
    return None


def with_references(records) -> list:
    """``records`` each with its point's unloaded reference (pure): a sweep takes it at a point's first repetition
    only, and the point's later repetitions carry none."""
    from testbed.record import point_key

    refs: dict = {}
    for r in records:
        if r.idle_rtt_ms is not None:
            refs.setdefault(point_key(r), r.idle_rtt_ms)
    return [dataclasses.replace(r, idle_rtt_ms=refs[point_key(r)])
            if r.idle_rtt_ms is None and point_key(r) in refs else r for r in records]


def compare_configured(records) -> dict[float, list[float]]:
    """measured / configured-size-predicted queueing delay of each link-bound probed TCP point, by rate (pure)."""
    ratios: dict[float, list[float]] = collections.defaultdict(list)
    for r in with_references(records):
        delay = queue_delay_ms(r)
        if r.bound is not Bound.LINK or delay is None or not r.rate_mbit or r.transport != "tcp":
            continue
        ratios[r.rate_mbit].append(delay / configured_wait_ms(r.rate_mbit, r.backend))
    return ratios


def compare(records) -> dict[float, list[float]]:
    """measured / predicted queueing delay of each link-bound probed point, by rate (pure)."""
    ratios: dict[float, list[float]] = collections.defaultdict(list)
    for r in with_references(records):
        delay = queue_delay_ms(r)
        if r.bound is not Bound.LINK or delay is None or not r.queue_mean_bytes or not r.rate_mbit:
            continue
        predicted_ms = r.queue_mean_bytes / (r.rate_mbit * 1e6 / 8) * 1000
        if predicted_ms > 0:
            ratios[r.rate_mbit].append(delay / predicted_ms)
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
        spec = default_sweep()
        rc = runner.sweep_apart(spec, run_dir, command=_common.sweep_command(spec))
        if rc != 0:
            sys.exit(f"probe_queue: the sweep failed (exit {rc})")
    if not os.path.isdir(run_dir):
        sys.exit(f"probe_queue: {run_dir} is not a directory")
    records = load_results(run_dir)
    ratios = compare(records)
    if not ratios:
        sys.exit(f"probe_queue: no link-bound point with the probe in {run_dir} (measured with --no-latency-probe?)")
    _table(ratios, "the probe's delay the data's way (irtt's one-way delay, or ping's round trip less the unloaded "
           "one) / the queue's mean backlog over the link's rate")
    print()
    _table(compare_configured(records), f"the same delay / (1 - {CUBIC_BETA:g} / 2) of the full queue's wait, the "
           "tbf's limit over its rate (nothing measured: the queue's configured size)",
           lambda rate: f"  (predicted {configured_wait_ms(rate, records[0].backend):.1f} ms)")
    return 0


def _table(ratios: dict[float, list[float]], what: str, note=lambda rate: "") -> None:
    print(f"{'rate Mbit/s':>11s} {'points':>6s} {'median':>7s} {'least':>6s} {'most':>6s}  within ±{TOLERANCE:.0%}")
    for rate in sorted(ratios):
        values = ratios[rate]
        inside = sum(abs(v - 1) <= TOLERANCE for v in values)
        print(f"{rate:11g} {len(values):6d} {statistics.median(values):7.3f} {min(values):6.3f} {max(values):6.3f}"
              f"  {inside} of {len(values)}{note(rate)}")
    print(f"({what})")


if __name__ == "__main__":
    sys.exit(main())

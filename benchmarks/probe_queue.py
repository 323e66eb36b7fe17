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

import collections
import dataclasses
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Mapping

from experiments import runner
from experiments.benchmark import Benchmark, option
from experiments.engine.plan import default_sweep
from testbed.errors import Refused
from testbed.record import Bound, point_key
from testbed.rundir import load_results

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


@dataclasses.dataclass(frozen=True)
class Options:
    """Which sweep's records; checked on construction."""

    run_dir: str | None = option(None, "a sweep's run directory (default: run the default sweep now)",
                                 positional=True)

    def __post_init__(self) -> None:
        if self.run_dir is not None and not os.path.isdir(self.run_dir):
            raise ValueError(f"run_dir must be a sweep's run directory, not {self.run_dir}")


@dataclasses.dataclass(frozen=True)
class Result:
    """The run directory read; per rate, each link-bound probed point's measured / predicted delay, against the
    queue's mean backlog and against its configured size (TCP points), and the wait that size predicts."""

    run_dir: str
    backlog: Mapping[float, tuple[float, ...]]
    configured: Mapping[float, tuple[float, ...]]
    configured_wait_ms: Mapping[float, float]


def sweep_default() -> str:
    """The default sweep run into a new directory (a process of its own); the directory."""
    run_dir = tempfile.mkdtemp(prefix="itb-bench-probe-queue-")
    print(f"running the default sweep into {run_dir}", file=sys.stderr, flush=True)
    rc = runner.sweep_apart(default_sweep(), run_dir, command=("ipsec-testbed", "bench", "probe_queue"))
    if rc != 0:
        raise Refused(f"the sweep failed (exit {rc}); its directory: {run_dir}")
    return run_dir


def run(args: Options) -> Result:
    """The probe's delays in ``args.run_dir`` (or in the default sweep, run first) against the queue's."""
    run_dir = args.run_dir or sweep_default()
    records = load_results(run_dir)
    backlog = compare(records)
    if not backlog:
        raise Refused(f"no link-bound point with the probe in {run_dir} (measured with --no-latency-probe?)")
    configured = compare_configured(records)
    return Result(run_dir, {rate: tuple(v) for rate, v in backlog.items()},
                  {rate: tuple(v) for rate, v in configured.items()},
                  {rate: configured_wait_ms(rate, records[0].backend) for rate in configured})


def page(args: Options, result: Result) -> str:
    """Per rate, the ratios' median, least and most and how many lie within the tolerance, for either prediction."""
    return "\n".join([
        *_table(result.backlog, "the probe's delay the data's way (irtt's one-way delay, or ping's round trip less "
                "the unloaded one) / the queue's mean backlog over the link's rate"),
        "",
        *_table(result.configured, f"the same delay / (1 - {CUBIC_BETA:g} / 2) of the full queue's wait, the "
                "tbf's limit over its rate (nothing measured: the queue's configured size)",
                lambda rate: f"  (predicted {result.configured_wait_ms[rate]:.1f} ms)")])


def _table(ratios: Mapping[float, tuple[float, ...]], what: str,
           note: Callable[[float], str] = lambda rate: "") -> list[str]:
    lines = [f"{'rate Mbit/s':>11s} {'points':>6s} {'median':>7s} {'least':>6s} {'most':>6s}  within ±{TOLERANCE:.0%}"]
    for rate in sorted(ratios):
        values = ratios[rate]
        inside = sum(abs(v - 1) <= TOLERANCE for v in values)
        lines.append(f"{rate:11g} {len(values):6d} {statistics.median(values):7.3f} {min(values):6.3f} "
                     f"{max(values):6.3f}  {inside} of {len(values)}{note(rate)}")
    return [*lines, f"({what})"]


def root(args: Options) -> str:
    """Root to run the default sweep first; none to read a run directory."""
    return "" if args.run_dir else "the default sweep run first: namespaces, guests; or give a run directory"


BENCHMARK = Benchmark("probe_queue", Options, run, page, root=root)

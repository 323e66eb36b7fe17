"""Measuring one point in a built network: the test, its window, its evidence, its record.

::

    go ------ data seen ---- warm-up ---- [ reading A ..... backlog samples ..... reading B ] SIGINT
              at the receivers            the measured window (timed by the testbed)

iperf3 only drives the traffic.  The testbed times the window itself, from the moment data
reaches the receivers, and counts what moved with the kernel's own counters
(:mod:`experiments.engine.monitor`): iperf3's receiver figure, which a CPU-starved guest skews by up
to 9 % either way (its omit and end timers fire late and it counts bytes queued in its socket
as received in its window), is not used.  When the window closes the clients are stopped
(SIGINT: iperf3 ends the test and its server goes on serving), so a test takes only as long as
its warm-up and window.  The next point's iperf3 clients are started during the warm-up and
held until their turn (:class:`~experiments.engine.clients.Ahead`); the clients' whole lifecycle is
:class:`~experiments.engine.clients.PointClients`.
"""
from __future__ import annotations

import dataclasses
import logging
import platform
import time

from experiments.engine import iperf, phases, probe
from experiments.engine.clients import Ahead, PointClients, flows_of
from experiments.engine.counters import Reading
from experiments.engine.monitor import Monitor, no_gc, realtime
from experiments.engine.plan import Point, SweepSpec
from experiments.engine.verdict import classify, evidence
from ipsec.overhead import expected_point_goodput_mbps
from testbed.errors import one_line
from testbed.record import FIELD, Bound, Keying, Record, Tunnel
from testbed.rundir import now_iso
from testbed.waiting import Deadline, sleep_until
from topologies.shaping import burst_bytes, shaper_handle

log = logging.getLogger(__name__)

#: How often the shaper's backlog is sampled during the window.
BACKLOG_EVERY_S = 0.1
#: Tries per point before it is recorded as failed.
ATTEMPTS = 2
#: How long the latency probe's client is waited for beyond its own duration.  It sends until the window's end
#: and then waits only for its last echoes' replies (a round trip or two): a probe that ran on past the window
#: kept every point 0.3 s longer, for echoes no figure counts (2026-11-29, ``bench sweep_overhead``).
PROBE_WAIT_S = 10.0
#: How long the unloaded probe waits at most for the shaper's queue to drain.
DRAIN_S = 2.0


def monitor_for(net, servers: iperf.Servers, meter) -> Monitor:
    """A :class:`~experiments.engine.monitor.Monitor` of ``net``'s shaped link and its flows' ends."""
    client = net.spec.flows[0][0]
    node, peer = net.spec.shaped_sender(client)
    shaper = (net.ns(node), net.ifname(node, peer), shaper_handle(net.shaping))
    receivers = [(net.ns(server), port, proc.pid)
                 for (_client, server), port, proc in zip(net.spec.flows, servers.ports, servers.procs, strict=True)]
    return Monitor(shaper, receivers, [net.ns(c) for c, _s in net.spec.flows], meter)


def switch_ipsec(net, current: str, profile: str, mode: str, families, keying: Keying = Keying.STATIC) -> str:
    """Put ``net`` from profile ``current`` to ``profile`` (a no-op when they are the same), keyed
    as ``keying`` says (:data:`ipsec.ike.KEYINGS`); returns ``profile``."""
    if profile != current:
        net.remove_ipsec()
        if Tunnel.of(profile) is not None:  # IPsec, or WireGuard between the same ends
            net.apply_ipsec(profile, mode, families=families, keying=keying)
    return profile


@dataclasses.dataclass(frozen=True)
class Window:
    """The counters read around a point's measured window."""

    first: Reading
    last: Reading
    backlog: list[int]  # the shaper's backlog, sampled every BACKLOG_EVERY_S in between
    shaper_lost: int  # backlog samples that found no shaper
    start_unix: float  # when it opened, on the wall clock


def read_window(monitor: Monitor, end: float, duration_s: float) -> Window:
    """Read the counters now, as the window opens, and when it closes at ``end`` (monotonic s), sampling
    the shaper's backlog in between; a first reading taken late moves the end so that the window still
    lasts ``duration_s``."""
    backlog: list[int] = []
    shaper_lost = 0
    first = monitor.read()
    # a busy guest may take the first reading late: the window still lasts what was asked
    end = max(end, first.shaper.at_ns / 1e9 + duration_s)
    # the window's start on the wall clock, to line it up with accounts kept elsewhere
    start_unix = time.time() - (time.monotonic_ns() - first.shaper.at_ns) / 1e9
    while time.monotonic() < end - BACKLOG_EVERY_S / 2:
        sleep_until(min(end, time.monotonic() + BACKLOG_EVERY_S))
        try:
            backlog.append(monitor.backlog())
        except RuntimeError:  # the qdisc is gone: someone replaced it (an anomaly, in the verdict)
            shaper_lost += 1
    sleep_until(end)
    return Window(first, monitor.read(), backlog, shaper_lost, start_unix)


def measure_point(net, point: Point, spec: SweepSpec, servers: iperf.Servers, monitor: Monitor,
                  ahead: Ahead | None = None, following: Point | None = None,
                  ledger: phases.Phases | None = None, reference: bool = True) -> Record:
    """Measure one point in the built network ``net`` (IPsec already as the point needs); its record.

    With ``ahead``, this point uses the clients started ahead for it, if any, and starts
    ``following``'s during its warm-up.  With the latency probe, the unloaded reference is taken first when
    ``reference`` says so (a point's first repetition; the path unloaded is the same for the rest).  Each step's
    seconds are charged to ``ledger`` (:mod:`experiments.engine.phases`).  Raises
    :class:`~experiments.engine.iperf.IperfError` when the test fails.
    """
    ledger = ledger or phases.Phases()
    flows = flows_of(net, point.ip_version)
    clients = PointClients(flows, point, spec, servers.ports, monitor, ahead)
    # the unloaded round trip, on the path the first flow takes, before any of the point's flows send and once
    # the shaper's queue has drained what the point before it left there
    idle = None
    if spec.latency_probe and reference:
        for _ in Deadline(DRAIN_S, 0.02).polls():
            if monitor.backlog() == 0:
                break
        ledger.lap(phases.DRAIN)
        idle = probe.result(probe.run(flows[0].client_ns, flows[0].server_addr, probe.IDLE_S,
                                      probe.IDLE_INTERVAL_S, spec.probe_tool), PROBE_WAIT_S)
        ledger.lap(phases.REFERENCE)
        if spec.probe_tool == probe.PING and isinstance(idle, probe.Summary):
            least = probe.flood_least(flows[0].client_ns, flows[0].server_addr, PROBE_WAIT_S)
            idle = dataclasses.replace(idle, rtt_min_ms=least if isinstance(least, float) else None)
            ledger.lap(phases.FLOOD)
    loaded = None
    try:
        with clients, no_gc(), realtime():
            seen = clients.start()
            ledger.lap(phases.START)
            # many clients: the window opens once every one is connected (the warm-up is a floor)
            opens = max(seen + spec.warmup_s, clients.all_connected_at or 0.0)
            clients.start_next(following)
            if spec.latency_probe:  # from now to the window's end; its round trips within the window count
                loaded = probe.run(flows[0].client_ns, flows[0].server_addr,
                                   opens - time.monotonic() + spec.duration_s, 1 / spec.probe_per_s, spec.probe_tool)
            sleep_until(opens)
            clients.settle_next()
            ledger.lap(phases.WARMUP)
            window = read_window(monitor, opens + spec.duration_s, spec.duration_s)
            ledger.lap(phases.WINDOW)
            clients.stop()
        ledger.lap(phases.STOP)
        clients.wind_up()
        ledger.lap(phases.WIND_UP)
        record = point_record(net, point, spec, monitor, window, clients)
        if loaded is not None:  # the probe's last replies, a round trip or two after the window
            under = probe.result(loaded, PROBE_WAIT_S + spec.duration_s, window.start_unix,
                                 window.start_unix + spec.duration_s)
            loaded = None
            record = with_probe(record, idle, under)
        ledger.lap(phases.RECORD)
        return record
    finally:
        if loaded is not None:  # the point failed: its probe goes with it
            loaded.stop()


def with_probe(record: Record, idle: probe.Summary | str | None, under: probe.Summary | str) -> Record:
    """``record`` with the probe's round trips; a probe that could not run, or lost every reply, makes the
    point ``other`` with the reason (never a round trip of zero)."""
    changes: dict = {}
    if isinstance(idle, probe.Summary) and idle.rtt_median_ms is not None:
        changes[FIELD.idle_rtt_ms] = idle.rtt_median_ms
        changes[FIELD.idle_rtt_min_ms] = idle.rtt_min_ms
    if isinstance(under, str):
        why = f"the latency probe had no result: {under}"
    elif under.sent and not under.received:
        why = f"the latency probe lost every reply ({under.sent} sent within the window)"
        changes.update(under.record_fields())
    else:
        return dataclasses.replace(record, **changes, **under.record_fields())
    reason = f"{record.bound_reason}; {why}" if record.bound_reason else why
    return dataclasses.replace(record, **changes, bound=Bound.OTHER, bound_reason=reason,
                               emulation_limited=False)


def point_record(net, point: Point, spec: SweepSpec, monitor: Monitor, window: Window,
                 clients: PointClients) -> Record:
    """The record of ``point``, measured in ``net``: the monitor's evidence of ``window`` and its verdict,
    and what the ``clients`` say of the test."""
    # TCP at an MSS or with bulk writes, UDP datagrams (fragmented or not): the link's goodput
    expected = expected_point_goodput_mbps(point, spec.mtu, spec.pmtu)
    ev = dataclasses.replace(evidence(window.first, window.last, window.backlog, point.rate_mbit, monitor.meter.cpus,
                                      expected, monitor.meter.clock), shaper_lost=window.shaper_lost)
    bucket = burst_bytes(net.shaping, spec.mtu) * 8 / (point.rate_mbit * 1e6 * ev.window_s)
    bound, why = classify(ev, expected, bucket)
    return Record(
        **point.fields(),
        # the bottleneck monitor's evidence and verdict
        **ev.record_fields(), bound=bound, bound_reason=why,
        **clients.record_fields(),
        # an arm of an A/B within the sweep: the ESP path's extra instructions (ipsec.slowdown)
        injected_instructions=net.esp_slowdown if point.arm else None,
        duration_s=spec.duration_s, warmup_s=spec.warmup_s, window_start_unix=window.start_unix,
        theoretical_goodput_mbps=expected,
        keying=spec.keying,
        ike_sas=net.negotiated_sas() or None,  # none with static keying, or IPsec off
        emulation_limited=bound is Bound.CPU,
        kernel_release=platform.release(),
        time=now_iso(),
    )


def measure_with_retry(net, point: Point, spec: SweepSpec, servers: iperf.Servers, monitor: Monitor,
                       ahead: Ahead | None = None, following: Point | None = None,
                       ledger: phases.Phases | None = None, reference: bool = True) -> Record:
    """:func:`measure_point`, tried up to :data:`ATTEMPTS` times; a failed record after that.

    Before each try any server that has exited is started again; before a retry all of
    them are (one may hang), and the monitor follows them.  Only iperf3 failures are
    retried: an error of the network or of IPsec is not the point's and ends the sweep.
    """
    ledger = ledger or phases.Phases()
    reasons = []
    for attempt in range(1, ATTEMPTS + 1):
        try:
            if attempt == 1:
                servers.start()
            else:
                servers.restart()
            monitor.follow(servers)
            ledger.lap(phases.SERVERS)
            record = measure_point(net, point, spec, servers, monitor, ahead, following, ledger, reference)
            return dataclasses.replace(record, attempts=attempt)
        except iperf.IperfError as e:
            ledger.lap(phases.FAILED)
            reasons.append(one_line(e))
            log.warning("%s, attempt %d of %d: %s", point.describe(), attempt, ATTEMPTS, reasons[-1])
    return Record.failure(point.fields(), ATTEMPTS, "; ".join(reasons), duration_s=spec.duration_s,
                          warmup_s=spec.warmup_s, time=now_iso())

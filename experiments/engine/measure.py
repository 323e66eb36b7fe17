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
held until their turn (:class:`Ahead`).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import platform
import threading
import time

from experiments.engine import iperf
from experiments.engine.monitor import Monitor, classify, evidence, no_gc, realtime
from experiments.engine.plan import Point, SweepSpec
from ipsec.overhead import expected_point_goodput_mbps
from testbed.errors import one_line
from testbed.record import Bound, Record, Tunnel
from testbed.rundir import now_iso
from topologies.shaping import burst_bytes, shaper_handle

log = logging.getLogger(__name__)

#: How far into a point's warm-up the next point's iperf3 clients are started (see Ahead): early,
#: so that loading them (over 0.1 s in UML) is done before a 0.3 s warm-up ends.
AHEAD_AFTER_S = 0.05
#: About what loading one iperf3 client takes in UML: a point's clients are started ahead only when
#: all of them can load during the warm-up (see starts_ahead).
AHEAD_LOAD_S = 0.1
#: iperf3 is told to run this much longer than warm-up and window; it is stopped before.
IPERF_SPARE_S = 3
#: How often the shaper's backlog is sampled during the window.
BACKLOG_EVERY_S = 0.1
#: How long the receivers may take to see data after the clients are let go.
FLOW_TIMEOUT_S = 10.0
#: ... and for every one of N TCP clients to have its data connection up, this much more per client.
CONNECT_S_PER_CLIENT = 0.5
#: When a SYN that was dropped gets through at the latest: Linux sends it 1 + tcp_syn_retries (6) times,
#: 1, 2, 4, ... 32 s apart, and gives up 127 s after the first.
SYN_HORIZON_S = 127.0


def connect_timeout_s(clients: int, rate_mbit: float | None = None) -> float:
    """How long every one of ``clients`` TCP flows may take to connect before the point fails.

    Beyond a floor and a share per client, a share of the SYN horizon that grows with the flows per
    Mbit/s of the shaped link: the first flows fill the shaper's queue, a late SYN is dropped there and
    backs off (1, 3, 7, 15, 31, 63 s after the first try).  From one flow per Mbit/s up (100 clients at
    10 Mbit/s) the wait reaches the horizon, after which the kernel itself gives the connection up.
    """
    crowd = min(1.0, clients / rate_mbit) if rate_mbit else 0.0
    return FLOW_TIMEOUT_S + CONNECT_S_PER_CLIENT * clients + SYN_HORIZON_S * crowd


#: Tries per point before it is recorded as failed.
ATTEMPTS = 2


def flows_of(net, ip_version: int) -> list[iperf.Flow]:
    """The iperf3 flows of a built network: every (client, server) pair of its spec."""
    return [iperf.Flow(net.ns(server), net.ns(client), net.addr(server, ip_version))
            for client, server in net.spec.flows]


def monitor_for(net, servers: iperf.Servers, meter) -> Monitor:
    """A :class:`~experiments.engine.monitor.Monitor` of ``net``'s shaped link and its flows' ends."""
    client = net.spec.flows[0][0]
    node, peer = net.spec.shaped_sender(client)
    shaper = (net.ns(node), net.ifname(node, peer), shaper_handle(net.shaping))
    receivers = [(net.ns(server), port, proc.pid)
                 for (_client, server), port, proc in zip(net.spec.flows, servers.ports, servers.procs, strict=True)]
    return Monitor(shaper, receivers, [net.ns(c) for c, _s in net.spec.flows], meter)


def switch_ipsec(net, current: str, profile: str, mode: str, families, keying: str = "static") -> str:
    """Put ``net`` from profile ``current`` to ``profile`` (a no-op when they are the same), keyed
    as ``keying`` says (:data:`ipsec.ike.KEYINGS`); returns ``profile``."""
    if profile != current:
        net.remove_ipsec()
        if Tunnel.of(profile) is Tunnel.IPSEC:
            net.apply_ipsec(profile, mode, families=families, keying=keying)
    return profile


def iperf_options(point: Point, spec: SweepSpec) -> dict:
    """:func:`experiments.engine.iperf.flow_args`' test options for ``point``: a test longer than its warm-up
    and window (it is stopped when the window closes), and than the wait for every one of several TCP
    clients to connect (the first ones must still run when the last come), no warm-up of iperf3's own."""
    waiting = connect_timeout_s(point.clients, point.rate_mbit) if point.transport == "tcp" and point.clients > 1 else 0
    return dict(duration_s=math.ceil(spec.warmup_s + spec.duration_s + waiting) + IPERF_SPARE_S,
                transport=point.transport,
                omit_s=0,
                mss=point.size_bytes if point.size_mode == "mss" else None,
                length=point.size_bytes if point.size_mode in ("write", "datagram") else None,
                bitrate=spec.udp_bitrate if point.transport == "udp" else None, window=spec.socket_buffer)


def starts_ahead(following: Point | None, warmup_s: float) -> bool:
    """Whether ``following``'s clients are started during a warm-up of ``warmup_s``: when all of them
    can load in it (one or three clients in the default 0.3 s).  Two hundred cannot: they would be
    killed unloaded as the window opens, and die in it, on the CPU it measures."""
    return (following is not None and warmup_s > AHEAD_AFTER_S
            and following.clients * AHEAD_LOAD_S <= warmup_s + 1e-9)


class Ahead:
    """The next point's iperf3 clients, started during this point's warm-up and held there.

    Starting iperf3 inside User-Mode Linux costs over a tenth of a second, most of it
    loading its libraries; :class:`experiments.engine.iperf.Clients` does that ahead and holds
    the clients before they connect.  :meth:`start` is called :data:`AHEAD_AFTER_S`
    into a point's warm-up; :meth:`settle`, when the warm-up ends, kills any that has
    not yet reached its hold (the CPU was too busy to load it in time), so nothing but
    the point's own test runs in its measured seconds.
    """

    def __init__(self, net, spec: SweepSpec, servers) -> None:
        self.net, self.spec, self.servers = net, spec, servers
        self.clients: iperf.Clients | None = None
        self.killed = 0  # clients not held in time (a figure for the log)
        self._dying: list[iperf.Clients] = []  # killed by settle(), reaped outside the window
        self._lock = threading.Lock()

    def start(self, point: Point) -> None:
        flows = flows_of(self.net, point.ip_version)
        args = iperf.flow_args(flows, self.servers.ports, **iperf_options(point, self.spec))
        with self._lock:
            self._close()
            self.reap()
            try:
                self.clients = iperf.Clients(flows, args)
            except (iperf.IperfError, OSError) as e:  # the next point starts its own
                log.warning("could not start the next point's iperf3 clients ahead: %s", e)

    def settle(self) -> None:
        """Kill the clients started ahead unless they are held; the window opens now, so the dead are
        not waited for (:meth:`reap`)."""
        with self._lock:
            if self.clients is not None and not self.clients.held():
                self.killed += 1
                log.info("the next point's iperf3 clients were not ready at the end of the warm-up: stopped")
                self.clients.close(wait=False)
                self._dying.append(self.clients)
                self.clients = None

    def reap(self) -> None:
        """Wait for the clients :meth:`settle` killed."""
        while self._dying:
            self._dying.pop().reap()

    def take(self) -> iperf.Clients | None:
        """The clients started ahead (None if none), now the caller's."""
        with self._lock:
            clients, self.clients = self.clients, None
            return clients

    def _close(self) -> None:
        if self.clients is not None:
            self.clients.close()
            self.clients = None

    def close(self) -> None:
        with self._lock:
            self._close()
            self.reap()


def _sleep_until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def measure_point(net, point: Point, spec: SweepSpec, servers: iperf.Servers, monitor: Monitor,
                  ahead: Ahead | None = None, following: Point | None = None) -> Record:
    """Measure one point in the built network ``net`` (IPsec already as the point needs); its record.

    With ``ahead``, this point uses the clients started ahead for it, if any, and starts
    ``following``'s during its warm-up.  Raises :class:`~experiments.engine.iperf.IperfError` when
    the test fails.
    """
    flows = flows_of(net, point.ip_version)
    args = iperf.flow_args(flows, servers.ports, **iperf_options(point, spec))
    # several TCP flows: how long every one may take to connect (and its server to end its test)
    crowd_s = connect_timeout_s(len(flows), point.rate_mbit) if point.transport == "tcp" and len(flows) > 1 else None
    held = ahead.take() if ahead else None
    if held is not None and (held.args != args or not held.waiting()):
        held.close()
        held = None
    backlog: list[int] = []
    shaper_lost = 0  # backlog samples that found no shaper
    with held or iperf.Clients(flows, args) as clients, no_gc(), realtime():
        if held is None and len(flows) > 1:
            # fresh clients go together once all are loaded: staggered by their loading (tenths of a
            # second each in UML), the last would start behind a queue the first had filled
            clients.wait_held(connect_timeout_s(len(flows)))
        monitor.for_test(point.transport, point.size_bytes if point.transport == "udp" else 0)
        clients.go()
        let_go = time.monotonic()
        try:
            seen = monitor.wait_for_flow(FLOW_TIMEOUT_S, failed=clients.failure) / 1e9
            # many clients: the window opens once every one is connected (the warm-up is a floor)
            every = None
            if crowd_s:
                every = monitor.wait_all_connected(crowd_s, failed=clients.failure) / 1e9
        except TimeoutError as e:
            raise iperf.IperfError(f"{e} (iperf3 clients {'started ahead' if held else 'started now'})") from None
        start = max(seen + spec.warmup_s, every or 0.0)
        end = start + spec.duration_s
        if ahead and starts_ahead(following, spec.warmup_s):
            _sleep_until(seen + AHEAD_AFTER_S)
            ahead.start(following)
        _sleep_until(start)
        if ahead:
            ahead.settle()
        first = monitor.read()
        # a busy guest may take the first reading late: the window still lasts what was asked
        end = max(end, first.shaper.at_ns / 1e9 + spec.duration_s)
        # the window's start on the wall clock, to line it up with accounts kept elsewhere
        window_start_unix = time.time() - (time.monotonic_ns() - first.shaper.at_ns) / 1e9
        while time.monotonic() < end - BACKLOG_EVERY_S / 2:
            _sleep_until(min(end, time.monotonic() + BACKLOG_EVERY_S))
            try:
                backlog.append(monitor.backlog())
            except RuntimeError:  # the qdisc is gone: someone replaced it (an anomaly, below)
                shaper_lost += 1
        _sleep_until(end)
        last = monitor.read()
        # every client's test ran to the end of the window (they are asked to outlast it)
        ended = clients.ended()
        if ended:
            raise iperf.IperfError(f"{ended}, before the window closed")
        results, reports_lost = clients.stop(FLOW_TIMEOUT_S)
    if reports_lost:
        log.warning("%s: %d of %d iperf3 clients lost their own report when stopped, after the window (the "
                    "point's figures are the monitor's); the first: %s", point, len(reports_lost), len(flows),
                    reports_lost[0])
    # a server winds its test up when the client's last word reaches it: behind a full queue that
    # may take retransmissions as long as a connection took to come up; polled gently when many
    settle_s = crowd_s or FLOW_TIMEOUT_S
    if not monitor.wait_servers_idle(settle_s, poll_s=min(0.5, 0.01 * len(flows))):
        raise iperf.IperfError(f"an iperf3 server still held the interrupted test after {settle_s:g} s")
    if ahead:
        ahead.reap()
    # TCP at an MSS or with bulk writes, UDP datagrams (fragmented or not): the link's goodput
    expected = expected_point_goodput_mbps(point, spec.mtu, spec.pmtu)
    ev = dataclasses.replace(evidence(first, last, backlog, point.rate_mbit, monitor.meter.cpus, expected),
                             shaper_lost=shaper_lost)
    bucket = burst_bytes(net.shaping, spec.mtu) * 8 / (point.rate_mbit * 1e6 * ev.window_s)
    bound, why = classify(ev, expected, bucket)
    moved_gb = ev.goodput_mbps * ev.window_s / 8e3
    return Record(
        **point.fields(),
        # an arm of an A/B within the sweep: the ESP path's extra instructions (ipsec.slowdown)
        injected_instructions=net.esp_slowdown if point.arm else None,
        duration_s=spec.duration_s, warmup_s=spec.warmup_s,
        goodput_mbps=ev.goodput_mbps, window_s=ev.window_s, window_start_unix=window_start_unix,
        theoretical_goodput_mbps=expected, bytes=round(moved_gb * 1e9),
        # iperf3's own account, the sender's side up to its stop (not used for any figure)
        iperf3_sender_mbps=None if reports_lost else sum(r.goodput_mbps for r in results),
        iperf3_reports_lost=len(reports_lost),
        loss_pct=ev.loss_pct, retransmits=ev.retransmits,
        # the bottleneck monitor's evidence and verdict
        bound=bound, bound_reason=why,
        link_utilization=ev.link_utilization, link_packets=ev.link_packets, link_drops=ev.link_drops,
        link_overlimits=ev.link_overlimits, queue_busy=ev.queue_busy, queue_mean_bytes=ev.queue_mean_bytes,
        queue_samples=ev.queue_samples, shaper_goodput_mbps=ev.shaper_goodput_mbps,
        sender_rwnd_limited=ev.sender_rwnd_limited, sender_sndbuf_limited=ev.sender_sndbuf_limited,
        cpu_busy_pct=100.0 * ev.cpu_busy, cpu_s=ev.cpu_s,
        cpu_s_per_gb=ev.cpu_s / moved_gb if moved_gb > 0 else None,
        cpu_us_per_packet=ev.cpu_s * 1e6 / ev.link_packets if ev.link_packets else None,
        cpu_kernel_busy_pct=ev.proc_busy_pct, cpu_system_pct=ev.proc_system_pct,
        cpu_softirq_pct=ev.proc_softirq_pct, cpu_busiest_pct=ev.proc_busiest_cpu_pct,
        speed_probe_ns=ev.speed_probe_ns,
        clock_skew=ev.clock_skew, reading_spread_s=ev.max_reading_spread_s,
        goodput_uncertainty=ev.goodput_uncertainty,
        # iperf3's clients were started during the previous point's warm-up (see Ahead)
        clients_ahead=held is not None,
        clients_sending_s=every - let_go if every is not None else None,
        keying=spec.keying,
        ike_sas=net.negotiated_sas() or None,  # none with static keying, or IPsec off
        emulation_limited=bound is Bound.CPU,
        kernel_release=platform.release(),
        time=now_iso(),
    )


def measure_with_retry(net, point: Point, spec: SweepSpec, servers: iperf.Servers, monitor: Monitor,
                       ahead: Ahead | None = None, following: Point | None = None) -> Record:
    """:func:`measure_point`, tried up to :data:`ATTEMPTS` times; a failed record after that.

    Before each try any server that has exited is started again; before a retry all of
    them are (one may hang), and the monitor follows them.  Only iperf3 failures are
    retried: an error of the network or of IPsec is not the point's and ends the sweep.
    """
    reasons = []
    for attempt in range(1, ATTEMPTS + 1):
        try:
            if attempt == 1:
                servers.start()
            else:
                servers.restart()
            monitor.follow(servers)
            record = measure_point(net, point, spec, servers, monitor, ahead, following)
            return dataclasses.replace(record, attempts=attempt)
        except iperf.IperfError as e:
            reasons.append(one_line(e))
            log.warning("%s, attempt %d of %d: %s", point, attempt, ATTEMPTS, reasons[-1])
    return Record.failure(point.fields(), ATTEMPTS, "; ".join(reasons), duration_s=spec.duration_s,
                          warmup_s=spec.warmup_s, time=now_iso())

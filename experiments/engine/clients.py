"""A point's iperf3 clients through their lifecycle: the runner that
:func:`~experiments.engine.measure.measure_point` composes, as flent gives each tool its runner.

::

    held or fresh -- go -- data seen -- all connected -- [ the window ] -- stopped -- servers idle
                                    +-- the next point's started ahead, held or stopped as the window opens

:class:`PointClients` is one point's clients from start to end; :class:`Ahead` starts the next
point's during this one's warm-up (:class:`experiments.engine.iperf.Clients` holds them until
their turn).  How long iperf3 runs and how long its connections may take are here too
(:func:`iperf_options`, :func:`connect_timeout_s`).
"""
from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from experiments.engine import iperf
from experiments.engine.monitor import Monitor
from experiments.engine.plan import Point, SweepSpec
from experiments.engine.waits import wait_all_connected, wait_for_flow, wait_servers_idle
from testbed.waiting import sleep_until

log = logging.getLogger(__name__)

#: How far into a point's warm-up the next point's iperf3 clients are started (see Ahead): early,
#: so that loading them (over 0.1 s in UML) is done before a 0.3 s warm-up ends.
AHEAD_AFTER_S = 0.05
#: About what loading one iperf3 client takes in UML: a point's clients are started ahead only when
#: all of them can load during the warm-up (see starts_ahead).
AHEAD_LOAD_S = 0.1
#: iperf3 is told to run this much longer than warm-up and window; it is stopped before.
IPERF_SPARE_S = 3
#: How long the receivers may take to see data after the clients are let go.
FLOW_TIMEOUT_S = 10.0
#: ... and for every one of N TCP clients to have its data connection up, this much more per client.
CONNECT_S_PER_CLIENT = 0.5
#: When a SYN that was dropped gets through at the latest: Linux sends it 1 + tcp_syn_retries (6) times,
#: 1, 2, 4, ... 32 s apart, and gives up 127 s after the first.
SYN_HORIZON_S = 127.0


def connect_timeout_s(clients: int, rate_mbit: float | None = None, given: float | None = None) -> float:
    """How long every one of ``clients`` TCP flows may take to connect before the point fails: ``given``
    (a sweep's ``--connect-timeout``), else as follows.

    Beyond a floor and a share per client, a share of the SYN horizon that grows with the flows per
    Mbit/s of the shaped link: the first flows fill the shaper's queue, a late SYN is dropped there and
    backs off (1, 3, 7, 15, 31, 63 s after the first try).  From one flow per Mbit/s up (100 clients at
    10 Mbit/s) the wait reaches the horizon, after which the kernel itself gives the connection up.
    """
    if given is not None:
        return given
    crowd = min(1.0, clients / rate_mbit) if rate_mbit else 0.0
    return FLOW_TIMEOUT_S + CONNECT_S_PER_CLIENT * clients + SYN_HORIZON_S * crowd


def flows_of(net, ip_version: int) -> list[iperf.Flow]:
    """The iperf3 flows of a built network: every (client, server) pair of its spec."""
    return [iperf.Flow(net.ns(server), net.ns(client), net.addr(server, ip_version))
            for client, server in net.spec.flows]


def iperf_options(point: Point, spec: SweepSpec) -> dict:
    """:func:`experiments.engine.iperf.flow_args`' test options for ``point``: a test longer than its warm-up
    and window (it is stopped when the window closes), and than the wait for every one of several TCP
    clients to connect (the first ones must still run when the last come), no warm-up of iperf3's own."""
    several = point.transport == "tcp" and point.clients > 1
    waiting = connect_timeout_s(point.clients, point.rate_mbit, spec.connect_timeout_s) if several else 0
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
        """Start ``point``'s clients and hold them (any started before are closed); should that fail, the
        point starts its own."""
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
        """Kill the clients started ahead, and wait for them and for those :meth:`settle` killed."""
        with self._lock:
            self._close()
            self.reap()


class PointClients:
    """One point's iperf3 clients, from their start to the end of the test:

    - **held or fresh**: the clients :class:`Ahead` started for this very test, if every one still
      waits (:func:`experiments.engine.iperf.ready_clients`), else fresh ones, which :meth:`start` lets
      go together once all have loaded when there are several;
    - **connect waits**: :meth:`start` lets them go and waits until data reaches the receivers and, with
      several TCP clients, until every one has its data connection up (:mod:`experiments.engine.waits`);
      then the window may open;
    - **the next point's, ahead**: :meth:`start_next` starts them in this point's warm-up, and
      :meth:`settle_next` stops those not held at its end;
    - **lost reports**: :meth:`stop` ends the test once the window has closed, every client having
      run to its end; a client that lost its own report when stopped is counted, not failed (the
      point's figures are the monitor's);
    - **wound up**: :meth:`wind_up` waits until the servers have ended the interrupted test, and reaps
      the clients :meth:`settle_next` killed.

    A context manager: the clients are taken or started on entry and killed on exit.  A test that
    fails is an :class:`~experiments.engine.iperf.IperfError` (the point is tried again).
    """

    def __init__(self, flows: list[iperf.Flow], point: Point, spec: SweepSpec, ports: list[int], monitor: Monitor,
                 ahead: Ahead | None = None) -> None:
        self.flows, self.point, self.spec, self.monitor, self.ahead = list(flows), point, spec, monitor, ahead
        self.args = iperf.flow_args(self.flows, ports, **iperf_options(point, spec))
        # several TCP flows: how long every one may take to connect (and its server to end its test)
        several = point.transport == "tcp" and len(self.flows) > 1
        self.crowd_s = connect_timeout_s(len(self.flows), point.rate_mbit, spec.connect_timeout_s) if several else None
        self.clients: iperf.Clients | None = None
        self.started_ahead = False  # the clients were started during the previous point's warm-up (Ahead)
        self.let_go_at: float | None = None  # (monotonic s)
        self.seen_at: float | None = None  # data reached the receivers
        self.all_connected_at: float | None = None  # every one of several TCP clients had connected
        self.results: list[iperf.Result] = []  # the clients' own reports
        self.reports_lost: list[str] = []  # ... and why each one lost was

    def __enter__(self) -> PointClients:
        held = self.ahead.take() if self.ahead else None
        self.clients, self.started_ahead = iperf.ready_clients(held, self.flows, self.args)
        return self

    def __exit__(self, *exc) -> None:
        self.clients.close()

    def start(self) -> float:
        """Let the clients go and wait until data reaches the receivers (and, with several TCP clients,
        every one is connected: :attr:`all_connected_at`); the monotonic seconds when data was seen."""
        clients = self.clients
        if not self.started_ahead and len(self.flows) > 1:
            # fresh clients go together once all are loaded: staggered by their loading (tenths of a
            # second each in UML), the last would start behind a queue the first had filled
            clients.wait_held(connect_timeout_s(len(self.flows), given=self.spec.connect_timeout_s))
        self.monitor.for_test(self.point.transport, self.point.size_bytes if self.point.transport == "udp" else 0)
        clients.go()
        self.let_go_at = time.monotonic()
        try:
            self.seen_at = wait_for_flow(self.monitor, FLOW_TIMEOUT_S, failed=clients.failure) / 1e9
            if self.crowd_s:
                self.all_connected_at = wait_all_connected(self.monitor, self.crowd_s, failed=clients.failure) / 1e9
        except TimeoutError as e:
            how = "started ahead" if self.started_ahead else "started now"
            raise iperf.IperfError(f"{e} (iperf3 clients {how})") from None
        return self.seen_at

    def start_next(self, following: Point | None) -> None:
        """Start ``following``'s clients ahead, :data:`AHEAD_AFTER_S` after data was seen, when they
        can load during the warm-up (:func:`starts_ahead`)."""
        if self.ahead and starts_ahead(following, self.spec.warmup_s):
            sleep_until(self.seen_at + AHEAD_AFTER_S)
            self.ahead.start(following)

    def settle_next(self) -> None:
        """As the window opens: stop the next point's clients unless they are held (:meth:`Ahead.settle`)."""
        if self.ahead:
            self.ahead.settle()

    def stop(self) -> None:
        """Stop the test once the window has closed, and keep the clients' own reports (:attr:`results`)
        and why any was lost (:attr:`reports_lost`).  Every client must have run to the end of the
        window: one that ended before is an :class:`~experiments.engine.iperf.IperfError`."""
        # every client's test ran to the end of the window (they are asked to outlast it)
        ended = self.clients.ended()
        if ended:
            raise iperf.IperfError(f"{ended}, before the window closed")
        self.results, self.reports_lost = self.clients.stop(FLOW_TIMEOUT_S)

    def wind_up(self) -> None:
        """After the clients are gone: say which reports were lost, wait until the servers have ended the
        interrupted test, and reap the next point's clients :meth:`settle_next` killed."""
        if self.reports_lost:
            log.warning("%s: %d of %d iperf3 clients lost their own report when stopped, after the window (the "
                        "point's figures are the monitor's); the first: %s", self.point, len(self.reports_lost),
                        len(self.flows), self.reports_lost[0])
        # a server winds its test up when the client's last word reaches it: behind a full queue that
        # may take retransmissions as long as a connection took to come up; polled gently when many
        settle_s = self.crowd_s or FLOW_TIMEOUT_S
        if not wait_servers_idle(self.monitor, settle_s, poll_s=min(0.5, 0.01 * len(self.flows))):
            raise iperf.IperfError(f"an iperf3 server still held the interrupted test after {settle_s:g} s")
        if self.ahead:
            self.ahead.reap()

    def record_fields(self) -> dict[str, Any]:
        """What the clients add to the point's :class:`~testbed.record.Record`."""
        return {
            # iperf3's own account, the sender's side up to its stop (not used for any figure)
            "iperf3_sender_mbps": None if self.reports_lost else sum(r.goodput_mbps for r in self.results),
            "iperf3_reports_lost": len(self.reports_lost),
            # iperf3's clients were started during the previous point's warm-up (see Ahead)
            "clients_ahead": self.started_ahead,
            "clients_sending_s": (self.all_connected_at - self.let_go_at
                                  if self.all_connected_at is not None else None),
        }

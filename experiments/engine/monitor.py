"""The bottleneck monitor: one network's counters, read around each point's window.

Mininet-HiFi's fidelity monitor watched the link; this one also explains the point.  It is in
three parts besides this module's :class:`Monitor`, which holds one network's readers (their
sockets opened once) and knows which connections are the current test's:

- :mod:`experiments.engine.counters`: the counter readers (the shaper's qdisc, the receivers' and
  senders' sockets, UDP's counters, the CPU), each reading timed;
- :mod:`experiments.engine.waits`: the waits on the test's connections (data seen, every client
  connected, the servers idle again);
- :mod:`experiments.engine.verdict`: the window's evidence and what bounded the point (pure).

:func:`no_gc` and :func:`realtime` are what the readings are taken under.
"""
from __future__ import annotations

import contextlib
import gc
import logging
import os
from collections.abc import Iterable, Iterator, Sequence

from experiments.engine.counters import (
    FlowCounters,
    KernelQueue,
    QdiscCounters,
    QdiscReader,
    Reading,
    SnmpReader,
    SoftnetReader,
    Timed,
    proc_stat_shares,
    timed,
)
from experiments.engine.sockdiag import CLOSE_WAIT, ESTABLISHED, SockDiag
from testbed.backends import CpuMeter

log = logging.getLogger(__name__)

#: A TCP connection that took in more than this carries a test's data, not iperf3's control
#: messages (a few hundred bytes): :meth:`Monitor.connected`.
DATA_BYTES = 16 * 1024
#: A flow whose data connection is up (:meth:`Monitor.connected`).
CONNECTED = "connected"


class Monitor:
    """Reads one network's counters for its points (the sockets it needs are opened once).

    ``shaper``: (namespace, interface, qdisc handle) of the shaper on the data's side;
    ``receivers``: (namespace, port, server pid) per flow; ``senders``: the flows' client
    namespaces; ``meter``: the backend's :class:`~testbed.backends.CpuMeter`.
    """

    def __init__(self, shaper: tuple[str, str, int], receivers: Sequence[tuple[str, int, int]],
                 senders: Sequence[str], meter: CpuMeter) -> None:
        self.receivers = list(receivers)
        self.meter = meter
        self._shaper = QdiscReader(*shaper)
        namespaces = list(dict.fromkeys([r[0] for r in receivers] + list(senders)))
        self._diag = {ns: SockDiag(ns) for ns in namespaces}
        self._snmp = {ns: SnmpReader(ns) for ns in namespaces}
        self._softnet = SoftnetReader()
        self._senders = list(senders)
        self.transport = "tcp"
        self.datagram_bytes = 0
        self._earlier: frozenset[int] = frozenset()  # cookies of connections older than the test

    def close(self) -> None:
        self._shaper.close()
        self._softnet.close()
        for d in (*self._diag.values(), *self._snmp.values()):
            d.close()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def follow(self, servers) -> None:
        """Take the pids of ``servers`` (:class:`experiments.engine.iperf.Servers`), restarted or not."""
        self.receivers = [(ns, port, proc.pid if proc is not None else pid)
                          for (ns, port, pid), proc in zip(self.receivers, servers.procs, strict=True)]

    def for_test(self, transport: str, datagram_bytes: int = 0) -> Monitor:
        """Count what the next test moves: TCP bytes, or UDP datagrams of ``datagram_bytes`` (sent from
        the senders' namespaces, received in the receivers').

        Call it before the test's clients connect: the TCP connections there already (an
        earlier test's, still closing: FIN_WAIT, LAST_ACK) are not counted.  Such a connection
        keeps its byte counts until its last ACK, so counted it would add an earlier test's
        bytes to a reading and take them away again when it closed, mid-window or before the
        flow was seen to start (which then waited for the new flow to make up for them)."""
        self.transport, self.datagram_bytes = transport, datagram_bytes
        earlier = [*self._server_side(), *self._client_side()] if transport == "tcp" else []
        if earlier:
            log.debug("not counted in the next test: %d connection(s) of an earlier one (TCP states %s)",
                      len(earlier), ", ".join(str(s.state) for s in earlier))
        self._earlier = frozenset(s.cookie for s in earlier)
        return self

    def _server_side(self) -> list:
        """Every TCP connection on the servers' ports, in the receivers' namespaces."""
        return [s for sockets in self._servers_by_namespace().values() for s in sockets]

    def _servers_by_namespace(self) -> dict[str, list]:
        """The TCP connections on the servers' ports, by the receivers' namespace (one request per
        namespace and family, however many flows: :meth:`SockDiag.tcp`); a port can repeat across
        namespaces, so :meth:`stages` needs them kept apart."""
        return {ns: self._diag[ns].tcp(local_ports=ports)
                for ns, ports in _by_namespace((ns, port) for ns, port, _pid in self.receivers).items()}

    def _client_side(self) -> list:
        """Every TCP connection to the servers' ports, in the senders' namespaces."""
        pairs = ((ns, port) for ns, (_rns, port, _pid) in zip(self._senders, self.receivers, strict=True))
        return [s for ns, ports in _by_namespace(pairs).items() for s in self._diag[ns].tcp(remote_ports=ports)]

    # -- readings ------------------------------------------------------------------------
    def shaper(self) -> QdiscCounters:
        return self._shaper.read()

    def flows(self) -> FlowCounters:
        """What the point's connections have moved so far (see :class:`FlowCounters`)."""
        return self._with_senders(self._received())

    def _received(self) -> int:
        """What the receivers took in so far: TCP's in-order bytes, or UDP datagrams."""
        if self.transport == "udp":
            return sum(self._snmp[ns].udp("InDatagrams") for ns in dict.fromkeys(r[0] for r in self.receivers))
        return sum(s.bytes_received or 0 for s in self._server_side() if s.cookie not in self._earlier)

    def _with_senders(self, received: int) -> FlowCounters:
        """The receivers' count ``received`` with what the senders' namespaces say now."""
        if self.transport == "udp":
            sent = sum(self._snmp[ns].udp("OutDatagrams") for ns in dict.fromkeys(self._senders))
            return FlowCounters(received * self.datagram_bytes, received_datagrams=received, sent_datagrams=sent)
        senders = [s for s in self._client_side() if s.cookie not in self._earlier]
        limits = [(s.busy_us, s.rwnd_limited_us, s.sndbuf_limited_us) for s in senders]
        ooo, retrans = sum(s.sacked_bytes for s in senders), sum(s.total_retrans for s in senders)
        if not limits or any(b is None for b, _, _ in limits):
            return FlowCounters(received, ooo, retransmits=retrans)
        return FlowCounters(received, ooo, sum(b for b, _, _ in limits), sum(r or 0 for _, r, _ in limits),
                            sum(x or 0 for _, _, x in limits), retrans)

    def _edge(self) -> tuple[QdiscCounters, int, KernelQueue | None]:
        """The shaper's counters, the receivers' and the kernel's receive backlog, one right after
        the other (a few milliseconds with 200 receivers)."""
        return self.shaper(), self._received(), self._softnet.read()

    def read(self) -> Reading:
        """Every counter now (:class:`~experiments.engine.counters.Reading`): the shaper's and the
        receivers' in one bracket, taken again as a whole when it was wide; then the senders',
        whose SACKed bytes are a level and whose limited times are shared out over the window, so
        that the 0.05-0.15 s 200 senders' namespaces take moves neither."""
        edge = timed(self._edge)
        shaper, received, queue = edge.value
        flows = self._with_senders(received)
        return Reading(Timed(shaper, edge.before_ns, edge.after_ns), Timed(flows, edge.before_ns, edge.after_ns),
                       self.meter.sample(), proc_stat_shares(), queue)

    def backlog(self) -> int:
        return self.shaper().backlog_bytes

    # -- the connections' states ---------------------------------------------------------
    def servers_busy(self) -> bool:
        """Whether a server still holds a connection open (established, or closing on its side):
        after an interrupted test an iperf3 server takes a moment to wind it up, and turns a client
        away ("busy") until it has."""
        return any(s.state in (ESTABLISHED, CLOSE_WAIT) for s in self._server_side())

    def connected(self) -> int:
        """How many of the point's TCP flows have their data connection up: iperf3's second
        connection on the flow's server port established (the first is its control connection), or
        one that took in more than :data:`DATA_BYTES` (the control connection carries a few hundred).

        Connected, not necessarily moving data: with tens of flows per Mbit/s behind one queue, a
        flow whose first segments were dropped waits out its retransmission timeouts (1, 2, 4 ...
        s) while the others fill the link, and counts all the same."""
        return self.stages().count(CONNECTED)

    def stages(self) -> list[str]:
        """How far each flow's connections are, as its server sees them: :data:`CONNECTED`, or
        which of iperf3's two connections is not up yet."""
        stages = []
        on = self._servers_by_namespace()
        for ns, port, _pid in self.receivers:
            new = [s for s in on[ns] if s.local_port == port and s.cookie not in self._earlier]
            up = sum(s.state == ESTABLISHED for s in new)
            if up >= 2 or any((s.bytes_received or 0) > DATA_BYTES for s in new):
                stages.append(CONNECTED)
            else:
                stages.append("the control connection only" if up else "no connection yet")
        return stages


def _by_namespace(pairs: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    """(namespace, port) pairs as the ports of each namespace, in their order (pure)."""
    out: dict[str, list[int]] = {}
    for ns, port in pairs:
        out.setdefault(ns, []).append(port)
    return out


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Python's cyclic garbage collector held off for the block (it runs again soon after).

    A full collection of the sweep process's heap (Mininet, pyroute2, scapy) took half a
    second of CPU inside User-Mode Linux, at a moment no one chooses: inside a window it is
    CPU the point did not use, and at real-time priority it also delays the test itself.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def realtime() -> Iterator[bool]:
    """Run the calling thread at the lowest real-time priority for the block; yields whether it does.

    A point's readings must be taken when they are due and quickly, also when the kernel is
    saturated by the point's own traffic: a real-time thread preempts every normal process
    and the kernel's deferred network work (ksoftirqd), so its timers are kept and its
    readings are not cut in two.  It sleeps between readings, so it takes no CPU from the
    test; processes it starts get the normal policy back (``SCHED_RESET_ON_FORK``).
    """
    try:
        before = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(1))
    except (OSError, AttributeError) as e:
        log.debug("no real-time priority for the readings: %s", e)
        yield False
        return
    try:
        yield True
    finally:
        os.sched_setscheduler(0, before[0], before[1])

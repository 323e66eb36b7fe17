"""The bottleneck monitor: what bounded each point, read from the kernel's own counters.

Mininet-HiFi's fidelity monitor watched the link; this one also explains the point.  Around
a point's measured window it reads, each with the local clock before and after (so that a
reading delayed by a busy CPU is placed where it really happened):

- the **shaper** on the data's side of the shaped link (its qdisc over netlink): bytes and
  packets it sent, drops, overlimits, and, sampled through the window, its backlog;
- the **receivers**: the bytes TCP took in (``tcp_info``, :mod:`experiments.engine.sockdiag`) or the
  UDP datagrams delivered (``Udp: InDatagrams`` of the server's namespace), counted by the
  testbed over its own window, not by iperf3;
- the **senders'** ``tcp_info`` time limited by the receive window or the send buffer;
- the **CPU** of the kernel the work runs on, from its backend's meter (for User-Mode Linux
  the host's nanosecond account of the whole guest, :class:`testbed.backends.umlmeter.GuestMeter`),
  and the guest's own /proc/stat split (system, softirq).

:func:`evidence` turns two readings and the backlog samples into :class:`Evidence` (pure), and
:func:`classify` names what bounded the point (pure)::

    anomaly  the figures contradict each other (goodput above what the shaper let through,
             a shaper above its rate, counters that went backwards or a shaper that vanished
             mid-window): kept in the data, left out of means and verdicts
    link     the shaper was the bottleneck: it sent at (nearly) its rate, a queue in front
    cpu      the machine running the emulation was saturated and the link was not full: its
             meter's CPUs busy, its kernel without an idle tick, or one of its CPUs busy
    other    neither: e.g. a TCP window or socket-buffer limit, or a rate-limited sender
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import logging
import os
import socket
import struct
import time
from collections.abc import Callable, Iterator, Sequence

from analysis.stats import BUSIEST_CPU_PCT, CPU_SATURATED_PCT, KERNEL_BUSY_PCT
from experiments.engine.sockdiag import CLOSE_WAIT, ESTABLISHED, NLMSGHDR, SockDiag, netlink_messages, rtattrs
from testbed import netns, waiting
from testbed.backends import CpuMeter, CpuSample
from testbed.record import Bound

log = logging.getLogger(__name__)

#: A TCP connection that took in more than this carries a test's data, not iperf3's control
#: messages (a few hundred bytes): :meth:`Monitor.connected`.
DATA_BYTES = 16 * 1024
#: A flow whose data connection is up (:meth:`Monitor.connected`).
CONNECTED = "connected"
#: The shaper counts as the bottleneck when it sent at least this share of its rate ...
LINK_FULL = 0.97
#: ... with a queue in front of it in at least this share of the backlog samples (or drops).
QUEUE_STANDING = 0.5
#: The emulating machine counts as saturated when its CPU was busy this share of the window, or
#: its kernel KERNEL_BUSY_PCT busy, or one of its CPUs BUSIEST_CPU_PCT busy. The three limits live
#: in analysis.stats, shared with the reports, which mark the CPU cost of such points.
CPU_SATURATED = CPU_SATURATED_PCT / 100
#: Goodput may exceed what the shaper's bytes carry (at the overhead model's payload share)
#: by this much before the two are called contradictory: the bytes in flight between the
#: shaper and the receiving socket at the window's two ends differ by up to a few packets.
AGREEMENT = 0.02
#: A window may carry this much more than the link's rate and its token bucket allow before it
#: is called impossible: a frame at each end and the readings' timing (0.1 % at most seen).
CEILING_TOLERANCE = 0.005
#: Within this share of a clock reading's bracket the reading counts as placed exactly.
_NS = 1e9


@dataclasses.dataclass(frozen=True)
class QdiscCounters:
    """A qdisc's statistics (``tc -s qdisc``): totals since it was added, and its queue now."""

    bytes: int
    packets: int
    drops: int
    overlimits: int
    backlog_bytes: int
    qlen: int


_TCMSG = struct.Struct("=B3xiIII")      # family, (pad), ifindex, handle, parent, info
RTM_GETQDISC, RTM_NEWQDISC = 38, 36
TCA_STATS2, TCA_STATS_BASIC, TCA_STATS_QUEUE = 7, 1, 3


def parse_qdiscs(data: bytes) -> tuple[dict[tuple[int, int], QdiscCounters], bool]:
    """{(ifindex, handle): counters} of an RTM_NEWQDISC dump buffer, and whether it ended the dump (pure)."""
    messages, done = netlink_messages(data, "qdisc dump")
    found = {}
    for kind, body in messages:
        if kind != RTM_NEWQDISC:
            continue
        _family, ifindex, handle, _parent, _info = _TCMSG.unpack_from(body)
        stats = rtattrs(body, _TCMSG.size).get(TCA_STATS2)
        if stats is not None:
            nested = rtattrs(stats)
            nbytes, packets = struct.unpack_from("=QI", nested[TCA_STATS_BASIC])
            qlen, backlog, drops, _requeues, overlimits = struct.unpack_from("=5I", nested[TCA_STATS_QUEUE])
            found[(ifindex, handle)] = QdiscCounters(nbytes, packets, drops, overlimits, backlog, qlen)
    return found, done


class QdiscReader:
    """One qdisc's counters over a raw rtnetlink socket kept open in its namespace: a dump costs
    one request and a few struct unpacks, so a reading is quick even on a busy CPU."""

    def __init__(self, ns: str, ifname: str, handle: int) -> None:
        with netns.iproute(ns) as ipr:
            found = ipr.link_lookup(ifname=ifname)
        if not found:
            raise RuntimeError(f"no interface {ifname} in {ns}")
        self.where = f"{ifname} in {ns}"
        self.key = (found[0], handle)
        self._sock = netns.socket_in(ns, socket.NETLINK_ROUTE)
        self._seq = 0

    def read(self) -> QdiscCounters:
        self._seq += 1
        body = _TCMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        self._sock.send(NLMSGHDR.pack(NLMSGHDR.size + len(body), RTM_GETQDISC, 0x1 | 0x300, self._seq, 0) + body)
        result, done = None, False
        while not done:
            found, done = parse_qdiscs(self._sock.recv(1 << 16))
            result = found.get(self.key, result)
        if result is None:
            raise RuntimeError(f"no qdisc {self.key[1]:#x} on {self.where}")
        return result

    def close(self) -> None:
        self._sock.close()


@dataclasses.dataclass(frozen=True)
class Timed:
    """A value and the local monotonic nanoseconds before and after it was read."""

    value: object
    before_ns: int
    after_ns: int

    @property
    def at_ns(self) -> float:
        return (self.before_ns + self.after_ns) / 2

    @property
    def spread_ns(self) -> int:
        return self.after_ns - self.before_ns


#: A reading whose bracket is wider than this is taken again (up to :data:`READ_TRIES` times) and
#: the narrowest kept: on a saturated kernel a system call may run pending network work first.
WIDE_READING_NS = 2_000_000
READ_TRIES = 3


def _timed(read) -> Timed:
    best = None
    for _ in range(READ_TRIES):
        t0 = time.monotonic_ns()
        value = read()
        taken = Timed(value, t0, time.monotonic_ns())
        if best is None or taken.spread_ns < best.spread_ns:
            best = taken
        if best.spread_ns <= WIDE_READING_NS:
            break
    return best


@dataclasses.dataclass(frozen=True)
class FlowCounters:
    """What the point's connections had moved at one moment.

    ``received``: bytes the receivers took in, in order (TCP) or as datagrams (UDP);
    ``out_of_order``: bytes they held beyond a hole (the senders' SACKed segments), which
    crossed the network but TCP will count only when the hole is filled; ``busy_us``,
    ``rwnd_limited_us``, ``sndbuf_limited_us``, ``retransmits``: the senders' tcp_info (None for
    UDP); ``sent_datagrams``: UDP only.
    """

    received: int
    out_of_order: int = 0
    busy_us: int | None = None
    rwnd_limited_us: int | None = None
    sndbuf_limited_us: int | None = None
    retransmits: int | None = None      # TCP segments the senders retransmitted
    sent_datagrams: int | None = None   # UDP datagrams the senders' namespaces sent ...
    received_datagrams: int | None = None  # ... and the receivers' took in

    @property
    def arrived(self) -> int:
        return self.received + self.out_of_order


@dataclasses.dataclass(frozen=True)
class Reading:
    """Every counter of a point at one moment (each timed on its own)."""

    shaper: Timed        # QdiscCounters
    flows: Timed         # FlowCounters
    cpu: CpuSample
    proc_stat: ProcStat


@dataclasses.dataclass(frozen=True)
class ProcStat:
    """This kernel's own account of its CPUs (/proc/stat's ``cpu`` and ``cpuN`` lines, in ticks)."""

    ticks: tuple[int, ...]  # user, nice, system, idle, iowait, irq, softirq, steal
    per_cpu: tuple[tuple[int, ...], ...] = ()

    def until(self, later: ProcStat) -> tuple[float, float, float]:
        """Busy, system and softirq shares (percent) of the ticks between this reading and ``later``."""
        delta = [b - a for a, b in zip(self.ticks, later.ticks, strict=True)]
        total = sum(delta)
        if total <= 0:  # no tick between the readings: the kernel's account says nothing
            return 0.0, 0.0, 0.0
        return (100.0 * (total - delta[3] - delta[4]) / total, 100.0 * delta[2] / total,
                100.0 * delta[6] / total)

    def busiest_until(self, later: ProcStat) -> float:
        """The busy share (percent) of the busiest CPU between this reading and ``later``."""
        shares = []
        for a, b in zip(self.per_cpu, later.per_cpu, strict=False):
            delta = [y - x for x, y in zip(a, b, strict=True)]
            if sum(delta) > 0:
                shares.append(100.0 * (sum(delta) - delta[3] - delta[4]) / sum(delta))
        return max(shares, default=0.0)


def parse_proc_stat(text: str) -> ProcStat:
    """The ``cpu`` and ``cpuN`` lines of /proc/stat (pure)."""
    total: tuple[int, ...] = (0,) * 8
    per_cpu = []
    for line in text.splitlines():
        if not line.startswith("cpu"):
            break
        fields = line.split()
        values = [int(v) for v in fields[1:9]]
        values = tuple(values + [0] * (8 - len(values)))
        if fields[0] == "cpu":
            total = values
        else:
            per_cpu.append(values)
    return ProcStat(total, tuple(per_cpu))


def proc_stat_shares() -> ProcStat:
    with open("/proc/stat") as f:
        return parse_proc_stat(f.read(8192))


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
        self._senders = list(senders)
        self.transport = "tcp"
        self.datagram_bytes = 0
        self._earlier: frozenset[int] = frozenset()  # cookies of connections older than the test

    def close(self) -> None:
        self._shaper.close()
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
        return [s for ns, port, _pid in self.receivers for s in self._diag[ns].tcp(local_ports=[port])]

    def _client_side(self) -> list:
        """Every TCP connection to the servers' ports, in the senders' namespaces."""
        return [s for ns, (_rns, port, _pid) in zip(self._senders, self.receivers, strict=True)
                for s in self._diag[ns].tcp(remote_ports=[port])]

    # -- readings ------------------------------------------------------------------------
    def shaper(self) -> QdiscCounters:
        return self._shaper.read()

    def flows(self) -> FlowCounters:
        """What the point's connections have moved so far (see :class:`FlowCounters`)."""
        if self.transport == "udp":
            received = sum(self._snmp[ns].udp("InDatagrams") for ns in dict.fromkeys(r[0] for r in self.receivers))
            sent = sum(self._snmp[ns].udp("OutDatagrams") for ns in dict.fromkeys(self._senders))
            return FlowCounters(received * self.datagram_bytes, received_datagrams=received, sent_datagrams=sent)
        received = sum(s.bytes_received or 0 for s in self._server_side() if s.cookie not in self._earlier)
        senders = [s for s in self._client_side() if s.cookie not in self._earlier]
        limits = [(s.busy_us, s.rwnd_limited_us, s.sndbuf_limited_us) for s in senders]
        ooo, retrans = sum(s.sacked_bytes for s in senders), sum(s.total_retrans for s in senders)
        if not limits or any(b is None for b, _, _ in limits):
            return FlowCounters(received, ooo, retransmits=retrans)
        return FlowCounters(received, ooo, sum(b for b, _, _ in limits), sum(r or 0 for _, r, _ in limits),
                            sum(x or 0 for _, _, x in limits), retrans)

    def read(self) -> Reading:
        return Reading(_timed(self.shaper), _timed(self.flows), self.meter.sample(), proc_stat_shares())

    def backlog(self) -> int:
        return self.shaper().backlog_bytes

    def wait_servers_idle(self, timeout_s: float, poll_s: float = 0.01) -> bool:
        """Wait until no server holds a connection open: after an interrupted test an iperf3 server
        takes a moment to wind it up, and turns a client away ("busy") until it has."""
        for _ in waiting.Deadline(timeout_s, interval_s=poll_s).polls():
            if not any(s.state in (ESTABLISHED, CLOSE_WAIT) for s in self._server_side()):
                return True
        return False

    def connected(self) -> int:
        """How many of the point's TCP flows have their data connection up: iperf3's second
        connection on the flow's server port established (the first is its control connection), or
        one that took in more than :data:`DATA_BYTES` (the control connection carries a few hundred).

        Connected, not necessarily moving data: with tens of flows per Mbit/s behind one queue, a
        flow whose first segments were dropped waits out its retransmission timeouts (1, 2, 4 ...
        s) while the others fill the link, and counts all the same."""
        return self._stages().count(CONNECTED)

    def _stages(self) -> list[str]:
        """How far each flow's connections are, as its server sees them: :data:`CONNECTED`, or
        which of iperf3's two connections is not up yet."""
        stages = []
        for ns, port, _pid in self.receivers:
            new = [s for s in self._diag[ns].tcp(local_ports=[port]) if s.cookie not in self._earlier]
            up = sum(s.state == ESTABLISHED for s in new)
            if up >= 2 or any((s.bytes_received or 0) > DATA_BYTES for s in new):
                stages.append(CONNECTED)
            else:
                stages.append("the control connection only" if up else "no connection yet")
        return stages

    def wait_all_connected(self, timeout_s: float, poll_s: float = 0.05,
                           failed: Callable[[], str | None] = lambda: None) -> int:
        """Wait until every TCP flow's data connection is up (:meth:`connected`); the monotonic ns when it was.

        TimeoutError after ``timeout_s`` saying how many had connected by then, or at once when
        ``failed()`` says why one never will."""
        for _ in waiting.Deadline(timeout_s, interval_s=poll_s).polls():
            t = time.monotonic_ns()
            n = self.connected()
            if n >= len(self.receivers):
                return t
            why = failed()
            if why:
                raise TimeoutError(why)
        late = collections.Counter(s for s in self._stages() if s != CONNECTED)
        seen = ", ".join(f"{v} with {k}" for k, v in late.most_common())
        raise TimeoutError(f"{n} of {len(self.receivers)} clients had connected after {timeout_s:g} s"
                           + (f" (of the others, as their servers saw them: {seen})" if seen else ""))

    def wait_for_flow(self, timeout_s: float, poll_s: float = 0.02,
                      failed: Callable[[], str | None] = lambda: None) -> int:
        """Wait until the receivers take in data; returns the monotonic ns when they were seen to.

        TimeoutError after ``timeout_s``, or at once when ``failed()`` says why no data will come
        (a client that exited)."""
        start = self.flows().received
        for _ in waiting.Deadline(timeout_s, interval_s=poll_s).polls():
            t = time.monotonic_ns()
            if self.flows().received > start:
                return t
            why = failed()
            if why:
                raise TimeoutError(why)
        raise TimeoutError(f"no data reached the receivers within {timeout_s:g} s")


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


def udp_counter(snmp: str, snmp6: str, name: str) -> int:
    """A UDP counter (InDatagrams, OutDatagrams) over both IP versions: the ``Udp:`` lines of a
    /proc/net/snmp text plus ``Udp6<name>`` of a /proc/net/snmp6 text (pure)."""
    lines = [line.split() for line in snmp.splitlines() if line.startswith("Udp:")]
    header, values = lines[0], lines[1]
    v6 = [line.split() for line in snmp6.splitlines() if line.startswith(f"Udp6{name} ")]
    return int(values[header.index(name)]) + (int(v6[0][1]) if v6 else 0)


class SnmpReader:
    """A namespace's /proc/net/snmp and snmp6, opened once from inside it: the open files keep
    reading that namespace's counters whatever process comes and goes there (an iperf3 server
    restarted, a client that has exited)."""

    def __init__(self, ns: str) -> None:
        def open_both() -> tuple[int, int]:
            flags = os.O_RDONLY | os.O_CLOEXEC
            v4 = os.open("/proc/thread-self/net/snmp", flags)
            try:
                return v4, os.open("/proc/thread-self/net/snmp6", flags)
            except OSError:  # a kernel without IPv6
                return v4, -1

        self._fds = netns.run_in(ns, open_both)

    def udp(self, name: str) -> int:
        v4, v6 = self._fds
        return udp_counter(os.pread(v4, 1 << 16, 0).decode(),
                           os.pread(v6, 1 << 16, 0).decode() if v6 >= 0 else "", name)

    def close(self) -> None:
        for fd in self._fds:
            if fd >= 0:
                os.close(fd)
        self._fds = (-1, -1)


# -- evidence and class (pure) ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Evidence:
    """What one point's window showed; every field is recorded with the point."""

    window_s: float                 # the receivers' window
    goodput_mbps: float             # bytes the receivers took in over it
    link_utilization: float         # shaper bytes * 8 / (rate * its window)
    link_packets: int
    link_drops: int
    link_overlimits: int
    queue_busy: float | None     # share of backlog samples with a queue
    queue_mean_bytes: float | None
    queue_samples: int
    shaper_goodput_mbps: float | None  # link_utilization * the model's goodput at full rate
    cpu_busy: float                 # share of the backend's CPUs busy (its meter's account)
    cpu_s: float                    # CPU seconds the meter accounted over the window
    proc_busy_pct: float            # this kernel's own /proc/stat view: busy, system, softirq
    proc_system_pct: float
    proc_softirq_pct: float
    proc_busiest_cpu_pct: float     # ... and its busiest CPU's busy share
    sender_rwnd_limited: float | None   # share of the window
    sender_sndbuf_limited: float | None
    retransmits: int | None      # TCP segments retransmitted in the window
    loss_pct: float | None       # UDP datagrams sent in the window and not received
    clock_skew: float               # (meter's clock window - local window) / local window
    max_reading_spread_s: float     # the widest bracket of any reading (how well placed they are)
    goodput_uncertainty: float = 0.0      # how far the goodput may be off from its readings' timing alone
    utilization_uncertainty: float = 0.0  # ... and the link's utilization (shares of the value)
    shaper_lost: int = 0            # backlog samples that found no shaper (its qdisc was replaced)
    speed_probe_ns: float | None = None  # the speed probe's ns per operation over the window (how slow the machine ran)


def evidence(a: Reading, b: Reading, backlog: Sequence[int], rate_mbit: float, cpus: float,
             expected_mbps: float | None) -> Evidence:
    """The :class:`Evidence` of the window between readings ``a`` and ``b``."""
    qa, qb = a.shaper.value, b.shaper.value
    fa, fb = a.flows.value, b.flows.value
    t_shaper = (b.shaper.at_ns - a.shaper.at_ns) / _NS
    t_recv = (b.flows.at_ns - a.flows.at_ns) / _NS
    moved = fb.arrived - fa.arrived
    util = (qb.bytes - qa.bytes) * 8 / (rate_mbit * 1e6 * t_shaper)
    cpu_clock = (b.cpu.clock_ns - a.cpu.clock_ns) / _NS
    cpu_s = (b.cpu.cpu_ns - a.cpu.cpu_ns) / _NS
    local = (sum(b.cpu.local_ns) - sum(a.cpu.local_ns)) / 2 / _NS
    busy_pct, system_pct, softirq_pct = a.proc_stat.until(b.proc_stat)
    rwnd = sndbuf = None
    if fa.busy_us is not None and fb.busy_us is not None:
        span_us = t_recv * 1e6
        rwnd = (fb.rwnd_limited_us - fa.rwnd_limited_us) / span_us
        sndbuf = (fb.sndbuf_limited_us - fa.sndbuf_limited_us) / span_us
    retrans = fb.retransmits - fa.retransmits if fa.retransmits is not None and fb.retransmits is not None else None
    loss = None
    if fa.sent_datagrams is not None and fb.sent_datagrams is not None and fb.sent_datagrams > fa.sent_datagrams:
        got = fb.received_datagrams - fa.received_datagrams
        loss = max(0.0, 100.0 * (1 - got / (fb.sent_datagrams - fa.sent_datagrams)))
    speed = None
    if a.cpu.probe and b.cpu.probe and b.cpu.probe[0] > a.cpu.probe[0]:
        speed = (b.cpu.probe[1] - a.cpu.probe[1]) / (b.cpu.probe[0] - a.cpu.probe[0])
    spreads = [r.spread_ns for r in (a.shaper, a.flows, b.shaper, b.flows)]
    spreads += [x.local_ns[1] - x.local_ns[0] for x in (a.cpu, b.cpu)]
    return Evidence(
        window_s=t_recv, goodput_mbps=moved * 8 / t_recv / 1e6, link_utilization=util,
        link_packets=qb.packets - qa.packets, link_drops=qb.drops - qa.drops,
        link_overlimits=qb.overlimits - qa.overlimits,
        queue_busy=sum(1 for q in backlog if q > 0) / len(backlog) if backlog else None,
        queue_mean_bytes=sum(backlog) / len(backlog) if backlog else None, queue_samples=len(backlog),
        shaper_goodput_mbps=util * expected_mbps if expected_mbps else None,
        cpu_busy=cpu_s / (cpu_clock * cpus) if cpu_clock > 0 else 0.0, cpu_s=cpu_s,
        proc_busy_pct=busy_pct, proc_system_pct=system_pct, proc_softirq_pct=softirq_pct,
        proc_busiest_cpu_pct=a.proc_stat.busiest_until(b.proc_stat),
        sender_rwnd_limited=rwnd, sender_sndbuf_limited=sndbuf, retransmits=retrans, loss_pct=loss,
        clock_skew=(cpu_clock - local) / local if local > 0 else 0.0,
        max_reading_spread_s=max(spreads) / _NS,
        # a reading placed at the middle of its bracket is off by at most half of it, at each end
        goodput_uncertainty=(a.flows.spread_ns + b.flows.spread_ns) / 2 / _NS / t_recv,
        utilization_uncertainty=(a.shaper.spread_ns + b.shaper.spread_ns) / 2 / _NS / t_shaper,
        speed_probe_ns=speed)


def classify(ev: Evidence, expected_mbps: float | None, burst_share: float = 0.0) -> tuple[Bound, str]:
    """What bounded the point, and why in one sentence (see the module docstring).

    ``burst_share``: the shaper's token bucket over what its rate moves in the window (it may
    send that much more after an idle moment).
    """
    backwards = [what for what, moved in (("the shaper's", ev.link_packets), ("the receivers'", ev.goodput_mbps),
                                          ("the CPU meter's", ev.cpu_s)) if moved < 0]
    if backwards:
        return Bound.ANOMALY, (f"{' and '.join(backwards)} counters went backwards over the window: "
                           "something replaced or reset them mid-window")
    if ev.shaper_lost:
        return Bound.ANOMALY, (f"the shaper's qdisc was missing in {ev.shaper_lost} of "
                           f"{ev.shaper_lost + ev.queue_samples} samples: something replaced it mid-window")
    possible = 1.0 + burst_share + CEILING_TOLERANCE
    if ev.link_utilization > possible + ev.utilization_uncertainty:
        return Bound.ANOMALY, (f"the shaper sent {ev.link_utilization:.4f} of its rate over the window, more than "
                           f"its rate and bucket allow ({1 + burst_share:.4f})")
    agree = 1 + AGREEMENT + ev.goodput_uncertainty + ev.utilization_uncertainty
    if ev.shaper_goodput_mbps and ev.goodput_mbps > ev.shaper_goodput_mbps * agree \
            and ev.goodput_mbps - ev.shaper_goodput_mbps > 0.01:
        return Bound.ANOMALY, (f"goodput {ev.goodput_mbps:.3f} Mbit/s is above what the shaper let through "
                           f"({ev.shaper_goodput_mbps:.3f} Mbit/s at the overhead model's payload share)")
    if expected_mbps and ev.goodput_mbps > expected_mbps * (possible + ev.goodput_uncertainty):
        return Bound.ANOMALY, (f"goodput {ev.goodput_mbps:.3f} Mbit/s is above what the link can carry in the window: "
                           f"its theoretical {expected_mbps:.3f} Mbit/s and its token bucket")
    queued = (ev.queue_busy or 0.0) >= QUEUE_STANDING or ev.link_drops > 0
    if ev.link_utilization >= LINK_FULL and queued:
        queue = f"a queue in {ev.queue_busy:.0%} of samples" if ev.queue_busy is not None else "drops"
        return Bound.LINK, f"the shaper sent {ev.link_utilization:.3f} of its rate with {queue}"
    if ev.cpu_busy >= CPU_SATURATED or ev.proc_busy_pct >= KERNEL_BUSY_PCT:
        return Bound.CPU, (f"the emulating CPU was {ev.cpu_busy:.0%} busy while the shaper sent "
                       f"{ev.link_utilization:.3f} of its rate")
    if ev.proc_busiest_cpu_pct >= BUSIEST_CPU_PCT:
        return Bound.CPU, (f"one CPU was {ev.proc_busiest_cpu_pct:.0f} % busy (all of them {ev.cpu_busy:.0%}) "
                       f"while the shaper sent {ev.link_utilization:.3f} of its rate")
    limits = []
    if ev.sender_rwnd_limited is not None and ev.sender_rwnd_limited >= 0.1:
        limits.append(f"the receive window held the sender back {ev.sender_rwnd_limited:.0%} of the time")
    if ev.sender_sndbuf_limited is not None and ev.sender_sndbuf_limited >= 0.1:
        limits.append(f"the send buffer held the sender back {ev.sender_sndbuf_limited:.0%} of the time")
    if not limits:
        limits.append(f"the shaper sent {ev.link_utilization:.3f} of its rate, the CPU was {ev.cpu_busy:.0%} busy")
    return Bound.OTHER, "; ".join(limits)

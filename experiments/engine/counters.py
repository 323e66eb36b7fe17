"""The kernel's counters a point is judged by, each read quickly and timed: the counter readers.

Around a point's measured window the monitor (:mod:`experiments.engine.monitor`) reads, each with
the local clock before and after (:class:`Timed`, so that a reading delayed by a busy CPU is
placed where it really happened):

- the **shaper** on the data's side of the shaped link (its qdisc over netlink,
  :class:`QdiscReader`): bytes and packets it sent, drops, overlimits, and, sampled through the
  window, its backlog;
- the **receivers**: the bytes TCP took in (``tcp_info``, :mod:`experiments.engine.sockdiag`) or the
  UDP datagrams delivered (``Udp: InDatagrams`` of the server's namespace, :class:`SnmpReader`),
  counted by the testbed over its own window, not by iperf3 (:class:`FlowCounters`);
- the **senders'** ``tcp_info`` time limited by the receive window or the send buffer;
- the **kernel's receive backlog** (/proc/net/softnet_stat, :class:`KernelQueue`): the packets a
  device handed to the receiving side and it has not processed yet, and those it dropped;
- the **CPU** of the kernel the work runs on, from its backend's meter (for User-Mode Linux
  the host's nanosecond account of the whole guest, :class:`testbed.backends.umlmeter.GuestMeter`),
  and the guest's own /proc/stat split (system, softirq: :class:`ProcStat`).

One moment's readings of all of them are a :class:`Reading`.  The shaper and the receivers are
read one right after the other and bracketed together, so that a window's goodput and the
shaper's bytes span the same moments: with 200 clients the senders' namespaces take 0.05-0.15 s
more, and a reading of the network at real-time priority holds its traffic up meanwhile, so a
shaper read before them counted over other moments than the receivers (issue 46).  The parsers
are pure and tested on captured data.
"""
from __future__ import annotations

import dataclasses
import os
import socket
import struct
import time
from collections.abc import Callable

from experiments.engine.sockdiag import NLMSGHDR, netlink_messages, rtattrs
from testbed import netns
from testbed.backends import CpuSample


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


def timed(read: Callable[[], object]) -> Timed:
    """``read()``'s value, timed (:class:`Timed`): taken again when its bracket was wide (see
    :data:`WIDE_READING_NS`) and the narrowest of the tries kept."""
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
class KernelQueue:
    """The kernel's receive backlog (/proc/net/softnet_stat, all CPUs): a device that hands a packet
    to the receiving side (a veth does, for every packet it carries) queues it there until the CPU's
    network work takes it up; beyond ``netdev_max_backlog`` packets it is dropped.

    ``packets``: queued now (None from a kernel older than 5.10, which does not say);
    ``dropped``: dropped since boot.  The kernel's, not the point's: every packet of the machine
    counts, so as the point's it is an upper bound.
    """

    packets: int | None
    dropped: int


def parse_softnet(text: str) -> KernelQueue | None:
    """/proc/net/softnet_stat's lines summed over the CPUs (pure): the second column is the packets
    dropped, the twelfth (from Linux 5.10) the backlog's length, all in hex.  None without a line."""
    rows = [line.split() for line in text.splitlines() if line.strip()]
    if not rows:
        return None
    queued = sum(int(r[11], 16) for r in rows) if all(len(r) > 11 for r in rows) else None
    return KernelQueue(queued, sum(int(r[1], 16) for r in rows))


class SoftnetReader:
    """/proc/net/softnet_stat, opened once (the same in every namespace: the CPUs' queues are shared)."""

    def __init__(self) -> None:
        try:
            self._fd = os.open("/proc/net/softnet_stat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # a kernel without it
            self._fd = -1

    def read(self) -> KernelQueue | None:
        return parse_softnet(os.pread(self._fd, 1 << 16, 0).decode()) if self._fd >= 0 else None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = -1


@dataclasses.dataclass(frozen=True)
class Reading:
    """Every counter of a point at one moment.  ``shaper`` and ``flows`` share one bracket: the
    shaper's counters, then the receivers' (the senders' part of ``flows``, read after them, holds
    levels and times shared out over the window, which a moment's delay does not move);
    ``kernel_queue``: the receive backlog at the end of that bracket (None where the kernel has no
    account)."""

    shaper: Timed        # QdiscCounters
    flows: Timed         # FlowCounters
    cpu: CpuSample
    proc_stat: ProcStat
    kernel_queue: KernelQueue | None = None


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
    """This kernel's /proc/stat now (:class:`ProcStat`)."""
    with open("/proc/stat") as f:
        return parse_proc_stat(f.read(8192))



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

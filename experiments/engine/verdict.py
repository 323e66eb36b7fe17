"""The verdict: what bounded a point, from the evidence of its window (pure).

:func:`evidence` turns the two readings around a point's window and the backlog samples taken
in it (:mod:`experiments.engine.counters`) into :class:`Evidence`, and :func:`classify` names what
bounded the point::

    anomaly  the figures contradict each other (goodput above what the shaper let through,
             a shaper above its rate, counters that went backwards or a shaper that vanished
             mid-window): kept in the data, left out of means and verdicts
    link     the shaper was the bottleneck: it sent at (nearly) its rate, a queue in front
    cpu      the machine running the emulation was saturated and the link was not full: its
             meter's CPUs busy, its kernel without an idle tick, or one of its CPUs busy
    other    neither: e.g. a TCP window or socket-buffer limit, or a rate-limited sender

"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from analysis.stats import BUSIEST_CPU_PCT, CPU_SATURATED_PCT, KERNEL_BUSY_PCT
from experiments.engine.counters import Reading
from testbed import hostload
from testbed.backends.base import INSTRUCTIONS, TIME
from testbed.record import FIELDS, Bound

#: The shaper counts as the bottleneck when it sent at least this share of its rate ...
LINK_FULL = 0.97
#: ... with a queue in front of it in at least this share of the backlog samples (or drops).
QUEUE_STANDING = 0.5
#: The emulating machine counts as saturated when its CPU was busy this share of the window, or
#: its kernel KERNEL_BUSY_PCT busy, or one of its CPUs BUSIEST_CPU_PCT busy. The three limits live
#: in analysis.stats, shared with the reports, which mark the CPU cost of such points.
CPU_SATURATED = CPU_SATURATED_PCT / 100
#: Goodput may exceed what the shaper's bytes carry (at the overhead model's payload share)
#: by this much before the two are called contradictory: the model's payload share is the
#: full-sized packets', and the senders' SACKed bytes are known a round trip late.  Packets the
#: shaper had sent before the window and the receivers took in within it, from the kernel's
#: receive backlog, are allowed for besides, as many as it held when the window opened.
AGREEMENT = 0.02
#: A window may carry this much more than the link's rate and its token bucket allow before it
#: is called impossible: a frame at each end and the readings' timing (0.1 % at most seen).
CEILING_TOLERANCE = 0.005
#: Within this share of a clock reading's bracket the reading counts as placed exactly.
_NS = 1e9


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What one point's window showed; its figures are recorded with the point (:meth:`record_fields`)."""

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
    foreign_cpu_pct: float | None = None  # the host's CPU time on work not the testbed's, in % of one CPU (hostload)
    receive_backlog_start: int | None = None  # packets in the kernel's receive backlog as the window opened ...
    receive_backlog_end: int | None = None    # ... and as it closed (KernelQueue: None where the kernel does not say)
    receive_backlog_drops: int | None = None  # packets the kernel dropped there in the window (its backlog was full)
    clock: str = TIME               # what the meter's CPU ns count: time, or a counted guest's instructions
    wall_s: float | None = None     # the host's wall-clock seconds between the readings (a counted guest's)

    def record_fields(self) -> dict[str, Any]:
        """The evidence as a :class:`~testbed.record.Record`'s fields: every figure the record has, by its
        own name or the one :data:`RECORD_NAMES` gives it, and what follows from them (the bytes moved,
        the CPU busy in percent, CPU seconds per GB and microseconds per packet).

        Not recorded: the CPU's busy share (recorded in percent), the utilization's uncertainty and the
        samples without a shaper (the verdict says what they mean).
        """
        fields = {RECORD_NAMES.get(f.name, f.name): getattr(self, f.name) for f in dataclasses.fields(self)}
        moved_gb = self.goodput_mbps * self.window_s / 8e3
        out = {name: value for name, value in fields.items() if name in FIELDS} | {
            "bytes": round(moved_gb * 1e9), "cpu_busy_pct": 100.0 * self.cpu_busy}
        if self.clock == INSTRUCTIONS:  # a count, never in the columns of CPU time (one instruction per ns)
            instructions = round(self.cpu_s * _NS)
            return out | {"cpu_s": None, "instructions": instructions,
                          "instructions_per_packet": instructions / self.link_packets if self.link_packets else None,
                          "instructions_per_byte": instructions / (moved_gb * 1e9) if moved_gb > 0 else None}
        return out | {"clock": None, "wall_s": None,
                      "cpu_s_per_gb": self.cpu_s / moved_gb if moved_gb > 0 else None,
                      "cpu_us_per_packet": self.cpu_s * 1e6 / self.link_packets if self.link_packets else None}


#: The evidence's figures a record names otherwise: /proc/stat's shares are the kernel's CPU figures.
RECORD_NAMES = {"proc_busy_pct": "cpu_kernel_busy_pct", "proc_system_pct": "cpu_system_pct",
                "proc_softirq_pct": "cpu_softirq_pct", "proc_busiest_cpu_pct": "cpu_busiest_pct",
                "max_reading_spread_s": "reading_spread_s"}


def evidence(a: Reading, b: Reading, backlog: Sequence[int], rate_mbit: float, cpus: float,
             expected_mbps: float | None, clock: str = TIME) -> Evidence:
    """The :class:`Evidence` of the window between readings ``a`` and ``b`` (``clock``: what the CPU meter
    counts)."""
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
    speed = a.cpu.probe_ns_until(b.cpu)
    foreign = None
    if a.cpu.host and b.cpu.host:
        foreign = hostload.foreign_pct(a.cpu.host[0], b.cpu.host[0], a.cpu.host[1], b.cpu.host[1],
                                       b.cpu.clock_ns - a.cpu.clock_ns)
    spreads = [r.spread_ns for r in (a.shaper, a.flows, b.shaper, b.flows)]
    spreads += [x.local_ns[1] - x.local_ns[0] for x in (a.cpu, b.cpu)]
    qs = (a.kernel_queue, b.kernel_queue) if a.kernel_queue and b.kernel_queue else None
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
        speed_probe_ns=speed, foreign_cpu_pct=foreign,
        receive_backlog_start=qs[0].packets if qs else None, receive_backlog_end=qs[1].packets if qs else None,
        receive_backlog_drops=qs[1].dropped - qs[0].dropped if qs else None, clock=clock,
        wall_s=(b.cpu.wall_ns - a.cpu.wall_ns) / _NS if a.cpu.wall_ns and b.cpu.wall_ns else None)


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
    held = (ev.receive_backlog_start or 0) / ev.link_packets if ev.link_packets > 0 else 0.0
    agree = 1 + AGREEMENT + ev.goodput_uncertainty + ev.utilization_uncertainty + held
    if ev.shaper_goodput_mbps and ev.goodput_mbps > ev.shaper_goodput_mbps * agree \
            and ev.goodput_mbps - ev.shaper_goodput_mbps > 0.01:
        queue = (f", {ev.receive_backlog_start} packets in the kernel's receive backlog as the window opened "
                 "included" if ev.receive_backlog_start else "")
        return Bound.ANOMALY, (f"goodput {ev.goodput_mbps:.3f} Mbit/s is above what the shaper let through "
                           f"({ev.shaper_goodput_mbps:.3f} Mbit/s at the overhead model's payload share{queue})")
    if expected_mbps and ev.goodput_mbps > expected_mbps * (possible + ev.goodput_uncertainty + held):
        return Bound.ANOMALY, (f"goodput {ev.goodput_mbps:.3f} Mbit/s is above what the link can carry in the window: "
                           f"its theoretical {expected_mbps:.3f} Mbit/s and its token bucket")
    queued = (ev.queue_busy or 0.0) >= QUEUE_STANDING or ev.link_drops > 0
    if ev.link_utilization >= LINK_FULL and queued:
        queue = f"a queue in {ev.queue_busy:.0%} of samples" if ev.queue_busy is not None else "drops"
        return Bound.LINK, f"the shaper sent {ev.link_utilization:.3f} of its rate with {queue}"
    if ev.cpu_busy >= CPU_SATURATED or ev.proc_busy_pct >= KERNEL_BUSY_PCT:
        return Bound.CPU, (f"the emulating CPU was {ev.cpu_busy:.0%} busy while the shaper sent "
                           f"{ev.link_utilization:.3f} of its rate{_backlog_drops(ev)}")
    if ev.proc_busiest_cpu_pct >= BUSIEST_CPU_PCT:
        return Bound.CPU, (f"one CPU was {ev.proc_busiest_cpu_pct:.0f} % busy (all of them {ev.cpu_busy:.0%}) "
                           f"while the shaper sent {ev.link_utilization:.3f} of its rate{_backlog_drops(ev)}")
    limits = []
    if ev.sender_rwnd_limited is not None and ev.sender_rwnd_limited >= 0.1:
        limits.append(f"the receive window held the sender back {ev.sender_rwnd_limited:.0%} of the time")
    if ev.sender_sndbuf_limited is not None and ev.sender_sndbuf_limited >= 0.1:
        limits.append(f"the send buffer held the sender back {ev.sender_sndbuf_limited:.0%} of the time")
    if not limits:
        limits.append(f"the shaper sent {ev.link_utilization:.3f} of its rate, the CPU was {ev.cpu_busy:.0%} busy")
    return Bound.OTHER, "; ".join(limits) + _backlog_drops(ev)


def _backlog_drops(ev: Evidence) -> str:
    """The words a reason gains when the receiving kernel dropped packets the shaper had let through
    (its backlog full: the emulating CPU fell behind the link), else nothing (pure)."""
    if (ev.receive_backlog_drops or 0) <= 0:
        return ""
    share = f", {ev.receive_backlog_drops / ev.link_packets:.1%} of the shaper's" if ev.link_packets > 0 else ""
    return (f"; the receiving kernel dropped {ev.receive_backlog_drops} packets{share} (its backlog full: "
            "the emulating CPU fell behind the link)")

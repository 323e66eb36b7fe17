"""Link shaping: a rate (tbf or htb), optionally with delay and loss (netem), on one interface.

Shaping acts on what an interface *sends*; shape both ends of a veth for a symmetric link.
Layers, as everywhere in the testbed::

    ShapingSpec (validated data) -> plan_shaping() -> [TcOp, ...] -> apply_shaping() (pyroute2)

The qdisc trees :func:`plan_shaping` builds (handles as tc prints them)::

    tbf                    htb                           with delay_ms / loss_pct
    ---                    ---                           ------------------------
    1: tbf (root)          1: htb (root, default 10)     1: netem (root)
                           +- 1:10 class (rate = ceil)   +- 2: tbf | 2: htb ... (parent 1:1)
                              +- 10: pfifo (queue)

Design choices, with the kernel behaviour behind them:

* **Accounting.**  tc charges a packet ``skb->len`` bytes, which on Ethernet (veth too)
  includes the 14-byte MAC header but not the preamble + start delimiter (8), FCS (4) and
  inter-frame gap (12) that a real wire also spends.  ``framing="tc"`` keeps tc's default
  (a 10 Mbit tbf then gives TCP 10 * 1448/1514 Mbit/s at MSS 1460); ``framing="ethernet"``
  adds tc's ``overhead 24`` and ``mpu 84`` (the 60-byte minimum frame + 24), so goodput is
  what a physical 10 Mbit/s Ethernet carries (10 * 1448/1538).  Both are exact for
  GSO packets too: the kernel counts every segment's headers (``qdisc_pkt_len_init``).
* **Frames, not GSO packets.**  A tbf gets a peak bucket just under two packets, which
  makes it split every GSO packet into its frames at enqueue and release them one at a
  time, as a wire does (see :data:`PEAK_RATE_BYTES_PER_S`).  Without it a sender's 64 KB
  GSO packet left a 10 Mbit/s shaper in one piece, a 52 ms burst: a 2-second window then
  carried up to 2.6 % more than the rate, or less, depending on where its ends fell
  (measured in User-Mode Linux: 0.996..1.026 of the rate; with the split 0.9997..1.0004).
  The split also charges ``framing="ethernet"``'s once-per-packet overhead per frame.
  Its cost is CPU: every frame crosses the rest of the path on its own (in UML plain TCP
  at 100 Mbit/s then took most of the guest's CPU, against a seventh as GSO packets).
  htb cannot split: it charged the overhead once per GSO packet and gave 1.4..1.6% too
  much goodput, so ``framing="ethernet"`` is refused with ``qdisc="htb"``.
* **Burst.**  Tokens beyond ``burst`` are lost, so the bucket must cover the time the
  qdisc may wait for its timer: :func:`default_burst_bytes` gives
  ``max(4 frames, burst_time_s of the rate)``, with the kernel backend's
  ``shaper_burst_s``: 4 ms on a real kernel, 10 ms (a tick) inside User-Mode Linux, whose
  timers fire late when its CPU is busy.  A burst is also what the link lets through at
  full speed after an idle moment, above its rate, so it is kept no bigger than that: with
  the guest on one host CPU and frames released one by one, 10 ms kept 2-second windows at
  0.9999..1.0001 of the rate at 10 and 100 Mbit/s and at 0.994..0.999 with the guest's CPU
  saturated by ESP; 100 ms (needed before, when the guest wandered between host CPUs)
  let a window carry up to 5 % more than the rate after the link had idled.
* **Queue.**  ``latency_ms`` sizes the shaper's queue as ``tc ... latency`` does: tbf's
  byte ``limit`` is rate * latency + burst (latency is the longest wait behind a full
  bucket; under sustained load, with the bucket empty, a packet may wait latency +
  burst / rate, so 150 ms at 10 Mbit inside UML), and for htb the packet limit of a
  pfifo leaf holding that many full-size frames.
* **Delay and loss** need netem (``CONFIG_NET_SCH_NETEM``; the host kernel here lacks it,
  User-Mode Linux has it).  netem is the *root* and the shaper its child, so a packet is
  delayed, then queued and shaped: its delay adds to the queueing time as propagation does
  on a wire, and the shaper keeps its own queue (netem only holds packets during their
  delay).  In the other order (netem under the shaper, as Mininet builds it) every packet
  waits in netem, so netem's packet limit becomes the shaper's queue (with netem's
  default 1000 packets, 10 Mbit and 20 ms: median RTT under TCP load 324 ms, against
  157 ms here), and since netem counts the delay from enqueueing, a packet that waits in
  the queue longer than the delay gets none on top.
  netem drops whole GSO packets: with TCP, a loss takes all the segments of one GSO
  packet (2 or more; tens at 1 Gbit/s), so losses come in bursts.

Only :func:`apply_shaping` and :func:`remove_shaping` touch the kernel, through pyroute2's
netlink (never the ``tc`` program); the rest is pure and imports only the standard library.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import math
import os
import types
from collections.abc import Iterator, Mapping

from ipsec.overhead import (
    ETHERNET_HEADER_BYTES,
    ETHERNET_MIN_FRAME_BYTES,
    ETHERNET_WIRE_OVERHEAD_BYTES,
    FRAMINGS,
    IP_HEADER_BYTES,
    TCP_HEADER_BYTES,
)
from testbed.backends import current

log = logging.getLogger(__name__)

QDISCS: tuple[str, ...] = ("tbf", "htb")
#: What queues in front of the shaper: its own FIFO (tbf's byte limit, htb's pfifo leaf), or fq_codel
#: (RFC 8290: a flow queue each, CoDel's 5 ms target) as its child, the active queue management flent's
#: RRUL test is run against.
QUEUES: tuple[str, ...] = ("fifo", "fq_codel")


#: tc_ratespec.rate is 32-bit bytes/s and pyroute2 sends no TCA_TBF_RATE64: 34.36 Gbit/s at most.
MAX_RATE_MBIT = (2**32 - 1) * 8 / 1e6
#: Times are 32-bit "psched ticks" of 64 ns in tbf/htb parameters: 274.9 s at most.
MAX_TICKS_S = (2**32 - 1) * 64e-9
MAX_LATENCY_MS = 10_000.0
MAX_DELAY_MS = 60_000.0

#: Default burst: at least this many full frames ...
BURST_MIN_FRAMES = 4
#: ... and this many seconds at the rate: 4 ms (a tick at HZ=250) on a real kernel ...
BURST_TIME_S = 0.004
#: tbf peak rate for framing="ethernet" (see the module docstring): tc's 32-bit maximum,
#: 34 Gbit/s.  The peak bucket holds almost two frames, so after one frame it lacks a few
#: bytes for the next: a few nanoseconds at this rate, which the next dequeue has taken.
PEAK_RATE_BYTES_PER_S = 2**32 - 1
#: netem's queue only holds packets during their delay (the shaper below has its own
#: queue): room for twice the rate's worth of the smallest packets over the delay, and
#: never less than netem's own default.
NETEM_MIN_LIMIT_PACKETS = 1000
#: The smallest packet TCP sends, as tc counts it: an IPv4 ACK without options.
SMALLEST_PACKET_BYTES = ETHERNET_HEADER_BYTES + IP_HEADER_BYTES[4] + TCP_HEADER_BYTES
#: htb's single class: DRR quantum never below one frame nor above what the kernel accepts quietly.
HTB_MAX_QUANTUM_BYTES = 200_000
HTB_R2Q = 10

TC_H_ROOT = 0xFFFFFFFF
ROOT_HANDLE = 0x10000          # 1:
SHAPER_UNDER_NETEM = 0x20000   # 2:
HTB_DEFAULT_MINOR = 0x10       # class <major>:10
LEAF_HANDLE = 0x100000         # 10:

Number = int | float


def _number(name: str, value: object, allowed: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a number ({allowed}), not {value!r}")
    return float(value)


@dataclasses.dataclass(frozen=True)
class ShapingSpec:
    """What one interface's egress should look like; checked on construction.

    Attributes:
        rate_mbit: the rate in Mbit/s (10**6 bit/s, as tc's ``mbit``), any positive number
            up to :data:`MAX_RATE_MBIT`; the seeds use 1, 2, 4, 10, 34, 44, 51, 100, 1000.
        qdisc: ``"tbf"`` (default) or ``"htb"`` (one class).
        burst_bytes: token bucket size; None = :func:`default_burst_bytes` for the rate.
        latency_ms: longest wait in the shaper's queue before packets are dropped.
        framing: ``"tc"`` (tc's default: the 14-byte Ethernet header is counted) or
            ``"ethernet"`` (+24 bytes per frame like a physical wire; minimum frame 84).
        delay_ms: one-way delay added by netem (None or 0: none).
        loss_pct: random loss in percent added by netem (None or 0: none).
        queue: ``"fifo"`` (the shaper's own, sized by ``latency_ms``) or ``"fq_codel"`` (its child:
            fq_codel's defaults, 10,240 packets, 5 ms target, 100 ms interval; ``latency_ms`` then sizes
            nothing that a packet waits in).
    """

    rate_mbit: float
    qdisc: str = "tbf"
    burst_bytes: int | None = None
    latency_ms: float = 50.0
    framing: str = "tc"
    delay_ms: float | None = None
    loss_pct: float | None = None
    queue: str = "fifo"

    def __post_init__(self) -> None:
        rate = _number("rate_mbit", self.rate_mbit, f"Mbit/s, > 0 and <= {MAX_RATE_MBIT:.0f}")
        if not 0 < rate <= MAX_RATE_MBIT:
            raise ValueError(f"rate_mbit must be > 0 and <= {MAX_RATE_MBIT:.0f} "
                             f"(tc's 32-bit bytes/s), not {self.rate_mbit!r}")
        if round(rate * 125_000) < 1:
            raise ValueError(f"rate_mbit {self.rate_mbit!r} is below 1 byte/s (0.000008 Mbit/s), "
                             "the smallest rate tc can express")
        if self.qdisc not in QDISCS:
            raise ValueError(f"qdisc must be one of {', '.join(QDISCS)}, not {self.qdisc!r}")
        if self.queue not in QUEUES:
            raise ValueError(f"queue must be one of {', '.join(QUEUES)}, not {self.queue!r}")
        if self.framing not in FRAMINGS:
            raise ValueError(f"framing must be one of {', '.join(FRAMINGS)} (tc = tc's default "
                             f"accounting, ethernet = +24 bytes per frame), not {self.framing!r}")
        if self.framing == "ethernet" and self.qdisc != "tbf":
            raise ValueError(f"framing 'ethernet' needs qdisc 'tbf', not {self.qdisc!r}: htb charges the "
                             "24-byte overhead once per GSO packet, not per segment (TCP goodput came out "
                             "1.5% high); use qdisc 'tbf', or framing 'tc' with htb")
        if self.burst_bytes is not None and (isinstance(self.burst_bytes, bool)
                                             or not isinstance(self.burst_bytes, int)
                                             or not 1 <= self.burst_bytes < 2**32):
            raise ValueError(f"burst_bytes must be None (sized for the rate) or an integer "
                             f"number of bytes in 1..{2**32 - 1}, not {self.burst_bytes!r}")
        latency = _number("latency_ms", self.latency_ms, f"milliseconds, > 0 and <= {MAX_LATENCY_MS:g}")
        if not 0 < latency <= MAX_LATENCY_MS:
            raise ValueError(f"latency_ms must be > 0 and <= {MAX_LATENCY_MS:g}, not {self.latency_ms!r}")
        if self.delay_ms is not None:
            delay = _number("delay_ms", self.delay_ms, f"None or milliseconds in 0..{MAX_DELAY_MS:g}")
            if not 0 <= delay <= MAX_DELAY_MS:
                raise ValueError(f"delay_ms must be None or 0..{MAX_DELAY_MS:g} ms, not {self.delay_ms!r}")
        if self.loss_pct is not None:
            loss = _number("loss_pct", self.loss_pct, "None or percent in 0..100")
            if not 0 <= loss <= 100:
                raise ValueError(f"loss_pct must be None or a percentage in 0..100, not {self.loss_pct!r}")

    @property
    def rate_bytes_per_s(self) -> int:
        """The rate as the kernel takes it (tc_ratespec.rate, bytes per second)."""
        return max(1, round(self.rate_mbit * 125_000))

    @property
    def needs_netem(self) -> bool:
        """Whether the plan has a netem qdisc (a delay or a loss other than 0)."""
        return bool(self.delay_ms) or bool(self.loss_pct)

    @property
    def overhead_bytes(self) -> int:
        """Bytes tc adds to every packet it charges (tc's ``overhead``)."""
        return ETHERNET_WIRE_OVERHEAD_BYTES if self.framing == "ethernet" else 0

    @property
    def mpu_bytes(self) -> int:
        """Smallest charge per packet (tc's ``mpu``, compared after adding the overhead)."""
        return ETHERNET_MIN_FRAME_BYTES + ETHERNET_WIRE_OVERHEAD_BYTES if self.framing == "ethernet" else 0


@dataclasses.dataclass(frozen=True)
class TcOp:
    """One planned tc operation: add a qdisc or a class (what ``tc qdisc|class add`` would).

    ``handle`` and ``parent`` are 32-bit tc handles (``0x10000`` is ``1:``, ``0x10010``
    ``1:10``, :data:`TC_H_ROOT` is ``root``).  ``params`` carry units in their names
    (``rate_bytes_per_s``, ``burst_bytes``, ``latency_us``, ``limit_packets``...).
    """

    target: str  # "qdisc" or "class"
    kind: str    # "tbf", "htb", "netem", "pfifo"
    handle: int
    parent: int
    params: Mapping[str, Number] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.target not in ("qdisc", "class"):
            raise ValueError(f"target must be qdisc or class, not {self.target!r}")
        object.__setattr__(self, "params", types.MappingProxyType(dict(self.params)))

    def describe(self, dev: str = "DEV") -> str:
        """The operation as tc-like text (for logs, errors and --dry-run; never executed)."""
        where = "root" if self.parent == TC_H_ROOT else f"parent {format_handle(self.parent)}"
        ident = "classid" if self.target == "class" else "handle"
        args = " ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in self.params.items())
        return f"{self.target} add dev {dev} {where} {ident} {format_handle(self.handle)} {self.kind} {args}".rstrip()


def format_handle(handle: int) -> str:
    """A tc handle as tc prints it: 0x10000 -> '1:', 0x10010 -> '1:10'."""
    if handle == TC_H_ROOT:
        return "root"
    major, minor = handle >> 16, handle & 0xFFFF
    return f"{major:x}:{minor:x}" if minor else f"{major:x}:"


def frame_bytes(mtu: int, framing: str = "tc") -> int:
    """What the shaper charges for one full-size packet at ``mtu`` (before the minimum)."""
    if framing not in FRAMINGS:
        raise ValueError(f"framing must be one of {', '.join(FRAMINGS)}, not {framing!r}")
    return mtu + ETHERNET_HEADER_BYTES + (ETHERNET_WIRE_OVERHEAD_BYTES if framing == "ethernet" else 0)


def default_burst_bytes(rate_bytes_per_s: int, mtu: int = 1500, framing: str = "tc",
                        burst_time_s: float = BURST_TIME_S) -> int:
    """``max(BURST_MIN_FRAMES frames, burst_time_s of the rate)`` in bytes.

    The frames let a few back-to-back packets through at low rates; the time covers the
    wait for the qdisc's timer at high rates (tokens that overflow the bucket are lost,
    and the rate comes out low).
    """
    return max(BURST_MIN_FRAMES * frame_bytes(mtu, framing), math.ceil(rate_bytes_per_s * burst_time_s))


def kernel_burst_time_s() -> float:
    """How long a token bucket must last on the kernel this runs on (its backend's ``shaper_burst_s``)."""
    return current().shaper_burst_s


def shaper_handle(spec: ShapingSpec) -> int:
    """The handle of the qdisc that shapes (tbf or htb): the root, or netem's child."""
    return SHAPER_UNDER_NETEM if spec.needs_netem else ROOT_HANDLE


def burst_bytes(spec: ShapingSpec, mtu: int = 1500, burst_time_s: float | None = None) -> int:
    """The token bucket :func:`plan_shaping` gives ``spec`` on this kernel (``burst_time_s``:
    :func:`kernel_burst_time_s` when None)."""
    if spec.burst_bytes is not None:
        return spec.burst_bytes
    return default_burst_bytes(spec.rate_bytes_per_s, mtu, spec.framing,
                               kernel_burst_time_s() if burst_time_s is None else burst_time_s)


def plan_shaping(spec: ShapingSpec, mtu: int = 1500, burst_time_s: float = BURST_TIME_S) -> list[TcOp]:
    """The tc operations, in order, that shape one interface of MTU ``mtu`` like ``spec``.

    Pure.  ``burst_time_s`` sizes the default burst (when ``spec.burst_bytes`` is None;
    :func:`apply_shaping` passes :func:`kernel_burst_time_s`).  The first operation adds
    the root qdisc (handle ``1:``), so removing the root removes everything.  Raises
    ValueError when ``burst_bytes`` cannot work at this MTU or rate.
    """
    if isinstance(mtu, bool) or not isinstance(mtu, int) or not 68 <= mtu <= 65535:
        raise ValueError(f"mtu must be an integer in 68..65535, not {mtu!r}")
    rate = spec.rate_bytes_per_s
    frame = frame_bytes(mtu, spec.framing)
    if not 0 < burst_time_s <= 1:
        raise ValueError(f"burst_time_s must be > 0 and <= 1 second, not {burst_time_s!r}")
    burst = burst_bytes(spec, mtu, burst_time_s)
    if burst < frame:
        raise ValueError(f"burst_bytes {burst} is smaller than one full-size frame at mtu {mtu} "
                         f"({frame} bytes as {spec.framing!r} framing counts it): the shaper would "
                         f"drop full-size packets; give at least {frame}")
    if burst / rate > MAX_TICKS_S:
        raise ValueError(f"burst_bytes {burst} takes {burst / rate:.0f} s at {spec.rate_mbit:g} Mbit/s, "
                         f"more than tc's 32-bit tick field holds ({MAX_TICKS_S:.0f} s): "
                         "give a smaller burst_bytes or a higher rate_mbit")
    latency_s = spec.latency_ms / 1000
    limit_bytes = math.ceil(rate * latency_s) + burst
    overhead = {"overhead_bytes": spec.overhead_bytes, "mpu_bytes": spec.mpu_bytes}

    ops: list[TcOp] = []
    shaper, shaper_parent = ROOT_HANDLE, TC_H_ROOT
    if spec.needs_netem:
        delay_s = (spec.delay_ms or 0.0) / 1000
        limit = max(NETEM_MIN_LIMIT_PACKETS, math.ceil(2 * rate * delay_s / SMALLEST_PACKET_BYTES))
        ops.append(TcOp("qdisc", "netem", ROOT_HANDLE, TC_H_ROOT, {
            "delay_us": round((spec.delay_ms or 0.0) * 1000),
            "loss_pct": float(spec.loss_pct or 0.0),
            "limit_packets": limit,
        }))
        shaper, shaper_parent = SHAPER_UNDER_NETEM, ROOT_HANDLE | 1  # netem's class 1:1

    if spec.qdisc == "tbf":
        params: dict[str, Number] = {
            "rate_bytes_per_s": rate,
            "burst_bytes": burst,
            "latency_us": round(spec.latency_ms * 1000),
            "limit_bytes": limit_bytes,
            **overhead,
        }
        if rate < PEAK_RATE_BYTES_PER_S:
            # A peak burst just under two full packets caps tbf's max_size there, so tbf
            # splits every GSO packet into its frames (released one by one, each charged any
            # per-frame overhead).  The peak rate itself never binds (see PEAK_*).
            params["peak_rate_bytes_per_s"] = PEAK_RATE_BYTES_PER_S
            params["peak_burst_bytes"] = 2 * (mtu + ETHERNET_HEADER_BYTES) - 1
        ops.append(TcOp("qdisc", "tbf", shaper, shaper_parent, params))
        if spec.queue == "fq_codel":  # tbf's one class, shaper:1, takes it as its queue
            ops.append(TcOp("qdisc", "fq_codel", LEAF_HANDLE, shaper | 1, {}))
        return ops

    cls = shaper | HTB_DEFAULT_MINOR
    quantum = min(HTB_MAX_QUANTUM_BYTES, max(frame, rate // HTB_R2Q))
    ops.append(TcOp("qdisc", "htb", shaper, shaper_parent,
                    {"default_class": HTB_DEFAULT_MINOR, "r2q": HTB_R2Q}))
    ops.append(TcOp("class", "htb", cls, shaper, {
        "rate_bytes_per_s": rate,
        "ceil_bytes_per_s": rate,
        "burst_bytes": burst,
        "cburst_bytes": burst,
        # set explicitly: from rate/r2q the kernel would clamp it to 1000..200000 and warn
        # "quantum of class ... is big/small"
        "quantum_bytes": quantum,
        **overhead,
    }))
    if spec.queue == "fq_codel":
        ops.append(TcOp("qdisc", "fq_codel", LEAF_HANDLE, cls, {}))
    else:
        ops.append(TcOp("qdisc", "pfifo", LEAF_HANDLE, cls,
                        {"limit_packets": max(2, math.ceil(limit_bytes / frame))}))
    return ops


# -- apply: the only part that talks to the kernel -------------------------------------------

class ShapingError(RuntimeError):
    """A shaping operation failed; ``op`` is the failed :class:`TcOp` (None: not an op)."""

    def __init__(self, netns: str, ifname: str, reason: str, op: TcOp | None = None,
                 errno_: int | None = None) -> None:
        where = f"{ifname} in {netns}"
        super().__init__(f"{where}: {op.describe(ifname)}: {reason}" if op else f"{where}: {reason}")
        self.netns = netns
        self.ifname = ifname
        self.op = op
        self.errno = errno_


_CONFIG = {"tbf": "CONFIG_NET_SCH_TBF", "htb": "CONFIG_NET_SCH_HTB", "netem": "CONFIG_NET_SCH_NETEM",
           "pfifo": "CONFIG_NET_SCH_FIFO", "fq_codel": "CONFIG_NET_SCH_FQ_CODEL"}


def _kernel_message(e: Exception) -> str:
    """The kernel's extended-ack text of a NetlinkError (pyroute2 puts it in args[1])."""
    return str(e.args[1]) if len(e.args) > 1 else ""


def _is_missing_qdisc(op: TcOp, e: Exception) -> bool:
    """Whether the kernel refused ``op`` because it lacks the qdisc kind.

    ENOENT alone is ambiguous (a missing parent gives it too); the kernel's message is not:
    "Specified qdisc kind is unknown".  Without a message (no extended acks), ENOENT on
    adding a qdisc is taken to mean the kind.
    """
    if getattr(e, "code", None) != errno.ENOENT or op.target != "qdisc":
        return False
    message = _kernel_message(e)
    return "kind is unknown" in message or message in ("", os.strerror(errno.ENOENT))


def _missing_qdisc_message(kind: str) -> str:
    if kind == "netem":
        return ("netem (CONFIG_NET_SCH_NETEM) is not in this kernel: delay/loss need it; "
                "run with --kernel uml")
    if kind == "fq_codel":
        return (f"fq_codel ({_CONFIG[kind]}) is not in this kernel: the project's UML kernel has it "
                "(--kernel uml --uml-kernel recipe)")
    return f"{kind} ({_CONFIG[kind]}) is not in this kernel; run with --kernel uml"


_TBF_MESSAGE_CLASS = None


def _tbf_message():
    """A pyroute2 tcmsg whose tbf options also know TCA_TBF_BURST and TCA_TBF_PBURST.

    pyroute2's tbf takes no overhead, mpu or peak burst, and its options class stops at
    TCA_TBF_PTAB; the kernel's enum goes on (RATE64 4, PRATE64 5, BURST 6, PBURST 7, PAD 8).
    """
    global _TBF_MESSAGE_CLASS
    if _TBF_MESSAGE_CLASS is None:
        from pyroute2.netlink.rtnl.tcmsg import sched_tbf, tcmsg

        class tbf_options(sched_tbf.options):  # noqa: N801 (pyroute2 names messages as the kernel does)
            # pyroute2 caches the compiled nla_map in a class attribute that subclasses
            # inherit: once a plain tcmsg or tbf options object has been built (any qdisc
            # dump does it), a subclass would silently use its parent's map and drop the
            # attributes added here.  Each class must compile its own.
            _nlmsg_base__compiled_nla = False
            nla_map = (
                ("TCA_TBF_UNSPEC", "none"),
                ("TCA_TBF_PARMS", "tbf_parms"),
                ("TCA_TBF_RTAB", "rtab"),
                ("TCA_TBF_PTAB", "ptab"),
                ("TCA_TBF_RATE64", "uint64"),
                ("TCA_TBF_PRATE64", "uint64"),
                ("TCA_TBF_BURST", "uint32"),
                ("TCA_TBF_PBURST", "uint32"),
                ("TCA_TBF_PAD", "hex"),
            )

        class tbf_tcmsg(tcmsg):  # noqa: N801 (as above)
            _nlmsg_base__compiled_nla = False

            @staticmethod
            def get_options(self, *argv, **kwarg):
                return tbf_options

        _TBF_MESSAGE_CLASS = tbf_tcmsg
    return _TBF_MESSAGE_CLASS()


def _tbf_options(params: Mapping[str, Number]) -> dict:
    """TCA_OPTIONS of a tbf: the legacy parameters plus the exact byte sizes."""
    from pyroute2.netlink.rtnl.tcmsg.common import calc_xmittime

    rate = int(params["rate_bytes_per_s"])
    burst = int(params["burst_bytes"])
    parms = {
        "rate": rate,
        "buffer": calc_xmittime(rate, burst),  # bucket size in psched ticks (TCA_TBF_BURST wins)
        "limit": int(params["limit_bytes"]),
        "mtu": 0,
        "rate_overhead": int(params["overhead_bytes"]),
        "rate_mpu": int(params["mpu_bytes"]),
    }
    attrs = [["TCA_TBF_PARMS", parms], ["TCA_TBF_RTAB", True], ["TCA_TBF_BURST", burst]]
    if params.get("peak_rate_bytes_per_s"):
        peak, pburst = int(params["peak_rate_bytes_per_s"]), int(params["peak_burst_bytes"])
        parms.update(peak=peak, mtu=calc_xmittime(peak, pburst),
                     peak_overhead=parms["rate_overhead"], peak_mpu=parms["rate_mpu"])
        attrs += [["TCA_TBF_PTAB", True], ["TCA_TBF_PBURST", pburst]]
    return {"attrs": attrs}


def _add(ipr, index: int, op: TcOp) -> None:
    """Send one TcOp over ``ipr`` (pyroute2 IPRoute); raises pyroute2's NetlinkError."""
    p = op.params
    common = dict(index=index, handle=op.handle, parent=op.parent)
    if op.kind == "tbf":
        from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST
        from pyroute2.netlink.rtnl import RTM_NEWQDISC

        msg = _tbf_message()
        msg["index"], msg["handle"], msg["parent"] = index, op.handle, op.parent
        msg["attrs"] = [["TCA_KIND", "tbf"], ["TCA_OPTIONS", _tbf_options(p)]]
        msg["header"]["type"] = RTM_NEWQDISC
        msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
        # nlm_request_batch: pyroute2 0.9.7's synchronous nlm_request fails on IPRoute
        # (KeyError 'nlm_generator'); the batch call sends the same message.
        ipr.nlm_request_batch([msg])
    elif op.kind == "htb" and op.target == "qdisc":
        ipr.tc("add", "htb", default=p["default_class"], r2q=p["r2q"], **common)
    elif op.kind == "htb":
        ipr.tc("add-class", "htb", rate=p["rate_bytes_per_s"], ceil=p["ceil_bytes_per_s"],
               burst=p["burst_bytes"], cburst=p["cburst_bytes"], quantum=p["quantum_bytes"],
               overhead=p["overhead_bytes"], mpu=p["mpu_bytes"], **common)
    elif op.kind == "pfifo":
        ipr.tc("add", "pfifo", limit=p["limit_packets"], **common)
    elif op.kind == "fq_codel":
        ipr.tc("add", "fq_codel", **common)  # the kernel's defaults
    elif op.kind == "netem":
        # pyroute2's netem takes the delay in microseconds and the loss in percent
        ipr.tc("add", "netem", delay=p["delay_us"], loss=p["loss_pct"], limit=p["limit_packets"], **common)
    else:
        raise ValueError(f"cannot apply a {op.target} of kind {op.kind!r}")


def _root_qdisc(ipr, index: int) -> tuple[str, int] | None:
    """(kind, handle) of the interface's root qdisc, or None when there is none."""
    for msg in ipr.get_qdiscs(index=index):
        if msg["parent"] == TC_H_ROOT:
            return msg.get_attr("TCA_KIND"), msg["handle"]
    return None


def _lookup(ipr, netns: str, ifname: str) -> int:
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise ShapingError(netns, ifname, "no such interface", errno_=errno.ENODEV)
    return found[0]


def apply_shaping(netns: str, ifname: str, spec: ShapingSpec, mtu: int = 1500,
                  burst_time_s: float | None = None) -> list[TcOp]:
    """Shape ``ifname`` in namespace ``netns`` as ``spec`` says; returns the ops applied.

    ``burst_time_s`` (None: :func:`kernel_burst_time_s`) sizes the default burst.

    The interface must have no root qdisc of its own yet (a veth's default ``noqueue`` is
    fine).  All or nothing: if an operation fails, what was added is removed again before
    :class:`ShapingError` is raised (it names the failed operation; a kernel without the
    qdisc gets e.g. "netem (CONFIG_NET_SCH_NETEM) is not in this kernel ...").  netem,
    when the spec needs it, is the first operation, so a kernel without it fails before
    anything is added.
    """
    from pyroute2.netlink.exceptions import NetlinkError

    from testbed.netns import iproute

    ops = plan_shaping(spec, mtu, kernel_burst_time_s() if burst_time_s is None else burst_time_s)
    with iproute(netns, ext_ack=True) as ipr:
        index = _lookup(ipr, netns, ifname)
        link_mtu = ipr.get_links(index)[0].get_attr("IFLA_MTU")
        if link_mtu != mtu:
            log.warning("%s in %s has MTU %s, shaping was planned for MTU %s", ifname, netns, link_mtu, mtu)
        root = _root_qdisc(ipr, index)
        if root is not None and root[1] != 0:
            raise ShapingError(netns, ifname, f"already has a root qdisc ({root[0]} "
                               f"{format_handle(root[1])}): remove_shaping() first", errno_=errno.EEXIST)
        for n, op in enumerate(ops):
            log.debug("%s: %s", netns, op.describe(ifname))
            try:
                _add(ipr, index, op)
            except NetlinkError as e:
                if n:  # undo: the root takes its children with it
                    with contextlib.suppress(NetlinkError):
                        ipr.tc("del", index=index, handle=ROOT_HANDLE, root=True)
                reason = _missing_qdisc_message(op.kind) if _is_missing_qdisc(op, e) else \
                    f"the kernel refused it: {_kernel_message(e) or e} ({errno.errorcode.get(e.code, e.code)})"
                raise ShapingError(netns, ifname, reason, op, e.code) from None
    log.info("shaped %s in %s: %s", ifname, netns, spec)
    return ops


def remove_shaping(netns: str, ifname: str) -> bool:
    """Remove the testbed's root qdisc (handle 1:) and so everything under it.

    The interface gets its default qdisc back (``noqueue`` on a veth).  Returns False
    when there was nothing to remove; raises :class:`ShapingError` when the root qdisc is
    not one the testbed adds.
    """
    from pyroute2.netlink.exceptions import NetlinkError

    from testbed.netns import iproute

    with iproute(netns, ext_ack=True) as ipr:
        index = _lookup(ipr, netns, ifname)
        root = _root_qdisc(ipr, index)
        if root is None or root[1] == 0:
            return False
        kind, handle = root
        if handle != ROOT_HANDLE or kind not in (*QDISCS, "netem"):
            raise ShapingError(netns, ifname, f"the root qdisc is {kind} {format_handle(handle)}, "
                               "not one apply_shaping() adds; left alone")
        try:
            ipr.tc("del", index=index, handle=ROOT_HANDLE, root=True)
        except NetlinkError as e:
            raise ShapingError(netns, ifname, f"deleting root qdisc {kind} 1: failed: {e}",
                               errno_=e.code) from None
    log.info("removed shaping from %s in %s", ifname, netns)
    return True


@contextlib.contextmanager
def shaped(netns: str, ifname: str, spec: ShapingSpec, mtu: int = 1500,
           burst_time_s: float | None = None) -> Iterator[list[TcOp]]:
    """Shaping for the ``with`` block, removed after it whatever happens."""
    ops = apply_shaping(netns, ifname, spec, mtu, burst_time_s)
    try:
        yield ops
    finally:
        remove_shaping(netns, ifname)

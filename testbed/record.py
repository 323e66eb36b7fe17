"""The result record: one line of a run directory's results.jsonl, one repetition of one point.

This module owns what a record is, so that the rest of the project does not spell it again:

- :class:`Record`, the fields of a sweep point's record, each with its meaning (a frozen
  dataclass; :meth:`Record.to_json` is the line written, :meth:`Record.from_json` reads one);
- :data:`POINT_FIELDS`, what identifies a point (its repetitions share these), and
  :func:`point_key` / :func:`record_key`;
- :class:`Bound`, what bounded a point, as the bottleneck monitor judged it, and which of those
  count in the means;
- :class:`Keying`, how a point's SAs were made, and :class:`Tunnel`, what carried its traffic;
- :func:`usable`, the one rule for a record that counts towards its point's figures;
- :class:`Meta`, a run directory's meta.json, and the objects in it (:class:`MetaRun`, :class:`MetaSweep`,
  :class:`MetaPart`, :class:`MetaScale`, :class:`MetaVersions`): testbed.rundir reads and writes
  the file through them, and nothing else reads its fields by name.

A run directory's records and meta.json carry the schema version (``testbed.rundir.SCHEMA``).
``docs/records.md`` and ``docs/meta.md`` are generated from this module (``python -m
cli.pages``) and a test fails when they disagree.
"""
from __future__ import annotations

import dataclasses
import enum
import types
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Self


class Bound(enum.StrEnum):
    """What bounded a point's goodput (:func:`experiments.engine.verdict.classify` decides, from the kernel's counters).

    A member is its own string (``Bound.LINK == "link"``), so records stay plain JSON.
    """

    LINK = "link"
    CPU = "cpu"
    OTHER = "other"
    ANOMALY = "anomaly"

    @property
    def counted(self) -> bool:
        """Whether a repetition so bounded counts in its point's means."""
        return self is not Bound.ANOMALY

    @property
    def label(self) -> str:
        """The word tables print."""
        return "CPU" if self is Bound.CPU else self.value

    @property
    def meaning(self) -> str:
        """One line: what a point so bounded says (table captions, the report's guide, docs/records.md)."""
        return _MEANINGS[self]

    @classmethod
    def named(cls, value: Any) -> Bound | None:
        """The bound a record's text names (None for none); ValueError for a name this version does not know."""
        if isinstance(value, cls) or not value:
            return value or None
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"bound {value!r}: not one of {', '.join(b.value for b in cls)}") from None


_MEANINGS = {
    Bound.LINK: "the shaped link was full: the figure is the emulated network's",
    Bound.CPU: "the emulator's CPU was saturated first: the figure is this machine's, not the network's",
    Bound.OTHER: "neither was full (a small window, loss, a slow receiver): look at the point before trusting it",
    Bound.ANOMALY: "figures that contradict each other (counters that went backwards, more than the link can "
                   "carry): counted, never averaged",
}

class Keying(enum.StrEnum):
    """How an IPsec point's SAs were made (``--keying``; :mod:`ipsec.ike` negotiates the IKE ones).

    A member is its own string (``Keying.IKE_RSA == "ike-rsa"``), so records, specs and command
    lines stay as they were.
    """

    STATIC = "static"
    IKE = "ike"
    IKE_RSA = "ike-rsa"

    @property
    def negotiated(self) -> bool:
        """Whether IKEv2 daemons negotiate the SAs (rather than writing them over netlink)."""
        return self is not Keying.STATIC

    @property
    def meaning(self) -> str:
        """One line: how the SAs are made (docs/records.md)."""
        return _KEYING_MEANINGS[self]

    @classmethod
    def named(cls, value: Keying | str) -> Keying:
        """The keying ``value`` names; ValueError naming the choices for another."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"keying must be one of {', '.join(k.value for k in cls)}, not {value!r}") from None


_KEYING_MEANINGS = {
    Keying.STATIC: "written into the kernel over netlink (ipsec.plan)",
    Keying.IKE: "negotiated by strongSwan's IKEv2 daemons, authenticated by a pre-shared key made per run",
    Keying.IKE_RSA: "negotiated by strongSwan's IKEv2 daemons, authenticated by RSA signatures",
}

#: The profile of the plain baseline: no tunnel (``ipsec.profiles`` names it too).
PLAIN_PROFILE = "none"
#: The profile of a WireGuard tunnel (``ipsec.profiles`` names it too).
WIREGUARD_PROFILE = "wireguard"
#: The key a results.jsonl line says its tunnel under (not a field: the profile says it).
TUNNEL_KEY = "tunnel"


class Tunnel(enum.StrEnum):
    """What carries a point's traffic between its ends, as its profile says (:meth:`of`).

    Records have no field for it: a profile names one kind of tunnel, and the plain baseline
    (profile ``none``) has none; a results.jsonl line says it under ``tunnel``, for its readers.
    Profile ``wireguard`` is WireGuard; every other profile is an IPsec one.
    """

    IPSEC = "ipsec"
    WIREGUARD = "wireguard"

    @classmethod
    def of(cls, profile: str | None) -> Tunnel | None:
        """The tunnel of a point measured with ``profile``: None for the plain baseline."""
        if profile == PLAIN_PROFILE:
            return None
        return cls.WIREGUARD if profile == WIREGUARD_PROFILE else cls.IPSEC


#: The bounds from the most cautious reading of a point to the least: a point whose repetitions
#: disagree is reported as the first of its bounds in this order (``cpu`` before ``link``).
CAUTION_ORDER = (Bound.CPU, Bound.OTHER, Bound.LINK, Bound.ANOMALY)

#: What identifies a point; its repetitions share all of these.
POINT_FIELDS = ("topology", "profile", "mode", "ip_version", "transport", "rate_mbit", "size_bytes",
                "size_mode", "clients", "arm")
#: ... and what identifies one record: the point and its repetition.
KEY_FIELDS = (*POINT_FIELDS, "repetition")


def _key_value(record: Record, field: str):
    value = getattr(record, field)
    return float(value) if field == "rate_mbit" else value


def point_key(record: Record | Mapping[str, Any]) -> tuple:
    """The key of a record's point (its repetition left out); a record without an arm has arm ``""``."""
    record = as_record(record)
    return tuple(_key_value(record, f) for f in POINT_FIELDS)


def record_key(record: Record | Mapping[str, Any]) -> tuple:
    """The key of one record: its point and repetition."""
    record = as_record(record)
    return tuple(_key_value(record, f) for f in KEY_FIELDS)


def usable(record: Record | Mapping[str, Any]) -> bool:
    """Whether a record counts towards its point's means: measured (not failed, with a goodput),
    and not an anomaly."""
    record = as_record(record)
    return not record.failed and record.goodput_mbps is not None and (record.bound is None or record.bound.counted)


def _doc(text: str, default: Any = None) -> Any:
    return dataclasses.field(default=default, metadata={"doc": text})


@dataclasses.dataclass(frozen=True)
class Record:
    """One repetition of one sweep point, as results.jsonl holds it.

    Figures are None where they could not be had (a failed point has only its identity,
    ``failed``, ``attempts`` and ``error``).  CPU costs are those at the run's common machine
    speed once the report has adjusted them (``speed_factor``); as measured they keep their
    name with ``_measured`` appended.
    """

    # -- the point -------------------------------------------------------------------------------
    topology: str = _doc("the network (topologies.TOPOLOGIES)", "")
    profile: str = _doc("the IPsec profile, `none` for the plain baseline", "")
    mode: str = _doc("IPsec mode: tunnel or transport", "")
    ip_version: int = _doc("4 or 6", 4)
    transport: str = _doc("tcp or udp", "tcp")
    rate_mbit: float = _doc("the shaped link's rate, Mbit/s", 0.0)
    size_bytes: int = _doc("the packet size, in the meaning of size_mode", 0)
    size_mode: str = _doc("mss (TCP MSS), write (TCP write size) or datagram (UDP payload)", "mss")
    clients: int = _doc("clients sending at the same time", 1)
    arm: str = _doc("the arm of an A/B within the sweep (a, b, ...); absent without arms", "")
    repetition: int = _doc("0-based repetition of the point", 0)
    injected_instructions: int | None = _doc("with arms: extra BPF instructions per ESP packet in this arm")
    # -- the window ------------------------------------------------------------------------------
    duration_s: float | None = _doc("the measured window asked for, s")
    warmup_s: float | None = _doc("traffic before the window opened, s")
    window_s: float | None = _doc("the window as measured between the counter readings, s")
    window_start_unix: float | None = _doc("when the window opened, Unix time")
    # -- goodput ---------------------------------------------------------------------------------
    goodput_mbps: float | None = _doc("application bytes the receivers got in the window, Mbit/s")
    theoretical_goodput_mbps: float | None = _doc("what the shaped link can carry at this size and profile "
                                                  "(ipsec.overhead), Mbit/s")
    bytes: int | None = _doc("application bytes moved in the window")
    iperf3_sender_mbps: float | None = _doc("iperf3's own account, sender side (no figure uses it); "
                                            "absent when a client's report was lost")
    iperf3_reports_lost: int | None = _doc("iperf3 clients whose own report was lost when they were stopped, "
                                           "after the window (a crash in iperf3's interrupt handler; no figure "
                                           "uses the reports)")
    loss_pct: float | None = _doc("UDP datagrams lost, percent")
    retransmits: int | None = _doc("TCP retransmissions in the window")
    goodput_uncertainty: float | None = _doc("relative uncertainty of goodput from the counters' timing")
    # -- what bounded it -------------------------------------------------------------------------
    bound: Bound | None = _doc("link, cpu, other or anomaly (Bound)")
    bound_reason: str | None = _doc("the monitor's evidence for bound, in a sentence")
    emulation_limited: bool = _doc("bound is cpu: the figure is the emulator's", False)
    link_utilization: float | None = _doc("share of the shaped rate the shaper sent")
    link_packets: int | None = _doc("packets the shaper sent in the window")
    link_drops: int | None = _doc("packets the shaper dropped")
    link_overlimits: int | None = _doc("times the shaper held a packet back")
    queue_busy: float | None = _doc("share of backlog samples with a queue at the shaper")
    queue_mean_bytes: float | None = _doc("mean backlog at the shaper, bytes")
    queue_samples: int | None = _doc("backlog samples taken")
    shaper_goodput_mbps: float | None = _doc("goodput implied by the shaper's byte counter, Mbit/s")
    sender_rwnd_limited: float | None = _doc("share of the window the sender was limited by the receive window")
    sender_sndbuf_limited: float | None = _doc("share of the window the sender was limited by its send buffer")
    clock_skew: float | None = _doc("disagreement of the two clocks the window was read with")
    reading_spread_s: float | None = _doc("longest time one set of counter readings took, s")
    receive_backlog_start: int | None = _doc("packets in the kernel's receive backlog (/proc/net/softnet_stat, all "
                                             "of the kernel's traffic) as the window opened: the shaper had sent "
                                             "them, the receivers not yet taken them in; absent before Linux 5.10")
    receive_backlog_end: int | None = _doc("... and as it closed")
    receive_backlog_drops: int | None = _doc("packets the kernel dropped from its full receive backlog in the "
                                             "window, after the shaper: the emulating CPU fell behind the link")
    # -- CPU -------------------------------------------------------------------------------------
    cpu_busy_pct: float | None = _doc("the emulating CPUs' busy share over the window, percent")
    cpu_s: float | None = _doc("CPU seconds the emulation used in the window")
    cpu_s_per_gb: float | None = _doc("CPU seconds per GB of goodput")
    cpu_us_per_packet: float | None = _doc("CPU microseconds per packet the shaper sent")
    cpu_kernel_busy_pct: float | None = _doc("the kernel's own /proc/stat busy share, percent")
    cpu_system_pct: float | None = _doc("... of it in system time, percent")
    cpu_softirq_pct: float | None = _doc("... of it in softirq, percent")
    cpu_busiest_pct: float | None = _doc("the busiest CPU's busy share, percent")
    speed_probe_ns: float | None = _doc("the speed probe's time for its workload over the window, ns")
    clock: str | None = _doc("what the CPU meter counted: instructions (the counted backend: the guest's instructions, "
                             "counted by QEMU's emulator, the same on every machine; the cpu_s figures are then absent "
                             "and the instructions figures stand for them); absent: time (CPU seconds on this "
                             "machine, which its speed moves)")
    instructions: int | None = _doc("with clock instructions: the instructions the guest executed in the window, all "
                                    "of its work (kernel, network, crypto, iperf3)")
    instructions_per_packet: float | None = _doc("... per packet the shaper sent")
    instructions_per_byte: float | None = _doc("... per byte of goodput")
    wall_s: float | None = _doc("with clock instructions: the host's wall-clock seconds the window took (its own "
                                "length is in the guest's time, which counts instructions)")
    foreign_cpu_pct: float | None = _doc("the host's CPU time on work that was not the testbed's over the window "
                                         "(all CPUs' busy time less the guest's, this run's own processes' and the "
                                         "speed probe's), percent of one CPU; above 5 the window is marked "
                                         "(testbed.hostload)")
    probe_sent: int | None = _doc("round trips the latency probe sent within the window (ping, or irtt: the run's "
                                  "probe_tool; every 100 ms from the first flow's client to its server: "
                                  "experiments.engine.probe)")
    probe_lost: int | None = _doc("of those, how many got no reply")
    probe_rtt_ms: float | None = _doc("the probe's median round trip under the window's load, ms")
    probe_rtt_p90_ms: float | None = _doc("its 90th percentile, ms")
    probe_rtt_p99_ms: float | None = _doc("its 99th percentile, ms")
    probe_up_ms: float | None = _doc("the median one-way delay from the client to the server, ms (both ends on "
                                     "this machine's clock; irtt only)")
    probe_down_ms: float | None = _doc("the median one-way delay from the server to the client, ms")
    idle_rtt_ms: float | None = _doc("the probe's median round trip just before the point's flows started "
                                     "(the unloaded reference, taken once a point: at its first repetition, or "
                                     "the next where that one's probe failed; absent in the others), ms")
    idle_rtt_min_ms: float | None = _doc("the path at the emulator's full speed, ms: by ping, the least round trip of "
                                         "a flood of 50 echoes just after those (the guest does not sleep between "
                                         "them); by irtt, the least of those round trips")
    # -- how it was measured ---------------------------------------------------------------------
    keying: Keying = _doc("how the SAs were made: static (over netlink), ike or ike-rsa (negotiated by IKEv2 daemons, "
                          "authenticated by a pre-shared key or RSA signatures)", Keying.STATIC)
    ike_sas: list[str] | None = _doc("keyed by IKE: the SAs the daemons negotiated, as the kernel held them "
                                     "during the point (namespace, protocol, SPI, addresses, mode, algorithms; "
                                     "never keys)")
    clients_ahead: bool = _doc("iperf3's clients were started during the previous point's warm-up", False)
    clients_sending_s: float | None = _doc("seconds from the clients' go until every one of them had its data "
                                           "connection up (TCP, more than one client: the window opens no sooner)")
    phases_s: dict[str, float] | None = _doc("where the time from the previous point's record to this one's went, "
                                             "seconds per phase: between, ipsec, turn, servers, drain, reference, "
                                             "flood, start, warm-up, window, stop, wind-up, record, failed (an "
                                             "attempt tried again) (experiments.engine.phases)")
    kernel_release: str | None = _doc("the kernel that measured (uname -r)")
    backend: str | None = _doc("where it ran: host or uml")
    concurrent_with: str | None = _doc("another testbed run measuring on this machine at the same time "
                                       "(--allow-concurrent): its command and pid; its load is in this figure")
    attempts: int = _doc("tries the point took (a failed iperf3 test is tried again)", 1)
    failed: bool = _doc("no figure: every attempt failed", False)
    error: str | None = _doc("with failed: why, one line per attempt")
    time: str | None = _doc("when the record was written, ISO 8601")
    # -- set by the report, never written by a sweep ----------------------------------------------
    speed_factor: float | None = _doc("what the report multiplied the CPU costs by to bring them to the run's "
                                      "common machine speed (analysis.stats.at_common_speed)")
    cpu_s_per_gb_measured: float | None = _doc("cpu_s_per_gb as measured, before speed_factor")
    cpu_us_per_packet_measured: float | None = _doc("cpu_us_per_packet as measured, before speed_factor")

    #: What a record is, in an error's words.
    WHAT: ClassVar[str] = "a sweep record"
    #: Fields written only when they have a value (a run without arms has no arm).
    OPTIONAL: ClassVar[tuple[str, ...]] = ("arm", "injected_instructions", "error", "backend", "ike_sas",
                                           "clients_sending_s", "speed_factor", "cpu_s_per_gb_measured",
                                           "cpu_us_per_packet_measured", "iperf3_reports_lost", "concurrent_with",
                                           "foreign_cpu_pct", "probe_sent", "probe_lost", "probe_rtt_ms",
                                           "probe_rtt_p90_ms", "probe_rtt_p99_ms", "probe_up_ms", "probe_down_ms",
                                           "idle_rtt_ms", "idle_rtt_min_ms", "receive_backlog_start",
                                           "receive_backlog_end", "receive_backlog_drops", "clock",
                                           "instructions", "instructions_per_packet", "instructions_per_byte",
                                           "wall_s", "phases_s")

    def __post_init__(self) -> None:
        # a bound or keying given as its text (a results.jsonl line, a caller's string) is held as
        # the member it names
        if not isinstance(self.bound, Bound | None):
            object.__setattr__(self, "bound", Bound.named(self.bound))
        if not isinstance(self.keying, Keying):
            object.__setattr__(self, "keying", Keying.named(self.keying))

    @property
    def tunnel(self) -> Tunnel | None:
        """What carried the point's traffic (None: the plain baseline); its profile says it."""
        return Tunnel.of(self.profile)

    def at_speed(self, factor: float) -> Record:
        """This record with its CPU costs (:data:`SPEED_ADJUSTED`) multiplied by ``factor``, each as
        measured kept in its ``_measured`` field."""
        changes: dict[str, Any] = {"speed_factor": factor}
        for field in SPEED_ADJUSTED:
            value = getattr(self, field)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                changes[field + "_measured"] = value
                changes[field] = value * factor
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """The record as results.jsonl holds it."""
        out = dataclasses.asdict(self)
        for name in self.OPTIONAL:
            if out[name] is None or out[name] == "":
                del out[name]
        if self.tunnel is not None:
            out[TUNNEL_KEY] = self.tunnel.value  # for a reader of the line; its profile says it
        return out

    @classmethod
    def from_json(cls, line: Mapping[str, Any]) -> Record:
        """A record from a results.jsonl line (its ``schema``, the file's layout, aside); fields it does
        not know are refused."""
        fields = {k: v for k, v in line.items() if k not in ("schema", TUNNEL_KEY)}
        if TUNNEL_KEY in line and line[TUNNEL_KEY] != getattr(Tunnel.of(fields.get("profile")), "value", None):
            raise ValueError(f"tunnel {line[TUNNEL_KEY]!r} is not what profile {fields.get('profile')!r} says")
        unknown = set(fields) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"not {cls.WHAT}'s fields: {', '.join(sorted(unknown))}")
        return cls(**fields)

    @classmethod
    def failure(cls, point: Mapping[str, Any], attempts: int, error: str, **window: Any) -> Record:
        """The record of a point every attempt failed at: its identity and why."""
        return cls(**point, **window, failed=True, attempts=attempts, error=error)


FIELDS = tuple(f.name for f in dataclasses.fields(Record))


@dataclasses.dataclass(frozen=True)
class TransactionRecord(Record):
    """One repetition of a request and response part (seed 002's latency, :mod:`experiments.transactions`):
    its point and CPU shares as a sweep's record has them, no goodput, and the timing of its
    transactions."""

    kind: str = _doc("what the record is: `transactions`", "transactions")
    count: int | None = _doc("transactions made in the window")
    elapsed_s: float | None = _doc("the loop's wall time, s")
    mean_ms: float | None = _doc("mean time of a transaction, ms")
    median_ms: float | None = _doc("median time of a transaction, ms")
    p95_ms: float | None = _doc("95th percentile of a transaction's time, ms")

    WHAT: ClassVar[str] = "a transactions record"

#: The CPU figures a point's repetitions are summarised by: percent busy by the CPU meter, by
#: the kernel's own account and on its busiest CPU, the system and softirq shares, CPU seconds
#: per gigabyte delivered (at the run's common speed, and as measured).
CPU_FIELDS = ("cpu_busy_pct", "cpu_kernel_busy_pct", "cpu_busiest_pct", "cpu_system_pct", "cpu_softirq_pct",
              "cpu_s_per_gb", "cpu_s_per_gb_measured", "instructions_per_byte", "instructions_per_packet")
#: The CPU costs the report brings to the run's common machine speed (:meth:`Record.at_speed`).
SPEED_ADJUSTED = ("cpu_s_per_gb", "cpu_us_per_packet")
#: What an IPsec point shares with the plain baseline it is compared with: its point, but for
#: the profile (and the arm).
MATCH_FIELDS = tuple(f for f in POINT_FIELDS if f not in ("profile", "arm"))
#: What the points share whose speed probes make one reference (all profiles, modes and sizes
#: at one rate of one network).
COMPARED_FIELDS = tuple(f for f in MATCH_FIELDS if f not in ("mode", "size_bytes"))

#: The fields' names as attributes (``FIELD.goodput_mbps == "goodput_mbps"``): code that picks a
#: field by name (a table's column, a claim's metric) names it here, so that a misspelt or
#: renamed field fails where it is named.
FIELD = types.SimpleNamespace(**{f: f for f in FIELDS})


def as_record(record: Record | Mapping[str, Any]) -> Record:
    """``record`` as a :class:`Record` (a results.jsonl line, or a record already)."""
    return record if isinstance(record, Record) else Record.from_json(record)


def as_records(records: Iterable[Record | Mapping[str, Any]]) -> list[Record]:
    """:func:`as_record` of each."""
    return [as_record(r) for r in records]


@dataclasses.dataclass(frozen=True)
class Group:
    """The records an aggregate summarises, by the :data:`POINT_FIELDS` they share: a point's
    repetitions, or a coarser group with None for the fields it spans (an aggregate over all
    sizes has no ``size_bytes``; a run without arms, no ``arm``)."""

    topology: str | None = None
    profile: str | None = None
    mode: str | None = None
    ip_version: int | None = None
    transport: str | None = None
    rate_mbit: float | None = None
    size_bytes: int | None = None
    size_mode: str | None = None
    clients: int | None = None
    arm: str | None = None

    @classmethod
    def of(cls, record: Record, fields: Iterable[str] = POINT_FIELDS) -> Group:
        """The group of ``record`` by ``fields`` (others None; an empty arm is none)."""
        return cls(**{f: getattr(record, f) if getattr(record, f) != "" else None for f in fields})

    def key(self, fields: Iterable[str] = POINT_FIELDS) -> tuple:
        """The values of ``fields``, in that order."""
        return tuple(getattr(self, f) for f in fields)

    def to_json(self) -> dict[str, Any]:
        """The fields it is identified by (those not None), in :data:`POINT_FIELDS` order."""
        return {f: getattr(self, f) for f in POINT_FIELDS if getattr(self, f) is not None}

    def replace(self, **changes: Any) -> Group:
        return dataclasses.replace(self, **changes)



# -- meta.json ------------------------------------------------------------------------------------
#
# What a run directory's results depend on and each run that wrote into it.  Each object of the file
# is a frozen dataclass below, read by :meth:`_MetaObject.from_json` and written by
# :meth:`_MetaObject.to_json` (testbed.rundir reads and writes the file through them, and nothing
# else reads its fields by name).  A file is written back as it was read: a field the file holds as
# null stays null, one it does not hold stays absent, and fields this version does not know are kept
# as they were (``extra``), so that an older or newer file survives a resumed run.

def _meta_field(text: str, kind: Any = None, default: Any = None) -> Any:
    """A field of a meta.json object: its meaning, and what its JSON value is read into (``kind``:
    a :class:`_MetaObject`, ``(_MetaObject,)`` for a list of them, ``tuple`` for a list kept as a
    tuple; None: as it is)."""
    return dataclasses.field(default=default, metadata={"doc": text, "kind": kind})


def _read_value(kind: Any, value: Any, where: str) -> Any:
    if value is None or kind is None:
        return value
    if kind is tuple:
        return tuple(value) if isinstance(value, list) else value
    if isinstance(kind, tuple):
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list, got {type(value).__name__}")
        return tuple(kind[0].from_json(v, where) for v in value)
    return kind.from_json(value, where)


def _write_value(value: Any) -> Any:
    if isinstance(value, _MetaObject):
        return value.to_json()
    if isinstance(value, (tuple, list)):
        return [_write_value(v) for v in value]
    return value


def schema_of(data: Mapping[str, Any]) -> Any:
    """The layout a results.jsonl line or meta.json names (``testbed.rundir.SCHEMA``): 1 where it names none."""
    return data.get("schema", 1)


def as_json(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` with the meta.json objects among their values (and lists of them) as their JSON."""
    return {name: _write_value(value) for name, value in fields.items()}


class _MetaObject:
    """What every object of meta.json is: read from its JSON and written back as it was read."""

    #: What the object is, in an error's words.
    WHAT: ClassVar[str] = "meta.json"
    #: Fields this version does not know, kept as they were (set by every subclass).
    extra: Mapping[str, Any]
    #: The fields the JSON holds (or a writer set), written back even when null.
    present: frozenset[str]

    @classmethod
    def known(cls) -> tuple[dataclasses.Field, ...]:
        """The fields this version knows (``extra`` and ``present`` aside)."""
        return tuple(f for f in dataclasses.fields(cls) if f.name not in ("extra", "present"))

    @classmethod
    def from_json(cls, data: Any, where: str = "") -> Self:
        """The object a JSON object of meta.json holds; ValueError when it is not one, or a field of
        it is not what it should be."""
        where = where or cls.WHAT
        if not isinstance(data, Mapping):
            raise ValueError(f"{where}: expected a JSON object, got {type(data).__name__}")
        kinds = {f.name: f.metadata["kind"] for f in cls.known()}
        values = {k: _read_value(kinds[k], v, f"{where}: {k}") for k, v in data.items() if k in kinds}
        return cls(**values, extra={k: v for k, v in data.items() if k not in kinds},
                   present=frozenset(values))

    @classmethod
    def of(cls, **fields: Any) -> Self:
        """An object of ``fields``, each written (even a None)."""
        return cls(**fields, present=frozenset(fields))

    def to_json(self) -> dict[str, Any]:
        """The object as meta.json holds it: the fields it was read with or given, those set since,
        and ``extra``."""
        out = {}
        for f in self.known():
            value = getattr(self, f.name)
            if f.name in self.present or value != f.default:
                out[f.name] = _write_value(value)
        return {**out, **self.extra}

    def with_(self, **changes: Any) -> Self:
        """This object with ``changes`` (each written, even a None)."""
        return dataclasses.replace(self, **changes, present=self.present | frozenset(changes))

    def without(self, *names: str) -> Self:
        """This object without the fields ``names`` (not written)."""
        fields = {f.name: f for f in self.known()}
        return dataclasses.replace(self, **{n: fields[n].default for n in names},
                                   present=self.present - frozenset(names))

    def merged(self, data: Mapping[str, Any]) -> Self:
        """This object with ``data`` (meta.json's names; values as JSON or as these objects) over it."""
        return self.from_json({**self.to_json(), **as_json(data)})

    def __bool__(self) -> bool:
        """False when it holds nothing, as the JSON object ``{}`` is."""
        return bool(self.to_json())


def _extra() -> Any:
    return dataclasses.field(default_factory=dict, repr=False)


def _present() -> Any:
    return dataclasses.field(default=frozenset(), repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class MetaVersions(_MetaObject):
    """The versions of the tools the results depend on (``experiments.machine.tool_versions``;
    null: not installed)."""

    iperf3: str | None = _meta_field("iperf3 --version")
    mininet: str | None = _meta_field("the mininet package")
    pyroute2: str | None = _meta_field("the pyroute2 package")
    scapy: str | None = _meta_field("the scapy package")
    testbed: str | None = _meta_field("the checkout (git describe --always --dirty)")
    extra: Mapping[str, Any] = _extra()
    present: frozenset[str] = _present()

    WHAT: ClassVar[str] = "meta.json: versions"

    def items(self) -> list[tuple[str, Any]]:
        """(tool, version) of every tool named, in the order of their names (as meta.json is written)."""
        return sorted(self.to_json().items())


@dataclasses.dataclass(frozen=True)
class MetaScale(_MetaObject):
    """How a reproduction's link rates were scaled: the seed's rates divided by ``factor``."""

    factor: float | None = _meta_field("what the seed's link rates were divided by")
    how: str | None = _meta_field("how the factor was found, in a sentence (given: --scale N, or auto: ...)")
    headroom: float | None = _meta_field("auto: the share of the calibrated capacity the fastest rate may ask")
    calibration: tuple[Mapping[str, Any], ...] | None = _meta_field(
        "auto: each heaviest point's calibration (experiments.calibrate.Calibration)", tuple)
    extra: Mapping[str, Any] = _extra()
    present: frozenset[str] = _present()

    WHAT: ClassVar[str] = "meta.json: scale"

    @property
    def divisor(self) -> float:
        """The factor, 1.0 where there is none."""
        return float(self.factor or 1.0)


@dataclasses.dataclass(frozen=True)
class MetaSweep(_MetaObject):
    """What a sweep measured: its spec as ``experiments.engine.plan.SweepSpec.to_json`` wrote it, field for
    field (a unit test holds the two equal; ``SweepSpec.from_meta`` reads it back).

    The options of ``ipsec-testbed sweep`` that set each field say more (docs/cli.md)."""

    topology: str | None = _meta_field("the network (topologies)")
    profiles: tuple[str, ...] | None = _meta_field("the profiles measured: none (plain) and IPsec or WireGuard "
                                                   "profiles", tuple)
    mode: str | None = _meta_field("IPsec mode: tunnel or transport")
    keying: str | None = _meta_field("how the SAs were made: static, ike or ike-rsa, as the records' keying")
    ip_versions: tuple[int, ...] | None = _meta_field("IP versions", tuple)
    transports: tuple[str, ...] | None = _meta_field("transports: tcp, udp", tuple)
    rates_mbit: tuple[float, ...] | None = _meta_field("the shaped link's rates, Mbit/s", tuple)
    sizes: tuple[int, ...] | None = _meta_field("packet sizes, bytes", tuple)
    size_mode: str | None = _meta_field("what a size is: mss or write (TCP), datagram (UDP)")
    clients: int | None = _meta_field("clients sending at once")
    connect_timeout_s: float | None = _meta_field("how long several TCP clients had to connect, seconds (null: "
                                                  "as many clients and the link's crowd make it)")
    repetitions: int | None = _meta_field("repetitions of every point at least ...")
    max_repetitions: int | None = _meta_field("... and at most, while a point is less precise than asked "
                                              "(null: exactly repetitions)")
    precision_pct: float | None = _meta_field("the goodput's 95 % confidence interval asked for, % of its mean")
    cpu_precision_pct: float | None = _meta_field("the CPU cost per GB's, likewise")
    duration_s: float | None = _meta_field("each point's measured window, seconds")
    warmup_s: float | None = _meta_field("the traffic before it, seconds (omit_s before it was the testbed's)")
    udp_bitrate: str | None = _meta_field("UDP's offered rate (iperf3 -b; 0: as fast as possible)")
    pmtu: str | None = _meta_field("the hosts' path MTU behaviour: discover or fragment")
    mtu: int | None = _meta_field("every link's MTU")
    socket_buffer: int | None = _meta_field("both iperf3 ends' socket buffer, bytes (null: the kernel's)")
    arms: tuple[int, ...] | None = _meta_field("an A/B within the sweep: each arm's extra BPF instructions per "
                                               "ESP packet (empty: no arms)", tuple)
    arm_filters: int | None = _meta_field("the filters every arm's chain has at least (0: as the largest "
                                          "arm takes)")
    plain: bool | None = _meta_field("whether the plain profile was measured")
    budget_s: float | None = _meta_field("the time budget of the repetitions beyond the least, seconds (null: "
                                         "none)")
    latency_probe: bool | None = _meta_field("whether a probe timed round trips beside the flows")
    probe_per_s: float | None = _meta_field("... that many a second")
    probe_tool: str | None = _meta_field("... with this tool: ping or irtt (absent: irtt, its one tool then)")
    extra: Mapping[str, Any] = _extra()
    present: frozenset[str] = _present()

    WHAT: ClassVar[str] = "meta.json: sweep"


@dataclasses.dataclass(frozen=True)
class MetaPart(_MetaObject):
    """One part of a seed's reproduction (``experiments.reproduce.Part``), measured into its own
    sub-directory."""

    name: str | None = _meta_field("the part, and its sub-directory")
    title: str | None = _meta_field("what it measures, in the seed's words")
    spec: MetaSweep | None = _meta_field("its sweep", MetaSweep)
    transactions: int | None = _meta_field("request/response transactions per repetition instead of a sweep "
                                           "(0: a sweep)")
    reference: str | None = _meta_field("the part of the seed's reference file it answers")
    regime: str | None = _meta_field("the regime it was planned in for its claims: link (rates this machine "
                                     "carries) or cpu (unshaped: this machine's CPU the limit); absent: the "
                                     "seed's rates, or as --scale divided them")
    seed_rate_mbit: float | None = _meta_field("a cpu part: the seed's rate its points stand for")
    extra: Mapping[str, Any] = _extra()
    present: frozenset[str] = _present()

    WHAT: ClassVar[str] = "meta.json: parts"


@dataclasses.dataclass(frozen=True)
class MetaRun(_MetaObject):
    """One run that wrote into the directory (a resumed run adds one)."""

    command_line: tuple[str, ...] | str | None = _meta_field("the command, as typed", tuple)
    started: str | None = _meta_field("when it started, ISO 8601 UTC")
    finished: str | None = _meta_field("when it ended, ISO 8601 UTC (absent: it never ended by itself)")
    interrupted: str | None = _meta_field("the signal that ended it (SIGINT, SIGTERM)")
    points_measured: int | None = _meta_field("a sweep's points measured by this run")
    points_failed: int | None = _meta_field("... and those every attempt failed at")
    points_missing: Mapping[str, int] | None = _meta_field("a reproduction: the points each part could not "
                                                           "measure")
    attempts_failed: int | None = _meta_field("a reproduction: attempts that failed, over its parts")
    extra: Mapping[str, Any] = _extra()
    present: frozenset[str] = _present()

    WHAT: ClassVar[str] = "meta.json: runs"


@dataclasses.dataclass(frozen=True)
class Meta(_MetaObject):
    """A run directory's meta.json: the machine the results were measured on, what was measured, and
    each run that wrote into it.  Every field may be absent (None): a run killed early, an older
    version's file."""

    schema: int | None = _meta_field("the file's layout (testbed.rundir.SCHEMA; absent: 1)")
    # -- the machine -------------------------------------------------------------------------------
    backend: str | None = _meta_field("where it ran: host or uml (testbed.backends)")
    backend_label: str | None = _meta_field("the backend's kernel, for people (User-Mode Linux 6.1.176)")
    backend_note: str | None = _meta_field("what measuring on this backend means for the figures, in a sentence")
    kernel_release: str | None = _meta_field("the kernel that measured (uname -r)")
    kernel_path: str | None = _meta_field("UML: the kernel binary booted")
    kernel_origin: str | None = _meta_field("UML: where it came from: debian, recipe (the project's) or user "
                                            "(--uml-kernel)")
    kernel_version: str | None = _meta_field("UML: its version")
    kernel_fp_bytes: int | None = _meta_field("UML: the FPU buffer it was built with, bytes")
    kernel_recipe_key: str | None = _meta_field("UML: the recipe's cache key of a kernel the project built")
    kernel_reason: str | None = _meta_field("UML: why this kernel was chosen")
    host_xsave_bytes: int | None = _meta_field("UML: the host CPU's XSAVE area, bytes")
    cpu_model: str | None = _meta_field("the CPU model the kernel reports (UML in a guest)")
    cpu_count: int | None = _meta_field("CPUs the kernel has")
    host_cpu_model: str | None = _meta_field("UML: the host's CPU model")
    qemu_version: str | None = _meta_field("counted: the QEMU that emulated the guest")
    qemu_cpu: str | None = _meta_field("counted: the guest's CPU model (-cpu), with the features taken away")
    qemu_crypto: str | None = _meta_field("counted: the crypto drivers the guest ran, x86 or generic (--qemu-crypto; "
                                          "absent before it was kept: x86)")
    qemu_icount: str | None = _meta_field("counted: QEMU's -icount setting (one instruction per ns at shift=0)")
    python: str | None = _meta_field("the Python version")
    versions: MetaVersions | None = _meta_field("the tools' versions", MetaVersions)
    cpu_accounting: str | None = _meta_field("how CPU time was accounted (the CPU meter)")
    speed_probe: str | None = _meta_field("what the speed probe timed (null: no probe)")
    keep_awake: str | None = _meta_field("UML: what kept the guest's host CPU from idling (null: nothing, "
                                         "--uml-keep-awake not given)")
    # -- what was measured -------------------------------------------------------------------------
    command_line: tuple[str, ...] | str | None = _meta_field("the latest run's command, as typed", tuple)
    sweep: MetaSweep | None = _meta_field("a sweep: what it measured", MetaSweep)
    transactions: int | None = _meta_field("a transactions part: transactions per repetition")
    seed: str | None = _meta_field("a reproduction: the seed (000..004)")
    script: str | None = _meta_field("a reproduction: the command that runs it")
    parts: tuple[MetaPart, ...] = _meta_field("a reproduction: its parts", (MetaPart,), ())
    scale: MetaScale | None = _meta_field("a reproduction: how its link rates were scaled (null: the seed's)",
                                          MetaScale)
    # -- the runs ----------------------------------------------------------------------------------
    started: str | None = _meta_field("when the first run started, ISO 8601 UTC")
    finished: str | None = _meta_field("when the latest run ended")
    complete: bool | None = _meta_field("whether every point was measured when the latest run ended")
    interrupted: str | None = _meta_field("the signal that ended the latest run (absent: it was not)")
    runs: tuple[MetaRun, ...] = _meta_field("each run that wrote into the directory, the latest last",
                                            (MetaRun,), ())
    extra: Mapping[str, Any] = _extra()
    present: frozenset[str] = _present()

    WHAT: ClassVar[str] = "meta.json"

    @property
    def is_reproduction(self) -> bool:
        """Whether it is a seed reproduction's (it names the seed and parts)."""
        return bool(self.seed and self.parts)

    @property
    def last_run(self) -> MetaRun:
        """The latest run (an empty one where none is recorded)."""
        return self.runs[-1] if self.runs else MetaRun()

    def kernel_label(self) -> str:
        """The kernel the run measured on, for people ("User-Mode Linux 6.1.176", "host kernel (6.18.44)")."""
        label = self.backend_label or f"{self.backend or 'the'} kernel"
        release = self.kernel_release
        return label if not release or release in label else f"{label} ({release})"

    def machine(self) -> dict[str, Any]:
        """The fields of :data:`MACHINE_FIELDS` by name (a regression baseline keeps them)."""
        return {f: getattr(self, f) for f in MACHINE_FIELDS}

    def keep(self, names: Iterable[str]) -> Meta:
        """Only the fields ``names``, each written (null where it has none): what a report keeps of it."""
        return Meta.of(**{n: getattr(self, n) for n in names})

    def started_run(self, machine: Mapping[str, Any], fields: Mapping[str, Any], *, schema: int, now: str) -> Meta:
        """As a run starting ``now`` leaves it: ``machine`` and ``fields`` (meta.json's names) at the
        top, ``schema``, ``started`` unless it has one, and a new entry in ``runs`` with the command."""
        given = Meta().merged(fields)
        meta = self.merged({**machine, **fields})
        return meta.with_(schema=schema, started=meta.started or now,
                          runs=(*(meta.runs or ()), MetaRun.of(command_line=given.command_line, started=now)))

    def finished_run(self, counts: Mapping[str, Any], *, now: str, complete: bool | None = None,
                     interrupted: str | None = None) -> Meta:
        """As the latest run ending ``now`` leaves it: ``counts`` (its runs entry's names) and
        ``interrupted`` in its entry (``finished`` unless it has one); at the top the same
        ``finished``, ``complete`` if given, and ``interrupted``, or none."""
        runs = self.runs or (MetaRun(),)
        last = runs[-1].merged({**counts, **({} if interrupted is None else {"interrupted": interrupted})})
        if last.finished is None:
            last = last.with_(finished=now)
        meta = self.with_(runs=(*runs[:-1], last), finished=last.finished)
        if complete is not None:
            meta = meta.with_(complete=complete)
        return meta.with_(interrupted=interrupted) if interrupted else meta.without("interrupted")


#: The fields that say which machine measured: a regression baseline keeps them, and a difference
#: in any makes its comparison suspect (a change of machine, not of code).
MACHINE_FIELDS = ("backend", "kernel_release", "cpu_model", "cpu_count")
#: Meta's fields' names as attributes, as :data:`FIELD` is the record's.
META_FIELD = types.SimpleNamespace(**{f.name: f.name for f in Meta.known()})


def as_meta(meta: Meta | Mapping[str, Any] | None) -> Meta:
    """``meta`` as a :class:`Meta` (meta.json's object, or a Meta already; None: an empty one)."""
    if isinstance(meta, Meta):
        return meta
    return Meta.from_json(meta or {})

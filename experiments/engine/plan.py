"""What a sweep measures: its spec (data, checked on construction) and its points in measuring order.

::

    SweepSpec --plan_points--> [Point, ...]            (pure: no kernel, no files)
    SweepSpec, records so far --plan_round--> [Point, ...]   the next round's points

Within a rate the points are measured in rounds, one repetition of each point per round,
ordered size, IP version, transport, profile, so the plain and IPsec points of one size are
measured next to each other, under the same machine conditions; the profile order
alternates (ABBA) so that IPsec is switched only every other point.

Repetitions adapt (netperf's ``-i``/``-I`` idea): every point is measured at least
``repetitions`` times, then again in later rounds while the 95 % confidence interval of its
goodput is wider than ``precision_pct`` of the mean (or that of its CPU cost per GB wider
than ``cpu_precision_pct``), up to ``max_repetitions``.  Quiet points stop early, noisy
ones get more; the rounds keep every point's repetitions interleaved with the others'.  A
point with fewer than ``repetitions`` windows free of other work on the host (foreign load
above :data:`~testbed.hostload.FOREIGN_PCT` of a CPU, :mod:`testbed.hostload`) is not precise
either: it gets more repetitions as a noisy one does, and is counted as short of quiet windows
when it could not have them.
With ``budget_s`` the repetitions beyond the minimum stop once the sweep would run longer
than that (counted from the command's start, a guest's boot included, by
:mod:`experiments.engine.sweep`), keeping the time the later rates' minimum repetitions need
(:func:`within_budget`); the points left less precise than asked are counted
(:func:`precision_of`).

:func:`default_sweep` is the sweep ``ipsec-testbed sweep`` runs with no options; the spec's own field
defaults are the plainer one the reproductions, the regression suites and the tests build on (a fixed
count of repetitions, no time budget, no latency probe).
"""
from __future__ import annotations

import collections
import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from analysis.stats import at_common_speed, t_critical_95
from experiments.engine.probe import IRTT
from experiments.engine.probe import PAYLOAD_BYTES as PROBE_PAYLOAD_BYTES
from experiments.engine.probe import TOOLS as PROBE_TOOLS
from ipsec import wireguard
from ipsec.ike import Unsupported, child_proposals, is_ike
from ipsec.overhead import ETHERNET_HEADER_BYTES, IP_HEADER_BYTES, UDP_HEADER_BYTES, packet_overhead
from ipsec.profiles import WIREGUARD, parse_profile
from ipsec.slowdown import MAX_INSTRUCTIONS, chunks, filters_for
from testbed.backends.base import INSTRUCTIONS
from testbed.hostload import FOREIGN_PCT
from testbed.record import FIELD, KEY_FIELDS, POINT_FIELDS, Bound, Keying, MetaSweep, Record, usable
from topologies import build_spec

TRANSPORTS = ("tcp", "udp")
SIZE_MODES = ("mss", "write", "datagram")
#: Hard bound of the repetitions.
MAX_REPETITIONS = 50
#: Rounds a rate may take beyond its most repetitions: failed points are measured again.
EXTRA_ROUNDS = 2
#: The most arms of an A/B within one sweep (SweepSpec.arms), and their labels.
ARM_LABELS = "abcdefgh"
#: The shortest and the longest time limit the clients of a point may be given to connect (SweepSpec.connect_timeout_s):
#: beyond the longest, the kernel has given a dropped SYN up (experiments.engine.clients.SYN_HORIZON_S).
MIN_CONNECT_S, MAX_CONNECT_S = 1.0, 300.0
#: The shortest window and warm-up a point may have, in seconds.
MIN_DURATION_S = 0.5
MIN_WARMUP_S = 0.2
#: The default sweep's repetitions per point: at least 2 (a confidence interval), at most 12 (10 Mbit/s
#: points' CPU cost varies by up to 12 % between repetitions, for the same work this machine's CPU time
#: varies by 5-8 % over 2 s: README, Benchmarks) ...
DEFAULT_REPETITIONS = 2
DEFAULT_MAX_REPETITIONS = 12
#: ... those beyond the minimum while the command has run less than this long (seconds, the guest's boot
#: included): the default sweep, 28 points, ends within 5 minutes (~1 s after it).
DEFAULT_BUDGET_S = 285.0


#: The latency probe's round trips a second: by default, and the range it may be given (flent's probes: 10 to
#: 100 a second; irtt's interval at 1 ms at the least) ...
DEFAULT_PROBE_PER_S = 10.0
MIN_PROBE_PER_S, MAX_PROBE_PER_S = 1.0, 100.0
#: ... and the most of the slowest link its packets (both ways) may take beside the flows it times.
PROBE_MOST_SHARE = 0.01


def probe_share(per_s: float, rate_mbit: float, ip_version: int = 4, profile: str = "none",
                mode: str = "tunnel") -> float:
    """The share of a ``rate_mbit`` link the latency probe's packets take each way at ``per_s`` (pure): irtt's
    smallest packet, its 60-byte UDP payload with the headers a shaper counts (ping's echo is the same size:
    :data:`experiments.engine.probe.PAYLOAD_BYTES`), and what ``profile`` adds to it where the link carries the
    tunnel (:func:`ipsec.overhead.packet_overhead`).  The spec's limit (:data:`PROBE_MOST_SHARE`) counts plain
    packets; ``bench probe_overhead`` counts the tunnel's, the goodput a link-bound point gives up to the probe."""
    inner = PROBE_PAYLOAD_BYTES + UDP_HEADER_BYTES + IP_HEADER_BYTES[ip_version]
    packet = inner + packet_overhead(profile, mode, ip_version, inner) + ETHERNET_HEADER_BYTES
    return per_s * packet * 8 / (rate_mbit * 1e6)


def fitting_probe_rate(rates: Sequence[float], ip_versions: Sequence[int]) -> float:
    """The probe's default rate, or as many round trips a second as fit the slowest link (at least the
    fewest it takes; a link too slow for that is refused by the spec)."""
    if not rates or min(rates) <= 0 or not ip_versions or set(ip_versions) - {4, 6}:
        return DEFAULT_PROBE_PER_S  # the spec names the bad value
    fit = PROBE_MOST_SHARE / probe_share(1.0, min(rates), max(ip_versions))
    return max(MIN_PROBE_PER_S, min(DEFAULT_PROBE_PER_S, math.floor(fit * 10) / 10))


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """What to measure; checked on construction (no kernel needed)."""

    topology: str = "vpn_gateway"
    profiles: tuple[str, ...] = ("none", "aes-gcm-256")
    mode: str = "tunnel"
    #: how the SAs are made: static (over netlink, the default) or ike (IKEv2 daemons, ipsec.ike)
    keying: Keying = Keying.STATIC
    ip_versions: tuple[int, ...] = (4,)
    transports: tuple[str, ...] = ("tcp",)
    rates_mbit: tuple[float, ...] = (10.0, 100.0)
    sizes: tuple[int, ...] = (100, 250, 500, 750, 1000, 1250, 1460)
    size_mode: str = "mss"
    clients: int = 1
    #: how long every one of several TCP clients may take to connect before the attempt fails, seconds (None:
    #: :func:`experiments.engine.clients.connect_timeout_s`, which grows with the clients and how crowded the
    #: link is)
    connect_timeout_s: float | None = None
    #: at least this many repetitions of every point ...
    repetitions: int = 3
    #: ... and at most this many (None: exactly ``repetitions``), while a point is less precise than:
    max_repetitions: int | None = None
    #: the goodput's 95 % confidence interval half-width, in percent of its mean
    precision_pct: float = 2.0
    #: the CPU cost per GB's, likewise
    cpu_precision_pct: float = 10.0
    #: the measured window, in seconds, and the traffic before it (TCP's start, the shaper's
    #: initial bucket); iperf3 is stopped when the window ends
    duration_s: float = 2.0
    warmup_s: float = 0.3
    udp_bitrate: str = "0"
    pmtu: str = "discover"
    mtu: int = 1500
    #: socket buffer of both iperf3 ends in bytes (iperf3 -w; seed 002's 65535), None: the kernel's
    socket_buffer: int | None = None
    #: Arms of an A/B within the sweep (the regression gate's calibration): with values, every
    #: IPsec point is measured once per arm in every round, the arms side by side in ABBA order,
    #: arm k ("a", "b", ...) with ``arms[k]`` extra BPF instructions on every ESP packet's way
    #: out of an IPsec endpoint (:mod:`ipsec.slowdown`; 0: nothing added).  Plain points have
    #: one arm.  Empty: no arms, nothing added.  Every arm carries the same chain of filters, arm 0's
    #: burning nothing in them, so that the arms differ in the extra instructions alone.
    arms: tuple[int, ...] = ()
    #: the arms' chain is at least this many filters (0: as many as the largest arm takes): the A/B of two
    #: guests (``regress --ab --inject-slowdown``), one arm each, carries one chain in both
    arm_filters: int = 0
    #: measure the plain profile ("none") too, which the IPsec/plain figures need
    plain: bool = True
    #: seconds of measuring after which no repetition beyond ``repetitions`` is started
    #: (None: no limit); the later rates' minimum repetitions are always measured
    budget_s: float | None = None
    #: time round trips beside the flows in every window, and before them (experiments.engine.probe);
    #: the default sweep turns it on, the reproductions and the regression suites keep their figures without
    latency_probe: bool = False
    #: ... that many round trips a second in each window (the interval: 1 / this)
    probe_per_s: float = DEFAULT_PROBE_PER_S
    #: ... by this tool: ping (ICMP echo, answered by the kernel) or irtt (UDP, each way timed)
    probe_tool: str = PROBE_TOOLS[0]

    def __post_init__(self) -> None:
        profiles = tuple(dict.fromkeys(parse_profile(p).name for p in self.profiles))
        if self.plain and "none" not in profiles:
            profiles = ("none",) + profiles  # the plain baseline is measured unless told otherwise
        if not self.plain:
            profiles = tuple(p for p in profiles if p != "none")
            if not profiles:
                raise ValueError("with the plain profile left out, give at least one IPsec profile")
        object.__setattr__(self, "profiles", profiles)
        object.__setattr__(self, "arms", tuple(self.arms))
        if len(self.arms) > len(ARM_LABELS):
            raise ValueError(f"at most {len(ARM_LABELS)} arms, not {len(self.arms)}")
        for n in self.arms:
            chunks(n)  # a ValueError names the range
        if not 0 <= self.arm_filters <= len(chunks(MAX_INSTRUCTIONS)):
            raise ValueError(f"arm_filters must be 0..{len(chunks(MAX_INSTRUCTIONS))}, not {self.arm_filters!r}")
        # A value given twice is measured once (in the order first given).
        object.__setattr__(self, "rates_mbit", tuple(dict.fromkeys(float(r) for r in self.rates_mbit)))
        for name in ("sizes", "ip_versions", "transports"):
            object.__setattr__(self, name, tuple(dict.fromkeys(getattr(self, name))))
        # the network first: its MTU bounds the sizes checked below
        build_spec(self.topology, clients=self.clients, mtu=self.mtu, pmtu=self.pmtu)  # validates
        if self.mode not in ("transport", "tunnel"):
            raise ValueError(f"mode must be transport or tunnel, not {self.mode!r}")
        object.__setattr__(self, "keying", Keying.named(self.keying))
        if WIREGUARD in profiles and (why := wireguard.refusal(self.mode, self.keying)):
            raise ValueError(why)
        if is_ike(self.keying):
            for name in profiles:
                if name != "none":
                    try:
                        child_proposals(parse_profile(name))
                    except Unsupported as e:
                        raise ValueError(f"with --keying {self.keying}: {e}") from None
        if not self.ip_versions or set(self.ip_versions) - {4, 6}:
            raise ValueError(f"ip_versions must be 4, 6 or both, not {self.ip_versions!r}")
        if not self.transports or set(self.transports) - set(TRANSPORTS):
            raise ValueError(f"transports must be among {', '.join(TRANSPORTS)}, not {self.transports!r}")
        if not self.rates_mbit or min(self.rates_mbit) <= 0:
            raise ValueError(f"rates must be positive Mbit/s values, not {self.rates_mbit!r}")
        if self.size_mode not in SIZE_MODES:
            raise ValueError(f"size_mode must be one of {', '.join(SIZE_MODES)}, not {self.size_mode!r}")
        if not self.sizes or min(self.sizes) < 16 or max(self.sizes) > 65000:
            raise ValueError(f"sizes must be bytes in 16..65000, not {self.sizes!r}")
        if self.size_mode == "mss" and (min(self.sizes) < 88 or max(self.sizes) > self.mtu - 40):
            raise ValueError(f"with size_mode mss the sizes are TCP MSS values: 88..{self.mtu - 40} "
                             f"for MTU {self.mtu}, not {min(self.sizes)}..{max(self.sizes)}")
        if not re.match(r"^[0-9]+(\.[0-9]+)?[KMG]?$", str(self.udp_bitrate)):
            raise ValueError(f"udp_bitrate must be a rate as iperf3 -b takes it (0 = unlimited, 50M, 1.5G), "
                             f"not {self.udp_bitrate!r}")
        if isinstance(self.repetitions, bool) or not isinstance(self.repetitions, int) \
                or not 1 <= self.repetitions <= MAX_REPETITIONS:
            raise ValueError(f"repetitions must be 1..{MAX_REPETITIONS}, not {self.repetitions!r}")
        if self.max_repetitions is not None and not (isinstance(self.max_repetitions, int)
                                                     and self.repetitions <= self.max_repetitions <= MAX_REPETITIONS):
            raise ValueError(f"max_repetitions must be {self.repetitions}..{MAX_REPETITIONS} (at least the "
                             f"repetitions), not {self.max_repetitions!r}")
        for name in ("precision_pct", "cpu_precision_pct"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 100:
                raise ValueError(f"{name} must be a percentage in (0, 100], not {value!r}")
        for name, low, high in (("duration_s", MIN_DURATION_S, 3600.0), ("warmup_s", MIN_WARMUP_S, 600.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
                raise ValueError(f"{name.replace('_s', '').replace('warmup', 'warm-up')} must be seconds in "
                                 f"{low:g}..{high:g}, not {value!r}")
        if self.socket_buffer is not None and not (isinstance(self.socket_buffer, int)
                                                   and 2048 <= self.socket_buffer <= 64 * 2**20):
            raise ValueError(f"socket buffer must be bytes in 2048..{64 * 2**20} (iperf3 -w), "
                             f"not {self.socket_buffer!r}")
        if self.connect_timeout_s is not None and (isinstance(self.connect_timeout_s, bool) or not isinstance(
                self.connect_timeout_s, (int, float)) or not MIN_CONNECT_S <= self.connect_timeout_s <= MAX_CONNECT_S):
            raise ValueError(f"the connect time limit must be seconds in {MIN_CONNECT_S:g}..{MAX_CONNECT_S:g}, "
                             f"not {self.connect_timeout_s!r}")
        if self.budget_s is not None and (isinstance(self.budget_s, bool) or not isinstance(self.budget_s, (int, float))
                                          or not 0 < self.budget_s <= 7 * 86400):
            raise ValueError(f"time budget must be seconds in (0, {7 * 86400}], not {self.budget_s!r}")
        if isinstance(self.probe_per_s, bool) or not isinstance(self.probe_per_s, (int, float)) \
                or not MIN_PROBE_PER_S <= self.probe_per_s <= MAX_PROBE_PER_S:
            raise ValueError(f"the probe's rate must be round trips a second in {MIN_PROBE_PER_S:g}.."
                             f"{MAX_PROBE_PER_S:g}, not {self.probe_per_s!r}")
        if self.probe_tool not in PROBE_TOOLS:
            raise ValueError(f"the probe's tool must be one of {', '.join(PROBE_TOOLS)}, not {self.probe_tool!r}")
        if self.latency_probe:
            share = probe_share(self.probe_per_s, min(self.rates_mbit), max(self.ip_versions))
            if share > PROBE_MOST_SHARE:
                fit = PROBE_MOST_SHARE / share * self.probe_per_s
                raise ValueError(
                    f"--probe-rate {self.probe_per_s:g} at {min(self.rates_mbit):g} Mbit/s: the probe's packets "
                    f"would take {share:.1%} of the link, more than the {PROBE_MOST_SHARE:.0%} it may take beside "
                    "the flows it times; " + (f"at most {fit:.3g} a second there" if fit >= MIN_PROBE_PER_S else
                                              "too slow a link for it: --no-latency-probe"))
        object.__setattr__(self, "duration_s", float(self.duration_s))
        object.__setattr__(self, "warmup_s", float(self.warmup_s))

    @property
    def most_repetitions(self) -> int:
        return self.max_repetitions or self.repetitions

    @property
    def adaptive(self) -> bool:
        return self.most_repetitions > self.repetitions

    @property
    def arm_labels(self) -> tuple[str, ...]:
        """The arms' labels ("a", "b", ...), one per :attr:`arms` value."""
        return tuple(ARM_LABELS[:len(self.arms)])

    def arm_instructions(self, arm: str) -> int:
        """The extra instructions per ESP packet of arm ``arm`` (0 for "", a point without arms)."""
        return self.arms[ARM_LABELS.index(arm)] if arm else 0

    @property
    def arm_chain(self) -> int:
        """The filters every arm carries (:attr:`arm_filters`, or what the largest arm takes)."""
        return max(self.arm_filters, filters_for(self.arms))

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> SweepSpec:
        """The spec :meth:`to_json` wrote (JSON turned its tuples into lists).

        Earlier versions let iperf3 time the warm-up (its ``-O``, ``omit_s``); it is the same
        quantity now timed by the testbed.
        """
        data = dict(data)
        if "omit_s" in data:
            data = {"warmup_s": data.pop("omit_s"), **data}  # a warmup_s given as well wins
        if "probe_tool" not in data:
            data["probe_tool"] = IRTT  # written before ping was the probe's default, irtt was its one tool
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in known})

    @classmethod
    def from_meta(cls, sweep: MetaSweep) -> SweepSpec:
        """The spec a run's meta.json holds (its ``sweep``, or a part's ``spec``), an older version's too."""
        return cls.from_json(sweep.to_json())


def default_sweep(**changes: Any) -> SweepSpec:
    """The sweep ``ipsec-testbed sweep`` runs with no options, seed 003's curve, with ``changes`` (the spec's
    field names): adaptive repetitions within a time budget, the latency probe on, its rate fitted to the
    slowest link unless ``probe_per_s`` is given (None: fitted too)."""
    fields = {"repetitions": DEFAULT_REPETITIONS, "max_repetitions": DEFAULT_MAX_REPETITIONS,
              "budget_s": DEFAULT_BUDGET_S, "latency_probe": True, **changes}
    if fields.get("probe_per_s") is None:
        fields["probe_per_s"] = fitting_probe_rate(fields.get("rates_mbit", SweepSpec.rates_mbit),
                                                   fields.get("ip_versions", SweepSpec.ip_versions))
    return SweepSpec(**fields)


def changes(spec: SweepSpec, base: SweepSpec | None = None) -> dict[str, Any]:
    """The fields of ``spec`` whose values differ from ``base``'s: what a sweep is, said as data (a benchmark's
    sweep is no command line).  Without ``base``, from :func:`default_sweep`'s, the probe's rate compared with
    the one fitted to ``spec``'s links, so that ``default_sweep(**changes(spec)) == spec``."""
    fitted = base is None
    base = default_sweep() if base is None else base
    differ = {}
    for field in dataclasses.fields(spec):
        value, usual = getattr(spec, field.name), getattr(base, field.name)
        if field.name == "probe_per_s" and fitted:
            usual = fitting_probe_rate(spec.rates_mbit, spec.ip_versions)
        if value != usual:
            differ[field.name] = value
    return differ


def describe_changes(spec: SweepSpec) -> str:
    """:func:`changes` in one line for people: ``the default sweep with rates_mbit=10, repetitions=15``."""
    said = ", ".join(f"{name}={value_text(value)}" for name, value in changes(spec).items())
    return "the default sweep" + (f" with {said}" if said else "")


def value_text(value: Any) -> str:
    """A spec's or an option's value as a person gives it: numbers as short as they are, tuples comma-separated."""
    if isinstance(value, tuple):
        return ",".join(value_text(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclasses.dataclass(frozen=True)
class Point:
    """One measurement: its key fields, as in ``results.jsonl``."""

    topology: str
    profile: str
    mode: str
    ip_version: int
    transport: str
    rate_mbit: float
    size_bytes: int
    size_mode: str
    clients: int
    arm: str  # "" without arms (SweepSpec.arms)
    repetition: int

    def key(self) -> tuple:
        return tuple(getattr(self, f) for f in KEY_FIELDS)

    def point_key(self) -> tuple:
        """The key without the repetition: what its repetitions share."""
        return tuple(getattr(self, f) for f in POINT_FIELDS)

    def describe(self) -> str:
        """The point in words, as the progress bar and the warnings name it: profile, rate, size, IP version,
        transport, clients, arm and repetition (counted from 1)."""
        return (f"{self.profile} {self.rate_mbit:g} Mbit/s {self.size_bytes} B IPv{self.ip_version} {self.transport}"
                f"{f' x{self.clients}' if self.clients > 1 else ''}{f' arm {self.arm}' if self.arm else ''} "
                f"rep {self.repetition + 1}")

    def fields(self) -> dict:
        """The point's fields as a record's JSON has them (``arm`` only when it has one)."""
        return {f: getattr(self, f) for f in KEY_FIELDS if f != FIELD.arm or self.arm}


def plan_round(spec: SweepSpec, rate_mbit: float, repetition: int,
               wanted: Callable[[Point], bool] | None = None) -> list[Point]:
    """The points of one round at ``rate_mbit``: repetition ``repetition`` of every point
    ``wanted`` accepts (all by default), in measuring order (see the module docstring)."""
    points = []
    turn = repetition * len(spec.sizes) * len(spec.ip_versions) * len(spec.transports)
    for size in spec.sizes:
        for ipv in spec.ip_versions:
            for transport in spec.transports:
                size_mode = "datagram" if transport == "udp" else spec.size_mode
                # ABBA order (none, IPsec, IPsec, none, ...): still side by side, but each
                # profile is measured twice running, so IPsec is switched half as often.
                forward = turn % 2 == 0
                order = spec.profiles if forward else spec.profiles[::-1]
                turn += 1
                for profile in order:
                    # an IPsec point's arms side by side, in the same ABBA order
                    arms = spec.arm_labels if profile != "none" and spec.arms else ("",)
                    for arm in arms if forward else arms[::-1]:
                        p = Point(spec.topology, profile, spec.mode, ipv, transport, float(rate_mbit), size,
                                  size_mode, spec.clients, arm, repetition)
                        if wanted is None or wanted(p):
                            points.append(p)
    return points


def plan_points(spec: SweepSpec, repetitions: int | None = None) -> list[Point]:
    """Every point of ``spec`` with ``repetitions`` repetitions (default: the minimum), in measuring order."""
    reps = spec.repetitions if repetitions is None else repetitions
    return [p for rate in spec.rates_mbit for rep in range(reps) for p in plan_round(spec, rate, rep)]


def relative_ci(values: Sequence[float]) -> float | None:
    """The 95 % confidence interval half-width of the mean of ``values``, as a share of the
    mean (None below two values or for a mean of 0)."""
    n = len(values)
    if n < 2:
        return None
    mean = math.fsum(values) / n
    if mean == 0:
        return None
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    return t_critical_95(n - 1) * std / math.sqrt(n) / abs(mean)


def attempts(records: Sequence[Record]) -> int:
    """Repetitions a point has had: its records that measured something (anomalies included)."""
    return sum(1 for r in records if not r.failed)


#: A point whose last this many records failed (each after its attempts) is not tried again in the
#: run: a failure that repeats is the point's, not chance's (the next run on the directory tries again).
FAILED_IN_A_ROW = 3


def given_up(records: Sequence[Record], most: int) -> bool:
    """Whether a point with these records is measured no more (pure): ``most`` attempts made, or its last
    :data:`FAILED_IN_A_ROW` all failed."""
    if attempts(records) >= most:
        return True
    return len(records) >= FAILED_IN_A_ROW and all(r.failed for r in records[-FAILED_IN_A_ROW:])


def needs_more(spec: SweepSpec, records: Sequence[Record], extras: bool = True) -> bool:
    """Whether a point with these records (its repetitions so far, in the order measured) is
    measured again (pure); without ``extras`` only to reach its minimum repetitions."""
    if given_up(records, spec.most_repetitions):
        return False
    if needs_minimum(spec, records):
        return True
    return extras and not precise(spec, records)


def needs_focus(records: Sequence[Record], wanted: int) -> bool:
    """Whether a point asked for ``wanted`` usable repetitions needs another (pure): fewer than that,
    and not given up at :data:`MAX_REPETITIONS` attempts."""
    return not given_up(records, MAX_REPETITIONS) and sum(1 for r in records if usable(r)) < wanted


def needs_minimum(spec: SweepSpec, records: Sequence[Record]) -> bool:
    """Whether a point with these records has fewer usable repetitions than the spec's minimum."""
    return sum(1 for r in records if usable(r)) < spec.repetitions


def unmeasured(spec: SweepSpec, groups: Mapping[tuple, list[Record]]) -> list[Point]:
    """The spec's points (their first repetition) with fewer measured repetitions than its minimum:
    every attempt at the others failed, or the run ended before them; a profile given up on
    (:func:`unusable_profiles`: every repetition an anomaly) is not missing, it was measured (pure)."""
    given_up = unusable_profiles(spec, groups)
    return [p for p in plan_points(spec, 1) if p.profile not in given_up
            and sum(1 for r in groups.get(p.point_key(), []) if not r.failed) < spec.repetitions]


def unusable_profiles(spec: SweepSpec, groups: Mapping[tuple, list[Record]]) -> dict[str, str]:
    """The profiles whose every point has had a repetition and every repetition so far was an
    ``anomaly``, each with one line on what its data path did (pure).

    Such a profile's data path is not the one the overhead model describes (ESP encrypted after
    the shaper, counters reset): measuring it again changes nothing, so the sweep stops after its
    first round.  Failed attempts do not count either way.
    """
    by_profile: dict[str, list[list[Record]]] = collections.defaultdict(list)
    for p in plan_points(spec, 1):
        by_profile[p.profile].append(groups.get(p.point_key(), []))
    out = {}
    for profile, points in by_profile.items():
        measured = [[r for r in records if not r.failed] for records in points]
        if not all(measured) or any(r.bound is not Bound.ANOMALY for records in measured for r in records):
            continue
        records = [r for rs in measured for r in rs]
        ratios = sorted(r.goodput_mbps / r.shaper_goodput_mbps for r in records
                        if (r.shaper_goodput_mbps or 0) > 0 and r.goodput_mbps is not None)
        if ratios and ratios[len(ratios) // 2] > 1:
            ratio = ratios[len(ratios) // 2]
            what = (f"it carried {ratio:.2f}x the payload that the shaper's bytes allow under the overhead model "
                    f"(median of {len(ratios)}): the shaper counted {1 / ratio:.2f} of the bytes per payload byte "
                    "that the model puts on the wire, so part of the packets' bytes bypassed it "
                    "(ESP offload, which encrypts after the qdisc, does this)")
        else:
            reasons = collections.Counter(r.bound_reason or "" for r in records)
            what = f"every repetition was an anomaly, most often: {reasons.most_common(1)[0][0]}"
        out[profile] = (f"profile {profile}: all {len(records)} repetitions of its {len(points)} points were "
                        f"anomalies; {what}. Its figures are not usable, and it was not measured again")
    return out


def at_common_speed_by_point(groups: Mapping[tuple, list[Record]]) -> dict[tuple, list[Record]]:
    """``groups`` (records by point) with their CPU costs at the run's common machine speed
    (:func:`analysis.stats.at_common_speed`, over all of them), as :func:`precise` should judge
    them (pure)."""
    adjusted = iter(at_common_speed([r for records in groups.values() for r in records]))
    return {key: [next(adjusted) for _ in records] for key, records in groups.items()}


def quiet(record: Record) -> bool:
    """Whether a usable record's window ran with the host's CPUs free of other work (no more than
    :data:`~testbed.hostload.FOREIGN_PCT` of a CPU; a record whose meter could not tell counts as quiet)."""
    return usable(record) and (record.foreign_cpu_pct is None or record.foreign_cpu_pct <= FOREIGN_PCT)


def short_of_quiet(spec: SweepSpec, records: Sequence[Record]) -> bool:
    """Whether a point has usable repetitions enough but fewer than the spec's minimum in quiet windows."""
    return not needs_minimum(spec, records) and sum(1 for r in records if quiet(r)) < spec.repetitions


def precise(spec: SweepSpec, records: Sequence[Record]) -> bool:
    """Whether the usable records' goodput and CPU per GB are as precise as the spec asks (CPU
    per GB as given: at the run's common speed when it comes from :func:`at_common_speed_by_point`),
    with at least the spec's minimum of them in quiet windows (:func:`quiet`)."""
    if short_of_quiet(spec, records):
        return False
    ok = [r for r in records if usable(r)]
    # the CPU's cost as the records have it: timed, or counted (the counted backend's, never in CPU seconds)
    cost = FIELD.instructions_per_byte if any(r.clock == INSTRUCTIONS for r in ok) else FIELD.cpu_s_per_gb
    for field, target in ((FIELD.goodput_mbps, spec.precision_pct), (cost, spec.cpu_precision_pct)):
        values = [v for v in (getattr(r, field) for r in ok) if isinstance(v, (int, float))]
        ci = relative_ci(values)
        if values and (ci is None or ci > target / 100):
            return False
    return True


def within_budget(spec: SweepSpec, elapsed_s: float, seconds_per_point: float, minimum_left: int) -> bool:
    """Whether one more repetition beyond a point's minimum fits the spec's time budget: after
    ``elapsed_s`` of measuring at ``seconds_per_point`` each, with ``minimum_left`` minimum
    repetitions still to come (pure)."""
    if spec.budget_s is None:
        return True
    return elapsed_s + seconds_per_point * (1 + minimum_left) <= spec.budget_s


def precision_of(spec: SweepSpec, groups: Mapping[tuple, list[Record]]) -> dict:
    """How many of the spec's points are as precise as asked (``precise``), and of the others
    how many had their most repetitions (``at_most``) or were stopped short of them by the
    time budget or an interruption (``short``), or belong to a profile given up as every repetition
    of it was an anomaly (``unusable``, :func:`unusable_profiles`) (pure); ``disturbed`` counts those
    of the others short of quiet windows (:func:`short_of_quiet`)."""
    out = {"points": 0, "precise": 0, "at_most": 0, "short": 0, "unusable": 0, "disturbed": 0}
    groups = at_common_speed_by_point(groups)
    given_up = unusable_profiles(spec, groups)
    for p in plan_points(spec, 1):
        records = groups.get(p.point_key(), [])
        out["points"] += 1
        if p.profile in given_up:
            out["unusable"] += 1
        elif precise(spec, records) and not needs_minimum(spec, records):
            out["precise"] += 1
        elif attempts(records) >= spec.most_repetitions:
            out["at_most"] += 1
        else:
            out["short"] += 1
        if p.profile not in given_up and short_of_quiet(spec, records):
            out["disturbed"] += 1
    return out


def estimate_seconds(spec: SweepSpec, points: int, per_point_overhead_s: float = 0.3,
                     per_network_s: float = 6.0) -> float:
    """A rough wall-time estimate (measurement + setup) for ``points`` points (User-Mode Linux figures)."""
    return points * (spec.duration_s + spec.warmup_s + per_point_overhead_s) + per_network_s

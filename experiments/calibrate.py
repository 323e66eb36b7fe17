"""How fast this machine can emulate a seed's heaviest point: the factor its link rates are divided by.

A seed measured on its own hardware; here every host is emulated on a few CPUs (inside
User-Mode Linux when the host kernel has no ESP), and at the seed's rates the emulator's CPU,
not the link, may set the figures. :func:`scale_for` measures, for each IPsec profile of each
part, one point at the part's smallest size (and each of its transports) on a link twice as
fast as the part's fastest, so that the CPU gives out first: the goodput it reaches is this
machine's capacity for that profile, size and transport. The factor divides the seed's rates so that the heaviest
point asks for at most :data:`HEADROOM` of that capacity: there the shaped link is the
bottleneck again (the monitor then classes the points ``link``), and what carries over from
the seed is what depends on bytes and protocols, not on its CPUs.
"""
from __future__ import annotations

import dataclasses
import logging
import math

from experiments.engine import iperf
from experiments.engine.plan import Point, SweepSpec
from ipsec.overhead import expected_point_goodput_mbps
from testbed import backends
from testbed.record import PLAIN_PROFILE, Group, Tunnel
from topologies import build_spec
from topologies.shaping import MAX_RATE_MBIT, ShapingSpec

log = logging.getLogger(__name__)

#: The heaviest point may ask for at most this share of the measured capacity.
HEADROOM = 0.6
#: Factors are rounded up to one of these (times a power of ten): rates stay readable.
NICE = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)
#: The calibration point's window and warm-up, in seconds.
WINDOW_S, WARMUP_S = 1.5, 0.5


@dataclasses.dataclass(frozen=True)
class Calibration:
    """One profile's capacity at the heaviest point, and the factor it asks for."""

    profile: str
    size_bytes: int
    size_mode: str
    link_mbit: float
    goodput_mbps: float
    bound: str | None
    wanted_mbps: float   # what the seed's fastest rate asks of this point (its theoretical goodput)
    factor: float        # wanted / (HEADROOM * capacity), at least 1
    part: str = ""       # the part whose heaviest point it is
    transport: str = "tcp"


def nice_factor(x: float) -> float:
    """The smallest :data:`NICE` number (times a power of ten) at or above ``x``; 1 for ``x`` <= 1."""
    if x <= 1.0:
        return 1.0
    decade = 10 ** math.floor(math.log10(x))
    for n in (*NICE, 10.0):
        if n * decade >= x * (1 - 1e-9):
            return n * decade
    return 10.0 * decade  # unreachable: 10 * decade > x


def scaled_rates(rates: tuple[float, ...], factor: float) -> tuple[float, ...]:
    """``rates`` divided by ``factor``, to three significant digits (at least 0.001 Mbit/s)."""
    def three(x: float) -> float:
        return float(f"{x:.3g}")

    return tuple(max(0.001, three(r / factor)) for r in rates)


@dataclasses.dataclass(frozen=True)
class Heaviest:
    """A point to calibrate: a part's heaviest point (at its fastest rate) and the part's network."""

    part: str        # the sweep part's name
    point: Group     # topology, profile, mode, ip_version, transport, rate_mbit, size_bytes, size_mode
    mtu: int
    pmtu: str
    udp_bitrate: str = "0"

    @property
    def network(self) -> tuple:
        """What a network to measure it on is made of: points that share it are measured on one."""
        return self.point.topology, self.point.mode, self.point.ip_version, self.mtu, self.pmtu, self.udp_bitrate


def heaviest_points(parts) -> list[Heaviest]:
    """The points to calibrate: for every sweep part, each IPsec profile (or the plain one) at the part's
    fastest rate, smallest size and each of its transports (UDP's senders offer what they can, TCP's
    what the window lets through: either may be the heavier), once for points that several parts share."""
    out: dict[tuple, Heaviest] = {}
    for part in (p for p in parts if not p.transactions):
        spec = part.spec
        size = min(spec.sizes)  # the most packets (MSS) or system calls (writes) per byte: the heaviest
        profiles = [profile for profile in spec.profiles if Tunnel.of(profile) is not None] or [PLAIN_PROFILE]
        for transport in spec.transports:
            size_mode = "datagram" if transport == "udp" else spec.size_mode
            for profile in profiles:
                point = Group(topology=spec.topology, profile=profile, mode=spec.mode, ip_version=spec.ip_versions[0],
                              transport=transport, rate_mbit=max(spec.rates_mbit), size_bytes=size,
                              size_mode=size_mode)
                h = Heaviest(part.name, point, spec.mtu, spec.pmtu, spec.udp_bitrate)
                out.setdefault((point, h.mtu, h.pmtu, h.udp_bitrate), h)
    return list(out.values())


def measure_capacity(points: list[Heaviest], say=lambda message: None) -> list[Calibration]:
    """Measure each of ``points`` (all on one network, :attr:`Heaviest.network`), each on a link twice its rate."""
    from experiments.engine.measure import measure_with_retry, monitor_for, switch_ipsec
    from topologies.network import Network

    if not points:
        return []
    first = points[0].point
    profiles = tuple(dict.fromkeys(("none", *[h.point.profile for h in points])))
    links = [min(MAX_RATE_MBIT, 2 * h.point.rate_mbit) for h in points]
    spec = SweepSpec(topology=first.topology, profiles=profiles,
                     mode=first.mode, ip_versions=(first.ip_version,), rates_mbit=(links[0],),
                     transports=tuple(dict.fromkeys(h.point.transport for h in points)),
                     sizes=(first.size_bytes,), size_mode="mss" if first.size_mode == "datagram" else first.size_mode,
                     repetitions=1, duration_s=WINDOW_S, warmup_s=WARMUP_S, mtu=points[0].mtu, pmtu=points[0].pmtu,
                     udp_bitrate=points[0].udp_bitrate)
    topo = build_spec(spec.topology, mtu=spec.mtu, pmtu=spec.pmtu)
    meter = backends.current().cpu_meter()
    out = []
    try:
        with Network(topo, shaping=ShapingSpec(rate_mbit=links[0])) as net, \
                iperf.Servers(_flows(net, spec.ip_versions[0])) as servers, \
                monitor_for(net, servers, meter) as monitor:
            current = "none"
            for h, link in zip(points, links, strict=True):
                p = h.point
                if net.shaping.rate_mbit != link:
                    net.reshape(ShapingSpec(rate_mbit=link))
                current = switch_ipsec(net, current, p.profile, spec.mode, spec.ip_versions, spec.keying)
                point = Point(spec.topology, p.profile, spec.mode, spec.ip_versions[0], p.transport, link,
                              p.size_bytes, p.size_mode, 1, "", 0)
                record = measure_with_retry(net, point, spec, servers, monitor)
                if record.failed:
                    raise RuntimeError(f"calibration point {p.profile} failed: {record.error}")
                wanted = expected_point_goodput_mbps(p, spec.mtu, spec.pmtu)
                capacity = record.goodput_mbps
                factor = wanted / (HEADROOM * capacity) if capacity > 0 else math.inf
                cal = Calibration(p.profile, p.size_bytes, p.size_mode, link, capacity, record.bound,
                                  wanted, max(1.0, factor), part=h.part, transport=p.transport)
                say(f"calibration: {h.part}: {p.profile} {p.transport.upper()} at {p.size_bytes} B on a {link:g} "
                    f"Mbit/s link: {capacity:.1f} Mbit/s ({record.bound}-bound); the seed's {p.rate_mbit:g} "
                    f"Mbit/s asks for {wanted:.1f}")
                out.append(cal)
    finally:
        meter.close()
    return out


def _flows(net, ip_version: int) -> list:
    from experiments.engine.clients import flows_of

    return flows_of(net, ip_version)


def scale_for(parts, say=lambda message: None) -> tuple[float, dict]:
    """The factor to divide ``parts``' rates by on this machine, and how it was found (for meta.json): one
    factor for the run, the one its most demanding part's heaviest point asks for, so that every part's
    points are link-bound and ratios between parts compare like with like."""
    networks: dict[tuple, list[Heaviest]] = {}
    for h in heaviest_points(parts):
        networks.setdefault(h.network, []).append(h)
    cals = [c for points in networks.values() for c in measure_capacity(points, say)]
    if not cals:
        return 1.0, {"factor": 1.0, "how": "no sweep part to calibrate"}
    worst = max(cals, key=lambda c: c.factor)
    factor = nice_factor(worst.factor)
    how = (f"auto: {worst.part}'s {worst.profile} {worst.transport.upper()} at {worst.size_bytes} B reached "
           f"{worst.goodput_mbps:.1f} Mbit/s here "
           f"({worst.bound}-bound on a {worst.link_mbit:g} Mbit/s link); the seed's fastest rate asks for "
           f"{worst.wanted_mbps:.1f}, so rates are divided by {factor:g} to ask at most "
           f"{HEADROOM:.0%} of that")
    return factor, {"factor": factor, "how": how, "headroom": HEADROOM,
                    "calibration": [dataclasses.asdict(c) for c in cals]}

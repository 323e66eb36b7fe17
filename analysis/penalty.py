"""Where an IPsec penalty comes from: the extra bytes on the wire, and the rest (CPU and other).

For an IPsec point and its plain baseline (a :class:`~analysis.stats.Ratio`)::

    measured   r = goodput(IPsec) / goodput(plain)             penalty    = 1 - r
    wire       w = expected(IPsec) / expected(plain)           wire share = 1 - w
                                                               other      = penalty - wire share

``expected`` is the goodput a perfect shaper of the point's rate gives
(:func:`ipsec.overhead.expected_point_goodput_mbps`): the bytes IPsec adds to every packet,
the smaller MSS it leaves and the link framing, nothing else.  On a link-bound point
the wire share is what IPsec must cost; whatever is left is time the machine spent
elsewhere: encryption, the extra packet processing, an emulator out of CPU.  When the
plain point itself falls short of its expected goodput (``plain_link_bound`` false) the
link was not the bottleneck and the wire share is only what the bytes would cost on a
saturated link.  An IPsec point faster than the model (negative ``other``) is possible
within noise.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from analysis.stats import PLAIN_PROFILE, Ratio
from ipsec.overhead import expected_point_goodput_mbps
from testbed.record import Group

#: A plain point at or above this share of its expected goodput counts as link-bound.
LINK_BOUND = 0.90


@dataclasses.dataclass(frozen=True)
class Penalty:
    """One IPsec point's penalty (shares of the plain goodput; 0.1 = 10 %)."""

    point: Group
    ratio: float
    penalty: float
    wire: float | None
    other: float | None
    plain_link_bound: bool | None

    def to_json(self) -> dict[str, Any]:
        """The penalty as JSON-able data, its point as the fields it is identified by."""
        return {**dataclasses.asdict(self), "point": self.point.to_json()}


def decompose(measured_ratio: float, expected_ipsec: float | None, expected_plain: float | None,
              plain_goodput: float | None = None, point: Group | None = None) -> Penalty:
    """The :class:`Penalty` of a point from its measured ratio and the two expected goodputs (pure)."""
    point = Group() if point is None else point
    penalty = 1.0 - measured_ratio
    if not expected_ipsec or not expected_plain:
        return Penalty(point, measured_ratio, penalty, None, None, None)
    wire = 1.0 - expected_ipsec / expected_plain
    bound = None if plain_goodput is None else plain_goodput >= LINK_BOUND * expected_plain
    return Penalty(point, measured_ratio, penalty, wire, penalty - wire, bound)


def penalty_of(ratio: Ratio, link_mtu: int = 1500, pmtu: str = "discover") -> Penalty | None:
    """:func:`decompose` for an IPsec/plain :class:`~analysis.stats.Ratio` of a sweep; None without a ratio."""
    if ratio.goodput is None:
        return None
    point = ratio.point
    try:
        exp_ipsec = expected_point_goodput_mbps(point, link_mtu, pmtu)
        exp_plain = expected_point_goodput_mbps(point.replace(profile=PLAIN_PROFILE), link_mtu, pmtu)
    except (KeyError, TypeError, ValueError):
        exp_ipsec = exp_plain = None  # a point the model does not cover
    return decompose(ratio.goodput.value, exp_ipsec, exp_plain, ratio.plain.goodput.mean, point)

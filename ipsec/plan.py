"""From a profile and two endpoints to the SAs and policies each end installs.

One *association* protects the traffic between two endpoints in both directions::

    side a (namespace a.ns)                       side b (namespace b.ns)
    selector a.subnet  ── IPsec a.address <══════> b.address ──  selector b.subnet
                         SAs a->b and b->a, one per protocol of the profile

In transport mode the endpoints are the hosts themselves (subnets are the host
addresses); in tunnel mode they are gateways and the subnets the LANs behind them,
and ``forward=True`` adds the ``fwd`` policies a gateway needs for traffic it routes.

:func:`plan_association` is pure: SPIs and reqids come from a :class:`SpiPlanner` so
that every SA of a run is unique, keys from :mod:`secrets`.  :func:`apply_association`
installs a plan over netlink; if either side fails nothing is left installed.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import itertools

from ipsec.algorithms import get_algorithm
from ipsec.profiles import Profile, parse_profile
from ipsec.sa import MODES, PolicySpec, SASpec, SelectorSpec, TemplateSpec, random_key


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One end: the namespace holding its SAs, its IPsec address, the traffic it protects."""

    ns: str
    address: str
    subnet: str | None = None  # None: the address itself (/32 or /128)

    def __post_init__(self) -> None:
        addr = ipaddress.ip_address(self.address)
        net = ipaddress.ip_network(self.subnet or self.address, strict=False)
        object.__setattr__(self, "address", str(addr))
        object.__setattr__(self, "subnet", str(net))

    @property
    def family(self) -> int:
        return ipaddress.ip_address(self.address).version


@dataclasses.dataclass(frozen=True)
class AssociationSpec:
    """What to protect and how; checked on construction."""

    profile: Profile
    mode: str
    a: Endpoint
    b: Endpoint
    forward: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.profile, str):
            object.__setattr__(self, "profile", parse_profile(self.profile))
        if self.profile.wireguard:
            raise ValueError("profile wireguard is not IPsec: no SAs to plan (ipsec.wireguard plans its tunnels)")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        families = {self.a.family, self.b.family}
        sel = {ipaddress.ip_network(e.subnet).version for e in (self.a, self.b)}
        if len(families) != 1:
            raise ValueError(f"endpoints must both be IPv4 or both IPv6, not {self.a.address} and {self.b.address}")
        if sel != families:
            raise ValueError(f"IPv{sel.pop()} selectors ({self.a.subnet}, {self.b.subnet}) with "
                             f"IPv{families.pop()} endpoints ({self.a.address}, {self.b.address}): "
                             "give selectors of the endpoints' IP version")
        if self.mode == "transport":
            for e in (self.a, self.b):
                if e.subnet != str(ipaddress.ip_network(e.address)):
                    raise ValueError(f"transport mode protects the hosts themselves: subnet {e.subnet} "
                                     f"must be {e.address} itself (use tunnel mode for networks)")
        if self.a.ns == self.b.ns and self.a.ns:
            raise ValueError(f"both endpoints are in namespace {self.a.ns}: each end needs its own")


class SpiPlanner:
    """Unique SPIs, IPComp CPIs and reqids for one run.

    SPIs start at 0x1000 (1..255 are reserved, RFC 4303); CPIs are 16 bits and start at
    0x100 (below are the well-known CPIs, RFC 3173).  :meth:`reserve` rejects a value
    already planned, so a collision is a clear error before the kernel sees anything.
    """

    def __init__(self, first_spi: int = 0x1000, first_cpi: int = 0x100, first_reqid: int = 1) -> None:
        self._spis = itertools.count(first_spi)
        self._cpis = itertools.count(first_cpi)
        self._reqids = itertools.count(first_reqid)
        self._used: set[tuple[str, int]] = set()

    def reserve(self, proto: str, spi: int) -> int:
        key = ("comp" if proto == "comp" else "spi", spi)
        if key in self._used:
            raise ValueError(f"SPI collision: {proto} SPI {spi:#x} is already used in this run")
        self._used.add(key)
        return spi

    def spi(self, proto: str) -> int:
        counter = self._cpis if proto == "comp" else self._spis
        while True:
            value = next(counter)
            if proto == "comp" and value > 0xFFFF:
                raise ValueError("out of IPComp CPIs (16 bits) for this run")
            if (("comp" if proto == "comp" else "spi"), value) not in self._used:
                return self.reserve(proto, value)

    def reqid(self) -> int:
        return next(self._reqids)


@dataclasses.dataclass(frozen=True)
class AssociationPlan:
    """The SAs (both sides hold all of them) and each side's policies."""

    spec: AssociationSpec
    reqid: int
    sas: tuple[SASpec, ...]
    policies_a: tuple[PolicySpec, ...]
    policies_b: tuple[PolicySpec, ...]

    def side(self, which: str) -> tuple[str, tuple[SASpec, ...], tuple[PolicySpec, ...]]:
        """(namespace, SAs, policies) for side ``"a"`` or ``"b"``."""
        if which == "a":
            return self.spec.a.ns, self.sas, self.policies_a
        if which == "b":
            return self.spec.b.ns, self.sas, self.policies_b
        raise ValueError(f"side must be 'a' or 'b', not {which!r}")


def _sa(profile: Profile, proto: str, mode: str, src: str, dst: str, spi: int, reqid: int) -> SASpec:
    base = dict(src=src, dst=dst, proto=proto, spi=spi, mode=mode, reqid=reqid)
    if proto == "comp":
        return SASpec(**base, comp=get_algorithm("deflate"))
    if proto == "ah":
        auth = get_algorithm(profile.ah_auth)
        return SASpec(**base, auth=auth, auth_key=random_key(auth))
    if profile.aead:
        aead = get_algorithm(profile.aead)
        return SASpec(**base, aead=aead, aead_key=random_key(aead), aead_icv_bits=profile.aead_icv_bits)
    crypt, auth = get_algorithm(profile.crypt), get_algorithm(profile.esp_auth)
    return SASpec(**base, crypt=crypt, crypt_key=random_key(crypt, profile.crypt_key_bits),
                  auth=auth, auth_key=random_key(auth))


def plan_association(spec: AssociationSpec, planner: SpiPlanner | None = None) -> AssociationPlan:
    """SAs and policies for ``spec`` (see the module docstring); pure but for fresh keys."""
    planner = planner or SpiPlanner()
    profile = spec.profile
    if profile.is_none:
        return AssociationPlan(spec, 0, (), (), ())
    reqid = planner.reqid()
    # The innermost transform carries the tunnel; the others ride on its outer header.
    modes = {p: (spec.mode if i == 0 else "transport") for i, p in enumerate(profile.protocols)}
    sas = []
    for src, dst in ((spec.a, spec.b), (spec.b, spec.a)):
        for proto in profile.protocols:
            sas.append(_sa(profile, proto, modes[proto], src.address, dst.address, planner.spi(proto), reqid))

    def templates(src: Endpoint, dst: Endpoint, inbound: bool) -> list[TemplateSpec]:
        out = []
        for proto in profile.protocols:
            tunnel = modes[proto] == "tunnel"
            out.append(TemplateSpec(proto, modes[proto], reqid,
                                    src.address if tunnel else None, dst.address if tunnel else None,
                                    # The kernel sends small or incompressible packets without IPComp,
                                    # so inbound the IPComp transform is optional (level use).
                                    optional=inbound and proto == "comp"))
        return out

    def policies(me: Endpoint, peer: Endpoint) -> tuple[PolicySpec, ...]:
        out = [PolicySpec(SelectorSpec(me.subnet, peer.subnet), "out", templates=templates(me, peer, False)),
               PolicySpec(SelectorSpec(peer.subnet, me.subnet), "in", templates=templates(peer, me, True))]
        if spec.forward:
            out.append(PolicySpec(SelectorSpec(peer.subnet, me.subnet), "fwd", templates=templates(peer, me, True)))
        return tuple(out)

    return AssociationPlan(spec, reqid, tuple(sas), policies(spec.a, spec.b), policies(spec.b, spec.a))


def apply_association(plan: AssociationPlan) -> None:
    """Install ``plan`` on both sides; on any failure nothing of it stays installed."""
    from ipsec.xfrm import XfrmSocket

    if not plan.sas:
        return
    done = []
    try:
        for which in ("a", "b"):
            ns, sas, policies = plan.side(which)
            with XfrmSocket(netns=ns) as xs:
                xs.install(sas, policies)
            done.append(which)
    except BaseException:
        for which in done:
            _remove_side(plan, which, missing_ok=True)
        raise


def remove_association(plan: AssociationPlan, missing_ok: bool = False) -> None:
    """Delete what :func:`apply_association` installed (policies first, then SAs)."""
    for which in ("a", "b"):
        _remove_side(plan, which, missing_ok)


def _remove_side(plan: AssociationPlan, which: str, missing_ok: bool) -> None:
    from ipsec.xfrm import XfrmSocket

    ns, sas, policies = plan.side(which)
    if not sas:
        return
    with XfrmSocket(netns=ns) as xs:
        xs.remove(sas, policies, missing_ok=missing_ok)

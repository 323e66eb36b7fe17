"""Security associations and policies as inert, validated data (standard library only).

A :class:`SASpec` is one kernel SA (one direction of traffic); a :class:`PolicySpec` is
one security policy with its templates.  Both are frozen and check themselves on
construction: wrong input fails here, with a ``ValueError`` naming the field and the
allowed values, long before anything talks to the kernel.  :mod:`ipsec.xfrm` turns them
into netlink messages.

Which algorithm fields an SA takes depends on its protocol::

    proto  required                     optional
    -----  --------                     --------
    esp    aead + aead_key              aead_icv_bits (default: the algorithm's)
       or  crypt + crypt_key            auth + auth_key (an encryption-only ESP SA is
                                        legal but unauthenticated; use null + auth for
                                        integrity-only ESP)
    ah     auth + auth_key
    comp   comp                         (spi is the 16-bit CPI)

Algorithms may be given as :class:`~ipsec.algorithms.Algorithm` objects or by their
catalog name; they are stored as objects.  Example::

    spec = SASpec(src="10.0.0.1", dst="10.0.0.2", proto="esp", spi=0x100,
                  mode="transport", reqid=1,
                  aead="aes-gcm-256", aead_key=random_key("aes-gcm-256"))
"""
from __future__ import annotations

import dataclasses
import ipaddress
import secrets
from collections.abc import Sequence

from ipsec.algorithms import KINDS, Algorithm, get_algorithm

PROTOS: tuple[str, ...] = ("esp", "ah", "comp")
MODES: tuple[str, ...] = ("transport", "tunnel")
DIRECTIONS: tuple[str, ...] = ("in", "out", "fwd")
ACTIONS: tuple[str, ...] = ("allow", "block")

#: Upper-layer protocol names a selector accepts (anything else: a number 0..255).
UPPER_PROTOS: dict[str, int] = {
    "any": 0, "icmp": 1, "tcp": 6, "udp": 17, "gre": 47, "esp": 50, "ah": 51,
    "ipv6-icmp": 58, "icmpv6": 58, "sctp": 132, "udplite": 136,
}
#: Upper-layer protocols whose selectors may carry ports.
PORT_PROTOS: frozenset[int] = frozenset({6, 17, 132, 136})

#: Largest replay window (bits) the kernel accepts (XFRMA_REPLAY_ESN_MAX bytes of bitmap).
MAX_REPLAY_WINDOW = 4096 * 8
#: Windows up to this size fit the legacy 32-bit replay bitmap in xfrm_usersa_info.
LEGACY_REPLAY_WINDOW = 32
#: ESP/AH SPI values 1..255 are reserved by IANA (RFC 4303 section 2.1); 0 is invalid.
MIN_SPI = 0x100

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
AlgorithmArg = Algorithm | str | None


def _address(field: str, value: object) -> Address:
    if not isinstance(value, str):
        raise ValueError(f"{field} must be an IP address string, not {value!r}")
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{field} must be an IPv4 or IPv6 address (no prefix length), "
                         f"not {value!r}") from None


def _network(field: str, value: object) -> Network:
    if not isinstance(value, str):
        raise ValueError(f"{field} must be an address or prefix string, not {value!r}")
    try:
        return ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"{field} must be an IPv4/IPv6 address or prefix such as "
                         f"'10.1.0.0/24' with no host bits set, not {value!r} ({exc})") from None


def _int_in(field: str, value: object, low: int, high: int, hint: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        extra = f" ({hint})" if hint else ""
        raise ValueError(f"{field} must be an integer in {low}..{high}{extra}, not {value!r}")
    return value


def _choice(field: str, value: object, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise ValueError(f"{field} must be one of {', '.join(allowed)}, not {value!r}")
    return value  # type: ignore[return-value]


def _set(obj: object, name: str, value: object) -> None:
    """Normalize a field of a frozen dataclass during ``__post_init__``."""
    object.__setattr__(obj, name, value)


def family_of(address: str) -> int:
    """4 or 6: the IP version of an address or prefix string."""
    return ipaddress.ip_network(address, strict=False).version


@dataclasses.dataclass(frozen=True)
class SelectorSpec:
    """Which packets an SA or policy applies to.

    Attributes:
        src, dst: address or prefix (``"10.1.0.0/24"``; a bare address means /32 or
            /128); both of the same IP version.
        proto: upper-layer protocol, a name from :data:`UPPER_PROTOS` or a number;
            stored as the number (0 = any).
        sport, dport: ports, only for TCP, UDP, SCTP and UDP-Lite; None = any.
    """

    src: str
    dst: str
    proto: int | str = 0
    sport: int | None = None
    dport: int | None = None

    def __post_init__(self) -> None:
        src = _network("selector.src", self.src)
        dst = _network("selector.dst", self.dst)
        if src.version != dst.version:
            raise ValueError(f"selector.src and selector.dst must both be IPv4 or both IPv6, "
                             f"not {self.src!r} and {self.dst!r}")
        _set(self, "src", str(src))
        _set(self, "dst", str(dst))
        proto = self.proto
        if isinstance(proto, str):
            if proto not in UPPER_PROTOS:
                raise ValueError(f"selector.proto must be a number 0..255 or one of "
                                 f"{', '.join(UPPER_PROTOS)}, not {proto!r}")
            proto = UPPER_PROTOS[proto]
        _set(self, "proto", _int_in("selector.proto", proto, 0, 255, "0 = any"))
        for name in ("sport", "dport"):
            port = getattr(self, name)
            if port is None:
                continue
            _int_in(f"selector.{name}", port, 0, 65535)
            if self.proto not in PORT_PROTOS:
                raise ValueError(f"selector.{name} needs selector.proto tcp, udp, sctp or "
                                 f"udplite, not {self.proto}")

    @property
    def family(self) -> int:
        """4 or 6."""
        return family_of(self.src)

    @property
    def src_network(self) -> Network:
        return ipaddress.ip_network(self.src)

    @property
    def dst_network(self) -> Network:
        return ipaddress.ip_network(self.dst)

    def describe(self) -> str:
        """Short human-readable form, e.g. ``10.1.0.0/24 -> 10.2.0.0/24 proto 6 dport 5201``."""
        text = f"{self.src} -> {self.dst}"
        if self.proto:
            text += f" proto {self.proto}"
        if self.sport is not None:
            text += f" sport {self.sport}"
        if self.dport is not None:
            text += f" dport {self.dport}"
        return text


def _algorithm(field: str, value: AlgorithmArg, kind: str) -> Algorithm | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return get_algorithm(value, kind)
        except ValueError as exc:
            raise ValueError(f"{field}: {exc}") from None
    if not isinstance(value, Algorithm):
        raise ValueError(f"{field} must be an Algorithm or an algorithm name, not {value!r}")
    if value.kind != kind:
        raise ValueError(f"{field} must be an algorithm of kind {kind}, not {value.name!r} "
                         f"({value.kind})")
    return value


def _key(field: str, key: object, alg: Algorithm) -> bytes:
    if not isinstance(key, (bytes, bytearray)):
        raise ValueError(f"{field} must be bytes, not {type(key).__name__}")
    allowed = ", ".join(str(bits // 8) for bits in alg.key_bits_allowed)
    if len(key) * 8 not in alg.key_bits_allowed:
        salt = f" (key plus {alg.salt_bits // 8}-byte salt)" if alg.salt_bits else ""
        raise ValueError(f"{field} for {alg.name} must be {allowed} bytes long{salt}, "
                         f"not {len(key)}")
    return bytes(key)


@dataclasses.dataclass(frozen=True)
class SASpec:
    """One IPsec security association, as the kernel's xfrm state holds it.

    Attributes:
        src, dst: outer addresses (tunnel endpoints, or the hosts in transport mode);
            both IPv4 or both IPv6.
        proto: ``"esp"``, ``"ah"`` or ``"comp"``.
        spi: Security Parameter Index, 256..2**32-1 for ESP/AH; the CPI 1..65535 for comp.
        mode: ``"transport"`` or ``"tunnel"``.
        reqid: ties the SA to policy templates with the same reqid; 0 = none.
        aead, crypt, auth, comp: algorithms (objects or catalog names), see module doc.
        aead_key, crypt_key, auth_key: key bytes of the algorithm's length.
        aead_icv_bits: AEAD tag length, default the algorithm's (128 for AES-GCM).
        replay_window: anti-replay window in packets; None = 32 for ESP/AH, 0 for comp.
            Windows above 32 are sent as an XFRMA_REPLAY_ESN_VAL bitmap, as iproute2 does.
        selector: traffic the SA accepts; None lets the kernel derive it.
    """

    src: str
    dst: str
    proto: str
    spi: int
    mode: str = "transport"
    reqid: int = 0
    aead: AlgorithmArg = None
    aead_key: bytes = b""
    aead_icv_bits: int | None = None
    crypt: AlgorithmArg = None
    crypt_key: bytes = b""
    auth: AlgorithmArg = None
    auth_key: bytes = b""
    comp: AlgorithmArg = None
    replay_window: int | None = None
    selector: SelectorSpec | None = None

    def __post_init__(self) -> None:
        src = _address("src", self.src)
        dst = _address("dst", self.dst)
        if src.version != dst.version:
            raise ValueError(f"src and dst must both be IPv4 or both IPv6, "
                             f"not {self.src!r} and {self.dst!r}")
        _set(self, "src", str(src))
        _set(self, "dst", str(dst))
        proto = _choice("proto", self.proto, PROTOS)
        if proto == "comp":
            _int_in("spi", self.spi, 1, 0xFFFF, "the IPComp CPI is 16 bits")
        else:
            _int_in("spi", self.spi, MIN_SPI, 0xFFFFFFFF, "SPIs 1..255 are reserved, RFC 4303")
        _choice("mode", self.mode, MODES)
        _int_in("reqid", self.reqid, 0, 0xFFFFFFFF)
        for kind in KINDS:
            _set(self, kind, _algorithm(kind, getattr(self, kind), kind))
        self._check_algorithms(proto)
        if self.replay_window is None:
            _set(self, "replay_window", 0 if proto == "comp" else LEGACY_REPLAY_WINDOW)
        _int_in("replay_window", self.replay_window, 0, MAX_REPLAY_WINDOW)
        if self.selector is not None:
            if not isinstance(self.selector, SelectorSpec):
                raise ValueError(f"selector must be a SelectorSpec or None, not {self.selector!r}")
            if self.mode == "transport" and self.selector.family != self.family:
                raise ValueError(f"selector of a transport-mode SA must be IPv{self.family} "
                                 f"like src/dst, not IPv{self.selector.family}")

    def _check_algorithms(self, proto: str) -> None:
        given = [kind for kind in KINDS if getattr(self, kind) is not None]
        allowed = {"esp": ({"aead"}, {"crypt"}, {"crypt", "auth"}),
                   "ah": ({"auth"},), "comp": ({"comp"},)}[proto]
        if set(given) not in allowed:
            combos = " or ".join("+".join(sorted(c, key=KINDS.index)) for c in allowed)
            raise ValueError(f"an SA with proto {proto} takes algorithms {combos}, "
                             f"not {'+'.join(given) or 'none'}")
        for kind in ("aead", "crypt", "auth"):
            alg = getattr(self, kind)
            field = f"{kind}_key"
            if alg is None:
                if getattr(self, field):
                    raise ValueError(f"{field} given without {kind}")
                continue
            _set(self, field, _key(field, getattr(self, field), alg))
        if self.aead is not None:
            icv = self.aead.icv_bits if self.aead_icv_bits is None else self.aead_icv_bits
            if icv not in self.aead.icv_bits_allowed:
                allowed_icv = ", ".join(map(str, self.aead.icv_bits_allowed))
                raise ValueError(f"aead_icv_bits for {self.aead.name} must be one of "
                                 f"{allowed_icv}, not {icv!r}")
            _set(self, "aead_icv_bits", icv)
        elif self.aead_icv_bits is not None:
            raise ValueError("aead_icv_bits given without aead")

    @property
    def family(self) -> int:
        """4 or 6, the IP version of src/dst."""
        return family_of(self.src)

    @property
    def algorithms(self) -> tuple[Algorithm, ...]:
        """The algorithms this SA uses, in the order aead, crypt, auth, comp."""
        return tuple(alg for alg in (self.aead, self.crypt, self.auth, self.comp)
                     if alg is not None)  # type: ignore[misc]

    def describe(self) -> str:
        """Short human-readable form used in logs and errors."""
        algs = "+".join(alg.name for alg in self.algorithms)  # type: ignore[union-attr]
        return (f"{self.proto} spi 0x{self.spi:08x} {self.src} -> {self.dst} "
                f"{self.mode} reqid {self.reqid} ({algs})")

    def __repr__(self) -> str:
        # Keep keys out of logs and tracebacks.
        return f"SASpec({self.describe()})"


@dataclasses.dataclass(frozen=True)
class TemplateSpec:
    """One transform a policy requires (an ``ip xfrm policy ... tmpl``).

    Attributes:
        proto: ``"esp"``, ``"ah"`` or ``"comp"``.
        mode: ``"transport"`` or ``"tunnel"``.
        reqid: picks SAs with the same reqid; 0 = any SA that matches.
        src, dst: tunnel endpoints, required in tunnel mode and not allowed in transport
            mode (the kernel takes transport addresses from the packet).
        optional: True is iproute2's ``level use``: the packet passes without this
            transform too.
    """

    proto: str = "esp"
    mode: str = "transport"
    reqid: int = 0
    src: str | None = None
    dst: str | None = None
    optional: bool = False

    def __post_init__(self) -> None:
        _choice("template.proto", self.proto, PROTOS)
        _choice("template.mode", self.mode, MODES)
        _int_in("template.reqid", self.reqid, 0, 0xFFFFFFFF)
        if not isinstance(self.optional, bool):
            raise ValueError(f"template.optional must be True or False, not {self.optional!r}")
        if self.mode == "tunnel":
            if self.src is None or self.dst is None:
                raise ValueError("template.src and template.dst (the tunnel endpoints) "
                                 "are required in tunnel mode")
            src = _address("template.src", self.src)
            dst = _address("template.dst", self.dst)
            if src.version != dst.version:
                raise ValueError(f"template.src and template.dst must both be IPv4 or both "
                                 f"IPv6, not {self.src!r} and {self.dst!r}")
            _set(self, "src", str(src))
            _set(self, "dst", str(dst))
        elif self.src is not None or self.dst is not None:
            raise ValueError("template.src/template.dst are tunnel endpoints: give them only "
                             "with template.mode 'tunnel'")

    @property
    def family(self) -> int | None:
        """4 or 6 for a tunnel template; None when it takes the policy's family."""
        return family_of(self.src) if self.src is not None else None


@dataclasses.dataclass(frozen=True)
class PolicySpec:
    """One IPsec security policy.

    Attributes:
        selector: the traffic the policy matches.
        direction: ``"in"``, ``"out"`` or ``"fwd"``.
        action: ``"allow"`` (with templates: protect; without: bypass) or ``"block"``.
        priority: lower values win (the kernel's rule); 0 as iproute2's default.
        templates: transforms to apply, outermost last as in iproute2; a list is
            accepted and stored as a tuple.
    """

    selector: SelectorSpec
    direction: str
    action: str = "allow"
    priority: int = 0
    templates: Sequence[TemplateSpec] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.selector, SelectorSpec):
            raise ValueError(f"selector must be a SelectorSpec, not {self.selector!r}")
        _choice("direction", self.direction, DIRECTIONS)
        _choice("action", self.action, ACTIONS)
        _int_in("priority", self.priority, 0, 0xFFFFFFFF, "lower wins")
        templates = tuple(self.templates)
        for template in templates:
            if not isinstance(template, TemplateSpec):
                raise ValueError(f"templates must hold TemplateSpec objects, not {template!r}")
        if self.action == "block" and templates:
            raise ValueError("a policy with action 'block' takes no templates")
        _set(self, "templates", templates)

    @property
    def family(self) -> int:
        """4 or 6, the IP version of the selector."""
        return self.selector.family

    def describe(self) -> str:
        """Short human-readable form used in logs and errors."""
        text = f"policy {self.direction} {self.selector.describe()} {self.action}"
        for tmpl in self.templates:
            ends = f" {tmpl.src} -> {tmpl.dst}" if tmpl.src else ""
            text += f" [{tmpl.proto} {tmpl.mode}{ends} reqid {tmpl.reqid}]"
        return text


def random_key(algorithm: Algorithm | str, key_bits: int | None = None) -> bytes:
    """A fresh random key for ``algorithm`` from :mod:`secrets`.

    ``key_bits`` defaults to the algorithm's default (for AES-GCM: AES key plus the
    32-bit salt); it must be one of ``algorithm.key_bits_allowed``.  Null cipher and
    compression get ``b""``.
    """
    alg = algorithm if isinstance(algorithm, Algorithm) else get_algorithm(algorithm)
    bits = alg.key_bits if key_bits is None else key_bits
    if bits not in alg.key_bits_allowed:
        allowed = ", ".join(map(str, alg.key_bits_allowed))
        raise ValueError(f"key_bits for {alg.name} must be one of {allowed}, not {bits!r}")
    return secrets.token_bytes(bits // 8)


#: Addresses of throw-away probe SAs: documentation ranges (RFC 5737, RFC 3849).
PROBE_ADDRESSES: dict[int, tuple[str, str]] = {4: ("192.0.2.1", "192.0.2.2"),
                                               6: ("2001:db8::1", "2001:db8::2")}
PROBE_SPI = 0x0000BEEF


def probe_spec(algorithm_name: str, family: int = 4, proto: str | None = None,
               spi: int = PROBE_SPI) -> SASpec:
    """A throw-away SA that exercises exactly ``algorithm_name`` and nothing optional.

    AEAD and crypt algorithms get an ESP SA of their own (no auth partner); an auth
    algorithm gets ESP with the null cipher, or AH with ``proto="ah"``; a comp algorithm
    gets IPComp.  Transport mode, random keys, documentation addresses.  Adding and
    deleting it tells whether the kernel has the algorithm *and* the protocol.
    """
    alg = get_algorithm(algorithm_name)
    if family not in PROBE_ADDRESSES:
        raise ValueError(f"family must be 4 or 6, not {family!r}")
    default_proto = {"aead": "esp", "crypt": "esp", "auth": "esp", "comp": "comp"}[alg.kind]
    proto = default_proto if proto is None else proto
    valid = {"aead": ("esp",), "crypt": ("esp",), "auth": ("esp", "ah"), "comp": ("comp",)}
    _choice(f"proto for {alg.kind} algorithm {alg.name}", proto, valid[alg.kind])
    src, dst = PROBE_ADDRESSES[family]
    base = dict(src=src, dst=dst, proto=proto, spi=spi & 0xFFFF if proto == "comp" else spi,
                mode="transport")
    if alg.kind == "aead":
        return SASpec(**base, aead=alg, aead_key=random_key(alg))
    if alg.kind == "crypt":
        return SASpec(**base, crypt=alg, crypt_key=random_key(alg))
    if alg.kind == "auth" and proto == "esp":
        return SASpec(**base, crypt=get_algorithm("null"), auth=alg, auth_key=random_key(alg))
    if alg.kind == "auth":
        return SASpec(**base, auth=alg, auth_key=random_key(alg))
    return SASpec(**base, comp=alg)

"""Wire verification: what a capture between two IPsec endpoints really carries.

Three questions about packets captured on a transit interface (a link or bridge port
between the endpoints, not an endpoint's own interface, see below)::

    endpoint a  ----[ transit: tcpdump -w capture.pcap ]----  endpoint b

    classify(packets, (a, b), {"esp"})  -> WireReport   is everything between a and b ESP?
    decrypt(packets, specs)             -> [DecryptedPacket]  what did the ESP/AH carry?
    write_wireshark(pcap, packets, specs, directory)    the capture plus an ESP SA table,
                                                        so Wireshark opens it decrypted

:func:`classify` needs no keys.  For every IP packet whose source and destination are the
two endpoints (either direction) it looks at the *outermost* protocol, after IPv6
extension headers, and counts it as ESP (50), AH (51), IPComp (108), neighbour discovery
or other.  A packet between the endpoints whose outermost protocol is not one of the
expected IPsec protocols is a *leak*: it crossed the wire without the protection the run
configured.  Excluded, and counted separately:

- frames that are not IP at all (ARP, LLDP, ...): link-layer traffic, not traffic between
  the endpoints' IP addresses, and carrying no user data;
- IP packets with any other source or destination (multicast such as MLD reports or
  neighbour solicitations to a solicited-node address, link-local addresses, other hosts);
- ICMPv6 neighbour discovery between the endpoints (RFC 4861 types 133-137: router
  solicitation/advertisement, neighbour solicitation/advertisement, redirect).  It carries
  no user data and has to work before any SA can be used, so IPsec setups commonly leave
  it unprotected (the Linux kernel protects unicast NA/NS only when a policy happens to
  cover them); it is counted under ``"nd"`` and never reported as a leak.

WireGuard's messages (UDP to or from ports 51820/51821, a known type, its length) count as
``"wireguard"``, their receiver indexes as its SPIs; :func:`wireguard_message` reads one.

Things classify does *not* understand: ESP in UDP (NAT-T, port 4500) counts as other;
IPComp-only SAs legitimately send small packets uncompressed (RFC 3173 section 2.2), and
classify rightly reports those as plaintext.  For tunnel mode between gateways, call it
twice: the gateways' outer addresses (expect ESP) and the protected subnets (expect
nothing: ``expected_protos=()``, so any packet between the subnets on the transit link is
a leak).

Why a transit interface: in tunnel mode the receiving kernel re-injects every
decapsulated packet through the interface the ESP packet arrived on, so tcpdump on the
receiving endpoint's own interface shows each inner packet in plaintext right after its
ESP packet (seen with Linux 6.1 in User-Mode Linux; fixture
``tests/unit/fixtures/wire/esp_3des_md5_tunnel_v4_at_endpoint.pcap``).  classify cannot
tell those copies from real leaks.

:func:`decrypt` and :func:`write_wireshark` use the run's keys (:class:`~ipsec.sa.SASpec`
objects, e.g. from :meth:`ipsec.xfrm.SAState.to_spec`); scapy's ``ipsec`` module does the
cryptography (it needs the ``cryptography`` package).  The Wireshark files are created
owner-only (0600) in a directory created 0700, since they hold the keys.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from scapy.layers import ipsec as scapy_ipsec
from scapy.layers.inet import ICMP, IP
from scapy.layers.inet6 import ICMPv6EchoReply, ICMPv6EchoRequest, IPv6
from scapy.packet import NoPayload, Packet
from scapy.utils import PcapWriter

from ipsec.algorithms import ALGORITHMS
from ipsec.overhead import WIREGUARD_HEADER_BYTES, WIREGUARD_TAG_BYTES
from ipsec.sa import SASpec
from ipsec.wireguard import LISTEN_PORTS

log = logging.getLogger(__name__)

#: IP protocol numbers of the IPsec protocols, by the names :class:`~ipsec.sa.SASpec` uses.
PROTO_NUMBERS: dict[str, int] = {"esp": 50, "ah": 51, "comp": 108}
_PROTO_NAMES: dict[int, str] = {number: name for name, number in PROTO_NUMBERS.items()}
#: What :func:`classify` can expect between two endpoints.
PROTECTIONS: tuple[str, ...] = (*PROTO_NUMBERS, "wireguard")
#: Keys of :attr:`WireReport.counts` (``wireguard``: WireGuard's messages, :func:`wireguard_message`).
CATEGORIES: tuple[str, ...] = ("esp", "ah", "comp", "wireguard", "nd", "other")
#: The UDP ports the testbed's WireGuard devices listen on.
WIREGUARD_PORTS: frozenset[int] = frozenset(LISTEN_PORTS.values())
#: WireGuard's messages (drivers/net/wireguard/messages.h): type -> name and the UDP payload's length
#: (None: a data message, 32 bytes and more).
WIREGUARD_MESSAGES: dict[int, tuple[str, int | None]] = {
    1: ("handshake initiation", 148), 2: ("handshake response", 92), 3: ("cookie reply", 64),
    4: ("transport data", None)}
_UDP = 17
#: ICMPv6 neighbour discovery types (RFC 4861): RS, RA, NS, NA, redirect.
ND_TYPES: frozenset[int] = frozenset({133, 134, 135, 136, 137})
_ICMPV6 = 58
#: IPv6 extension headers walked to find the upper-layer protocol: hop-by-hop options,
#: routing, fragment, destination options.  (AH, 51, is an extension header too, but it is
#: what classify looks for, so the walk stops there.)
_IPV6_EXTENSIONS: frozenset[int] = frozenset({0, 43, 44, 60})
_FRAGMENT = 44

# The names below are the algorithm table's (ipsec.algorithms: Algorithm.scapy_name and
# .wireshark_name); this says where they come from.
# --- scapy's names -----------------------------------------------------------------------
# scapy 2.8.0, scapy/layers/ipsec.py: CRYPT_ALGOS has 'NULL', 'AES-CBC', 'AES-CTR', 'AES-GCM',
# 'AES-NULL-GMAC', 'AES-CCM', 'CHACHA20-POLY1305', 'DES', '3DES', 'CAST', 'Blowfish' (all but
# 'NULL' only when the cryptography package is installed); AUTH_ALGOS has 'NULL',
# 'HMAC-SHA1-96', 'SHA2-256-128', 'SHA2-384-192', 'SHA2-512-256', 'HMAC-MD5-96',
# 'AES-CMAC-96'.  SecurityAssociation.__init__ splits a key of an algorithm with a salt
# (AES-GCM: salt_size=4) as key[:-4] + salt key[-4:], exactly the RFC 4106 layout the kernel
# and our specs use, so the whole aead_key is passed as crypt_key.

# --- Wireshark's names -------------------------------------------------------------------
# epan/dissectors/packet-ipsec.c (the ESP dissector): the UAT "ESP SAs" is stored in the
# profile file "esp_sa" (uat_new("ESP SAs", ..., "esp_sa", from_profile TRUE, ...)), one
# record per line, each field a quoted string, comma-separated (epan/uat_load.l), in the
# order of esp_uat_flds: Protocol (esp_proto_type_vals: "IPv4", "IPv6"), Src IP, Dest IP,
# SPI, Encryption (esp_encryption_type_vals), Encryption Key, Authentication
# (esp_authentication_type_vals), Authentication Key.  Keys starting "0x" are hex
# (compute_ascii_key).  The AES-GCM key is the RFC 4106 key including the 4-byte salt.
# uat_load.l rejects a record with fewer or more fields than the table has ("expecting
# field ..."/"more fields than required"): these 8 fields are Wireshark up to 4.4 (checked
# with tshark 4.0.17, Debian 12); the 4.5 development API docs show two more record members
# (sn_length, sn_upper, for extended sequence numbers), not written here.
WIRESHARK_IPV: dict[int, str] = {4: "IPv4", 6: "IPv6"}
WIRESHARK_NO_AUTHENTICATION = "NULL"
#: The ESP SA table alone is not used until decryption is switched on (packet-ipsec.c:
#: prefs "enable_encryption_decode" and "enable_authentication_check" of module "esp").
WIRESHARK_PREFERENCES = ("# Written by ipsec.wire: decrypt ESP with the SAs in esp_sa.\n"
                         "esp.enable_encryption_decode: TRUE\n"
                         "esp.enable_authentication_check: TRUE\n")

Endpoint = ipaddress.IPv4Network | ipaddress.IPv6Network


# --- classify ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Leak:
    """A packet between the endpoints that was not protected as configured.

    Attributes:
        index: position of the packet in the capture (0-based; Wireshark's frame number
            is ``index + 1``).
        src, dst: its IP addresses.
        protocol: its outermost IP protocol number (after IPv6 extension headers).
        summary: scapy's one-line summary.
    """

    index: int
    src: str
    dst: str
    protocol: int
    summary: str


@dataclasses.dataclass(frozen=True)
class WireReport:
    """What :func:`classify` saw between the two endpoints.

    Attributes:
        endpoints: the two endpoints as given (addresses or prefixes).
        expected: the IPsec protocols allowed as outermost protocol.
        counts: packets between the endpoints by outermost protocol, keys
            :data:`CATEGORIES` (``"nd"``: ICMPv6 neighbour discovery, never a leak).
        spis: SPIs seen per protocol, sorted (``"comp"``: the 16-bit CPIs); only
            protocols that were seen.
        leaks: packets between the endpoints whose outermost protocol is not expected.
        non_ip: frames that are not IP (ARP and other link-layer traffic).
        unrelated: IP packets not between the endpoints (multicast, link-local, others).
    """

    endpoints: tuple[str, str]
    expected: frozenset[str]
    counts: Mapping[str, int]
    spis: Mapping[str, tuple[int, ...]]
    leaks: tuple[Leak, ...]
    non_ip: int
    unrelated: int

    @property
    def ok(self) -> bool:
        """True when nothing between the endpoints leaked (check :attr:`total` too: an
        empty capture has no leaks either)."""
        return not self.leaks

    @property
    def total(self) -> int:
        """Packets between the endpoints."""
        return sum(self.counts.values())

    def describe(self) -> str:
        """One line for logs and assertion messages."""
        counts = ", ".join(f"{name} {self.counts[name]}" for name in CATEGORIES)
        spis = "; ".join(f"{name} " + ",".join(f"0x{spi:x}" for spi in values)
                         for name, values in self.spis.items())
        text = (f"{self.endpoints[0]} <-> {self.endpoints[1]}: {counts} "
                f"(SPIs: {spis or 'none'}; not between them: {self.non_ip} non-IP, "
                f"{self.unrelated} other IP)")
        if self.leaks:
            first = self.leaks[0]
            text += (f"; {len(self.leaks)} LEAKED, first #{first.index}: {first.summary}")
        return text


@dataclasses.dataclass(frozen=True)
class _L3:
    """The outermost IP header of a frame, read from its bytes."""

    layer: Packet          # the scapy IP or IPv6 layer (with its payload)
    raw: bytes             # bytes(layer)
    version: int
    src: str
    dst: str
    protocol: int          # upper-layer protocol after IPv6 extension headers
    offset: int            # where that protocol's header starts in bytes(layer)
    first_fragment: bool   # False for a non-first fragment (no upper-layer header)


def _outer_ip(packet: Packet) -> Packet | None:
    layer = packet
    while not isinstance(layer, NoPayload):
        if isinstance(layer, (IP, IPv6)):
            return layer
        layer = layer.payload
    return None


def _l3(packet: Packet) -> _L3 | None:
    layer = _outer_ip(packet)
    if layer is None:
        return None
    raw = bytes(layer)
    if isinstance(layer, IP):
        if len(raw) < 20:
            return None
        frag_offset = int.from_bytes(raw[6:8], "big") & 0x1FFF
        return _L3(layer, raw, 4, layer.src, layer.dst, raw[9], (raw[0] & 0x0F) * 4, frag_offset == 0)
    if len(raw) < 40:
        return None
    nh, offset, first = raw[6], 40, True
    while nh in _IPV6_EXTENSIONS and offset + 8 <= len(raw):
        if nh == _FRAGMENT:
            first = first and (int.from_bytes(raw[offset + 2:offset + 4], "big") >> 3) == 0
            nh, offset = raw[offset], offset + 8
        else:
            nh, offset = raw[offset], offset + (raw[offset + 1] + 1) * 8
    return _L3(layer, raw, 6, layer.src, layer.dst, nh, offset, first)


def _network(value: str) -> Endpoint:
    try:
        return ipaddress.ip_network(value, strict=False)
    except (TypeError, ValueError):
        raise ValueError(f"endpoints must be IPv4/IPv6 addresses or prefixes, not {value!r}") from None


def _protos(expected: str | Iterable[str]) -> frozenset[str]:
    names = (expected,) if isinstance(expected, str) else tuple(expected)
    for name in names:
        if name not in PROTECTIONS:
            raise ValueError(f"expected_protos must name protocols among "
                             f"{', '.join(PROTECTIONS)}, not {name!r}")
    return frozenset(names)


def classify(packets: Iterable[Packet], endpoints: Sequence[str],
             expected_protos: str | Iterable[str]) -> WireReport:
    """Count what crossed the wire between two endpoints and find plaintext leaks.

    Args:
        packets: captured frames (any link type scapy reads, e.g. ``rdpcap(path)``).
        endpoints: two IPv4 or two IPv6 addresses (or prefixes, matching any address
            in them); a packet is *between* them when one is its source and the other its
            destination.
        expected_protos: the protocols allowed as outermost protocol between them, from
            ``"esp"``, ``"ah"``, ``"comp"``, ``"wireguard"`` (WireGuard's messages in UDP)
            (one name or several); empty: nothing may cross between them.

    See the module docstring for what is excluded and why.

    Raises:
        ValueError: endpoints or protocol names invalid.
    """
    if isinstance(endpoints, str) or len(endpoints) != 2:
        raise ValueError(f"endpoints must be two addresses, not {endpoints!r}")
    a, b = (_network(e) for e in endpoints)
    if a.version != b.version:
        raise ValueError(f"endpoints must both be IPv4 or both IPv6, not {endpoints[0]!r} "
                         f"and {endpoints[1]!r}")
    expected = _protos(expected_protos)
    counts = {name: 0 for name in CATEGORIES}
    spis: dict[str, set[int]] = {}
    leaks: list[Leak] = []
    non_ip = unrelated = 0
    for index, packet in enumerate(packets):
        l3 = _l3(packet)
        if l3 is None:
            non_ip += 1
            continue
        src, dst = ipaddress.ip_address(l3.src), ipaddress.ip_address(l3.dst)
        if l3.version != a.version or not ((src in a and dst in b) or (src in b and dst in a)):
            unrelated += 1
            continue
        raw = l3.raw
        name = _PROTO_NAMES.get(l3.protocol)
        if name is None and l3.protocol == _ICMPV6 and l3.first_fragment \
                and len(raw) > l3.offset and raw[l3.offset] in ND_TYPES:
            counts["nd"] += 1
            continue
        if name is None and l3.protocol == _UDP and l3.first_fragment and _wireguard(raw, l3.offset):
            name = "wireguard"
            counts[name] += 1
            receiver = wireguard_message(raw[l3.offset + 8:]).get("receiver")
            if receiver is not None:
                spis.setdefault(name, set()).add(receiver)
            if name not in expected:
                leaks.append(Leak(index, l3.src, l3.dst, l3.protocol, packet.summary()))
            continue
        counts[name or "other"] += 1
        if name is not None and l3.first_fragment:
            spi = _spi(name, raw, l3.offset)
            if spi is not None:
                spis.setdefault(name, set()).add(spi)
        if name not in expected:
            leaks.append(Leak(index, l3.src, l3.dst, l3.protocol, packet.summary()))
    report = WireReport((str(endpoints[0]), str(endpoints[1])), expected, counts,
                        {name: tuple(sorted(values)) for name, values in sorted(spis.items())},
                        tuple(leaks), non_ip, unrelated)
    log.debug("wire: %s", report.describe())
    return report


def _wireguard(raw: bytes, offset: int) -> bool:
    """Whether the UDP datagram at ``offset`` is a WireGuard message: to or from a WireGuard port, a known
    type with three zero bytes after it, of that type's length."""
    if len(raw) < offset + 8 + 4:
        return False
    ports = {int.from_bytes(raw[offset:offset + 2], "big"), int.from_bytes(raw[offset + 2:offset + 4], "big")}
    return bool(ports & WIREGUARD_PORTS) and bool(wireguard_message(raw[offset + 8:]))


def wireguard_message(payload: bytes) -> dict:
    """What a WireGuard message (a UDP payload) says without keys: its type, the indexes and, for data, the
    counter and the encrypted length; ``{}`` when it is not one.  Nothing in it can be decrypted from the
    capture: each direction's data key comes from a Noise handshake whose ephemeral keys never leave the
    kernel (the testbed exports none)."""
    if len(payload) < 4 or payload[1:4] != b"\0\0\0" or payload[0] not in WIREGUARD_MESSAGES:
        return {}
    kind = payload[0]
    name, length = WIREGUARD_MESSAGES[kind]
    framing = WIREGUARD_HEADER_BYTES + WIREGUARD_TAG_BYTES  # a data message: its header and tag at least
    if (length is not None and len(payload) != length) or (length is None and len(payload) < framing):
        return {}
    out: dict = {"type": kind, "name": name}
    if kind == 1:
        out["sender"] = int.from_bytes(payload[4:8], "little")
    elif kind == 2:
        out["sender"] = int.from_bytes(payload[4:8], "little")
        out["receiver"] = int.from_bytes(payload[8:12], "little")
    elif kind == 3:
        out["receiver"] = int.from_bytes(payload[4:8], "little")
    else:
        out["receiver"] = int.from_bytes(payload[4:8], "little")
        out["counter"] = int.from_bytes(payload[8:16], "little")
        out["encrypted_bytes"] = len(payload) - framing  # the padded packet, without the tag
    return out


def _spi(name: str, raw: bytes, offset: int) -> int | None:
    # ESP: SPI is the first word (RFC 4303); AH: the second (RFC 4302);
    # IPComp: next header, flags, then the 16-bit CPI (RFC 3173).
    start, size = {"esp": (0, 4), "ah": (4, 4), "comp": (2, 2)}[name]
    field = raw[offset + start:offset + start + size]
    return int.from_bytes(field, "big") if len(field) == size else None


# --- scapy SAs and decryption ------------------------------------------------------------

def scapy_sa(spec: SASpec) -> scapy_ipsec.SecurityAssociation:
    """The scapy ``SecurityAssociation`` that decrypts (or encrypts) like ``spec``.

    ESP and AH, transport and tunnel mode (tunnel mode gets an IP/IPv6 ``tunnel_header``
    with the SA's addresses).  The AES-GCM key is passed whole: scapy takes its last 4
    bytes as the RFC 4106 salt, as the kernel does.

    Raises:
        ValueError: IPComp (scapy has no IPComp SA), an algorithm scapy lacks, or AES-GCM
            with a 64/96-bit ICV (scapy's AES-GCM, cryptography's ``AESGCM``, always uses
            a 16-byte tag, so it would misread the kernel's shorter ICVs), or the
            ``cryptography`` package missing.
    """
    if spec.proto == "comp":
        raise ValueError(f"{spec.describe()}: IPComp has no scapy SecurityAssociation "
                         "(only esp and ah)")
    kwargs: dict = {"spi": spec.spi}
    if spec.proto == "esp":
        cipher = spec.aead or spec.crypt
        assert cipher is not None  # SASpec guarantees aead or crypt for esp
        name = cipher.scapy_name
        if not name:
            raise ValueError(f"{spec.describe()}: no scapy name for cipher {cipher.kernel_name!r}; "
                             f"supported: {', '.join(_named('scapy_name', 'aead', 'crypt'))}")
        if spec.aead is not None:
            if spec.aead_icv_bits != 128:
                raise ValueError(f"{spec.describe()}: {spec.aead.name} with a {spec.aead_icv_bits}-bit ICV "
                                 "cannot be decrypted with scapy, whose AEADs take a 128-bit tag here; "
                                 "only aead_icv_bits 128 is supported")
            kwargs.update(crypt_algo=name, crypt_key=spec.aead_key, crypt_icv_size=16)
        else:
            kwargs.update(crypt_algo=name, crypt_key=spec.crypt_key or None)
        _require(name, scapy_ipsec.CRYPT_ALGOS, spec)
    if spec.auth is not None:
        name = spec.auth.scapy_name
        if not name:
            raise ValueError(f"{spec.describe()}: no scapy name for {spec.auth.kernel_name} "
                             f"truncated to {spec.auth.icv_bits} bits; supported: "
                             + ", ".join(_named("scapy_name", "auth")))
        _require(name, scapy_ipsec.AUTH_ALGOS, spec)
        kwargs.update(auth_algo=name, auth_key=spec.auth_key)
    if spec.mode == "tunnel":
        outer = IP if spec.family == 4 else IPv6
        kwargs["tunnel_header"] = outer(src=spec.src, dst=spec.dst)
    proto = scapy_ipsec.ESP if spec.proto == "esp" else scapy_ipsec.AH
    return scapy_ipsec.SecurityAssociation(proto, **kwargs)


def _require(name: str, table: Mapping[str, object], spec: SASpec) -> None:
    if name not in table:
        # scapy registers every algorithm but NULL only when `cryptography` imports.
        raise ValueError(f"{spec.describe()}: scapy has no {name!r} (it has {', '.join(table)}); "
                         "scapy's IPsec algorithms need the 'cryptography' package")


class DecryptError(ValueError):
    """A captured ESP/AH packet could not be decrypted or verified.

    Attributes:
        index: the packet's position in the capture.
        proto: ``"esp"`` or ``"ah"``.
        spi: its SPI (-1 when the packet is too short or a later fragment).
    """

    def __init__(self, message: str, index: int, proto: str, spi: int) -> None:
        super().__init__(message)
        self.index = index
        self.proto = proto
        self.spi = spi


@dataclasses.dataclass(frozen=True, eq=False)
class DecryptedPacket:
    """One captured ESP/AH packet with its protection removed.

    Attributes:
        index: position of the packet in the capture.
        proto: outermost protocol, ``"esp"`` or ``"ah"``.
        spi, seq: of the outermost ESP/AH header.
        src, dst: outer addresses.
        mode: of the outermost SA, ``"transport"`` or ``"tunnel"``.
        inner: the IP/IPv6 packet inside (transport mode: the original header with the
            upper-layer payload; tunnel mode: the inner packet).
        layers: every (protocol, SPI) removed, outermost first (an AH+ESP bundle has two).
    """

    index: int
    proto: str
    spi: int
    seq: int
    src: str
    dst: str
    mode: str
    inner: Packet
    layers: tuple[tuple[str, int], ...]


_MAX_NESTING = 4


def decrypt(packets: Iterable[Packet], specs: Iterable[SASpec]) -> list[DecryptedPacket]:
    """Decrypt (ESP) or verify and strip (AH) every ESP/AH packet in ``packets``.

    Each packet is matched to the SA with its protocol, SPI and destination address;
    when the result is itself ESP/AH (a bundle), that layer is removed too.  Packets whose
    outermost protocol is not ESP/AH are skipped.

    Raises:
        DecryptError: a packet has no matching SA, fails its integrity check (wrong key,
            or altered on the way), or does not decrypt; the message names the packet's
            index, protocol, SPI and addresses.
        ValueError: an SA that scapy cannot handle (see :func:`scapy_sa`).
    """
    table: dict[tuple[str, int, object], SASpec] = {}
    for spec in specs:
        if spec.proto in ("esp", "ah"):
            table.setdefault((spec.proto, spec.spi, ipaddress.ip_address(spec.dst)), spec)
    scapy_sas: dict[int, scapy_ipsec.SecurityAssociation] = {}  # built when first needed
    out: list[DecryptedPacket] = []
    for index, packet in enumerate(packets):
        l3 = _l3(packet)
        if l3 is None or l3.protocol not in (50, 51):
            continue
        out.append(_decrypt_one(index, l3, table, scapy_sas))
    return out


def _decrypt_one(index: int, l3: _L3, table: Mapping[tuple[str, int, object], SASpec],
                 scapy_sas: dict[int, scapy_ipsec.SecurityAssociation]) -> DecryptedPacket:
    # scapy's decrypt changes the packet it is given: always hand it a fresh copy.
    current: Packet = type(l3.layer)(l3.raw)
    first: tuple[str, int, int, str] | None = None
    layers: list[tuple[str, int]] = []
    step: _L3 | None = l3
    while step is not None and step.protocol in (50, 51) and len(layers) < _MAX_NESTING:
        proto = _PROTO_NAMES[step.protocol]
        raw = step.raw
        if not step.first_fragment:
            raise DecryptError(f"packet {index}: {proto.upper()} {step.src} -> {step.dst} is a "
                               "non-first fragment; reassemble the capture first", index, proto, -1)
        spi = _spi(proto, raw, step.offset)
        seq_at = step.offset + (4 if proto == "esp" else 8)
        seq = int.from_bytes(raw[seq_at:seq_at + 4], "big")
        if spi is None:
            raise DecryptError(f"packet {index}: {proto.upper()} {step.src} -> {step.dst} is "
                               "truncated (no SPI)", index, proto, -1)
        what = f"packet {index}: {proto.upper()} SPI 0x{spi:08x} {step.src} -> {step.dst}"
        spec = table.get((proto, spi, ipaddress.ip_address(step.dst)))
        if spec is None:
            known = ", ".join(f"{p} 0x{s:08x} dst {d}" for p, s, d in table) or "none"
            raise DecryptError(f"{what}: no SA with this SPI and destination (SAs given: {known})",
                               index, proto, spi)
        if id(spec) not in scapy_sas:
            scapy_sas[id(spec)] = scapy_sa(spec)
        sa = scapy_sas[id(spec)]
        if first is None:
            first = (proto, spi, seq, spec.mode)
        try:
            current = sa.decrypt(current)
        except scapy_ipsec.IPSecIntegrityError as exc:
            raise DecryptError(f"{what}: integrity check failed (wrong key, or the packet was "
                               f"altered): {exc}", index, proto, spi) from None
        except (IndexError, TypeError, ValueError, AttributeError) as exc:
            raise DecryptError(f"{what}: could not decrypt ({type(exc).__name__}: {exc})",
                               index, proto, spi) from None
        # Re-dissect from bytes: scapy leaves an AH payload as Raw (in tunnel mode the
        # whole inner packet), and the header it rebuilt may carry stale lengths or
        # checksums until serialised.  The IP version is the first nibble.
        data = bytes(current)
        current = (IP if data[:1] and data[0] >> 4 == 4 else IPv6)(data)
        layers.append((proto, spi))
        step = _l3(current)
    assert first is not None
    return DecryptedPacket(index, first[0], first[1], first[2], l3.src, l3.dst, first[3],
                           current, tuple(layers))


def echo_data(packet: Packet) -> bytes | None:
    """The data of an ICMP/ICMPv6 echo request or reply in ``packet``, or None.

    What ``ping -p PATTERN`` fills: Linux ping puts a timestamp first, then repeats the
    pattern.
    """
    if ICMPv6EchoRequest in packet:
        return bytes(packet[ICMPv6EchoRequest].data)
    if ICMPv6EchoReply in packet:
        return bytes(packet[ICMPv6EchoReply].data)
    if ICMP in packet and packet[ICMP].type in (0, 8):
        return bytes(packet[ICMP].payload)
    return None


# --- Wireshark ---------------------------------------------------------------------------

def esp_sa_lines(specs: Iterable[SASpec]) -> list[str]:
    """Wireshark ``esp_sa`` records (without newlines) for the ESP SAs in ``specs``.

    AH and IPComp SAs are skipped: Wireshark's AH dissector needs no keys, and IPComp has
    none.  Algorithm names: :attr:`ipsec.algorithms.Algorithm.wireshark_name`; format: the comment above
    :data:`WIRESHARK_IPV`.

    Raises:
        ValueError: an ESP algorithm Wireshark's table does not offer.
    """
    lines = []
    for spec in specs:
        if spec.proto != "esp":
            continue
        if spec.aead is not None:
            assert spec.aead_icv_bits is not None
            encryption = spec.aead.wireshark_name.format(icv_bytes=spec.aead_icv_bits // 8)
            key = spec.aead_key
            cipher = spec.aead.kernel_name
        else:
            assert spec.crypt is not None
            encryption = spec.crypt.wireshark_name
            key = spec.crypt_key
            cipher = spec.crypt.kernel_name
        if not encryption:
            raise ValueError(f"{spec.describe()}: Wireshark's ESP table has no cipher for "
                             f"{cipher!r}; supported: {', '.join(_named('wireshark_name', 'aead', 'crypt'))}")
        if spec.auth is None:
            authentication, auth_key = WIRESHARK_NO_AUTHENTICATION, b""
        else:
            authentication = spec.auth.wireshark_name
            auth_key = spec.auth_key
            if not authentication:
                raise ValueError(f"{spec.describe()}: Wireshark's ESP table has no "
                                 f"{spec.auth.kernel_name} truncated to {spec.auth.icv_bits} bits")
        fields = (WIRESHARK_IPV[spec.family], spec.src, spec.dst, f"0x{spec.spi:08x}",
                  encryption, _hex(key), authentication, _hex(auth_key))
        for field in fields:  # uat_load.l's quoted strings cannot hold these unescaped
            if '"' in field or "\\" in field or "\n" in field:
                raise ValueError(f"unexpected character in esp_sa field {field!r}")
        lines.append(",".join(f'"{field}"' for field in fields))
    return lines


def _named(attribute: str, *kinds: str) -> list[str]:
    """Kernel names of the algorithms of ``kinds`` that have a name in ``attribute``."""
    return list(dict.fromkeys(a.kernel_name for a in ALGORITHMS if a.kind in kinds and getattr(a, attribute)))


def _hex(key: bytes) -> str:
    return "0x" + key.hex() if key else ""


def _open_private(path: Path, overwrite: bool):
    """``path`` opened for binary writing, created with mode 0600 from the start (O_EXCL:
    never an old file's mode)."""
    if overwrite:
        path.unlink(missing_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    except FileExistsError:
        raise FileExistsError(f"{path} exists; pass overwrite=True to replace it") from None
    return os.fdopen(fd, "wb")


def _write_private(path: Path, data: bytes, overwrite: bool) -> None:
    with _open_private(path, overwrite) as f:
        f.write(data)


def write_wireshark(pcap_path: str | os.PathLike, packets: Sequence[Packet],
                    specs: Iterable[SASpec], directory: str | os.PathLike, *,
                    overwrite: bool = False) -> tuple[Path, Path]:
    """Write the capture and a Wireshark configuration that opens it decrypted.

    ``directory`` (created with mode 0700 if missing) becomes a Wireshark configuration
    directory holding ``esp_sa``, the ESP SA table with the run's keys, and
    ``preferences``, which switches ESP decryption and ICV checking on.  Open the capture
    with::

        WIRESHARK_CONFIG_DIR=DIRECTORY wireshark PCAP        (or tshark -r PCAP)

    or copy ``esp_sa`` into a Wireshark profile directory.  The pcap goes to
    ``pcap_path``; a relative path is taken inside ``directory``.  Every file is created
    with mode 0600 (``os.open(..., 0o600)``, never widened by an old file's mode);
    existing files are an error unless ``overwrite``.

    Returns:
        (pcap file, esp_sa file).

    Raises:
        ValueError: no packets, or an ESP SA Wireshark cannot decrypt (nothing is written).
        FileExistsError: a file exists and ``overwrite`` is False.
    """
    if not packets:
        raise ValueError("write_wireshark needs at least one packet (the pcap link type "
                         "comes from the first)")
    lines = esp_sa_lines(specs)
    folder = Path(directory)
    if not folder.is_dir():
        folder.mkdir(mode=0o700, parents=True)
    elif stat.S_IMODE(folder.stat().st_mode) & 0o077:
        log.warning("%s is readable by others; the key files in it are still 0600", folder)
    pcap = Path(pcap_path)
    if not pcap.is_absolute():
        pcap = folder / pcap
    esp_sa = folder / "esp_sa"
    header = ("# Wireshark ESP SAs (protocol, src, dst, SPI, encryption, key, "
              "authentication, key), written by ipsec.wire\n")
    _write_private(esp_sa, (header + "".join(line + "\n" for line in lines)).encode(), overwrite)
    _write_private(folder / "preferences", WIRESHARK_PREFERENCES.encode(), overwrite)
    with _open_private(pcap, overwrite) as f:
        writer = PcapWriter(f, sync=True)
        for packet in packets:
            writer.write(packet)
        writer.flush()
    log.info("wrote %s (%d packets) and %s (%d ESP SAs)", pcap, len(packets), esp_sa, len(lines))
    return pcap, esp_sa

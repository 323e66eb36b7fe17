"""What IPsec costs per packet: bytes added, the inner MTU, the largest TCP MSS (pure, stdlib only).

For a profile (:mod:`ipsec.profiles`), a mode, an IP version and the MTU of the link the
protected packets cross, this module computes what Linux does, with Linux's rounding::

    inner packet (what the socket sends)                  link MTU
    |<--------------- inner_mtu --------------->|
    [IP][TCP][opts][payload ....................]
    [outer IP][ESP hdr][IV][IP][TCP][opts][payload .....][pad][2][ICV]   tunnel mode
              [ESP hdr][IV]                                               transport mode:
    [IP]               [TCP][opts][payload ............][pad][2][ICV]     the IP header stays
    |<-------------------------- at most link_mtu -------------------------->|

Functions (``profile`` is a :class:`~ipsec.profiles.Profile` or a profile name):

- :func:`packet_overhead` -- exact bytes the kernel adds to one inner IP packet of a size.
- :func:`inner_mtu` -- the MTU the kernel gives sockets whose traffic the policy protects,
  ``xfrm_state_mtu()`` applied per SA from the outermost in (what ``IP_MTU``/``IPV6_MTU`` on a
  connected socket reports).
- :func:`max_tcp_mss` -- ``inner_mtu`` minus the IP and 20-byte TCP headers: the MSS in
  the RFC 879/6691 sense, what ``getsockopt(TCP_MAXSEG)`` returns on a connected socket
  when TCP timestamps are off, and the value an ``iperf3 -M`` must not exceed.
- :func:`payload_per_segment` -- ``max_tcp_mss`` minus the 12-byte timestamps option that
  Linux negotiates by default: the payload of a full segment, and what
  ``getsockopt(TCP_MAXSEG)`` / ``ss -i mss:`` report with timestamps on.
- :func:`overhead_table` and :func:`render_rows` -- the rows ``ipsec-testbed overhead``
  prints (this module prints nothing).

Kernel code the model follows (Linux 6.1; checked against a running 6.1 UML kernel by
``tests/integration/test_overhead_mtu.py``)::

    net/xfrm/xfrm_state.c, xfrm_state_mtu():
        if (x->km.state != XFRM_STATE_VALID || !type || type->proto != IPPROTO_ESP)
            return mtu - x->props.header_len;
        blksize = ALIGN(crypto_aead_blocksize(aead), 4);
        ... net_adj = sizeof(struct iphdr) / sizeof(struct ipv6hdr) in transport mode, 0 in tunnel
        return ((mtu - x->props.header_len - crypto_aead_authsize(aead) -
                 net_adj) & ~(blksize - 1)) + net_adj - 2;

    net/ipv4/esp4.c (esp6.c alike), esp_init_state():
        x->props.header_len = sizeof(struct ip_esp_hdr) + crypto_aead_ivsize(aead);
        if (x->props.mode == XFRM_MODE_TUNNEL)
            x->props.header_len += sizeof(struct iphdr);      /* ipv6hdr in esp6.c */
    esp_output(): esp.clen = ALIGN(skb->len + 2 + esp.tfclen, blksize);   /* tfclen 0 */
        (skb->len is the inner packet in tunnel mode, the upper-layer payload in transport mode)

    net/ipv4/ah4.c, ah_init_state():
        if (x->props.flags & XFRM_STATE_ALIGN4)
            x->props.header_len = XFRM_ALIGN4(sizeof(struct ip_auth_hdr) + ahp->icv_trunc_len);
        else
            x->props.header_len = XFRM_ALIGN8(sizeof(struct ip_auth_hdr) + ahp->icv_trunc_len);
        if (x->props.mode == XFRM_MODE_TUNNEL)
            x->props.header_len += sizeof(struct iphdr);
    net/ipv6/ah6.c: always XFRM_ALIGN8, + sizeof(struct ipv6hdr) in tunnel mode.

    net/ipv4/ipcomp.c (ipcomp6.c alike), ipcomp4_init_state():
        x->props.header_len = 0;  ... XFRM_MODE_TUNNEL: x->props.header_len += sizeof(struct iphdr);
        (ipcomp_init_state() in net/xfrm/xfrm_ipcomp.c adds nothing)

    net/xfrm/xfrm_policy.c, xfrm_init_pmtu(): walks the bundle from the SA nearest the
        route outwards-in: pmtu = xfrm_state_mtu(x, mtu of the child), capped at the route MTU.

    net/ipv4/tcp_output.c: __tcp_mtu_to_mss() = pmtu - net_header_len - sizeof(struct tcphdr)
        (- IP options); tcp_mtu_to_mss() subtracts the TCP options (timestamps: 12).

WireGuard (profile ``wireguard``, Linux 6.1's drivers/net/wireguard)::

    [outer IP][UDP][type,reserved 4][receiver index 4][counter 8][IP][TCP][payload ....][pad][tag 16]
    send.c, calculate_skb_padding(): padded = min(mtu, ALIGN(len, 16)) (len modulo mtu when above it)
    wg-quick: the device's MTU is the link's minus 80 (IPv6 40 + UDP 8 + header 16 + tag 16), for
    either outer IP version; that device MTU is the inner MTU the senders see.

Deliberate choices and assumptions:

- **AH on IPv4 pads to 8 bytes**, as Linux does unless the SA carries
  ``XFRM_STATE_ALIGN4`` (iproute2 ``flag align4``), which the testbed never sets.
  RFC 4302 only requires 4 for IPv4, so HMAC-SHA256-128 AH is 32 bytes here, not 28.
- **IPComp adds nothing but its tunnel header**: the data is assumed incompressible
  (as iperf3's random payload is).  The kernel sends packets below the algorithm's
  threshold (90 bytes for deflate) or that do not shrink without an IPComp header, and a
  compressed packet is smaller than the original.  The kernel's MTU reserves no IPComp
  header either (``header_len`` is 0 in transport mode), so :func:`inner_mtu` is exact.
  With compressible packets :func:`packet_overhead` is an upper bound.  Mind that in
  tunnel mode IPComp compresses the inner headers too: a 100-byte IPv6 packet with a
  random 52-byte payload left a 6.1 kernel 12 bytes shorter than this model says.
- Inner and outer IP headers have no options or extension headers; the inner packet
  has the same IP version as the outer one (WireGuard too: the testbed gives each IP version
  its own WireGuard device, :mod:`ipsec.wireguard`).  No NAT-T (UDP encapsulation), no TFC padding.
- The AES-GCM key size does not matter; its ICV length (``-icv8``/``-icv12``) does.
- An IPv6 inner MTU below 1280 is returned as computed (the kernel does the same
  arithmetic); the link MTU itself must be at least 1280 for IPv6 and 68 for IPv4.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Any

from ipsec.algorithms import get_algorithm
from ipsec.profiles import Profile, parse_profile

#: How hosts treat a path whose MTU IPsec lowered: path MTU discovery (DF set, the sender's
#: MSS shrinks), or no DF and the gateway fragments (seed 003's 2005-era hosts; IPv4 only).
PMTU_MODES = ("discover", "fragment")

#: IP header bytes without options / extension headers: ``struct iphdr``, ``struct ipv6hdr``.
IP_HEADER_BYTES: dict[int, int] = {4: 20, 6: 40}
#: How a shaper counts a packet (topologies.shaping): "tc" = tc's default, the packet plus
#: the Ethernet header; "ethernet" = a physical wire's frame.
FRAMINGS: tuple[str, ...] = ("tc", "ethernet")
#: Bytes of the Ethernet header tc counts (skb->len includes it; veth too).
ETHERNET_HEADER_BYTES = 14
#: What a physical Ethernet also spends per frame: preamble + SFD 8, FCS 4, inter-frame gap 12.
ETHERNET_WIRE_OVERHEAD_BYTES = 24
#: Smallest Ethernet frame without FCS (64 with it): shorter ones are padded on the wire.
ETHERNET_MIN_FRAME_BYTES = 60
#: Smallest link MTU per IP version (RFC 791 section 3.2, RFC 8200 section 5).
MIN_LINK_MTU: dict[int, int] = {4: 68, 6: 1280}
MAX_LINK_MTU = 65535
TCP_HEADER_BYTES = 20
#: The timestamps option as Linux sends it on every segment (10 bytes + 2 NOPs).
TCP_TIMESTAMPS_BYTES = 12
#: ``struct ip_esp_hdr``: SPI and sequence number.
ESP_HEADER_BYTES = 8
#: ESP trailer: pad length and next header.
ESP_TRAILER_BYTES = 2
#: ``struct ip_auth_hdr`` without the ICV: next header, length, reserved, SPI, sequence.
AH_FIXED_BYTES = 12
UDP_HEADER_BYTES = 8
#: WireGuard's transport data header (``struct message_data``): type and 3 reserved bytes, the
#: receiver's index, the 8-byte counter.
WIREGUARD_HEADER_BYTES = 16
#: ... and its Poly1305 tag after the encrypted packet.
WIREGUARD_TAG_BYTES = 16
#: WireGuard pads the packet it encrypts to a multiple of this (``MESSAGE_PADDING_MULTIPLE``), up to the MTU.
WIREGUARD_PADDING = 16
#: What wg-quick takes off the link's MTU for the WireGuard device's: the largest outer headers.
WIREGUARD_MTU_RESERVE = 80
#: ESP pads to a multiple of the cipher block size rounded up to 4 (RFC 4303 section 2.4).
ESP_MIN_ALIGN = 4
#: AH header alignment in Linux: 8 bytes for both IP versions (see the module docstring).
AH_ALIGN = 8
MODES: tuple[str, ...] = ("transport", "tunnel")
IP_VERSIONS: tuple[int, ...] = (4, 6)

ProfileArg = Profile | str


def _align(value: int, to: int) -> int:
    """``value`` rounded up to a multiple of ``to`` (the kernel's ALIGN())."""
    return -(-value // to) * to


@dataclasses.dataclass(frozen=True)
class Transform:
    """One SA of a bundle as the overhead model sees it.

    Attributes:
        proto: ``"esp"``, ``"ah"``, ``"comp"``, or ``"wireguard"`` (a tunnel of its own).
        mode: ``"transport"`` or ``"tunnel"``.
        ip_version: 4 or 6, the SA's (outer) IP version.
        header_bytes: the kernel's ``x->props.header_len``: ESP header + IV, the AH header
            with its ICV and padding, nothing for IPComp; plus the outer IP header in
            tunnel mode; for WireGuard the outer IP and UDP headers and its own.
        icv_bytes: ESP's integrity check value (AH's is inside ``header_bytes``); WireGuard's tag.
        align_bytes: ESP padding boundary, ``ALIGN(cipher block size, 4)``; WireGuard's 16; 1 otherwise.
    """

    proto: str
    mode: str
    ip_version: int
    header_bytes: int
    icv_bytes: int = 0
    align_bytes: int = 1

    def state_mtu(self, mtu: int) -> int:
        """The kernel's ``xfrm_state_mtu(x, mtu)``: the largest packet this SA may be given
        when what it produces must fit in ``mtu``."""
        if self.proto == "wireguard":
            return mtu - WIREGUARD_MTU_RESERVE  # the device's MTU, as wg-quick sets it
        if self.proto != "esp":
            return mtu - self.header_bytes
        net_adj = IP_HEADER_BYTES[self.ip_version] if self.mode == "transport" else 0
        return ((mtu - self.header_bytes - self.icv_bytes - net_adj) & ~(self.align_bytes - 1)) + net_adj - 2

    def bytes_added(self, packet_bytes: int, link_mtu: int = 1500) -> int:
        """Bytes this SA adds to an IP packet of ``packet_bytes`` (incompressible for IPComp); WireGuard's
        padding stops at its device's MTU, which ``link_mtu`` sets."""
        if self.proto == "wireguard":
            mtu = self.state_mtu(link_mtu)
            unit = packet_bytes % mtu if packet_bytes > mtu else packet_bytes
            return self.header_bytes + min(mtu, _align(unit, self.align_bytes)) - unit + self.icv_bytes
        if self.proto != "esp":
            # AH: its header (+ outer IP in tunnel mode); IPComp: outer IP in tunnel mode, else 0
            return self.header_bytes
        # ESP encrypts the whole inner packet in tunnel mode, the upper layer in transport mode
        encrypted = packet_bytes if self.mode == "tunnel" else packet_bytes - IP_HEADER_BYTES[self.ip_version]
        padded = _align(encrypted + ESP_TRAILER_BYTES, self.align_bytes)
        return self.header_bytes + (padded - encrypted) + self.icv_bytes


def esp_overhead(encrypted_bytes: int, iv_bytes: int, icv_bytes: int, block_bytes: int) -> int:
    """Bytes ESP adds around ``encrypted_bytes`` of payload, outer IP header not included.

    ESP header (8) + IV + padding to ``max(block, 4)`` including the 2-byte trailer + ICV.
    ``encrypted_bytes`` is the inner packet in tunnel mode, the upper-layer payload
    (packet minus IP header) in transport mode.  ``block_bytes`` is the cipher's block
    size (1 for GCM and the null cipher) as in :mod:`ipsec.algorithms`.

    >>> esp_overhead(80, iv_bytes=16, icv_bytes=12, block_bytes=16)   # AES-CBC + SHA1-96
    52
    """
    for name, value in (("encrypted_bytes", encrypted_bytes), ("iv_bytes", iv_bytes),
                        ("icv_bytes", icv_bytes), ("block_bytes", block_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, not {value!r}")
    align = _align(max(block_bytes, 1), ESP_MIN_ALIGN)
    padded = _align(encrypted_bytes + ESP_TRAILER_BYTES, align)
    return ESP_HEADER_BYTES + iv_bytes + (padded - encrypted_bytes) + icv_bytes


def _profile(profile: ProfileArg) -> Profile:
    if isinstance(profile, Profile):
        return profile
    if isinstance(profile, str):
        return parse_profile(profile)
    raise ValueError(f"profile must be a Profile or a profile name such as 'aes-gcm-256', not {profile!r}")


def _check_mode_version(mode: str, ip_version: int) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if ip_version not in IP_VERSIONS:
        raise ValueError(f"ip_version must be 4 or 6, not {ip_version!r}")


def _check_link_mtu(link_mtu: int, ip_version: int) -> None:
    low = MIN_LINK_MTU[ip_version]
    if isinstance(link_mtu, bool) or not isinstance(link_mtu, int) or not low <= link_mtu <= MAX_LINK_MTU:
        raise ValueError(f"link_mtu must be an integer in {low}..{MAX_LINK_MTU} for IPv{ip_version}, "
                         f"not {link_mtu!r}")


def _esp_transform(profile: Profile, mode: str, ip_version: int) -> Transform:
    if profile.aead:
        cipher = get_algorithm(profile.aead, "aead")
        icv_bits = profile.aead_icv_bits or cipher.icv_bits
    else:
        cipher = get_algorithm(profile.crypt, "crypt")
        icv_bits = get_algorithm(profile.esp_auth, "auth").icv_bits if profile.esp_auth else 0
    header = ESP_HEADER_BYTES + cipher.iv_bytes
    if mode == "tunnel":
        header += IP_HEADER_BYTES[ip_version]
    return Transform("esp", mode, ip_version, header, icv_bits // 8,
                     _align(max(cipher.block_bytes, 1), ESP_MIN_ALIGN))


def _ah_transform(profile: Profile, mode: str, ip_version: int) -> Transform:
    icv = get_algorithm(profile.ah_auth, "auth").icv_bytes
    header = _align(AH_FIXED_BYTES + icv, AH_ALIGN)
    if mode == "tunnel":
        header += IP_HEADER_BYTES[ip_version]
    return Transform("ah", mode, ip_version, header)


def profile_transforms(profile: ProfileArg, mode: str, ip_version: int) -> tuple[Transform, ...]:
    """The SAs a packet passes through, innermost first (IPComp, ESP, AH).

    As in :mod:`ipsec.plan`, the innermost transform carries the tunnel and the others
    run in transport mode over its outer header.  ``none`` gives an empty tuple.
    """
    prof = _profile(profile)
    _check_mode_version(mode, ip_version)
    if prof.wireguard:
        if mode != "tunnel":
            raise ValueError("WireGuard is a tunnel: it has no transport mode")
        return (Transform("wireguard", mode, ip_version,
                          IP_HEADER_BYTES[ip_version] + UDP_HEADER_BYTES + WIREGUARD_HEADER_BYTES,
                          WIREGUARD_TAG_BYTES, WIREGUARD_PADDING),)
    out = []
    for i, proto in enumerate(prof.protocols):
        sa_mode = mode if i == 0 else "transport"
        if proto == "comp":
            header = IP_HEADER_BYTES[ip_version] if sa_mode == "tunnel" else 0
            out.append(Transform("comp", sa_mode, ip_version, header))
        elif proto == "esp":
            out.append(_esp_transform(prof, sa_mode, ip_version))
        else:
            out.append(_ah_transform(prof, sa_mode, ip_version))
    return tuple(out)


def packet_overhead(profile: ProfileArg, mode: str, ip_version: int, inner_bytes: int,
                    link_mtu: int = 1500) -> int:
    """Exact bytes the kernel adds to one inner IP packet of ``inner_bytes`` (header included).

    Counts ESP header, IV, padding, trailer and ICV, the AH header, and the outer IP
    header in tunnel mode; IPComp is assumed not to compress (module docstring); WireGuard's
    outer IP, UDP and data headers, padding and tag (its padding stops at the device's MTU,
    ``link_mtu`` - 80).  The packet on the link is ``inner_bytes + packet_overhead(...)``; the
    function does not check that it fits a link (see :func:`inner_mtu`).
    """
    transforms = profile_transforms(profile, mode, ip_version)
    low = IP_HEADER_BYTES[ip_version]
    if isinstance(inner_bytes, bool) or not isinstance(inner_bytes, int) or not low <= inner_bytes <= MAX_LINK_MTU:
        raise ValueError(f"inner_bytes must be an IPv{ip_version} packet size in {low}..{MAX_LINK_MTU} "
                         f"(IP header included), not {inner_bytes!r}")
    size = inner_bytes
    for t in transforms:
        size += t.bytes_added(size, link_mtu)
    return size - inner_bytes


def inner_mtu(profile: ProfileArg, mode: str, ip_version: int, link_mtu: int) -> int:
    """The largest inner IP packet that leaves as one packet of at most ``link_mtu``.

    This is the kernel's own figure (``xfrm_init_pmtu``: ``xfrm_state_mtu`` per SA, from
    the SA nearest the link inwards), the ``mtu`` TCP and UDP sockets see through the
    policy.  Raises ValueError when no TCP segment would fit.
    """
    transforms = profile_transforms(profile, mode, ip_version)
    _check_link_mtu(link_mtu, ip_version)
    mtu = link_mtu
    for t in reversed(transforms):
        mtu = min(t.state_mtu(mtu), link_mtu)
    if mtu <= IP_HEADER_BYTES[ip_version] + TCP_HEADER_BYTES:
        name = profile.name if isinstance(profile, Profile) else profile
        raise ValueError(f"link_mtu {link_mtu} leaves an inner MTU of {mtu} bytes for {name} {mode} "
                         f"IPv{ip_version}: no room for a TCP segment")
    return mtu


def max_tcp_mss(profile: ProfileArg, mode: str, ip_version: int, link_mtu: int) -> int:
    """The largest TCP MSS through the profile: inner MTU - IP header - 20-byte TCP header.

    What Linux computes from the path MTU before TCP options (``__tcp_mtu_to_mss``), and
    what ``getsockopt(TCP_MAXSEG)`` reports on a connected socket with timestamps off.
    Note that Linux does not lower the MSS it *advertises* in the SYN for IPsec
    (``xfrm_default_advmss`` uses the route's figure); each sender limits its own segments.
    """
    return inner_mtu(profile, mode, ip_version, link_mtu) - IP_HEADER_BYTES[ip_version] - TCP_HEADER_BYTES


def payload_per_segment(profile: ProfileArg, mode: str, ip_version: int, link_mtu: int,
                        timestamps: bool = True) -> int:
    """TCP payload bytes in a full-sized segment: :func:`max_tcp_mss` minus the 12-byte
    timestamps option when ``timestamps`` (Linux's default, ``net.ipv4.tcp_timestamps=1``).

    This is what ``getsockopt(TCP_MAXSEG)`` and ``ss -i`` (``mss:``) report on a connected
    socket.  SACK blocks, when present, shorten segments further; they are not counted.
    """
    mss = max_tcp_mss(profile, mode, ip_version, link_mtu)
    return mss - TCP_TIMESTAMPS_BYTES if timestamps else mss


@dataclasses.dataclass(frozen=True)
class OverheadRow:
    """One line of the overhead table.

    Attributes:
        profile, mode, ip_version, link_mtu: the case.
        inner_mtu: :func:`inner_mtu`.
        max_mss: :func:`max_tcp_mss`.
        payload_per_segment: :func:`payload_per_segment` with timestamps.
        added_min, added_max: least and most bytes added to any inner packet up to
            ``inner_mtu`` (they differ by the padding).
        added_at_mtu: bytes added to a packet of exactly ``inner_mtu``.
        wire_at_mtu: ``inner_mtu + added_at_mtu``, the largest packet on the link (<= link_mtu).
    """

    profile: str
    mode: str
    ip_version: int
    link_mtu: int
    inner_mtu: int
    max_mss: int
    payload_per_segment: int
    added_min: int
    added_max: int
    added_at_mtu: int

    @property
    def wire_at_mtu(self) -> int:
        return self.inner_mtu + self.added_at_mtu


#: The overhead repeats with the ESP padding boundary (at most 16 in the catalog); a window
#: this wide below the inner MTU sees every padding case.
_PADDING_WINDOW = 64


def overhead_row(profile: ProfileArg, mode: str, ip_version: int, link_mtu: int = 1500) -> OverheadRow:
    """The :class:`OverheadRow` of one case."""
    prof = _profile(profile)
    mtu = inner_mtu(prof, mode, ip_version, link_mtu)
    low = max(IP_HEADER_BYTES[ip_version], mtu - _PADDING_WINDOW + 1)
    added = [packet_overhead(prof, mode, ip_version, size, link_mtu) for size in range(low, mtu + 1)]
    mss = mtu - IP_HEADER_BYTES[ip_version] - TCP_HEADER_BYTES
    return OverheadRow(profile=prof.name, mode=mode, ip_version=ip_version, link_mtu=link_mtu,
                       inner_mtu=mtu, max_mss=mss, payload_per_segment=mss - TCP_TIMESTAMPS_BYTES,
                       added_min=min(added), added_max=max(added), added_at_mtu=added[-1])


def overhead_table(profiles: Iterable[ProfileArg], modes: Sequence[str] = MODES,
                   ip_versions: Sequence[int] = IP_VERSIONS, link_mtu: int = 1500) -> list[OverheadRow]:
    """Rows for every profile x IP version x mode, in that nesting order."""
    rows = []
    for profile in profiles:
        prof = _profile(profile)
        for ip_version in ip_versions:
            for mode in modes:
                if prof.wireguard and mode != "tunnel":
                    continue  # a tunnel of its own: no transport mode
                rows.append(overhead_row(prof, mode, ip_version, link_mtu))
    return rows


#: Column titles of :func:`render_rows`, in order.
COLUMNS: tuple[str, ...] = ("profile", "mode", "IP", "link MTU", "inner MTU", "max MSS",
                            "payload/segment", "bytes added", "at inner MTU")


def render_rows(rows: Iterable[OverheadRow],
                columns: Sequence[str] | None = None) -> tuple[list[str], list[list[str]]]:
    """Column titles and string cells for a table of ``rows`` (the caller prints them).

    ``bytes added`` is ``min-max`` over inner packet sizes (one number when constant);
    ``payload/segment`` assumes TCP timestamps (Linux's default).
    """
    cells = []
    for r in rows:
        added = str(r.added_min) if r.added_min == r.added_max else f"{r.added_min}-{r.added_max}"
        cells.append([r.profile, r.mode, f"IPv{r.ip_version}", str(r.link_mtu), str(r.inner_mtu),
                      str(r.max_mss), str(r.payload_per_segment), added, str(r.added_at_mtu)])
    names = list(COLUMNS)
    if columns is not None:
        unknown = [c for c in columns if c not in COLUMNS]
        if unknown:
            raise ValueError(f"unknown column(s) {', '.join(unknown)}; columns are {', '.join(COLUMNS)}")
        index = [COLUMNS.index(c) for c in columns]
        names = [COLUMNS[i] for i in index]
        cells = [[row[i] for i in index] for row in cells]
    return names, cells


def theoretical_goodput_mbps(rate_mbit: float, mss: int, ip_version: int = 4, framing: str = "tc",
                             timestamps: bool = True) -> float:
    """TCP goodput (Mbit/s) a perfect shaper of ``rate_mbit`` gives full segments of ``mss``.

    ``mss`` is the TCP MSS as iperf3 ``-M`` and the SYN carry it (options excluded, e.g.
    1460 over IPv4 at MTU 1500).  With timestamps every segment carries 12 option bytes
    inside the MSS, so the payload is ``mss - 12``.  The shaper counts the IP packet plus
    the 14-byte Ethernet header (``framing="tc"``), or the frame padded to 60 bytes plus
    24 more (``"ethernet"``: preamble, FCS, gap).  Goodput = rate * payload / counted.
    Acknowledgements travel the other direction and do not count.
    """
    if isinstance(rate_mbit, bool) or not isinstance(rate_mbit, (int, float)) or not 0 < rate_mbit < math.inf:
        raise ValueError(f"rate_mbit must be > 0 (Mbit/s), not {rate_mbit!r}")
    if ip_version not in IP_HEADER_BYTES:
        raise ValueError(f"ip_version must be 4 or 6, not {ip_version!r}")
    if framing not in FRAMINGS:
        raise ValueError(f"framing must be one of {', '.join(FRAMINGS)}, not {framing!r}")
    options = TCP_TIMESTAMPS_BYTES if timestamps else 0
    if isinstance(mss, bool) or not isinstance(mss, int) or not options < mss <= 65535:
        raise ValueError(f"mss must be an integer in {options + 1}..65535, not {mss!r}")
    payload = mss - options
    frame = mss + TCP_HEADER_BYTES + IP_HEADER_BYTES[ip_version] + ETHERNET_HEADER_BYTES
    if framing == "ethernet":
        frame = max(frame, ETHERNET_MIN_FRAME_BYTES) + ETHERNET_WIRE_OVERHEAD_BYTES
    return rate_mbit * payload / frame


def expected_goodput_mbps(rate_mbit: float, mss: int, profile: ProfileArg = "none", mode: str = "tunnel",
                          ip_version: int = 4, link_mtu: int = 1500, l2_bytes: int = 14,
                          timestamps: bool = True, pmtu: str = "discover") -> float:
    """TCP goodput a perfect shaper of ``rate_mbit`` gives through ``profile``.

    With path MTU discovery (``pmtu="discover"``) the sender's MSS is ``mss`` (iperf3 ``-M``)
    capped by the path MTU the profile leaves (:func:`max_tcp_mss`); each full segment carries
    ``MSS - 12`` payload bytes with timestamps, and costs its inner packet plus
    :func:`packet_overhead` plus ``l2_bytes`` of link framing (14: the Ethernet header tc
    counts) on the shaped link.  With ``pmtu="fragment"`` (IPv4 hosts sending without DF, seed
    003's era) the MSS is capped by the link MTU only, and a protected segment too big for the
    link is fragmented as a UDP datagram is (:func:`expected_udp_goodput_mbps`): at MSS 1460 in
    tunnel mode, a 1500-byte and a small packet.  With ``profile="none"`` this is the plain TCP
    curve.
    """
    if rate_mbit <= 0:
        raise ValueError(f"rate_mbit must be > 0, not {rate_mbit!r}")
    if pmtu not in PMTU_MODES:
        raise ValueError(f"pmtu must be one of {', '.join(PMTU_MODES)}, not {pmtu!r}")
    prof = _profile(profile)
    ip_hdr = IP_HEADER_BYTES[ip_version]
    fragments = pmtu == "fragment" and ip_version == 4 and bool(prof.protocols)
    cap = (max_tcp_mss(prof, mode, ip_version, link_mtu) if prof.protocols and not fragments
           else link_mtu - ip_hdr - TCP_HEADER_BYTES)
    seg_mss = min(mss, cap)
    payload = seg_mss - (TCP_TIMESTAMPS_BYTES if timestamps else 0)
    if fragments:
        packets = _protected_packets(seg_mss + TCP_HEADER_BYTES, prof, mode, ip_version, link_mtu)
        return rate_mbit * payload / sum(n + l2_bytes for n in packets)
    inner = seg_mss + TCP_HEADER_BYTES + ip_hdr
    wire = inner + (packet_overhead(prof, mode, ip_version, inner, link_mtu) if prof.protocols else 0) + l2_bytes
    return rate_mbit * payload / wire


def fragment_sizes(payload: int, ip_version: int, mtu: int) -> list[int]:
    """The IP packets carrying ``payload`` bytes after the IP header at ``mtu``: one packet when it
    fits, else fragments of multiples of 8 bytes, each with its IP header (and IPv6's 8-byte
    fragment header) (pure)."""
    ip_hdr = IP_HEADER_BYTES[ip_version]
    if payload + ip_hdr <= mtu:
        return [payload + ip_hdr]
    frag_hdr = 8 if ip_version == 6 else 0
    per = (mtu - ip_hdr - frag_hdr) // 8 * 8
    full, rest = divmod(payload, per)
    return [per + ip_hdr + frag_hdr] * full + ([rest + ip_hdr + frag_hdr] if rest else [])


def expected_udp_goodput_mbps(rate_mbit: float, datagram: int, profile: ProfileArg = "none", mode: str = "tunnel",
                              ip_version: int = 4, link_mtu: int = 1500, l2_bytes: int = 14) -> float:
    """UDP goodput a perfect shaper of ``rate_mbit`` gives for ``datagram``-byte payloads through ``profile``.

    Without IPsec a datagram larger than the link MTU is fragmented (:func:`fragment_sizes`),
    each fragment with ``l2_bytes`` of framing. With IPsec, where the fragmenting happens
    depends on the mode and the IP version, as Linux 6.1 does it (found with the shaper's own
    byte counter: 1400, 4000 and 16384-byte datagrams, AES-GCM-256 and 3DES+AH, both modes, both
    versions, each within 0.7 % of this model: docs/udp-fragments.md):

    - transport mode, either version: the whole datagram is protected once, then the protected
      packet is fragmented at the link MTU;
    - IPv4 tunnel mode: the datagram is fragmented at the link MTU first, each fragment is
      encapsulated, and an encapsulated fragment too big for the link is fragmented again (a
      1500-byte fragment becomes a 1500-byte and a small packet);
    - IPv6 tunnel mode: the datagram is fragmented to the MTU the tunnel leaves
      (:func:`inner_mtu`) and each fragment is encapsulated.
    """
    if rate_mbit <= 0:
        raise ValueError(f"rate_mbit must be > 0, not {rate_mbit!r}")
    if datagram < 1:
        raise ValueError(f"datagram must be >= 1 byte, not {datagram!r}")
    packets = _protected_packets(datagram + 8, _profile(profile), mode, ip_version, link_mtu)  # + the UDP header
    return rate_mbit * datagram / sum(n + l2_bytes for n in packets)


def _protected_packets(l4: int, prof: Profile, mode: str, ip_version: int, link_mtu: int) -> list[int]:
    """The IP packets on the link for an ``l4``-byte transport segment sent without DF through
    ``prof``, fragmented as :func:`expected_udp_goodput_mbps` describes (pure)."""
    ip_hdr = IP_HEADER_BYTES[ip_version]
    if not prof.protocols:
        return fragment_sizes(l4, ip_version, link_mtu)
    if mode == "transport":
        inner = l4 + ip_hdr
        return fragment_sizes(inner + packet_overhead(prof, mode, ip_version, inner, link_mtu) - ip_hdr, ip_version,
                              link_mtu)
    # WireGuard: the datagram meets the device's MTU first (a sender whose route goes through the device;
    # an IPv4 sender behind a gateway fragments at its own link's MTU and the gateway again, not modelled)
    first_mtu = link_mtu if ip_version == 4 and not prof.wireguard else inner_mtu(prof, mode, ip_version, link_mtu)
    return [outer for frag in fragment_sizes(l4, ip_version, first_mtu)
            for outer in fragment_sizes(frag + packet_overhead(prof, mode, ip_version, frag, link_mtu) - ip_hdr,
                                        ip_version, link_mtu)]


def expected_point_goodput_mbps(point: Any, link_mtu: int = 1500, pmtu: str = "discover") -> float | None:
    """The expected goodput of a point (its transport, size and size mode), or None.

    ``point`` is anything with a point's attributes (``rate_mbit``, ``profile``, ``mode``,
    ``ip_version``, ``transport``, ``size_mode``, ``size_bytes``): a result record, an
    aggregate's group, a planned measurement.  TCP with ``size_mode`` mss:
    :func:`expected_goodput_mbps` at that MSS; with ``write``: at the largest MSS the path
    allows (the sender's writes are cut into full segments); UDP (``datagram``):
    :func:`expected_udp_goodput_mbps`.  Points of other kinds (request and response
    transactions) have none.
    """
    kw = dict(profile=point.profile, mode=point.mode or "tunnel", ip_version=point.ip_version, link_mtu=link_mtu)
    if point.transport == "tcp" and point.size_mode == "mss":
        return expected_goodput_mbps(point.rate_mbit, point.size_bytes, **kw, pmtu=pmtu)
    if point.transport == "tcp" and point.size_mode == "write":
        return expected_goodput_mbps(point.rate_mbit, MAX_LINK_MTU, **kw, pmtu=pmtu)
    if point.transport == "udp":
        return expected_udp_goodput_mbps(point.rate_mbit, point.size_bytes, **kw)
    return None

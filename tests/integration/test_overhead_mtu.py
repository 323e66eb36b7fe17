"""The overhead model (ipsec/overhead.py) against the kernel's own view of the path MTU.

For each profile x IPv4/IPv6 x transport/tunnel, the SAs and policies of
:func:`ipsec.plan.plan_association` are installed between the two namespaces of a veth
pair with a 1500-byte MTU (a few profiles also at 1283 and 9000).  In tunnel mode the
hosts are their own tunnel endpoints, which is all the MTU arithmetic needs.  Then the
kernel is asked, four independent ways:

1. ``IP_MTU`` / ``IPV6_MTU`` on a connected UDP socket in ``a``: the MTU of the xfrm
   bundle (``xfrm_init_pmtu``), which must be :func:`inner_mtu`.
2. The don't-fragment edge: with ``IP_PMTUDISC_DO`` (IPv6: ``IPV6_DONTFRAG``) a datagram
   making an inner packet of exactly ``inner_mtu`` bytes is sent, one byte more is refused
   with EMSGSIZE.  The payload is random, so IPComp cannot shrink the packet below the edge.
3. The wire: tcpdump on b's end of the veth sees each datagram (inner sizes 100, 1000,
   1400 and ``inner_mtu``) as one ESP/AH packet of exactly ``inner + packet_overhead``
   bytes, never more than the link MTU.  (With IPComp a small packet may compress and
   come out shorter: see :func:`check`.)
4. TCP: after 64 KiB moved from a to b, ``getsockopt(TCP_MAXSEG)`` on both ends is
   :func:`payload_per_segment` (``max_tcp_mss - 12``, timestamps on, Linux's default) and,
   with ``net.ipv4.tcp_timestamps=0`` in ``a``, :func:`max_tcp_mss` itself.
   ``TCP_INFO`` shows ``tcpi_pmtu == inner_mtu`` and ``tcpi_advmss`` still derived from the
   *link* MTU: Linux does not lower the MSS it advertises for IPsec
   (``xfrm_default_advmss`` returns the route's figure); each end limits what it sends.

Sockets are created inside a namespace from a short-lived thread that calls setns(2),
as ipsec/xfrm.py does for its netlink socket, so no process is spawned per measurement.
"""
from __future__ import annotations

import dataclasses
import errno
import os
import socket
import struct
from collections.abc import Iterator

import pytest
from conftest import capture, ip

from ipsec.overhead import IP_HEADER_BYTES, inner_mtu, max_tcp_mss, packet_overhead, payload_per_segment
from ipsec.plan import AssociationSpec, Endpoint, SpiPlanner, apply_association, plan_association, remove_association
from testbed import netns, waiting
from topologies.veth_pair import VethPair, veth_pair

#: The acceptance profiles, plus AH, ESP+AH, IPComp and a short GCM ICV, and the modern ciphers: each
#: one's IV, padding block and ICV (ChaCha20-Poly1305, AES-CCM with a short ICV, AES-GMAC, AES-CTR with
#: its 4-byte padding, HMAC-SHA-384/512's 24- and 32-byte ICVs).
PROFILES = ["aes-gcm-128", "aes-cbc-128-sha1", "aes-cbc-128-sha256", "null-sha1",
            "ah-sha1", "ah-sha256", "3des-cbc-sha1+ah-md5", "null-sha1+ipcomp", "aes-cbc-128-sha1+ipcomp",
            "aes-gcm-256-icv8", "chacha20-poly1305", "aes-ccm-128-icv12", "aes-gmac-256", "aes-ctr-128-sha256",
            "aes-cbc-256-sha384", "aes-cbc-128-sha512", "ah-sha512"]

#: The largest MSS in a 1500-byte MTU for the acceptance profiles, worked out by hand in
#: tests/unit/test_ipsec_overhead.py; (IP version, mode) -> MSS.
HAND_MSS_1500: dict[str, dict[tuple[int, str], int]] = {
    "aes-gcm-128": {(4, "transport"): 1426, (4, "tunnel"): 1406, (6, "transport"): 1406, (6, "tunnel"): 1366},
    "aes-cbc-128-sha1": {(4, "transport"): 1418, (4, "tunnel"): 1398, (6, "transport"): 1402, (6, "tunnel"): 1362},
    "aes-cbc-128-sha256": {(4, "transport"): 1418, (4, "tunnel"): 1398, (6, "transport"): 1386,
                           (6, "tunnel"): 1346},
    "null-sha1": {(4, "transport"): 1438, (4, "tunnel"): 1418, (6, "transport"): 1418, (6, "tunnel"): 1378},
}

# linux/in.h, linux/in6.h (Python 3.11's socket module lacks them)
IP_MTU_DISCOVER, IP_PMTUDISC_DO, IP_MTU = 10, 2, 14
IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO, IPV6_MTU, IPV6_DONTFRAG = 23, 2, 24, 62
UDP_HEADER_BYTES = 8
TCP_BYTES = 64 * 1024
WIRE_SIZES = (100, 1000, 1400)  # plus inner_mtu itself


def socket_in(ns: str, family: int, kind: int) -> socket.socket:
    af = socket.AF_INET if family == 4 else socket.AF_INET6
    sock = netns.run_in(ns, lambda: socket.socket(af, kind))
    sock.settimeout(20)
    return sock


def set_tcp_timestamps(ns: str, on: bool) -> None:
    """``net.ipv4.tcp_timestamps`` (per namespace; it covers IPv6 too) in ``ns``."""
    def write() -> None:
        with open("/proc/sys/net/ipv4/tcp_timestamps", "w") as f:
            f.write("1" if on else "0")
    netns.run_in(ns, write)


def outer_packets(pcap: str, family: int, src: str) -> list[tuple[int, int]]:
    """(IP protocol, IP packet length) of every ESP/AH packet from ``src`` in a pcap file."""
    with open(pcap, "rb") as f:
        data = f.read()
    if len(data) < 24:
        return []  # tcpdump has not written the file header yet
    magic = struct.unpack_from("<I", data)[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    assert struct.unpack_from(endian + "I", data, 20)[0] == 1, "expected an Ethernet capture"
    want_src = socket.inet_pton(socket.AF_INET if family == 4 else socket.AF_INET6, src)
    out = []
    offset = 24
    while offset + 16 <= len(data):
        incl = struct.unpack_from(endian + "IIII", data, offset)[2]
        if offset + 16 + incl > len(data):
            break  # a record tcpdump is still writing
        frame = data[offset + 16: offset + 16 + incl]
        offset += 16 + incl
        ethertype, ip = struct.unpack_from("!H", frame, 12)[0], frame[14:]
        if family == 4 and ethertype == 0x0800 and ip[12:16] == want_src:
            proto, length = ip[9], struct.unpack_from("!H", ip, 2)[0]
        elif family == 6 and ethertype == 0x86DD and ip[8:24] == want_src:
            proto, length = ip[6], 40 + struct.unpack_from("!H", ip, 4)[0]
        else:
            continue
        if proto in (50, 51):  # ESP, AH (IPComp rides inside ESP or goes uncompressed)
            out.append((proto, length))
    return out


@dataclasses.dataclass
class Measured:
    ip_mtu: int
    df_sent: bool          # a datagram filling inner_mtu went out
    df_one_more: str       # errno name for one byte more ("sent" if it was not refused)
    wire: list[int]        # outer packet lengths seen on the veth, in order
    received: list[int]    # datagram sizes b received
    maxseg: dict[str, tuple[int, int]]  # "ts"/"nots": (client, server) TCP_MAXSEG
    tcpi_pmtu: int
    tcpi_advmss: dict[str, int]


def measure(p: VethPair, family: int, expected_mtu: int, pcap: str) -> Measured:
    """The kernel's figures for traffic from a to b (see the module docstring)."""
    dst = p.addr("b", family)
    hdr = IP_HEADER_BYTES[family] + UDP_HEADER_BYTES
    sizes = [s for s in WIRE_SIZES if s < expected_mtu] + [expected_mtu]

    rx = socket_in(p.b, family, socket.SOCK_DGRAM)
    tx = socket_in(p.a, family, socket.SOCK_DGRAM)
    with rx, tx:
        rx.bind((dst, 0))
        if family == 4:
            tx.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
        else:
            tx.setsockopt(socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO)
            tx.setsockopt(socket.IPPROTO_IPV6, IPV6_DONTFRAG, 1)
        tx.connect((dst, rx.getsockname()[1]))
        ip_mtu = (tx.getsockopt(socket.IPPROTO_IP, IP_MTU) if family == 4
                  else tx.getsockopt(socket.IPPROTO_IPV6, IPV6_MTU))
        received = []
        with capture(p.b, p.if_b, pcap):
            for size in sizes:
                tx.send(os.urandom(size - hdr))
                received.append(len(rx.recv(65535)) + hdr)
            # tcpdump (-U) writes each packet when it gets to it; stopping it earlier loses some
            captured = lambda: len(outer_packets(pcap, family, p.addr("a", family)))  # noqa: E731
            waiting.until(lambda: captured() >= len(sizes), 10, f"tcpdump to write the {len(sizes)} ESP packets",
                          state=lambda: f"{captured()} written")
        try:
            tx.send(os.urandom(expected_mtu + 1 - hdr))
            one_more = "sent"
        except OSError as exc:
            one_more = errno.errorcode.get(exc.errno, str(exc.errno))
    wire = [length for _, length in outer_packets(pcap, family, p.addr("a", family))]

    maxseg: dict[str, tuple[int, int]] = {}
    advmss: dict[str, int] = {}
    pmtu = 0
    try:
        for label, timestamps in (("ts", True), ("nots", False)):
            set_tcp_timestamps(p.a, timestamps)  # the client's SYN decides for both ends
            listener = socket_in(p.b, family, socket.SOCK_STREAM)
            client = socket_in(p.a, family, socket.SOCK_STREAM)
            with listener, client:
                listener.bind((dst, 0))
                listener.listen(1)
                client.connect((dst, listener.getsockname()[1]))
                server, _ = listener.accept()
                with server:
                    server.settimeout(20)
                    client.sendall(os.urandom(TCP_BYTES))
                    got = 0
                    while got < TCP_BYTES:
                        chunk = server.recv(65536)
                        assert chunk, "connection closed early"
                        got += len(chunk)
                    maxseg[label] = (client.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG),
                                     server.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG))
                    # struct tcp_info: 8 bytes of u8 fields, then u32 rto, ato, snd_mss, rcv_mss,
                    # unacked, sacked, lost, retrans, fackets, 4 timestamps, pmtu [13], ...,
                    # snd_cwnd [18], advmss [19]
                    info = struct.unpack_from("=20I", client.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104), 8)
                    pmtu, advmss[label] = info[13], info[19]
    finally:
        set_tcp_timestamps(p.a, True)
    return Measured(ip_mtu, received[-1:] == [expected_mtu], one_more, wire, received, maxseg, pmtu, advmss)


def check(p: VethPair, profile: str, mode: str, family: int, tmp_path) -> Measured:
    link = p.mtu
    want_mtu = inner_mtu(profile, mode, family, link)
    want_mss = max_tcp_mss(profile, mode, family, link)
    spec = AssociationSpec(profile, mode, Endpoint(p.a, p.addr("a", family)), Endpoint(p.b, p.addr("b", family)))
    plan = plan_association(spec, SpiPlanner())
    apply_association(plan)
    try:
        got = measure(p, family, want_mtu, str(tmp_path / "veth.pcap"))
    finally:
        remove_association(plan)
    for ns in (p.a, p.b):  # the next case starts from nothing
        leftover = ip("-n", ns, "xfrm", "state").strip() + ip("-n", ns, "xfrm", "policy").strip()
        assert leftover == "", leftover
    where = f"{profile} {mode} IPv{family} link {link}"
    assert got.ip_mtu == want_mtu, f"{where}: kernel path MTU {got.ip_mtu}, model {want_mtu}"
    assert got.tcpi_pmtu == want_mtu, f"{where}: TCP pmtu {got.tcpi_pmtu}, model {want_mtu}"
    assert got.df_sent and got.df_one_more == "EMSGSIZE", \
        f"{where}: {want_mtu} bytes sent={got.df_sent}, {want_mtu + 1} bytes: {got.df_one_more}"
    sizes = [s for s in WIRE_SIZES if s < want_mtu] + [want_mtu]
    assert got.received == sizes
    want_wire = [s + packet_overhead(profile, mode, family, s) for s in sizes]
    if "ipcomp" in profile:
        # IPComp compresses whatever shrinks, and in tunnel mode that includes the inner
        # headers: a 100-byte IPv6 packet (48 header bytes, mostly zeros, 52 random) went out
        # 12 bytes (null-sha1) / 16 bytes (aes-cbc) shorter than the model, which assumes
        # incompressible packets.  The model is an upper bound there, exact once the
        # random payload dominates.
        assert len(got.wire) == len(want_wire)
        assert all(w <= m for w, m in zip(got.wire, want_wire, strict=True)), f"{where}: {got.wire} > model {want_wire}"
        assert got.wire[1:] == want_wire[1:], f"{where}: on the wire {got.wire}, model {want_wire}"
    else:
        assert got.wire == want_wire, f"{where}: on the wire {got.wire}, model {want_wire}"
    assert max(got.wire) <= link
    assert got.maxseg["ts"] == (payload_per_segment(profile, mode, family, link),) * 2, where
    assert got.maxseg["nots"] == (want_mss, want_mss), where
    # the advertised MSS ignores IPsec: it comes from the link (route) MTU
    link_mss = link - IP_HEADER_BYTES[family] - 20
    assert got.tcpi_advmss == {"ts": link_mss - 12, "nots": link_mss}, where
    return got


@pytest.fixture(scope="module")
def shared_pair() -> Iterator[VethPair]:
    """One pair (what the ``pair`` fixture builds) for the whole matrix: building one takes
    about 1.7 s in UML, and each case installs and removes its own SAs."""
    with veth_pair() as p:
        yield p


@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("mode", ["transport", "tunnel"])
@pytest.mark.parametrize("profile", PROFILES)
def test_kernel_path_mtu_and_mss_match_the_model(shared_pair, profile, mode, family, tmp_path):
    got = check(shared_pair, profile, mode, family, tmp_path)
    if profile in HAND_MSS_1500:
        assert shared_pair.mtu == 1500
        assert got.maxseg["nots"][0] == HAND_MSS_1500[profile][(family, mode)]


@pytest.mark.parametrize("link_mtu", [1283, 9000])
@pytest.mark.parametrize("profile", ["aes-cbc-128-sha256", "aes-gcm-128", "3des-cbc-sha1+ah-md5"])
def test_other_link_mtus(profile, link_mtu, tmp_path):
    with veth_pair(mtu=link_mtu) as p:
        for family in (4, 6):
            for mode in ("transport", "tunnel"):
                check(p, profile, mode, family, tmp_path)

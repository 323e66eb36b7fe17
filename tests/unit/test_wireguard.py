"""WireGuard as a profile: its grammar, its byte model, its plan and its refusals (pure; the kernel's side is
tests/integration/test_wireguard.py)."""
from __future__ import annotations

import pytest

from ipsec import wireguard
from ipsec.overhead import (
    expected_goodput_mbps,
    expected_udp_goodput_mbps,
    inner_mtu,
    max_tcp_mss,
    overhead_table,
    packet_overhead,
)
from ipsec.plan import Endpoint
from ipsec.profiles import parse_profile
from testbed.record import Tunnel


def test_wireguard_is_a_profile_of_its_own_and_never_stacked():
    p = parse_profile("WireGuard")
    assert p.wireguard and p.name == "wireguard" and p.protocols == ("wireguard",)
    assert not p.ipsec and not p.esp and not p.is_none
    assert "WireGuard" in p.describe()
    assert parse_profile("aes-gcm-256").ipsec and not parse_profile("none").ipsec
    for stacked in ("wireguard+ipcomp", "aes-gcm-256+wireguard", "wireguard+ah-sha1"):
        with pytest.raises(ValueError, match="WireGuard is a tunnel of its own"):
            parse_profile(stacked)
    assert Tunnel.of("wireguard") is Tunnel.WIREGUARD
    assert Tunnel.of("aes-gcm-256") is Tunnel.IPSEC and Tunnel.of("none") is None


@pytest.mark.parametrize("ip_version,outer", [(4, 20), (6, 40)])
def test_the_byte_model_is_outer_ip_udp_header_padding_to_16_and_the_tag(ip_version, outer):
    """drivers/net/wireguard: outer IP + UDP 8 + data header 16 + the packet padded to 16 + tag 16; the padding
    stops at the device's MTU, the link's minus 80 (wg-quick)."""
    fixed = outer + 8 + 16 + 16
    assert packet_overhead("wireguard", "tunnel", ip_version, 112) == fixed  # already a multiple of 16
    assert packet_overhead("wireguard", "tunnel", ip_version, 100) == fixed + 12
    assert packet_overhead("wireguard", "tunnel", ip_version, 1393) == fixed + 15
    # 1409..1420 would pad to 1424, past the device's 1420: the padding stops at the MTU
    assert packet_overhead("wireguard", "tunnel", ip_version, 1412) == fixed + 8
    assert packet_overhead("wireguard", "tunnel", ip_version, 1420) == fixed
    assert packet_overhead("wireguard", "tunnel", ip_version, 1420, link_mtu=1600) == fixed + 4
    # the device's MTU is the inner MTU for both IP versions, 1420 on a 1500-byte link
    assert inner_mtu("wireguard", "tunnel", ip_version, 1500) == 1420
    assert inner_mtu("wireguard", "tunnel", ip_version, 9000) == 8920
    assert max_tcp_mss("wireguard", "tunnel", ip_version, 1500) == {4: 1380, 6: 1360}[ip_version]
    # the largest packet on the link is within it: 80 bytes spare on IPv6, 20 more on IPv4
    assert 1420 + packet_overhead("wireguard", "tunnel", ip_version, 1420) == 1500 - (20 if ip_version == 4 else 0)


def test_wireguard_goodput_at_full_segments_and_the_tunnel_only_rows():
    # a 1368-byte payload (MSS 1380 less timestamps) in 1420 + 60 + 14 bytes counted by tc
    assert expected_goodput_mbps(100, 1460, "wireguard", "tunnel", 4) == pytest.approx(100 * 1368 / 1494)
    assert expected_goodput_mbps(100, 1460, "wireguard", "tunnel", 6) == pytest.approx(100 * 1348 / 1514)
    # a 1000-byte datagram fits: 1028 padded to 1040, + 60 + 14
    assert expected_udp_goodput_mbps(10, 1000, "wireguard", "tunnel", 4) == pytest.approx(10 * 1000 / 1114)
    # a 2000-byte datagram meets the device's MTU: 1420 (pad 0) and 628 + 20 (pad 12 to 640 + 20 = 660)
    two = (1420 + 60 + 14) + (2008 - 1400 + 20 + 12 + 60 + 14)
    assert expected_udp_goodput_mbps(10, 2000, "wireguard", "tunnel", 4) == pytest.approx(10 * 2000 / two)
    rows = overhead_table(["wireguard"])
    assert [(r.mode, r.ip_version) for r in rows] == [("tunnel", 4), ("tunnel", 6)]
    with pytest.raises(ValueError, match="no transport mode"):
        packet_overhead("wireguard", "transport", 4, 100)


def _end(ns, address, subnet=None):
    return Endpoint(ns, address, subnet)


def test_the_plan_gives_each_end_one_device_per_family_with_a_peer_per_other_end():
    gw = _end("itb-1a2b-gw", "10.0.1.1", "10.1.0.0/24")
    clients = [_end(f"itb-1a2b-c{k}", f"10.0.0.{k + 10}") for k in range(3)]
    devices = wireguard.plan_tunnels([(c, gw) for c in clients], "1a2b", 4,
                                     inside={"itb-1a2b-gw": "10.1.0.1", "itb-1a2b-c0": "10.0.0.10"})
    by_ns = {d.ns: d for d in devices}
    assert set(by_ns) == {"itb-1a2b-gw", *(c.ns for c in clients)}
    hub = by_ns["itb-1a2b-gw"]
    assert hub.ifname == "itb1a2bwg4" and hub.port == 51820 and hub.mtu == 1420 and hub.src == "10.1.0.1"
    assert [(p.ns, p.endpoint, p.allowed_ips) for p in hub.peers] == \
        [(c.ns, c.address, (f"{c.address}/32",)) for c in clients]
    assert hub.routes == tuple(f"{c.address}/32" for c in clients)
    c0 = by_ns["itb-1a2b-c0"]
    assert [(p.ns, p.endpoint, p.allowed_ips) for p in c0.peers] == [("itb-1a2b-gw", "10.0.1.1", ("10.1.0.0/24",))]
    assert by_ns["itb-1a2b-c1"].src is None
    # fresh 32-byte keys, each its own, never in a repr
    keys = [d.private_key for d in devices]
    assert all(len(k) == 32 for k in keys) and len(set(keys)) == len(keys)
    assert all(k.hex() not in repr(d) and str(k) not in repr(d) for d, k in zip(devices, keys, strict=True))
    again = wireguard.plan_tunnels([(c, gw) for c in clients], "1a2b", 4)
    assert not {d.private_key for d in again} & set(keys)


def test_two_pairs_between_the_same_ends_are_one_peer_with_both_networks():
    a = _end("itb-1a2b-gw1", "10.0.9.1", "10.1.0.0/24")
    a2 = _end("itb-1a2b-gw1", "10.0.9.1", "10.1.1.0/24")
    b = _end("itb-1a2b-gw2", "10.0.9.2", "10.2.0.0/24")
    devices = {d.ns: d for d in wireguard.plan_tunnels([(a, b), (a2, b)], "1a2b", 4)}
    (peer,) = devices["itb-1a2b-gw2"].peers
    assert peer.allowed_ips == ("10.1.0.0/24", "10.1.1.0/24")
    (back,) = devices["itb-1a2b-gw1"].peers
    assert back.allowed_ips == ("10.2.0.0/24",)


def test_ipv6_ends_get_the_ipv6_device_and_port_and_a_wrong_family_is_refused():
    a, b = _end("itb-1a2b-h1", "fd00::1"), _end("itb-1a2b-h2", "fd00::2")
    devices = wireguard.plan_tunnels([(a, b)], "1a2b", 6)
    assert {(d.ifname, d.port) for d in devices} == {("itb1a2bwg6", 51821)}
    assert devices[0].peers[0].allowed_ips == ("fd00::2/128",)
    with pytest.raises(ValueError, match="IPv6 end"):
        wireguard.plan_tunnels([(a, b)], "1a2b", 4)
    with pytest.raises(ValueError, match="family"):
        wireguard.plan_tunnels([(a, b)], "1a2b", 5)
    assert wireguard.inside_address("10.1.0.0/24", ["10.0.0.1", None, "10.1.0.7"]) == "10.1.0.7"
    assert wireguard.inside_address("10.1.0.0/24", ["10.0.0.1"]) is None


@pytest.mark.parametrize("mode,keying,words", [
    ("transport", "static", "has no transport mode"),
    ("tunnel", "ike", "not --keying ike"),
    ("tunnel", "ike-rsa", "not --keying ike-rsa"),
])
def test_transport_mode_and_ike_keying_are_refused_in_one_line(mode, keying, words):
    from experiments.engine.plan import SweepSpec

    why = wireguard.refusal(mode, keying)
    assert words in why and "\n" not in why
    with pytest.raises(ValueError, match=words):
        SweepSpec(topology="vpn_gateway", profiles=("wireguard",), mode=mode, keying=keying)
    assert wireguard.refusal("tunnel", "static") is None
    SweepSpec(topology="vpn_gateway", profiles=("wireguard", "aes-gcm-256"))  # accepted


def test_work_with_wireguard_needs_a_kernel_that_has_it():
    from experiments import doctor

    assert "wireguard" in doctor.needs(["none", "wireguard"]).capabilities
    assert "esp" in doctor.needs(["wireguard", "aes-gcm-256"]).capabilities
    assert "wireguard" not in doctor.needs(["aes-gcm-256"]).capabilities


def test_a_wireguard_message_is_read_without_keys_and_anything_else_is_not_one():
    from ipsec.wire import wireguard_message

    initiation = bytes([1, 0, 0, 0]) + (7).to_bytes(4, "little") + bytes(140)
    assert wireguard_message(initiation) == {"type": 1, "name": "handshake initiation", "sender": 7}
    response = bytes([2, 0, 0, 0]) + (9).to_bytes(4, "little") + (7).to_bytes(4, "little") + bytes(80)
    assert wireguard_message(response) == {"type": 2, "name": "handshake response", "sender": 9, "receiver": 7}
    data = bytes([4, 0, 0, 0]) + (9).to_bytes(4, "little") + (5).to_bytes(8, "little") + bytes(112 + 16)
    assert wireguard_message(data) == {"type": 4, "name": "transport data", "receiver": 9, "counter": 5,
                                       "encrypted_bytes": 112}
    keepalive = bytes([4, 0, 0, 0]) + bytes(12) + bytes(16)  # an empty packet: the tag alone
    assert wireguard_message(keepalive)["encrypted_bytes"] == 0
    assert wireguard_message(initiation[:-1]) == {}          # a handshake of the wrong length
    assert wireguard_message(bytes([4, 1, 0, 0]) + bytes(40)) == {}  # reserved bytes not zero
    assert wireguard_message(bytes([5, 0, 0, 0]) + bytes(40)) == {}  # no such type
    assert wireguard_message(b"\x04\x00") == {}


def test_classify_counts_wireguard_between_the_ends_and_calls_anything_else_a_leak():
    from scapy.layers.inet import ICMP, IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    from ipsec.wire import classify

    def udp(src, dst, payload, dport=51820):
        return Ether() / IP(src=src, dst=dst) / UDP(sport=51820, dport=dport) / Raw(payload)

    data = bytes([4, 0, 0, 0]) + (9).to_bytes(4, "little") + bytes(8) + bytes(48)
    back = bytes([4, 0, 0, 0]) + (3).to_bytes(4, "little") + bytes(8) + bytes(48)
    packets = [udp("10.0.0.1", "10.0.0.2", data), udp("10.0.0.2", "10.0.0.1", back),
               udp("10.0.0.1", "10.0.0.2", b"not wireguard"),  # UDP on the port, not a message: other
               Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / ICMP()]
    report = classify(packets, ("10.0.0.1", "10.0.0.2"), "wireguard")
    assert report.counts["wireguard"] == 2 and report.counts["other"] == 2
    assert report.spis == {"wireguard": (3, 9)}
    assert [leak.index for leak in report.leaks] == [2, 3]
    # expected nothing: WireGuard is a leak too
    assert len(classify(packets[:2], ("10.0.0.1", "10.0.0.2"), ()).leaks) == 2
    with pytest.raises(ValueError, match="wireguard"):
        classify(packets, ("10.0.0.1", "10.0.0.2"), "wg")

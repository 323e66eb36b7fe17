"""End to end: an ESP transport SA pair installed over netlink carries real traffic.

Kernel state is read back with iproute2 and the wire with tcpdump + scapy, so a
fault in the testbed's own netlink code cannot hide itself.
"""
from __future__ import annotations

import subprocess

import pytest
from conftest import capture, ip, iproute_states
from scapy.layers.inet import ICMP, IP
from scapy.layers.inet6 import IPv6
from scapy.layers.ipsec import ESP
from scapy.utils import rdpcap

from experiments.engine import iperf
from ipsec.plan import AssociationSpec, Endpoint, SpiPlanner, apply_association, plan_association
from ipsec.xfrm import XfrmSocket

SPI_AB, SPI_BA = 0x1001, 0x1002


def install(pair, family):
    spec = AssociationSpec("aes-gcm-256", "transport", Endpoint(pair.a, pair.addr("a", family)),
                           Endpoint(pair.b, pair.addr("b", family)))
    plan = plan_association(spec, SpiPlanner(first_spi=SPI_AB))
    apply_association(plan)
    return plan.sas


def iproute_counters(ns: str) -> dict[int, tuple[int, int]]:
    """{spi: (bytes, packets)} as `ip -s xfrm state` prints them."""
    return {spi: (st["bytes"], st["packets"]) for (_, spi), st in iproute_states(ns).items()}


@pytest.mark.parametrize("family", [4, 6])
def test_ping_crosses_esp_and_the_wire_shows_only_esp(pair, family, tmp_path):
    sas = install(pair, family)
    assert "proto esp spi 0x00001001" in ip("-n", pair.a, "xfrm", "state")
    pcap = str(tmp_path / "veth.pcap")
    with capture(pair.b, pair.if_b, pcap):
        ping = subprocess.run(["ip", "netns", "exec", pair.a, "ping", f"-{family}", "-c", "5", "-i", "0.2",
                               "-W", "2", pair.addr("b", family)], capture_output=True, text=True)
    assert ping.returncode == 0, ping.stdout + ping.stderr
    assert " 0% packet loss" in ping.stdout

    packets = rdpcap(pcap)
    l3 = IP if family == 4 else IPv6
    ours = [p for p in packets if l3 in p]
    esp = [p for p in ours if ESP in p]
    # 5 echo requests A->B and 5 replies B->A, each in its own SA
    assert sum(p[ESP].spi == SPI_AB for p in esp) >= 5
    assert sum(p[ESP].spi == SPI_BA for p in esp) >= 5
    assert not [p for p in ours if ICMP in p], "plaintext ICMP leaked onto the veth"
    if family == 6:  # neighbour discovery is ICMPv6 and not covered by the policy; echo is
        from scapy.layers.inet6 import ICMPv6EchoReply, ICMPv6EchoRequest
        assert not [p for p in ours if ICMPv6EchoRequest in p or ICMPv6EchoReply in p]

    # iproute2 sees the same SAs counting the same packets
    counters_a = iproute_counters(pair.a)
    assert counters_a[SPI_AB][1] >= 5 and counters_a[SPI_BA][1] >= 5
    with XfrmSocket(netns=pair.a) as xa:
        ours_view = {s.spi: (s.bytes, s.packets) for s in xa.dump_sa()}
    assert ours_view == counters_a
    assert {s.spi for s in sas} == set(counters_a)


def test_iperf3_tcp_through_esp_moves_bytes_counted_by_the_sa(pair):
    install(pair, 4)
    before = iproute_counters(pair.a)[SPI_AB]
    result = iperf.measure(pair.b, pair.a, pair.v4b, duration_s=2, omit_s=0, mss=1000)
    after = iproute_counters(pair.a)[SPI_AB]
    assert result.transport == "tcp" and result.goodput_mbps > 1
    # everything iperf3 counted went through the A->B SA (plus headers and the omitted warm-up)
    assert after[0] - before[0] >= result.bytes

"""Every topology builds, every host reaches every other over IPv4 and IPv6, teardown
leaves nothing; with ESP applied, the untrusted link carries only ESP between the far
hosts and (tunnel mode) the LANs carry plaintext.  Checked with iproute2 and tcpdump."""
from __future__ import annotations

import contextlib
import itertools
import subprocess
import time

import pytest
from conftest import capture, ip, ipsec_count, losses
from scapy.layers.inet import ICMP, IP
from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6
from scapy.layers.ipsec import ESP
from scapy.utils import rdpcap

from testbed import names, waiting
from topologies import TOPOLOGIES, build_spec
from topologies.network import Network


def ping(net, src, dst, family, count=1):
    return subprocess.run(["ip", "netns", "exec", net.ns(src), "ping", f"-{family}", "-c", str(count),
                           "-i", "0.2", "-W", "3", net.addr(dst, family)], capture_output=True, text=True)


def ours():
    return [line.split()[0] for line in ip("netns", "list").splitlines() if names.is_ours(line.split()[0])]


@pytest.mark.parametrize("name", list(TOPOLOGIES))
def test_builds_reaches_everyone_and_leaves_nothing(name):
    before = ours()
    spec = build_spec(name, clients=3)
    with Network(spec) as net:
        # up as soon as it is built: every bridge port forwarding and every link's carrier passed on by the
        # kernel's link watch (else the first packets die at the switch: 4 of 20 road-warrior builds had one
        # port down for 0.66-0.74 s after Mininet's build returned); the switches first, one process for all
        order = sorted(spec.nodes, key=lambda n: n.role != "switch")
        shown = subprocess.run(["sh", "-c", "; ".join(
            f"echo '#ns {ns}'; bridge -n {ns} link show; ip -n {ns} -br link show"
            for ns in (net.ns(n.name) for n in order))], capture_output=True, text=True).stdout
        for part in shown.split("#ns ")[1:]:
            lines = part.splitlines()[1:]
            ports = [line for line in lines if " master " in line]
            assert all("state forwarding" in line for line in ports), part
            links = [line for line in lines if " master " not in line and not line.startswith("lo ")]
            assert all(line.split()[1] in ("UP", "UNKNOWN") for line in links), part
        hosts = [n.name for n in spec.nodes if n.role != "switch"]
        assert set(ours()) - set(before) == {net.ns(n.name) for n in spec.nodes}
        failed = [(a, b, fam) for a, b in itertools.permutations(hosts, 2) for fam in (4, 6)
                  if ping(net, a, b, fam).returncode != 0]
        assert not failed, f"unreachable: {failed}"
        # iproute2 agrees with the plan
        for i in net.plan.interfaces:
            if i.v4:
                shown = ip("-n", net.ns(i.node), "-br", "addr", "show", "dev", i.ifname(net.run_id))
                assert i.v4 in shown and i.v6 in shown
        # every next hop is a permanent neighbour, at its interface's MAC
        for x, y in net.plan.next_hops(spec.flows):
            mac = ip("-n", net.ns(y.node), "-br", "link", "show", "dev", y.ifname(net.run_id)).split()[2]
            shown = ip("-n", net.ns(x.node), "neigh", "show", "dev", x.ifname(net.run_id))
            for family in (4, 6):
                assert f"{y.address(family)} lladdr {mac} PERMANENT" in shown, (x.node, y.node, shown)
    assert ours() == before


@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("name", ["vpn_gateway", "road_warrior"])
def test_tunnel_mode_is_esp_on_the_untrusted_link_and_plaintext_on_the_lans(name, family, tmp_path):
    spec = build_spec(name, clients=2)
    l3, echo = (IP, ICMP) if family == 4 else (IPv6, ICMPv6EchoRequest)
    with Network(spec) as net:
        net.apply_ipsec("aes-gcm-256", "tunnel", families=(family,))
        src, dst = spec.flows[0]
        far = {net.addr(src, family), net.addr(dst, family)}
        # What both ends of the untrusted link send is all that crossed it.
        wan_ifs = [(ns, dev) for ns, dev in net.untrusted_interfaces()
                   if net.spec.node(ns.rsplit("-", 1)[1]).role == "gateway" or ns == net.ns(src)]
        lan_ns, lan_if = net.ns(dst), net.ifname(dst, next(i.peer for i in net.plan.of(dst)))
        with contextlib.ExitStack() as stack:
            for k, (ns, dev) in enumerate(wan_ifs):
                stack.enter_context(capture(ns, dev, str(tmp_path / f"wan{k}.pcap"), direction="out"))
            stack.enter_context(capture(lan_ns, lan_if, str(tmp_path / "lan.pcap")))
            r = ping(net, src, dst, family, count=4)
            if not (r.returncode == 0 and " 4 received" in r.stdout):
                time.sleep(0.5)  # what was sent in the captures, then where it went missing
                caught = {p: [f"{pkt.time:.6f} {pkt.summary()}" for pkt in rdpcap(p)]
                          for p in [*(str(tmp_path / f"wan{k}.pcap") for k in range(len(wan_ifs))),
                                    str(tmp_path / "lan.pcap")]}
                pytest.fail(f"{r.stdout}{r.stderr}\ncaptured: {caught}\n"
                            f"{losses(net.ns(n.name) for n in spec.nodes)}")
            # four requests out of the client, four replies out of the gateway: all eight in the captures
            # before tcpdump stops (a capture that stopped once it had not grown for settle's 0.3 s once
            # held seven, in a full run at 1b37f64)
            esp = lambda: sum(ipsec_count(str(tmp_path / f"wan{k}.pcap")) for k in range(len(wan_ifs)))  # noqa: E731
            waiting.until(lambda: esp() >= 8, 3.0, "8 ESP packets on the untrusted link",
                          state=lambda: f"{esp()} there", interval_s=0.01)
        wan = [p for k in range(len(wan_ifs)) for p in rdpcap(str(tmp_path / f"wan{k}.pcap")) if l3 in p]
        lan = [p for p in rdpcap(str(tmp_path / "lan.pcap")) if l3 in p]
        assert sum(ESP in p for p in wan) >= 8, "no ESP on the untrusted link"
        leaks = [p.summary() for p in wan if echo in p and {p[l3].src, p[l3].dst} <= far]
        assert not leaks, f"plaintext between the far hosts on the untrusted link: {leaks}"
        # on the server's LAN the same pings are plaintext: the gateway decrypted them
        assert sum(echo in p for p in lan) >= 4
        assert not any(ESP in p for p in lan)
        # switching IPsec off in the same network: the SAs go, traffic still flows
        net.remove_ipsec()
        for ns, _ in wan_ifs:
            assert ip("-n", ns, "xfrm", "state").strip() == "" and ip("-n", ns, "xfrm", "policy").strip() == ""
        assert ping(net, src, dst, family).returncode == 0


@pytest.mark.parametrize("pmtu,fragments", [("discover", False), ("fragment", True)])
def test_pmtu_knob_decides_whether_the_gateway_fragments_esp(pmtu, fragments, tmp_path):
    """Seed 003's 2005-era behaviour: full-sized segments exceed the ESP-reduced MTU and the
    gateway fragments the ESP packets; with path MTU discovery the sender shrinks them."""
    from experiments.engine import iperf

    spec = build_spec("vpn_gateway", pmtu=pmtu)
    with Network(spec) as net:
        net.apply_ipsec("aes-gcm-256", "tunnel", families=(4,))
        pcap = str(tmp_path / "wan.pcap")
        with capture(net.ns("gw1"), net.ifname("gw1", "gw2"), pcap, direction="out"):
            r = iperf.measure(net.ns("h2"), net.ns("h1"), net.addr("h2"), duration_s=1, omit_s=0, mss=1460)
        assert r.goodput_mbps > 1
        ip_pkts = [p[IP] for p in rdpcap(pcap) if IP in p]
        frags = [p for p in ip_pkts if p.flags.MF or p.frag > 0]
        esp = [p for p in ip_pkts if p.proto == 50]
        assert esp, "no ESP on the untrusted link"
        if fragments:
            assert len(frags) > len(esp) // 4, f"{len(frags)} fragments among {len(ip_pkts)} packets"
            assert all(p.len <= 1500 for p in ip_pkts)
        else:
            assert not frags, f"{len(frags)} fragments with path MTU discovery on"


@pytest.mark.parametrize("family", [4, 6])
def test_removing_ipsec_forgets_the_path_mtu_the_tunnel_taught(family):
    """A tunnel teaches the sender a smaller path MTU (a route exception, kept 10 minutes); the
    plain points after an IPsec point must send full-size packets again."""
    from experiments.engine import iperf

    def path_mtu(net, node, dst):
        out = ip("-n", net.ns(node), f"-{family}", "route", "get", dst)
        found = [int(w) for a, w in itertools.pairwise(out.split()) if a == "mtu"]
        return found[0] if found else None

    with Network(build_spec("vpn_gateway")) as net:
        client, server = net.spec.flows[0]
        dst = net.addr(server, family)
        net.apply_ipsec("aes-gcm-256", "tunnel", families=(family,))
        iperf.measure(net.ns(server), net.ns(client), dst, duration_s=1, omit_s=0, mss=1460)
        learnt = path_mtu(net, client, dst)
        assert learnt is not None and learnt < 1500, "the tunnel taught no path MTU: the test proves nothing"
        net.remove_ipsec()
        assert path_mtu(net, client, dst) is None

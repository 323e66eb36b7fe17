"""WireGuard between the topologies' tunnel ends on the kernel: set up over netlink, what crosses the untrusted
link (WireGuard's message types, each data packet exactly as ipsec/overhead.py's byte model says), plaintext
on the LANs, the kernel's view of keys and peers, and nothing left after removal.  Checked with iproute2,
tcpdump and scapy, never with the testbed's own netlink code."""
from __future__ import annotations

import contextlib
import os
import signal
import struct
import subprocess
import sys

import pytest
from conftest import capture, ip
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6
from scapy.utils import rdpcap

from ipsec import wireguard
from ipsec.overhead import packet_overhead
from ipsec.wire import classify
from testbed import netns, waiting
from topologies import build_spec
from topologies.network import Network

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: WireGuard's message types (drivers/net/wireguard/messages.h) and their fixed lengths.
INITIATION, RESPONSE, DATA = 1, 2, 4
LENGTHS = {INITIATION: 148, RESPONSE: 92}


def ping(net, src, dst, family, size=56, count=1, interval="0.2"):
    return subprocess.run(["ip", "netns", "exec", net.ns(src), "ping", f"-{family}", "-c", str(count), "-i", interval,
                           "-s", str(size), "-M", "do", "-W", "3", net.addr(dst, family)],
                          capture_output=True, text=True)


def wg_messages(packets, family):
    """(type, outer IP length) of each WireGuard message on the link."""
    l3 = IP if family == 4 else IPv6
    out = []
    for p in packets:
        if l3 in p and UDP in p and p[UDP].dport in wireguard.LISTEN_PORTS.values():
            payload = bytes(p[UDP].payload)
            length = p[IP].len if family == 4 else p[IPv6].plen + 40
            out.append((struct.unpack_from("<I", payload)[0], length, len(payload)))
    return out


@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("name", ["vpn_gateway", "road_warrior", "host_to_host"])
def test_wireguard_carries_the_flows_and_each_data_packet_is_what_the_byte_model_says(name, family, tmp_path):
    spec = build_spec(name, clients=2)
    l3, echo = (IP, ICMP) if family == 4 else (IPv6, ICMPv6EchoRequest)
    with Network(spec) as net:
        devices = net.apply_ipsec("wireguard", "tunnel", families=(family,)) or net.wireguard_devices
        src, dst = spec.flows[0]
        far = {net.addr(src, family), net.addr(dst, family)}
        # the kernel holds what was planned: a device per tunnel end with the planned MTU, port, mark, peers
        for dev in devices:
            shown = ip("-n", dev.ns, "-d", "link", "show", "dev", dev.ifname)
            assert "wireguard" in shown and f"mtu {dev.mtu}" in shown
            assert f"not from all fwmark {hex(wireguard.FWMARK)} lookup {wireguard.TABLE}" in \
                ip("-n", dev.ns, f"-{family}", "rule")
            routes = ip("-n", dev.ns, f"-{family}", "route", "show", "table", str(wireguard.TABLE))
            for net_ in dev.routes:
                assert net_.replace("/32", "").replace("/128", "") in routes
        ends = {dev.ns for dev in devices}
        wan = [(ns, ifc) for ns, ifc in net.untrusted_interfaces() if ns in ends]
        lan_ns, lan_if = net.ns(dst), net.ifname(dst, next(i.peer for i in net.plan.of(dst)))
        sizes = (56, 100, 1000, 1392 if family == 4 else 1372)  # the last: an inner packet of 1420 bytes
        with contextlib.ExitStack() as stack:
            for k, (ns, dev) in enumerate(wan):
                stack.enter_context(capture(ns, dev, str(tmp_path / f"wan{k}.pcap"), direction="out"))
            if lan_ns not in ends:
                stack.enter_context(capture(lan_ns, lan_if, str(tmp_path / "lan.pcap")))
            for size in sizes:
                r = ping(net, src, dst, family, size=size)
                assert r.returncode == 0 and " 1 received" in r.stdout, (size, r.stdout + r.stderr)

            def data() -> int:
                return sum(t == DATA for k in range(len(wan)) for t, _, _ in
                           wg_messages(rdpcap(str(tmp_path / f"wan{k}.pcap")), family))
            # a request out of one end and a reply out of the other per size
            waiting.until(lambda: data() >= 2 * len(sizes), 3.0, "the data messages in the captures",
                          state=lambda: f"{data()} there", interval_s=0.05)
        packets = [p for k in range(len(wan)) for p in rdpcap(str(tmp_path / f"wan{k}.pcap"))]
        messages = wg_messages(packets, family)
        kinds = [t for t, _, _ in messages]
        assert kinds.count(INITIATION) >= 1 and kinds.count(RESPONSE) >= 1, kinds  # the Noise handshake
        for t, _, udp_payload in messages:
            if t in LENGTHS:
                assert udp_payload == LENGTHS[t]
        # each echo's inner packet (IP + ICMP header + payload) is one data message of exactly the model's bytes
        inner_sizes = {(40 if family == 6 else 20) + 8 + size for size in sizes}
        outer = sorted({length for t, length, _ in messages if t == DATA})
        expected = sorted({i + packet_overhead("wireguard", "tunnel", family, i) for i in inner_sizes})
        assert outer == expected, (outer, expected)
        # nothing between the far hosts crossed the untrusted link in the clear
        leaks = [p.summary() for p in packets if echo in p and {p[l3].src, p[l3].dst} <= far]
        assert not leaks, f"plaintext between the far hosts on the untrusted link: {leaks}"
        # the wire check IPsec's profiles pass: only WireGuard between the tunnel ends, nothing between
        # the networks they protect (one receiver index per direction)
        (a, b), *_ = net.tunnel_ends(family)
        ends_report = classify(packets, (a.address, b.address), "wireguard")
        assert ends_report.ok and ends_report.counts["wireguard"] >= 2 * len(sizes) + 2, ends_report.describe()
        assert len(ends_report.spis["wireguard"]) == 2, ends_report.describe()
        if (a.subnet, b.subnet) != (f"{a.address}/{32 if family == 4 else 128}",
                                    f"{b.address}/{32 if family == 4 else 128}"):
            inner = classify(packets, (a.subnet, b.subnet), ())
            assert inner.ok and inner.total == 0, inner.describe()
        if lan_ns not in ends:  # behind a gateway the same pings are plaintext: it decrypted them
            lan = [p for p in rdpcap(str(tmp_path / "lan.pcap")) if echo in p]
            assert len(lan) >= len(sizes)
        # the kernel's peers: each has shaken hands and moved bytes, at the planned endpoint and allowed IPs
        for dev in devices:
            held = wireguard.peers_of(dev.ns, dev.ifname)
            assert sorted(h["endpoint"] for h in held) == sorted(p.endpoint for p in dev.peers)
            assert sorted(tuple(h["allowed_ips"]) for h in held) == sorted(p.allowed_ips for p in dev.peers)
        busy = [h for dev in devices for h in wireguard.peers_of(dev.ns, dev.ifname) if h["tx_bytes"]]
        assert busy and all(h["handshake_s"] > 0 for h in busy)
        # `wg` from wireguard-tools, where installed, shows the same devices (it only reads)
        # switching it off: devices, rules and routes gone, traffic still flows in the clear
        net.remove_ipsec()
        for dev in devices:
            assert ip("-n", dev.ns, "link", "show", "type", "wireguard").strip() == ""
            assert f"lookup {wireguard.TABLE}" not in ip("-n", dev.ns, f"-{family}", "rule")
        assert ping(net, src, dst, family).returncode == 0


def test_two_hundred_peers_on_one_gateway_device(tmp_path):
    """A road-warrior gateway with many clients has one device and a peer each; the last client reaches the
    server through it."""
    spec = build_spec("road_warrior", clients=40)
    with Network(spec) as net:
        devices = net.apply_wireguard(families=(4,))
        gateway = [d for d in devices if len(d.peers) > 1]
        assert len(gateway) == 1 and len(gateway[0].peers) == 40
        assert len(ip("-n", gateway[0].ns, "route", "show", "table", str(wireguard.TABLE)).splitlines()) == 40
        src, dst = spec.flows[-1]
        assert ping(net, src, dst, 4).returncode == 0


@pytest.mark.parametrize("name", ["vpn_gateway", "road_warrior"])
def test_both_ip_versions_at_once_each_on_its_own_device_and_keys(name):
    """As the demo and a sweep of --ip 4,6 put it up: a device per version in each end, each keyed apart."""
    spec = build_spec(name, clients=2)
    with Network(spec) as net:
        devices = net.apply_wireguard(families=(4, 6))
        assert {d.family for d in devices} == {4, 6} and len({d.private_key for d in devices}) == len(devices)
        src, dst = spec.flows[-1]
        for family in (4, 6):
            r = ping(net, src, dst, family, count=2, interval="0.2")
            assert r.returncode == 0 and " 2 received" in r.stdout, (family, r.stdout + r.stderr)
        held = {d: wireguard.peers_of(d.ns, d.ifname) for d in devices}
        carried = {d.family for d, peers in held.items() if any(p["tx_bytes"] for p in peers)}
        assert carried == {4, 6}, held  # each version through its own device, each handshake its own
        assert all(p["handshake_s"] > 0 for peers in held.values() for p in peers if p["tx_bytes"])


def test_a_failed_setup_leaves_nothing_and_a_removal_twice_is_harmless():
    spec = build_spec("vpn_gateway")
    with Network(spec) as net:
        devices = wireguard.plan_tunnels(net.tunnel_ends(4), net.run_id, 4)
        # a device name already taken in one namespace: the whole setup fails and nothing stays
        ip("-n", devices[-1].ns, "link", "add", devices[-1].ifname, "type", "dummy")
        with pytest.raises(wireguard.WireGuardError, match=devices[-1].ifname):
            wireguard.apply(devices)
        for dev in devices:
            assert ip("-n", dev.ns, "link", "show", "type", "wireguard").strip() == ""
            assert f"lookup {wireguard.TABLE}" not in ip("-n", dev.ns, "rule")
        ip("-n", devices[-1].ns, "link", "del", devices[-1].ifname)
        net.apply_wireguard(families=(4,))
        net.remove_ipsec()
        net.remove_ipsec()


def wireguard_devices() -> list[str]:
    """Every WireGuard device in the testbed's namespaces now, as ``namespace/device``."""
    found = []
    for ns in netns.list_ours():
        out = subprocess.run(["ip", "-n", ns, "-o", "link", "show", "type", "wireguard"], capture_output=True,
                             text=True).stdout
        found += [f"{ns}/{line.split(':')[1].strip().split('@')[0]}" for line in out.splitlines() if line.strip()]
    return found


def test_a_sweep_killed_with_its_tunnels_up_leaves_nothing_after_clean(tmp_path):
    assert not netns.list_ours(), "leftovers from before this test"
    run = subprocess.Popen([sys.executable, "-m", "cli", "sweep", "--topology", "road_warrior", "--clients", "3",
                            "--profiles", "wireguard", "--rates", "50", "--sizes", "1400", "--repetitions", "1",
                            "--duration", "2", "--no-report", "--no-latency-probe", "--out", str(tmp_path / "run")],
                           cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)

    def up() -> bool:
        assert run.poll() is None, f"the sweep ended before its tunnels were up: {run.stderr.read()[-2000:]}"
        return len(wireguard_devices()) >= 4  # the gateway's and each client's

    try:
        waiting.until(up, 240, "the sweep's WireGuard devices", interval_s=0.01)
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        run.stderr.close()
    assert wireguard_devices(), "the killed run left no device: the test would prove nothing"
    done = subprocess.run([sys.executable, "-m", "cli", "clean"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert netns.list_ours() == [] and wireguard_devices() == []

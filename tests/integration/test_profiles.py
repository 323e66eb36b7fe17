"""Every cataloged profile x {transport, tunnel} x {IPv4, IPv6}, on the kernel.

For each: install an SA pair and policies in two namespaces through the netlink
layer, send traffic, then check with iproute2 (an independent tool) that the kernel
holds the same algorithms, keys and SPIs and that the counters grew, and on a
capture of what crossed the veth that nothing went in plaintext and that scapy,
given the run's keys, decrypts the pings the kernel encrypted.
"""
from __future__ import annotations

import subprocess

import pytest
from conftest import capture, iproute_states
from scapy.utils import rdpcap

from ipsec.plan import AssociationSpec, Endpoint, SpiPlanner, apply_association, plan_association, remove_association
from ipsec.profiles import CATALOG, parse_profile
from ipsec.wire import classify, decrypt, echo_data
from topologies.veth_pair import veth_pair

PROFILES = [n.name for n in CATALOG if parse_profile(n.name).ipsec]  # WireGuard: test_wireguard.py
PINGS = 4
PATTERN = "6974622d70726f66"  # "itb-prof", repeated by ping -p


@pytest.fixture(scope="module")
def shared_pair():
    """One pair for the whole matrix: each case installs, checks and removes its own SAs."""
    with veth_pair() as p:
        yield p


def check_wire(packets, plan, a: str, b: str) -> None:
    """Only the profile's outer protocol left a for b, and it decrypts to the pings."""
    profile = plan.spec.profile
    report = classify(packets, (a, b), profile.protocols[-1])
    assert report.ok, report.describe()
    assert report.counts[profile.protocols[-1]] >= PINGS
    if profile.aead_icv_bits not in (None, 128):
        return  # scapy's AES-GCM knows only the 16-byte ICV; iproute2 checked the SA above
    done = decrypt(packets, [sa for sa in plan.sas if sa.src == a])
    assert len(done) >= PINGS
    assert [len(d.layers) for d in done] == [len([x for x in profile.protocols if x != "comp"])] * len(done)
    if profile.ipcomp:
        # ping's repeated pattern compresses: what ESP carried is an IPComp packet (protocol 108)
        inner_proto = [d.inner.nh if d.inner.version == 6 else d.inner.proto for d in done]
        assert inner_proto.count(108) >= PINGS, inner_proto
        return
    payloads = [echo_data(d.inner) for d in done]
    assert all(pl is not None and bytes.fromhex(PATTERN) * 4 in pl for pl in payloads), payloads[:1]


def expected_algs(sa) -> dict:
    if sa.aead:
        return {"aead": (sa.aead.kernel_name, sa.aead_key.hex(), sa.aead_icv_bits)}
    algs = {}
    if sa.crypt:
        algs["enc"] = (sa.crypt.kernel_name, sa.crypt_key.hex() if sa.crypt_key else "", None)
    if sa.auth:
        algs["auth-trunc"] = (sa.auth.kernel_name, sa.auth_key.hex(), sa.auth.icv_bits)
    if sa.comp:
        algs["comp"] = (sa.comp.kernel_name, "", None)
    return algs


@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("mode", ["transport", "tunnel"])
@pytest.mark.parametrize("profile", PROFILES)
def test_profile_installs_carries_traffic_and_matches_iproute2(shared_pair, profile, mode, family, tmp_path):
    p = shared_pair
    a, b = p.addr("a", family), p.addr("b", family)
    spec = AssociationSpec(profile, mode, Endpoint(p.a, a), Endpoint(p.b, b))
    plan = plan_association(spec, SpiPlanner())
    apply_association(plan)
    try:
        pcap = str(tmp_path / "a-out.pcap")
        with capture(p.a, p.if_a, pcap, direction="out", ipsec_packets=PINGS):
            ping = subprocess.run(["ip", "netns", "exec", p.a, "ping", f"-{family}", "-c", str(PINGS), "-i", "0.01",
                                   "-W", "2", "-s", "600", "-p", PATTERN, b], capture_output=True, text=True)
        assert ping.returncode == 0, ping.stdout + ping.stderr
        check_wire(rdpcap(pcap), plan, a, b)
        seen = {ns: iproute_states(ns) for ns in (p.a, p.b)}
        for states in seen.values():
            assert set(states) == {(sa.proto, sa.spi) for sa in plan.sas}
            for sa in plan.sas:
                got = states[(sa.proto, sa.spi)]
                fix = {k: (v[0], v[1], v[2]) for k, v in got["algs"].items()}
                want = expected_algs(sa)
                # iproute2 prints the ICV/truncation length only for aead and auth-trunc
                assert fix == want, f"{sa.proto} {sa.spi:#x}: iproute2 shows {fix}, we installed {want}"
                assert got["mode"] == sa.mode and got["reqid"] == plan.reqid
        # every SA of the outer protocol counted the pings (IPComp skips small packets)
        outer = plan.spec.profile.protocols[-1]
        for sa in plan.sas:
            if sa.proto == outer:
                assert seen[p.a][(sa.proto, sa.spi)]["packets"] >= PINGS
    finally:
        remove_association(plan)
    leftover = subprocess.run(["ip", "-n", p.a, "-batch", "-"], input="xfrm policy\nxfrm state\n",
                              capture_output=True, text=True, check=True).stdout.strip()
    assert leftover == "", leftover

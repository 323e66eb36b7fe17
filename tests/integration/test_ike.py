"""Keying by IKEv2 on the kernel: strongSwan's daemons, one in each IPsec endpoint's namespace,
negotiate what the static path installs, only IPsec crosses the untrusted link, a wrong key
fails in one line naming the cause, and nothing is left behind (ipsec.ike).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import time

import pytest
from conftest import capture, ip
from scapy.layers.inet import ICMP, IP
from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6
from scapy.utils import rdpcap

from ipsec import ike
from ipsec.profiles import parse_profile
from ipsec.sa import SASpec
from ipsec.wire import classify
from ipsec.xfrm import XfrmSocket
from testbed import names, netns
from testbed.rundir import load_results
from topologies import build_spec
from topologies.network import Network


@pytest.fixture(autouse=True)
def strongswan():
    """No skipping: the README's test command installs strongSwan, so its absence is a failure."""
    assert ike.available() is None, ike.available()

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ping(net, src, dst, family, count=4):
    return subprocess.run(["ip", "netns", "exec", net.ns(src), "ping", f"-{family}", "-c", str(count),
                           "-i", "0.1", "-W", "3", net.addr(dst, family)], capture_output=True, text=True)


def algorithms(sa) -> tuple:
    """What the kernel holds of an SA but its keys and SPI: protocol, mode, algorithms with their key and ICV
    lengths (of an installed SA, as the kernel reports them; of a planned one, its keys' and profile's)."""
    if isinstance(sa, SASpec):
        lengths = ((sa.aead, sa.aead_key, sa.aead_icv_bits), (sa.crypt, sa.crypt_key, 0),
                   (sa.auth, sa.auth_key, sa.auth.icv_bits if sa.auth else 0), (sa.comp, b"", 0))
        return (sa.proto, sa.mode, *((a.kernel_name, len(key or b"") * 8, icv) if a else None
                                     for a, key, icv in lengths))
    return (sa.proto, sa.mode, *((a.kernel_name, a.key_bits, a.icv_bits) if a else None
                                 for a in (sa.aead, sa.crypt, sa.auth, sa.comp)))


def charons(net) -> list[int]:
    """The charon processes inside the network's namespaces."""
    out = []
    for node in net.spec.nodes:
        for pid in netns.pids_in(net.ns(node.name)):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
                if os.path.basename(f.read().split(b"\0")[0]) == b"charon":
                    out.append(pid)
    return out


def leftovers(net) -> list:
    """What keying by IKE may leave: daemons, their directory, SAs and policies."""
    ends = {end.ns for spec in net.associations("none", "tunnel") for end in (spec.a, spec.b)}
    xfrm = [ns for ns in ends if ip("-n", ns, "xfrm", "state").strip() or ip("-n", ns, "xfrm", "policy").strip()]
    dirs = [d for d in os.listdir(names.ike_base_dir()) if d.startswith(names.ike_dir_prefix(net.run_id))]
    return charons(net) + dirs + xfrm


@pytest.fixture(scope="module")
def networks():
    """The module's networks, one per topology, built when first asked for: each case keys one
    and switches IPsec off again."""
    with contextlib.ExitStack() as stack:
        built: dict[str, Network] = {}

        def network(name: str) -> Network:
            if name not in built:
                built[name] = stack.enter_context(Network(build_spec(name, clients=2)))
            return built[name]

        yield network


@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize(("name", "profile", "keying"), [
    ("vpn_gateway", "aes-gcm-256", "ike"), ("vpn_gateway", "aes-cbc-128-sha1", "ike"),
    ("vpn_gateway", "ah-sha256", "ike"), ("road_warrior", "aes-gcm-256", "ike"),
    ("host_to_host", "aes-gcm-256", "ike-rsa"),  # seed 000's tunnel: IKEv2 with RSA signatures
    # the modern ciphers, as strongSwan proposes them
    ("vpn_gateway", "chacha20-poly1305", "ike"), ("vpn_gateway", "aes-ccm-256-icv12", "ike"),
    ("vpn_gateway", "aes-gmac-128", "ike"), ("vpn_gateway", "aes-ctr-256-sha512", "ike"),
])
def test_ike_negotiates_the_profile_and_only_ipsec_crosses_the_untrusted_link(networks, name, profile, keying, family,
                                                                             tmp_path):
    net = networks(name)
    spec = net.spec
    l3, echo = (IP, ICMP) if family == 4 else (IPv6, ICMPv6EchoRequest)
    net.apply_ipsec(profile, "tunnel", families=(family,), keying=keying)
    src, dst = spec.flows[0]
    wan_ifs = [(ns, dev) for ns, dev in net.untrusted_interfaces()
               if net.spec.node(ns.rsplit("-", 1)[1]).role == "gateway" or ns in (net.ns(src), net.ns(dst))]
    with contextlib.ExitStack() as stack:
        for k, (ns, dev) in enumerate(wan_ifs):
            stack.enter_context(capture(ns, dev, str(tmp_path / f"wan{k}.pcap"), direction="out"))
        r = ping(net, src, dst, family)
    assert r.returncode == 0, r.stdout + r.stderr

    # the kernel holds what the static path would have installed, but for the keys and SPIs
    associations = net.associations(profile, "tunnel", family)
    static = {algorithms(sa) for plan in net.plan_ipsec(profile, "tunnel", family) for sa in plan.sas}
    for end in {e for a in associations for e in (a.a, a.b)}:
        with XfrmSocket(end.ns) as x:
            negotiated = {algorithms(sa) for sa in x.dump_sa()}
        assert negotiated == static, f"{end.ns}: IKE made {negotiated}, the profile is {static}"
    lines = net.negotiated_sas()
    outer = "ah" if profile.startswith("ah") else "esp"
    # two SAs (one each way) at each end of each association, none holding a key
    assert len(lines) == 4 * len(associations) and all(f" {outer} " in line for line in lines)

    # between the tunnel's ends only the profile's protocol went (IKE was over before the ping)
    packets = [p for k in range(len(wan_ifs)) for p in rdpcap(str(tmp_path / f"wan{k}.pcap")) if l3 in p]
    reports = [classify(packets, (a.a.address, a.b.address), outer) for a in associations]
    assert all(r.ok for r in reports), [r.describe() for r in reports]
    assert sum(r.counts[outer] for r in reports) >= 8, [r.describe() for r in reports]  # 4 each way
    far = {net.addr(src, family), net.addr(dst, family)}
    assert not [p.summary() for p in packets if echo in p and {p[l3].src, p[l3].dst} <= far]

    net.remove_ipsec()
    assert leftovers(net) == []
    assert ping(net, src, dst, family, count=1).returncode == 0  # plain again



def failure_of(net, tunnels) -> str:
    """Why ``tunnels`` did not come up, as :class:`ike.IkeError` says it: one line, checked here."""
    keying = ike.Daemons(net.run_id)
    try:
        with pytest.raises(ike.IkeError) as failed:
            keying.bring_up(tunnels)
    finally:
        keying.down()
    message = str(failed.value)
    assert "\n" not in message and "did not come up" in message
    return message


def test_a_wrong_key_fails_in_one_line_naming_the_cause_and_leaves_nothing(networks):
    net = networks("vpn_gateway")
    tunnels = [dataclasses.replace(t, psk="00" * 32) if t.local == "b" else t
               for t in ike.tunnels_for(net.associations("aes-gcm-256", "tunnel", 4))]
    message = failure_of(net, tunnels)
    assert "MAC mismatched" in message or "AUTHENTICATION_FAILED" in message, message
    assert "00" * 32 not in message and tunnels[0].psk not in message
    assert leftovers(net) == []


def test_rsa_keys_are_made_per_daemon_owner_only_and_removed_with_it(networks):
    net = networks("host_to_host")
    net.apply_ipsec("aes-gcm-256", "tunnel", families=(4,), keying="ike-rsa")
    keying = net.ike_keying
    assert keying.auth == "pubkey" and ping(net, "h1", "h2", 4, count=1).returncode == 0
    for d in keying.daemons:
        swanctl = os.path.join(d.dir, "swanctl")
        private, = os.listdir(os.path.join(swanctl, "rsa"))
        assert private == f"{d.ns}.pem"
        peers = {t.peer.ns for t in d.tunnels}
        assert set(os.listdir(os.path.join(swanctl, "pubkey"))) == {f"{ns}.pem" for ns in peers | {d.ns}}
        for sub, name in (("rsa", private), *(("pubkey", f"{ns}.pem") for ns in peers)):
            assert os.stat(os.path.join(swanctl, sub, name)).st_mode & 0o077 == 0, (sub, name)
        assert "RSA PRIVATE KEY" not in d.log_text
        assert f"{d.ns}@testbed" in d.log_text  # the identity it authenticated with
    net.remove_ipsec()
    assert leftovers(net) == []


def test_a_peer_holding_another_public_key_fails_in_one_line(networks, monkeypatch):
    net = networks("host_to_host")
    made = ike.make_rsa_keys

    def swap_initiators_key(daemons):
        made(daemons)
        initiator, responder = daemons  # h1 initiates; h2 is given a stranger's key for h1
        stranger = ike.Daemon(initiator.ns, os.path.join(initiator.dir, "stranger"), initiator.tunnels)
        made([stranger])
        shutil.copy(os.path.join(stranger.dir, "swanctl", "pubkey", f"{initiator.ns}.pem"),
                    os.path.join(responder.dir, "swanctl", "pubkey", f"{initiator.ns}.pem"))

    monkeypatch.setattr(ike, "make_rsa_keys", swap_initiators_key)
    message = failure_of(net, ike.tunnels_for(net.associations("aes-gcm-256", "tunnel", 4), "pubkey"))
    assert "AUTHENTICATION_FAILED" in message or "signature validation failed" in message \
        or "constraint check failed" in message, message
    assert leftovers(net) == []


def test_a_child_sa_rekey_puts_new_sas_at_both_ends_and_the_tunnel_carries_on(networks):
    net = networks("road_warrior")
    net.apply_ipsec("aes-gcm-256", "tunnel", families=(4,), keying="ike")
    keying = net.ike_keying
    ends = sorted({ns for t in keying.initiators for ns in (t.me.ns, t.peer.ns)})

    def spis():
        out = {}
        for ns in ends:
            with XfrmSocket(ns) as x:
                out[ns] = {sa.spi for sa in x.dump_sa() if sa.proto == "esp"}
        return out

    before = spis()
    seconds = keying.rekey_together(keying.initiators)  # both road warriors' CHILD_SAs at once
    after = spis()
    for ns in ends:  # two new SAs per tunnel at each end (the old inbound ones linger 5 s)
        tunnels = sum(ns in (t.me.ns, t.peer.ns) for t in keying.initiators)
        assert len(after[ns] - before[ns]) == 2 * tunnels, (ns, before[ns], after[ns])
    assert 0 < seconds < 10
    src, dst = net.spec.flows[0]
    assert ping(net, src, dst, 4, count=2).returncode == 0
    net.remove_ipsec()
    assert leftovers(net) == []


def test_a_proposal_the_peer_refuses_fails_in_one_line_naming_it(networks):
    net = networks("vpn_gateway")
    other = parse_profile("aes-cbc-128-sha1")  # the responder offers another cipher than the initiator's
    tunnels = [dataclasses.replace(t, spec=dataclasses.replace(t.spec, profile=other)) if t.local == "b" else t
               for t in ike.tunnels_for(net.associations("aes-gcm-256", "tunnel", 4))]
    message = failure_of(net, tunnels)
    assert "NO_PROPOSAL_CHOSEN" in message or "no acceptable proposal" in message, message
    assert leftovers(net) == []


def test_a_daemon_that_does_not_start_fails_in_one_line_with_its_own_words(networks, monkeypatch):
    net = networks("vpn_gateway")
    # a configuration charon cannot use: its control socket in a directory that does not exist
    real = ike.strongswan_conf
    monkeypatch.setattr(ike, "START_TIMEOUT_S", 5.0)
    monkeypatch.setattr(ike, "strongswan_conf",
                        lambda state_dir, crowd=1: real(state_dir, crowd).replace(f"unix://{state_dir}/charon.vici",
                                                                  f"unix://{state_dir}/missing/charon.vici"))
    keying = ike.Daemons(net.run_id)
    try:
        with pytest.raises(ike.IkeError) as failed:
            keying.up(net.associations("aes-gcm-256", "tunnel", 4))
    finally:
        keying.down()
    message = str(failed.value)
    assert "\n" not in message and "charon in" in message and "its log says" in message, message
    assert "charon.vici" in message, message  # the socket it could not open, in its own words
    assert leftovers(net) == []


def test_a_peer_that_never_answers_is_given_up_in_seconds_in_one_line(networks):
    net = networks("vpn_gateway")
    alone = [t for t in ike.tunnels_for(net.associations("aes-gcm-256", "tunnel", 4)) if t.local == "a"]
    keying = ike.Daemons(net.run_id)
    t0 = time.monotonic()
    try:
        with pytest.raises(ike.IkeError, match="peer not responding|giving up") as failed:
            keying.bring_up(alone)  # no daemon at the other end
    finally:
        keying.down()
    assert time.monotonic() - t0 < 20 and "\n" not in str(failed.value)
    assert leftovers(net) == []


def test_a_profile_ike_cannot_negotiate_is_refused_before_anything_starts(networks):
    net = networks("vpn_gateway")
    with pytest.raises(ike.Unsupported, match="ESP or AH"):
        net.apply_ipsec("3des-cbc-sha1+ah-md5", "tunnel", families=(4,), keying="ike")
    assert leftovers(net) == []


def test_a_sweep_keyed_by_ike_records_the_negotiated_sas(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "cli", "sweep", "--keying", "ike", "--rates", "10", "--sizes", "1460",
                           "--repetitions", "1", "--duration", "1", "--no-report", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    records = load_results(out)
    assert {(r.profile, r.keying) for r in records} == {("none", "ike"), ("aes-gcm-256", "ike")}
    for r in records:
        if r.profile == "none":
            assert r.ike_sas is None
        else:
            assert len(r.ike_sas) == 4 and all("rfc4106(gcm(aes))/288/icv128" in s for s in r.ike_sas), r.ike_sas
            assert r.bound == "link" and r.goodput_mbps > 8

"""ipsec.ike without a daemon: the proposals a profile becomes, the daemon's files, the cause of a failure."""
from __future__ import annotations

import pytest

from experiments.engine.plan import SweepSpec
from experiments.engine.sweep import run_sweep
from ipsec import ike
from ipsec.plan import AssociationSpec, Endpoint
from ipsec.profiles import CATALOG, parse_profile
from testbed import rundir
from testbed.errors import Refused
from testbed.record import Record


@pytest.mark.parametrize(("profile", "want"), [
    ("aes-gcm-256", {"esp_proposals": "aes256gcm16"}),
    ("aes-gcm-128", {"esp_proposals": "aes128gcm16"}),
    ("aes-gcm-256-icv8", {"esp_proposals": "aes256gcm8"}),
    ("aes-gcm-256-icv12", {"esp_proposals": "aes256gcm12"}),
    ("aes-cbc-128-sha1", {"esp_proposals": "aes128-sha1"}),
    ("aes-cbc-256-sha256", {"esp_proposals": "aes256-sha256"}),
    ("3des-cbc-md5", {"esp_proposals": "3des-md5"}),
    ("des-cbc-sha1", {"esp_proposals": "des-sha1"}),
    ("null-sha1", {"esp_proposals": "null-sha1"}),
    ("ah-md5", {"ah_proposals": "md5"}),
    ("aes-gcm-256+ipcomp", {"esp_proposals": "aes256gcm16", "ipcomp": "yes"}),
])
def test_a_profile_is_the_child_sa_proposal_strongswan_names_it(profile, want):
    assert ike.child_proposals(parse_profile(profile)) == want


def test_esp_with_ah_is_refused_with_the_reason():
    with pytest.raises(ike.Unsupported, match="one protocol per CHILD_SA"):
        ike.child_proposals(parse_profile("3des-cbc-sha1+ah-md5"))


def test_every_catalog_profile_is_negotiated_or_refused_in_one_line():
    for p in (parse_profile(n.name) for n in CATALOG):
        try:
            got = ike.child_proposals(p)
        except ike.Unsupported as e:
            assert "\n" not in str(e) and p.name in str(e)
        else:
            assert set(got) <= {"esp_proposals", "ah_proposals", "ipcomp"} and got


def tunnel(side="a", mode="tunnel"):
    a = Endpoint("itb-abc123-gw1", "10.0.1.1", "10.1.0.0/24")
    b = Endpoint("itb-abc123-gw2", "10.0.1.2", "10.2.0.0/24")
    return ike.Tunnel("t0", AssociationSpec("aes-gcm-256", mode, a, b, forward=True), side, "ab" * 32)


def test_the_connection_names_each_end_its_selectors_and_no_encapsulation():
    conf = ike.swanctl_conf([tunnel("a")])
    for want in ("local_addrs = 10.0.1.1", "remote_addrs = 10.0.1.2", "local_ts = 10.1.0.0/24",
                 "remote_ts = 10.2.0.0/24", "mode = tunnel", "esp_proposals = aes256gcm16", "encap = no",
                 "mobike = no", f"proposals = {ike.IKE_PROPOSAL}", "secret = 0x" + "ab" * 32):
        assert want in conf, want
    # the other end sees the same association from its side
    other = ike.swanctl_conf([tunnel("b")])
    assert "local_addrs = 10.0.1.2" in other and "local_ts = 10.2.0.0/24" in other


def test_on_demand_the_initiator_waits_with_trap_policies_and_the_responder_does_not():
    assert "start_action = none" in ike.swanctl_conf([tunnel("a")])
    assert "start_action = trap" in ike.swanctl_conf([tunnel("a")], on_demand=True)
    assert "start_action = none" in ike.swanctl_conf([tunnel("b")], on_demand=True)  # it answers, it never asks


def test_the_daemon_keeps_its_socket_and_log_in_its_directory_and_gives_up_on_a_silent_peer_soon():
    conf = ike.strongswan_conf("/tmp/itb-abc123-ike-x/ns")
    assert "socket = unix:///tmp/itb-abc123-ike-x/ns/charon.vici" in conf
    assert "path = /tmp/itb-abc123-ike-x/ns/charon.log" in conf
    assert "install_routes = no" in conf and "stroke" not in conf
    timeout, base, tries = (ike.RETRANSMIT[k] for k in ("retransmit_timeout", "retransmit_base", "retransmit_tries"))
    assert sum(timeout * base ** k for k in range(tries + 1)) < 15  # strongSwan's default: 165 s
    assert "retransmit_timeout = 3\n" in conf and "retransmit_base = 1.5\n" in conf


def test_a_crowd_of_peers_at_one_daemon_waits_longer_before_retransmitting():
    assert ike.retransmit_settings(1) == ike.RETRANSMIT
    assert ike.retransmit_settings(100)["retransmit_timeout"] == pytest.approx(12.9)
    assert ike.retransmit_settings(200)["retransmit_timeout"] == pytest.approx(22.9)  # 0.1 s an answer
    assert "retransmit_timeout = 22.9\n" in ike.strongswan_conf("/tmp/x", crowd=200)


def test_the_cause_of_a_failure_is_its_most_telling_line():
    initiator = ("[IKE] initiating IKE_SA t0[1] to 10.0.1.2\n"
                 "[IKE] received AUTHENTICATION_FAILED notify error\n"
                 "initiate failed: establishing CHILD_SA 't0' failed\n")
    responder = "12:00:01 11[IKE] <t0|1> tried 1 shared key for '10.0.1.2' - '10.0.1.1', but MAC mismatched\n"
    assert ike.cause(initiator, responder) == "11[IKE] <t0|1> tried 1 shared key for '10.0.1.2' - '10.0.1.1', " \
                                              "but MAC mismatched"
    assert ike.cause(initiator) == "[IKE] received AUTHENTICATION_FAILED notify error"
    assert ike.cause("all is well\n") is None


def test_a_sweep_keyed_by_ike_refuses_a_profile_ike_cannot_negotiate_and_keeps_its_keying_in_argv():
    with pytest.raises(ValueError, match="with --keying ike: profile 3des-cbc-sha1\\+ah-md5"):
        SweepSpec(profiles=("3des-cbc-sha1+ah-md5",), keying="ike")
    with pytest.raises(ValueError, match="keying must be one of static, ike"):
        SweepSpec(keying="pluto")
    spec = SweepSpec(keying="ike")
    assert SweepSpec.from_json(spec.to_json()) == spec and SweepSpec().keying == "static"


def test_a_run_directory_keyed_one_way_is_not_resumed_keyed_the_other(tmp_path):
    with rundir.open_results(tmp_path) as f:
        rundir.append(f, Record(profile="none", size_bytes=1460, rate_mbit=10.0, goodput_mbps=9.0).to_json())
    with pytest.raises(Refused, match="holds points keyed static; measure keyed ike into another run directory"):
        run_sweep(SweepSpec(keying="ike"), str(tmp_path))


def test_rsa_keying_names_each_end_by_its_namespace_and_its_public_key_file_and_holds_no_secret():
    specs = [tunnel("a").spec]
    a, b = ike.tunnels_for(specs, "pubkey")
    assert a.psk == b.psk == "" and a.auth == "pubkey"
    conf = ike.swanctl_conf([a])
    for want in ("auth = pubkey", "id = itb-abc123-gw1@testbed", "pubkeys = itb-abc123-gw1.pem",
                 "id = itb-abc123-gw2@testbed", "pubkeys = itb-abc123-gw2.pem"):
        assert want in conf, want
    assert "auth = psk" not in conf and "secret =" not in conf
    # local first, then remote: each round names its own end
    mine, theirs = conf.index("pubkeys = itb-abc123-gw1.pem"), conf.index("pubkeys = itb-abc123-gw2.pem")
    assert mine < conf.index("remote {") < theirs
    psk_a, _ = ike.tunnels_for(specs)
    assert len(psk_a.psk) == 64 and "id = 10.0.1.1" in ike.swanctl_conf([psk_a])
    with pytest.raises(ValueError, match="auth must be one of psk, pubkey"):
        ike.tunnels_for(specs, "cert")


def test_each_keying_says_whether_and_how_it_is_negotiated():
    assert [k for k in ike.KEYINGS if ike.is_ike(k)] == ["ike", "ike-rsa"]
    assert (ike.auth_of("ike"), ike.auth_of("ike-rsa")) == ("psk", "pubkey")
    with pytest.raises(ValueError, match="keying must be one of ike, ike-rsa, not 'static'"):
        ike.auth_of("static")
    spec = SweepSpec(keying="ike-rsa")
    assert SweepSpec.from_json(spec.to_json()) == spec
    with pytest.raises(ValueError, match="with --keying ike-rsa: profile 3des-cbc-sha1\\+ah-md5"):
        SweepSpec(profiles=("3des-cbc-sha1+ah-md5",), keying="ike-rsa")


def test_rsa_keys_go_to_their_daemons_owner_only(tmp_path):
    specs = [tunnel("a").spec]
    daemons = []
    for t in ike.tunnels_for(specs, "pubkey"):
        d = ike.Daemon.__new__(ike.Daemon)  # the files alone: no daemon starts
        d.ns, d.dir, d.tunnels = t.me.ns, str(tmp_path / t.me.ns), (t,)
        for sub in ("rsa", "pubkey"):
            (tmp_path / t.me.ns / "swanctl" / sub).mkdir(parents=True)
        daemons.append(d)
    ike.make_rsa_keys(daemons)
    gw1, gw2 = (tmp_path / d.ns / "swanctl" for d in daemons)
    assert sorted(p.name for p in (gw1 / "pubkey").iterdir()) == ["itb-abc123-gw1.pem", "itb-abc123-gw2.pem"]
    assert (gw1 / "pubkey" / "itb-abc123-gw2.pem").read_bytes() == (gw2 / "pubkey" / "itb-abc123-gw2.pem").read_bytes()
    assert (gw1 / "rsa" / "itb-abc123-gw1.pem").read_text().startswith("-----BEGIN RSA PRIVATE KEY-----")
    assert (gw1 / "rsa" / "itb-abc123-gw1.pem").read_text() != (gw2 / "rsa" / "itb-abc123-gw2.pem").read_text()
    assert all(p.stat().st_mode & 0o077 == 0 for p in tmp_path.rglob("*.pem"))

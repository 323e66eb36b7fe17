"""Profiles and association plans, without a kernel."""
import pytest

from ipsec.plan import AssociationSpec, Endpoint, SpiPlanner, plan_association
from ipsec.profiles import CATALOG, catalog, parse_profile


@pytest.mark.parametrize("name,protocols", [
    ("none", ()), ("aes-gcm-256", ("esp",)), ("ah-md5", ("ah",)), ("ipcomp", ("comp",)),
    ("3des-cbc-sha1+ah-md5", ("esp", "ah")), ("ah-md5+3des-cbc-sha1", ("esp", "ah")),
    ("null-sha1+ipcomp", ("comp", "esp")),
])
def test_protocol_order_is_innermost_first_whatever_the_spelling(name, protocols):
    assert parse_profile(name).protocols == protocols


def test_profile_fields():
    p = parse_profile("aes-cbc-192-sha256")
    assert (p.crypt, p.crypt_key_bits, p.esp_auth, p.aead) == ("aes-cbc", 192, "hmac-sha256-128", None)
    g = parse_profile("AES-GCM-128-icv12")
    assert (g.name, g.aead, g.aead_icv_bits) == ("aes-gcm-128-icv12", "aes-gcm-128", 96)
    assert parse_profile("aes-gcm-256").aead_icv_bits is None  # the algorithm's default, 128


@pytest.mark.parametrize("bad,match", [
    ("aes-gcm-512", "AES-GCM key sizes"), ("aes-cbc-128", "needs an integrity algorithm"),
    ("des-cbc-sha1+aes-gcm-128", "two ESP parts"), ("", "must be a name"), ("ah-sha3", "unknown profile part"),
])
def test_bad_profiles_explain_themselves(bad, match):
    with pytest.raises(ValueError, match=match):
        parse_profile(bad)


def test_catalog_parses_and_covers_every_algorithm_of_the_seeds():
    names = {p.name for p, _ in catalog()}
    assert len(names) == len(CATALOG)
    used = set()
    for p, _ in catalog():
        used |= {p.aead, p.crypt, p.esp_auth, p.ah_auth} - {None}
        used |= {"deflate"} if p.ipcomp else set()
    assert {"aes-gcm-128", "aes-gcm-192", "aes-gcm-256", "aes-cbc", "3des-cbc", "des-cbc", "null",
            "hmac-sha1-96", "hmac-sha256-128", "hmac-md5-96", "deflate"} <= used


def ends(family=4, tunnel=False):
    if family == 4:
        a, b = ("198.51.100.1", "10.1.0.0/24") if tunnel else ("198.51.100.1", None), \
               ("198.51.100.2", "10.2.0.0/24") if tunnel else ("198.51.100.2", None)
    else:
        a, b = ("2001:db8::1", "2001:db8:1::/64") if tunnel else ("2001:db8::1", None), \
               ("2001:db8::2", "2001:db8:2::/64") if tunnel else ("2001:db8::2", None)
    return Endpoint("itb-aaaaaa-a", *a), Endpoint("itb-aaaaaa-b", *b)


def test_tunnel_bundle_puts_the_tunnel_on_the_innermost_transform():
    a, b = ends(tunnel=True)
    plan = plan_association(AssociationSpec("null-sha1+ipcomp", "tunnel", a, b, forward=True))
    modes = [(sa.proto, sa.mode, sa.src) for sa in plan.sas]
    assert modes == [("comp", "tunnel", "198.51.100.1"), ("esp", "transport", "198.51.100.1"),
                     ("comp", "tunnel", "198.51.100.2"), ("esp", "transport", "198.51.100.2")]
    out, inb, fwd = plan.policies_a
    assert (out.direction, out.selector.src, out.selector.dst) == ("out", "10.1.0.0/24", "10.2.0.0/24")
    assert (inb.direction, fwd.direction) == ("in", "fwd")
    assert [(t.proto, t.mode, t.src, t.dst, t.optional) for t in inb.templates] == [
        ("comp", "tunnel", "198.51.100.2", "198.51.100.1", True), ("esp", "transport", None, None, False)]
    assert not any(t.optional for t in out.templates)


def test_spis_and_reqids_never_collide_across_associations_of_a_run():
    planner = SpiPlanner()
    a, b = ends()
    plans = [plan_association(AssociationSpec(p, "transport", a, b), planner)
             for p in ("aes-gcm-256", "3des-cbc-sha1+ah-md5", "null-sha1+ipcomp")]
    spis = [(sa.proto == "comp", sa.spi) for pl in plans for sa in pl.sas]
    assert len(spis) == len(set(spis)) == 2 + 4 + 4
    assert len({pl.reqid for pl in plans}) == 3
    assert all(sa.spi >= 0x100 for pl in plans for sa in pl.sas)


def test_keys_are_fresh_and_of_the_right_length():
    a, b = ends(6)
    k1 = plan_association(AssociationSpec("aes-gcm-256", "transport", a, b)).sas
    k2 = plan_association(AssociationSpec("aes-gcm-256", "transport", a, b)).sas
    assert len(k1[0].aead_key) == 36 and k1[0].aead_key != k1[1].aead_key != k2[0].aead_key


def test_none_plans_nothing():
    a, b = ends()
    plan = plan_association(AssociationSpec("none", "tunnel", a, b))
    assert plan.sas == () and plan.policies_a == ()


@pytest.mark.parametrize("a,b,match", [
    (Endpoint("x-a", "198.51.100.1"), Endpoint("x-b", "2001:db8::2"), "must both be IPv4 or both IPv6"),
    (Endpoint("x-a", "198.51.100.1", "2001:db8:1::/64"), Endpoint("x-b", "198.51.100.2", "2001:db8:2::/64"),
     "IPv6 selectors .* with IPv4 endpoints"),
    (Endpoint("x-a", "198.51.100.1", "10.1.0.0/24"), Endpoint("x-b", "198.51.100.2"), "use tunnel mode"),
    (Endpoint("x-a", "198.51.100.1"), Endpoint("x-a", "198.51.100.2"), "its own"),
])
def test_bad_associations(a, b, match):
    with pytest.raises(ValueError, match=match):
        AssociationSpec("aes-gcm-256", "transport", a, b)

"""The algorithm catalog and the SA/policy specs: validation, keys, probe specs."""
from __future__ import annotations

import dataclasses

import pytest

from ipsec.algorithms import (
    ALGORITHMS,
    PROTOCOL_MODULES,
    Algorithm,
    algorithm_names,
    find_by_kernel_name,
    get_algorithm,
)
from ipsec.sa import (
    PolicySpec,
    SASpec,
    SelectorSpec,
    TemplateSpec,
    probe_spec,
    random_key,
)

KEY16 = bytes(range(16))
GCM256_KEY = bytes(36)


def esp(**overrides: object) -> SASpec:
    fields: dict[str, object] = dict(src="10.0.0.1", dst="10.0.0.2", proto="esp", spi=0x100,
                                     aead="aes-gcm-256", aead_key=GCM256_KEY)
    fields.update(overrides)
    return SASpec(**fields)  # type: ignore[arg-type]


# -- catalog ------------------------------------------------------------------------------
def test_catalog_names_and_kernel_names() -> None:
    table = {alg.name: (alg.kernel_name, alg.kind) for alg in ALGORITHMS}
    assert table == {
        "aes-gcm-128": ("rfc4106(gcm(aes))", "aead"),
        "aes-gcm-192": ("rfc4106(gcm(aes))", "aead"),
        "aes-gcm-256": ("rfc4106(gcm(aes))", "aead"),
        "aes-ccm-128": ("rfc4309(ccm(aes))", "aead"),
        "aes-ccm-256": ("rfc4309(ccm(aes))", "aead"),
        "aes-gmac-128": ("rfc4543(gcm(aes))", "aead"),
        "aes-gmac-256": ("rfc4543(gcm(aes))", "aead"),
        "chacha20-poly1305": ("rfc7539esp(chacha20,poly1305)", "aead"),
        "aes-cbc": ("cbc(aes)", "crypt"),
        "aes-ctr": ("rfc3686(ctr(aes))", "crypt"),
        "3des-cbc": ("cbc(des3_ede)", "crypt"),
        "des-cbc": ("cbc(des)", "crypt"),
        "null": ("ecb(cipher_null)", "crypt"),
        "hmac-sha1-96": ("hmac(sha1)", "auth"),
        "hmac-sha256-128": ("hmac(sha256)", "auth"),
        "hmac-sha384-192": ("hmac(sha384)", "auth"),
        "hmac-sha512-256": ("hmac(sha512)", "auth"),
        "hmac-md5-96": ("hmac(md5)", "auth"),
        "deflate": ("deflate", "comp"),
    }


@pytest.mark.parametrize("name, key_bits, icv_bits, salt_bits", [
    ("aes-gcm-128", 160, 128, 32), ("aes-gcm-192", 224, 128, 32), ("aes-gcm-256", 288, 128, 32),
    ("aes-cbc", 128, 0, 0), ("3des-cbc", 192, 0, 0), ("des-cbc", 64, 0, 0), ("null", 0, 0, 0),
    ("hmac-sha1-96", 160, 96, 0), ("hmac-sha256-128", 256, 128, 0), ("hmac-md5-96", 128, 96, 0),
    ("aes-ccm-128", 152, 128, 24), ("aes-ccm-256", 280, 128, 24), ("aes-gmac-128", 160, 128, 32),
    ("chacha20-poly1305", 288, 128, 32), ("aes-ctr", 160, 0, 32), ("hmac-sha384-192", 384, 192, 0),
    ("hmac-sha512-256", 512, 256, 0),
])
def test_catalog_lengths(name: str, key_bits: int, icv_bits: int, salt_bits: int) -> None:
    alg = get_algorithm(name)
    assert (alg.key_bits, alg.icv_bits, alg.salt_bits) == (key_bits, icv_bits, salt_bits)


def test_catalog_cipher_geometry() -> None:
    geometry = {alg.name: (alg.block_bytes, alg.iv_bytes) for alg in ALGORITHMS if alg.kind in ("aead", "crypt")}
    assert geometry == {"aes-gcm-128": (1, 8), "aes-gcm-192": (1, 8), "aes-gcm-256": (1, 8),
                        "aes-ccm-128": (1, 8), "aes-ccm-256": (1, 8), "aes-gmac-128": (1, 8), "aes-gmac-256": (1, 8),
                        "chacha20-poly1305": (1, 8), "aes-ctr": (1, 8),
                        "aes-cbc": (16, 16), "3des-cbc": (8, 8), "des-cbc": (8, 8), "null": (1, 0)}
    assert get_algorithm("aes-gcm-128").icv_bits_allowed == (64, 96, 128)
    assert get_algorithm("aes-cbc").key_bits_allowed == (128, 192, 256)
    assert get_algorithm("aes-gcm-256").cipher_key_bits == 256


def test_every_algorithm_names_its_modules() -> None:
    for alg in ALGORITHMS:
        assert alg.modules, alg.name
    assert "gcm" in get_algorithm("aes-gcm-128").modules
    assert PROTOCOL_MODULES["esp"] == {4: ("esp4",), 6: ("esp6",)}


def test_unknown_algorithm_lists_valid_names() -> None:
    with pytest.raises(ValueError) as info:
        get_algorithm("aes-gcm-512")
    for name in algorithm_names():
        assert name in str(info.value)


def test_wrong_kind_lists_names_of_that_kind() -> None:
    with pytest.raises(ValueError, match="unknown auth algorithm 'aes-cbc'; valid names: "
                                         "hmac-sha1-96, hmac-sha256-128, hmac-sha384-192, hmac-sha512-256, "
                                         "hmac-md5-96$"):
        get_algorithm("aes-cbc", kind="auth")


def test_catalog_entries_are_checked() -> None:
    with pytest.raises(ValueError, match="kind"):
        Algorithm(name="x", kernel_name="x", kind="cipher", key_bits=0, key_bits_allowed=(0,))
    with pytest.raises(ValueError, match="key_bits 8 not in"):
        Algorithm(name="x", kernel_name="x", kind="crypt", key_bits=8, key_bits_allowed=(16,))


def test_find_by_kernel_name_tells_gcm_sizes_apart() -> None:
    assert find_by_kernel_name("rfc4106(gcm(aes))", "aead", 224).name == "aes-gcm-192"
    assert find_by_kernel_name("hmac(sha256)", "auth", 256, 96) is None  # not RFC 4868
    assert find_by_kernel_name("cbc(aes)", "aead") is None


# -- SASpec ------------------------------------------------------------------------------
def test_algorithm_names_become_catalog_objects() -> None:
    spec = esp()
    assert spec.aead is get_algorithm("aes-gcm-256")
    assert spec.aead_icv_bits == 128 and spec.replay_window == 32 and spec.family == 4
    assert SASpec(src="10.0.0.1", dst="10.0.0.2", proto="comp", spi=2, comp="deflate").replay_window == 0


@pytest.mark.parametrize("overrides, message", [
    ({"src": "10.0.0.300"}, "src must be an IPv4 or IPv6 address"),
    ({"dst": "10.0.0.0/24"}, "dst must be an IPv4 or IPv6 address"),
    ({"dst": "fd00::2"}, "src and dst must both be IPv4 or both IPv6"),
    ({"proto": "ipcomp"}, "proto must be one of esp, ah, comp, not 'ipcomp'"),
    ({"spi": 0xFF}, r"spi must be an integer in 256..4294967295 \(SPIs 1..255 are reserved"),
    ({"spi": 2 ** 32}, "spi must be an integer in 256..4294967295"),
    ({"spi": True}, "spi must be an integer"),
    ({"mode": "beet"}, "mode must be one of transport, tunnel, not 'beet'"),
    ({"reqid": -1}, "reqid must be an integer in 0..4294967295"),
    ({"aead": "aes-gcm-512"}, "aead: unknown aead algorithm 'aes-gcm-512'; valid names: aes-gcm-128"),
    ({"aead": get_algorithm("aes-cbc")}, "aead must be an algorithm of kind aead, not 'aes-cbc' \\(crypt\\)"),
    ({"aead_key": bytes(32)}, r"aead_key for aes-gcm-256 must be 36 bytes long \(key plus 4-byte salt\), not 32"),
    ({"aead_key": "00" * 36}, "aead_key must be bytes, not str"),
    ({"aead_icv_bits": 32}, "aead_icv_bits for aes-gcm-256 must be one of 64, 96, 128, not 32"),
    ({"replay_window": 40000}, "replay_window must be an integer in 0..32768"),
    ({"auth": "hmac-sha1-96", "auth_key": bytes(20)},
     "an SA with proto esp takes algorithms aead or crypt or crypt\\+auth, not aead\\+auth"),
    ({"aead": None, "aead_key": b""}, "an SA with proto esp takes algorithms .*, not none"),
    ({"aead": None, "aead_key": b"", "crypt": "aes-cbc", "crypt_key": bytes(15)},
     "crypt_key for aes-cbc must be 16, 24, 32 bytes long, not 15"),
    ({"auth_key": bytes(20)}, "auth_key given without auth"),
    ({"selector": "10.1.0.0/24"}, "selector must be a SelectorSpec"),
    ({"selector": SelectorSpec(src="fd01::/64", dst="fd02::/64")},
     "selector of a transport-mode SA must be IPv4 like src/dst, not IPv6"),
])
def test_sa_spec_rejects(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        esp(**overrides)


def test_sa_spec_protocol_specific_rules() -> None:
    with pytest.raises(ValueError, match="an SA with proto ah takes algorithms auth, not aead"):
        esp(proto="ah")
    with pytest.raises(ValueError, match=r"spi must be an integer in 1..65535 \(the IPComp CPI"):
        SASpec(src="10.0.0.1", dst="10.0.0.2", proto="comp", spi=0x10000, comp="deflate")
    # A tunnel may carry the other IP version inside.
    spec = esp(mode="tunnel", selector=SelectorSpec(src="fd01::/64", dst="fd02::/64"))
    assert spec.selector.family == 6


def test_sa_spec_is_frozen_and_hides_keys() -> None:
    spec = esp(aead_key=b"S" * 36)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.spi = 0x200  # type: ignore[misc]
    assert "SSSS" not in repr(spec) and "0x00000100" in repr(spec)


def test_sa_spec_normalizes_addresses() -> None:
    assert esp(src="fd00:0::1", dst="fd00::0:2").src == "fd00::1"


# -- selectors, templates, policies ---------------------------------------------------------
def test_selector_normalizes() -> None:
    sel = SelectorSpec(src="10.0.0.1", dst="10.2.0.0/16", proto="udp", dport=4500)
    assert (sel.src, sel.dst, sel.proto, sel.family) == ("10.0.0.1/32", "10.2.0.0/16", 17, 4)


@pytest.mark.parametrize("kwargs, message", [
    ({"src": "10.1.0.1/24"}, "selector.src must be an IPv4/IPv6 address or prefix .* no host bits"),
    ({"dst": "fd00::/64"}, "selector.src and selector.dst must both be IPv4 or both IPv6"),
    ({"proto": "quic"}, "selector.proto must be a number 0..255 or one of any, icmp, tcp"),
    ({"proto": 256}, "selector.proto must be an integer in 0..255"),
    ({"dport": 80}, "selector.dport needs selector.proto tcp, udp, sctp or udplite, not 0"),
    ({"proto": "tcp", "sport": 70000}, "selector.sport must be an integer in 0..65535"),
])
def test_selector_rejects(kwargs: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"src": "10.1.0.0/24", "dst": "10.2.0.0/24"}
    fields.update(kwargs)
    with pytest.raises(ValueError, match=message):
        SelectorSpec(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs, message", [
    ({"mode": "tunnel"}, "template.src and template.dst .* are required in tunnel mode"),
    ({"src": "10.0.0.1"}, "tunnel endpoints: give them only with template.mode 'tunnel'"),
    ({"mode": "tunnel", "src": "10.0.0.1", "dst": "fd00::1"}, "template.src and template.dst must both"),
    ({"proto": "gre"}, "template.proto must be one of esp, ah, comp"),
    ({"optional": 1}, "template.optional must be True or False"),
])
def test_template_rejects(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TemplateSpec(**kwargs)  # type: ignore[arg-type]


def test_policy_spec() -> None:
    sel = SelectorSpec(src="10.1.0.0/24", dst="10.2.0.0/24")
    tmpl = TemplateSpec(mode="tunnel", src="10.0.0.1", dst="10.0.0.2", reqid=1)
    policy = PolicySpec(selector=sel, direction="out", templates=[tmpl])
    assert policy.templates == (tmpl,) and policy.family == 4
    assert hash(policy) == hash(PolicySpec(selector=sel, direction="out", templates=(tmpl,)))
    with pytest.raises(ValueError, match="direction must be one of in, out, fwd, not 'forward'"):
        PolicySpec(selector=sel, direction="forward")
    with pytest.raises(ValueError, match="action must be one of allow, block"):
        PolicySpec(selector=sel, direction="out", action="drop")
    with pytest.raises(ValueError, match="action 'block' takes no templates"):
        PolicySpec(selector=sel, direction="out", action="block", templates=[tmpl])
    with pytest.raises(ValueError, match="templates must hold TemplateSpec"):
        PolicySpec(selector=sel, direction="out", templates=[{"proto": "esp"}])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="selector must be a SelectorSpec"):
        PolicySpec(selector="10.1.0.0/24", direction="out")  # type: ignore[arg-type]


# -- keys and probes ---------------------------------------------------------------------------
@pytest.mark.parametrize("alg", ALGORITHMS, ids=lambda a: a.name)
def test_random_key_has_the_kernel_length(alg: Algorithm) -> None:
    assert len(random_key(alg)) * 8 == alg.key_bits
    assert len(random_key(alg.name)) * 8 == alg.key_bits


def test_random_key_is_random_and_checks_length() -> None:
    assert random_key("aes-cbc") != random_key("aes-cbc")
    assert len(random_key("aes-cbc", 256)) == 32
    with pytest.raises(ValueError, match="key_bits for aes-cbc must be one of 128, 192, 256, not 512"):
        random_key("aes-cbc", 512)


@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("alg", ALGORITHMS, ids=lambda a: a.name)
def test_probe_spec_exercises_exactly_one_algorithm(alg: Algorithm, family: int) -> None:
    spec = probe_spec(alg.name, family=family)
    assert spec.family == family and spec.mode == "transport"
    assert getattr(spec, alg.kind) is alg
    partners = [a.name for a in spec.algorithms if a is not alg]
    expected_proto = {"aead": "esp", "crypt": "esp", "auth": "esp", "comp": "comp"}[alg.kind]
    assert spec.proto == expected_proto
    assert partners == (["null"] if alg.kind == "auth" else [])


def test_probe_spec_for_ah_and_bad_input() -> None:
    spec = probe_spec("hmac-sha256-128", proto="ah")
    assert (spec.proto, spec.algorithms) == ("ah", (get_algorithm("hmac-sha256-128"),))
    with pytest.raises(ValueError, match="proto for crypt algorithm aes-cbc must be one of esp, not 'ah'"):
        probe_spec("aes-cbc", proto="ah")
    with pytest.raises(ValueError, match="family must be 4 or 6"):
        probe_spec("aes-cbc", family=5)
    with pytest.raises(ValueError, match="valid names"):
        probe_spec("chacha20")


def test_the_modern_ciphers_parse_key_and_propose_as_their_rfcs_say():
    from ipsec.algorithms import get_algorithm
    from ipsec.ike import child_proposals
    from ipsec.profiles import parse_profile

    # the key handed to the kernel: the cipher's key and its salt or nonce (RFC 4309: 3 bytes; the others 4)
    for name, key_bytes in (("aes-ccm-128", 19), ("aes-ccm-256", 35), ("chacha20-poly1305", 36),
                            ("aes-gmac-128", 20), ("aes-gmac-256", 36)):
        assert get_algorithm(name).key_bytes == key_bytes
    ctr = parse_profile("aes-ctr-256-sha512")
    assert ctr.crypt_key_bits == 288 and ctr.describe() == "ESP AES-CTR-256 + HMAC-SHA512-256"
    assert child_proposals(parse_profile("aes-ccm-256-icv8")) == {"esp_proposals": "aes256ccm8"}
    assert child_proposals(parse_profile("chacha20-poly1305")) == {"esp_proposals": "chacha20poly1305"}
    assert child_proposals(parse_profile("aes-gmac-128")) == {"esp_proposals": "aes128gmac"}
    assert child_proposals(ctr) == {"esp_proposals": "aes256ctr-sha512"}
    assert child_proposals(parse_profile("ah-sha384")) == {"ah_proposals": "sha384"}
    with pytest.raises(ValueError, match="ICV is 16 bytes, not 8"):
        parse_profile("chacha20-poly1305-icv8")
    with pytest.raises(ValueError, match="the ESP ciphers are"):
        parse_profile("aes-ctr-160-sha1")

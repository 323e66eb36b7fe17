"""Wire verification (ipsec.wire) on packets a real Linux kernel encrypted.

``fixtures/wire/`` holds pcaps captured on a transit bridge between two namespaces inside
User-Mode Linux (Linux 6.1) while ``ping -p 6974622d77697265`` ("itb-wire") ran through
SAs installed with iproute2, and ``cases.json`` with the exact ``ip xfrm state add``
lines (fixed test keys), the ping command and the kernel's own ``ip -s xfrm state``
dump; ``fixtures/wire/capture.py`` re-creates them.  The SA specs used here are parsed
from those ``ip`` lines, so the keys are the ones the kernel encrypted with, and the
expected plaintext is what ping sent: a scapy encrypt/decrypt round trip alone could
share a bug with itself, a kernel ciphertext cannot.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import stat
from pathlib import Path
from typing import Any

import pytest
from scapy.layers.inet import ICMP, IP
from scapy.layers.inet6 import (
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    ICMPv6ND_NS,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    PadN,
)
from scapy.layers.ipsec import AH, ESP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw
from scapy.utils import rdpcap

from ipsec import wire
from ipsec.algorithms import find_by_kernel_name, get_algorithm
from ipsec.sa import SASpec

HERE = Path(__file__).parent / "fixtures" / "wire"
CASES: dict[str, dict[str, Any]] = json.loads((HERE / "cases.json").read_text())
IPSEC_CASES = sorted(name for name, case in CASES.items() if case["proto"])
ESP_CASES = sorted(name for name in IPSEC_CASES if CASES[name]["proto"] == "esp")
TRANSIT_IPSEC_CASES = [n for n in IPSEC_CASES if CASES[n]["capture_at"] == "transit"]


def parse_state_add(line: str) -> SASpec:
    """An ``ip xfrm state add ...`` line as an SASpec (the subset capture.py writes)."""
    args = shlex.split(line)
    assert args[:4] == ["ip", "xfrm", "state", "add"], line
    args = args[4:]
    kw: dict[str, Any] = {}
    i = 0
    while i < len(args):
        word = args[i]
        if word in ("src", "dst", "proto", "mode"):
            kw[word] = args[i + 1]
            i += 2
        elif word in ("spi", "reqid"):
            kw[word] = int(args[i + 1], 0)
            i += 2
        elif word == "aead":
            key = bytes.fromhex(args[i + 2][2:])
            kw.update(aead=find_by_kernel_name(args[i + 1], "aead", key_bits=len(key) * 8),
                      aead_key=key, aead_icv_bits=int(args[i + 3]))
            i += 4
        elif word == "enc":
            key = bytes.fromhex(args[i + 2][2:]) if args[i + 2] else b""
            kw.update(crypt=find_by_kernel_name(args[i + 1], "crypt", key_bits=len(key) * 8), crypt_key=key)
            i += 3
        elif word == "auth-trunc":
            kw.update(auth=find_by_kernel_name(args[i + 1], "auth", icv_bits=int(args[i + 3])),
                      auth_key=bytes.fromhex(args[i + 2][2:]))
            i += 4
        else:
            raise AssertionError(f"unexpected word {word!r} in {line}")
    return SASpec(**kw)


def specs(name: str) -> list[SASpec]:
    return [parse_state_add(line) for line in CASES[name]["commands"]["a"] if " state add " in line]


def packets(name: str):
    return rdpcap(str(HERE / CASES[name]["pcap"]))


PATTERN = bytes.fromhex(CASES["plain_v4"]["ping_pattern"])
assert PATTERN == b"itb-wire"


def echo_kind(pkt) -> str:
    if ICMPv6EchoRequest in pkt or (ICMP in pkt and pkt[ICMP].type == 8):
        return "request"
    if ICMPv6EchoReply in pkt or (ICMP in pkt and pkt[ICMP].type == 0):
        return "reply"
    return "other"


# -- the fixtures are what they claim -----------------------------------------------------

@pytest.mark.parametrize("name", IPSEC_CASES)
def test_fixture_keys_are_the_ones_the_kernel_held(name):
    """The kernel's own dump (ip -s xfrm state) shows the keys of the stored add lines."""
    dump = CASES[name]["ip_s_xfrm_state_a"]
    sas = specs(name)
    assert {s.spi for s in sas} == set(CASES[name]["spis"] + CASES[name].get("inner_spis", []))
    for sa in sas:
        assert f"proto {sa.proto} spi 0x{sa.spi:08x}" in dump
        for key in (sa.aead_key, sa.crypt_key, sa.auth_key):
            if key:
                assert "0x" + key.hex() in dump
    assert CASES[name]["kernel"].startswith("6.")


# -- decrypt: kernel ciphertexts ------------------------------------------------------------

@pytest.mark.parametrize("name", IPSEC_CASES)
def test_decrypt_recovers_the_ping_the_kernel_encrypted(name):
    case = CASES[name]
    a, b = case["endpoints"]
    spi_ab, spi_ba = case["spis"]
    caught = packets(name)
    out = wire.decrypt(caught, specs(name))
    ipsec_layer = ESP if case["proto"] == "esp" else AH
    assert [d.index for d in out] == [i for i, p in enumerate(caught) if ipsec_layer in p]
    echoes = [d for d in out if echo_kind(d.inner) != "other"]
    requests = [d for d in echoes if echo_kind(d.inner) == "request"]
    replies = [d for d in echoes if echo_kind(d.inner) == "reply"]
    assert len(requests) == len(replies) == case["ping_count"]
    for d in requests:
        assert (d.proto, d.spi, d.src, d.dst, d.mode) == (case["proto"], spi_ab, a, b, case["mode"])
    for d in replies:
        assert (d.spi, d.src, d.dst) == (spi_ba, b, a)
    for d in echoes:
        inner_l3 = d.inner[IP] if case["family"] == 4 else d.inner[IPv6]
        # transport: the original header; tunnel (host to host here): the inner packet
        assert {inner_l3.src, inner_l3.dst} == {a, b} and inner_l3.src == d.src
        data = wire.echo_data(d.inner)
        # Linux ping: a 16-byte timestamp, then the -p pattern repeated to -s bytes
        assert len(data) == case["ping_size"]
        assert data[16:] == (PATTERN * 8)[:case["ping_size"] - 16]
        if "inner_proto" in case:  # AH over ESP: both removed, outermost first
            inner_spi = dict(zip(case["spis"], case["inner_spis"], strict=True))[d.spi]
            assert d.layers == ((case["proto"], d.spi), (case["inner_proto"], inner_spi))
        else:
            assert d.layers == ((case["proto"], d.spi),)
    # sequence numbers count per SA from 1
    assert [d.seq for d in requests] == list(range(1, case["ping_count"] + 1))


@pytest.mark.parametrize("name", IPSEC_CASES)
def test_decrypted_echo_checksums_are_right(name):
    """The ICMP checksum covers every payload byte: decrypted bytes are exactly the sent ones."""
    for d in wire.decrypt(packets(name), specs(name)):
        pkt = d.inner
        if ICMP in pkt:
            sent = pkt[ICMP].chksum
            del pkt[ICMP].chksum
            assert IP(bytes(pkt))[ICMP].chksum == sent
        for layer in (ICMPv6EchoRequest, ICMPv6EchoReply):
            if layer in pkt:
                sent = pkt[layer].cksum
                del pkt[layer].cksum
                assert IPv6(bytes(pkt))[layer].cksum == sent


@pytest.mark.parametrize("name", ESP_CASES)
def test_scapy_encrypts_byte_for_byte_like_the_kernel(name):
    """Given the kernel's IV and sequence number, scapy_sa re-creates the kernel's ESP bytes.

    (AH is left out: Linux pads AH to 8 bytes for IPv4 too, scapy to 4, so the headers
    differ; the AH case is covered by decrypt verifying the kernel's ICV.)
    """
    caught = packets(name)
    by_spi = {s.spi: s for s in specs(name)}
    for d in wire.decrypt(caught, list(by_spi.values())):
        sa = wire.scapy_sa(by_spi[d.spi])
        kernel_esp = caught[d.index][ESP]
        iv = bytes(kernel_esp.data[:sa.crypt_algo.iv_size]) if sa.crypt_algo.iv_size else None
        again = sa.encrypt(d.inner, seq_num=d.seq, iv=iv)
        assert bytes(again[ESP]) == bytes(kernel_esp)


@pytest.mark.parametrize("name", ESP_CASES)
def test_only_the_null_cipher_shows_the_payload_on_the_wire(name):
    on_wire = b"".join(bytes(p[ESP]) for p in packets(name) if ESP in p)
    null_cipher = specs(name)[0].crypt is not None and specs(name)[0].crypt.name == "null"
    assert (PATTERN * 2 in on_wire) == null_cipher


def _with_key(spec: SASpec, field: str) -> SASpec:
    key = bytearray(getattr(spec, field))
    key[0] ^= 0x01
    return dataclasses.replace(spec, **{field: bytes(key)})


@pytest.mark.parametrize("name, field, which", [
    ("esp_gcm256_transport_v4", "aead_key", 0),
    ("esp_cbc128_sha1_tunnel_v6", "auth_key", 0),
    ("esp_3des_md5_tunnel_v4", "auth_key", 0),
    ("esp_null_sha1_transport_v6", "auth_key", 0),
    ("ah_sha256_transport_v4", "auth_key", 0),
    ("ah_esp_3des_sha1_transport_v4", "auth_key", 2),  # the outer AH a -> b
    ("ah_esp_3des_sha1_transport_v4", "auth_key", 0),  # the inner ESP a -> b
])
def test_a_wrong_key_is_an_integrity_error_naming_the_spi(name, field, which):
    sas = specs(name)
    wrong = sas[which]
    assert wrong.src == CASES[name]["endpoints"][0]  # a -> b: the first IPsec packet's direction
    sas[which] = _with_key(wrong, field)
    with pytest.raises(wire.DecryptError) as err:
        wire.decrypt(packets(name), sas)
    assert (err.value.spi, err.value.proto) == (wrong.spi, wrong.proto)
    assert f"{wrong.proto.upper()} SPI 0x{wrong.spi:08x}" in str(err.value)
    assert "integrity check failed" in str(err.value)


def test_the_salt_is_part_of_the_gcm_key():
    """Only the 4-byte RFC 4106 salt wrong: still an integrity failure."""
    good = specs("esp_gcm256_transport_v4")
    key = bytearray(good[0].aead_key)
    key[-1] ^= 0x01
    salted = dataclasses.replace(good[0], aead_key=bytes(key))
    with pytest.raises(wire.DecryptError, match="integrity"):
        wire.decrypt(packets("esp_gcm256_transport_v4"), [salted, good[1]])


def test_an_altered_ciphertext_is_an_integrity_error():
    caught = list(packets("esp_cbc128_sha1_tunnel_v6"))
    index = next(i for i, p in enumerate(caught) if ESP in p)
    raw = bytearray(bytes(caught[index]))
    raw[-20] ^= 0x80  # inside the ciphertext, before the 12-byte ICV
    caught[index] = Ether(bytes(raw))
    with pytest.raises(wire.DecryptError, match=rf"packet {index}: ESP SPI 0x00002002 .*integrity"):
        wire.decrypt(caught, specs("esp_cbc128_sha1_tunnel_v6"))


def test_no_matching_sa_names_the_spi_and_what_was_given():
    gcm = specs("esp_gcm256_transport_v4")
    with pytest.raises(wire.DecryptError, match=r"ESP SPI 0x00001002 192\.0\.2\.2 -> 192\.0\.2\.1: no SA") as err:
        wire.decrypt(packets("esp_gcm256_transport_v4"), gcm[:1])
    assert err.value.spi == 0x1002 and err.value.proto == "esp"
    # same SPI, other destination: not the packet's SA
    moved = dataclasses.replace(gcm[1], dst="192.0.2.9", src="192.0.2.1")
    with pytest.raises(wire.DecryptError, match="no SA"):
        wire.decrypt(packets("esp_gcm256_transport_v4"), [gcm[0], moved])


def test_plaintext_is_skipped_by_decrypt():
    assert wire.decrypt(packets("plain_v4"), []) == []


def test_decrypt_builds_only_the_sas_it_uses():
    """An SA scapy cannot handle fails decrypt only when a packet needs it."""
    gcm = specs("esp_gcm256_transport_v4")
    unused = SASpec(src="192.0.2.7", dst="192.0.2.8", proto="esp", spi=0x999, aead="aes-gcm-256",
                    aead_key=bytes(36), aead_icv_bits=64)
    comp = SASpec(src="192.0.2.1", dst="192.0.2.2", proto="comp", spi=0x1234, comp="deflate")
    assert len(wire.decrypt(packets("esp_gcm256_transport_v4"), gcm + [unused, comp])) == 4
    short = dataclasses.replace(gcm[0], aead_icv_bits=64)
    with pytest.raises(ValueError, match="64-bit ICV"):
        wire.decrypt(packets("esp_gcm256_transport_v4"), [short, gcm[1]])


# -- scapy_sa -----------------------------------------------------------------------------

def test_scapy_sa_maps_each_algorithm_to_scapys_name():
    gcm = SASpec(src="192.0.2.1", dst="192.0.2.2", proto="esp", spi=0x100, aead="aes-gcm-128",
                 aead_key=bytes(range(20)))
    sa = wire.scapy_sa(gcm)
    assert sa.crypt_algo.name == "AES-GCM" and sa.auth_algo.name == "NULL"
    assert sa.crypt_key == bytes(range(16)) and sa.crypt_salt == bytes(range(16, 20))
    assert sa.tunnel_header is None
    for crypt, scapy_name in (("aes-cbc", "AES-CBC"), ("3des-cbc", "3DES"), ("des-cbc", "DES"), ("null", "NULL")):
        alg = get_algorithm(crypt)
        for auth, auth_name in (("hmac-sha1-96", "HMAC-SHA1-96"), ("hmac-sha256-128", "SHA2-256-128"),
                                ("hmac-md5-96", "HMAC-MD5-96")):
            spec = SASpec(src="2001:db8::1", dst="2001:db8::2", proto="esp", spi=0x200, mode="tunnel",
                          crypt=alg, crypt_key=bytes(alg.key_bytes), auth=auth,
                          auth_key=bytes(get_algorithm(auth).key_bytes))
            sa = wire.scapy_sa(spec)
            assert (sa.crypt_algo.name, sa.auth_algo.name) == (scapy_name, auth_name)
            assert isinstance(sa.tunnel_header, IPv6)
            assert (sa.tunnel_header.src, sa.tunnel_header.dst) == ("2001:db8::1", "2001:db8::2")
    ah = SASpec(src="192.0.2.1", dst="192.0.2.2", proto="ah", spi=0x300, mode="tunnel", auth="hmac-md5-96",
                auth_key=bytes(16))
    sa = wire.scapy_sa(ah)
    assert sa.proto is AH and sa.auth_algo.name == "HMAC-MD5-96" and isinstance(sa.tunnel_header, IP)


@pytest.mark.parametrize("icv_bits", [64, 96])
def test_scapy_sa_refuses_short_gcm_icvs(icv_bits):
    # scapy's AES-GCM (cryptography's AESGCM) always writes and expects 16-byte tags, so a
    # scapy-only round trip "works" with an 8-byte ICV while the kernel's packets would not
    # decrypt: refuse instead of misreading them.
    spec = SASpec(src="192.0.2.1", dst="192.0.2.2", proto="esp", spi=0x100, aead="aes-gcm-256",
                  aead_key=bytes(36), aead_icv_bits=icv_bits)
    with pytest.raises(ValueError, match=f"{icv_bits}-bit ICV.*128"):
        wire.scapy_sa(spec)


def test_scapy_sa_refuses_ipcomp():
    spec = SASpec(src="192.0.2.1", dst="192.0.2.2", proto="comp", spi=0x1234, comp="deflate")
    with pytest.raises(ValueError, match="IPComp"):
        wire.scapy_sa(spec)


# -- classify -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", TRANSIT_IPSEC_CASES)
def test_classify_kernel_ipsec_captures_have_no_leaks(name):
    case = CASES[name]
    report = wire.classify(packets(name), case["endpoints"], case["proto"])
    assert report.ok, report.describe()
    assert report.counts[case["proto"]] == report.total - report.counts["nd"] >= 2 * case["ping_count"]
    assert report.spis == {case["proto"]: tuple(sorted(case["spis"]))}
    # the same capture against the wrong expectation: every packet is flagged
    other = "ah" if case["proto"] == "esp" else "esp"
    wrong = wire.classify(packets(name), case["endpoints"], other)
    assert len(wrong.leaks) == report.total and not wrong.ok


def test_classify_flags_plaintext_icmp_between_endpoints():
    report = wire.classify(packets("plain_v4"), ("192.0.2.1", "192.0.2.2"), {"esp"})
    assert not report.ok
    assert [echo_kind(packets("plain_v4")[leak.index]) for leak in report.leaks] == \
        ["request", "reply", "request", "reply"]
    assert {leak.protocol for leak in report.leaks} == {1}
    assert report.leaks[0].src == "192.0.2.1" and report.leaks[1].src == "192.0.2.2"
    assert report.counts == {"esp": 0, "ah": 0, "comp": 0, "wireguard": 0, "nd": 0, "other": 4}
    # ARP is not IP traffic between the endpoints: counted apart, never a leak
    assert report.non_ip == sum(ARP in p for p in packets("plain_v4")) == 2
    assert "4 LEAKED" in report.describe()


def test_neighbour_discovery_is_not_a_leak():
    caught = packets("plain_v6")
    report = wire.classify(caught, ("2001:db8::1", "2001:db8::2"), "esp")
    # the unicast neighbour advertisement b -> a is between the endpoints but is ND
    assert report.counts["nd"] == 1
    assert [echo_kind(caught[leak.index]) for leak in report.leaks] == ["request", "reply"] * 2
    assert {leak.protocol for leak in report.leaks} == {58}
    # the multicast solicitation (and any MLD report) is not between the endpoints at all
    between = {"2001:db8::1", "2001:db8::2"}
    assert report.unrelated == sum({p[IPv6].src, p[IPv6].dst} != between for p in caught if IPv6 in p) >= 1


def test_endpoint_capture_of_tunnel_mode_shows_decapsulated_copies():
    """Why classify wants a transit interface: see the module docstring."""
    name = "esp_3des_md5_tunnel_v4_at_endpoint"
    caught = packets(name)
    report = wire.classify(caught, CASES[name]["endpoints"], "esp")
    decrypted = {d.index: d for d in wire.decrypt(caught, specs(name))}
    assert len(report.leaks) == CASES[name]["ping_count"]
    for leak in report.leaks:
        # each "leak" is byte for byte the inner packet of the ESP packet just before it
        assert bytes(caught[leak.index][IP]) == bytes(decrypted[leak.index - 1].inner)


def _eth(l3):
    return Ether(bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / l3))


def test_classify_walks_ipv6_extension_headers_and_reads_spis():
    a, b = "2001:db8::1", "2001:db8::2"
    frames = [
        # a 24-byte destination options header (length field 2) before ESP
        _eth(IPv6(src=a, dst=b) / IPv6ExtHdrDestOpt(options=[PadN(optdata=b"\x00" * 20)])
             / ESP(spi=0x1111, seq=1, data=b"x" * 32)),
        _eth(IPv6(src=b, dst=a) / IPv6ExtHdrFragment(offset=0, m=1) / ESP(spi=0x2222, seq=1, data=b"y" * 32)),
        # a later fragment carries no ESP header: counted as ESP, no SPI read
        _eth(IPv6(src=b, dst=a) / IPv6ExtHdrFragment(offset=10, nh=50) / Raw(b"\x00\x00\x99\x99" + b"z" * 20)),
        _eth(IPv6(src=a, dst=b) / IPv6ExtHdrHopByHop() / ICMPv6ND_NS(tgt=b)),
        _eth(IPv6(src=a, dst=b) / IPv6ExtHdrHopByHop() / ICMPv6EchoRequest(data=PATTERN)),
        _eth(IPv6(src="2001:db8::3", dst=b) / ICMPv6EchoRequest()),
    ]
    report = wire.classify(frames, (a, b), "esp")
    assert report.counts == {"esp": 3, "ah": 0, "comp": 0, "wireguard": 0, "nd": 1, "other": 1}
    assert report.spis == {"esp": (0x1111, 0x2222)}
    assert [leak.index for leak in report.leaks] == [4] and report.unrelated == 1


def test_classify_ipcomp_cpi_prefixes_and_no_expected_protocol():
    frames = [
        IP(src="10.1.0.5", dst="10.2.0.7", proto=108) / Raw(b"\x04\x00\x12\x34" + b"c" * 40),
        IP(src="10.2.0.7", dst="10.1.0.5") / ICMP(),
        IP(src="10.3.0.1", dst="10.1.0.5") / ICMP(),
    ]
    report = wire.classify(frames, ("10.1.0.0/24", "10.2.0.0/24"), ["comp", "esp"])
    assert report.counts["comp"] == 1 and report.spis == {"comp": (0x1234,)}
    assert [leak.index for leak in report.leaks] == [1] and report.unrelated == 1
    # between protected subnets nothing may cross the transit link in clear
    assert len(wire.classify(frames, ("10.1.0.0/24", "10.2.0.0/24"), ()).leaks) == 2


def test_classify_rejects_bad_arguments():
    with pytest.raises(ValueError, match="esp, ah, comp"):
        wire.classify([], ("192.0.2.1", "192.0.2.2"), "gre")
    with pytest.raises(ValueError, match="both be IPv4 or both IPv6"):
        wire.classify([], ("192.0.2.1", "2001:db8::2"), "esp")
    with pytest.raises(ValueError, match="two addresses"):
        wire.classify([], "192.0.2.1", "esp")
    with pytest.raises(ValueError, match="not 'nonsense'"):
        wire.classify([], ("192.0.2.1", "nonsense"), "esp")


# -- Wireshark ----------------------------------------------------------------------------

_UAT_RECORD = re.compile(r'^"([^"\\]*)"(?:,"([^"\\]*)"){7}$')


def uat_fields(line: str) -> list[str]:
    """One esp_sa record split as Wireshark's uat_load.l reads it: 8 quoted fields."""
    assert _UAT_RECORD.match(line), line
    return re.findall(r'"([^"]*)"', line)


def test_esp_sa_lines_use_wiresharks_names():
    lines = wire.esp_sa_lines(specs("esp_gcm256_transport_v4") + specs("esp_cbc128_sha1_tunnel_v6")
                              + specs("esp_3des_md5_tunnel_v4") + specs("esp_null_sha1_transport_v6")
                              + specs("ah_sha256_transport_v4"))
    assert len(lines) == 8  # AH SAs need no keys in Wireshark: skipped
    assert uat_fields(lines[0]) == [
        "IPv4", "192.0.2.1", "192.0.2.2", "0x00001001", "AES-GCM with 16 octet ICV [RFC4106]",
        "0x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1fc0ffee01", "NULL", ""]
    assert uat_fields(lines[3]) == [
        "IPv6", "2001:db8::2", "2001:db8::1", "0x00002002", "AES-CBC [RFC3602]",
        "0xffeeddccbbaa99887766554433221100", "HMAC-SHA-1-96 [RFC2404]",
        "0x9988776655443322110099887766554433221100"]
    assert uat_fields(lines[4])[4:7] == [
        "TripleDES-CBC [RFC2451]", "0x0123456789abcdeffedcba987654321000112233445566aa", "HMAC-MD5-96 [RFC2403]"]
    assert uat_fields(lines[6])[4:6] == ["NULL", ""]
    sha256 = SASpec(src="192.0.2.1", dst="192.0.2.2", proto="esp", spi=0x109, crypt="des-cbc",
                    crypt_key=bytes(8), auth="hmac-sha256-128", auth_key=bytes(32))
    assert uat_fields(wire.esp_sa_lines([sha256])[0])[4:7:2] == ["DES-CBC [RFC2405]", "HMAC-SHA-256-128 [RFC4868]"]
    short = SASpec(src="192.0.2.1", dst="192.0.2.2", proto="esp", spi=0x10a, aead="aes-gcm-128",
                   aead_key=bytes(20), aead_icv_bits=64)
    assert uat_fields(wire.esp_sa_lines([short])[0])[4] == "AES-GCM with 8 octet ICV [RFC4106]"


def test_write_wireshark_files_are_owner_only(tmp_path):
    caught = packets("esp_gcm256_transport_v4")
    directory = tmp_path / "ws" / "profile"
    old_umask = os.umask(0)  # even with a permissive umask nothing is group/world readable
    try:
        pcap, esp_sa = wire.write_wireshark("capture.pcap", caught, specs("esp_gcm256_transport_v4"), directory)
    finally:
        os.umask(old_umask)
    assert pcap == directory / "capture.pcap" and esp_sa == directory / "esp_sa"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for path in (pcap, esp_sa, directory / "preferences"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    records = [line for line in esp_sa.read_text().splitlines() if not line.startswith("#")]
    assert records == wire.esp_sa_lines(specs("esp_gcm256_transport_v4"))
    assert [uat_fields(r)[3] for r in records] == ["0x00001001", "0x00001002"]
    prefs = (directory / "preferences").read_text()
    assert "esp.enable_encryption_decode: TRUE" in prefs and "esp.enable_authentication_check: TRUE" in prefs
    assert [bytes(p) for p in rdpcap(str(pcap))] == [bytes(p) for p in caught]


def test_write_wireshark_never_reuses_an_existing_file(tmp_path):
    caught = packets("esp_null_sha1_transport_v6")
    sas = specs("esp_null_sha1_transport_v6")
    (tmp_path / "esp_sa").write_text("old\n")
    os.chmod(tmp_path / "esp_sa", 0o644)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        wire.write_wireshark("c.pcap", caught, sas, tmp_path)
    outside = tmp_path / "elsewhere.pcap"
    pcap, esp_sa = wire.write_wireshark(outside, caught, sas, tmp_path / "conf")
    assert pcap == outside and esp_sa.parent == tmp_path / "conf"
    pcap, esp_sa = wire.write_wireshark(outside, caught, sas, tmp_path, overwrite=True)
    assert stat.S_IMODE(esp_sa.stat().st_mode) == 0o600  # a new file, not the old 0644 one
    assert "old" not in esp_sa.read_text()
    with pytest.raises(ValueError, match="at least one packet"):
        wire.write_wireshark("x.pcap", [], sas, tmp_path / "empty")

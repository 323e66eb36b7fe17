"""The overhead model against numbers worked out by hand, one row at a time.

Every expected value below is a literal computed on paper from the kernel's rules (quoted
in ipsec/overhead.py), never by the code under test:

    ESP header_len H = 8 (SPI + seq) + IV, + outer IP header (20 / 40) in tunnel mode
    block B          = ALIGN(cipher block, 4): AES-CBC 16, 3DES 8, GCM and null 4
    inner MTU        = ((link - H - ICV - A) & ~(B - 1)) + A - 2,  A = IP header in transport, 0 in tunnel
    AH header        = ALIGN8(12 + ICV) (+ outer IP header in tunnel mode), subtracted as is
    max MSS          = inner MTU - IP header (20 / 40) - TCP header (20)
    payload/segment  = max MSS - 12 (TCP timestamps)

The integration test tests/integration/test_overhead_mtu.py checks the same inner MTUs and
MSS values against a running kernel.
"""
from __future__ import annotations

import pytest

from ipsec.overhead import (
    COLUMNS,
    OverheadRow,
    esp_overhead,
    inner_mtu,
    max_tcp_mss,
    overhead_row,
    overhead_table,
    packet_overhead,
    payload_per_segment,
    profile_transforms,
    render_rows,
)
from ipsec.profiles import parse_profile

# (profile, IP version, mode): (inner MTU, max MSS) for a 1500-byte link.
HAND_TABLE_1500: dict[tuple[str, int, str], tuple[int, int]] = {
    # --- AES-GCM (rfc4106): IV 8, ICV 16, B 4.  H = 16 (+20 / +40 tunnel).
    # v4 transport: 1500-16-16-20 = 1448; &~3 = 1448; +20-2 = 1466.   MSS 1466-40 = 1426
    ("aes-gcm-128", 4, "transport"): (1466, 1426),
    # v4 tunnel:    1500-36-16 = 1448; &~3 = 1448; -2 = 1446.          MSS 1446-40 = 1406
    ("aes-gcm-128", 4, "tunnel"): (1446, 1406),
    # v6 transport: 1500-16-16-40 = 1428; &~3 = 1428; +40-2 = 1466.   MSS 1466-60 = 1406
    ("aes-gcm-128", 6, "transport"): (1466, 1406),
    # v6 tunnel:    1500-56-16 = 1428; &~3 = 1428; -2 = 1426.          MSS 1426-60 = 1366
    ("aes-gcm-128", 6, "tunnel"): (1426, 1366),
    # --- AES-CBC + HMAC-SHA1-96: IV 16, ICV 12, B 16.  H = 24 (+20 / +40).
    # v4 transport: 1500-24-12-20 = 1444; &~15 = 1440; +18 = 1458.    MSS 1418
    ("aes-cbc-128-sha1", 4, "transport"): (1458, 1418),
    # v4 tunnel:    1500-44-12 = 1444; &~15 = 1440; -2 = 1438.         MSS 1398
    ("aes-cbc-128-sha1", 4, "tunnel"): (1438, 1398),
    # v6 transport: 1500-24-12-40 = 1424; &~15 = 1424 (89*16); +38 = 1462.   MSS 1402
    ("aes-cbc-128-sha1", 6, "transport"): (1462, 1402),
    # v6 tunnel:    1500-64-12 = 1424; &~15 = 1424; -2 = 1422.         MSS 1362
    ("aes-cbc-128-sha1", 6, "tunnel"): (1422, 1362),
    # --- AES-CBC + HMAC-SHA256-128: IV 16, ICV 16, B 16.  H = 24 (+20 / +40).
    # v4 transport: 1500-24-16-20 = 1440; &~15 = 1440; +18 = 1458.    MSS 1418
    ("aes-cbc-128-sha256", 4, "transport"): (1458, 1418),
    # v4 tunnel:    1500-44-16 = 1440; -2 = 1438.                      MSS 1398
    ("aes-cbc-128-sha256", 4, "tunnel"): (1438, 1398),
    # v6 transport: 1500-24-16-40 = 1420; &~15 = 1408; +38 = 1446.    MSS 1386
    ("aes-cbc-128-sha256", 6, "transport"): (1446, 1386),
    # v6 tunnel:    1500-64-16 = 1420; &~15 = 1408; -2 = 1406.         MSS 1346
    ("aes-cbc-128-sha256", 6, "tunnel"): (1406, 1346),
    # --- null + HMAC-SHA1-96: IV 0, ICV 12, B 4 (cipher_null's block 1 rounded to 4).  H = 8.
    # v4 transport: 1500-8-12-20 = 1460; &~3 = 1460; +18 = 1478.      MSS 1438
    ("null-sha1", 4, "transport"): (1478, 1438),
    # v4 tunnel:    1500-28-12 = 1460; -2 = 1458.                      MSS 1418
    ("null-sha1", 4, "tunnel"): (1458, 1418),
    # v6 transport: 1500-8-12-40 = 1440; +38 = 1478.                   MSS 1418
    ("null-sha1", 6, "transport"): (1478, 1418),
    # v6 tunnel:    1500-48-12 = 1440; -2 = 1438.                      MSS 1378
    ("null-sha1", 6, "tunnel"): (1438, 1378),
    # --- AH HMAC-SHA1-96: ALIGN8(12+12) = 24 (+20 / +40 tunnel), subtracted as is.
    ("ah-sha1", 4, "transport"): (1476, 1436),   # 1500-24;  1476-40
    ("ah-sha1", 4, "tunnel"): (1456, 1416),      # 1500-44;  1456-40
    ("ah-sha1", 6, "transport"): (1476, 1416),   # 1500-24;  1476-60
    ("ah-sha1", 6, "tunnel"): (1436, 1376),      # 1500-64;  1436-60
    # --- AH HMAC-SHA256-128: ALIGN8(12+16) = 32 on IPv4 too (Linux; RFC 4302 would allow 28).
    ("ah-sha256", 4, "transport"): (1468, 1428),  # 1500-32
    ("ah-sha256", 6, "tunnel"): (1428, 1368),     # 1500-32-40
    # --- ESP 3DES-CBC + HMAC-SHA1-96 under AH HMAC-MD5-96 (seed 001).  AH (outermost,
    # always transport) first: 1500-24 = 1476.  Then ESP: IV 8, ICV 12, B 8, H = 16 (+20/+40).
    # v4 transport: 1476-16-12-20 = 1428; &~7 = 1424; +18 = 1442.     MSS 1402
    ("3des-cbc-sha1+ah-md5", 4, "transport"): (1442, 1402),
    # v4 tunnel:    1476-36-12 = 1428; &~7 = 1424; -2 = 1422.          MSS 1382
    ("3des-cbc-sha1+ah-md5", 4, "tunnel"): (1422, 1382),
    # v6 transport: 1476-16-12-40 = 1408; &~7 = 1408; +38 = 1446.     MSS 1386
    ("3des-cbc-sha1+ah-md5", 6, "transport"): (1446, 1386),
    # v6 tunnel:    1476-56-12 = 1408; -2 = 1406.                      MSS 1346
    ("3des-cbc-sha1+ah-md5", 6, "tunnel"): (1406, 1346),
    # --- null-sha1+ipcomp: IPComp is innermost: transport IPComp reserves nothing; in tunnel
    # mode IPComp carries the tunnel (outer IP header) and ESP runs in transport mode over it.
    # v4 transport: ESP 1478 (as null-sha1), IPComp 1478-0.
    ("null-sha1+ipcomp", 4, "transport"): (1478, 1438),
    # v4 tunnel: ESP transport 1478, IPComp tunnel 1478-20 = 1458.
    ("null-sha1+ipcomp", 4, "tunnel"): (1458, 1418),
    # v6 tunnel: ESP transport 1478, IPComp tunnel 1478-40 = 1438.
    ("null-sha1+ipcomp", 6, "tunnel"): (1438, 1378),
    # --- the order matters when the tunnel header is not a multiple of the cipher block:
    # AES-CBC-SHA1 + IPComp, v4 tunnel.  ESP (nearest the link, transport) first:
    # 1500-24-12-20 = 1444; &~15 = 1440; +18 = 1458; then IPComp's tunnel 1458-20 = 1438.
    # (IPComp first would give ((1480-56) & ~15) + 18 = 1442, 16 bytes too many.)   MSS 1398
    ("aes-cbc-128-sha1+ipcomp", 4, "tunnel"): (1438, 1398),
    # --- AES-GCM with an 8-byte ICV: v4 transport 1500-16-8-20 = 1456; +18 = 1474.
    ("aes-gcm-256-icv8", 4, "transport"): (1474, 1434),
    # --- no IPsec: the link itself.
    ("none", 4, "transport"): (1500, 1460),
    ("none", 6, "tunnel"): (1500, 1440),
}


@pytest.mark.parametrize("case", sorted(HAND_TABLE_1500), ids=lambda c: f"{c[0]}-v{c[1]}-{c[2]}")
def test_inner_mtu_and_max_mss_match_the_hand_table(case: tuple[str, int, str]) -> None:
    profile, version, mode = case
    want_mtu, want_mss = HAND_TABLE_1500[case]
    assert inner_mtu(profile, mode, version, 1500) == want_mtu
    assert max_tcp_mss(profile, mode, version, 1500) == want_mss
    assert payload_per_segment(profile, mode, version, 1500) == want_mss - 12
    assert payload_per_segment(profile, mode, version, 1500, timestamps=False) == want_mss


def test_key_size_does_not_change_the_overhead() -> None:
    for version in (4, 6):
        for mode in ("transport", "tunnel"):
            got = {inner_mtu(p, mode, version, 1500) for p in ("aes-gcm-128", "aes-gcm-192", "aes-gcm-256")}
            assert got == {HAND_TABLE_1500[("aes-gcm-128", version, mode)][0]}
            got = {inner_mtu(p, mode, version, 1500) for p in ("aes-cbc-128-sha1", "aes-cbc-256-sha1")}
            assert got == {HAND_TABLE_1500[("aes-cbc-128-sha1", version, mode)][0]}


# (profile, IP version, mode, inner packet bytes): bytes added.
HAND_ADDED: dict[tuple[str, int, str, int], int] = {
    # AES-GCM v4 transport: ESP encrypts packet-20; pad (p+2) to 4; add 8+8 + (padded-p) + 16.
    ("aes-gcm-128", 4, "transport", 100): 36,    # p=80:   82 -> 84:  16 + 4 + 16
    ("aes-gcm-128", 4, "transport", 1000): 36,   # p=980: 982 -> 984: 16 + 4 + 16
    ("aes-gcm-128", 4, "transport", 1002): 34,   # p=982: 984 -> 984: 16 + 2 + 16  (no padding)
    ("aes-gcm-128", 4, "transport", 1003): 37,   # p=983: 985 -> 988: 16 + 5 + 16  (3 bytes pad)
    ("aes-gcm-128", 4, "transport", 1400): 36,   # p=1380: 1382 -> 1384
    ("aes-gcm-128", 4, "transport", 1466): 34,   # p=1446: 1448 -> 1448; 1466+34 = 1500
    # AES-GCM v4 tunnel: ESP encrypts the whole packet; add 20 + 16 + (padded-n) + 16.
    ("aes-gcm-128", 4, "tunnel", 100): 56,       # 102 -> 104: 20 + 16 + 4 + 16
    ("aes-gcm-128", 4, "tunnel", 1446): 54,      # 1448 -> 1448: 20+16+2+16; 1446+54 = 1500
    ("aes-gcm-128", 6, "tunnel", 100): 76,       # 102 -> 104: 40 + 16 + 4 + 16
    # AES-CBC + SHA1-96: header 8+16 (+20/+40 tunnel), pad+trailer to 16, ICV 12.
    ("aes-cbc-128-sha1", 4, "transport", 100): 52,    # p=80:   82 -> 96:    24 + 16 + 12
    ("aes-cbc-128-sha1", 4, "transport", 1000): 48,   # p=980:  982 -> 992:  24 + 12 + 12
    ("aes-cbc-128-sha1", 4, "transport", 1400): 48,   # p=1380: 1382 -> 1392: 24 + 12 + 12
    ("aes-cbc-128-sha1", 4, "transport", 1458): 38,   # p=1438: 1440 -> 1440: 24 + 2 + 12; wire 1496
    ("aes-cbc-128-sha1", 4, "transport", 1459): 53,   # p=1439: 1441 -> 1456: 24 + 17 + 12; wire 1512
    ("aes-cbc-128-sha1", 4, "tunnel", 100): 68,       # 102 -> 112:   44 + 12 + 12
    ("aes-cbc-128-sha1", 4, "tunnel", 1000): 64,      # 1002 -> 1008: 44 + 8 + 12
    ("aes-cbc-128-sha1", 4, "tunnel", 1400): 64,      # 1402 -> 1408: 44 + 8 + 12
    ("aes-cbc-128-sha1", 6, "transport", 100): 40,    # p=60:   62 -> 64:    24 + 4 + 12
    ("aes-cbc-128-sha1", 6, "tunnel", 1400): 84,      # 1402 -> 1408: 64 + 8 + 12
    # AES-CBC + SHA256-128: as above with ICV 16.
    ("aes-cbc-128-sha256", 4, "transport", 100): 56,  # p=80: 82 -> 96:    24 + 16 + 16
    ("aes-cbc-128-sha256", 6, "tunnel", 1000): 88,    # 1002 -> 1008:      64 + 8 + 16
    # null + SHA1-96: header 8 (+20/+40 tunnel), pad+trailer to 4, ICV 12.
    ("null-sha1", 4, "transport", 100): 24,           # p=80:   82 -> 84:     8 + 4 + 12
    ("null-sha1", 4, "tunnel", 1000): 44,             # 1002 -> 1004:        28 + 4 + 12
    ("null-sha1", 6, "transport", 1400): 24,          # p=1360: 1362 -> 1364: 8 + 4 + 12
    # AH: the header alone, whatever the size.
    ("ah-sha1", 4, "transport", 100): 24,             # ALIGN8(12+12)
    ("ah-sha1", 4, "tunnel", 1000): 44,               # 24 + 20
    ("ah-sha256", 4, "transport", 1400): 32,          # ALIGN8(12+16)
    ("ah-sha256", 6, "tunnel", 100): 72,              # 32 + 40
    # ESP 3DES + SHA1-96 (header 8+8, pad+trailer to 8, ICV 12), then AH HMAC-MD5-96 (24).
    ("3des-cbc-sha1+ah-md5", 4, "transport", 100): 60,   # p=80: 82 -> 88: ESP 16+8+12 = 36; AH 24
    ("3des-cbc-sha1+ah-md5", 4, "tunnel", 1000): 80,     # 1002 -> 1008: ESP 36+8+12 = 56; AH 24
    # IPComp, incompressible data: nothing in transport mode, its outer IP header in tunnel mode.
    ("null-sha1+ipcomp", 4, "transport", 1000): 24,      # as null-sha1: p=980: 982 -> 984: 8+4+12
    ("null-sha1+ipcomp", 4, "tunnel", 1000): 44,         # IPIP: 1020; ESP transport p=1000: 1002 -> 1004:
                                                         # 8+4+12 = 24; 20 + 24
    ("none", 4, "tunnel", 1000): 0,
}


@pytest.mark.parametrize("case", sorted(HAND_ADDED), ids=lambda c: f"{c[0]}-v{c[1]}-{c[2]}-{c[3]}")
def test_bytes_added_match_the_hand_table(case: tuple[str, int, str, int]) -> None:
    profile, version, mode, size = case
    assert packet_overhead(profile, mode, version, size) == HAND_ADDED[case]


def test_padding_steps_of_aes_cbc_over_sixteen_sizes() -> None:
    # v4 transport, p = size - 20; pad+trailer = ALIGN16(p+2) - p, between 2 and 17.
    # size 1458 -> p 1438 -> 2; each byte more costs one less until the next block starts.
    got = [packet_overhead("aes-cbc-128-sha1", "transport", 4, s) for s in range(1443, 1460)]
    want = [24 + pad + 12 for pad in (17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 17)]
    assert got == want


def test_esp_overhead_building_block() -> None:
    assert esp_overhead(80, iv_bytes=16, icv_bytes=12, block_bytes=16) == 8 + 16 + 16 + 12
    assert esp_overhead(82, iv_bytes=8, icv_bytes=16, block_bytes=1) == 8 + 8 + 2 + 16   # GCM, no pad
    assert esp_overhead(0, iv_bytes=0, icv_bytes=12, block_bytes=0) == 8 + 4 + 12        # 2 -> 4
    with pytest.raises(ValueError, match="iv_bytes"):
        esp_overhead(10, iv_bytes=-1, icv_bytes=0, block_bytes=4)


@pytest.mark.parametrize("link_mtu", [1280, 1400, 1500, 1501, 1502, 1503, 9000])
@pytest.mark.parametrize("profile", ["aes-gcm-256", "aes-cbc-128-sha1", "aes-cbc-256-sha256", "3des-cbc-md5",
                                     "null-sha1", "ah-sha256", "3des-cbc-sha1+ah-md5", "null-sha1+ipcomp",
                                     "aes-cbc-128-sha1+ipcomp", "3des-cbc-sha1+ah-sha256+ipcomp",
                                     "aes-gcm-128-icv12"])
def test_inner_mtu_is_the_largest_packet_that_fits(profile: str, link_mtu: int) -> None:
    """The kernel's masked formula and the padding arithmetic are two different derivations."""
    for version in (4, 6):
        for mode in ("transport", "tunnel"):
            mtu = inner_mtu(profile, mode, version, link_mtu)
            assert mtu + packet_overhead(profile, mode, version, mtu) <= link_mtu
            # one more byte no longer fits: ESP's 2-byte trailer makes the formula exact
            assert mtu + 1 + packet_overhead(profile, mode, version, mtu + 1) > link_mtu


def test_transforms_innermost_first_with_the_tunnel_innermost() -> None:
    got = [(t.proto, t.mode, t.header_bytes) for t in profile_transforms("null-sha1+ipcomp", "tunnel", 6)]
    assert got == [("comp", "tunnel", 40), ("esp", "transport", 8)]
    got = [(t.proto, t.mode, t.header_bytes, t.icv_bytes, t.align_bytes)
           for t in profile_transforms("3des-cbc-sha1+ah-md5", "tunnel", 4)]
    assert got == [("esp", "tunnel", 36, 12, 8), ("ah", "transport", 24, 0, 1)]
    assert profile_transforms(parse_profile("none"), "tunnel", 4) == ()


def test_rows_and_rendering() -> None:
    rows = overhead_table(["aes-gcm-256", "aes-cbc-128-sha1"], link_mtu=1500)
    assert [(r.profile, r.ip_version, r.mode) for r in rows] == [
        ("aes-gcm-256", 4, "transport"), ("aes-gcm-256", 4, "tunnel"),
        ("aes-gcm-256", 6, "transport"), ("aes-gcm-256", 6, "tunnel"),
        ("aes-cbc-128-sha1", 4, "transport"), ("aes-cbc-128-sha1", 4, "tunnel"),
        ("aes-cbc-128-sha1", 6, "transport"), ("aes-cbc-128-sha1", 6, "tunnel")]
    # GCM v4 tunnel: added 20+16+16 + pad+trailer 2..5 = 54..57; at 1446 it is 54, on the wire 1500
    assert rows[1] == OverheadRow("aes-gcm-256", "tunnel", 4, 1500, inner_mtu=1446, max_mss=1406,
                                  payload_per_segment=1394, added_min=54, added_max=57, added_at_mtu=54)
    assert rows[1].wire_at_mtu == 1500
    # CBC-SHA1 v6 transport: 24 + 12 + pad+trailer 2..17 = 38..53; at 1462 (p 1422, 1424 -> 1424): 38
    assert (rows[6].added_min, rows[6].added_max, rows[6].added_at_mtu) == (38, 53, 38)
    names, cells = render_rows(rows)
    assert names == list(COLUMNS)
    assert cells[1] == ["aes-gcm-256", "tunnel", "IPv4", "1500", "1446", "1406", "1394", "54-57", "54"]
    ah = overhead_row("ah-sha1", "transport", 4)
    assert render_rows([ah], columns=["profile", "bytes added", "max MSS"]) == (
        ["profile", "bytes added", "max MSS"], [["ah-sha1", "24", "1436"]])
    with pytest.raises(ValueError, match="unknown column"):
        render_rows([ah], columns=["nope"])


@pytest.mark.parametrize("call, message", [
    (lambda: inner_mtu("aes-gcm-256", "beet", 4, 1500), "mode must be one of transport, tunnel"),
    (lambda: inner_mtu("aes-gcm-256", "tunnel", 5, 1500), "ip_version must be 4 or 6"),
    (lambda: inner_mtu("aes-gcm-256", "tunnel", 6, 1000), r"link_mtu must be an integer in 1280\.\.65535"),
    (lambda: inner_mtu("aes-gcm-256", "tunnel", 4, 70), "no room for a TCP segment"),
    (lambda: inner_mtu("rot13", "tunnel", 4, 1500), "unknown profile part"),
    (lambda: inner_mtu(42, "tunnel", 4, 1500), "profile must be a Profile or a profile name"),
    (lambda: packet_overhead("aes-gcm-256", "transport", 6, 39), "inner_bytes must be an IPv6 packet size"),
])
def test_wrong_input_names_the_field(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_tcp_without_path_mtu_discovery_is_fragmented_after_encapsulation():
    # seed 003's gateways (hosts without DF): MSS 1460 through an AES-CBC-128 + HMAC-MD5 tunnel.
    # The 1500-byte segment fits the link, so it is encapsulated whole: 20 outer IP + 8 ESP +
    # 16 IV + 1500 padded with its 2 trailer bytes to 1504 + 12 ICV = 1560 bytes, fragmented
    # into 1500 + (60 + 20) bytes; each packet with 14 bytes of framing. 1448 payload bytes.
    from ipsec.overhead import expected_goodput_mbps

    got = expected_goodput_mbps(10, 1460, "aes-cbc-128-md5", "tunnel", pmtu="fragment")
    assert got == pytest.approx(10 * 1448 / (1514 + 94))
    # below the tunnel's MSS nothing is fragmented: the same as with discovery
    assert expected_goodput_mbps(10, 1250, "aes-cbc-128-md5", "tunnel", pmtu="fragment") == \
        pytest.approx(expected_goodput_mbps(10, 1250, "aes-cbc-128-md5", "tunnel"))
    # with discovery the sender's MSS shrinks to what the tunnel leaves instead
    assert expected_goodput_mbps(10, 1460, "aes-cbc-128-md5", "tunnel") > got
    # plain TCP and IPv6 (routers never fragment it) are unchanged
    assert expected_goodput_mbps(10, 1460, pmtu="fragment") == pytest.approx(expected_goodput_mbps(10, 1460))
    assert expected_goodput_mbps(10, 1460, "aes-cbc-128-md5", "tunnel", 6, pmtu="fragment") == \
        pytest.approx(expected_goodput_mbps(10, 1460, "aes-cbc-128-md5", "tunnel", 6))
    with pytest.raises(ValueError, match="pmtu"):
        expected_goodput_mbps(10, 1460, pmtu="df")


@pytest.mark.parametrize("mode", ["transport", "tunnel"])
@pytest.mark.parametrize("ip_version", [4, 6])
def test_the_modern_ciphers_cost_what_their_iv_padding_and_icv_say(mode, ip_version):
    """ChaCha20-Poly1305, AES-GMAC and AES-CTR + HMAC-SHA256-128 carry AES-GCM's 8-byte IV and 16-byte ICV and
    pad to 4 bytes: the same bytes per packet; AES-CCM's 12-byte ICV is 4 fewer; HMAC-SHA-512's 32-byte ICV
    16 more than HMAC-SHA256-128's behind the same cipher."""
    from ipsec.overhead import packet_overhead

    def cost(profile, size):
        return packet_overhead(profile, mode, ip_version, size)

    for size in (100, 1000, 1400):
        gcm = cost("aes-gcm-128", size)
        assert cost("chacha20-poly1305", size) == cost("aes-gmac-256", size) == gcm
        assert cost("aes-ctr-128-sha256", size) == gcm
        assert cost("aes-ccm-128-icv12", size) == gcm - 4
        assert cost("aes-cbc-128-sha512", size) == cost("aes-cbc-128-sha256", size) + 16
        assert cost("aes-cbc-128-sha384", size) == cost("aes-cbc-128-sha256", size) + 8

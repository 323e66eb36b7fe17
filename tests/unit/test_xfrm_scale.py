"""benchmarks/xfrm_scale.py's pure parts: the added sites and what it reads from ping and ip."""
from __future__ import annotations

import ipaddress

import pytest

from benchmarks import xfrm_scale
from cli import bench

# Captured from iproute2 6.1 and iputils inside the project's UML guest.
POLICY_COUNT = """\t SPD IN  1000 OUT 1000 FWD 1000 (Sock: IN 0 OUT 0 FWD 0)
\t SPD buckets: count 1023 Max 1048576
\t SPD IPv4 thresholds: local 32 remote 32
\t SPD IPv6 thresholds: local 128 remote 128
"""
STATE_COUNT = "\t SAD count 2000 (buckets count 2048 Max 1048576)\n"
PING = """--- 10.0.2.2 ping statistics ---
50 packets transmitted, 50 received, 0% packet loss, time 1012ms
rtt min/avg/max/mdev = 0.143/0.196/0.323/0.031 ms
"""


@pytest.mark.parametrize("prefix", [32, 24, 20])
def test_sites_are_distinct_on_each_side_and_apart_between_sides(prefix: int) -> None:
    room = 2 ** (prefix - 16)
    for side, parent in enumerate(xfrm_scale.SITES):
        nets = [ipaddress.ip_network(xfrm_scale.site(side, i, prefix)) for i in range(min(room, 300))]
        assert len(set(nets)) == len(nets)
        assert all(n.prefixlen == prefix and n.subnet_of(parent) for n in nets)
    assert not ipaddress.ip_network(xfrm_scale.site(0, 0, prefix)).overlaps(
        ipaddress.ip_network(xfrm_scale.site(1, 0, prefix)))


def test_reads_the_round_trip_and_the_lookup_tables() -> None:
    assert xfrm_scale.parse_rtt(PING) == (0.143, 0.196, 0.323)
    assert xfrm_scale.parse_spd(POLICY_COUNT, STATE_COUNT) == \
        "SPD 1023 buckets, hashed from /32:/32, SAD 2048 buckets"
    assert xfrm_scale.parse_spd("", "") == "(not reported)"
    with pytest.raises(xfrm_scale.ScaleError, match="no round-trip summary"):
        xfrm_scale.parse_rtt("50 packets transmitted, 0 received, 100% packet loss")


def test_refuses_more_tunnels_than_the_sites_hold(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        bench.main(["xfrm_scale", "--prefix", "24", "--tunnels", "258"])
    assert e.value.code == 2
    assert "leaves room for 256 sites per side" in capsys.readouterr().err
    assert xfrm_scale.Options(prefix=24, tunnels=(257,)).tunnels == (257,)  # 256 added: room for them


def test_the_table_keeps_each_n_in_order_and_the_status_says_what_failed() -> None:
    row = xfrm_scale.Row(1, rtt_ms=(0.1, 0.2, 0.3), sas=2, policies="IN 1 OUT 1 FWD 1", spd="SPD 8 buckets")
    ok = xfrm_scale.Result("host", (row, xfrm_scale.Row(100, added=99, install_s=0.5, operations=990)),
                           removal=xfrm_scale.Removal(99, 990, 0.25, 2), report="/r/report.html")
    assert ok.status == 0
    lines = xfrm_scale.page(xfrm_scale.Options(), ok).splitlines()
    assert lines[2].split()[:2] == ["1", "0"] and lines[3].split()[:4] == ["100", "99", "0.50", "1980"]
    assert lines[-2].startswith("removed 99 added tunnels (990 SAs and policies, both gateways) in 0.25 s: 3960")
    assert lines[-1] == "report: /r/report.html"
    failed = xfrm_scale.Result("host", (row,), failed=((10, "ping failed"),))
    assert xfrm_scale.page(xfrm_scale.Options(), failed).splitlines()[2:] == [lines[2], "     10 failed: ping failed"]
    assert failed.status == 1
    assert xfrm_scale.Result("host", (row,), removal=xfrm_scale.Removal(9, 90, 0.1, 4)).status == 1
    assert xfrm_scale.Result("host", interrupted=True).status == 130

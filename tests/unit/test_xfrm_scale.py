"""benchmarks/xfrm_scale.py's pure parts: the added sites and what it reads from ping and ip."""
from __future__ import annotations

import ipaddress
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import xfrm_scale

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
    with pytest.raises(SystemExit):
        xfrm_scale.main(["--prefix", "24", "--tunnels", "258"])
    assert "leaves room for 256 sites per side" in capsys.readouterr().err

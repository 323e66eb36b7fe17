"""parse_iperf3 on output captured from real iperf3 runs (see fixtures/iperf3/README.md)."""
import json
from pathlib import Path

import pytest

from experiments.engine.iperf import IperfError, parse_iperf3

FIX = Path(__file__).parent / "fixtures" / "iperf3"


def test_tcp_goodput_is_the_receivers_and_retransmits_the_senders():
    text = (FIX / "tcp_mss1000_loopback.json").read_text()
    raw = json.loads(text)["end"]
    r = parse_iperf3(text)
    assert r.transport == "tcp"
    assert r.goodput_mbps == pytest.approx(raw["sum_received"]["bits_per_second"] / 1e6)
    assert r.goodput_mbps != pytest.approx(raw["sum_sent"]["bits_per_second"] / 1e6, rel=1e-9)
    assert r.retransmits == raw["sum_sent"]["retransmits"]
    assert r.loss_pct is None
    assert 0 < r.cpu_sender_pct <= 100


def test_udp_reports_loss_and_received_rate():
    r = parse_iperf3((FIX / "udp_200M_loopback.json").read_text())
    assert r.transport == "udp"
    assert r.retransmits is None
    assert r.loss_pct == 0
    assert 150 < r.goodput_mbps < 210  # offered 200 Mbit/s on loopback


def test_error_output_raises_with_iperfs_message():
    with pytest.raises(IperfError, match="Connection refused"):
        parse_iperf3((FIX / "error_refused.json").read_text())


def test_garbage_raises():
    with pytest.raises(IperfError, match="not JSON"):
        parse_iperf3("iperf3: error - unable to connect")


def test_udp_loss_written_as_null_is_unknown_not_a_crash():
    # iperf3 computes lost_percent as lost / packets; with no datagrams that is NaN, which
    # cJSON writes as null (seen with five UDP clients through a CPU-bound UML guest)
    data = json.loads((FIX / "udp_200M_loopback.json").read_text())
    for side in ("sum", "sum_received"):
        data["end"][side]["lost_percent"] = None
    r = parse_iperf3(json.dumps(data))
    assert r.loss_pct is None and r.goodput_mbps > 0
    # a summary without its figures is iperf3's failure, reported as one
    data["end"]["sum_received"]["bits_per_second"] = None
    with pytest.raises(IperfError, match="lacks a figure"):
        parse_iperf3(json.dumps(data))

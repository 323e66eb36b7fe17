"""The latency probe's arithmetic on irtt's own output (captured: 15 round trips on loopback), and what a point's
record says when the probe worked, lost every reply or could not run."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from experiments.engine import probe
from experiments.engine.measure import with_probe
from testbed.record import Bound, Record

CAPTURED = json.loads((Path(__file__).parent / "fixtures" / "irtt" / "loopback.json").read_text())


def sends(data) -> list[float]:
    return [t["timestamps"]["client"]["send"]["wall"] / 1e9 for t in data["round_trips"]]


def test_the_summary_is_irtts_own_round_trips_in_milliseconds():
    s = probe.summarise(json.dumps(CAPTURED))
    trips = CAPTURED["round_trips"]
    rtts = sorted(t["delay"]["rtt"] / 1e6 for t in trips)
    assert (s.sent, s.received, s.lost) == (len(trips), len(trips), 0) == (15, 15, 0)
    assert s.rtt_median_ms == pytest.approx(rtts[7])  # the 8th of 15
    assert s.rtt_median_ms == pytest.approx(CAPTURED["stats"]["rtt"]["median"] / 1e6)  # irtt's own median
    assert s.rtt_p99_ms <= max(rtts) and s.rtt_p90_ms <= s.rtt_p99_ms and s.rtt_median_ms <= s.rtt_p90_ms
    assert s.up_median_ms == pytest.approx(sorted(t["delay"]["send"] / 1e6 for t in trips)[7])
    assert s.down_median_ms == pytest.approx(sorted(t["delay"]["receive"] / 1e6 for t in trips)[7])
    fields = s.record_fields()
    assert set(fields) <= set(Record.OPTIONAL) and fields["probe_sent"] == 15 and fields["probe_lost"] == 0


def test_only_the_round_trips_sent_within_the_window_count():
    at = sends(CAPTURED)
    s = probe.summarise(CAPTURED, start_unix=at[5], end_unix=at[10])
    assert s.sent == 5  # the 6th to the 10th: the start counts, the end does not
    assert s.rtt_median_ms == pytest.approx(sorted(t["delay"]["rtt"] / 1e6 for t in CAPTURED["round_trips"][5:10])[2])
    assert probe.summarise(CAPTURED, start_unix=at[-1] + 1).sent == 0


def test_lost_round_trips_count_as_sent_and_give_no_delay():
    data = copy.deepcopy(CAPTURED)
    for t in data["round_trips"][:5]:
        t["lost"] = "true"
        t["delay"] = {}
    data["round_trips"][5]["lost"] = "true_down"
    s = probe.summarise(data)
    assert (s.sent, s.received, s.lost) == (15, 9, 6)
    for t in data["round_trips"]:
        t["lost"] = "true"
    everything = probe.summarise(data)
    assert (everything.received, everything.rtt_median_ms, everything.rtt_p99_ms) == (0, None, None)


def test_percentiles_interpolate_between_closest_ranks():
    assert probe.percentile([], 50) is None
    assert probe.percentile([3.0], 99) == 3.0
    assert probe.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert probe.percentile(list(map(float, range(101))), 90) == pytest.approx(90.0)
    assert probe.percentile([5.0, 1.0, 3.0], 100) == 5.0


def test_a_record_gains_the_probe_and_a_probe_that_lost_everything_makes_the_point_other():
    record = Record(profile="aes-gcm-256", goodput_mbps=9.2, bound=Bound.LINK, bound_reason="the link was full")
    idle = probe.summarise(CAPTURED)
    under = probe.summarise(CAPTURED)
    got = with_probe(record, idle, under)
    assert got.bound is Bound.LINK and got.probe_sent == 15 and got.idle_rtt_ms == idle.rtt_median_ms
    assert got.probe_rtt_ms == under.rtt_median_ms and got.goodput_mbps == 9.2
    data = copy.deepcopy(CAPTURED)
    for t in data["round_trips"]:
        t["lost"] = "true"
    silent = with_probe(record, idle, probe.summarise(data))
    assert silent.bound is Bound.OTHER and "lost every reply (15 sent" in silent.bound_reason
    assert silent.probe_rtt_ms is None and silent.probe_lost == 15  # never a round trip of zero
    broken = with_probe(record, "irtt's client failed (exit 1): no route", "irtt's client failed (exit 1): x")
    assert broken.bound is Bound.OTHER and "no result: irtt's client failed" in broken.bound_reason
    assert broken.idle_rtt_ms is None


def test_the_client_is_told_what_to_send_and_where():
    argv = probe.client_argv("2001:db8:0:3::2", 2.55, 0.02)
    assert argv[:2] == ["irtt", "client"] and argv[-1] == "[2001:db8:0:3::2]:2112"
    assert argv[argv.index("-d") + 1] == "2.550s" and argv[argv.index("-i") + 1] == "20ms"
    assert probe.client_argv("198.18.3.2", 0.3, 0.01)[-1] == "198.18.3.2:2112"


def test_the_queue_check_compares_link_bound_probed_points_only():
    from benchmarks.probe_queue import compare

    # 62,500 bytes queued at 10 Mbit/s is 50 ms of waiting
    fine = Record(rate_mbit=10.0, bound=Bound.LINK, queue_mean_bytes=62_500.0, probe_up_ms=51.0)
    cpu = Record(rate_mbit=10.0, bound=Bound.CPU, queue_mean_bytes=62_500.0, probe_up_ms=90.0)
    unprobed = Record(rate_mbit=100.0, bound=Bound.LINK, queue_mean_bytes=62_500.0)
    empty = Record(rate_mbit=100.0, bound=Bound.LINK, queue_mean_bytes=0.0, probe_up_ms=1.0)
    assert compare([fine, cpu, unprobed, empty]) == {10.0: [pytest.approx(1.02)]}


def test_the_queues_configured_size_predicts_a_tcp_flows_mean_wait():
    from benchmarks.probe_queue import compare_configured, configured_wait_ms

    # in UML tbf's bucket is 10 ms of the rate: 62,500 + 12,500 bytes at 10 Mbit/s, 60 ms full; CUBIC's
    # sawtooth between 0.7 and all of it waits 0.85 of that on the mean
    assert configured_wait_ms(10.0, "uml") == pytest.approx(0.85 * 60.0)
    # on a host kernel the bucket is 4 frames (6,056 bytes; 4 ms of 10 Mbit/s is less)
    assert configured_wait_ms(10.0, "host") == pytest.approx(0.85 * (62_500 + 4 * 1514) / 1_250_000 * 1000)
    assert configured_wait_ms(100.0, None) == configured_wait_ms(100.0, "host")
    tcp = Record(rate_mbit=10.0, bound=Bound.LINK, probe_up_ms=51.0, transport="tcp", backend="uml")
    udp = Record(rate_mbit=10.0, bound=Bound.LINK, probe_up_ms=59.0, transport="udp", backend="uml")
    assert compare_configured([tcp, udp]) == {10.0: [pytest.approx(1.0)]}  # UDP keeps no sawtooth: left out


def test_a_live_chart_reads_each_round_trip_from_irtts_lines_in_any_unit():
    # lines as irtt 0.9 prints them, captured on loopback and through a 10 Mbit/s queue
    assert probe.rtt_of_line("seq=0 rtt=104µs rd=36.3µs sd=67.9µs ipdv=n/a") == pytest.approx(0.104)
    assert probe.rtt_of_line("seq=12 rtt=49.31ms rd=24.22ms sd=25.09ms ipdv=1.2ms") == pytest.approx(49.31)
    assert probe.rtt_of_line("seq=3 rtt=1.2s rd=1s sd=200ms ipdv=5ms") == pytest.approx(1200.0)
    assert probe.rtt_of_line("seq=4 rtt=950ns rd=500ns sd=450ns ipdv=n/a") == pytest.approx(0.00095)
    for other in ("[Connecting] connecting to 127.0.0.1:2199", "[127.0.0.1:2199] [Connected] connection established",
                  "                RTT   104µs   148µs   159µs   183µs  34.2µs", "", "seq=5 rtt=fast",
                  "[127.0.0.1:2199] [WaitForPackets] waiting 520µs for final packets"):
        assert probe.rtt_of_line(other) is None, other
    argv = probe.stream_argv("fc00::3", 0.25, 86400)
    assert argv[:2] == ["irtt", "client"] and "-Q" not in argv and "-o" not in argv  # a line per round trip
    assert argv[-1] == f"[fc00::3]:{probe.PORT}" and "250ms" in argv and "86400s" in argv

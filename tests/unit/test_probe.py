"""The latency probe's arithmetic on irtt's own output (captured: 15 round trips on loopback), and what a point's
record says when the probe worked, lost every reply or could not run."""
from __future__ import annotations

import copy
import dataclasses
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
    argv = probe.client_argv("2001:db8:0:3::2", 2.55, 0.02, probe.IRTT)
    assert argv[:2] == ["irtt", "client"] and argv[-1] == "[2001:db8:0:3::2]:2112"
    assert argv[argv.index("-d") + 1] == "2.550s" and argv[argv.index("-i") + 1] == "20ms"
    assert probe.client_argv("198.18.3.2", 0.3, 0.01, probe.IRTT)[-1] == "198.18.3.2:2112"
    assert "--timeouts=250ms,500ms,1s,2s" in argv  # its handshake tried again when a loaded guest drops it


def test_the_queue_check_compares_link_bound_probed_points_only():
    from benchmarks.probe_queue import compare

    # 62,500 bytes queued at 10 Mbit/s is 50 ms of waiting
    fine = Record(rate_mbit=10.0, bound=Bound.LINK, queue_mean_bytes=62_500.0, probe_up_ms=51.0)
    cpu = Record(rate_mbit=10.0, bound=Bound.CPU, queue_mean_bytes=62_500.0, probe_up_ms=90.0)
    unprobed = Record(rate_mbit=100.0, bound=Bound.LINK, queue_mean_bytes=62_500.0)
    empty = Record(rate_mbit=100.0, bound=Bound.LINK, queue_mean_bytes=0.0, probe_up_ms=1.0)
    assert compare([fine, cpu, unprobed, empty]) == {10.0: [pytest.approx(1.02)]}
    # ping times no way alone: its round trip less the unloaded one is the data's way's wait
    pinged = Record(rate_mbit=10.0, bound=Bound.LINK, queue_mean_bytes=62_500.0, probe_rtt_ms=50.5, idle_rtt_ms=0.5)
    no_idle = Record(rate_mbit=10.0, size_bytes=500, bound=Bound.LINK, queue_mean_bytes=62_500.0, probe_rtt_ms=50.5)
    assert compare([pinged, no_idle]) == {10.0: [pytest.approx(1.0)]}
    # a point's later repetition carries no reference of its own (a sweep takes it once a point): its first's counts
    later = dataclasses.replace(pinged, repetition=1, idle_rtt_ms=None, probe_rtt_ms=55.5)
    assert compare([pinged, later]) == {10.0: [pytest.approx(1.0), pytest.approx(1.1)]}


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
    argv = probe.stream_argv("fc00::3", 0.25, 86400, probe.IRTT)
    assert argv[:2] == ["irtt", "client"] and "-Q" not in argv and "-o" not in argv  # a line per round trip
    assert argv[-1] == f"[fc00::3]:{probe.PORT}" and "250ms" in argv and "86400s" in argv


def test_a_live_chart_reads_each_round_trip_from_pings_reply_lines():
    # the captured loopback run's reply lines, less the timestamp -D puts first (the live chart's ping has no -D)
    captured = (Path(__file__).parent / "fixtures" / "ping" / "loopback.txt").read_text().splitlines()
    live = [line.split("] ", 1)[1] for line in captured if line.startswith("[")]
    assert [probe.rtt_of_line(line) for line in live[:4]] == [0.035, 0.049, 0.052, 0.054] and len(live) == 15
    assert all(probe.rtt_of_line(line) is None for line in captured)  # -D's lines are the sweep's, not the chart's
    assert probe.rtt_of_line("68 bytes from 198.18.3.1: icmp_seq=12 ttl=62 time=49.3 ms\n") == pytest.approx(49.3)
    assert probe.rtt_of_line("68 bytes from fc00::3: icmp_seq=2 ttl=62 time=1204 ms") == pytest.approx(1204.0)
    for other in ("PING 127.0.0.1 (127.0.0.1) 60(88) bytes of data.",
                  "68 bytes from 127.0.0.1: icmp_seq=1 ttl=64 time=0.047 ms (DUP!)",  # counted once, at the first
                  "From 198.18.2.1 icmp_seq=3 Destination Host Unreachable", "--- 127.0.0.1 ping statistics ---",
                  "4 packets transmitted, 4 received, 0% packet loss, time 3070ms",
                  "rtt min/avg/max/mdev = 0.035/0.045/0.053/0.006 ms"):
        assert probe.rtt_of_line(other) is None, other
    argv = probe.stream_argv("198.18.3.1", 0.25, 86400, probe.PING)
    # runs as long as asked, an echo of the probe's size every 250 ms; no -D, so a line is read as it comes
    assert argv[0] == "ping" and argv[-1] == "198.18.3.1" and "-D" not in argv
    assert argv[argv.index("-i") + 1] == "0.25" and argv[argv.index("-c") + 1] == str(86400 * 4)
    assert argv[argv.index("-s") + 1] == str(probe.PAYLOAD_BYTES)
    with pytest.raises(ValueError, match="no probe tool 'netperf'"):
        probe.stream_argv("198.18.3.1", 0.25, 10, "netperf")


PING_CAPTURED = (Path(__file__).parent / "fixtures" / "ping" / "loopback.txt").read_text()


def test_pings_echoes_are_its_reply_lines_each_sent_its_round_trip_before_its_timestamp():
    # ping -n -D -i 0.02 -c 15 -s 60 -W 1 127.0.0.1, captured (iputils 20221126)
    trips = probe.ping_trips(PING_CAPTURED, 0.02)
    assert len(trips) == 15 and all(t.up_ms is None for t in trips)  # the round trip alone
    assert trips[0] == probe.Trip(pytest.approx(1795829880.356432 - 0.035e-3), 0.035)
    s = probe.summary_of(trips)
    assert (s.sent, s.received, s.rtt_min_ms, s.rtt_median_ms) == (15, 15, 0.035, 0.052)
    assert s.rtt_p99_ms == pytest.approx(0.060, abs=0.001) and s.up_median_ms is None
    inside = probe.summary_of(trips, trips[5].sent_unix, trips[10].sent_unix)
    assert inside.sent == 5 and inside.rtt_min_ms == 0.048  # echoes 6 to 10


def test_an_unanswered_echo_is_lost_at_its_place_in_the_schedule_and_never_a_round_trip():
    # the capture with echoes 4, 5 and 15 unanswered, as ping prints it then: no line, and its count
    lines = [ln for ln in PING_CAPTURED.splitlines() if not any(f"icmp_seq={n} " in ln for n in (4, 5, 15))]
    output = "\n".join(lines).replace("15 received, 0% packet loss", "12 received, 20% packet loss")
    trips = probe.ping_trips(output, 0.02)
    assert len(trips) == 15 and [i + 1 for i, t in enumerate(trips) if t.rtt_ms is None] == [4, 5, 15]
    assert trips[3].sent_unix == pytest.approx(trips[2].sent_unix + 0.02)  # from the nearest answered
    assert trips[14].sent_unix == pytest.approx(trips[13].sent_unix + 0.02)
    s = probe.summary_of(trips, trips[3].sent_unix, trips[6].sent_unix)
    assert (s.sent, s.received, s.lost) == (3, 1, 2)
    # nothing answered: placed from the probe's start, so a window still counts what it sent
    silent = "PING 198.18.3.2 (198.18.3.2) 60(88) bytes of data.\n\n--- 198.18.3.2 ping statistics ---\n" \
             "4 packets transmitted, 0 received, 100% packet loss, time 301ms\n"
    lost = probe.ping_trips(silent, 0.1, started_unix=1000.0)
    assert [t.sent_unix for t in lost] == pytest.approx([1000.0, 1000.1, 1000.2, 1000.3])
    assert probe.summary_of(lost, 1000.05, 1000.25).sent == 2 and probe.ping_trips(silent, 0.1) == []


def test_a_duplicate_reply_counts_once_and_an_error_reply_is_no_answer():
    output = ("[1000.000100] 68 bytes from 198.18.3.2: icmp_seq=1 ttl=62 time=0.100 ms\n"
              "[1000.000200] 68 bytes from 198.18.3.2: icmp_seq=1 ttl=62 time=0.200 ms (DUP!)\n"
              "[1000.100000] From 198.18.1.1 icmp_seq=2 Destination Host Unreachable\n"
              "[1000.200150] 68 bytes from 198.18.3.2: icmp_seq=3 ttl=62 time=150 ms\n"
              "3 packets transmitted, 2 received, +1 duplicates, +1 errors, 33.3333% packet loss, time 200ms\n")
    trips = probe.ping_trips(output, 0.1)
    assert [t.rtt_ms for t in trips] == [0.1, None, 150.0]  # a reply over 100 ms is printed whole
    assert trips[1].sent_unix == pytest.approx(1000.1, abs=1e-3)


def test_the_ping_client_sends_echoes_of_irtts_size_at_the_interval_for_the_duration():
    argv = probe.client_argv("2001:db8:0:3::2", 2.55, 0.02, probe.PING)
    assert argv[0] == "ping" and argv[-1] == "2001:db8:0:3::2" and "-D" in argv  # timestamps to place them
    assert argv[argv.index("-c") + 1] == "128" and argv[argv.index("-i") + 1] == "0.02"
    assert argv[argv.index("-s") + 1] == "60"  # + 8 of ICMP = irtt's 60 + 8 of UDP: the same packet
    assert probe.client_argv("198.18.3.2", 0.3, 0.01, probe.PING)[argv.index("-c") + 1] == "30"
    with pytest.raises(ValueError, match="no probe tool 'netperf'"):
        probe.client_argv("198.18.3.2", 1, 0.1, "netperf")


def test_the_record_keeps_the_unloaded_references_least_round_trip_beside_its_median():
    idle = probe.summary_of(probe.ping_trips(PING_CAPTURED, 0.02))
    got = with_probe(Record(goodput_mbps=9.2, bound=Bound.LINK), idle, idle)
    assert (got.idle_rtt_ms, got.idle_rtt_min_ms) == (0.052, 0.035) and got.probe_up_ms is None


def test_a_sweep_that_probes_by_ping_needs_ping_before_anything_boots(monkeypatch):
    from experiments import runner
    from experiments.engine.plan import SweepSpec
    from experiments.job import Job, SweepWork
    from testbed.errors import Refused

    missing = set()
    monkeypatch.setattr(runner.shutil, "which", lambda tool: None if tool in missing else f"/usr/bin/{tool}")
    by_ping = Job(SweepWork(SweepSpec(latency_probe=True, probe_tool="ping")))
    missing.add("irtt")
    runner.check_tools(by_ping)  # irtt is not needed
    missing.add("ping")
    with pytest.raises(Refused, match=r"ping not found: install Debian's iputils-ping package"):
        runner.check_tools(by_ping)
    runner.check_tools(Job(SweepWork(SweepSpec(latency_probe=False, probe_tool="ping"))))


def test_the_reference_least_is_a_floods_read_from_pings_summary():
    captured = (Path(__file__).parent / "fixtures" / "ping" / "loopback.txt").read_text()
    assert probe.least_of(captured) == 0.035  # rtt min/avg/max/mdev = 0.035/0.051/0.061/0.005 ms
    assert probe.least_of("rtt min/avg/max/mdev = 0.018/0.023/0.103/0.012 ms, ipg/ewma 0.086/0.021 ms") == 0.018
    unanswered = "--- 198.18.3.1 ping statistics ---\n50 packets transmitted, 0 received, 100% packet loss, time 1ms\n"
    assert probe.least_of(unanswered) is None and probe.least_of("") is None
    argv = probe.flood_argv("fc00::3")
    assert argv[0] == "ping" and argv[-1] == "fc00::3" and "-f" in argv and "-q" in argv
    assert argv[argv.index("-c") + 1] == str(probe.FLOOD_ECHOES)
    assert argv[argv.index("-s") + 1] == str(probe.PAYLOAD_BYTES)

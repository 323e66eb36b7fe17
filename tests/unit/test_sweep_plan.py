"""The sweep's plan and its results file, without root."""
import json

import pytest

from experiments.sweep import SweepSpec, append, load_done, open_results, plan_points, record_key
from experiments.cpu import parse_stat, usage


def test_plain_baseline_is_always_in_and_interleaved_with_ipsec():
    spec = SweepSpec(profiles=("aes-gcm-256",), rates_mbit=(10, 100), sizes=(500, 1000), repetitions=2)
    assert spec.profiles == ("none", "aes-gcm-256")
    points = plan_points(spec)
    assert len(points) == 2 * 2 * 2 * 2
    # within a rate, plain and IPsec of one size and repetition are neighbours
    assert [(p.profile, p.size_bytes, p.repetition) for p in points[:6]] == [
        ("none", 500, 0), ("aes-gcm-256", 500, 0), ("aes-gcm-256", 1000, 0), ("none", 1000, 0),
        ("none", 500, 1), ("aes-gcm-256", 500, 1)]
    switches = sum(a.profile != b.profile for a, b in zip(points, points[1:]))
    assert switches == 8  # every other point (alternating order would switch at all 15 boundaries)
    # rates are outermost: one network per rate
    assert [p.rate_mbit for p in points] == [10.0] * 8 + [100.0] * 8
    assert len({p.key() for p in points}) == len(points)


def test_udp_points_measure_datagram_sizes():
    spec = SweepSpec(transports=("tcp", "udp"), sizes=(500,), rates_mbit=(10,), repetitions=1)
    modes = {(p.transport, p.size_mode) for p in plan_points(spec)}
    assert modes == {("tcp", "mss"), ("udp", "datagram")}


@pytest.mark.parametrize("kw,match", [
    (dict(topology="ring"), "unknown topology"), (dict(rates_mbit=(0,)), "rates must be positive"),
    (dict(sizes=(1500,)), "TCP MSS values: 88..1460"), (dict(ip_versions=(5,)), "ip_versions"),
    (dict(transports=("sctp",)), "transports"), (dict(profiles=("aes-gcm-512",)), "unknown profile part"),
    (dict(topology="road_warrior", clients=0), "clients must be 1..200"), (dict(repetitions=0), "repetitions"),
])
def test_bad_sweeps_fail_before_anything_runs(kw, match):
    with pytest.raises(ValueError, match=match):
        SweepSpec(**kw)


def record(point, goodput=1.0):
    from dataclasses import asdict
    return {**asdict(point), "goodput_mbps": goodput}


def test_resume_skips_measured_points_and_cuts_a_partial_line(tmp_path):
    spec = SweepSpec(sizes=(500, 1000), rates_mbit=(10,), repetitions=1)
    points = plan_points(spec)
    path = str(tmp_path / "results.jsonl")
    with open_results(path) as f:
        append(f, record(points[0]))
        append(f, record(points[1]))
    with open(path, "a") as f:
        f.write(json.dumps(record(points[2]))[:40])  # killed mid-write
    assert load_done(path) == {points[0].key(), points[1].key()}
    with open_results(path) as f:
        append(f, record(points[2]))
    lines = open(path).read().splitlines()
    assert [record_key(json.loads(l)) for l in lines] == [p.key() for p in points[:3]]


def test_cpu_usage_from_proc_stat_deltas():
    a = parse_stat("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3\n")
    b = parse_stat("cpu  160 0 80 860 50 0 50 0 0 0\n")
    u = usage(a, b, hz=100)
    # delta: user 60, system 30, idle 60, softirq 50 -> total 200, busy 140
    assert (u.busy_pct, u.system_pct, u.softirq_pct, u.busy_s) == (70.0, 15.0, 25.0, 1.4)


def test_warm_up_is_whole_seconds_because_iperf3_truncates_it():
    # iperf3 3.12 parses "-O 0.5" as 0: a fractional warm-up would silently be none
    with pytest.raises(ValueError, match="whole seconds"):
        SweepSpec(omit_s=0.5)
    with pytest.raises(ValueError, match="whole seconds"):
        SweepSpec(duration_s=1.5)
    from experiments.iperf import client_args
    with pytest.raises(ValueError, match="whole seconds"):
        client_args("198.18.1.1", 5201, 2, 0.5, "tcp", None, None, None)
    assert client_args("198.18.1.1", 5201, 2, 1.0, "tcp", 1000, None, None)[-4:] == ["-O", "1", "-M", "1000"]

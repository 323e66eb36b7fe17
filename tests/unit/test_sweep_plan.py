"""The sweep's plan and its results file, without root."""
import dataclasses
import json
import os
import subprocess
import sys
import time

import pytest

from experiments.sweep import (RunDirBusy, SweepSpec, append, is_complete, load_done, locked_run_dir,
                               note_interrupted, open_results, plan_points, record_key)
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
    # rates are outermost: the network is re-shaped once per rate
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


def test_repeated_values_are_measured_once():
    spec = SweepSpec(rates_mbit=(10, 10.0, 100), sizes=(500, 500), ip_versions=(4, 4), transports=("tcp", "tcp"))
    assert (spec.rates_mbit, spec.sizes, spec.ip_versions, spec.transports) == ((10.0, 100.0), (500,), (4,), ("tcp",))
    points = plan_points(spec)
    assert len({p.key() for p in points}) == len(points)


def test_spec_survives_meta_json():
    spec = SweepSpec(profiles=("aes-cbc-128-sha1",), rates_mbit=(34,), sizes=(100, 1460), ip_versions=(4, 6))
    assert SweepSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


def record(point, **extra):
    return {**dataclasses.asdict(point), "goodput_mbps": 9.5, **extra}


def test_a_failed_point_counts_as_missing(tmp_path):
    spec = SweepSpec(rates_mbit=(10,), sizes=(500,), repetitions=1)
    a, b = plan_points(spec)
    path = tmp_path / "results.jsonl"
    with open_results(str(path)) as f:
        append(f, record(a))
        append(f, record(b, goodput_mbps=None, failed=True, error="iperf3: server exited"))
    assert load_done(str(path)) == {record_key(record(a))}
    assert not is_complete(str(tmp_path), spec)
    with open_results(str(path)) as f:
        append(f, record(b, failed=False))  # the next run measured it
    assert is_complete(str(tmp_path), spec)


def test_a_second_sweep_on_a_run_directory_is_refused(tmp_path):
    with locked_run_dir(str(tmp_path)):
        with pytest.raises(RunDirBusy, match=rf"being written by another sweep \(pid {os.getpid()}\)"):
            with locked_run_dir(str(tmp_path)):
                pass
    with locked_run_dir(str(tmp_path)):  # released after the block
        pass


def test_the_lock_dies_with_a_killed_holder(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", f"""
import time
from experiments.sweep import locked_run_dir
with locked_run_dir({str(tmp_path)!r}):
    print("locked", flush=True)
    time.sleep(60)
"""], stdout=subprocess.PIPE, text=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))) or ".")
    assert holder.stdout.readline() == "locked\n"
    with pytest.raises(RunDirBusy, match=f"pid {holder.pid}"):
        with locked_run_dir(str(tmp_path)):
            pass
    holder.kill()
    holder.wait()
    with locked_run_dir(str(tmp_path)):
        pass


def test_an_interrupted_run_is_marked_in_meta(tmp_path):
    spec = SweepSpec(rates_mbit=(10,), sizes=(500,), repetitions=1)
    (tmp_path / "meta.json").write_text(json.dumps({"sweep": spec.to_json(), "runs": [
        {"started": "2026-11-23T03:00:00Z", "finished": "2026-11-23T03:05:00Z"},
        {"started": "2026-11-23T04:00:00Z"}]}))
    with open_results(str(tmp_path / "results.jsonl")) as f:
        append(f, record(plan_points(spec)[0]))
    note_interrupted(str(tmp_path), "SIGTERM")
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["runs"][0] == {"started": "2026-11-23T03:00:00Z", "finished": "2026-11-23T03:05:00Z"}
    assert meta["runs"][1]["interrupted"] == "SIGTERM" and meta["runs"][1]["finished"]
    assert meta["complete"] is False


def test_a_refused_sweep_leaves_no_empty_run_directory(tmp_path):
    fresh = tmp_path / "fresh"
    with pytest.raises(RuntimeError, match="no kernel"):
        with locked_run_dir(str(fresh)):
            raise RuntimeError("no kernel can run it")
    assert not fresh.exists()
    kept = tmp_path / "kept"
    with locked_run_dir(str(kept)):
        (kept / "meta.json").write_text("{}")
    assert sorted(os.listdir(kept)) == [".lock", "meta.json"]


def test_ab_runs_alternate_kernels_and_add_one_repetition_each_time(tmp_path):
    from experiments.ab import plan_ab

    runs = plan_ab(["--rates", "100"], ("host", "uml"), 3, str(tmp_path))
    assert [label for label, _ in runs] == ["a", "b", "b", "a", "a", "b"]
    reps = [cmd[cmd.index("--repetitions") + 1] for _, cmd in runs]
    assert reps == ["1", "1", "2", "2", "3", "3"]
    for label, cmd in runs:
        assert cmd[cmd.index("--out") + 1] == str(tmp_path / label)
        assert cmd[cmd.index("--kernel") + 1] == {"a": "host", "b": "uml"}[label]
    with pytest.raises(ValueError, match="at least 2 repetitions"):
        plan_ab([], ("uml", "uml"), 1, str(tmp_path))
    with pytest.raises(ValueError, match="not host, uml or an executable UML kernel"):
        plan_ab([], ("uml", str(tmp_path / "no-such-linux")), 2, str(tmp_path))


def test_cpu_window_samples_only_its_own_span():
    from experiments.cpu import Window

    calls = []
    w = Window(0.05, 0.1, at_start=lambda: calls.append(time.monotonic()))
    time.sleep(0.3)
    use = w.usage()
    assert use is not None and 0 <= use.busy_pct <= 100 and len(calls) == 1
    # a test that ended before its warm-up did: no window, and no late sample or callback
    late = []
    w = Window(5.0, 1.0, at_start=lambda: late.append(1))
    assert w.usage() is None
    time.sleep(0.05)
    assert late == []


class _FakeClients:
    def __init__(self, ready):
        self.ready, self.closed = ready, False

    def held(self):
        return self.ready

    def close(self):
        self.closed = True


@pytest.mark.parametrize("ready", [True, False])
def test_clients_started_ahead_are_stopped_if_not_held_when_the_warm_up_ends(ready):
    from experiments.sweep import Ahead

    ahead = Ahead(net=None, spec=SweepSpec(), servers=None)
    ahead.clients = fake = _FakeClients(ready)
    ahead.settle()
    assert fake.closed is (not ready) and ahead.killed == (0 if ready else 1)
    assert ahead.take() is (fake if ready else None) and ahead.take() is None

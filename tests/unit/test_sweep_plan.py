"""The sweep's plan, its adaptive repetitions and its run directory, without root."""
import dataclasses
import json
import math
import os
import subprocess
import sys
import time

import pytest

from experiments.engine.plan import (
    SweepSpec,
    needs_more,
    plan_points,
    plan_round,
    precision_of,
    relative_ci,
    within_budget,
)
from experiments.engine.sweep import _Budget, _next_round, by_point, is_complete, minimum_left, note_interrupted
from experiments.job import Job, SweepWork
from testbed.record import Record, record_key
from testbed.rundir import RunDirBusy, append, load_existing, open_results
from testbed.rundir import locked as locked_run_dir


def test_plain_baseline_is_always_in_and_interleaved_with_ipsec():
    spec = SweepSpec(profiles=("aes-gcm-256",), rates_mbit=(10, 100), sizes=(500, 1000), repetitions=2)
    assert spec.profiles == ("none", "aes-gcm-256")
    points = plan_points(spec)
    assert len(points) == 2 * 2 * 2 * 2
    # within a rate, plain and IPsec of one size and repetition are neighbours
    assert [(p.profile, p.size_bytes, p.repetition) for p in points[:6]] == [
        ("none", 500, 0), ("aes-gcm-256", 500, 0), ("aes-gcm-256", 1000, 0), ("none", 1000, 0),
        ("none", 500, 1), ("aes-gcm-256", 500, 1)]
    switches = sum(a.profile != b.profile for a, b in zip(points, points[1:], strict=False))
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


def record(point, **extra) -> Record:
    return Record(**{**point.fields(), "goodput_mbps": 9.5, **extra})


def test_resume_skips_measured_points_and_cuts_a_partial_line(tmp_path):
    spec = SweepSpec(sizes=(500, 1000), rates_mbit=(10,), repetitions=1)
    points = plan_points(spec)
    with open_results(tmp_path) as f:
        append(f, record(points[0]).to_json())
        append(f, record(points[1]).to_json())
    with open(tmp_path / "results.jsonl", "a") as f:
        f.write(json.dumps(record(points[2]).to_json())[:40])  # killed mid-write
    groups = by_point(load_existing(tmp_path))
    assert sorted(groups) == sorted({points[0].point_key(), points[1].point_key()})
    assert [p.key() for p in _next_round(spec, 10.0, groups)] == [p.key() for p in points[2:]]
    with open_results(tmp_path) as f:
        append(f, record(points[2]).to_json())
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert [record_key(json.loads(line)) for line in lines] == [p.key() for p in points[:3]]


def test_windows_are_timed_by_the_testbed_and_iperf3_runs_longer_without_its_own_warm_up():
    spec = SweepSpec(duration_s=1.5, warmup_s=0.25)
    assert (spec.duration_s, spec.warmup_s) == (1.5, 0.25)
    for kw, match in ((dict(duration_s=0.1), "duration must be seconds in 0.5"),
                      (dict(warmup_s=0.0), "warm-up must be seconds in 0.2")):
        with pytest.raises(ValueError, match=match):
            SweepSpec(**kw)
    from experiments.engine.clients import IPERF_SPARE_S, iperf_options
    options = iperf_options(plan_points(spec)[0], spec)
    assert options == {**options, "omit_s": 0, "duration_s": 2 + IPERF_SPARE_S}  # ceil(1.75) + spare
    # iperf3 (3.12) reads -t and -O as whole seconds: the arguments are checked to be whole
    from experiments.engine.iperf import client_args
    with pytest.raises(ValueError, match="whole seconds"):
        client_args("198.18.1.1", 5201, 2, 0.5, "tcp", None, None, None)
    assert client_args("198.18.1.1", 5201, 2, 1.0, "tcp", 1000, None, None)[-6:] == ["-O", "1", "-i", "0",
                                                                                      "-M", "1000"]


def test_a_held_bitrate_is_paced_at_a_period_the_kernels_tick_does_not_divide():
    # at iperf3's own 1000 us a counted guest's tick (HZ 100, 250, 300 or 1000) keeps one phase against the
    # bursts for a whole window, and windows cost one of two amounts per packet (docs/log/measurements.md)
    from experiments.engine.iperf import PACING_TIMER_US, client_args
    udp = client_args("198.18.1.1", 5201, 1, 0, "udp", None, 1400, "100M")
    assert udp[udp.index("--pacing-timer") + 1] == str(PACING_TIMER_US)
    for hz in (100, 250, 300, 1000):
        tick_us = 1_000_000 / hz
        assert tick_us % PACING_TIMER_US and PACING_TIMER_US % tick_us
    # the offset walks through every phase many times in a window of 1 s at HZ 1000 (the beat, about 57 a second)
    assert 1_000_000 * abs(1 / 1000 - 1 / PACING_TIMER_US) > 40
    # nothing held, nothing paced: an unlimited UDP or TCP sender is left to iperf3
    assert "--pacing-timer" not in client_args("198.18.1.1", 5201, 1, 0, "udp", None, 1400, None)
    assert "--pacing-timer" not in client_args("198.18.1.1", 5201, 1, 0, "tcp", 1400, None, None)


def test_the_wait_for_many_clients_grows_with_clients_per_mbit_up_to_the_syn_horizon():
    from experiments.engine.clients import SYN_HORIZON_S, connect_timeout_s, iperf_options
    assert connect_timeout_s(10) == 15.0  # no rate: floor and a share per client only
    assert connect_timeout_s(10, 100.0) == pytest.approx(15.0 + SYN_HORIZON_S / 10)
    # one client per Mbit/s and more: the whole horizon, a dropped SYN's last try (100 at 10 Mbit/s failed at 60 s)
    assert connect_timeout_s(100, 10.0) == connect_timeout_s(100, 100.0) == 10 + 50 + SYN_HORIZON_S == 187
    assert connect_timeout_s(200, 100.0) == 10 + 100 + SYN_HORIZON_S
    assert connect_timeout_s(50, 10.0) > connect_timeout_s(50, 100.0) > connect_timeout_s(50)
    # iperf3 runs past the longest wait, so the first clients still send when the last connect
    spec = SweepSpec(rates_mbit=(10,), clients=100, topology="road_warrior", duration_s=1.5, warmup_s=0.25)
    assert iperf_options(plan_points(spec)[0], spec)["duration_s"] > 187 + 1.75


def test_a_connect_limit_given_is_the_one_every_wait_for_the_clients_takes():
    from experiments.engine.clients import connect_timeout_s, iperf_options
    assert connect_timeout_s(100, 10.0, given=3.0) == 3.0 < connect_timeout_s(3)
    spec = SweepSpec(rates_mbit=(10,), clients=100, topology="road_warrior", duration_s=1.5, warmup_s=0.25,
                     connect_timeout_s=3.0)
    assert iperf_options(plan_points(spec)[0], spec)["duration_s"] == math.ceil(1.75 + 3.0) + 3  # + IPERF_SPARE_S
    assert SweepSpec.from_json(spec.to_json()) == spec
    for bad in (0.5, 301, True, "3"):
        with pytest.raises(ValueError, match="connect time limit must be seconds in 1..300"):
            SweepSpec(connect_timeout_s=bad)


def test_an_old_meta_json_with_iperf3s_warm_up_still_reads():
    old = {k: v for k, v in SweepSpec().to_json().items() if k != "warmup_s"} | {"omit_s": 1}
    assert SweepSpec.from_json(old).warmup_s == 1.0


def test_repeated_values_are_measured_once():
    spec = SweepSpec(rates_mbit=(10, 10.0, 100), sizes=(500, 500), ip_versions=(4, 4), transports=("tcp", "tcp"))
    assert (spec.rates_mbit, spec.sizes, spec.ip_versions, spec.transports) == ((10.0, 100.0), (500,), (4,), ("tcp",))
    points = plan_points(spec)
    assert len({p.key() for p in points}) == len(points)


def test_spec_survives_meta_json():
    spec = SweepSpec(profiles=("aes-cbc-128-sha1",), rates_mbit=(34,), sizes=(100, 1460), ip_versions=(4, 6))
    assert SweepSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


def test_a_failed_point_counts_as_missing(tmp_path):
    spec = SweepSpec(rates_mbit=(10,), sizes=(500,), repetitions=1)
    a, b = plan_points(spec)
    with open_results(tmp_path) as f:
        append(f, record(a).to_json())
        append(f, record(b, goodput_mbps=None, failed=True, error="iperf3: server exited").to_json())
    assert [p.key() for p in _next_round(spec, 10.0, by_point(load_existing(tmp_path)))] == [b.key()]
    assert not is_complete(str(tmp_path), spec)
    with open_results(tmp_path) as f:
        append(f, record(b, failed=False).to_json())  # the next run measured it
    assert is_complete(str(tmp_path), spec)


# -- adaptive repetitions ---------------------------------------------------------------------

def test_relative_ci_is_students_t_half_width_over_the_mean():
    assert relative_ci([10.0]) is None and relative_ci([0.0, 0.0]) is None
    # n = 4, mean 10, s = 0.8165, t(3) = 3.182: 3.182 * 0.8165 / 2 / 10
    assert relative_ci([9.0, 10.0, 10.0, 11.0]) == pytest.approx(0.12991, rel=1e-4)


def recs(goodputs, cpu=None, **extra):
    cpu = cpu or [1.0] * len(goodputs)
    return [Record(goodput_mbps=g, cpu_s_per_gb=c, **extra) for g, c in zip(goodputs, cpu, strict=True)]


@pytest.mark.parametrize("records,more", [
    (recs([]), True),                                    # never measured
    (recs([9.5]), True),                                 # below the minimum of 2
    (recs([9.50, 9.51]), False),                         # 12.7 * 0.00707 / 1.414 / 9.505 = 0.67 %: precise
    (recs([9.5, 9.0]), True),                            # 12.7 * 0.354 / 1.414 / 9.25 = 34 %: again
    (recs([9.5, 9.0, 9.4, 9.1, 9.3, 9.2, 9.35, 9.15]), False),  # noisy but at the most repetitions
    (recs([9.5, 9.5], cpu=[1.0, 1.3]), True),            # precise goodput, imprecise CPU cost
    (recs([9.5, 9.5], bound="anomaly") + recs([9.5]), True),     # anomalies do not count towards the mean
    (recs([9.5, 9.5], failed=True), True),               # nor do failures
    (recs([9.5, 9.5, 9.5], failed=True), False),         # ... but three in a row: the point's own, given up
    (recs([9.5], failed=True) + recs([9.5]) + recs([9.5, 9.5], failed=True), True),  # not in a row
    (recs([9.50, 9.51], foreign_cpu_pct=40.0), True),    # precise, but beside other work on the host: again
    (recs([9.50], foreign_cpu_pct=40.0) + recs([9.51, 9.50], foreign_cpu_pct=1.0), False),  # two quiet ones
    (recs([9.50, 9.51], foreign_cpu_pct=5.0), False),    # at the threshold: quiet
    # counted: the cost is instructions per byte (no CPU seconds), with the same target
    (recs([9.50, 9.51], cpu=[None, None], clock="instructions", instructions_per_byte=60.0), False),
    ([Record(goodput_mbps=9.5, clock="instructions", instructions_per_byte=i) for i in (60.0, 78.0)], True),
])
def test_a_point_is_repeated_until_precise_or_at_the_most(records, more):
    spec = SweepSpec(repetitions=2, max_repetitions=8, precision_pct=2, cpu_precision_pct=10)
    assert needs_more(spec, records) is more


def test_fixed_repetitions_stop_at_the_count_however_noisy():
    spec = SweepSpec(repetitions=3)
    assert not spec.adaptive and spec.most_repetitions == 3
    assert needs_more(spec, recs([9.0, 9.5])) and not needs_more(spec, recs([8.0, 9.0, 10.0]))


def test_rounds_measure_only_the_imprecise_points_with_their_next_repetition():
    spec = SweepSpec(rates_mbit=(10,), sizes=(500, 1000), repetitions=2, max_repetitions=5)
    first = plan_round(spec, 10.0, 0) + plan_round(spec, 10.0, 1)
    assert [(p.profile, p.size_bytes, p.repetition) for p in first[:4]] == [
        ("none", 500, 0), ("aes-gcm-256", 500, 0), ("aes-gcm-256", 1000, 0), ("none", 1000, 0)]
    noisy = ("none", 1000)
    records = [record(p, goodput_mbps=9.0 + (p.repetition if (p.profile, p.size_bytes) == noisy else 0),
                      cpu_s_per_gb=1.0) for p in first]
    todo = _next_round(spec, 10.0, by_point(records))
    assert [(p.profile, p.size_bytes, p.repetition) for p in todo] == [("none", 1000, 2)]
    # resumed after a kill during the first round: the point it missed catches up beside the others
    todo = _next_round(spec, 10.0, by_point(records[:3]))
    assert [(p.profile, p.size_bytes, p.repetition) for p in todo] == [
        ("none", 500, 1), ("aes-gcm-256", 500, 1), ("aes-gcm-256", 1000, 1), ("none", 1000, 0)]


def test_the_budget_keeps_time_for_the_later_rates_minimum():
    spec = SweepSpec(repetitions=2, max_repetitions=12, budget_s=100)
    # 2.5 s a point: one more at 60 s fits with 10 minimum repetitions to come (60 + 27.5 <= 100) ...
    assert within_budget(spec, 60.0, 2.5, 10)
    # ... not with 20 of them (60 + 52.5), nor after 98 s with none
    assert not within_budget(spec, 60.0, 2.5, 20) and not within_budget(spec, 98.0, 2.5, 0)
    assert within_budget(SweepSpec(), 1e9, 2.5, 1000)  # no budget, no limit
    with pytest.raises(ValueError, match="time budget"):
        SweepSpec(budget_s=0)


def test_the_budget_counts_what_the_command_spent_before_the_sweep_began():
    spec = SweepSpec(sizes=(500,), repetitions=2, max_repetitions=12, budget_s=100)
    point = plan_round(spec, 10.0, 0)[0]
    past_minimum = [record(point), record(point)]
    now = time.time()
    # a 2.3 s repetition (warm-up and window) still fits 10 s after the command's start ...
    assert _Budget(spec, now - 10).allows(past_minimum, 0, [], {})
    # ... not 99 s after it, though the sweep itself has only begun (a slow boot counts)
    late = _Budget(spec, now - 99)
    assert not late.allows(past_minimum, 0, [], {}) and late.over
    assert late.allows([record(point)], 0, [], {})  # a point's minimum is always measured
    assert _Budget(spec).allows(past_minimum, 0, [], {})  # no start given: counted from now
    assert _Budget(spec, now + 50).allows(past_minimum, 0, [], {})  # a start in the future is now


def test_a_guest_runs_the_job_the_host_handed_it_its_start_and_command_included(monkeypatch, tmp_path):
    from experiments import runner
    from experiments.job import Job, KernelChoice, SweepWork
    from testbed import handoff

    monkeypatch.delenv(handoff.ENV, raising=False)
    handoff.received.cache_clear()
    assert runner.received() is None  # on the host: nothing handed
    job = Job(SweepWork(SweepSpec(rates_mbit=(10.0,), sizes=(1460,), budget_s=60.0), turns=str(tmp_path / "t")),
              out_dir=str(tmp_path), kernel=KernelChoice(uml_mem="1G", host_cpu=1), allow_failures=True,
              command=("ipsec-testbed", "sweep", "--rates", "10"), started_unix=1795557000.25, verbose=2)
    monkeypatch.setenv(handoff.ENV, handoff.Handoff(job=job.to_json()).to_env())
    handoff.received.cache_clear()
    try:
        got = runner.received()
        assert got == job and got.started_unix == 1795557000.25  # the budget counts from the host's start
        assert got.work.spec.budget_s == 60.0 and got.work.turns == str(tmp_path / "t")
    finally:
        monkeypatch.delenv(handoff.ENV)
        handoff.received.cache_clear()


def test_minimum_left_counts_the_repetitions_still_owed():
    spec = SweepSpec(rates_mbit=(10, 100), sizes=(500,), repetitions=2, max_repetitions=8)
    first = plan_round(spec, 10.0, 0)
    groups = by_point([record(p, cpu_s_per_gb=1.0) for p in first] +
                      [record(plan_round(spec, 100.0, 0)[0], failed=True)])
    assert minimum_left(spec, (10.0, 100.0), groups) == 2 + 4  # one owed at 10, two each at 100
    assert minimum_left(spec, (100.0,), groups) == 4
    # past the budget, a round asks only for what the minimum owes
    assert [p.repetition for p in _next_round(spec, 10.0, groups, extras=False)] == [1, 1]
    done = by_point([record(p, cpu_s_per_gb=1.0, goodput_mbps=9.0 + p.repetition)
                     for rep in (0, 1) for p in plan_round(spec, 10.0, rep)])
    assert _next_round(spec, 10.0, done, extras=False) == [] and _next_round(spec, 10.0, done)


def test_precision_counts_the_points_and_why_some_are_not_precise():
    spec = SweepSpec(rates_mbit=(10,), sizes=(500, 1000), repetitions=2, max_repetitions=4)
    quiet, noisy, capped, owed = plan_round(spec, 10.0, 0)
    rows = [record(quiet, cpu_s_per_gb=c) for c in (1.0, 1.01)]
    rows += [record(noisy, cpu_s_per_gb=c) for c in (1.0, 1.5)]
    rows += [record(capped, cpu_s_per_gb=c) for c in (1.0, 1.5, 1.0, 1.5)]
    rows += [record(owed, cpu_s_per_gb=1.0)]
    assert precision_of(spec, by_point(rows)) == {"points": 4, "precise": 1, "at_most": 1, "short": 2, "unusable": 0,
                                                  "disturbed": 0}
    # the quiet point's windows beside other work: not precise, and counted as short of quiet windows
    rows[:2] = [record(quiet, cpu_s_per_gb=c, foreign_cpu_pct=30.0) for c in (1.0, 1.01)]
    got = precision_of(spec, by_point(rows))
    assert (got["precise"], got["short"], got["disturbed"]) == (0, 3, 1)


def test_a_second_sweep_on_a_run_directory_is_refused(tmp_path):
    with locked_run_dir(str(tmp_path)), \
            pytest.raises(RunDirBusy, match=rf"being written by another run \(pid {os.getpid()}\)"), \
            locked_run_dir(str(tmp_path)):
        pass
    with locked_run_dir(str(tmp_path)):  # released after the block
        pass


def test_the_lock_dies_with_a_killed_holder(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", f"""
import time
from testbed.rundir import locked
with locked({str(tmp_path)!r}):
    print("locked", flush=True)
    time.sleep(60)
"""], stdout=subprocess.PIPE, text=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))) or ".")
    assert holder.stdout.readline() == "locked\n"
    with pytest.raises(RunDirBusy, match=f"pid {holder.pid}"), locked_run_dir(str(tmp_path)):
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
    with open_results(tmp_path) as f:
        append(f, record(plan_points(spec)[0]).to_json())
    note_interrupted(str(tmp_path), "SIGTERM")
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["runs"][0] == {"started": "2026-11-23T03:00:00Z", "finished": "2026-11-23T03:05:00Z"}
    assert meta["runs"][1]["interrupted"] == "SIGTERM" and meta["runs"][1]["finished"]
    assert meta["complete"] is False


def test_a_refused_sweep_leaves_no_empty_run_directory(tmp_path):
    fresh = tmp_path / "fresh"
    with pytest.raises(RuntimeError, match="no kernel"), locked_run_dir(str(fresh)):
        raise RuntimeError("no kernel can run it")
    assert not fresh.exists()
    kept = tmp_path / "kept"
    with locked_run_dir(str(kept)):
        (kept / "meta.json").write_text("{}")
    assert sorted(os.listdir(kept)) == [".lock", "meta.json"]


def _suite_job(out_dir, **spec) -> Job:
    return Job(SweepWork(SweepSpec(**{"rates_mbit": (100.0,), **spec})), out_dir=str(out_dir), report=False)


def test_ab_runs_alternate_kernels_and_add_one_repetition_each_time(tmp_path):
    from experiments.ab import plan_ab

    runs = plan_ab(_suite_job(tmp_path), ("host", "uml"), 3)
    assert [label for label, _ in runs] == ["a", "b", "b", "a", "a", "b"]
    assert [job.work.spec.repetitions for _, job in runs] == [1, 1, 2, 2, 3, 3]
    assert {job.work.spec.rates_mbit for _, job in runs} == {(100.0,)}  # the suite's own spec otherwise
    for label, job in runs:
        assert job.out_dir == str(tmp_path / label)
        assert job.kernel.kernel == {"a": "host", "b": "uml"}[label]
    with pytest.raises(ValueError, match="at least 2 repetitions"):
        plan_ab(_suite_job(tmp_path), ("uml", "uml"), 1)
    with pytest.raises(ValueError, match="no-such-linux does not exist"):
        plan_ab(_suite_job(tmp_path), ("uml", str(tmp_path / "no-such-linux")), 2)


class _FakeClients:
    def __init__(self, ready):
        self.ready, self.closed, self.reaped = ready, None, False

    def held(self):
        return self.ready

    def close(self, wait=True):
        self.closed = "waited" if wait else "killed"

    def reap(self):
        self.reaped = True


@pytest.mark.parametrize("ready", [True, False])
def test_clients_started_ahead_are_stopped_if_not_held_when_the_warm_up_ends(ready):
    from experiments.engine.clients import Ahead

    ahead = Ahead(net=None, spec=SweepSpec(), servers=None)
    ahead.clients = fake = _FakeClients(ready)
    ahead.settle()
    # killed without waiting for them to exit (the window opens now), reaped afterwards
    assert fake.closed == (None if ready else "killed") and ahead.killed == (0 if ready else 1)
    assert ahead.take() is (fake if ready else None) and ahead.take() is None
    ahead.reap()
    assert fake.reaped is (not ready)


@pytest.mark.parametrize("argv, expected", [
    ([], (2, 12, 285.0)),                               # adaptive: 2, more while imprecise, up to 12, in 285 s
    (["--repetitions", "5"], (5, 5, 285.0)),            # a count given alone is that count
    (["--max-repetitions", "6"], (2, 6, 285.0)),
    (["--repetitions", "3", "--max-repetitions", "6", "--budget", "0"], (3, 6, None)),  # 0: no limit
    (["--max-repetitions", "1"], (1, 1, 285.0)),         # at most 1: the default least follows it down
])
def test_repetition_options(argv, expected):
    script = _sweep_script()
    spec = script.spec_from(script.build_parser().parse_args(argv))
    assert (spec.repetitions, spec.max_repetitions, spec.budget_s) == expected


def test_the_command_with_no_options_runs_the_default_sweep():
    from experiments.engine.plan import default_sweep

    script = _sweep_script()
    assert script.spec_from(script.build_parser().parse_args([])) == default_sweep()
    # the spec's own defaults stay the plainer sweep the suites and seeds build on
    assert (SweepSpec().repetitions, SweepSpec().max_repetitions, SweepSpec().budget_s,
            SweepSpec().latency_probe) == (3, None, None, False)


def test_most_repetitions_below_the_least_is_refused():
    script = _sweep_script()
    with pytest.raises(ValueError, match="--max-repetitions 3 is below --repetitions 5"):
        script.spec_from(script.build_parser().parse_args(["--repetitions", "5", "--max-repetitions", "3"]))


def _sweep_script():
    from cli import sweep

    return sweep


def test_precision_line_says_how_to_finish_the_points_the_budget_cut(tmp_path):
    from experiments import runner

    script = _sweep_script()
    budgeted = script.spec_from(script.build_parser().parse_args(["--rates", "10", "--sizes", "500"]))
    job = Job(SweepWork(budgeted), out_dir=str(tmp_path))
    quiet, noisy = plan_round(budgeted, 10.0, 0)
    with open_results(tmp_path) as f:
        for c in (1.0, 1.01):
            append(f, record(quiet, cpu_s_per_gb=c).to_json())
        for c in (1.0, 1.5):
            append(f, record(noisy, cpu_s_per_gb=c).to_json())
    line = runner.precision_line(job, over_budget=True)
    assert line.startswith("precision: 1 of 2 points within 2 % (goodput) and 10 % (CPU per GB); "
                           "1 stopped short by the time budget (285 s, --budget)\n")
    assert line.endswith(f"the same command with --out {tmp_path} --budget 0 adds the repetitions they lack)")
    # ... and that command does: the same sweep without a budget, on the same directory, asks for them
    resumed = script.spec_from(script.build_parser().parse_args(["--rates", "10", "--sizes", "500",
                                                                 "--budget", "0"]))
    assert [p.point_key() for p in _next_round(resumed, 10.0, by_point(load_existing(tmp_path)))] \
        == [noisy.point_key()]
    # an interrupted run is finished by the same command on its directory; a precise one needs nothing
    assert runner.precision_line(job, over_budget=False).endswith(
        f"failures or an interruption\n(the same command with --out {tmp_path} adds the repetitions they lack)")
    with open_results(tmp_path) as f:
        for c in (1.2, 1.3, 1.25, 1.2, 1.3, 1.25, 1.2, 1.3):
            append(f, record(noisy, cpu_s_per_gb=c).to_json())
    assert runner.precision_line(job, over_budget=True) \
        == "precision: 2 of 2 points within 2 % (goodput) and 10 % (CPU per GB)"


def test_ab_rounds_share_the_repetitions_out(tmp_path):
    from experiments.ab import plan_ab

    runs = plan_ab(_suite_job(tmp_path), ("host", "uml"), 24, rounds=4)
    assert [label for label, _ in runs] == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert [job.work.spec.repetitions for _, job in runs] == [6, 6, 12, 12, 18, 18, 24, 24]
    assert all(job.work.spec.most_repetitions == job.work.spec.repetitions for _, job in runs)
    assert [job.work.spec.repetitions for _, job in plan_ab(_suite_job(tmp_path), ("host", "uml"), 5,
                                                            rounds=2)][::2] == [3, 5]
    with pytest.raises(ValueError, match="rounds must be 1..5"):
        plan_ab(_suite_job(tmp_path), ("host", "uml"), 5, rounds=6)


def test_a_cost_that_follows_the_machines_speed_is_judged_at_the_runs_common_speed():
    # the CPU per GB swings with the speed probe (+-15 %): as measured no point is within 10 %
    # after 3 repetitions; at the run's common speed every one is, and no more are measured
    spec = SweepSpec(rates_mbit=(10,), sizes=(500, 1000), repetitions=3, max_repetitions=8, cpu_precision_pct=10)
    speeds = (85.0, 115.0, 100.0, 110.0, 90.0, 105.0)
    records = [record(p, cpu_s_per_gb=p.size_bytes * speeds[i % 6] / 100 * (1.002 if i % 2 else 0.998),
                      speed_probe_ns=speeds[i % 6])
               for i, p in enumerate(plan_round(spec, 10.0, 0) + plan_round(spec, 10.0, 1) + plan_round(spec, 10.0, 2))]
    assert all(relative_ci([r.cpu_s_per_gb for r in rs]) > 0.10 for rs in by_point(records).values())
    assert _next_round(spec, 10.0, by_point(records)) == []
    assert precision_of(spec, by_point(records))["precise"] == 4
    # without the probe's figures the same costs need more repetitions
    bare = [dataclasses.replace(r, speed_probe_ns=None) for r in records]
    assert len(_next_round(spec, 10.0, by_point(bare))) == 4


def test_a_profile_whose_every_repetition_is_an_anomaly_is_given_up_after_its_first_round():
    from experiments.engine.plan import unusable_profiles

    spec = SweepSpec(rates_mbit=(10,), sizes=(250, 1000), repetitions=3, max_repetitions=12)
    first = plan_round(spec, 10.0, 0)
    # AES's data path moved more payload than the shaper's bytes allow (ESP encrypted after the qdisc)
    rows = [record(p, goodput_mbps=9.0, cpu_s_per_gb=1.0, bound="link") if p.profile == "none" else
            record(p, goodput_mbps=7.3, shaper_goodput_mbps=6.65, bound="anomaly", bound_reason="above the shaper")
            for p in first]
    given_up = unusable_profiles(spec, by_point(rows))
    assert list(given_up) == ["aes-gcm-256"]
    assert "1.10x the payload" in given_up["aes-gcm-256"] and "not usable" in given_up["aes-gcm-256"]
    todo = _next_round(spec, 10.0, by_point(rows))
    assert todo and {p.profile for p in todo} == {"none"}  # plain goes on to its minimum; AES is not re-measured
    assert minimum_left(spec, (10.0,), by_point(rows)) == 2 * 2
    assert precision_of(spec, by_point(rows))["unusable"] == 2
    # one usable repetition anywhere, or a point not yet measured, keeps the profile in the sweep
    assert unusable_profiles(spec, by_point(rows[:1])) == {}
    assert "aes-gcm-256" not in unusable_profiles(spec, by_point(
        [r if r.profile == "none" or r.size_bytes != 250 else dataclasses.replace(r, bound="link") for r in rows]))


def test_a_point_is_unmeasured_while_it_has_fewer_measured_repetitions_than_the_minimum(tmp_path):
    from experiments.engine.plan import unmeasured
    from experiments.runner import missing_line

    spec = SweepSpec(topology="host_to_host", profiles=(), rates_mbit=(10.0,), sizes=(500, 1000), repetitions=2)
    first, second = plan_points(spec, 1)
    measured = [record(p, failed=False, goodput_mbps=9.0) for p in plan_points(spec) if p.size_bytes == 500]
    failed = [record(second, failed=True, goodput_mbps=None, error="iperf3 client exited 1: refused"),
              record(second, repetition=1, failed=False, goodput_mbps=9.1)]
    assert unmeasured(spec, by_point(measured + failed)) == [second]
    assert unmeasured(spec, by_point(measured + failed + [dataclasses.replace(failed[0], failed=False,
                                                                                goodput_mbps=9.2)])) == []
    with open_results(str(tmp_path)) as out:
        for r in measured + failed:
            append(out, r.to_json())
    line = missing_line(Job(SweepWork(spec), out_dir=str(tmp_path)))
    assert line.startswith("INCOMPLETE: 1 of 2 points could not be measured; the last error: iperf3 client exited 1")
    assert first.point_key() != second.point_key()


#: The suites as they were written before they were specs: each must still measure the same.
SUITE_ARGV = {
    "detect": ("--topology", "vpn_gateway", "--profiles", "aes-gcm-256", "--no-plain", "--rates", "1000",
               "--sizes", "1460", "--repetitions", "24", "--duration", "2", "--warmup", "0.2"),
    "quick": ("--topology", "host_to_host", "--mode", "transport", "--profiles", "aes-gcm-128", "--rates", "50",
              "--sizes", "1400", "--repetitions", "3", "--duration", "1", "--warmup", "1"),
    "smoke": ("--topology", "vpn_gateway", "--profiles", "aes-gcm-256", "--rates", "100", "--sizes", "500,1460",
              "--repetitions", "5", "--duration", "2", "--warmup", "1"),
    "ciphers": ("--topology", "host_to_host", "--mode", "transport", "--profiles",
                "aes-gcm-128,aes-gcm-256,aes-cbc-128-sha1,aes-cbc-256-sha256,3des-cbc-sha1,null-sha1",
                "--rates", "1000", "--sizes", "1460", "--repetitions", "4", "--duration", "2", "--warmup", "1"),
    "ipv6": ("--topology", "vpn_gateway", "--profiles", "aes-gcm-256", "--ip", "6", "--rates", "100",
             "--sizes", "1000", "--repetitions", "5", "--duration", "2", "--warmup", "1"),
    "tunnels": ("--topology", "vpn_gateway", "--profiles", "aes-gcm-256,chacha20-poly1305,wireguard",
                "--rates", "10000", "--sizes", "100,1460", "--repetitions", "6", "--duration", "2",
                "--warmup", "0.5"),
}


def _spec_of(argv) -> SweepSpec:
    from cli.sweep import build_parser, spec_from

    return spec_from(build_parser().parse_args(list(argv)))


def _same(spec: SweepSpec) -> SweepSpec:
    """``spec`` with its most repetitions spelt out (None means "as many as the least")."""
    return dataclasses.replace(spec, max_repetitions=spec.most_repetitions)


@pytest.mark.parametrize("name", sorted(SUITE_ARGV))
def test_each_suite_is_the_spec_its_old_command_line_made(name):
    from experiments.catalogue.suites import suite_spec

    # with fixed repetitions the time budget plays no part: a suite has none; nor does a suite probe round trips
    # (its baselines were measured without the latency probe, which the sweep's command line turns on)
    assert _same(suite_spec(name)) == dataclasses.replace(_spec_of(SUITE_ARGV[name]), budget_s=None,
                                                          latency_probe=False)


@pytest.mark.parametrize("spec", [
    SweepSpec(),
    SweepSpec(topology="multi_host_to_host", clients=3, profiles=("3des-cbc-sha1+ah-md5",), mode="transport",
              ip_versions=(4, 6), transports=("tcp", "udp"), rates_mbit=(1.5, 34.0), sizes=(1024, 8192),
              size_mode="write", repetitions=2, max_repetitions=7, precision_pct=1.5, cpu_precision_pct=8.0,
              duration_s=0.7, warmup_s=0.25, udp_bitrate="300M", pmtu="fragment", mtu=1400, socket_buffer=65535,
              budget_s=120.0),
    SweepSpec(profiles=("aes-gcm-256",), plain=False, arms=(0, 3000), repetitions=4),
    SweepSpec(profiles=("none",)),
    SweepSpec(transports=("udp",), size_mode="datagram", sizes=(1350,), keying="ike"),
], ids=["defaults", "everything", "arms", "plain-only", "datagrams-keyed-by-ike"])
def test_a_spec_reaches_a_guest_as_the_same_sweep(spec, tmp_path):
    from experiments.job import Job, SweepWork

    job = Job(SweepWork(spec), out_dir=str(tmp_path))
    assert Job.loads(job.dumps()).work.spec == spec  # datagram sizes included, which no option spells


def test_the_calibration_measures_a_fixed_count_at_the_suites_top_rate(tmp_path, monkeypatch):
    from experiments import injection
    from experiments.catalogue.suites import suite_spec

    monkeypatch.setattr(injection, "cache_path", lambda: str(tmp_path / "cache.json"))
    asked = []

    def measure(spec, run_dir):
        asked.append(spec)
        return 2  # the sweep failed: the calibration says so

    with pytest.raises(injection.InjectionError, match="the calibration's sweep failed"):
        injection.calibrated("detect", suite_spec("detect"), "k", measure, str(tmp_path))
    (spec,) = asked
    assert (spec.repetitions, spec.most_repetitions, spec.adaptive) == (4, 4, False)
    assert spec.arms == (0, injection.CALIBRATION_INSTRUCTIONS) and spec.rates_mbit == (1000.0,)


def test_a_profile_given_up_on_is_not_missing():
    from experiments.engine.plan import unmeasured, unusable_profiles

    spec = SweepSpec(topology="host_to_host", profiles=("aes-gcm-256",), rates_mbit=(10.0,), sizes=(500, 1000),
                     repetitions=2)
    records = [record(p, failed=False, goodput_mbps=9.0, shaper_goodput_mbps=9.0,
                      bound="anomaly" if p.profile != "none" else "link") for p in plan_points(spec, 1)]
    records += [record(p, repetition=1, failed=False, goodput_mbps=9.0, bound="link")
                for p in plan_points(spec, 1) if p.profile == "none"]
    groups = by_point(records)
    assert "aes-gcm-256" in unusable_profiles(spec, groups)
    assert unmeasured(spec, groups) == []


def test_a_guest_runs_the_job_it_was_handed_without_the_current_directorys_modules(tmp_path):
    from cli.job import demo_work, work_of
    from experiments import runner
    from experiments.job import DemoWork

    assert runner.GUEST_ENTRY == ("-P", "-m", "cli.job")
    assert work_of(Job(SweepWork(SweepSpec()), out_dir=str(tmp_path))) is runner.measure
    assert work_of(Job(DemoWork("vpn_gateway"))) is demo_work


def test_a_sweep_of_many_nodes_raises_its_open_file_limit_only_as_far_as_it_needs():
    import resource

    from testbed import netns
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        assert netns.ensure_open_files(soft - 1) == soft  # never lowered
        if hard == resource.RLIM_INFINITY or hard > soft:
            assert netns.ensure_open_files(soft + 8) == soft + 8 == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert netns.open_files_for(202) > 5000  # 200 road warriors, their switch and gateway... and server
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_next_points_clients_are_started_ahead_only_when_all_can_load_in_the_warm_up():
    from experiments.engine.clients import starts_ahead
    point = plan_points(SweepSpec(topology="road_warrior", clients=3))[0]
    assert starts_ahead(point, 0.3)  # three clients in the default warm-up
    assert not starts_ahead(dataclasses.replace(point, clients=200), 0.3)  # killed unloaded, dying in the window
    assert starts_ahead(dataclasses.replace(point, clients=200), 20.0)
    assert not starts_ahead(None, 0.3) and not starts_ahead(point, 0.0)


def test_the_probe_takes_at_most_a_hundredth_of_the_slowest_link():
    from experiments.engine.plan import PROBE_MOST_SHARE, SweepSpec, probe_share

    # irtt's smallest packet: 60 bytes of payload, UDP, IPv4 and the Ethernet header a shaper counts
    assert probe_share(10, 1.0) == pytest.approx(10 * 102 * 8 / 1e6)
    assert probe_share(10, 1.0, ip_version=6) == pytest.approx(10 * 122 * 8 / 1e6)
    # through a tunnel the link carries the tunnel's bytes too: AES-GCM-256's 56 (outer IPv4 20, ESP 8, IV 8,
    # padding 2 and trailer 2, ICV 16), WireGuard's 68 (outer IPv4 20, UDP 8, its header 16, padding 8, tag 16)
    assert probe_share(10, 10.0, 4, "aes-gcm-256") == pytest.approx(10 * (102 + 56) * 8 / 1e7)
    assert probe_share(10, 10.0, 4, "wireguard") == pytest.approx(10 * (102 + 68) * 8 / 1e7)
    assert probe_share(10, 10.0, 4, "none") == probe_share(10, 10.0)
    assert SweepSpec(rates_mbit=(1.0, 10.0), latency_probe=True).probe_per_s == 10  # 0.8 % of 1 Mbit/s
    with pytest.raises(ValueError, match=r"--probe-rate 100 at 1 Mbit/s: .* 8\.2% of the link.* at most 12\.3"):
        SweepSpec(rates_mbit=(1.0, 10.0), latency_probe=True, probe_per_s=100)
    assert SweepSpec(rates_mbit=(1.0,), latency_probe=False, probe_per_s=100).probe_per_s == 100  # no probe
    with pytest.raises(ValueError, match="too slow a link for it: --no-latency-probe"):
        SweepSpec(rates_mbit=(0.05,), latency_probe=True, probe_per_s=1)
    with pytest.raises(ValueError, match=r"in 1\.\.100, not 0"):
        SweepSpec(probe_per_s=0)
    # the default sweep's rate fits the slowest link: ten a second, fewer below 1 Mbit/s
    from experiments.engine.plan import default_sweep, fitting_probe_rate

    assert fitting_probe_rate([10.0, 100.0], [4]) == 10
    assert fitting_probe_rate([10.0], [5]) == fitting_probe_rate([-1.0], [4]) == 10  # named later
    slow = fitting_probe_rate([0.5], [4, 6])
    assert 1 <= slow < 10 and probe_share(slow, 0.5, 6) <= PROBE_MOST_SHARE
    assert default_sweep(rates_mbit=(0.5,), ip_versions=(4, 6)).probe_per_s == slow
    assert default_sweep(rates_mbit=(0.5,), probe_per_s=None).probe_per_s == fitting_probe_rate([0.5], [4])
    assert default_sweep(rates_mbit=(0.5,), probe_per_s=2).probe_per_s == 2  # a rate given is kept
    script = _sweep_script()
    spec = script.spec_from(script.build_parser().parse_args(["--rates", "0.5", "--sizes", "1460"]))
    assert spec.probe_per_s == fitting_probe_rate([0.5], [4]) and spec.latency_probe
    spec = script.spec_from(script.build_parser().parse_args(["--probe-rate", "20"]))
    assert (spec.probe_per_s, spec.probe_tool) == (20, "ping")  # ping, the default
    assert SweepSpec.from_json(spec.to_json()) == spec  # a guest is handed the spec itself


def test_the_probes_tool_is_ping_or_irtt_and_a_guest_is_told_which():
    from experiments.engine.plan import SweepSpec

    assert SweepSpec().probe_tool == "ping"
    with pytest.raises(ValueError, match="the probe's tool must be one of ping, irtt, not 'netperf'"):
        SweepSpec(probe_tool="netperf")
    script = _sweep_script()
    assert script.spec_from(script.build_parser().parse_args([])).probe_tool == "ping"
    spec = script.spec_from(script.build_parser().parse_args(["--probe-tool", "irtt"]))
    assert spec.probe_tool == "irtt"
    assert SweepSpec.from_json(spec.to_json()) == spec  # the guest measures the same
    assert SweepSpec.from_json(SweepSpec(probe_tool="ping").to_json()).probe_tool == "ping"
    # a run's meta.json from before ping was the default: its probe was irtt, the one tool then
    older = {k: v for k, v in SweepSpec(latency_probe=True).to_json().items() if k != "probe_tool"}
    assert SweepSpec.from_json(older).probe_tool == "irtt"
    with pytest.raises(SystemExit):
        script.build_parser().parse_args(["--probe-tool", "netperf"])


def test_the_summary_says_when_the_receiving_kernel_dropped_what_the_shaper_let_through():
    from experiments import runner

    point = plan_points(SweepSpec(sizes=(500,), rates_mbit=(100,)))[0]
    quiet = [record(point, link_packets=16_000, receive_backlog_drops=0), record(point, link_packets=16_000)]
    assert runner.backlog_drops_line(quiet) is None  # none dropped, or a kernel that does not say
    lossy = [*quiet, record(point, link_packets=13_920, receive_backlog_drops=1261),
             record(point, link_packets=11_147, receive_backlog_drops=445),
             record(point, failed=True, receive_backlog_drops=99)]
    assert runner.backlog_drops_line(lossy) == (
        "after the shaper: in 2 of 4 windows the receiving kernel dropped packets from its full receive backlog, "
        "up to 9.1% of the shaper's packets: the emulating CPU fell behind the link, so the loss is the "
        "emulator's, not the link's (receive_backlog_drops)")

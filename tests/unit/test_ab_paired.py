"""The paired kernel A/B's plan (regress --ab): two sweeps alike but for their kernel and turns."""
from __future__ import annotations

import pytest

from cli.options import parse_size
from cli.regress import two_guests_fit
from experiments import ab
from experiments.engine.plan import SweepSpec
from experiments.job import Job, SweepWork
from testbed.record import Record


def suite_job(out_dir: str) -> Job:
    return Job(SweepWork(SweepSpec(profiles=("aes-gcm-256",), plain=False, rates_mbit=(1000.0,), sizes=(1460,),
                                   repetitions=24)), out_dir=out_dir, report=False)


def test_both_sides_measure_the_same_windows_on_one_cpu_each_with_its_turns(tmp_path):
    jobs = ab.paired_jobs(suite_job(str(tmp_path)), ("uml", "host"), 12, cpu=1, arms=((0,), (3000,)))
    a, b = jobs["a"], jobs["b"]
    for side, job in (("a", a), ("b", b)):
        spec = job.work.spec
        assert spec.repetitions == spec.max_repetitions == 12  # no adaptive extras
        assert job.work.turns == str(tmp_path / "turns" / side)
        assert job.out_dir == str(tmp_path / side)
        assert job.kernel.host_cpu == 1
        assert Job.loads(job.dumps()) == job  # as it reaches its process
    assert (a.kernel.kernel, b.kernel.kernel) == ("uml", "host")
    assert (a.work.spec.arms, b.work.spec.arms) == ((0,), (3000,))
    assert a.work.spec.profiles == b.work.spec.profiles == ("aes-gcm-256",)
    with pytest.raises(ValueError, match="at least 2 repetitions"):
        ab.paired_jobs(suite_job(str(tmp_path)), ("uml", "uml"), 1, cpu=None)


def test_in_turn_each_round_measures_its_share_of_the_repetitions_abba(tmp_path):
    runs = ab.plan_ab(suite_job(str(tmp_path)), ("recipe", "debian"), 4, rounds=2)
    assert [(label, job.work.spec.repetitions, job.work.spec.max_repetitions) for label, job in runs] == [
        ("a", 2, 2), ("b", 2, 2), ("b", 4, 4), ("a", 4, 4)]
    assert {job.kernel.uml_kernel for label, job in runs if label == "a"} == {"recipe"}
    assert {job.out_dir for label, job in runs if label == "b"} == {str(tmp_path / "b")}


def test_the_sides_become_the_arms_of_one_run():
    a = [Record(profile="aes-gcm-256", repetition=r, arm="a", goodput_mbps=100.0 + r) for r in range(2)]
    b = [Record(profile="aes-gcm-256", repetition=r, arm="a", goodput_mbps=90.0 + r) for r in range(2)]
    merged = ab.as_arms(a, b)
    assert [(r.arm, r.repetition, r.goodput_mbps) for r in merged] == [
        ("a", 0, 100.0), ("a", 1, 101.0), ("b", 0, 90.0), ("b", 1, 91.0)]


def test_two_guests_are_refused_in_one_line_where_they_do_not_fit(monkeypatch, tmp_path):
    assert parse_size("2G") == 2 << 30 and parse_size("512M") == 512 << 20
    with pytest.raises(ValueError, match="not a size"):
        parse_size("2 GB")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:    4000000 kB\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: real_open(meminfo if p == "/proc/meminfo" else p, *a, **k))
    why = two_guests_fit("2G")
    assert why == "two guests of 2G need 5.0 GiB with room for the host, and 3.8 GiB is available"
    assert two_guests_fit("1G") is None


def test_two_counted_kernels_run_at_once_each_at_its_own_pace(tmp_path):
    images = []
    for name in ("a", "b"):
        image = tmp_path / f"bzImage-{name}"
        image.write_bytes(bytes(0x202) + b"HdrS" + bytes(64))
        images.append(str(image))
    jobs = ab.paired_jobs(suite_job(str(tmp_path)), tuple(images), 8, cpu=1)
    # counted: no turns to wait for, no CPU to share; the n-th windows pair up by their order
    assert all(j.kernel.counted for j in jobs.values())
    assert [(j.kernel.kernel, j.kernel.uml_kernel, j.work.turns, j.kernel.host_cpu) for j in jobs.values()] == [
        ("qemu", images[0], None, None), ("qemu", images[1], None, None)]
    mixed = ab.paired_jobs(suite_job(str(tmp_path)), (images[0], "uml"), 8, cpu=1)
    assert mixed["b"].work.turns and mixed["b"].kernel.host_cpu == 1 and not mixed["b"].kernel.counted

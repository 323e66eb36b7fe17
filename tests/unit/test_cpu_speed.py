from __future__ import annotations

import os

import pytest

from benchmarks import cpu_speed

# An arithmetic loop on each of this machine's two CPUs at once, 40 bins of 1 s, each bin over its CPU's mean
# (2026-11-27, an Intel Xeon with AMX; docs/log/measurements.md): each CPU's speed moved in runs of seconds between
# about 0.8 and 1.25 of its mean, the two almost independently.
CPU0 = [0.78, 0.75, 0.76, 0.76, 1.12, 1.12, 1.14, 1.16, 1.21, 0.9, 0.88, 0.89, 0.86, 0.86, 0.95, 1.25, 1.14, 1.24,
        1.24, 0.95, 0.8, 1.23, 1.22, 0.96, 0.88, 0.95, 0.9, 0.93, 0.9, 1.25, 0.95, 1.18, 1.11, 1.02, 1.03, 0.91, 1.0,
        1.07, 0.77, 1.02]
CPU1 = [0.84, 0.84, 0.84, 0.85, 0.84, 0.84, 0.84, 0.84, 0.86, 0.82, 0.83, 0.83, 0.84, 0.84, 0.84, 1.09, 1.11, 1.26,
        1.19, 1.27, 1.25, 1.07, 0.85, 0.85, 0.86, 1.14, 1.25, 1.11, 1.18, 1.17, 1.16, 1.3, 1.25, 0.88, 1.05, 1.06, 0.97,
        0.92, 1.17, 1.02]


def test_a_cpus_bins_give_its_speed_spread_extremes_and_how_long_a_speed_lasts():
    s = cpu_speed.summarise(1, [100, 100, 100, 50, 50, 50, 100, 100, 100, 50], 0.5)
    assert s.per_s == pytest.approx(160.0)  # 80 operations per half second
    assert s.slowest == pytest.approx(50 / 80) and s.fastest == pytest.approx(100 / 80)
    assert s.run_s == pytest.approx(1.5)  # runs of 3, 3, 3 and 1 bins on one side of the median
    assert s.cv_pct == pytest.approx(32.3, abs=0.1)
    with pytest.raises(ValueError, match="two"):
        cpu_speed.summarise(0, [5], 1.0)
    with pytest.raises(ValueError, match="no operation"):
        cpu_speed.summarise(0, [0, 0], 1.0)


def test_the_captured_cpus_do_not_tell_each_others_speed():
    r = cpu_speed.correlation(CPU0, CPU1)
    assert r == pytest.approx(0.23, abs=0.01) and r < cpu_speed.TRACKS
    assert cpu_speed.correlation(CPU1, CPU1) == pytest.approx(1.0)
    assert cpu_speed.correlation(CPU1, [2 - x for x in CPU1]) == pytest.approx(-1.0)
    assert cpu_speed.correlation(CPU1, [1.0] * len(CPU1)) is None
    first = cpu_speed.summarise(1, CPU1, 1.0)
    assert first.run_s >= 3 and first.slowest < 0.85 and first.fastest > 1.25


def test_every_cpu_is_timed_at_once_in_its_bins():
    cpus = sorted(os.sched_getaffinity(0))
    got = cpu_speed.measure(cpus, "switches", 0.3, 0.1)
    assert sorted(got) == cpus
    assert all(len(bins) == 3 and min(bins) > 0 for bins in got.values())


def test_bad_cpus_and_bins_are_refused_before_anything_runs():
    with pytest.raises(ValueError, match="--cpus must name each CPU once"):
        cpu_speed.Options(cpus=(0, 0))
    with pytest.raises(ValueError, match="--cpus"):
        cpu_speed.Options(cpus=(max(os.sched_getaffinity(0)) + 1,))
    with pytest.raises(ValueError, match="--seconds"):
        cpu_speed.Options(seconds=1, bin=1)
    with pytest.raises(ValueError, match="--bin"):
        cpu_speed.Options(bin=0.01)
    with pytest.raises(ValueError, match="--work must be one of switches, arith"):
        cpu_speed.Options(work="sleep")


def test_its_command_line_gives_the_old_parsers_options_and_refuses_a_bad_value_in_one_line(bench_cli):
    assert bench_cli.options("cpu_speed") == cpu_speed.Options(seconds=60.0, bin=1.0, work="switches", cpus=None)
    mine = min(os.sched_getaffinity(0))  # the suite may run pinned to another CPU than 0
    assert bench_cli.options("cpu_speed", "--seconds", "12", "--bin", "0.5", "--work", "arith", "--cpus",
                             str(mine)) == cpu_speed.Options(12.0, 0.5, "arith", (mine,))
    for words in (["--cpus", "x"], ["--seconds", "1", "--bin", "1"], ["--work", "sleep"]):
        bench_cli.refuses("cpu_speed", *words)


def test_the_page_shows_each_cpu_and_each_pair():
    args = cpu_speed.Options(seconds=3, cpus=(min(os.sched_getaffinity(0)),))
    speeds = (cpu_speed.summarise(0, [10, 12, 8], 1.0), cpu_speed.summarise(1, [5, 5, 6], 1.0))
    result = cpu_speed.Result("6.1.0", speeds, (cpu_speed.Pair(0, 1, 0.2), cpu_speed.Pair(0, 2, None)))
    text = cpu_speed.page(args, result)
    assert text.splitlines()[0] == "2 CPU(s) (6.1.0); switches on each at once, 3 s in bins of 1 s"
    assert "CPUs 0 and 1, bin by bin: correlation 0.20: one does not tell" in text
    assert "CPUs 0 and 2, bin by bin: correlation –: does not vary" in text
    assert cpu_speed.page(args, cpu_speed.Result(interrupted=True)) == ""
    assert cpu_speed.BENCHMARK.status(cpu_speed.Result(interrupted=True)) == 130


def test_a_run_summarises_every_cpu_and_pair_of_what_it_measured(monkeypatch, capsys):
    monkeypatch.setattr(cpu_speed, "measure", lambda cpus, work, seconds, bin_s: {c: CPU0 if c else CPU1 for c in cpus})
    cpus = tuple(sorted(os.sched_getaffinity(0)))[:2]
    result = cpu_speed.run(cpu_speed.Options(seconds=40, cpus=cpus))
    assert [s.cpu for s in result.speeds] == list(cpus)
    assert [(p.a, p.b) for p in result.pairs] == [(a, b) for i, a in enumerate(cpus) for b in cpus[i + 1:]]
    assert "on each at once" in capsys.readouterr().err  # what it does, said before the minute it takes

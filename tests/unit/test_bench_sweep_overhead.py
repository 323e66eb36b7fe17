"""bench sweep_overhead: its command line (the sweep's own words after --), and where a sweep's time went, read
from a run directory without root."""
from __future__ import annotations

import os

import pytest

from benchmarks import sweep_overhead
from cli import bench
from testbed import rundir
from testbed.record import Record


def test_its_command_line_gives_the_old_parsers_options_and_refuses_a_bad_value_in_one_line(tmp_path, bench_cli):
    assert bench_cli.options("sweep_overhead") == sweep_overhead.Options((), None)
    assert bench_cli.options("sweep_overhead", "--", "--rates", "10", "--sizes", "1460") == \
        sweep_overhead.Options(("--rates", "10", "--sizes", "1460"))
    assert bench_cli.options("sweep_overhead", "--from", str(tmp_path)) == sweep_overhead.Options(run_dir=str(tmp_path))
    bench_cli.refuses("sweep_overhead", "--from", str(tmp_path / "none"))
    bench_cli.refuses("sweep_overhead", "--from", str(tmp_path), "--", "--rates", "10")


def records() -> list[Record]:
    """Three points 2.5, 2.5 and 3 s apart; two say where their time went."""
    phases = [{"ipsec": 0.1, "warm-up": 0.3, "window": 2.0, "stop": 0.1}, {"warm-up": 0.3, "window": 2.0, "stop": 0.5}]
    return [Record(profile="none", rate_mbit=10.0, size_bytes=1460, repetition=i, goodput_mbps=g, window_start_unix=t,
                   phases_s=p, clients_ahead=i > 0)
            for i, (g, t, p) in enumerate(zip((9.0, 9.2, 9.4, 9.1), (100.0, 102.5, 105.0, 108.0), (*phases, {}, {}),
                                              strict=True))]


def test_where_a_points_time_went_phase_by_phase_and_the_gaps_between_windows():
    p = sweep_overhead.where_time_went(records())
    assert p.gaps_s == (2.5, 2.5, 3.0) and p.points == 2 and p.total_s == pytest.approx(5.3)
    assert [ph.name for ph in p.phases] == ["ipsec", "warm-up", "window", "stop", "outside"]
    ipsec, _, window, stop, outside = p.phases
    assert (ipsec.median_s, ipsec.max_s) == (pytest.approx(0.05), 0.1) and window.share == pytest.approx(4.0 / 5.3)
    assert stop.mean_s == pytest.approx(0.3) and outside.max_s == pytest.approx(0.5)  # all but warm-up and window
    spread, = sweep_overhead.spread(records())
    assert (spread.n, spread.mean) == (4, pytest.approx(9.175)) and spread.cv_pct == pytest.approx(
        100 * 0.170782 / 9.175, rel=1e-4)


def test_a_sweep_already_run_is_read_without_root(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert bench.main(["sweep_overhead"]) == 1
    assert "needs root (the sweep" in capsys.readouterr().err
    with rundir.open_results(tmp_path) as f:
        for r in records():
            rundir.append(f, r.to_json())
    assert bench.main(["sweep_overhead", "--from", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "between window starts: median 2.50 s (min 2.50, max 3.00) over 3; target <= 2.5 s: MET"
    assert lines[-1].split() == ["outside", "0.350", "0.350", "0.50", "13.2%", "(all", "but", "the", "warm-up",
                                 "and", "the", "window)"]


def test_the_page_of_a_sweep_run_now_sets_its_overhead_against_a_guests_boot():
    rs = records()
    result = sweep_overhead.Result("/runs/x", sweep_overhead.where_time_went(rs),
                                   sweep_overhead.Overhead("User-Mode Linux 6.1", 20.0, 4, 9.2, 3, 1.5, "UML"),
                                   sweep_overhead.spread(rs))
    text = sweep_overhead.page(sweep_overhead.Options(), result)
    assert "testbed overhead: 10.8 s = 117.4% of the measurement time" in text
    assert "overhead beyond it: 9.3 s = 101.1% (target <= 15%: NOT MET)" in text
    assert "spread across repetitions: median CV 1.86%, max 1.86%" in text and text.endswith("run directory: /runs/x")

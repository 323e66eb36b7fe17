"""bench sweep_precision: its command line, and its figures of run directories given (read without root)."""
from __future__ import annotations

import os

import pytest

from benchmarks import sweep_precision
from cli import bench
from experiments.engine.plan import default_sweep
from testbed import rundir
from testbed.record import Bound, Record


def test_its_command_line_gives_the_old_parsers_options_and_refuses_a_bad_value_in_one_line(tmp_path, bench_cli):
    default = default_sweep()
    assert bench_cli.options("sweep_precision") == sweep_precision.Options(1, False, (), default.precision_pct,
                                                                           default.cpu_precision_pct)
    assert bench_cli.options("sweep_precision", "--runs", "3", "--no-fixed", "--precision", "1.5", "--cpu-precision",
                             "5") == sweep_precision.Options(3, True, (), 1.5, 5.0)
    assert bench_cli.options("sweep_precision", "--reuse", str(tmp_path), str(tmp_path)).reuse == (str(tmp_path),) * 2
    for words in (["--runs", "-1"], ["--precision", "0"], ["--cpu-precision", "101"], ["--reuse", str(tmp_path / "x")]):
        bench_cli.refuses("sweep_precision", *words)


def write_run(path, goodputs: list[float], cpu: list[float]) -> None:
    with rundir.open_results(path) as f:
        for i, (g, c) in enumerate(zip(goodputs, cpu, strict=True)):
            rundir.append(f, Record(profile="aes-gcm-256", rate_mbit=10.0, size_bytes=1460, repetition=i,
                                    goodput_mbps=g, cpu_s_per_gb=c, cpu_s_per_gb_measured=c * 1.1,
                                    bound=Bound.LINK).to_json())
        rundir.append(f, Record(profile="aes-gcm-256", rate_mbit=10.0, size_bytes=1460, repetition=len(cpu),
                                goodput_mbps=1.0, cpu_s_per_gb=99.0, bound=Bound.ANOMALY).to_json())


def test_run_directories_given_are_read_without_root_each_and_between_them(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert bench.main(["sweep_precision", "--runs", "2"]) == 1
    assert "needs root (the sweeps" in capsys.readouterr().err
    a, b = tmp_path / "a", tmp_path / "b"
    write_run(a, [9.5, 9.6, 9.4], [10.0, 10.2, 9.8])
    write_run(b, [9.5, 9.6, 9.4], [12.0, 12.2, 11.8])
    result = sweep_precision.run(sweep_precision.Options(reuse=(str(a), str(b))))
    first = result.runs[0]
    assert (first.repetitions, first.anomalies, first.wall_s) == (3, 1, None)  # the anomaly left out
    # three repetitions 0.1 apart: t(2) = 4.303 times 0.1 / sqrt(3), in percent of 9.5
    assert first.points[0].goodput_pct == pytest.approx(100 * 4.303 * 0.1 / 3 ** 0.5 / 9.5, rel=1e-3)
    assert first.met("cpu_pct", 10.0) == 1 and first.points[0].cpu_pct < 10.0
    between = result.between
    assert (between.runs, between.points, between.pairs, between.held) == (2, 1, 1, (0, 0))  # 10 against 12
    assert bench.main(["sweep_precision", "--reuse", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"run: {a}\n") and "summary" not in text  # nothing swept here: nothing to sum up
    assert "wall time: –; 1 points, 3 repetitions, 1 anomaly (left out)" in text
    assert "goodput CI half-width: median 2.61 %, widest 2.61 %; within 2 %: 0 of 1 points" in text
    assert "between 2 runs, CPU per GB at the 1 points whose CPU was not saturated:" in text


def test_the_sweeps_run_here_are_summed_up_side_by_side():
    point = sweep_precision.PointWidths("aes-gcm-256", 10.0, 1460, 4, 1.5, 8.0, 9.0, "link")
    runs = (sweep_precision.Run("adaptive", "adaptive 1", "/r/a", 300.0, (point,), 0),
            sweep_precision.Run("fixed 3", "fixed 3 repetitions", "/r/f", 200.0, (point,), 2))
    text = sweep_precision.page(sweep_precision.Options(), sweep_precision.Result(runs, None))
    summary = text.split("summary\n")[1].splitlines()
    assert summary[1].split() == ["adaptive", "300", "4", "0", "1.50", "/", "1.50", "8.00", "/", "8.00", "1", "of",
                                  "1", "1"]
    assert summary[2].split()[:4] == ["fixed", "3", "200", "4"]

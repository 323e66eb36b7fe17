"""bench probe_queue: its command line, root only to measure, and its tables from a run directory's records."""
from __future__ import annotations

import os

from benchmarks import probe_queue
from cli import bench
from experiments import runner
from testbed import rundir
from testbed.record import Bound, Record


def test_its_command_line_gives_the_old_parsers_options_and_refuses_a_bad_value_in_one_line(tmp_path, bench_cli):
    assert bench_cli.options("probe_queue") == probe_queue.Options(None)
    assert bench_cli.options("probe_queue", str(tmp_path)) == probe_queue.Options(str(tmp_path))
    bench_cli.refuses("probe_queue", str(tmp_path / "none"))


def test_a_run_directory_is_read_without_root_and_the_default_sweep_needs_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(runner, "sweep_apart", lambda *a, **k: (_ for _ in ()).throw(AssertionError("swept")))
    assert bench.main(["probe_queue"]) == 1
    assert "needs root (the default sweep run first" in capsys.readouterr().err
    # 62,500 bytes queued at 10 Mbit/s is 50 ms of waiting; in UML the full queue's mean wait is 0.85 * 60 ms
    with rundir.open_results(tmp_path) as f:
        for up_ms in (51.0, 49.0, 60.0):
            rundir.append(f, Record(rate_mbit=10.0, bound=Bound.LINK, queue_mean_bytes=62_500.0, probe_up_ms=up_ms,
                                    transport="tcp", backend="uml").to_json())
    assert bench.main(["probe_queue", str(tmp_path)]) == 0
    first, *rest = capsys.readouterr().out.split("\n\n")
    assert first.splitlines()[1].split() == ["10", "3", "1.020", "0.980", "1.200", "2", "of", "3"]
    assert rest[0].splitlines()[1].split() == ["10", "3", "1.000", "0.961", "1.176", "2", "of", "3", "(predicted",
                                               "51.0", "ms)"]


def test_a_run_directory_without_a_probed_link_bound_point_is_refused_in_one_line(tmp_path, capsys):
    with rundir.open_results(tmp_path) as f:
        rundir.append(f, Record(rate_mbit=10.0, bound=Bound.CPU, queue_mean_bytes=62_500.0, probe_up_ms=51.0,
                                transport="tcp").to_json())
    assert bench.main(["probe_queue", str(tmp_path)]) == 1
    assert capsys.readouterr().err.count("\n") == 1

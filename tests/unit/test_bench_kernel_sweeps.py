"""bench kernel_sweeps: its command line (the sweep's own words passed on as given), and its point-by-point
comparison of two synthetic run directories."""
from __future__ import annotations

import json
from pathlib import Path

from benchmarks import kernel_sweeps
from cli import bench


def test_its_command_line_gives_the_old_parsers_options_and_passes_the_sweeps_words_on(bench_cli, tmp_path):
    assert bench_cli.options("kernel_sweeps") == kernel_sweeps.Options(("debian", "recipe"), None, (), ())
    assert bench_cli.options("kernel_sweeps", "--rates", "10", "--kernels", "debian", "6.12", "--sizes", "100",
                             "--out", str(tmp_path), "--no-plain") == \
        kernel_sweeps.Options(("debian", "6.12"), str(tmp_path), (), ("--rates", "10", "--sizes", "100", "--no-plain"))
    assert bench_cli.options("kernel_sweeps", "--reuse", str(tmp_path), str(tmp_path)).reuse == \
        (str(tmp_path), str(tmp_path))
    for words in (["--kernels", "debian", str(tmp_path / "none")], ["--reuse", str(tmp_path / "none"), "."],
                  ["--kernels", "debian"]):
        bench_cli.refuses("kernel_sweeps", *words)


def test_its_help_says_the_sweeps_words_come_last(capsys):
    try:
        bench.main(["kernel_sweeps", "--help"])
    except SystemExit as e:
        assert e.code == 0
    out = capsys.readouterr().out
    assert "[--reuse DIR_A DIR_B] [SWEEP ARGS ...]" in out and "SWEEP ARGS ...: the sweep's own options" in out


def write_run(path: Path, goodputs: dict[tuple[str, int], list[float]], bound: str, version: str) -> str:
    path.mkdir()
    records = [{"topology": "vpn_gateway", "profile": profile, "mode": "tunnel", "ip_version": 4, "transport": "tcp",
                "rate_mbit": 10.0, "size_bytes": size, "size_mode": "mss", "clients": 1, "repetition": i,
                "goodput_mbps": g, "bound": bound}
               for (profile, size), values in goodputs.items() for i, g in enumerate(values)]
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (path / "meta.json").write_text(json.dumps({"kernel_origin": "debian", "kernel_version": version}))
    return str(path)


def test_two_runs_are_compared_point_by_point(tmp_path):
    a = write_run(tmp_path / "a", {("none", 100): [9.0, 9.1, 9.2], ("none", 1460): [9.5, 9.5, 9.6],
                                   ("aes-gcm-256", 100): [5.0, 5.1, 5.2]}, "link", "6.1")
    b = write_run(tmp_path / "b", {("none", 100): [9.1, 9.1, 9.2], ("none", 1460): [8.0, 8.1, 8.0]}, "cpu", "6.12")
    result = kernel_sweeps.run(kernel_sweeps.Options(reuse=(a, b)))
    assert [r.kernel_version for r in result.runs] == ["6.1", "6.12"]
    assert [(p.profile, p.size_bytes, p.agree) for p in result.points] == [
        ("aes-gcm-256", 100, "NO"), ("none", 100, "yes"), ("none", 1460, "NO")]
    assert (result.differ, result.anomalies, result.disagree) == (2, 0, 2)
    lines = kernel_sweeps.page(kernel_sweeps.Options(), result).splitlines()
    assert lines[0] == f"A: {a} {{'kernel_origin': 'debian', 'kernel_version': '6.1', 'kernel_path': None}}"
    assert lines[4] == "('aes-gcm-256', 10.0, 100): only in A"
    assert lines[5].split()[:5] == ["none", "10", "Mbit/s", "100", "B"] and lines[5].endswith("yes")
    assert lines[-1].startswith("3 points: 2 with a different bound class, 0 anomalous repetitions; goodput "
                                "intervals apart at 2")
    assert kernel_sweeps.BENCHMARK.status(result) == 0

"""bench history: its command line, and its verdict on stand-ins for the counted runs and history --check."""
from __future__ import annotations

import json
import os
import subprocess

from benchmarks import history


def test_its_command_line_gives_the_old_parsers_options_and_refuses_a_bad_value_in_one_line(tmp_path, bench_cli):
    default = bench_cli.options("history")
    assert default == history.Options(("steps", "cells"), 8, 5, 180, ("6.1", "6.12"), 2, default.out)
    assert os.path.basename(default.out).endswith("-bench-history") and os.path.isabs(default.out)
    assert bench_cli.options("history", "--parts", "cells", "--cells", "6.1,6.6,6.12", "--runs", "3", "--slow-commit",
                             "2", "--extra-iterations", "90", "--out", str(tmp_path)) == history.Options(
        ("cells",), 8, 2, 90, ("6.1", "6.6", "6.12"), 3, str(tmp_path))
    for words in (["--parts", "steps,bisect"], ["--slow-commit", "9"], ["--runs", "0"]):
        bench_cli.refuses("history", *words)


def test_the_slow_commit_is_named_only_by_one_regression_at_it_and_none_without_it(tmp_path, monkeypatch):
    shas = {b: [f"{b}{i:039d}" for i in range(5)] for b in ("slow", "none")}
    tree = f"{tmp_path}/linux"
    monkeypatch.setattr(history, "make_history", lambda out, commits, slow, iterations: (tree, shas))
    ran = []

    def measure(kernel, store, run_dir, log):
        ran.append(kernel)
        return 0, 100.0

    planted = history.Change("vpn_gateway instructions per packet", f"{tree}@{shas['slow'][3]}", "regression", 0.02)
    found = {"slow": (planted,), "none": (),
             "merged": (history.Change("vpn_gateway goodput", "6.12", "progression", 0.05),)}
    monkeypatch.setattr(history, "measure", measure)
    monkeypatch.setattr(history, "judge", lambda store, out, name: history.Judged(
        0, f"{out}/history-{name}.html", "", ("k",) * 5, 5, found[name]))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, "merged\n", ""))
    args = history.Options(commits=4, slow_commit=3, runs=2, out=str(tmp_path))
    result = history.run(args)
    assert ran[:5] == [f"{tree}@{sha}" for sha in shas["slow"]] and len(ran) == 10 + 4 * 2  # the cells: 2 + 2 kernels
    assert ran[-2:] == [f"{tree}@{shas['slow'][-1]}"] * 2 and result.steps.right
    assert history.BENCHMARK.status(result) == 0
    text = history.page(args, result)
    assert "change points in instructions per packet: regression +2.00 % at commit 3 (right: the slow commit is 3)" \
        in text
    assert "history without the slow commit (5 commits): 0 change points (right)" in text
    assert "cells merged: 5 runs of 5 kernels" in text and "  vpn_gateway goodput: progression +5.00 % at 6.12" in text
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["steps"]["branches"]["none"] == shas["none"] and saved["steps"]["slow"]["seconds"] == [100.0] * 5
    assert saved["steps"]["slow"]["changes"][0]["label"] == "regression" and saved["cells"]["runs"] == 5
    wrong = history.Options(commits=4, slow_commit=2, parts=("steps",), out=str(tmp_path))
    result = history.run(wrong)
    assert result.cells is None and not result.steps.right and history.BENCHMARK.status(result) == 1
    assert "(WRONG: the slow commit is 2)" in history.page(wrong, result)

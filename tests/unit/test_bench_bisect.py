"""bench bisect: its command line, and its verdict on stand-ins for the history and regress --bisect."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from benchmarks import bisect
from experiments.bisection import Step


def test_its_command_line_gives_the_old_parsers_options_and_refuses_a_bad_value_in_one_line(tmp_path, bench_cli):
    default = bench_cli.options("bisect")
    assert (default.commits, default.slow_commit, default.kernel, default.only) == (16, 11, "uml", None)
    assert (default.repetitions, default.extra_iterations) == (12, 2700)  # UML's
    assert os.path.basename(default.out).endswith("-bench-bisect") and os.path.isabs(default.out)
    assert bench_cli.options("bisect", "--commits", "8", "--slow-commit", "5", "--kernel", "qemu", "--only", "slow",
                             "--out", str(tmp_path)) == bisect.Options(8, 5, "qemu", 90, 8, str(tmp_path), "slow")
    assert bench_cli.options("bisect", "--extra-iterations", "3000", "--repetitions", "6", "--out", str(tmp_path)) \
        == bisect.Options(16, 11, "uml", 3000, 6, str(tmp_path))
    for words in (["--slow-commit", "17"], ["--kernel", "host"], ["--repetitions", "0"]):
        bench_cli.refuses("bisect", *words)


def step(kind, commit, verdict, ratio=1.05):
    return Step(kind, commit, f"subject of {commit}", verdict, ratio, ratio - 0.01, ratio + 0.01, 60.0, 120.0)


def test_the_bisects_verdicts_are_read_from_their_logs_and_judged(tmp_path, monkeypatch, capsys):
    shas = {b: [f"{b}{i:039d}" for i in range(5)] for b in bisect.BRANCHES}
    monkeypatch.setattr(bisect, "make_history", lambda out, commits, slow, iterations: (f"{out}/linux", shas))

    def regress(cmd, stdin):  # a bisect of slow names commit 3; one of none finds nothing
        run_dir = cmd[cmd.index("--out") + 1]
        os.makedirs(run_dir)
        first, last = cmd[cmd.index("--bisect") + 1:cmd.index("--bisect") + 3]
        log = ([step("confirm", last, "bad"), step("step", shas["slow"][2], "good", 1.0),
                step("step", shas["slow"][3], "bad"), step("step", shas["slow"][4], "bad")]
               if first.startswith("slow") else [step("confirm", last, "good", 1.0)])
        with open(os.path.join(run_dir, "bisect.jsonl"), "w") as f:
            f.writelines(json.dumps(s.to_json()) + "\n" for s in log)
        return 1 if first.startswith("slow") else 0

    monkeypatch.setattr(subprocess, "call", regress)
    args = bisect.Options(commits=4, slow_commit=3, out=str(tmp_path))
    result = bisect.run(args)
    assert [(b.branch, b.rc, len(b.steps)) for b in result.bisects] == [("slow", 1, 3), ("none", 0, 0)]
    assert bisect.BENCHMARK.status(result) == 0
    text = bisect.page(args, result)
    assert f"slow commit 3 ({shas['slow'][3][:12]}): bisect exit 1, named {shas['slow'][3][:12]} (right)" in text
    assert "3 commits stepped on, 3 paired A/Bs for them" in text and "builds 4.0 min of it" in text
    assert "no slow commit: bisect exit 0 (no regression, right); confirm B/A 1.000 (0.990..1.010)" in text
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["slow"]["steps"] == 3 and saved["none"]["confirm"]["verdict"] == "good"
    wrong = bisect.run(bisect.Options(commits=4, slow_commit=2, out=str(tmp_path / "again"), only="slow"))
    assert "named " + shas["slow"][3][:12] + " (WRONG)" in bisect.page(bisect.Options(commits=4, slow_commit=2), wrong)
    assert "regress --bisect" in capsys.readouterr().err  # each command said as it starts


def test_options_made_without_the_command_line_are_checked_too():
    with pytest.raises(ValueError, match="--kernel must be one of uml, qemu"):
        bisect.Options(kernel="host")
    assert bisect.Options(kernel="qemu", repetitions=3).extra_iterations == 90

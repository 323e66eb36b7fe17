"""bench planted: its command line, and its tallies on stand-ins for the patch and regress --ab."""
from __future__ import annotations

import json
import os
import subprocess

from benchmarks import planted


def test_its_command_line_gives_the_old_parsers_options_and_refuses_a_bad_value_in_one_line(tmp_path, bench_cli):
    default = bench_cli.options("planted")
    assert default == planted.Options(450, (), 1, 0, default.out) and len(default.chosen) == 3
    assert os.path.basename(default.out).endswith("-bench-planted") and os.path.isabs(default.out)
    options = bench_cli.options("planted", "--iterations", "90", "--only", "qemu", "--only", "uml-detect", "--trials",
                                "20", "--identical", "20", "--out", str(tmp_path))
    assert options == planted.Options(90, ("qemu", "uml-detect"), 20, 20, str(tmp_path))
    assert [c[0] for c in options.chosen] == ["qemu", "uml-detect"]
    for words in (["--trials", "0"], ["--only", "host"], ["--identical", "-1"]):
        bench_cli.refuses("planted", *words)


def verdict(metric, ratio, regressed):
    return {"point": {"profile": "aes-gcm-256"}, "metric": metric, "ratio": ratio, "bound": ratio - 0.004,
            "low": ratio - 0.005, "high": ratio + 0.005, "regressed": regressed, "baseline_n": 8, "current_n": 8}


def test_the_patched_kernels_are_flagged_the_identical_ones_not_and_the_sizes_compared(tmp_path, monkeypatch):
    monkeypatch.setattr(planted, "make_patch", lambda out, iterations: f"{out}/esp-input-loop-{iterations}.patch")

    def regress(cmd, stdin):  # +5 % counted, +3 % in UML's CPU time; nothing between identical kernels
        label = os.path.basename(cmd[cmd.index("--out") + 1])
        metric = "instructions_per_packet" if label.startswith("qemu") else "cpu_us_per_packet"
        ratio = 1.0 if "identical" in label else 1.05 if label.startswith("qemu") else 1.03
        with open(cmd[cmd.index("--json") + 1], "w") as f:
            json.dump({"verdicts": [verdict("goodput_mbps", 1.0, False), verdict(metric, ratio, ratio > 1)]}, f)
        return int(ratio > 1)

    monkeypatch.setattr(subprocess, "call", regress)
    args = planted.Options(only=("qemu", "uml"), trials=2, identical=1, out=str(tmp_path))
    result = planted.run(args)
    assert [r.label for r in result.results] == ["qemu-1", "uml-1", "qemu-2", "uml-2"]
    assert [r.label for r in result.identical] == ["qemu-identical-1", "uml-identical-1"]
    assert result.right and planted.BENCHMARK.status(result) == 0
    text = planted.page(args, result)
    assert "  qemu           flagged 2 of 2 (the change: all should); cost B/A 1.0500..1.0500" in text
    assert "  uml identical  flagged 0 of 1 (none should)" in text
    assert "  qemu-1      1.0500 (1.0450..1.0550) flagged; 0 s with builds" in text
    assert "  uml against counted: same direction, size 0.60 x the counted one's" in text
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["results"][0]["verdicts"][1] == verdict("instructions_per_packet", 1.05, True)  # as regress said
    monkeypatch.setattr(subprocess, "call", lambda cmd, stdin: 2)  # no verdicts at all
    (tmp_path / "again").mkdir()
    failed = planted.run(planted.Options(only=("uml",), out=str(tmp_path / "again")))
    assert planted.BENCHMARK.status(failed) == 1
    assert "  uml         no verdict (regress exit 2, 0 s)" in planted.page(planted.Options(only=("uml",)), failed)

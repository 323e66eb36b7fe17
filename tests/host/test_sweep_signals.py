"""The sweep script as a user runs it on this host (inside User-Mode Linux when the host
kernel has no ESP): stopped with SIGINT or SIGTERM, run twice at once.

- a signal ends the run with 130 or 143, the guest and everything in it are gone, every
  point written before the signal is still there, and meta.json says how the run ended;
- two sweeps into the same run directory: the second is refused at once with one line,
  the first goes on undisturbed;
- two sweeps into different directories run side by side and both complete.
"""
import json
import os
import signal
import subprocess
import sys

import pytest
from test_sweep_resume import SCRIPT, keys, leftovers

from testbed import waiting

SMALL = ["--rates", "50", "--sizes", "700,1400", "--repetitions", "2", "--max-repetitions", "2", "--duration", "1",
         "--warmup", "0.2", "--no-report"]


def start(out, args=SMALL):
    return subprocess.Popen([sys.executable, SCRIPT, *args, "--out", str(out)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_for_points(proc, results, n, timeout_s=240):
    def recorded():
        assert proc.poll() is None, f"the sweep ended early: {proc.stderr.read()[-2000:]}"
        return os.path.exists(results) and len(keys(results)) >= n

    waiting.until(recorded, timeout_s, f"the sweep to record {n} points", interval_s=0.1)


def complete_lines(path):
    with open(path) as f:
        return [line for line in f.read().split("\n")[:-1]]


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_stops_the_sweep_and_keeps_its_points(tmp_path, sig, status):
    before = leftovers()
    out = tmp_path / "run"
    results = str(out / "results.jsonl")
    proc = start(out)
    wait_for_points(proc, results, 2)
    written = complete_lines(results)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err[-2000:]
    assert "Traceback" not in err
    assert f"stopped by {signal.Signals(sig).name}" in err and f"--out {out}" in err
    assert complete_lines(results)[:len(written)] == written
    meta = json.loads((out / "meta.json").read_text())
    assert meta["runs"][-1]["interrupted"] == signal.Signals(sig).name
    assert meta["runs"][-1]["finished"] and meta["complete"] is False
    assert leftovers() <= before, leftovers() - before


def test_two_sweeps_on_one_directory_the_second_is_refused(tmp_path):
    out = tmp_path / "run"
    first = start(out)
    wait_for_points(first, str(out / "results.jsonl"), 1)
    second = subprocess.run([sys.executable, SCRIPT, *SMALL, "--out", str(out)], capture_output=True, text=True,
                            timeout=60)
    assert second.returncode == 1
    err = [line for line in second.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and f"being written by another run (pid {first.pid})" in err[0], second.stderr
    _, first_err = first.communicate(timeout=300)
    assert first.returncode == 0, first_err[-2000:]
    got = keys(str(out / "results.jsonl"))
    assert len(got) == len(set(got)) == 8


def test_two_sweeps_side_by_side_both_complete(tmp_path):
    before = leftovers()
    runs = [start(tmp_path / name) for name in ("a", "b")]
    for proc in runs:
        _, err = proc.communicate(timeout=400)
        assert proc.returncode == 0, err[-2000:]
    for name in ("a", "b"):
        got = keys(str(tmp_path / name / "results.jsonl"))
        assert len(got) == len(set(got)) == 8
        assert json.loads((tmp_path / name / "meta.json").read_text())["complete"] is True
    assert leftovers() <= before

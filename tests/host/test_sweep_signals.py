"""The sweep script as a user runs it on this host (inside User-Mode Linux when the host
kernel has no ESP): stopped with SIGINT, SIGTERM or SIGHUP (a closed terminal), run twice at once.

- a signal, while the guest boots or while it measures, ends the run with 128 + the signal and no
  traceback, the guest and everything in it are gone, every point written before the signal is still
  there, and meta.json says how the run ended;
- a second sweep while one measures is refused at once with one line naming the first (the machine is
  one run's at a time); with --allow-concurrent, into the same run directory it is refused all the same
  (one line), and into another both complete, the second's records saying whom they ran beside.
"""
import contextlib
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


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_while_the_guest_boots_ends_the_sweep_quietly(tmp_path, sig, status):
    """Ctrl-C, SIGTERM or a closed terminal two seconds in: the guest is booting, nothing measured yet."""
    before = leftovers()
    proc = start(tmp_path / "run")
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=2)
    assert proc.poll() is None, proc.stderr.read()[-2000:]
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-2000:]
    assert f"stopped by {signal.Signals(sig).name}" in err, err[-2000:]
    waiting.until(lambda: leftovers() <= before, 30, "the guest and its network to be gone", interval_s=0.5,
                  state=lambda: f"left: {leftovers() - before}")


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
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
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-2000:]
    assert f"stopped by {signal.Signals(sig).name}" in err and f"--out {out}" in err
    assert complete_lines(results)[:len(written)] == written
    meta = json.loads((out / "meta.json").read_text())
    assert meta["runs"][-1]["interrupted"] == signal.Signals(sig).name
    assert meta["runs"][-1]["finished"] and meta["complete"] is False
    assert leftovers() <= before, leftovers() - before


def test_a_second_sweep_is_refused_naming_the_first_and_never_shares_its_directory(tmp_path):
    out = tmp_path / "run"
    first = start(out)
    wait_for_points(first, str(out / "results.jsonl"), 1)
    second = subprocess.run([sys.executable, SCRIPT, *SMALL, "--out", str(tmp_path / "other")],
                            capture_output=True, text=True, timeout=60)
    assert second.returncode == 1
    err = [line for line in second.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and "another testbed run is measuring on this machine" in err[0], second.stderr
    assert f"(pid {first.pid}, run directory {out}, since " in err[0] and "--allow-concurrent" in err[0]
    assert not (tmp_path / "other").exists()  # refused before anything was made
    second = subprocess.run([sys.executable, SCRIPT, *SMALL, "--out", str(out), "--allow-concurrent"],
                            capture_output=True, text=True, timeout=60)
    assert second.returncode == 1
    err = [line for line in second.stderr.splitlines() if line.strip() and "WARNING" not in line]
    assert len(err) == 1 and f"being written by another run (pid {first.pid})" in err[0], second.stderr
    _, first_err = first.communicate(timeout=300)
    assert first.returncode == 0, first_err[-2000:]
    got = keys(str(out / "results.jsonl"))
    assert len(got) == len(set(got)) == 8


def test_two_sweeps_side_by_side_with_allow_concurrent_both_complete_marked(tmp_path):
    before = leftovers()
    first = start(tmp_path / "a")
    wait_for_points(first, str(tmp_path / "a" / "results.jsonl"), 1)
    second = start(tmp_path / "b", (*SMALL, "--allow-concurrent"))
    for proc in (first, second):
        _, err = proc.communicate(timeout=400)
        assert proc.returncode == 0, err[-2000:]
    assert "WARNING: measured beside another testbed run" in err and f"(pid {first.pid})" in err
    for name in ("a", "b"):
        got = keys(str(tmp_path / name / "results.jsonl"))
        assert len(got) == len(set(got)) == 8
        assert json.loads((tmp_path / name / "meta.json").read_text())["complete"] is True
    marks = {json.loads(line).get("concurrent_with") for line in (tmp_path / "b" / "results.jsonl").open()}
    assert len(marks) == 1 and f"(pid {first.pid})" in marks.pop()
    assert leftovers() <= before

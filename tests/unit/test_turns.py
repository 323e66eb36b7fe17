"""Two sides taking turns window by window (regress --ab, paired): ABBA order, never together."""
from __future__ import annotations

import threading
import time

import pytest

from experiments.engine import turns


def side(turns_dir, label, windows, log, start_after_s=0.0, window_s=0.01):
    def run():
        time.sleep(start_after_s)  # a guest still booting
        t = turns.Turns(f"{turns_dir}/{label}")
        for _ in range(windows):
            t.wait(timeout_s=10)
            log.append((label, t.n, "start"))
            time.sleep(window_s)
            log.append((label, t.n, "end"))
            t.done()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_windows_go_abba_one_at_a_time_and_pair_up(tmp_path):
    log: list = []
    threads = {"a": side(tmp_path, "a", 5, log), "b": side(tmp_path, "b", 5, log, start_after_s=0.1)}
    paired = turns.take_turns(str(tmp_path), lambda label: threads[label].is_alive(), timeout_s=10)
    assert paired == 5
    starts = [(label, n) for label, n, what in log if what == "start"]
    assert starts == [(label, n) for n, label in turns.schedule(5)]
    assert starts[:4] == [("a", 0), ("b", 0), ("b", 1), ("a", 1)]
    # never two windows at once: every start follows the previous window's end
    assert all(log[i][2] == "start" and log[i + 1][2] == "end" and log[i][:2] == log[i + 1][:2]
               for i in range(0, len(log), 2))


def test_the_first_window_waits_for_both_sides_to_be_ready(tmp_path):
    log: list = []
    threads = {"a": side(tmp_path, "a", 2, log), "b": side(tmp_path, "b", 2, log, start_after_s=0.3)}
    t0 = time.monotonic()
    turns.take_turns(str(tmp_path), lambda label: threads[label].is_alive(), timeout_s=10)
    assert log[0] == ("a", 0, "start") and time.monotonic() - t0 >= 0.3  # A did not measure while B booted


def test_a_side_that_ends_early_leaves_the_other_to_finish_alone(tmp_path):
    log: list = []
    threads = {"a": side(tmp_path, "a", 4, log), "b": side(tmp_path, "b", 2, log)}
    paired = turns.take_turns(str(tmp_path), lambda label: threads[label].is_alive(), timeout_s=10)
    assert paired == 2 and [n for label, n, what in log if label == "a" and what == "end"] == [0, 1, 2, 3]


def test_a_side_that_hangs_is_reported(tmp_path):
    (tmp_path / "a.waiting.0").touch()  # a side that never finishes its window, nor ends
    (tmp_path / "b.waiting.0").touch()
    with pytest.raises(turns.TurnsError, match="side a was neither done at window 0 nor ended"):
        turns.take_turns(str(tmp_path), lambda label: True, timeout_s=0.2)


def test_turns_want_a_side_label_in_an_existing_directory(tmp_path):
    with pytest.raises(ValueError, match="DIR/a or DIR/b"):
        turns.Turns(str(tmp_path / "c"))
    with pytest.raises(ValueError, match="DIR/a or DIR/b"):
        turns.Turns(str(tmp_path / "missing" / "a"))

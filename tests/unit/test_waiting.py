"""testbed.waiting: Deadline, the one way the project waits, and until, the tests' way to wait for an event."""
import itertools
import time

import pytest

from testbed import waiting


def test_it_returns_the_conditions_first_true_value():
    counter = itertools.count()
    assert waiting.until(lambda: (n := next(counter)) >= 3 and n, 5, "the counter to reach 3", interval_s=0) == 3


def test_a_wait_that_runs_out_names_what_it_waited_for_and_how_things_stood():
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"^waited 0.2 s for the file to appear \(2 bytes so far\)$"):
        waiting.until(lambda: False, 0.2, "the file to appear", interval_s=0.01, state=lambda: "2 bytes so far")
    assert 0.2 <= time.monotonic() - started < 2


def test_what_the_condition_raises_ends_the_wait_at_once():
    def dead():
        raise AssertionError("the process it waits on exited")

    started = time.monotonic()
    with pytest.raises(AssertionError, match="exited"):
        waiting.until(dead, 30, "a line from the process")
    assert time.monotonic() - started < 1


class FakeClock:
    """time.monotonic and time.sleep for testbed.waiting: sleeping moves the clock on, and is counted."""

    def __init__(self) -> None:
        self.now, self.sleeps = 100.0, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_a_deadline_polls_at_once_then_every_interval_until_its_time_is_up(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(waiting, "time", clock)
    deadline = waiting.Deadline(1.0, interval_s=0.25)
    polled, ran_out = [], False
    for _ in deadline.polls():
        polled.append(clock.now - 100.0)
    else:
        ran_out = True
    # polled at 0 .. 1.25 s: at 1.0 the time is not yet past; the check after the last finds it up, and
    # the loop ends with no sleep more
    assert polled == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25] and ran_out
    assert clock.sleeps == [0.25] * 5 and deadline.passed() and deadline.left_s() == -0.25


def test_a_wait_left_early_does_not_sleep_or_run_its_else(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(waiting, "time", clock)
    deadline = waiting.Deadline(10.0, interval_s=1.0)
    for n, _ in enumerate(deadline.polls()):
        if n == 2:
            break
    else:
        pytest.fail("the loop's else ran though it was left")
    assert clock.sleeps == [1.0, 1.0] and not deadline.passed() and deadline.left_s() == 8.0


def test_one_deadline_bounds_waits_in_turn(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(waiting, "time", clock)
    deadline = waiting.Deadline(1.0, interval_s=0.5)
    first = sum(1 for _ in deadline.polls())  # 0, 0.5, 1.0 and 1.5 s
    # the time is up: a second wait on it looks once, then its else runs
    second = sum(1 for _ in deadline.polls())
    assert (first, second) == (4, 1) and clock.sleeps == [0.5] * 3


def test_a_real_deadline_runs_out_on_time():
    started = time.monotonic()
    polls = sum(1 for _ in waiting.Deadline(0.2, interval_s=0.01).polls())
    assert 0.2 <= time.monotonic() - started < 2 and 2 <= polls <= 21


def test_sleep_until_sleeps_what_is_left_and_not_at_all_when_late(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(waiting, "time", clock)
    waiting.sleep_until(100.25)
    waiting.sleep_until(100.0)  # past: no sleep
    assert clock.sleeps == [0.25] and clock.now == 100.25

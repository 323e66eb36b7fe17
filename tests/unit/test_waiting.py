"""testbed.waiting.until: the tests' one way to wait for an event."""
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

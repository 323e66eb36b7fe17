"""Waiting for something to happen, bounded, and saying what when it does not.

:func:`until` polls a condition until it holds and returns its value; when the time runs out it
raises :class:`TimeoutError` naming what it waited for and, if asked, how things stood then.  It is
the one way the tests wait for an event (a file written, a process blocked, a packet captured):
never a fixed sleep that hopes the event has happened, and never a loop that carries on
silently when it has not.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(condition: Callable[[], T], timeout_s: float, what: str, *, interval_s: float = 0.05,
          state: Callable[[], str] | None = None) -> T:
    """``condition()``'s first truthy value, polled every ``interval_s`` for at most ``timeout_s``.

    Raises :class:`TimeoutError` "waited N s for WHAT (STATE)" when it never holds; an exception the
    condition raises (an assertion that the process it waits on is still alive) goes through at once.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            now = f" ({state()})" if state else ""
            raise TimeoutError(f"waited {timeout_s:g} s for {what}{now}")
        time.sleep(interval_s)

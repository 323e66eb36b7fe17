"""Waiting for something to happen, bounded, and saying what when it does not.

:class:`Deadline` is the project's one way to wait: every wait for an event (a server that
listens, a connection that comes up, a process that exits, a file that appears) polls it with
:meth:`Deadline.polls`, and what it does when the time runs out (raise, say so, give up) is its
loop's ``else``::

    for _ in Deadline(15, interval_s=0.02).polls():
        if listening():
            break
    else:
        raise IperfError("not listening after 15 s")

:func:`until` is the common case, as the tests wait: it polls a condition until it holds and
returns its value; when the time runs out it raises :class:`TimeoutError` naming what it waited
for and, if asked, how things stood then.  Never a fixed sleep that hopes the event has happened,
and never a loop that carries on silently when it has not.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


class Deadline:
    """The end of a wait, ``timeout_s`` from when it is made, and the polls until then, ``interval_s``
    apart.  One deadline may bound several waits in turn (each of a group's servers to listen)."""

    def __init__(self, timeout_s: float, interval_s: float = 0.05) -> None:
        self.timeout_s = timeout_s
        self.interval_s = interval_s
        self.at = time.monotonic() + timeout_s

    def passed(self) -> bool:
        """Whether the time is up."""
        return time.monotonic() > self.at

    def left_s(self) -> float:
        """Seconds until the deadline (negative once it has passed)."""
        return self.at - time.monotonic()

    def polls(self) -> Iterator[None]:
        """Yield at once, then every ``interval_s`` until the deadline has passed.

        The loop's body looks at what it waits for and leaves the loop (``break``, ``return``,
        ``raise``) when it is there; after a poll that did not leave, the time is checked before
        sleeping, and once it is up the iterator ends, so the loop's ``else`` runs at once.
        """
        while True:
            yield
            if self.passed():
                return
            time.sleep(self.interval_s)


def sleep_until(t: float) -> None:
    """Sleep until the monotonic clock reads ``t`` (seconds); at once if it has."""
    delay = t - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def until(condition: Callable[[], T], timeout_s: float, what: str, *, interval_s: float = 0.05,
          state: Callable[[], str] | None = None) -> T:
    """``condition()``'s first truthy value, polled every ``interval_s`` for at most ``timeout_s``.

    Raises :class:`TimeoutError` "waited N s for WHAT (STATE)" when it never holds; an exception the
    condition raises (an assertion that the process it waits on is still alive) goes through at once.
    """
    for _ in Deadline(timeout_s, interval_s).polls():
        value = condition()
        if value:
            return value
    now = f" ({state()})" if state else ""
    raise TimeoutError(f"waited {timeout_s:g} s for {what}{now}")

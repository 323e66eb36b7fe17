"""Two sweeps that take turns, window by window: the paired kernel A/B (``regress --ab``).

Kernel A and kernel B each run the same sweep in a guest of their own, both guests up at once
on the same host CPU.  Each sweep waits before every measurement window for its turn, and
says when the window is over; the host (:func:`take_turns`) hands the turns out in ABBA
order, window by window::

    window 0: A then B     window 1: B then A     window 2: A then B ...

and gives a guest its turn only while the other is idle, waiting for its own next turn (or
finished): so window ``n`` of B ran next to window ``n`` of A, on a machine in the same state,
and the machine's drift falls on both alike.  :func:`analysis.regress.compare_arms` then
judges B against A pair by pair, as it does the arms of one sweep.

The turns are files in a directory both sides see (the run directory: a guest sees the
host's files through hostfs), per side ``LABEL.waiting.N`` (the sweep is at window ``N``),
``LABEL.go.N`` (the host's go-ahead) and ``LABEL.done.N``.  Polling them costs a guest a
file lookup every :data:`POLL_S`, the same for both sides.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from testbed import waiting

#: How often a side looks for its go-ahead, and the host for a side's state.
POLL_S = 0.01
#: Labels of the two sides, in the order of the first window.
LABELS = ("a", "b")


class TurnsError(RuntimeError):
    """A side did not take or finish its turn in time."""


def path(turns_dir: str, label: str, state: str, n: int) -> str:
    return os.path.join(turns_dir, f"{label}.{state}.{n}")


def _touch(file: str) -> None:
    with open(file, "w"):
        pass


class Turns:
    """The sweep's side: :meth:`window` around each measurement window."""

    def __init__(self, prefix: str) -> None:
        """``prefix``: ``TURNS_DIR/LABEL``, as ``ipsec-testbed sweep --turns`` takes it."""
        self.dir, self.label = os.path.split(prefix)
        if self.label not in LABELS or not os.path.isdir(self.dir):
            raise ValueError(f"--turns wants DIR/a or DIR/b with DIR an existing directory, not {prefix!r}")
        self.n = 0

    def wait(self, timeout_s: float = 3600.0) -> None:
        """Say this side is at its next window, and wait for its go-ahead."""
        _touch(path(self.dir, self.label, "waiting", self.n))
        go = path(self.dir, self.label, "go", self.n)
        for _ in waiting.Deadline(timeout_s, interval_s=POLL_S).polls():
            if os.path.exists(go):
                return
        raise TurnsError(f"no go-ahead for window {self.n} of side {self.label} in {timeout_s:g} s")

    def done(self) -> None:
        """Say the window is over."""
        _touch(path(self.dir, self.label, "done", self.n))
        self.n += 1


def order(n: int) -> tuple[str, str]:
    """Who goes first in window ``n``: ABBA."""
    return LABELS if n % 2 == 0 else LABELS[::-1]


def schedule(windows: int) -> Iterator[tuple[int, str]]:
    """``(window, label)`` in the order the host hands the turns out (pure)."""
    for n in range(windows):
        for label in order(n):
            yield n, label


def _reached(turns_dir: str, label: str, state: str, n: int, alive: Callable[[str], bool],
             timeout_s: float) -> bool:
    """Wait until side ``label`` has written ``state`` for window ``n`` (True) or ended (False)."""
    file = path(turns_dir, label, state, n)
    for _ in waiting.Deadline(timeout_s, interval_s=POLL_S).polls():
        if os.path.exists(file):
            return True
        if not alive(label):
            return os.path.exists(file)
    raise TurnsError(f"side {label} was neither {state} at window {n} nor ended after {timeout_s:g} s")


def take_turns(turns_dir: str, alive: Callable[[str], bool], say: Callable[[str], None] = lambda m: None,
               timeout_s: float = 600.0) -> int:
    """Hand the turns out until both sides have ended; the windows measured by both.

    ``alive(label)``: whether that side's sweep still runs.  A side that ends is skipped from
    then on (the pairs it leaves are incomplete, and the comparison says so).  Raises
    :class:`TurnsError` when a side neither reaches its next window nor ends in ``timeout_s``.
    """
    n = paired = 0
    while True:
        took = 0
        first, second = order(n)
        for label, other, other_next in ((first, second, n), (second, first, n + 1)):
            if not _reached(turns_dir, label, "waiting", n, alive, timeout_s):
                continue  # it ended
            # the other side idle (at its next window, or ended) before this one may measure
            _reached(turns_dir, other, "waiting", other_next, alive, timeout_s)
            _touch(path(turns_dir, label, "go", n))
            took += _reached(turns_dir, label, "done", n, alive, timeout_s)
        if took == 0:
            return paired
        paired += took == 2
        if n % 10 == 9:
            say(f"{paired} windows measured on both sides")
        n += 1

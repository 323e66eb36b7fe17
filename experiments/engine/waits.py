"""The waits on a test's connections, as the monitor sees them: data reaching the receivers, every
client connected, the servers idle again.

Each polls a :class:`~experiments.engine.monitor.Monitor`'s readings through
:class:`testbed.waiting.Deadline`.  The first two return the monotonic nanoseconds at which what
they waited for was seen (a window is timed from them) and raise :class:`TimeoutError` saying how
far things got; ``failed()`` ends them at once with its reason (a client that exited).
"""
from __future__ import annotations

import collections
import time
from collections.abc import Callable

from experiments.engine.monitor import CONNECTED, Monitor
from testbed import waiting


def wait_for_flow(monitor: Monitor, timeout_s: float, poll_s: float = 0.02,
                  failed: Callable[[], str | None] = lambda: None) -> int:
    """Wait until the receivers take in data; returns the monotonic ns when they were seen to.

    TimeoutError after ``timeout_s``, or at once when ``failed()`` says why no data will come
    (a client that exited)."""
    start = monitor.flows().received
    for _ in waiting.Deadline(timeout_s, interval_s=poll_s).polls():
        t = time.monotonic_ns()
        if monitor.flows().received > start:
            return t
        why = failed()
        if why:
            raise TimeoutError(why)
    raise TimeoutError(f"no data reached the receivers within {timeout_s:g} s")


def wait_all_connected(monitor: Monitor, timeout_s: float, poll_s: float = 0.05,
                       failed: Callable[[], str | None] = lambda: None) -> int:
    """Wait until every TCP flow's data connection is up (:meth:`Monitor.connected`); the monotonic ns
    when it was.

    TimeoutError after ``timeout_s`` saying how many had connected by then, or at once when
    ``failed()`` says why one never will."""
    for _ in waiting.Deadline(timeout_s, interval_s=poll_s).polls():
        t = time.monotonic_ns()
        n = monitor.connected()
        if n >= len(monitor.receivers):
            return t
        why = failed()
        if why:
            raise TimeoutError(why)
    late = collections.Counter(s for s in monitor.stages() if s != CONNECTED)
    seen = ", ".join(f"{v} with {k}" for k, v in late.most_common())
    raise TimeoutError(f"{n} of {len(monitor.receivers)} clients had connected after {timeout_s:g} s"
                       + (f" (of the others, as their servers saw them: {seen})" if seen else ""))


def wait_servers_idle(monitor: Monitor, timeout_s: float, poll_s: float = 0.01) -> bool:
    """Wait until no server holds a connection open (:meth:`Monitor.servers_busy`); whether none does
    within ``timeout_s``."""
    return any(not monitor.servers_busy() for _ in waiting.Deadline(timeout_s, interval_s=poll_s).polls())

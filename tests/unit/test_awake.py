"""The spinner that keeps a guest's host CPU awake: at the lowest priority, on that CPU alone, gone when closed."""
from __future__ import annotations

import os
import time

from testbed import awake


def _settled(pid: int) -> bool:
    """Whether the spinner has set its own CPU and class (it does so first thing after it starts)."""
    try:
        return os.sched_getscheduler(pid) == os.SCHED_IDLE
    except ProcessLookupError:
        return False


def test_the_spinner_runs_at_sched_idle_on_its_cpu_only_until_closed():
    cpu = max(os.sched_getaffinity(0))
    with awake.Spinner(cpu) as spinner:
        pid = spinner.pid
        deadline = time.monotonic() + 10
        while not _settled(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert os.sched_getscheduler(pid) == os.SCHED_IDLE
        assert os.sched_getaffinity(pid) == {cpu}
    assert spinner.pid is None
    assert not os.path.exists(f"/proc/{pid}")  # ended and reaped

"""The host's CPUs during a window: how much of their time went to work that was not the testbed's.

A figure measured while something else used the machine's CPUs (a build, another user's job, a
second testbed run) is not the figure of a quiet machine, and nothing in it says so. Two totals,
read together at each reading of the CPU meter, tell:

- the host's CPUs' busy time, all of them: /proc/stat's first line, every state but idle and
  iowait (:func:`busy_ns`);
- the testbed's own CPU time: the guest's cgroup account where there is one, this process and
  the speed probe's processes (:func:`processes_ns`).

Over a window, their difference is the *foreign load*: CPU time the machine spent on something
else, as a share of one CPU (:func:`foreign_pct`). The kernel's own background work (timers, RCU,
kworkers) is in it too, a fraction of a percent on a quiet machine; a window with more than
:data:`FOREIGN_PCT` is marked.
"""
from __future__ import annotations

import os
from collections.abc import Iterable

#: A window whose foreign load was above this share of one CPU, in percent, is marked.
FOREIGN_PCT = 5.0
#: /proc/stat and /proc/PID/stat count in clock ticks of this many per second.
_HZ = os.sysconf("SC_CLK_TCK")
_NS_PER_TICK = 1_000_000_000 // _HZ
#: /proc/stat's states that are not busy: idle and iowait (a CPU waiting for a disk runs nothing).
_IDLE_STATES = (3, 4)


def busy_ns(stat: str | None = None) -> int:
    """The busy time of all the host's CPUs so far, in ns: /proc/stat's ``cpu`` line (``stat``: its text,
    for tests), every state but idle and iowait; guest time is already inside user time."""
    if stat is None:
        with open("/proc/stat") as f:
            stat = f.readline()
    fields = stat.split()
    if not fields or fields[0] != "cpu":
        raise ValueError(f"not /proc/stat's first line: {stat[:40]!r}")
    ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return sum(t for i, t in enumerate(ticks) if i not in _IDLE_STATES) * _NS_PER_TICK


def process_ns(pid: int) -> int:
    """The CPU time of process ``pid`` so far (all its threads: utime + stime), in ns; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return 0
    # the command may hold spaces and parentheses: the fields after its last ")" are fixed
    after = text[text.rindex(")") + 2:].split()
    return (int(after[11]) + int(after[12])) * _NS_PER_TICK


def children(pid: int) -> list[int]:
    """The children of ``pid`` (every thread's), where /proc lists them."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def processes_ns(pids: Iterable[int]) -> int:
    """The CPU time of ``pids`` and their children so far, in ns."""
    seen: set[int] = set()
    todo = list(pids)
    total = 0
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += process_ns(pid)
        todo += children(pid)
    return total


def foreign_pct(busy_before: int, busy_after: int, own_before: int, own_after: int, clock_ns: int) -> float:
    """The foreign load of a window, as a share of one CPU in percent (pure): the host's busy time over
    the window less the testbed's own, over the window's length; never below 0 (the totals count in
    ticks, the testbed's own may be read a tick ahead)."""
    if clock_ns <= 0:
        return 0.0
    return max(0.0, 100.0 * ((busy_after - busy_before) - (own_after - own_before)) / clock_ns)

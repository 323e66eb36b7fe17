"""Machine-wide CPU use over a measurement window, from /proc/stat.

Inside User-Mode Linux /proc/stat is the guest's (one CPU), which is what limits an
emulated run there.
"""
from __future__ import annotations

import dataclasses
import os
import threading
from typing import Optional

_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclasses.dataclass(frozen=True)
class CpuSample:
    ticks: tuple[int, ...]  # the aggregate "cpu" line, in _FIELDS order


@dataclasses.dataclass(frozen=True)
class CpuUsage:
    """Shares of all CPUs' time in the window, in percent, and the CPU-seconds used."""

    busy_pct: float
    system_pct: float
    softirq_pct: float
    busy_s: float


def parse_stat(text: str) -> CpuSample:
    """The aggregate ``cpu`` line of /proc/stat text."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:1 + len(_FIELDS)]]
            return CpuSample(tuple(values + [0] * (len(_FIELDS) - len(values))))
    raise ValueError("no aggregate 'cpu' line in /proc/stat text")


def sample() -> CpuSample:
    with open("/proc/stat") as f:
        return parse_stat(f.read())


def usage(before: CpuSample, after: CpuSample, hz: int = 0) -> CpuUsage:
    """CPU use between two samples (``hz``: clock ticks per second, default the system's)."""
    hz = hz or os.sysconf("SC_CLK_TCK")
    delta = [a - b for a, b in zip(after.ticks, before.ticks)]
    total = sum(delta) or 1
    d = dict(zip(_FIELDS, delta))
    idle = d["idle"] + d["iowait"]
    busy = total - idle
    return CpuUsage(busy_pct=100.0 * busy / total, system_pct=100.0 * d["system"] / total,
                    softirq_pct=100.0 * d["softirq"] / total, busy_s=busy / hz)


class Window:
    """CPU use from ``delay_s`` after now for ``length_s``, sampled by two timer threads.

    A test's CPU figures should cover what its goodput covers: iperf3's measured
    seconds, after the warm-up it omits, not the warm-up or the protocol's start and end
    around them.  Start the window when the test starts; :meth:`usage` (after the test)
    stops the timers and gives the use between the two samples, the second taken then
    if the test ended before its time, or None if the window had not begun.
    ``at_start`` is called just before the first sample, in the timer's thread.
    """

    def __init__(self, delay_s: float, length_s: float, at_start=None) -> None:
        self._samples: list = [None, None]
        self._at_start = at_start
        self._timers = [threading.Timer(delay_s, self._take, (0,)),
                        threading.Timer(delay_s + length_s, self._take, (1,))]
        for t in self._timers:
            t.daemon = True
            t.start()

    def _take(self, i: int) -> None:
        if i == 0 and self._at_start:
            self._at_start()
        self._samples[i] = sample()

    def usage(self) -> Optional[CpuUsage]:
        for t in self._timers:
            t.cancel()
            t.join()
        if self._samples[0] is None:
            return None
        return usage(self._samples[0], self._samples[1] or sample())

"""Machine-wide CPU use over a measurement window, from /proc/stat.

Inside User-Mode Linux /proc/stat is the guest's (one CPU), which is what limits an
emulated run there.
"""
from __future__ import annotations

import dataclasses
import os

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

"""The running kernel itself: work runs in this process, on the host's own namespaces."""
from __future__ import annotations

import os
import platform
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import BinaryIO

from testbed import channel, hostload
from testbed.backends.base import GUEST_ENV, HOST_BACKEND, CpuMeter, KernelBackend
from testbed.capabilities import Needs, Probe

#: Whole-machine CPU time in nanoseconds: the root of the cgroup v1 cpuacct hierarchy.
CPUACCT_V1 = "/sys/fs/cgroup/cpuacct/cpuacct.usage"
#: The same in microseconds from cgroup v2's root (where it is mounted at /sys/fs/cgroup).
CPU_STAT_V2 = "/sys/fs/cgroup/cpu.stat"


class ProcStatMeter(CpuMeter):
    """Busy time of all CPUs from /proc/stat: clock ticks (10 ms at USER_HZ 100), the coarse fallback."""

    method = "/proc/stat busy ticks, all CPUs"

    def __init__(self) -> None:
        self.cpus = float(os.cpu_count() or 1)

    def read(self) -> tuple[int, int]:
        return hostload.busy_ns(), time.monotonic_ns()


class CgroupMeter(CpuMeter):
    """CPU time of every task of a cgroup (nanoseconds in v1, microseconds in v2)."""

    def __init__(self, path: str, method: str, cpus: float) -> None:
        self.path, self.method, self.cpus = path, method, cpus
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def read(self) -> tuple[int, int]:
        text = os.pread(self._fd, 4096, 0).decode()
        if self.path.endswith("cpu.stat"):
            usec = next(int(line.split()[1]) for line in text.splitlines() if line.startswith("usage_usec"))
            return usec * 1000, time.monotonic_ns()
        return int(text), time.monotonic_ns()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def host_meter() -> CpuMeter:
    """The finest whole-machine CPU account this host offers."""
    cpus = float(os.cpu_count() or 1)
    for path, method in ((CPUACCT_V1, "cgroup v1 cpuacct.usage of the root cgroup (whole machine, ns)"),
                         (CPU_STAT_V2, "cgroup v2 cpu.stat usage_usec of the root cgroup (whole machine)")):
        try:
            meter = CgroupMeter(path, method, cpus)
            meter.read()
            return meter
        except (OSError, ValueError, StopIteration):
            continue
    return ProcStatMeter()


class HostBackend(KernelBackend):
    """The kernel this process runs on (when it can do what the work needs)."""

    name = HOST_BACKEND
    title = "the host kernel"
    runs_here = True
    note = "every emulated host runs on this one machine's kernel and CPUs"

    def unavailable(self) -> str | None:
        return None

    def lacks(self, needs: Needs, probe_host: Callable[[], Probe]) -> list[str]:
        return probe_host().missing(needs)

    def run(self, argv: Sequence[str], *, cwd: str | None = None, timeout_s: float | None = None,
            interactive: bool = False, modules: Sequence[str] = (), output: BinaryIO | None = None,
            cpu: int | None = None, speed_probe: bool = False, channel_fds: tuple[int, int] | None = None,
            keep_awake: bool = False) -> int:
        env = {**os.environ, GUEST_ENV: self.name}
        env.pop(channel.ENV, None)
        if channel_fds is not None:
            env[channel.ENV] = channel.job_env(channel_fds)
        pinned = ["taskset", "-c", str(cpu)] if cpu is not None else []
        try:
            return subprocess.run([*pinned, *argv], cwd=cwd, env=env, timeout=timeout_s, stdout=output,
                                  stderr=subprocess.STDOUT if output is not None else None,
                                  pass_fds=channel_fds or ()).returncode
        except subprocess.TimeoutExpired:
            return 124

    def label(self) -> str:
        return f"host kernel {platform.release()}"

    def metadata(self) -> dict:
        return {**super().metadata(), "kernel_release": platform.release()}

    def cpu_meter(self) -> CpuMeter:
        return host_meter()

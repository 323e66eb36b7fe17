"""The CPU meter of a User-Mode Linux guest: the host's account of the whole guest, asked from inside.

The host puts every guest in a cgroup v1 cpuacct group of its own (:func:`make_cgroup`) and
answers the guest's questions on a console line, tty3 inside (:func:`serve_meter`); the guest
asks through :class:`GuestMeter`.  With a speed probe on a spare host CPU each answer carries the
probe's totals too.  :mod:`testbed.backends.uml` wires them into a guest's run.
"""
from __future__ import annotations

import logging
import os
import threading
import time

from testbed import hostload, waiting
from testbed.backends.base import BackendError, CpuMeter, CpuSample
from testbed.speedprobe import SpeedProbe

log = logging.getLogger(__name__)

#: Inside the guest: the tty to ask the host's CPU meter on (handed over when there is one).
METER_TTY = "/dev/tty3"
#: The host's cgroup v1 cpuacct hierarchy, where each guest gets a group of its own.
CPUACCT_ROOT = "/sys/fs/cgroup/cpuacct"


def make_cgroup(uml_id: str) -> str | None:
    """A cpuacct cgroup for the guest ``uml_id`` (None where the host has no cgroup v1 cpuacct)."""
    path = os.path.join(CPUACCT_ROOT, uml_id)
    try:
        os.mkdir(path)
        return path
    except FileExistsError:
        return path if not cgroup_tasks(path) else None
    except OSError as e:
        log.info("no cpuacct cgroup for the guest (%s): its CPU is accounted inside it only", e)
        return None


def cgroup_tasks(path: str) -> list[int]:
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return [int(line) for line in f if line.strip()]
    except OSError:
        return []


def remove_cgroup(path: str, timeout_s: float = 5.0) -> bool:
    """Remove a guest's cgroup once its processes are gone (bounded wait); whether it is gone."""
    for _ in waiting.Deadline(timeout_s, interval_s=0.02).polls():
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            pass
    log.warning("cgroup %s still busy after %g s; `ipsec-testbed clean` removes it", path, timeout_s)
    return False


def serve_meter(requests: int, replies: int, cgroup: str, probe: SpeedProbe | None = None) -> None:
    """The host's end of the CPU meter: each line the guest sends is answered at once with
    ``<guest CPU ns> <host monotonic ns> <host CPUs busy ns> <testbed's own CPU ns>`` (the guest's,
    this process's and the probe's: :mod:`testbed.hostload`), followed by ``<probe operations>
    <probe ns>`` when a speed ``probe`` runs and has its first totals.  Ends when the guest's end
    closes."""
    usage = os.open(os.path.join(cgroup, "cpuacct.usage"), os.O_RDONLY | os.O_CLOEXEC)
    # this process alone (its children are the guest's, already in the cgroup), the probe with its partner
    probes = [probe.pid] if probe is not None and probe.pid else []
    try:
        while True:
            try:
                chunk = os.read(requests, 4096)
            except OSError:
                return
            if not chunk:
                return
            for _ in range(chunk.count(b"\n")):
                cpu_ns = int(os.pread(usage, 64, 0))
                busy = hostload.busy_ns()
                mine = cpu_ns + hostload.process_ns(os.getpid()) + hostload.processes_ns(probes)
                speed = probe.read() if probe is not None else None
                tail = f" {speed[0]} {speed[1]}" if speed else ""
                try:
                    os.write(replies, f"{cpu_ns} {time.monotonic_ns()} {busy} {mine}{tail}\n".encode())
                except OSError:
                    return
    finally:
        os.close(usage)


class GuestMeter(CpuMeter):
    """Inside a guest: the host's account of the whole guest's CPU time, asked over tty3.

    Exact to the nanosecond and complete: it includes the host's work for the guest (its
    system calls and page faults, served through ptrace), which the guest's own /proc/stat
    never shows.  The clock is the host's.  One reading takes a round trip through the
    guest's tty; :attr:`CpuSample.local_ns` bounds it.  With a speed probe beside the guest
    (``speed_probe``: what it times) each sample carries the probe's totals too.
    """

    method = "cgroup v1 cpuacct.usage of the User-Mode Linux guest, read by the host (ns)"

    def __init__(self, path: str, speed_probe: str = "") -> None:
        self.cpus = 1.0  # UML is uniprocessor
        self.speed_probe = speed_probe
        self._fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        self._lock = threading.Lock()
        self._buffer = b""

    def read(self) -> tuple[int, int]:
        return self._read()[:2]

    def sample(self) -> CpuSample:
        before = time.monotonic_ns()
        cpu_ns, clock_ns, busy, own, *probe = self._read()
        return CpuSample(cpu_ns, clock_ns, (before, time.monotonic_ns()), probe=tuple(probe) if probe else None,
                         host=(busy, own))

    def _read(self) -> tuple[int, ...]:
        """The host's reply: CPU ns, clock ns, the host's busy ns and the testbed's own ns, then the probe's
        operations and ns when it has them."""
        with self._lock:
            os.write(self._fd, b"?\n")
            while b"\n" not in self._buffer:
                chunk = os.read(self._fd, 256)
                if not chunk:
                    raise BackendError("the host's CPU meter closed its channel")
                self._buffer += chunk
            line, self._buffer = self._buffer.split(b"\n", 1)
        return tuple(int(field) for field in line.split())

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

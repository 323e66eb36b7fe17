"""The CPU meter of a User-Mode Linux guest: the host's account of the whole guest, asked from inside.

The host puts every guest in a cgroup v1 cpuacct group of its own (:func:`make_cgroup`) and
answers the guest's questions on a console line, tty3 inside (:func:`serve_meter`); the guest
asks through :class:`GuestMeter`.  With a speed probe on a spare host CPU each answer carries the
probe's totals too.  :mod:`testbed.backends.uml` wires them into a guest's run.

Every guest also leaves its *account* in its work directory (:func:`write_account`): its cgroup
and the host processes that are its own.  The guests of one measuring run (a paired A/B's two
sides, which carry :data:`testbed.measuring.ENV`) count each other's CPU time as the testbed's
(:class:`Siblings`): the other side's idle guest and its speed probe are not foreign load.
"""
from __future__ import annotations

import glob
import json
import logging
import os
import time
from collections.abc import Sequence

from testbed import hostload, measuring, names, waiting
from testbed.backends.base import CpuMeter, CpuSample
from testbed.backends.guest import HostLine
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


#: The file in a guest's work directory that says which CPU time is its own (:func:`write_account`).
ACCOUNT = "account.json"


def run_group() -> str:
    """The measuring run this process measures for: the holder's pid its parent handed down
    (:data:`testbed.measuring.ENV`: a paired A/B's side), else this process's own."""
    return os.environ.get(measuring.ENV) or str(os.getpid())


def write_account(workdir: str, cgroup: str, probes: list[int]) -> None:
    """Leave the guest's account in ``workdir``: its measuring run (:func:`run_group`), its cgroup, this
    process (which serves it) and its speed probe's processes ``probes``."""
    with open(os.path.join(workdir, ACCOUNT), "w") as f:
        json.dump({"group": run_group(), "cgroup": cgroup, "pid": os.getpid(), "probes": probes}, f)


def cgroup_usage_ns(path: str) -> int:
    """A cpuacct cgroup's CPU time so far, in ns; 0 when it is gone."""
    try:
        with open(os.path.join(path, "cpuacct.usage")) as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0


class Siblings:
    """The other guests of this guest's measuring run, found by their accounts beside ``workdir``
    (work directories share their parent): :meth:`ns` is their CPU time so far, guests, serving
    processes and speed probes, which the meter counts as the testbed's own."""

    def __init__(self, workdir: str) -> None:
        self.workdir, self.group = os.path.abspath(workdir), run_group()

    def accounts(self) -> list[dict]:
        found = []
        pattern = os.path.join(os.path.dirname(self.workdir), f"{names.PREFIX}-*", ACCOUNT)
        for path in sorted(glob.glob(pattern)):
            if os.path.dirname(path) == self.workdir:
                continue
            try:
                with open(path) as f:
                    account = json.load(f)
            except (OSError, ValueError):  # being written, or gone with its guest
                continue
            if isinstance(account, dict) and account.get("group") == self.group:
                found.append(account)
        return found

    def ns(self) -> int:
        return sum(cgroup_usage_ns(a["cgroup"]) + hostload.process_ns(a["pid"]) + hostload.processes_ns(a["probes"])
                   for a in self.accounts())


def serve_meter(requests: int, replies: int, cgroup: str, probe: SpeedProbe | None = None,
                siblings: Siblings | None = None, own: Sequence[int] = ()) -> None:
    """The host's end of the CPU meter: each line the guest sends is answered at once with
    ``<guest CPU ns> <host monotonic ns> <host CPUs busy ns> <testbed's own CPU ns>`` (the guest's,
    this process's, the ``own`` processes' (the speed probe, the spinner) and the ``siblings``':
    :mod:`testbed.hostload`), followed by ``<probe operations> <probe ns>`` when a speed ``probe`` runs
    and has its first totals.  Ends when the guest's end closes."""
    usage = os.open(os.path.join(cgroup, "cpuacct.usage"), os.O_RDONLY | os.O_CLOEXEC)
    # this process alone (its children are the guest's, already in the cgroup), and the testbed's own processes
    # beside the guest (the probe with its partner, the spinner that keeps the guest's CPU awake)
    probes = list(own)
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
                mine += siblings.ns() if siblings is not None else 0
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
        self._line = HostLine(path)

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
        return self._line.ask()

    def close(self) -> None:
        self._line.close()

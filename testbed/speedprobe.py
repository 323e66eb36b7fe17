"""How fast the machine runs right now: a small fixed workload on a spare host CPU.

On a shared machine (a cloud VM) the same work costs different CPU time from one minute
to the next: other tenants contend for the caches, the memory and the physical cores, and
the guest cannot see it (no steal time accrues).  A User-Mode Linux guest's CPU per
timeslice was measured to vary 5-22 % between 2-second windows on busy hours, against
1-2 % on quiet ones (``benchmarks/cpu_noise.py``).

The probe runs beside the guest, on a host CPU the guest is not pinned to, and times a
workload like the guest's own: every guest system call, page fault and context switch is
a host context switch between address spaces, so one probe operation is
:data:`ROUND_TRIPS` pipe round trips between two processes on that CPU plus faulting in
:data:`PAGES` fresh pages.  It works for :data:`WORK_S` out of every :data:`PERIOD_S`
(20 % of one CPU) and keeps two running totals, operations and the nanoseconds they took,
in a 32-byte shared file; :meth:`SpeedProbe.read` returns them.  The nanoseconds per
operation between two readings are how slow the machine was over that window;
:func:`analysis.stats.at_common_speed` sets the CPU costs to one speed with it.  On busy
hours that took the default sweep from 15-18 of 28 points with CPU per GB within 10 % (as
measured) to 23-28 (the README's "Benchmarks").

Run as a script, this file is the probe process itself (it imports nothing of the
testbed's).
"""
from __future__ import annotations

import contextlib
import logging
import mmap
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time

log = logging.getLogger(__name__)

#: One operation: this many pipe round trips and this many fresh pages faulted in.
ROUND_TRIPS = 16
PAGES = 16
#: The probe works this long, once every period.
WORK_S = 0.008
PERIOD_S = 0.04
#: The shared totals: sequence, operations, nanoseconds, sequence (equal when consistent).
_LAYOUT = struct.Struct("<QQQQ")
#: What meta.json says of the probe.
METHOD = (f"host CPU {{cpu}}: {ROUND_TRIPS} pipe round trips between two processes and {PAGES} page faults "
          f"per operation, {WORK_S * 1e3:g} ms of every {PERIOD_S * 1e3:g} ms; ns per operation over each window")


def spare_cpu(guest_cpu: int | None) -> int | None:
    """A CPU this process may use other than ``guest_cpu`` (None: there is none)."""
    others = sorted(set(os.sched_getaffinity(0)) - {guest_cpu})
    return others[0] if guest_cpu is not None and others else None


class SpeedProbe:
    """The probe process, pinned to ``cpu``, its totals in a file in ``directory`` (a guest's
    work directory, which ``ipsec-testbed clean`` removes after a killed run); :meth:`read`
    gives them (``None`` until its first operation).  A context manager; the process also dies
    with the one that started it."""

    def __init__(self, cpu: int, directory: str | None = None) -> None:
        self.cpu = cpu
        fd, self.path = tempfile.mkstemp(prefix="speedprobe-", dir=directory)
        os.ftruncate(fd, _LAYOUT.size)
        self._map = mmap.mmap(fd, _LAYOUT.size, mmap.MAP_SHARED, mmap.PROT_READ)
        os.close(fd)
        self._proc: subprocess.Popen | None = subprocess.Popen(
            ["setpriv", "--pdeathsig", "KILL", "--", sys.executable, "-S", os.path.abspath(__file__),
             str(cpu), self.path],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def read(self) -> tuple[int, int] | None:
        """(operations, nanoseconds) so far."""
        for _ in range(100):
            seq, ops, ns, seq2 = _LAYOUT.unpack(self._map[:_LAYOUT.size])
            if seq == seq2:
                return (ops, ns) if ops else None
        return None

    def method(self) -> str:
        return METHOD.format(cpu=self.cpu)

    @property
    def pid(self) -> int | None:
        """The probe process's pid (its partner is its child); None once closed."""
        return self._proc.pid if self._proc is not None else None

    def close(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(signal.SIGTERM)
            try:
                _, err = self._proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                _, err = self._proc.communicate()
            if self._proc.returncode not in (0, -signal.SIGTERM) and err:
                log.warning("the speed probe ended with %s: %s", self._proc.returncode,
                            err.decode(errors="replace").strip()[-300:])
            self._proc = None
            self._map.close()
            with contextlib.suppress(OSError):
                os.unlink(self.path)

    def __enter__(self) -> SpeedProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def operation(to_partner: int, from_partner: int) -> None:
    """One probe operation (see the module docstring)."""
    for _ in range(ROUND_TRIPS):
        os.write(to_partner, b"x")
        os.read(from_partner, 1)
    pages = mmap.mmap(-1, PAGES * mmap.PAGESIZE)
    for offset in range(0, PAGES * mmap.PAGESIZE, mmap.PAGESIZE):
        pages[offset] = 1
    pages.close()


def partner() -> tuple[int, int]:
    """Fork the partner of :func:`operation` (on this process's CPUs): it echoes each byte until this process is
    gone.  Returns the two ends this process keeps: to the partner, from the partner."""
    partner_in, to_partner = os.pipe()
    from_partner, partner_out = os.pipe()
    if os.fork() == 0:
        os.close(to_partner)
        os.close(from_partner)
        while os.read(partner_in, 1):
            os.write(partner_out, b"x")
        os._exit(0)
    os.close(partner_in)
    os.close(partner_out)
    return to_partner, from_partner


def _main(cpu: int, path: str) -> int:
    # Ctrl-C reaches the whole foreground process group: the probe (and its partner) are ended by the process
    # that started them (SIGTERM, or SIGKILL with it), never by the terminal's interrupt, and print nothing then
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.sched_setaffinity(0, {cpu})
    to_partner, from_partner = partner()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with open(path, "r+b") as f:
        totals = mmap.mmap(f.fileno(), _LAYOUT.size)
    seq = ops = ns = 0
    next_start = time.monotonic()
    while True:
        start = time.perf_counter_ns()
        done = 0
        while time.perf_counter_ns() - start < WORK_S * 1e9:
            operation(to_partner, from_partner)
            done += 1
        ops += done
        ns += time.perf_counter_ns() - start
        seq += 1
        totals[:_LAYOUT.size] = _LAYOUT.pack(seq, ops, ns, seq)
        next_start += PERIOD_S
        time.sleep(max(0.0, next_start - time.monotonic()))


if __name__ == "__main__":
    sys.exit(_main(int(sys.argv[1]), sys.argv[2]))

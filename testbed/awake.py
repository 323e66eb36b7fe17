"""Keep a guest's host CPU from idling: a process that spins at the lowest priority on it.

Between two lone packets a User-Mode Linux guest has nothing to do, sleeps, and its host CPU
halts; on a virtual machine without a cpuidle driver (``/sys/devices/system/cpu/cpuidle``
says ``none``) a halted CPU goes back to the hypervisor.  The packet that wakes the guest then
finds the emulator slow: measured on an Intel Xeon with AMX (2026-11-27, ``bench
unloaded_rtt``), the fastest of 200 sparse pings through ``vpn_gateway`` took 0.04-0.08 ms plain
and 0.08-0.16 ms through AES-GCM-256; with the guest's CPU kept busy, in most runs 0.019-0.028
ms and 0.040-0.063 ms, and what the tunnel added to them was the CPU its packets take back to
back (``docs/log/measurements.md``).

:class:`Spinner` is that busy CPU: a process of scheduling class ``SCHED_IDLE`` pinned to the
guest's host CPU, spinning.  The host's scheduler runs it only when nothing else wants that CPU
and takes the CPU back from it the moment the guest wakes (a ``SCHED_IDLE`` task is preempted by
any other at its wake-up), so it keeps the CPU out of the halt without taking time the guest
asks for.  It is the emulator's ``idle=poll``: for figures about lone packets, the unloaded
round trip and the time to a first packet; it costs a whole host CPU's power while it runs.
Its CPU time is the testbed's own, not foreign load (:mod:`testbed.backends.umlmeter`).

Run as a script, this file is the spinner itself (it imports nothing of the testbed's).
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys


class Spinner:
    """A ``SCHED_IDLE`` process spinning on host CPU ``cpu`` until :meth:`close` (or until the process that
    started it dies, even by SIGKILL)."""

    def __init__(self, cpu: int) -> None:
        self.cpu = cpu
        self._proc: subprocess.Popen | None = subprocess.Popen(
            ["setpriv", "--pdeathsig", "KILL", "--", sys.executable, "-S", os.path.abspath(__file__), str(cpu)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

    def method(self) -> str:
        """What keeps the CPU awake, for the record (meta.json's ``keep_awake``)."""
        return f"a SCHED_IDLE spinner on host CPU {self.cpu}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def close(self) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def __enter__(self) -> Spinner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _main(cpu: int) -> int:
    # Ctrl-C reaches the whole foreground process group: the spinner is ended by the process that started it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    os.sched_setaffinity(0, {cpu})
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    while True:
        pass


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(_main(int(sys.argv[1])))

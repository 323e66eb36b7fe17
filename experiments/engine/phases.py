"""Where a sweep's time goes between one window and the next.

A sweep spends each point's window measuring and everything around it getting there: IPsec switched to the
point's profile, the iperf3 servers checked, the unloaded reference taken, the clients started and connected,
the warm-up, the test stopped and wound up, the record built.  A :class:`Phases` ledger follows one point from the
moment the point before it was measured (its record built) to the moment its own record is: each
:meth:`~Phases.lap` charges the seconds since the one before to a phase.  The laps of a point add up to the time
between its record and the last one, which is, over a sweep, the time between window starts.  Each record keeps
them (``phases_s``) and ``ipsec-testbed bench sweep_overhead`` adds them up.

    ledger = Phases()            # the previous point's record was just built
    ... switch_ipsec ...;         ledger.lap(IPSEC)
    ... the reference ...;        ledger.lap(REFERENCE)
    record = dataclasses.replace(record, phases_s=ledger.seconds())
"""
from __future__ import annotations

import time

#: The phases in a window's order (a point charges only those it goes through).
BETWEEN = "between"          # the previous record written and the progress line, then this point planned
IPSEC = "ipsec"              # IPsec switched to the point's profile (and an arm's filters)
TURN = "turn"                # waiting for the window's turn (regress --ab, timed: the kernels take turns)
SERVERS = "servers"          # the iperf3 servers started again where one had exited, and followed
DRAIN = "drain"              # the shaper's queue drained of what the point before left there
REFERENCE = "reference"      # the unloaded round trip (the probe's sparse echoes)
FLOOD = "flood"              # ping's flood, for the path's least round trip
START = "start"              # the clients started (or taken ahead) until data reaches the receivers
WARMUP = "warm-up"           # the traffic before the window opens (the next point's clients started in it)
WINDOW = "window"            # the measured window
STOP = "stop"                # the clients stopped, and their reports read
WIND_UP = "wind-up"          # the servers done with the interrupted test
RECORD = "record"            # the monitor's verdict and the probe's round trips made a record
FAILED = "failed"            # an attempt that failed (an iperf3 test that was tried again), up to its failure
ORDER = (BETWEEN, IPSEC, TURN, SERVERS, DRAIN, REFERENCE, FLOOD, START, WARMUP, WINDOW, STOP, WIND_UP, RECORD,
         FAILED)
#: The phases a sweep asks for (the rest is what surrounds them).
MEASURING = (WARMUP, WINDOW)


class Phases:
    """Seconds per phase since the ledger was made, charged lap by lap (see the module docstring)."""

    def __init__(self, since: float | None = None) -> None:
        self._last = time.monotonic() if since is None else since
        self._seconds: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        """Charge the seconds since the last lap (or the ledger's start) to ``phase``."""
        now = time.monotonic()
        self._seconds[phase] = self._seconds.get(phase, 0.0) + (now - self._last)
        self._last = now

    def seconds(self) -> dict[str, float]:
        """Each phase's seconds so far (rounded to the ms), in :data:`ORDER`."""
        return {p: round(self._seconds[p], 3) for p in sorted(self._seconds, key=place)}


def place(phase: str) -> int:
    """Where ``phase`` comes in :data:`ORDER` (a phase of no known place, last)."""
    return ORDER.index(phase) if phase in ORDER else len(ORDER)


def outside(phases_s: dict[str, float]) -> float:
    """The seconds of a point's ``phases_s`` spent outside what the sweep asks for (warm-up and window)."""
    return sum(s for p, s in phases_s.items() if p not in MEASURING)

"""The latency probe: round trips across a point's path beside its bulk flows, and before them, by irtt.

irtt (Debian's ``irtt``, the tool flent uses for its latency probes) sends small UDP packets on a fixed
schedule from the first flow's client to an irtt server in its server's namespace and times each round
trip, and each way (both ends are on this machine's clock)::

    before the window: irtt client, 0.3 s at 10 ms      the unloaded round trip (the reference)
    the window:        irtt client every 100 ms, from the warm-up's end to past the window's; the
                       round trips sent within the window count: their median, 90th and 99th percentile
                       (of a 2-second window's 20: the 99th is about its largest), losses

The probe adds 10 small packets a second in each direction by default (``--probe-rate``, 1 to 100, refused
where they would take more than 1 % of the slowest link: :func:`experiments.engine.plan.probe_share`; 60-byte
UDP payloads, about
8 kbit/s with their headers: 0.08 % of a 10 Mbit/s link, whose capacity it shares with the flows), the
least flent's probes send; ``bench probe_overhead`` measures, paired, whether the goodput it rides beside
changes.  A window whose probe lost every reply is marked ``other`` by the caller with the reason, never
given a round trip of zero.

:func:`summarise` is pure and reads irtt's JSON (``-o -``): the unit tests feed it captured output.
"""
from __future__ import annotations

import dataclasses
import json
import math
import subprocess
from collections.abc import Mapping, Sequence

from experiments.engine.iperf import listening, popen_in
from testbed import waiting

IRTT = "irtt"
#: irtt's default port: the servers listen there in the server namespaces, nowhere else.
PORT = 2112
#: The probe's interval before the window (a short burst; under load: the spec's ``probe_per_s``).
IDLE_INTERVAL_S = 0.01
IDLE_S = 0.3
#: irtt's packets: the smallest it sends (its header, 60 bytes of UDP payload with the timestamps asked).
LENGTH = 0


@dataclasses.dataclass(frozen=True)
class Summary:
    """Round trips of one probe run (milliseconds), within a window when one was given: irtt's round trip is
    the client's receive time less its send time less the server's time between receiving and replying."""

    sent: int
    received: int
    rtt_median_ms: float | None
    rtt_p90_ms: float | None
    rtt_p99_ms: float | None
    up_median_ms: float | None     # client to server, on the one clock
    down_median_ms: float | None   # server to client

    @property
    def lost(self) -> int:
        return self.sent - self.received

    def record_fields(self, prefix: str = "probe") -> dict:
        return {f"{prefix}_sent": self.sent, f"{prefix}_lost": self.lost,
                f"{prefix}_rtt_ms": self.rtt_median_ms, f"{prefix}_rtt_p90_ms": self.rtt_p90_ms,
                f"{prefix}_rtt_p99_ms": self.rtt_p99_ms, f"{prefix}_up_ms": self.up_median_ms,
                f"{prefix}_down_ms": self.down_median_ms}


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) of ``values`` by linear interpolation between closest ranks
    (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    at = (len(ordered) - 1) * q / 100
    low, high = math.floor(at), math.ceil(at)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def summarise(output: Mapping | str, start_unix: float | None = None, end_unix: float | None = None) -> Summary:
    """The :class:`Summary` of irtt's JSON ``output``; with ``start_unix``/``end_unix`` only the round trips
    sent within that span of wall-clock time count."""
    data = json.loads(output) if isinstance(output, str) else output
    trips = data.get("round_trips") or []
    rtts, ups, downs, sent = [], [], [], 0
    for trip in trips:
        sent_at = ((trip.get("timestamps") or {}).get("client") or {}).get("send") or {}
        wall = sent_at.get("wall")
        if wall is None:
            continue
        at = wall / 1e9
        if (start_unix is not None and at < start_unix) or (end_unix is not None and at >= end_unix):
            continue
        sent += 1
        if str(trip.get("lost", "false")) != "false":
            continue
        delay = trip.get("delay") or {}
        if delay.get("rtt") is not None:
            rtts.append(delay["rtt"] / 1e6)
        if delay.get("send") is not None:
            ups.append(delay["send"] / 1e6)
        if delay.get("receive") is not None:
            downs.append(delay["receive"] / 1e6)
    return Summary(sent, len(rtts), percentile(rtts, 50), percentile(rtts, 90), percentile(rtts, 99),
                   percentile(ups, 50), percentile(downs, 50))


def client_argv(server: str, duration_s: float, interval_s: float) -> list[str]:
    host = f"[{server}]" if ":" in server else server
    return [IRTT, "client", "-Q", "-d", f"{duration_s:.3f}s", "-i", f"{interval_s * 1000:g}ms", "-l", str(LENGTH),
            "--timeouts=1s", "-o", "-", f"{host}:{PORT}"]


#: irtt's units of a duration, as its per-packet lines print them, in milliseconds.
_UNITS_MS = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1000.0}


def stream_argv(server: str, interval_s: float, duration_s: float) -> list[str]:
    """irtt's client printing a line per round trip as it comes back (``seq=3 rtt=49.3ms rd=... sd=...``),
    for ``duration_s`` (a live chart's: :func:`rtt_of_line` reads the lines)."""
    host = f"[{server}]" if ":" in server else server
    return [IRTT, "client", "-d", f"{duration_s:.0f}s", "-i", f"{interval_s * 1000:g}ms", "-l", str(LENGTH),
            "--timeouts=1s", f"{host}:{PORT}"]


def rtt_of_line(line: str) -> float | None:
    """The round trip in ms of one of irtt's per-packet lines, or None for its other lines (pure)."""
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
    text = fields.get("rtt")
    if not text or not line.startswith("seq="):
        return None
    for unit in sorted(_UNITS_MS, key=len, reverse=True):  # "ms" before "s"
        if text.endswith(unit):
            try:
                return float(text[:-len(unit)]) * _UNITS_MS[unit]
            except ValueError:
                return None
    return None


class Servers:
    """An irtt server in each of ``namespaces`` (the flows' server ends), for the life of a sweep."""

    def __init__(self, namespaces: Sequence[str]) -> None:
        self.namespaces = list(dict.fromkeys(namespaces))
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> Servers:
        try:
            for ns in self.namespaces:
                # its log of each test goes nowhere: a pipe nobody reads would fill over a long sweep
                proc = popen_in(ns, [IRTT, "server", "-b", f":{PORT}"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
                self.procs.append(proc)
            for ns, proc in zip(self.namespaces, self.procs, strict=True):
                waiting.until(lambda proc=proc: proc.poll() is not None or listening(proc.pid, PORT, "udp"),
                              5.0, f"irtt's server listening in {ns}", interval_s=0.02)
                if proc.poll() is not None:
                    raise RuntimeError(f"irtt's server in {ns} ended at its start (exit {proc.returncode})")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []


def run(ns: str, server: str, duration_s: float, interval_s: float) -> subprocess.Popen:
    """irtt's client in ``ns`` towards ``server`` for ``duration_s``, started now; its JSON on stdout."""
    return popen_in(ns, client_argv(server, duration_s, interval_s), stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, text=True)


def result(proc: subprocess.Popen, timeout_s: float, start_unix: float | None = None,
           end_unix: float | None = None) -> Summary | str:
    """What a client run said: its :class:`Summary` (within the span), or why there is none."""
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return f"irtt's client did not end within {timeout_s:.0f} s"
    if proc.returncode != 0:
        return f"irtt's client failed (exit {proc.returncode}): {err.strip()[:300]}"
    try:
        return summarise(out, start_unix, end_unix)
    except (ValueError, TypeError, AttributeError) as e:
        return f"irtt's output was not its JSON: {e}"

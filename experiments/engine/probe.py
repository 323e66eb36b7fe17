"""The latency probe: round trips across a point's path beside its bulk flows, and before them.

Two tools, as flent has them (``sweep --probe-tool``):

- **ping** (iputils', ICMP echo; the default) sends echo requests from the first flow's client to its server,
  whose kernel answers them, with no process of its own on the path: the round trip alone, the path's own
  figure where a guest's process wake-ups weigh (``bench unloaded_rtt`` checks both tools against what predicts
  them), with no handshake to lose under load.  Its echoes carry :data:`PAYLOAD_BYTES` bytes, so that the packet
  is irtt's size;
- **irtt** (Debian's ``irtt``, flent's UDP latency probe) sends small UDP packets on a fixed schedule to an irtt
  server in the server's namespace and times each round trip, and each way (both ends are on this machine's
  clock), with its own processes at both ends on the path.

Either runs::

    before the window: 0.3 s at 10 ms                   the unloaded round trip (the reference): its median
    (a point's first repetition's: the path unloaded is the same for every repetition)
                       ping: then a flood of 50 echoes  the least round trip: the path at the emulator's full
                                                        speed (irtt: the reference's own least)
    the window:        every 100 ms, from the warm-up's end to the window's; the round trips sent within
                       the window count: their median, 90th and 99th percentile (of a 2-second window's 20: the
                       99th is about its largest), losses

The probe adds 10 small packets a second in each direction by default (``--probe-rate``, 1 to 100, refused
where they would take more than 1 % of the slowest link: :func:`experiments.engine.plan.probe_share`; 88-byte
IPv4 packets, about 8 kbit/s with their headers: 0.08 % of a 10 Mbit/s link, whose capacity it shares with the
flows), the least flent's probes send; ``bench probe_overhead`` measures, paired, whether the goodput it rides
beside changes.  A window whose probe lost every reply is marked ``other`` by the caller with the reason, never
given a round trip of zero.

:func:`irtt_trips` reads irtt's JSON (``-o -``) and :func:`ping_trips` ping's lines (``-D``), both pure, into
:class:`Trip` s that :func:`summary_of` sums up: the unit tests feed them captured output.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
import subprocess
import time
from collections.abc import Mapping, Sequence

from experiments.engine.iperf import listening, popen_in
from testbed import waiting

IRTT, PING = "irtt", "ping"
#: The probe's tools (``sweep --probe-tool``), the default first.
TOOLS = (PING, IRTT)
#: The Debian package of each tool's program.
PACKAGES = {PING: "iputils-ping", IRTT: "irtt"}
#: irtt's default port: the servers listen there in the server namespaces, nowhere else.
PORT = 2112
#: The probe's interval before the window (a short burst; under load: the spec's ``probe_per_s``).
IDLE_INTERVAL_S = 0.01
IDLE_S = 0.3
#: irtt's packets: the smallest it sends (its header, 60 bytes of UDP payload with the timestamps asked).
LENGTH = 0
#: The probe's payload: irtt's at its smallest (``-l 0``: its header and the timestamps asked), and ping's echo
#: data, so that an echo is irtt's packet's size (8 bytes of ICMP header for UDP's 8).
PAYLOAD_BYTES = 60
#: How long ping waits for an echo's reply before it counts the echo lost.
PING_TIMEOUT_S = 1
#: ping's reference least: a flood of this many echoes after the unloaded reference, each sent as the last came
#: back (:func:`flood_least`).
FLOOD_ECHOES = 50
#: irtt's waits for its server's reply to its opening handshake, one try after another: a flood that fills the
#: guest's CPU can drop the first (a single try of 1 s once marked a point ``other``: 2026-11-28).
IRTT_OPEN_TIMEOUTS = "250ms,500ms,1s,2s"


@dataclasses.dataclass(frozen=True)
class Trip:
    """One probe packet: when it was sent (Unix time) and its round trip in ms (None: lost); irtt also times
    each way."""

    sent_unix: float
    rtt_ms: float | None
    up_ms: float | None = None
    down_ms: float | None = None


@dataclasses.dataclass(frozen=True)
class Summary:
    """Round trips of one probe run (milliseconds), within a window when one was given.  irtt's round trip is
    the client's receive time less its send time less the server's time between receiving and replying;
    ping's is its reply's kernel receive time less its send time."""

    sent: int
    received: int
    rtt_median_ms: float | None
    rtt_p90_ms: float | None
    rtt_p99_ms: float | None
    up_median_ms: float | None     # client to server, on the one clock (irtt only)
    down_median_ms: float | None   # server to client
    rtt_min_ms: float | None = None

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


def summary_of(trips: Sequence[Trip], start_unix: float | None = None, end_unix: float | None = None) -> Summary:
    """The :class:`Summary` of ``trips``; with ``start_unix``/``end_unix`` only those sent within that span of
    wall-clock time count."""
    mine = [t for t in trips if (start_unix is None or t.sent_unix >= start_unix)
            and (end_unix is None or t.sent_unix < end_unix)]
    rtts = [t.rtt_ms for t in mine if t.rtt_ms is not None]
    ups = [t.up_ms for t in mine if t.rtt_ms is not None and t.up_ms is not None]
    downs = [t.down_ms for t in mine if t.rtt_ms is not None and t.down_ms is not None]
    return Summary(len(mine), len(rtts), percentile(rtts, 50), percentile(rtts, 90), percentile(rtts, 99),
                   percentile(ups, 50), percentile(downs, 50), min(rtts, default=None))


def irtt_trips(output: Mapping | str) -> list[Trip]:
    """The packets of irtt's JSON ``output`` (pure)."""
    data = json.loads(output) if isinstance(output, str) else output
    out = []
    for trip in data.get("round_trips") or []:
        sent_at = ((trip.get("timestamps") or {}).get("client") or {}).get("send") or {}
        wall = sent_at.get("wall")
        if wall is None:
            continue
        delay = trip.get("delay") or {}
        if str(trip.get("lost", "false")) != "false" or delay.get("rtt") is None:
            out.append(Trip(wall / 1e9, None))
            continue
        out.append(Trip(wall / 1e9, delay["rtt"] / 1e6,
                        delay["send"] / 1e6 if delay.get("send") is not None else None,
                        delay["receive"] / 1e6 if delay.get("receive") is not None else None))
    return out


def summarise(output: Mapping | str, start_unix: float | None = None, end_unix: float | None = None) -> Summary:
    """The :class:`Summary` of irtt's JSON ``output``, within the span when one is given."""
    return summary_of(irtt_trips(output), start_unix, end_unix)


#: A reply's line of ``ping -D``: ``[1764293000.123456] 68 bytes from 198.18.3.2: icmp_seq=3 ttl=62 time=0.061 ms``
_PING_REPLY = re.compile(r"^\[(\d+(?:\.\d+)?)\] \d+ bytes from .*\bicmp_seq=(\d+)\b.*\btime=([0-9.]+) ms")
_PING_SENT = re.compile(r"^(\d+) packets transmitted", re.MULTILINE)


def ping_trips(output: str, interval_s: float, started_unix: float | None = None) -> list[Trip]:
    """The echoes of ``ping -D -i interval_s``'s ``output`` (pure), sequence numbers 1 to the count its summary
    says it sent.  An answered echo was sent its round trip before the reply's timestamp; one without an answer
    ``interval_s`` per sequence number from the nearest answered one (or from ``started_unix``, the probe's
    start, when none was answered).  A duplicate reply counts once; an error reply (``From ... Destination
    Host Unreachable``) is no answer."""
    answered: dict[int, tuple[float, float]] = {}
    for line in output.splitlines():
        m = _PING_REPLY.match(line)
        if m and "(DUP!)" not in line:
            seq, rtt = int(m.group(2)), float(m.group(3))
            answered.setdefault(seq, (float(m.group(1)) - rtt / 1000, rtt))
    m = _PING_SENT.search(output)
    sent = max([int(m.group(1)) if m else 0, *answered])
    if not answered and started_unix is None:
        return []  # nothing to place the lost echoes in time by
    known = sorted(answered)
    out = []
    for seq in range(1, sent + 1):
        if seq in answered:
            out.append(Trip(answered[seq][0], answered[seq][1]))
            continue
        if known:
            near = min(known, key=lambda k: abs(k - seq))
            at = answered[near][0] + (seq - near) * interval_s
        else:
            at = started_unix + (seq - 1) * interval_s
        out.append(Trip(at, None))
    return out


def client_argv(server: str, duration_s: float, interval_s: float, tool: str) -> list[str]:
    """The probe's client towards ``server`` for ``duration_s``, a packet every ``interval_s``: irtt printing
    its JSON, or ping a line per reply with its timestamp."""
    if tool == PING:
        return _ping_argv(server, _echoes(duration_s, interval_s), "-D", "-i", f"{interval_s:g}")
    if tool != IRTT:
        raise ValueError(f"no probe tool {tool!r}: one of {', '.join(TOOLS)}")
    return [IRTT, "client", "-Q", "-d", f"{duration_s:.3f}s", "-i", f"{interval_s * 1000:g}ms", "-l", str(LENGTH),
            f"--timeouts={IRTT_OPEN_TIMEOUTS}", "-o", "-", _irtt_address(server)]


def _ping_argv(server: str, count: int, *options: str) -> list[str]:
    """ping sending ``count`` echoes of the probe's size towards ``server``, as ``options`` say how (every
    ping of the probe's: its client's, the live chart's, the reference's flood)."""
    return [PING, "-n", *options, "-c", str(count), "-s", str(PAYLOAD_BYTES), "-W", str(PING_TIMEOUT_S), server]


def _echoes(duration_s: float, interval_s: float) -> int:
    """The echoes that cover ``duration_s`` at one every ``interval_s``."""
    return max(1, math.ceil(duration_s / interval_s - 1e-6))


def _irtt_address(server: str) -> str:
    """irtt's server at ``server`` (an IPv6 address in brackets), its port."""
    return f"[{server}]:{PORT}" if ":" in server else f"{server}:{PORT}"


#: irtt's units of a duration, as its per-packet lines print them, in milliseconds.
_UNITS_MS = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1000.0}


def flood_argv(server: str, count: int = FLOOD_ECHOES) -> list[str]:
    """ping's flood of ``count`` echoes of the probe's size towards ``server``, its summary alone."""
    return _ping_argv(server, count, "-q", "-f")


#: ping's summary of its round trips: ``rtt min/avg/max/mdev = 0.018/0.023/0.103/0.012 ms``
_PING_RTTS = re.compile(r"^(?:rtt|round-trip) min/avg/max/mdev = ([0-9.]+)/[0-9.]+/[0-9.]+/[0-9.]+ ms", re.MULTILINE)


def least_of(output: str) -> float | None:
    """The least round trip in ms of ping's summary in ``output``, or None when it answered none (pure)."""
    m = _PING_RTTS.search(output)
    return float(m.group(1)) if m else None


def _ended(proc: subprocess.Popen, timeout_s: float, what: str) -> tuple[str, str] | str:
    """What ``proc`` printed (its output, its errors) once it ended, or why it did not (killed after ``timeout_s``)."""
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return f"{what} did not end within {timeout_s:.0f} s"


def flood_least(ns: str, server: str, timeout_s: float) -> float | str:
    """The least round trip of a flood of echoes from ``ns`` to ``server`` (:func:`flood_argv`), or why there is
    none.  Between two sparse echoes a User-Mode Linux guest sleeps and its host CPU halts, and the echo that
    wakes it finds the emulator slow: the least of the reference's 30 sparse echoes says as much of the host's
    wake-up as of the path (``docs/log/measurements.md``, 2026-11-28).  A flood sends each echo as the last came
    back, so the guest does not sleep between them; its least is the path at the emulator's full speed, what
    ``bench unloaded_rtt`` gets from sparse echoes only with the guest's host CPU kept awake.  50 echoes take a
    few milliseconds, and through a shaper the first ones pass on the bucket's tokens before any waits."""
    proc = popen_in(ns, flood_argv(server), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said = _ended(proc, timeout_s, "ping's flood")
    if isinstance(said, str):
        return said
    out, err = said
    least = least_of(out)
    if least is None:
        return f"ping's flood had no reply (exit {proc.returncode}): {(err.strip() or out.strip())[:300]}"
    return least


def stream_argv(server: str, interval_s: float, duration_s: float, tool: str) -> list[str]:
    """The probe's client printing a line per round trip as it comes back, for ``duration_s`` (a live chart's:
    :func:`rtt_of_line` reads the lines): ping's (``68 bytes from 198.18.3.1: icmp_seq=3 ttl=62 time=49.3 ms``;
    an echo without a reply prints none) or irtt's (``seq=3 rtt=49.3ms rd=... sd=...``, its server in the
    server's namespace: :class:`Servers`)."""
    if tool == PING:
        return _ping_argv(server, _echoes(duration_s, interval_s), "-i", f"{interval_s:g}")
    if tool != IRTT:
        raise ValueError(f"no probe tool {tool!r}: one of {', '.join(TOOLS)}")
    return [IRTT, "client", "-d", f"{duration_s:.0f}s", "-i", f"{interval_s * 1000:g}ms", "-l", str(LENGTH),
            "--timeouts=1s", _irtt_address(server)]


#: A reply's line of ping without ``-D`` (a live chart's): ``68 bytes from 198.18.3.1: icmp_seq=3 ttl=62 time=0.061 ms``
_PING_LIVE = re.compile(r"^\d+ bytes from .*\bicmp_seq=\d+\b.*\btime=([0-9.]+) ms")


def rtt_of_line(line: str) -> float | None:
    """The round trip in ms of one of ping's reply lines or irtt's per-packet lines (:func:`stream_argv`), or
    None for their other lines, a duplicate reply's among them (pure)."""
    if m := _PING_LIVE.match(line):
        return None if "(DUP!)" in line else float(m.group(1))
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


@dataclasses.dataclass
class Running:
    """A probe's client started: its process, and what reading its output needs."""

    proc: subprocess.Popen
    tool: str
    interval_s: float
    started_unix: float

    def stop(self) -> None:
        """End it now, if it still runs (its point failed)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run(ns: str, server: str, duration_s: float, interval_s: float, tool: str) -> Running:
    """The probe's client (``tool``) in ``ns`` towards ``server`` for ``duration_s``, started now."""
    started = time.time()
    return Running(popen_in(ns, client_argv(server, duration_s, interval_s, tool), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True), tool, interval_s, started)


def trips(running: Running, timeout_s: float) -> list[Trip] | str:
    """Every packet a client run sent, once it ended, or why there are none."""
    proc, tool = running.proc, running.tool
    said = _ended(proc, timeout_s, f"{tool}'s client")
    if isinstance(said, str):
        return said
    out, err = said
    if tool == PING:
        # ping exits 1 when an echo went unanswered (its lines say which), 2 on an error of its own
        if proc.returncode not in (0, 1) or not _PING_SENT.search(out):
            return f"ping failed (exit {proc.returncode}): {(err.strip() or out.strip())[:300]}"
        return ping_trips(out, running.interval_s, running.started_unix)
    if proc.returncode != 0:
        return f"irtt's client failed (exit {proc.returncode}): {err.strip()[:300]}"
    try:
        return irtt_trips(out)
    except (ValueError, TypeError, AttributeError) as e:
        return f"irtt's output was not its JSON: {e}"


def result(running: Running, timeout_s: float, start_unix: float | None = None,
           end_unix: float | None = None) -> Summary | str:
    """What a client run said: its :class:`Summary` (within the span), or why there is none."""
    got = trips(running, timeout_s)
    return got if isinstance(got, str) else summary_of(got, start_unix, end_unix)

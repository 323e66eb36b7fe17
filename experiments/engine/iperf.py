"""iperf3 between two of the testbed's namespaces: the one place that starts iperf3.

flent's split: :func:`check` finds the binary before anything starts,
:func:`measure` runs a server and a client, and the free function
:func:`parse_iperf3` turns the client's ``-J`` output into a :class:`Result`, so
the parser is tested on captured output without root.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator

from testbed import waiting

log = logging.getLogger(__name__)

DEFAULT_PORT = 5201
#: How long the servers may take to listen once started.
LISTEN_TIMEOUT_S = 15.0
#: iperf3's pacing period in microseconds when it holds a bitrate (its default is 1000).
#: A period the kernel's tick does not divide: at 1000 us, on a guest whose clock counts
#: instructions, the tick (HZ=1000, stopped when idle) kept one phase against the bursts for a whole
#: window, in the burst or between them, and a window cost one of two amounts per packet.  At 1061 us
#: the phase walks through every offset about 57 times a second, and every window costs their mean.
PACING_TIMER_US = 1061
#: The nice value of a client held before its test (see :class:`Clients`).
HELD_NICE = 19


class IperfError(RuntimeError):
    """iperf3 is missing, did not start, or reported an error."""


@dataclasses.dataclass(frozen=True)
class Result:
    """One iperf3 measurement, as the receiver saw it (omitted warm-up excluded)."""

    transport: str
    goodput_mbps: float
    bytes: int
    seconds: float
    retransmits: int | None
    loss_pct: float | None
    cpu_sender_pct: float | None
    cpu_receiver_pct: float | None


def check() -> str:
    """Path of iperf3, or :class:`IperfError` saying how to install it."""
    path = shutil.which("iperf3")
    if not path:
        raise IperfError("iperf3 not found: install it (apt-get install iperf3, or scripts/install.sh)")
    return path


#: What iperf3 3.x reports when its client is stopped with SIGINT (Clients.interrupt).
INTERRUPTED = "interrupt - the client has terminated"


def parse_iperf3(text: str, interrupted: bool = False) -> Result:
    """Parse ``iperf3 -c ... -J`` output (TCP or UDP) into a :class:`Result`.

    With ``interrupted`` the client was stopped with SIGINT on purpose: iperf3 then reports
    only its own (the sender's) side, which the result carries instead of the receiver's.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise IperfError(f"iperf3 output is not JSON ({e}): {text[:200]!r}") from None
    if data.get("error") and not (interrupted and data["error"] == INTERRUPTED):
        raise IperfError(f"iperf3: {data['error']}")
    end = data.get("end") or {}
    cpu = end.get("cpu_utilization_percent") or {}
    protocol = (data.get("start", {}).get("test_start", {}).get("protocol") or "TCP").lower()
    sent = end.get("sum_sent") or end.get("sum") or {}
    if protocol == "udp":
        s = sent if interrupted else (end.get("sum_received") or end.get("sum") or {})
        # cJSON writes a NaN as null: iperf3's 0/0 when a side counted no datagrams
        lost = s.get("lost_percent", 0.0)
        retrans, loss = None, None if lost is None else float(lost)
    else:
        s = sent if interrupted else (end.get("sum_received") or {})
        retrans, loss = int(sent.get("retransmits", 0)), None
    if not s:
        raise IperfError("iperf3 output has no end summary (interrupted test?)")
    try:
        return Result(
            transport=protocol,
            goodput_mbps=float(s["bits_per_second"]) / 1e6,
            bytes=int(s["bytes"]),
            seconds=float(s["seconds"]),
            retransmits=retrans,
            loss_pct=loss,
            cpu_sender_pct=cpu.get("host_total"),
            cpu_receiver_pct=cpu.get("remote_total"),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise IperfError(f"iperf3's end summary lacks a figure ({type(e).__name__}: {e}): {str(s)[:200]}") from None


def listening(pid: int, port: int, transport: str = "tcp") -> bool:
    """Whether process ``pid``'s network namespace has a TCP listener on ``port`` (``transport``
    "udp": a UDP socket bound to it).

    Reads /proc/PID/net/tcp{,6} (udp{,6}), which shows the sockets of that process's
    namespace: no extra process is spawned (spawning is slow inside UML), and no socket of
    ours is opened that could race the server for the port.
    """
    for table in (transport, f"{transport}6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if (transport == "udp" or fields[3] == "0A") and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except (OSError, StopIteration, IndexError):
            continue
    return False


@dataclasses.dataclass(frozen=True)
class Flow:
    """One iperf3 test: server in ``server_ns`` at ``server_addr``, client in ``client_ns``."""

    server_ns: str
    client_ns: str
    server_addr: str


def client_args(server_addr: str, port: int, duration_s: float, omit_s: float, transport: str,
                mss: int | None, length: int | None, bitrate: str | None,
                window: int | None = None) -> list[str]:
    """The client's iperf3 arguments (pure)."""
    if transport not in ("tcp", "udp"):
        raise ValueError(f"transport: {transport!r} is not tcp or udp")
    # iperf3 3.12 parses -t and -O as integers: "-t 1.5" runs 1 s, "-O 0.5" omits nothing
    if omit_s != int(omit_s) or omit_s < 0:
        raise ValueError(f"omit_s must be whole seconds, not {omit_s!r}")
    if duration_s != int(duration_s) or duration_s < 1:
        raise ValueError(f"duration_s must be whole seconds >= 1, not {duration_s!r}")
    # -i 0: no report per second.  Nothing reads them, each is a round of malloc in the client, and
    # an interrupted test's JSON would carry one per second it ran (hundreds with many clients)
    cmd = ["-c", server_addr, "-p", str(port), "-J", "-t", str(int(duration_s)), "-O", str(int(omit_s)), "-i", "0"]
    if transport == "udp":
        cmd += ["-u", "-b", bitrate or "0"]
    elif bitrate:
        cmd += ["-b", bitrate]
    if bitrate and bitrate != "0":
        cmd += ["--pacing-timer", str(PACING_TIMER_US)]
    if mss:
        cmd += ["-M", str(mss)]
    if length:
        cmd += ["-l", str(length)]
    if window:
        cmd += ["-w", str(window)]
    return cmd


def popen_in(ns: str, argv: list[str], **kw) -> subprocess.Popen:
    """Start ``argv`` inside namespace ``ns``; ``kw`` as for :class:`subprocess.Popen`.

    The process is forked by a thread that has entered the namespace (see
    :func:`testbed.netns.run_in`), so it is born there: no ``nsenter`` or ``ip netns
    exec`` in front of it.  Each of those is one more program to start, a tenth of a
    second inside User-Mode Linux, per measured point; ``ip netns exec`` also makes a
    mount namespace and remounts /sys.
    """
    from testbed import netns

    return netns.run_in(ns, lambda: subprocess.Popen(argv, **kw))


class Servers:
    """iperf3 servers for ``flows``, one port each (``port``, ``port + 1``, ...), kept running.

    A context manager: start them once per network, run any number of tests against
    them with :func:`measure_flows`, and they are stopped after the block.  Starting a
    process costs tenths of a second inside User-Mode Linux, so a sweep does not pay
    it for every point.

    With ``report_every_s`` each server reports its test as it goes, every so many seconds, in
    Mbit/s and flushed at once (``-i N --forceflush -f m``), on a pipe the caller reads:
    ``procs[i].stdout``, its errors included (the web demo's chart).
    """

    def __init__(self, flows: list[Flow], port: int = DEFAULT_PORT, one_off: bool = False,
                 report_every_s: float | None = None) -> None:
        self.flows = list(flows)
        self.ports = [port + i for i in range(len(self.flows))]
        self.one_off = one_off
        self.report_every_s = report_every_s
        self.procs: list[subprocess.Popen | None] = [None] * len(self.flows)  # one slot per flow
        self._logs: list = [None] * len(self.flows)

    def __enter__(self) -> Servers:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def start(self) -> None:
        """Start a server for every flow whose server is not running, and wait until each listens."""
        iperf3 = check()
        reports = ["-i", f"{self.report_every_s:g}", "--forceflush", "-f", "m"] if self.report_every_s else []
        for i, (f, port) in enumerate(zip(self.flows, self.ports, strict=True)):
            if self.procs[i] is None or self.procs[i].poll() is not None:
                argv = [iperf3, "-s", *(["-1"] if self.one_off else []), "-p", str(port), *reports]
                if reports:
                    self.procs[i] = popen_in(f.server_ns, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                             text=True)
                    continue
                # stderr to a file: each interrupted test leaves a line there, which would fill a pipe
                self._logs[i] = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in stop)
                self.procs[i] = popen_in(f.server_ns, argv, stdout=subprocess.DEVNULL, stderr=self._logs[i])
        deadline = waiting.Deadline(LISTEN_TIMEOUT_S, interval_s=0.02)  # (for all of them)
        for f, port, server, log_file in zip(self.flows, self.ports, self.procs, self._logs, strict=True):
            for _ in deadline.polls():
                if listening(server.pid, port):
                    break
                if server.poll() is not None:
                    raise IperfError(f"iperf3 server in {f.server_ns} {_ended(server.returncode)} before it listened "
                                     f"on port {port}{_said(_output(server, log_file).strip()[-300:])}")
            else:
                raise IperfError(f"iperf3 server in {f.server_ns} not listening on port {port} "
                                 f"after {LISTEN_TIMEOUT_S:g} s")

    def restart(self) -> None:
        """Stop every server and start them again (after a test failed: one may hang or be gone)."""
        self.stop()
        self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Kill every server still running, and reap it."""
        _kill(self.procs)
        for log_file in self._logs:
            if log_file is not None:
                log_file.close()
        self.procs = [None] * len(self.flows)
        self._logs = [None] * len(self.flows)


def _output(server: subprocess.Popen, log_file) -> str:
    """All a server that has exited said: its log file's, or its pipe's (a reporting server's)."""
    if log_file is None:
        return server.stdout.read()
    log_file.seek(0)
    return log_file.read()


def _kill(procs: list[subprocess.Popen | None], wait: bool = True) -> None:
    """Kill every process of ``procs`` still running and, with ``wait``, reap it (None entries are skipped)."""
    for p in procs:
        if p is not None and p.poll() is None:
            p.kill()
    if wait:
        for p in procs:
            if p is not None:
                p.wait()


def _ended(returncode: int) -> str:
    """How a process ended, in words (``exited with status 1``, ``was killed by SIGKILL``)."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _said(output: str) -> str:
    """What a process printed, to follow how it ended in a sentence (``: ...``, or that it said nothing)."""
    return f": {output}" if output else ", saying nothing"


def _renice(pid: int, nice: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # (exited: its output says why)
        os.setpriority(os.PRIO_PROCESS, pid, nice)


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


class Clients:
    """The iperf3 clients of one test, started ahead of it and held before they connect.

    Each client gets ``--pidfile`` naming the read end of a pipe of ours
    (``/proc/OUR_PID/fd/N``).  iperf3 reads its pid file, to see whether another
    instance owns it, after it has loaded its libraries and parsed its arguments and
    before it connects; the read blocks on the empty pipe until :meth:`go` writes "0"
    (no pid) to it.  So a client can be started early, during another test's warm-up,
    and its test begins at :meth:`go`: inside User-Mode Linux starting iperf3 and
    loading its libraries takes over a tenth of a second, which a sweep then no longer
    spends between its points.  A held client runs at nice :data:`HELD_NICE`, so its
    loading takes only CPU time the running test leaves idle; :meth:`go` puts it back
    to normal priority before it lets it go.  The iperf3 binary and its protocol are
    untouched.

    A context manager; :meth:`close` kills what is still running.  Should this process
    die, a held client reads end-of-file and runs its test against the namespace's
    server, then exits; ``ipsec-testbed clean`` ends it with the namespace.
    """

    def __init__(self, flows: list[Flow], args: list[list[str]]) -> None:
        self.flows = list(flows)
        self.args = [list(a) for a in args]
        self.procs: list[subprocess.Popen] = []
        self.let_go = False  # (go() called: the clients ran a test)
        self._gates: list[tuple[int, int]] = []
        iperf3 = check()
        try:
            for f, a in zip(self.flows, self.args, strict=True):
                r, w = os.pipe()  # (not inherited: iperf3 opens it by its /proc path)
                self._gates.append((r, w))
                log.debug("iperf3 in %s: %s", f.client_ns, " ".join(a))
                self.procs.append(popen_in(f.client_ns, [iperf3, *a, "--pidfile", f"/proc/{os.getpid()}/fd/{r}"],
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
                # loading at the lowest priority takes only idle CPU from a test running meanwhile
                _renice(self.procs[-1].pid, HELD_NICE)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Clients:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def waiting(self) -> bool:
        """Whether every client is still alive (held, or running its test)."""
        return bool(self.procs) and all(p.poll() is None for p in self.procs)

    def failure(self) -> str | None:
        """Why the test cannot run, once a client has exited with an error: how it ended and what it said."""
        return self._exited(lambda rc: rc != 0)

    def ended(self) -> str | None:
        """Why the test is no longer running on every client, once one has exited at all (a
        test asked to outlast its window has ended early): which, how it ended, what it said."""
        return self._exited(lambda rc: True)

    def _exited(self, counts) -> str | None:
        for f, p in zip(self.flows, self.procs, strict=True):
            if p.poll() is not None and counts(p.returncode):
                _, err = p.communicate()
                return f"iperf3 client in {f.client_ns} {_ended(p.returncode)}{_said((err or '').strip()[:200])}"
        return None

    def held(self) -> bool:
        """Whether every client has reached its pid file, i.e. is waiting for :meth:`go` with its loading done."""
        for p, (r, _) in zip(self.procs, self._gates, strict=True):
            gate = f"pipe:[{os.fstat(r).st_ino}]"
            try:
                fds = os.listdir(f"/proc/{p.pid}/fd")
                if not any(_readlink(f"/proc/{p.pid}/fd/{fd}") == gate for fd in fds):
                    return False
            except OSError:
                return False
        return bool(self.procs)

    def wait_held(self, timeout_s: float, poll_s: float = 0.05) -> bool:
        """Wait until every client is held (:meth:`held`), at most ``timeout_s``: whether all are.
        A client that exits meanwhile is an :class:`IperfError` saying why."""
        for _ in waiting.Deadline(timeout_s, interval_s=poll_s).polls():
            if self.held():
                return True
            ended = self.ended()
            if ended:
                raise IperfError(f"{ended}, before its test began")
        return False

    def go(self) -> None:
        """Let every client connect and run its test (at normal priority)."""
        for p, (_, w) in zip(self.procs, self._gates, strict=True):
            _renice(p.pid, 0)
            os.write(w, b"0\n")
        self.let_go = True

    def interrupt(self) -> None:
        """End every client's test now (SIGINT): it reports its side and tells its server, which
        goes on serving (:func:`parse_iperf3` with ``interrupted``)."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)

    def end(self, timeout_s: float) -> None:
        """Interrupt every client (:meth:`interrupt`), give them ``timeout_s`` to exit, and kill what still
        runs: for a test whose reports nobody reads (the web demo's traffic)."""
        self.interrupt()
        with contextlib.suppress(IperfError):
            for _ in self._finished(timeout_s):
                pass
        self.close()

    def stop(self, timeout_s: float) -> tuple[list[Result], list[str]]:
        """Interrupt every client (:meth:`interrupt`) and read its own report: the reports read, and a
        line for each one lost, saying why.

        iperf3 writes its report from its SIGINT handler, which allocates memory: a signal that
        lands while the client is inside malloc can corrupt its heap (it then aborts in malloc) or
        its report.  With a hundred clients on a busy CPU that happens; only the client's own account
        is lost, not the test, which ran until the interrupt (see :meth:`ended`).  A client that
        does not exit within ``timeout_s`` is an :class:`IperfError`.
        """
        self.interrupt()
        results, lost = [], []
        for f, p, out, err in self._finished(timeout_s, " of its interrupt"):
            try:
                results.append(parse_iperf3(out, interrupted=True))
            except IperfError as e:
                how = f"{_ended(p.returncode)}{_said(err.strip()[:200])}" if p.returncode else str(e)
                lost.append(f"iperf3 client in {f.client_ns}: {how}")
        return results, lost

    def outputs(self, timeout_s: float) -> list[str]:
        """Each client's standard output, once all have exited (within ``timeout_s`` of now)."""
        outputs = []
        for _f, p, out, err in self._finished(timeout_s):
            if not out.strip() and p.returncode:
                raise IperfError(f"iperf3 client {_ended(p.returncode)}{_said(err.strip()[:200])}")
            outputs.append(out)
        return outputs

    def _finished(self, timeout_s: float, after: str = "") -> Iterator[tuple[Flow, subprocess.Popen, str, str]]:
        """Each client's flow, process, standard output and error as it exits; all within ``timeout_s``
        of now, else an :class:`IperfError` naming the first still running (``after``: since what)."""
        deadline = waiting.Deadline(timeout_s)
        for f, p in zip(self.flows, self.procs, strict=True):
            try:
                out, err = p.communicate(timeout=max(0.1, deadline.left_s()))
            except subprocess.TimeoutExpired:
                raise IperfError(f"iperf3 client in {f.client_ns} did not finish within {timeout_s:g} s"
                                 f"{after}") from None
            yield f, p, out, err

    def close(self, wait: bool = True) -> None:
        """Kill what still runs; without ``wait`` the dead are left for :meth:`reap` (a dying process
        takes CPU time to exit, which a caller in a measured window must not wait for)."""
        _kill(self.procs, wait)
        for fds in self._gates:
            for fd in fds:
                os.close(fd)
        self._gates = []
        if wait:
            self.procs = []

    def reap(self) -> None:
        """Wait for the processes :meth:`close` killed without waiting."""
        _kill(self.procs)
        self.procs = []


def ready_clients(held: Clients | None, flows: list[Flow], args: list[list[str]]) -> tuple[Clients, bool]:
    """The clients for one test of ``flows`` with ``args``: ``held``, when they were started ahead for this
    very test and every one still waits; else fresh :class:`Clients` (``held`` closed).  Also whether
    they are the held ones."""
    if held is not None and held.args == args and held.waiting():
        return held, True
    if held is not None:
        held.close()
    return Clients(flows, args), False


def flow_args(flows: list[Flow], ports: list[int], duration_s: float = 5.0, transport: str = "tcp",
              mss: int | None = None, length: int | None = None, bitrate: str | None = None,
              omit_s: float = 1.0, window: int | None = None) -> list[list[str]]:
    """Every client's arguments for one test of ``flows`` against servers on ``ports``."""
    return [client_args(f.server_addr, p, duration_s, omit_s, transport, mss, length, bitrate, window)
            for f, p in zip(flows, ports, strict=True)]


def measure_flows(flows: list[Flow], duration_s: float = 5.0, transport: str = "tcp",
                  mss: int | None = None, length: int | None = None, bitrate: str | None = None,
                  omit_s: float = 1.0, port: int = DEFAULT_PORT, timeout_s: float | None = None,
                  on_start=None, servers: Servers | None = None, window: int | None = None,
                  held: Clients | None = None) -> list[Result]:
    """Run the iperf3 tests of ``flows`` at the same time; one :class:`Result` per flow.

    ``servers`` are running :class:`Servers` for these flows; without them one-off
    servers are started for this test.  ``on_start`` is called once every client has
    been let go (the test begins).  ``mss`` sets the TCP MSS (``-M``), ``length`` the
    write or datagram size (``-l``), ``bitrate`` the offered rate (``-b``, e.g. ``"0"``
    for unlimited UDP), ``window`` both ends' socket buffer (``-w``).  The first
    ``omit_s`` seconds are a warm-up iperf3 leaves out of the result.  ``held`` are
    :class:`Clients` started ahead for this very test (same arguments); they are used
    if all are still waiting, else closed and fresh clients started.
    """
    if servers is None:
        with Servers(flows, port, one_off=True) as own:
            return measure_flows(flows, duration_s, transport, mss, length, bitrate, omit_s, port,
                                 timeout_s, on_start, own, window, held)
    args = flow_args(flows, servers.ports, duration_s, transport, mss, length, bitrate, omit_s, window)
    timeout_s = timeout_s or duration_s + omit_s + 30
    clients, _held = ready_clients(held, flows, args)
    with clients:
        clients.go()
        if on_start:
            on_start()
        return [parse_iperf3(out) for out in clients.outputs(timeout_s)]


def measure(server_ns: str, client_ns: str, server_addr: str, duration_s: float = 5.0,
            transport: str = "tcp", mss: int | None = None, length: int | None = None,
            bitrate: str | None = None, omit_s: float = 1.0, port: int = DEFAULT_PORT,
            timeout_s: float | None = None) -> Result:
    """One iperf3 test from ``client_ns`` to ``server_addr`` in ``server_ns``; see :func:`measure_flows`."""
    return measure_flows([Flow(server_ns, client_ns, server_addr)], duration_s, transport, mss, length,
                         bitrate, omit_s, port, timeout_s)[0]

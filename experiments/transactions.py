"""Request/response latency: N short TCP transactions, one connection each (seed 002's Figure 13).

Seed 002 timed 1000 consecutive transfers of a tiny HTML file with curl, over plain HTTP
and over IPsec.  Here one Python process plays both ends: a server socket made inside
the server's namespace answers each connection with a fixed 13-byte document and
closes it; the client, inside the client's namespace, opens a connection, sends a
request, reads the answer to its end and closes, ``count`` times in a row.  What is
timed is the whole loop (connection set-up and tear-down included, as curl's was);
no process is started per transaction, so the figure is the network's and IPsec's,
not the cost of starting curl.
"""
from __future__ import annotations

import contextlib
import dataclasses
import socket
import statistics
import subprocess
import sys
import threading
import time

from experiments.engine.iperf import listening, popen_in
from testbed import netns, waiting

REQUEST = b"GET / HTTP/1.0\r\n\r\n"
DOCUMENT = b"<html></html>"
RESPONSE = b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(DOCUMENT), DOCUMENT)
PORT = 5280


class TransactionError(RuntimeError):
    """A transaction did not complete (refused, reset, short answer, timed out)."""


@dataclasses.dataclass(frozen=True)
class Timing:
    """``count`` transactions: the loop's wall time and per-transaction statistics (ms)."""

    count: int
    elapsed_s: float
    mean_ms: float
    median_ms: float
    p95_ms: float


def summarize(durations_s: list[float], elapsed_s: float) -> Timing:
    """A :class:`Timing` from each transaction's duration (pure)."""
    if not durations_s:
        raise ValueError("no transactions to summarize")
    ms = sorted(d * 1000 for d in durations_s)
    p95 = ms[min(len(ms) - 1, max(0, round(0.95 * len(ms)) - 1))]
    return Timing(count=len(ms), elapsed_s=elapsed_s, mean_ms=statistics.fmean(ms),
                  median_ms=statistics.median(ms), p95_ms=p95)


class Server:
    """The answering end, listening inside namespace ``ns`` until closed."""

    def __init__(self, ns: str, family: int, port: int = PORT) -> None:
        af = socket.AF_INET6 if family == 6 else socket.AF_INET

        def listen() -> socket.socket:
            s = socket.socket(af, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("::" if family == 6 else "0.0.0.0", port))
            s.listen(64)
            return s

        self.sock = netns.run_in(ns, listen)  # the socket stays in ns
        self.port = port
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._serve, name=f"transactions-{ns}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            try:
                with conn:
                    conn.settimeout(10)
                    data = b""
                    while not data.endswith(b"\r\n\r\n"):
                        chunk = conn.recv(256)
                        if not chunk:
                            break
                        data += chunk
                    conn.sendall(RESPONSE)
            except OSError as e:
                self.errors.append(str(e))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def durations(ns: str, server_addr: str, family: int, count: int, port: int = PORT,
              timeout_s: float = 10.0) -> tuple[list[float], float]:
    """Each of ``count`` transactions' duration (s) from namespace ``ns`` to ``server_addr``, and the loop's
    wall time; :class:`TransactionError` if one fails."""
    af = socket.AF_INET6 if family == 6 else socket.AF_INET

    def loop() -> tuple[list[float], float]:
        times = []
        t_start = time.perf_counter()
        for i in range(count):
            t0 = time.perf_counter()
            try:
                with socket.socket(af, socket.SOCK_STREAM) as s:
                    s.settimeout(timeout_s)
                    s.connect((server_addr, port))
                    s.sendall(REQUEST)
                    answer = b""
                    while True:
                        chunk = s.recv(4096)
                        if not chunk:
                            break
                        answer += chunk
            except OSError as e:
                raise TransactionError(f"transaction {i + 1} of {count} to {server_addr}: {e}") from None
            if answer != RESPONSE:
                raise TransactionError(f"transaction {i + 1} of {count}: got {len(answer)} bytes, "
                                       f"expected {len(RESPONSE)}")
            times.append(time.perf_counter() - t0)
        return times, time.perf_counter() - t_start

    return netns.run_in(ns, loop)


def check_server(srv: Server) -> None:
    """:class:`TransactionError` naming the first error the server saw, if it saw any."""
    if srv.errors:
        raise TransactionError(f"the server saw {len(srv.errors)} errors, first: {srv.errors[0]}")


# -- netperf's TCP_RR and TCP_CRR ---------------------------------------------------------------------------

#: The request/response kinds, as netperf names its tests: ``rr`` one connection, a request of ``size`` bytes
#: and a response of as many, again and again; ``crr`` a new connection for each (connect, request, response,
#: close).
KINDS = ("rr", "crr")
#: Request and response sizes (netperf's ``-r``): from one byte to what one TCP write of the sizes here is
#: meant for; larger is a bulk transfer, the sweep's.
MIN_SIZE, MAX_SIZE = 1, 65535
RR_PORT = 5281

#: The answering end, a process of its own in the server's namespace (standard library only, so that it runs
#: as ``python3 -c``): one thread per connection reads ``size`` bytes and answers ``size`` bytes, until the
#: peer closes.
_ECHO_SERVER = r"""
import socket, sys, threading
family, port, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
af = socket.AF_INET6 if family == 6 else socket.AF_INET
s = socket.socket(af, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("::" if family == 6 else "0.0.0.0", port))
s.listen(128)
answer = b"r" * size
def serve(conn):
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with conn:
        while True:
            got = 0
            while got < size:
                chunk = conn.recv(size - got)
                if not chunk:
                    return
                got += len(chunk)
            conn.sendall(answer)
while True:
    conn, _ = s.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


def check_size(size: int) -> int:
    """``size`` if it is a request/response size this code makes, else a ValueError naming the range."""
    if isinstance(size, bool) or not isinstance(size, int) or not MIN_SIZE <= size <= MAX_SIZE:
        raise ValueError(f"request/response sizes must be bytes in {MIN_SIZE}..{MAX_SIZE} (one TCP write each "
                         f"way; larger is a bulk transfer: ipsec-testbed sweep), not {size!r}")
    return size


class EchoServer:
    """:data:`_ECHO_SERVER` in namespace ``ns``, listening on ``port`` once started, until closed."""

    def __init__(self, ns: str, family: int, size: int, port: int = RR_PORT) -> None:
        self.port = port
        self.proc = popen_in(ns, [sys.executable, "-c", _ECHO_SERVER, str(family), str(port), str(check_size(size))],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            waiting.until(lambda: self.proc.poll() is not None or listening(self.proc.pid, port), 10.0,
                          f"the transactions' server listening in {ns}", interval_s=0.02)
            if self.proc.poll() is not None:
                raise TransactionError(f"the transactions' server in {ns} ended at its start: "
                                       f"{self.proc.stderr.read().decode(errors='replace').strip()[-300:]}")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except Exception:  # noqa: BLE001 (it must go, whatever held it)
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()

    def __enter__(self) -> EchoServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def exchange(ns: str, server_addr: str, family: int, kind: str, size: int, seconds: float,
             port: int = RR_PORT, timeout_s: float = 10.0) -> tuple[list[float], float]:
    """Transactions of ``kind`` (:data:`KINDS`) from namespace ``ns`` for ``seconds``: each one's duration (s)
    and the wall time they took; :class:`TransactionError` if one fails."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    af = socket.AF_INET6 if family == 6 else socket.AF_INET
    request = b"q" * check_size(size)

    def connect() -> socket.socket:
        s = socket.socket(af, socket.SOCK_STREAM)
        s.settimeout(timeout_s)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.connect((server_addr, port))
        return s

    def one(s: socket.socket) -> None:
        s.sendall(request)
        got = 0
        while got < size:
            chunk = s.recv(size - got)
            if not chunk:
                raise TransactionError(f"the server closed the connection after {got} of {size} bytes")
            got += len(chunk)

    def loop() -> tuple[list[float], float]:
        times: list[float] = []
        start = time.perf_counter()
        end = start + seconds
        conn = connect() if kind == "rr" else None
        try:
            while True:
                t0 = time.perf_counter()
                if t0 >= end:
                    break
                if conn is not None:
                    one(conn)
                else:
                    with connect() as s:
                        one(s)
                times.append(time.perf_counter() - t0)
        except OSError as e:
            raise TransactionError(f"{kind} transaction {len(times) + 1} to {server_addr}: {e}") from None
        finally:
            if conn is not None:
                conn.close()
        return times, time.perf_counter() - start

    return netns.run_in(ns, loop)

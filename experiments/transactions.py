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
import threading
import time

from testbed import netns

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


def run_client(ns: str, server_addr: str, family: int, count: int, port: int = PORT,
               timeout_s: float = 10.0) -> Timing:
    """``count`` transactions from namespace ``ns`` to ``server_addr``; :class:`TransactionError` if one fails."""
    return summarize(*durations(ns, server_addr, family, count, port, timeout_s))


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


def measure(net, client: str, server: str, family: int, count: int, warmup: int = 0) -> Timing:
    """``count`` transactions from ``client`` to ``server`` in the built network ``net`` (after ``warmup``
    more, not counted)."""
    return summarize(*measure_durations(net, client, server, family, count, warmup))


def measure_durations(net, client: str, server: str, family: int, count: int,
                      warmup: int = 0) -> tuple[list[float], float]:
    """As :func:`measure`, each transaction's duration and the loop's wall time."""
    with Server(net.ns(server), family) as srv:
        if warmup:
            durations(net.ns(client), net.addr(server, family), family, warmup)
        got = durations(net.ns(client), net.addr(server, family), family, count)
    if srv.errors:
        raise TransactionError(f"the server saw {len(srv.errors)} errors, first: {srv.errors[0]}")
    return got

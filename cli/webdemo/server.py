"""The web demo's server: one page on loopback, its events streamed, its actions checked.

It runs on the host (where the browser is), as root because the demo does; so it trusts nothing:

- it listens on 127.0.0.1 only;
- every request carries the run's token: ``?token=`` in the address it prints (as Jupyter does), then a
  cookie the page gets with it (HttpOnly, SameSite=Strict: another site's page cannot send it), which
  the page's scripts, styles and events are fetched with; or an ``X-Token`` header.  Without it the
  answer is 403 and nothing else;
- a request whose ``Host`` is not this address, or whose ``Origin`` is another site's, is refused
  (another page in the browser, or a DNS name rebound to 127.0.0.1, cannot drive the demo);
- an action is one of :mod:`cli.webdemo.protocol`'s, its values checked, sent on as JSON: there is no
  way to run a command of one's choosing;
- the page and its scripts (plotly.js included) are served from this package; nothing is fetched from
  the internet, and the page's Content-Security-Policy allows nothing but this server.

Events from the engine reach every open page as server-sent events (``GET /events``); the last of each
kind, and the goodput readings so far, are replayed to a page that (re)connects.
"""
from __future__ import annotations

import base64
import collections
import contextlib
import hmac
import http.cookies
import http.server
import importlib.resources
import json
import logging
import queue
import secrets
import sys
import threading
import urllib.parse
from typing import Any

from cli.webdemo import protocol
from testbed import channel as channels
from testbed.errors import one_line

log = logging.getLogger(__name__)

#: The page's files, served as they are, and their types.
STATIC = {"/": ("index.html", "text/html; charset=utf-8"), "/app.js": ("app.js", "text/javascript"),
          "/style.css": ("style.css", "text/css")}
#: Goodput readings and round trips replayed to a page that connects (5 minutes of both: two and four a second).
HISTORY = 1800
#: Events of which a page that connects gets the last one.
LATEST = ("building", "hello", "status", "sas", "packets")
#: How long the download of a capture waits for the engine.
PCAP_TIMEOUT_S = 30.0
HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
           "Referrer-Policy": "no-referrer",
           "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                                      "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"}


def plotly_js() -> bytes:
    """plotly.js as the installed plotly package ships it (no CDN)."""
    return importlib.resources.files("plotly").joinpath("package_data", "plotly.min.js").read_bytes()


class Hub:
    """The engine's channel on the host: events fanned out to the pages, actions and downloads sent in."""

    def __init__(self, ends: channels.Ends) -> None:
        self.ends = ends
        self.latest: dict[str, dict] = {}
        self.history: collections.deque = collections.deque(maxlen=HISTORY)
        self.subscribers: list[queue.Queue] = []
        self.pending: dict[int, tuple[threading.Event, list]] = {}
        self.lock = threading.Lock()
        self.ended = threading.Event()
        self._ids = iter(range(1, 1 << 62))

    def pump(self) -> None:
        """Read the engine's events until it ends (run in a thread)."""
        while (event := self.ends.receive()) is not None:
            self.publish(event)
        self.publish({"event": "bye"})
        self.ended.set()

    def publish(self, event: dict) -> None:
        kind = event.get("event")
        with self.lock:
            if kind == "pcap" and event.get("id") in self.pending:
                done, box = self.pending.pop(event["id"])
                box.append(event)
                done.set()
                return
            if kind in LATEST:
                self.latest[kind] = event
            elif kind in ("goodput", "rtt", "marker"):
                self.history.append(event)
            for q in self.subscribers:
                q.put(event)

    def subscribe(self) -> queue.Queue:
        q: queue.Queue = queue.Queue()
        with self.lock:
            for kind in LATEST:
                if kind in self.latest:
                    q.put(self.latest[kind])
            for event in self.history:
                q.put(event)
            self.subscribers.append(q)
        return q

    def unsubscribe(self, q: queue.Queue) -> None:
        with self.lock:
            if q in self.subscribers:
                self.subscribers.remove(q)

    def act(self, action: dict) -> bool:
        return self.ends.send(action)

    def pcap(self) -> dict:
        ident = next(self._ids)
        done, box = threading.Event(), []
        with self.lock:
            self.pending[ident] = (done, box)
        self.ends.send({"action": "pcap", "id": ident})
        if not done.wait(PCAP_TIMEOUT_S):
            with self.lock:
                self.pending.pop(ident, None)
            return {"problem": f"the demo did not answer in {PCAP_TIMEOUT_S:g} s"}
        return box[0]


class Handler(http.server.BaseHTTPRequestHandler):
    server: DemoServer
    server_version = "ipsec-testbed-demo"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:  # the terminal shows the demo, not a request log
        pass

    # -- checks --------------------------------------------------------------------------
    def refused(self) -> str | None:
        """Why this request is refused, or None."""
        srv = self.server
        if self.headers.get("Host", "") not in srv.hosts:
            return "wrong Host (use the address the demo printed)"
        origin = self.headers.get("Origin")
        if origin is not None and origin not in srv.origins:
            return "another site's page may not drive the demo"
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        cookies = http.cookies.SimpleCookie()
        with contextlib.suppress(http.cookies.CookieError):
            cookies.load(self.headers.get("Cookie", ""))
        cookie = cookies[srv.cookie].value if srv.cookie in cookies else ""
        token = self.headers.get("X-Token") or (query.get("token") or [""])[0] or cookie
        if not hmac.compare_digest(token.encode(), srv.token.encode()):
            return "this page needs the token in the address the demo printed (…/?token=…)"
        return None

    def answer(self, status: int, body: bytes, kind: str = "text/plain; charset=utf-8",
               extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in {**HEADERS, "Content-Type": kind, "Content-Length": str(len(body)), **(extra or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    # -- requests ------------------------------------------------------------------------
    def do_GET(self) -> None:
        why = self.refused()
        if why:
            self.answer(403, f"refused: {why}\n".encode())
            return
        path = urllib.parse.urlsplit(self.path).path
        if path in STATIC:
            name, kind = STATIC[path]
            # the page's own files come without the token in their address: the cookie carries it
            cookie = {"Set-Cookie": f"{self.server.cookie}={self.server.token}; HttpOnly; SameSite=Strict; Path=/"}
            self.answer(200, importlib.resources.files("cli.webdemo").joinpath("static", name).read_bytes(), kind,
                        cookie if path == "/" else None)
        elif path == "/plotly.min.js":
            self.answer(200, self.server.plotly, "text/javascript")
        elif path == "/events":
            self.stream()
        elif path == "/pcap":
            result = self.server.hub.pcap()
            if "zip" not in result:
                self.answer(409, f"{result.get('problem', 'no capture')}\n".encode())
                return
            self.answer(200, base64.b64decode(result["zip"]), "application/zip",
                        {"Content-Disposition": 'attachment; filename="ipsec-demo-capture.zip"'})
        else:
            self.answer(404, b"not found\n")

    def do_POST(self) -> None:
        # an answer given before the body is read ends the connection: the unread body would be taken for the
        # next request, and answered again, maybe after the client has gone
        keep_alive, self.close_connection = not self.close_connection, True
        why = self.refused()
        if why:
            self.answer(403, f"refused: {why}\n".encode())
            return
        if urllib.parse.urlsplit(self.path).path != "/action":
            self.answer(404, b"not found\n")
            return
        if self.headers.get_content_type() != "application/json":
            self.answer(415, b"an action is JSON (Content-Type: application/json)\n")
            return
        given = self.headers.get("Content-Length")
        text = "0" if given is None else given.strip()  # absent: no body
        if not text.isdigit():  # empty, not a number, or negative: no length to read
            self.answer(400, b"Content-Length must be the body's length in bytes\n")
            return
        length = int(text)
        if length > 4096:
            self.answer(413, b"an action is a few bytes\n")
            return
        body = self.rfile.read(length)
        self.close_connection = not keep_alive
        try:
            action = protocol.check_action(json.loads(body or b"null"))
        except (ValueError, protocol.ActionError) as e:
            self.answer(400, f"{e}\n".encode())
            return
        if action["action"] == "pcap":
            self.answer(400, b"a capture is downloaded with GET /pcap\n")
            return
        if self.server.hub.ended.is_set() or not self.server.hub.act(action):
            self.answer(503, b"the demo has ended\n")
            return
        self.answer(202, b'{"ok":true}\n', "application/json")

    def stream(self) -> None:
        """Server-sent events until the page goes or the demo ends."""
        self.send_response(200)
        for k, v in {**HEADERS, "Content-Type": "text/event-stream", "Connection": "close"}.items():
            self.send_header(k, v)
        self.end_headers()
        self.close_connection = True
        hub = self.server.hub
        q = hub.subscribe()
        try:
            while True:
                try:
                    event = q.get(timeout=15)
                    self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                except queue.Empty:
                    event = {}
                    self.wfile.write(b": still here\n\n")
                self.wfile.flush()
                if event.get("event") == "bye" or self.server.closing.is_set():
                    return
        except (BrokenPipeError, ConnectionResetError):
            return
        finally:
            hub.unsubscribe(q)


class DemoServer(http.server.ThreadingHTTPServer):
    """The page's server on 127.0.0.1:``port`` (0: any free port), for ``hub``."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, hub: Hub, port: int = 0, token: str | None = None) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.hub = hub
        self.token = token or secrets.token_urlsafe(24)
        self.port = self.server_address[1]
        self.hosts = {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}
        #: the token's cookie: one per port (a browser keeps 127.0.0.1's cookies for all its ports)
        self.cookie = f"itb_demo_{self.port}"
        self.origins = {f"http://{h}" for h in self.hosts}
        self.plotly = plotly_js()
        self.closing = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/?token={self.token}"

    def handle_error(self, request, client_address) -> None:
        """A request that broke its handler (a client gone mid-answer, a request no rule foresaw) is one
        line on the log, never a traceback in the demo's terminal."""
        exc = sys.exc_info()[1]
        log.debug("request from %s:%s ended: %s", *client_address[:2], one_line(exc) if exc else "?")

    def start(self) -> None:
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()

    def close(self) -> None:
        self.closing.set()
        self.shutdown()
        self.server_close()

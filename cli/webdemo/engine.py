"""The web demo's engine: the network, its IPsec and its traffic, driven by the page's actions.

It runs where the network lives (inside the User-Mode Linux guest, or on a host kernel with ESP),
reads actions from its end of the channel (:mod:`testbed.channel`) and sends events back
(:mod:`cli.webdemo.protocol`).  Three threads besides the main one, which reads and carries out
the actions in order:

- the traffic: a long iperf3 test from the first client to its server, while traffic is on, run by
  the sweep's own iperf3 helpers (:mod:`experiments.engine.iperf`: the server is waited for until it
  listens); the server's interval lines (every 0.5 s, ``--forceflush``) become ``goodput`` events;
- the SAs: every second, ``ip -s xfrm state`` on each IPsec end (keys hidden unless asked);
- the round trip: ICMP echo by ping (the sweep's latency probe's default tool, :mod:`experiments.engine.probe`,
  answered by the server's kernel) from the first client to its server every 250 ms for as long as the demo
  runs, each reply an ``rtt`` event, so that the chart shows the delay under load beside the goodput, with
  IPsec and without;
- none for captures: a capture runs in the main thread, for a few seconds at most.

It ends when the host's end closes (the page's process ended) or the host says ``quit``; the
network is torn down on the way out, however it ends.
"""
from __future__ import annotations

import base64
import contextlib
import io
import os
import subprocess
import tempfile
import threading
import time
import zipfile

from cli.demo import capture, ipsec_ends, keyed_sas, sa_text, untrusted_senders
from cli.webdemo import protocol
from experiments.engine import iperf, probe
from ipsec import ike, wireguard
from ipsec.profiles import parse_profile
from testbed import channel as channels
from testbed.errors import one_line
from testbed.record import Keying
from topologies import build_spec
from topologies.shaping import ShapingSpec

IPERF_PORT = 5299
#: iperf3's test length while traffic is on (it is stopped sooner, by the page or the end)
TRAFFIC_S = 86400
#: How often the server reports the goodput the page charts.
REPORT_EVERY_S = 0.5
#: How long iperf3's client has to end its test when traffic goes off, before it is killed.
STOP_S = 5
SA_EVERY_S = 1.0
#: How often the round trip is timed (4 small echoes a second each way: 0.03 % of a 10 Mbit/s link).
RTT_EVERY_S = 0.25


class Engine:
    """One network and what the page has set on it; :meth:`serve` runs it."""

    def __init__(self, net, ends: channels.Ends, profile: str, mode: str, rate_mbit: float, keying: Keying | str,
                 backend_label: str) -> None:
        self.net, self.ends = net, ends
        self.profile, self.mode, self.rate, self.keying = profile, mode, rate_mbit, keying
        self.size = protocol.SIZES[-1]
        self.ipsec_on = True
        self.show_keys = False
        self.backend_label = backend_label
        self.started = time.monotonic()
        self.captured: list = []
        self.captured_sas: list = []
        self._clients: iperf.Clients | None = None
        self._servers: iperf.Servers | None = None
        self._lock = threading.Lock()  # the network's state: settings change one at a time
        self._stop = threading.Event()
        self._rtt_proc: subprocess.Popen | None = None

    # -- events ------------------------------------------------------------------------
    def now(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def send(self, event: str, **fields) -> bool:
        return self.ends.send({"event": event, "t": self.now(), **fields})

    def settings(self) -> dict:
        return {"ipsec": self.ipsec_on, "profile": self.profile, "rate_mbit": self.rate, "size": self.size,
                "traffic": self.traffic_on, "keys": self.show_keys}

    def status(self) -> None:
        self.send("status", **self.settings())

    def marker(self, text: str) -> None:
        self.send("marker", text=text)

    # -- the main loop -----------------------------------------------------------------
    def serve(self) -> None:
        self.send("hello", network=protocol.describe_network(self.net.spec, self.mode, self.rate),
                  # the command line's own profile and rate are shown even where the page offers others
                  profiles=list(dict.fromkeys((*protocol.profiles(self.mode, self.keying), self.profile))),
                  rates=sorted({*protocol.RATES, self.rate}), sizes=list(protocol.SIZES),
                  keying=ike.describe_keying(self.keying), backend=self.backend_label, **self.settings())
        threading.Thread(target=self._watch_sas, daemon=True).start()
        rtt = threading.Thread(target=self._watch_rtt, daemon=True)
        rtt.start()
        try:
            while (message := self.ends.receive()) is not None:
                if message.get("action") == "quit":
                    break
                try:
                    self.act(protocol.check_action(message))
                except protocol.ActionError as e:
                    self.send("error", text=str(e))
                except Exception as e:  # noqa: BLE001 (an action that failed leaves the demo up, and says why)
                    self.send("error", text=f"{message.get('action')}: {one_line(e)}")
                self.status()
        finally:
            self._stop.set()
            self.traffic(False)
            if self._rtt_proc is not None and self._rtt_proc.poll() is None:
                self._rtt_proc.terminate()
            rtt.join(timeout=10)
            self.send("bye")

    def act(self, a: dict) -> None:
        kind = a["action"]
        with self._lock:
            if kind == "ipsec":
                self.switch(a["on"], self.profile)
            elif kind == "profile":
                self.switch(self.ipsec_on, a["name"])
            elif kind == "rate":
                self.net.reshape(ShapingSpec(rate_mbit=a["mbit"]))
                self.rate = a["mbit"]
                self.marker(f"{self.rate:g} Mbit/s")
            elif kind == "size":
                self.size = a["mss"]
                self.marker(f"{self.size} B segments")
                if self.traffic_on:  # running traffic takes the new size: a new test
                    self.traffic(False)
                    self.traffic(True)
            elif kind == "traffic":
                if a["on"] != self.traffic_on:
                    self.traffic(a["on"])
                    self.marker("traffic on" if a["on"] else "traffic off")
            elif kind == "keys":
                self.show_keys = a["show"]
                self.send_sas()
            elif kind == "capture":
                self.capture()
            elif kind == "pcap":
                self.send("pcap", id=a["id"], **self.pcap())

    # -- settings ----------------------------------------------------------------------
    def switch(self, on: bool, profile: str) -> None:
        if (on, profile) == (self.ipsec_on, self.profile):
            return
        if on and parse_profile(profile).wireguard and (why := wireguard.refusal(self.mode, self.keying)):
            raise protocol.ActionError(why)
        was_off = not self.ipsec_on
        if self.ipsec_on:
            self.net.remove_ipsec()
            self.ipsec_on = False
        self.profile = profile
        if on:
            self.net.apply_ipsec(profile, self.mode, families=(4, 6), keying=self.keying)
            self.ipsec_on = True
        what = "WireGuard" if parse_profile(profile).wireguard else "IPsec"
        self.marker(f"{what} on: {profile}" if on else f"profile {profile} ({what} off)" if was_off else
                    "tunnel off")
        self.send_sas()

    @property
    def traffic_on(self) -> bool:
        return self._clients is not None and self._clients.waiting()

    def traffic(self, on: bool) -> None:
        if not on:
            if self._clients is not None:
                self._clients.end(STOP_S)
            if self._servers is not None:
                self._servers.stop()
            self._clients = self._servers = None
            return
        if self.traffic_on:
            return
        self.traffic(False)  # what is left of a test that ended on its own
        client, server = self.net.spec.flows[0]
        flow = iperf.Flow(self.net.ns(server), self.net.ns(client), self.net.addr(server))
        with contextlib.ExitStack() as undo:
            undo.callback(self.traffic, False)  # whatever started, should the rest fail
            # one test, then it exits; waited for (bounded) until it listens
            self._servers = iperf.Servers([flow], IPERF_PORT, one_off=True, report_every_s=REPORT_EVERY_S)
            self._servers.start()
            threading.Thread(target=self._read_goodput, args=(self._servers.procs[0],), daemon=True).start()
            self._clients = iperf.Clients([flow], [["-c", flow.server_addr, "-p", str(IPERF_PORT), "-t", str(TRAFFIC_S),
                                                    "-M", str(self.size), "-i", "0", "--connect-timeout", "5000"]])
            self._clients.go()
            undo.pop_all()

    def _read_goodput(self, server: subprocess.Popen) -> None:
        for line in server.stdout:
            mbps = protocol.interval_mbps(line)
            if mbps is not None:
                self.send("goodput", mbps=round(mbps, 3), ipsec=self.ipsec_on, profile=self.profile)
            elif line.startswith("iperf3: error"):
                self.send("error", text=line.strip())

    def _watch_rtt(self) -> None:
        """Time the round trip from the first client to its server until the demo ends: an ``rtt`` event
        per reply (a lost one sends none: the chart's line has a gap)."""
        client, server = self.net.spec.flows[0]
        argv = probe.stream_argv(self.net.addr(server), RTT_EVERY_S, TRAFFIC_S, probe.PING)
        try:
            while not self._stop.is_set():
                self._rtt_proc = iperf.popen_in(self.net.ns(client), argv, stdout=subprocess.PIPE,
                                                stderr=subprocess.DEVNULL, text=True)
                for line in self._rtt_proc.stdout:
                    ms = probe.rtt_of_line(line)
                    if ms is not None:
                        self.send("rtt", ms=round(ms, 3), ipsec=self.ipsec_on, profile=self.profile)
                self._rtt_proc.wait()
                # ping ends at its count, or at its start where the path has no route yet: again, soon
                self._stop.wait(1.0)
        except Exception as e:  # noqa: BLE001 (the demo goes on without the round trip, and says why)
            self.send("error", text=f"the round trip cannot be timed: {one_line(e)}")

    # -- what the page shows -----------------------------------------------------------
    def send_sas(self) -> None:
        hidden = "<key hidden>"
        self.send("sas", ipsec=self.ipsec_on, keys=self.show_keys,
                  nodes={node: protocol.busiest_first(sa_text(self.net, node, keys=self.show_keys, hidden=hidden))
                         for node in ipsec_ends(self.net.spec, self.mode)})

    def _watch_sas(self) -> None:
        while not self._stop.wait(SA_EVERY_S):
            with self._lock:
                self.send_sas()

    def capture(self) -> None:
        running = self.traffic_on
        packets = capture(self.net, protocol.CAPTURE_COUNT, ping=not running)
        self.captured = packets
        self.captured_sas = keyed_sas(self.net, self.mode, self.keying) if self.ipsec_on else []
        rows = [protocol.packet_row(i, p) for i, p in enumerate(packets)]
        decrypted, why = [], ""
        if any(row["proto"] == "WireGuard" for row in rows):
            why = ("WireGuard: the page cannot decrypt it. Each direction's key comes from a Noise handshake "
                   "(the initiation and response above, or before the capture) whose ephemeral keys never leave "
                   "the kernel, and nothing exports them; the receiver index and counter are all a capture shows")
        elif any(p.haslayer("ESP") or p.haslayer("AH") for p in packets):
            from ipsec.wire import DecryptError, decrypt

            try:
                decrypted = [protocol.decrypted_row(d) for d in decrypt(packets, self.captured_sas)]
            except (DecryptError, ValueError) as e:
                why = f"cannot decrypt: {one_line(e)}"
        elif packets:
            why = "no ESP or AH: the untrusted link carries plaintext (IPsec is off)"
        else:
            why = "nothing was sent onto the untrusted link"
        self.send("packets", captured=rows, decrypted=decrypted, note=why,
                  source=f"sent onto the untrusted link by {untrusted_senders(self.net)}"
                  + (" (traffic)" if running else " (ping)"))

    def pcap(self) -> dict:
        """The last capture and its Wireshark configuration (keys), as a zip, base64; written to a private
        temporary directory only for the time it takes to read them back."""
        if not self.captured:
            return {"problem": "nothing captured yet: capture first"}
        from ipsec.wire import write_wireshark

        with tempfile.TemporaryDirectory(prefix="itb-demo-pcap-") as tmp:
            os.chmod(tmp, 0o700)
            try:
                write_wireshark("capture.pcap", self.captured, self.captured_sas, tmp, overwrite=True)
            except ValueError as e:
                return {"problem": one_line(e)}
            buffer = io.BytesIO()
            with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
                for name in sorted(os.listdir(tmp)):
                    z.write(os.path.join(tmp, name), f"ipsec-demo/{name}")
        return {"zip": base64.b64encode(buffer.getvalue()).decode()}


def serve(topology: str, profile: str, mode: str, rate_mbit: float, clients: int, keying: Keying | str,
          ends: channels.Ends) -> int:
    """Build the network, protect it, and serve the page's actions over ``ends`` until the host goes."""
    from testbed.backends import current
    from topologies.network import Network

    spec = build_spec(topology, clients=clients)
    ends.send({"event": "building", "text": f"building {topology} in {current().label()}"})
    try:
        with Network(spec, shaping=ShapingSpec(rate_mbit=rate_mbit)) as net:
            net.apply_ipsec(profile, mode, families=(4, 6), keying=keying)
            Engine(net, ends, profile, mode, rate_mbit, keying, current().label()).serve()
    except Exception as e:
        ends.send({"event": "error", "text": f"the demo's network failed: {one_line(e)}", "fatal": True})
        raise
    finally:
        ends.close()
    return 0

"""The web demo's server and protocol, over a real socket on loopback and a real channel; and the
engine's traffic, on fake iperf3 servers and clients.

The test plays the engine's end of the channel (the network itself is the integration test's,
tests/integration/test_webdemo.py): it checks what reaches the engine, and what a page, another
site's page or a client without the token gets back.
"""
from __future__ import annotations

import http.client
import io
import json
import socket
import subprocess
import threading
import time
import types

import pytest

from cli.webdemo import protocol
from cli.webdemo.server import DemoServer, Hub
from testbed import channel as channels
from topologies import build_spec


# -- protocol -----------------------------------------------------------------------------
@pytest.mark.parametrize("message", [
    {"action": "ipsec", "on": True}, {"action": "traffic", "on": False}, {"action": "keys", "show": True},
    {"action": "capture"}, {"action": "profile", "name": "3des-cbc-sha1"}, {"action": "rate", "mbit": 100},
    {"action": "size", "mss": 100}, {"action": "pcap", "id": 3}])
def test_the_pages_actions_pass_with_only_their_keys(message):
    checked = protocol.check_action({**message, "extra": "rm -rf /"})
    assert checked == {**message, **({"mbit": 100.0} if message["action"] == "rate" else {})}
    assert "extra" not in checked


@pytest.mark.parametrize("message, why", [
    ("ipsec on", "a JSON object"), ({"action": "shell", "cmd": "id"}, "unknown action 'shell'"),
    ({"action": "ipsec", "on": "yes"}, "true or false"), ({"action": "profile", "name": "none"}, "not one of"),
    ({"action": "profile", "name": "aes-gcm-256; reboot"}, "not one of"), ({"action": "rate", "mbit": 3}, "not one of"),
    ({"action": "rate", "mbit": True}, "not one of"), ({"action": "size", "mss": 99999}, "not one of"),
    ({"action": "pcap", "id": "1"}, "integer")])
def test_anything_else_is_refused_with_a_reason(message, why):
    with pytest.raises(protocol.ActionError, match=why):
        protocol.check_action(message)


def test_the_drawing_puts_clients_left_and_the_server_right_and_marks_the_links():
    net = protocol.describe_network(build_spec("vpn_gateway"), "tunnel", 10.0)
    assert {n["name"]: n["column"] for n in net["nodes"]} == {"h1": 0, "gw1": 1, "gw2": 2, "h2": 3}
    assert [(link["a"], link["b"]) for link in net["links"] if link["untrusted"]] == [("gw1", "gw2")]
    assert [link["rate_mbit"] for link in net["links"]] == [None, 10.0, None]
    assert net["ipsec_ends"] == ["gw1", "gw2"] and net["ipsec_pairs"] == [["gw1", "gw2"]]
    rw = protocol.describe_network(build_spec("road_warrior", clients=3), "tunnel", 100.0)
    columns = {n["name"]: n["column"] for n in rw["nodes"]}
    assert columns == {"c1": 0, "c2": 0, "c3": 0, "sw": 1, "gw": 2, "srv": 3}
    assert rw["ipsec_pairs"] == [["c1", "gw"], ["c2", "gw"], ["c3", "gw"]]
    transport = protocol.describe_network(build_spec("vpn_gateway"), "transport", 10.0)
    assert transport["ipsec_ends"] == ["h1", "h2"]


def test_iperf3s_interval_lines_give_goodput_and_its_summaries_none():
    assert protocol.interval_mbps("[  5]   1.00-1.50   sec   580 KBytes  9.50 Mbits/sec") == 9.5
    assert protocol.interval_mbps("[  5]   0.00-0.50   sec  5.62 MBytes  94.3 Mbits/sec                  ") == 94.3
    assert protocol.interval_mbps("[  5]   2.00-2.50   sec  59.4 MBytes   1.00 Gbits/sec") == 1000.0
    assert protocol.interval_mbps("[  5]   3.00-3.50   sec  0.00 Bytes  0.00 bits/sec") == 0.0
    assert protocol.interval_mbps("[  5]   0.00-10.04  sec  11.3 MBytes  9.44 Mbits/sec        receiver") is None
    assert protocol.interval_mbps("Accepted connection from 198.18.1.2, port 41234") is None


def test_packet_rows_show_esp_as_a_listener_sees_it_and_plaintext_as_it_is():
    from scapy.layers.inet import ICMP, IP
    from scapy.layers.ipsec import ESP

    esp = IP(src="198.18.2.1", dst="198.18.2.2") / ESP(spi=0x1234, seq=7, data=b"\x00" * 40)
    assert protocol.packet_row(0, esp) == {"n": 1, "src": "198.18.2.1", "dst": "198.18.2.2", "length": len(esp),
                                           "proto": "ESP", "spi": "0x00001234", "seq": 7, "summary": ""}
    plain = protocol.packet_row(1, IP(src="198.18.1.1", dst="198.18.3.1") / ICMP())
    assert plain["proto"] == "ICMP" and plain["spi"] == "" and "echo-request" in plain["summary"]


def test_packet_rows_show_wireguard_messages_by_type_index_and_counter():
    from scapy.layers.inet import IP, UDP
    from scapy.packet import Raw

    data = bytes([4, 0, 0, 0]) + (0xABCD).to_bytes(4, "little") + (12).to_bytes(8, "little") + bytes(1040 + 16)
    wg = IP(src="198.18.2.1", dst="198.18.2.2") / UDP(sport=51820, dport=51820) / Raw(data)
    row = protocol.packet_row(0, wg)
    assert (row["proto"], row["spi"], row["seq"]) == ("WireGuard", "0x0000abcd", 12)
    assert row["summary"] == "transport data, 1040 encrypted bytes"
    hello = IP(src="198.18.2.1", dst="198.18.2.2") / UDP(sport=51820, dport=51820) / \
        Raw(bytes([1, 0, 0, 0]) + (5).to_bytes(4, "little") + bytes(140))
    assert protocol.packet_row(1, hello)["summary"] == "handshake initiation"
    other = IP(src="198.18.2.1", dst="198.18.2.2") / UDP(sport=53, dport=53) / Raw(data)  # not its port
    assert protocol.packet_row(2, other)["proto"] == "UDP"


def test_the_page_offers_wireguard_only_where_the_demo_can_switch_to_it():
    assert "wireguard" in protocol.profiles() and "wireguard" in protocol.profiles("tunnel", "static")
    assert "wireguard" not in protocol.profiles("transport", "static")
    assert "wireguard" not in protocol.profiles("tunnel", "ike")
    assert "aes-gcm-256" in protocol.profiles("transport", "ike")


def test_the_sa_pane_puts_the_sa_that_carried_most_on_top():
    def sa(dst: str, carried: int) -> str:
        return (f"src 198.18.2.1 dst {dst}\n\tproto esp spi 0x00001000 reqid 1 mode tunnel\n\tlifetime current:\n"
                f"\t  {carried}(bytes), 7(packets)\n\t  add 2026-11-26 07:32:30 use -\n")
    text = sa("2001:db8::1", 0) + sa("198.18.2.2", 5120) + sa("198.18.2.9", 0) + sa("198.18.2.3", 9000)
    ordered = protocol.busiest_first(text)
    assert [line.split()[3] for line in ordered.splitlines() if line.startswith("src ")] == [
        "198.18.2.3", "198.18.2.2", "2001:db8::1", "198.18.2.9"]
    assert sorted(ordered.splitlines()) == sorted(text.splitlines()) and protocol.busiest_first("") == ""


# -- the server ---------------------------------------------------------------------------
class Engine:
    """The channel's other end, as the engine holds it: what the server sent, and events to send."""

    def __init__(self, chan: channels.Channel) -> None:
        self.ends = chan.job_files()
        self.received: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while (message := self.ends.receive()) is not None:
            self.received.append(message)
            if message.get("action") == "pcap":
                self.ends.send({"event": "pcap", "id": message["id"], "zip": "UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA=="})

    def wait_for(self, n: int) -> list[dict]:
        deadline = time.monotonic() + 5
        while len(self.received) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.received


@pytest.fixture
def demo():
    chan = channels.Channel()
    hub = Hub(chan)
    threading.Thread(target=hub.pump, daemon=True).start()
    server = DemoServer(hub)
    server.start()
    engine = Engine(chan)
    try:
        yield server, engine
    finally:
        engine.ends.close()
        chan.close()
        server.close()


def request(server, method: str, path: str, body: dict | None = None, headers: dict | None = None,
            host: str | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    hdrs = {"Host": host or f"127.0.0.1:{server.port}", **(headers or {})}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    conn.request(method, path, body=data, headers=hdrs)
    r = conn.getresponse()
    out = r.status, r.read(), dict(r.getheaders())
    conn.close()
    return out


def _own_addresses() -> set[str]:
    """This network namespace's IPv4 addresses, from its interfaces (not its host name, which need not resolve)."""
    shown = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout
    return {line.split()[3].split("/")[0] for line in shown.splitlines()}


def test_it_listens_on_loopback_only(demo):
    server, _ = demo
    assert server.server_address[0] == "127.0.0.1"
    for address in _own_addresses() - {"127.0.0.1"}:  # the machine's other addresses: nothing listens there
        with pytest.raises(OSError):
            socket.create_connection((address, server.port), timeout=2).close()
    assert server.url.startswith(f"http://127.0.0.1:{server.port}/?token=") and len(server.token) >= 32


def test_without_its_token_nothing_is_served_and_nothing_is_done(demo):
    server, engine = demo
    for path in ("/", "/app.js", "/plotly.min.js", "/events", "/pcap", "/?token=wrong"):
        status, body, _ = request(server, "GET", path)
        assert status == 403 and b"token" in body and b"<html" not in body, path
    status, _, _ = request(server, "POST", "/action", {"action": "ipsec", "on": False})
    assert status == 403
    status, _, _ = request(server, "POST", "/action", {"action": "ipsec", "on": False}, {"X-Token": "x" * 32})
    assert status == 403
    # the first action to reach the engine is the first one made with the token
    status, _, _ = request(server, "POST", "/action", {"action": "capture"}, {"X-Token": server.token})
    assert status == 202 and engine.wait_for(1) == [{"action": "capture"}]


def test_with_its_token_the_page_is_served_and_its_cookie_fetches_the_pages_own_scripts(demo):
    server, _ = demo
    status, body, headers = request(server, "GET", f"/?token={server.token}")
    assert status == 200 and b'<script src="plotly.min.js">' in body and b"http" not in body.split(b"<body")[0]
    assert "default-src 'self'" in headers["Content-Security-Policy"] and headers["Referrer-Policy"] == "no-referrer"
    cookie = headers["Set-Cookie"]
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= {part.strip() for part in cookie.split(";")}
    jar = {"Cookie": cookie.split(";")[0]}
    assert jar["Cookie"] == f"itb_demo_{server.port}={server.token}"
    status, body, _ = request(server, "GET", "/plotly.min.js", headers=jar)
    assert status == 200 and len(body) > 1_000_000  # plotly.js itself, from the plotly package
    status, body, _ = request(server, "GET", "/app.js", headers=jar)
    assert status == 200 and b"EventSource" in body
    status, _, _ = request(server, "GET", "/app.js", headers={"Cookie": f"itb_demo_{server.port}=guess"})
    assert status == 403


def test_another_sites_page_or_another_host_name_is_refused_even_with_the_token(demo):
    server, engine = demo
    token = {"X-Token": server.token}
    status, body, _ = request(server, "POST", "/action", {"action": "ipsec", "on": False},
                              {**token, "Origin": "http://evil.example"})
    assert status == 403 and b"another site" in body
    status, body, _ = request(server, "GET", f"/?token={server.token}", host=f"rebound.example:{server.port}")
    assert status == 403 and b"Host" in body
    assert engine.received == []


def test_an_action_from_the_page_reaches_the_engine_checked_and_a_bad_one_does_not(demo):
    server, engine = demo
    page = {"X-Token": server.token, "Origin": f"http://127.0.0.1:{server.port}"}
    status, _, _ = request(server, "POST", "/action", {"action": "rate", "mbit": 34, "x": 1}, page)
    assert status == 202
    status, body, _ = request(server, "POST", "/action", {"action": "run", "cmd": "id"}, page)
    assert status == 400 and b"unknown action" in body
    status, _, _ = request(server, "POST", "/action", {"action": "ipsec", "on": True}, {**page, "Content-Type":
                                                                                        "text/plain"})
    assert status == 415
    assert engine.wait_for(1) == [{"action": "rate", "mbit": 34.0}]


@pytest.mark.parametrize("length", ["abc", "-5", "1e3", " "])
def test_a_malformed_content_length_is_a_400_and_no_traceback(demo, capfd, length):
    server, engine = demo
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
        conn.sendall((f"POST /action HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nX-Token: {server.token}\r\n"
                      f"Origin: http://127.0.0.1:{server.port}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {length}\r\n\r\n{{}}").encode())
        answer = b""
        while chunk := conn.recv(4096):  # to the end: the server closes the connection after its answer
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 400") or answer.startswith(b"HTTP/1.1 400"), answer[:60]
    assert answer.count(b"HTTP/1.") == 1, answer  # the unread body was not taken for a second request
    assert b"Content-Length must be the body's length in bytes" in answer
    assert "Traceback" not in capfd.readouterr().err
    assert engine.received == []


def test_events_stream_to_the_page_with_the_last_state_replayed(demo):
    server, engine = demo
    engine.ends.send({"event": "hello", "network": {"topology": "vpn_gateway"}})
    engine.ends.send({"event": "goodput", "t": 1.0, "mbps": 9.2, "ipsec": True})
    time.sleep(0.2)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("GET", f"/events?token={server.token}", headers={"Host": f"127.0.0.1:{server.port}"})
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"
    engine.ends.send({"event": "goodput", "t": 1.5, "mbps": 9.3, "ipsec": True})
    events = []
    while len(events) < 3:
        line = r.fp.readline()
        if line.startswith(b"data: "):
            events.append(json.loads(line[6:]))
    assert [e["event"] for e in events] == ["hello", "goodput", "goodput"] and events[2]["mbps"] == 9.3
    conn.close()


def test_a_capture_downloads_as_a_zip_asked_of_the_engine(demo):
    server, engine = demo
    status, body, headers = request(server, "GET", "/pcap", headers={"X-Token": server.token})
    assert status == 200 and headers["Content-Type"] == "application/zip" and body.startswith(b"PK")
    assert "attachment" in headers["Content-Disposition"]
    assert engine.wait_for(1)[0]["action"] == "pcap"


def test_the_channel_carries_json_lines_both_ways_and_reads_end_of_file_when_an_end_goes():
    chan = channels.Channel()
    job = chan.job_files()
    assert chan.send({"action": "capture"}) and job.receive() == {"action": "capture"}
    assert job.send({"event": "bye"}) and chan.receive() == {"event": "bye"}
    job.close()
    assert chan.receive() is None
    assert channels.job_env((5, 6)) == "fd:5,6" and channels.job_end("") is None
    chan.close()


# -- the engine's traffic -----------------------------------------------------------------
class FakeServers:
    """experiments.engine.iperf.Servers without processes; its server says ``said``."""

    def __init__(self, flows, port, one_off=False, report_every_s=None, said="") -> None:
        self.flows, self.port, self.one_off, self.report_every_s = flows, port, one_off, report_every_s
        self.procs = [types.SimpleNamespace(stdout=io.StringIO(said))]
        self.done: list = []

    def start(self) -> None:
        self.done.append("start")

    def stop(self) -> None:
        self.done.append("stop")


class FakeClients:
    """experiments.engine.iperf.Clients without processes."""

    def __init__(self, flows, args) -> None:
        self.flows, self.args, self.running = flows, args, True
        self.done: list = []

    def waiting(self) -> bool:
        return self.running

    def go(self) -> None:
        self.done.append("go")

    def end(self, timeout_s: float) -> None:
        self.done.append(("end", timeout_s))
        self.running = False


SERVER_SAYS = ("-----------\nServer listening on 5299\n[  5]   0.00-0.50   sec   580 KBytes  9.50 Mbits/sec\n"
               "iperf3: error - the client has unexpectedly closed the connection\n")


@pytest.fixture
def traffic_engine(monkeypatch):
    """The web demo's engine on a fake network, its iperf3 servers and clients fakes: (engine, what it
    sent, the servers and clients it started)."""
    from cli.webdemo import engine as demo
    from experiments.engine import iperf

    started: dict[str, list] = {"servers": [], "clients": []}

    def servers(*args, **kw):
        started["servers"].append(FakeServers(*args, **kw, said=SERVER_SAYS))
        return started["servers"][-1]

    def clients(*args):
        started["clients"].append(FakeClients(*args))
        return started["clients"][-1]

    monkeypatch.setattr(iperf, "Servers", servers)
    monkeypatch.setattr(iperf, "Clients", clients)
    net = types.SimpleNamespace(spec=types.SimpleNamespace(flows=[("h1", "h3"), ("h2", "h3")]),
                                ns=lambda node: f"itb-{node}", addr=lambda node: "198.18.3.1")
    sent: list[dict] = []
    ends = types.SimpleNamespace(send=lambda event: sent.append(event) or True)
    return demo.Engine(net, ends, "aes-gcm-256", "tunnel", 10.0, "static", "host"), sent, started


def test_the_demos_traffic_runs_through_the_iperf_helpers_and_charts_the_servers_reports(traffic_engine):
    from experiments.engine import iperf
    from testbed import waiting

    engine, sent, started = traffic_engine
    engine.traffic(True)
    (servers,), (clients,) = started["servers"], started["clients"]
    flow = iperf.Flow("itb-h3", "itb-h1", "198.18.3.1")  # the first client's flow
    # a one-off server reporting every 0.5 s, started and listening before its client is
    assert (servers.flows, servers.port, servers.one_off, servers.report_every_s) == ([flow], 5299, True, 0.5)
    assert servers.done == ["start"] and clients.flows == [flow] and clients.done == ["go"]
    assert clients.args == [["-c", "198.18.3.1", "-p", "5299", "-t", "86400", "-M", str(engine.size), "-i", "0",
                             "--connect-timeout", "5000"]]
    assert engine.traffic_on and engine.settings()["traffic"]
    def charted() -> list[dict]:
        return [e for e in sent if e["event"] in ("goodput", "error")]

    goodput, error = waiting.until(lambda: len(charted()) >= 2 and charted(), 5, "the server's lines as events")
    assert (goodput["mbps"], goodput["ipsec"], goodput["profile"]) == (9.5, True, "aes-gcm-256")
    assert error["text"] == "iperf3: error - the client has unexpectedly closed the connection"
    engine.traffic(True)  # on already: nothing more started
    assert len(started["servers"]) == len(started["clients"]) == 1
    engine.traffic(False)
    assert clients.done == ["go", ("end", 5)] and servers.done == ["start", "stop"] and not engine.traffic_on


def test_traffic_that_ended_on_its_own_is_cleared_before_it_starts_again(traffic_engine):
    engine, _sent, started = traffic_engine
    engine.traffic(True)
    started["clients"][0].running = False  # its test ended (the server went, say)
    assert not engine.traffic_on
    engine.traffic(True)
    assert started["clients"][0].done == ["go", ("end", 5)] and started["servers"][0].done == ["start", "stop"]
    assert len(started["servers"]) == 2 and engine.traffic_on


def test_traffic_that_fails_to_start_leaves_nothing_running(traffic_engine, monkeypatch):
    from experiments.engine import iperf

    engine, _sent, started = traffic_engine

    def no_clients(flows, args):
        raise iperf.IperfError("iperf3 not found: install it")

    monkeypatch.setattr(iperf, "Clients", no_clients)
    with pytest.raises(iperf.IperfError, match="not found"):
        engine.traffic(True)
    assert started["servers"][0].done == ["start", "stop"] and not engine.traffic_on


def test_the_round_trip_is_timed_beside_the_traffic_and_charted_as_it_comes(traffic_engine, monkeypatch):
    from experiments.engine import iperf, probe

    engine, sent, _ = traffic_engine
    clients = []

    def popen_in(ns, argv, **kw):
        clients.append((ns, argv))
        if len(clients) == 2:  # the second run: the demo ends while it runs
            engine._stop.set()
        lines = "PING 198.18.3.1 (198.18.3.1) 60(88) bytes of data.\n" \
                "68 bytes from 198.18.3.1: icmp_seq=1 ttl=62 time=49.3 ms\n" \
                "68 bytes from 198.18.3.1: icmp_seq=1 ttl=62 time=49.4 ms (DUP!)\n" \
                "68 bytes from 198.18.3.1: icmp_seq=3 ttl=62 time=0.812 ms\n"
        return types.SimpleNamespace(stdout=io.StringIO(lines), wait=lambda: 0, poll=lambda: 0)

    monkeypatch.setattr(iperf, "popen_in", popen_in)
    engine._watch_rtt()  # ping ran out: started again a second later
    # from the first flow's client to its server, the sweep's default tool: no process of its own at the far end
    assert [ns for ns, _ in clients] == ["itb-h1", "itb-h1"] and clients[0][1][0] == probe.PING
    assert clients[0][1][-1] == "198.18.3.1" and "0.25" in clients[0][1]
    rtts = [(e["ms"], e["ipsec"], e["profile"]) for e in sent if e["event"] == "rtt"]
    assert rtts[:2] == [(49.3, True, "aes-gcm-256"), (0.812, True, "aes-gcm-256")] and len(rtts) == 4  # no DUP
    assert not [e for e in sent if e["event"] == "error"]

    def broken(ns, argv, **kw):
        raise FileNotFoundError(2, "No such file or directory", "ping")

    monkeypatch.setattr(iperf, "popen_in", broken)
    engine._stop.clear()
    engine._watch_rtt()  # the demo goes on, and says why the chart has no round trip
    assert sent[-1]["event"] == "error" and sent[-1]["text"].startswith("the round trip cannot be timed: ")
    assert "ping" in sent[-1]["text"]

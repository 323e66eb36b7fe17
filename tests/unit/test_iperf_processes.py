"""iperf.Servers and iperf.Clients around stand-in processes: small Python programs in this namespace
in iperf3's place (no root, no iperf3), for how the helpers start, wait for, read and end them."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from experiments.engine import iperf
from testbed import waiting

#: A server that says its arguments, listens on its -p port, reports once and waits.
LISTENS = """
import socket, sys, time
port = int(sys.argv[sys.argv.index("-p") + 1])
print(" ".join(sys.argv[1:]), flush=True)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen()
print("[  5]   0.00-0.50   sec   580 KBytes  9.50 Mbits/sec", flush=True)
time.sleep(60)
"""
#: A server that fails as iperf3 does when its port is taken.
REFUSES = """
import sys
print("iperf3: error - unable to start listener for connections: Address already in use", file=sys.stderr)
sys.exit(1)
"""
#: A client that runs until interrupted, and one that does not let SIGINT end it.
RUNS = "import time\ntime.sleep(60)\n"
STUBBORN = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)\n"

FLOW = iperf.Flow("server-ns", "client-ns", "127.0.0.1")


@pytest.fixture
def stand_in(monkeypatch):
    """Run ``program`` where the helpers would start iperf3 in a namespace: returns a setter."""
    program = {"text": RUNS}

    def popen_in(ns, argv, **kw):
        return subprocess.Popen([sys.executable, "-c", program["text"], *argv[1:]], **kw)

    monkeypatch.setattr(iperf, "check", lambda: "iperf3")
    monkeypatch.setattr(iperf, "popen_in", popen_in)
    return lambda text: program.update(text=text)


def ignores_sigint(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        mask = next(line.split()[1] for line in f if line.startswith("SigIgn:"))
    return bool(int(mask, 16) & (1 << (signal.SIGINT - 1)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_reporting_server_is_waited_for_and_its_reports_read_from_its_pipe(stand_in):
    stand_in(LISTENS)
    port = free_port()
    with iperf.Servers([FLOW], port, one_off=True, report_every_s=0.5) as servers:
        server = servers.procs[0]
        assert iperf.listening(server.pid, port)  # start() returned once it listened
        assert server.stdout.readline().split() == ["-s", "-1", "-p", str(port), "-i", "0.5", "--forceflush", "-f",
                                                    "m"]
        assert server.stdout.readline().strip().endswith("9.50 Mbits/sec")
    assert server.returncode == -9 and servers.procs == [None]


@pytest.mark.parametrize("report_every_s", [None, 0.5])
def test_a_server_that_exits_before_it_listens_says_what_it_said(stand_in, report_every_s):
    stand_in(REFUSES)
    port = free_port()
    servers = iperf.Servers([FLOW], port, report_every_s=report_every_s)
    with pytest.raises(iperf.IperfError, match=rf"^iperf3 server in server-ns exited with status 1 before it "
                                               rf"listened on port {port}: iperf3: error - unable to start listener"):
        servers.__enter__()
    assert servers.procs == [None]  # stopped again


def test_clients_ended_on_purpose_exit_when_interrupted(stand_in):
    stand_in(RUNS)
    clients = iperf.Clients([FLOW], [["-c", "127.0.0.1"]])
    proc = clients.procs[0]
    assert clients.waiting()
    started = time.monotonic()
    clients.end(5)
    assert proc.returncode not in (None, -9) and time.monotonic() - started < 5 and not clients.waiting()


def test_clients_that_do_not_end_when_interrupted_are_killed_after_their_time(stand_in):
    stand_in(STUBBORN)
    clients = iperf.Clients([FLOW], [["-c", "127.0.0.1"]])
    proc = clients.procs[0]
    waiting.until(lambda: ignores_sigint(proc.pid), 10, "the stand-in to ignore SIGINT")
    started = time.monotonic()
    clients.end(0.2)
    assert proc.returncode == -9 and 0.1 <= time.monotonic() - started < 5 and clients.procs == []


def test_a_port_is_listening_by_its_transport():
    """A UDP socket bound to a port (irtt's server) counts for "udp" only; a TCP listener for "tcp" only, and a
    TCP socket bound but not listening for neither."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, socket.socket() as tcp, socket.socket() as idle:
        udp.bind(("127.0.0.1", 0))
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        idle.bind(("127.0.0.1", 0))
        u, t, i = (s.getsockname()[1] for s in (udp, tcp, idle))
        assert iperf.listening(os.getpid(), u, "udp") and not iperf.listening(os.getpid(), u)
        assert iperf.listening(os.getpid(), t) and not iperf.listening(os.getpid(), t, "udp")
        assert not iperf.listening(os.getpid(), i) and not iperf.listening(os.getpid(), i, "udp")

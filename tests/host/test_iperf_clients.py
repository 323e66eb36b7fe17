"""iperf3 clients started ahead of their test and held (experiments.engine.iperf.Clients), on real iperf3.

The sweep starts the next point's clients during a point's warm-up; these tests check
that such a client really waits (no connection, lowest priority) until it is let go,
then runs an ordinary test at normal priority, and that a client held for other
arguments is not used.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from experiments.engine import iperf
from testbed import waiting
from topologies.veth_pair import veth_pair


@pytest.fixture
def pair_with_server():
    with veth_pair() as pair:
        flows = [iperf.Flow(pair.b, pair.a, pair.v4b)]
        with iperf.Servers(flows) as servers:
            yield flows, servers


def connections_to(pid: int, port: int) -> int:
    """TCP connections (any state but listening) to ``port`` in process ``pid``'s namespace."""
    n = 0
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            next(f)
            for line in f:
                fields = line.split()
                if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[3] != "0A":
                    n += 1
    return n


def nice_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])


def blocked_on_its_gate(clients: iperf.Clients) -> bool:
    """Whether the first client is blocked in read(2) on the pipe that holds it."""
    pid = clients.procs[0].pid
    with open(f"/proc/{pid}/syscall") as f:
        fields = f.read().split()
    if fields[0] != "0":  # x86-64's read
        return False
    gate = f"pipe:[{os.fstat(clients._gates[0][0]).st_ino}]"
    return os.readlink(f"/proc/{pid}/fd/{int(fields[1], 16)}") == gate


def wait_until_held(clients: iperf.Clients, timeout_s: float = 10.0) -> None:
    def held():
        assert clients.waiting(), "a held iperf3 client exited"
        return clients.held()

    waiting.until(held, timeout_s, "the iperf3 client to reach its hold", interval_s=0.02)


def test_a_held_client_waits_unconnected_at_low_priority_then_runs_its_test(pair_with_server):
    flows, servers = pair_with_server
    args = iperf.flow_args(flows, servers.ports, duration_s=1, omit_s=0, mss=1000)
    with iperf.Clients(flows, args) as clients:
        wait_until_held(clients)
        pid = clients.procs[0].pid
        # not a pause that hopes it would have connected by now: it is seen blocked in read(2) on its gate
        waiting.until(lambda: blocked_on_its_gate(clients), 10, "the held client to block reading its gate",
                      state=lambda: Path(f"/proc/{pid}/syscall").read_text().strip())
        assert clients.waiting() and connections_to(pid, servers.ports[0]) == 0
        assert nice_of(pid) == iperf.HELD_NICE
        clients.go()
        assert nice_of(pid) == 0
        t0 = time.monotonic()
        (out,) = clients.outputs(timeout_s=20)
    result = iperf.parse_iperf3(out)
    assert result.goodput_mbps > 1 and 0.9 <= result.seconds <= 1.5
    assert time.monotonic() - t0 >= 1.0
    assert not clients.procs and not clients.held()  # closed: pipes and processes gone


def test_held_clients_for_other_arguments_are_closed_not_used(pair_with_server):
    flows, servers = pair_with_server
    other = iperf.Clients(flows, iperf.flow_args(flows, servers.ports, duration_s=1, omit_s=0, mss=500))
    wait_until_held(other)
    stale = other.procs[0]
    result, = iperf.measure_flows(flows, duration_s=1, omit_s=0, mss=1000, servers=servers, held=other)
    assert result.goodput_mbps > 1
    assert stale.returncode is not None and not other.procs  # killed, never let go


def test_stopped_clients_give_their_reports_and_a_lost_one_is_named_not_fatal():
    """A sweep stops its clients when the window closes; iperf3 writes its report from its SIGINT
    handler and, with many clients on a busy CPU, sometimes dies there (SIGABRT in malloc).  Such a
    client loses its own report only: :meth:`Clients.stop` names it and returns the others'."""
    with veth_pair() as pair:
        flows = [iperf.Flow(pair.b, pair.a, pair.v4b)] * 2
        with iperf.Servers(flows) as servers:
            args = iperf.flow_args(flows, servers.ports, duration_s=30, omit_s=0, mss=1000)
            with iperf.Clients(flows, args) as clients:
                assert clients.wait_held(timeout_s=10)
                clients.go()
                client = clients.procs[0].pid  # (both clients are in one namespace)
                waiting.until(lambda: all(connections_to(client, port) >= 2 for port in servers.ports), 10,
                              "both clients' control and data connections")
                assert clients.ended() is None
                doomed = clients.procs[1]
                os.kill(doomed.pid, signal.SIGABRT)
                waiting.until(lambda: doomed.poll() is not None, 10, "the aborted client to end")
                assert clients.ended() == f"iperf3 client in {pair.a} was killed by SIGABRT, saying nothing"
                results, lost = clients.stop(timeout_s=20)
    (result,) = results
    assert result.goodput_mbps > 1 and 0 < result.seconds < 30
    assert lost == [f"iperf3 client in {pair.a}: was killed by SIGABRT, saying nothing"]


def test_waiting_for_clients_to_be_held_ends_with_why_when_one_exits(pair_with_server):
    flows, servers = pair_with_server
    args = [[*a, "--no-such-option"] for a in iperf.flow_args(flows, servers.ports, duration_s=1, omit_s=0)]
    with iperf.Clients(flows, args) as clients, pytest.raises(iperf.IperfError) as e:
        clients.wait_held(timeout_s=10)
    assert str(e.value).startswith(f"iperf3 client in {flows[0].client_ns} exited with status 1")
    assert "no-such-option" in str(e.value) and str(e.value).endswith("before its test began")

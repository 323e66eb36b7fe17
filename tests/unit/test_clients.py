"""A point's iperf3 clients through their lifecycle (experiments.engine.clients.PointClients), on fakes.

No process is started: ``iperf.Clients`` is replaced by :class:`FakeClients`, which records what was
done to it, and the monitor by :class:`FakeMonitor`, whose readings are given.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import types

import pytest

from experiments.engine import clients as clients_module
from experiments.engine import iperf
from experiments.engine.clients import Ahead, PointClients, connect_timeout_s, iperf_options
from experiments.engine.counters import FlowCounters
from experiments.engine.plan import SweepSpec, plan_points

SPEC = SweepSpec()
POINT = plan_points(SPEC)[0]  # TCP, one client
PORTS = [5201, 5202, 5203]


def flows(n: int) -> list[iperf.Flow]:
    return [iperf.Flow("server", f"client{i}", "10.0.0.1") for i in range(n)]


def args_for(point, n: int) -> list[list[str]]:
    """The clients' arguments for ``point`` over ``n`` flows, as PointClients makes them."""
    return iperf.flow_args(flows(n), PORTS[:n], **iperf_options(point, SPEC))


class FakeClients:
    """iperf.Clients without processes: what was done to them, in order (``done``)."""

    def __init__(self, flows, args, failure: str | None = None, held: bool = True) -> None:
        self.flows, self.args = list(flows), [list(a) for a in args]
        self.done: list = []
        self.alive, self.is_held, self.why_failed, self.why_ended = True, held, failure, None
        self.results = [iperf.Result("tcp", 3.0, 0, 1.0, 0, None, None, None) for _ in self.flows]
        self.lost: list[str] = []

    def waiting(self) -> bool:
        return self.alive

    def held(self) -> bool:
        return self.is_held

    def wait_held(self, timeout_s: float, poll_s: float = 0.05) -> bool:
        self.done.append(("wait_held", timeout_s))
        return True

    def go(self) -> None:
        self.done.append("go")

    def failure(self) -> str | None:
        return self.why_failed

    def ended(self) -> str | None:
        return self.why_ended

    def stop(self, timeout_s: float):
        self.done.append(("stop", timeout_s))
        return self.results, self.lost

    def close(self, wait: bool = True) -> None:
        self.done.append("close" if wait else "kill")

    def reap(self) -> None:
        self.done.append("reap")


class FakeMonitor:
    """A Monitor whose readings are given: data arriving or not, how many clients are connected
    (one answer per reading, the last one stays) and whether a server is busy (likewise)."""

    def __init__(self, n: int = 1, data: bool = True, connected=(0,), busy=(False,)) -> None:
        self.receivers = [("server", port, 1) for port in PORTS[:n]]
        self.data, self.received = data, 0
        self._connected, self._busy = list(connected), list(busy)
        self.tests: list = []

    def for_test(self, transport: str, datagram_bytes: int = 0) -> FakeMonitor:
        self.tests.append((transport, datagram_bytes))
        return self

    def flows(self) -> FlowCounters:
        self.received += 1448 if self.data else 0
        return FlowCounters(self.received)

    def connected(self) -> int:
        return self._connected.pop(0) if len(self._connected) > 1 else self._connected[0]

    def stages(self) -> list[str]:
        return ["connected"] * self._connected[0] + ["no connection yet"] * (len(self.receivers) - self._connected[0])

    def servers_busy(self) -> bool:
        return self._busy.pop(0) if len(self._busy) > 1 else self._busy[0]


@pytest.fixture
def made(monkeypatch) -> list[FakeClients]:
    """Every fresh FakeClients started, iperf.Clients replaced by it."""
    started: list[FakeClients] = []

    def start(flows, args, **kw):
        started.append(FakeClients(flows, args, **kw))
        return started[-1]

    monkeypatch.setattr(iperf, "Clients", start)
    return started


def test_clients_held_for_this_very_test_are_let_go_at_once(made):
    ahead = Ahead(net=None, spec=SPEC, servers=None)
    ahead.clients = held = FakeClients(flows(1), args_for(POINT, 1))
    point = PointClients(flows(1), POINT, SPEC, PORTS[:1], monitor := FakeMonitor(), ahead)
    with point:
        assert point.clients is held and point.started_ahead and ahead.take() is None
        seen = point.start()
    assert held.done == ["go", "close"] and not made  # loaded already: no wait, no fresh ones
    assert seen == point.seen_at > point.let_go_at > 0 and monitor.tests == [("tcp", 0)]
    assert point.record_fields() == {"iperf3_sender_mbps": 0.0, "iperf3_reports_lost": 0, "clients_ahead": True,
                                     "clients_sending_s": None}


def test_clients_held_for_another_test_are_closed_and_fresh_ones_go_together_once_loaded(made):
    three = dataclasses.replace(POINT, clients=3)
    ahead = Ahead(net=None, spec=SPEC, servers=None)
    ahead.clients = stale = FakeClients(flows(3), args_for(POINT, 3))  # another point's (its test is shorter)
    # three TCP clients: the window may open once every one is connected, the third at the third look
    point = PointClients(flows(3), three, SPEC, PORTS, FakeMonitor(3, connected=(1, 2, 3)), ahead)
    with point:
        point.start()
    assert stale.done == ["close"] and len(made) == 1 and not point.started_ahead
    assert made[0].args == args_for(three, 3)
    assert made[0].done == [("wait_held", connect_timeout_s(3)), "go", "close"]
    assert point.crowd_s == connect_timeout_s(3, three.rate_mbit)
    assert point.all_connected_at >= point.seen_at > point.let_go_at
    assert point.record_fields()["clients_sending_s"] == point.all_connected_at - point.let_go_at
    assert not point.record_fields()["clients_ahead"]
    # --connect-timeout: both waits take the limit given
    made.clear()
    told = dataclasses.replace(SPEC, connect_timeout_s=2.0)
    with PointClients(flows(3), three, told, PORTS, FakeMonitor(3, connected=(1, 2, 3)), None) as given:
        given.start()
    assert made[0].done == [("wait_held", 2.0), "go", "close"] and given.crowd_s == 2.0


def test_one_fresh_client_does_not_wait_to_load(made):
    with PointClients(flows(1), POINT, SPEC, PORTS[:1], FakeMonitor()) as point:
        point.start()
    assert made[0].done == ["go", "close"] and point.crowd_s is None


def test_a_client_that_exits_fails_the_point_at_once_saying_whose_it_was(monkeypatch, made):
    monkeypatch.setattr(iperf, "Clients", functools.partial(FakeClients, failure="iperf3 client in client0 "
                                                                                  "exited with status 1: busy"))
    point = PointClients(flows(1), POINT, SPEC, PORTS[:1], FakeMonitor(data=False))
    with pytest.raises(iperf.IperfError, match=r"^iperf3 client in client0 exited with status 1: busy "
                                               r"\(iperf3 clients started now\)$"), point:
        point.start()
    assert point.clients.done == ["go", "close"]


def test_no_data_in_time_fails_the_point(monkeypatch, made):
    monkeypatch.setattr(clients_module, "FLOW_TIMEOUT_S", 0.05)
    ahead = Ahead(net=None, spec=SPEC, servers=None)
    ahead.clients = FakeClients(flows(1), args_for(POINT, 1))
    point = PointClients(flows(1), POINT, SPEC, PORTS[:1], FakeMonitor(data=False), ahead)
    with pytest.raises(iperf.IperfError, match=r"^no data reached the receivers within 0.05 s "
                                               r"\(iperf3 clients started ahead\)$"), point:
        point.start()


def test_a_client_that_ended_before_the_window_closed_fails_the_point(made):
    point = PointClients(flows(1), POINT, SPEC, PORTS[:1], FakeMonitor())
    with pytest.raises(iperf.IperfError, match=r"^iperf3 client in client0 exited with status 0, saying nothing, "
                                               r"before the window closed$"), point:
        point.start()
        point.clients.why_ended = "iperf3 client in client0 exited with status 0, saying nothing"
        point.stop()
    assert ("stop", clients_module.FLOW_TIMEOUT_S) not in point.clients.done


def test_reports_lost_when_stopped_are_counted_and_said_not_failed(made, caplog):
    three = dataclasses.replace(POINT, clients=3)
    point = PointClients(flows(3), three, SPEC, PORTS, FakeMonitor(3, connected=(3,)))
    with point:
        point.start()
        point.clients.results = point.clients.results[:1]
        point.clients.lost = ["iperf3 client in client1: was killed by SIGABRT: malloc(): corrupted top size",
                              "iperf3 client in client2: was killed by SIGSEGV, saying nothing"]
        point.stop()
    with caplog.at_level(logging.WARNING, logger=clients_module.__name__):
        point.wind_up()
    assert point.clients.done[-2:] == [("stop", clients_module.FLOW_TIMEOUT_S), "close"]
    assert point.record_fields()["iperf3_sender_mbps"] is None and point.record_fields()["iperf3_reports_lost"] == 2
    assert "2 of 3 iperf3 clients lost their own report" in caplog.text and "SIGABRT" in caplog.text


def test_the_clients_own_account_is_the_sum_of_their_reports(made):
    three = dataclasses.replace(POINT, clients=3)
    with PointClients(flows(3), three, SPEC, PORTS, FakeMonitor(3, connected=(3,))) as point:
        point.start()
        point.stop()
    point.wind_up()
    assert point.record_fields()["iperf3_sender_mbps"] == 9.0 and point.record_fields()["iperf3_reports_lost"] == 0


def test_a_server_still_in_the_interrupted_test_fails_the_point(monkeypatch, made):
    monkeypatch.setattr(clients_module, "FLOW_TIMEOUT_S", 0.05)
    with PointClients(flows(1), POINT, SPEC, PORTS[:1], FakeMonitor(busy=(True,))) as point:
        point.start()
        point.stop()
    with pytest.raises(iperf.IperfError, match=r"^an iperf3 server still held the interrupted test after 0.05 s$"):
        point.wind_up()
    # ... and one that lets go of it in time does not
    with PointClients(flows(1), POINT, SPEC, PORTS[:1], FakeMonitor(busy=(True, True, False))) as point:
        point.start()
        point.stop()
    point.wind_up()


class FakeNet:
    """What Ahead asks of a network: its flows' namespaces and the servers' addresses."""

    def __init__(self) -> None:
        self.spec = types.SimpleNamespace(flows=[("client0", "server")])

    def ns(self, node: str) -> str:
        return node

    def addr(self, node: str, ip_version: int) -> str:
        return "10.0.0.1"


class FakeServers:
    def __init__(self) -> None:
        self.ports = PORTS[:1]


@pytest.mark.parametrize("loaded", [True, False])
def test_the_next_points_clients_start_in_the_warm_up_and_are_stopped_if_not_held_as_the_window_opens(
        monkeypatch, loaded):
    started = []

    def start(flows, args):
        started.append(FakeClients(flows, args, held=loaded))
        return started[-1]

    monkeypatch.setattr(iperf, "Clients", start)
    following = dataclasses.replace(POINT, size_bytes=1460)
    ahead = Ahead(FakeNet(), SPEC, FakeServers())
    with PointClients(flows(1), POINT, SPEC, PORTS[:1], FakeMonitor(), ahead) as point:
        seen = point.start()
        point.start_next(following)
        assert len(started) == 2 and started[1].args == args_for(following, 1)  # this point's, the next's
        assert started[1].done == []  # started AHEAD_AFTER_S after data was seen, and held
        point.settle_next()
        point.stop()
    point.wind_up()
    assert point.seen_at == seen
    assert started[1].done == ([] if loaded else ["kill", "reap"]) and ahead.killed == (0 if loaded else 1)
    assert (ahead.take() is started[1]) is loaded


def test_no_next_clients_are_started_when_they_could_not_load_in_the_warm_up(made):
    ahead = Ahead(FakeNet(), SPEC, FakeServers())
    with PointClients(flows(1), POINT, SPEC, PORTS[:1], FakeMonitor(), ahead) as point:
        point.start()
        point.start_next(dataclasses.replace(POINT, clients=200))  # 200 loading take 20 s, not 0.3
        point.start_next(None)  # the rate's last point
    assert len(made) == 1 and ahead.take() is None

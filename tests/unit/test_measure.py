"""measure.point_record: a point's record from its window's readings, the verdict and its clients' account."""
from __future__ import annotations

import dataclasses
import platform
import types

import pytest

from experiments.engine.counters import FlowCounters, KernelQueue, QdiscCounters, Reading, Timed, parse_proc_stat
from experiments.engine.measure import Window, point_record
from experiments.engine.plan import SweepSpec, plan_points
from ipsec.overhead import expected_point_goodput_mbps
from testbed.backends import CpuSample
from testbed.record import FIELDS
from topologies.shaping import ShapingSpec

PROBE_FIELDS = {f for f in FIELDS if f.startswith(("probe_", "idle_rtt"))}

SPEC = SweepSpec()
POINT = dataclasses.replace(plan_points(SPEC)[0], rate_mbit=10.0, size_bytes=1460)
PROC_STAT = "cpu  100 0 50 800 10 0 40 0 0 0\ncpu0 100 0 50 800 10 0 40 0 0 0\n"
CLIENTS = {"iperf3_sender_mbps": 9.5, "iperf3_reports_lost": 0, "clients_ahead": True, "clients_sending_s": None}


def reading(t_s: float, shaper_bytes: int, received: int, cpu_s: float) -> Reading:
    ns = int(t_s * 1e9)
    shaper = QdiscCounters(shaper_bytes, shaper_bytes // 1500, 0, 0, 0, 0)
    return Reading(Timed(shaper, ns, ns + 1000), Timed(FlowCounters(received, 0, ns // 1000, 0, 0, 0), ns, ns + 1000),
                   CpuSample(int(cpu_s * 1e9), ns, (ns, ns + 1000)), parse_proc_stat(PROC_STAT),
                   KernelQueue(int(t_s), 7 * int(t_s)))


def window(goodput_mbps: float, utilization: float, shaper_lost: int = 0) -> Window:
    a = reading(1.0, 10_000_000, 5_000_000, 1.0)
    b = reading(3.0, 10_000_000 + int(utilization * 10e6 * 2 / 8), 5_000_000 + int(goodput_mbps * 1e6 * 2 / 8), 1.6)
    return Window(a, b, [3000] * 20, shaper_lost, 1_700_000_000.5)


def record_of(win: Window, point=POINT, clock="time"):
    net = types.SimpleNamespace(shaping=ShapingSpec(rate_mbit=10.0, burst_bytes=15_000), esp_slowdown=400,
                                negotiated_sas=lambda: [])
    monitor = types.SimpleNamespace(meter=types.SimpleNamespace(cpus=1.0, clock=clock))
    return point_record(net, point, SPEC, monitor, win, types.SimpleNamespace(record_fields=lambda: CLIENTS))


def test_a_points_record_holds_its_point_evidence_verdict_and_clients_account():
    expected = expected_point_goodput_mbps(POINT, SPEC.mtu, SPEC.pmtu)
    record = record_of(window(0.99 * expected * 0.999, 0.99))
    assert {f: getattr(record, f) for f in POINT.fields()} == POINT.fields()
    assert record.goodput_mbps == pytest.approx(0.99 * expected * 0.999, rel=1e-6) and record.window_s == 2.0
    assert record.bound == "link" and "0.990 of its rate" in record.bound_reason and not record.emulation_limited
    assert record.theoretical_goodput_mbps == expected and record.cpu_busy_pct == pytest.approx(30.0)
    assert {f: getattr(record, f) for f in CLIENTS} == CLIENTS
    assert (record.duration_s, record.warmup_s, record.window_start_unix) == (2.0, 0.3, 1_700_000_000.5)
    assert (record.keying, record.ike_sas, record.injected_instructions) == ("static", None, None)  # no arm
    # the kernel's receive backlog at the window's two ends, and what it dropped in between
    assert (record.receive_backlog_start, record.receive_backlog_end, record.receive_backlog_drops) == (1, 3, 14)
    assert record.kernel_release == platform.release() and record.time and not record.failed
    # an arm's record names the instructions its ESP path carried
    assert record_of(window(9.0, 0.99), dataclasses.replace(POINT, arm="b")).injected_instructions == 400
    # every field a sweep writes has a value here but those of failures, arms, IKE, the report, a run
    # measured beside another (the sweep's rounds set the backend, that and the phases' seconds) and the host's
    # totals this window's meter does not give (the speed probe's, the foreign load's), and the latency probe's, which
    # measure_point adds (with_probe)
    empty = {f for f in FIELDS if getattr(record, f) is None}
    assert empty == {"injected_instructions", "ike_sas", "loss_pct", "clients_sending_s", "error", "backend",
                     "speed_probe_ns", "speed_factor", "cpu_s_per_gb_measured", "cpu_us_per_packet_measured",
                     "concurrent_with", "phases_s", "foreign_cpu_pct", *PROBE_FIELDS, *COUNTED_FIELDS}


#: What only a counted guest's record has (its meter counts instructions).
COUNTED_FIELDS = ("clock", "instructions", "instructions_per_packet", "instructions_per_byte", "wall_s")


def test_a_counted_guests_record_has_instructions_where_a_timed_one_has_cpu_seconds():
    timed = record_of(window(9.0, 0.99))
    counted = record_of(window(9.0, 0.99), clock="instructions")
    # the meter's 0.6 s of CPU are 600 million instructions (one per ns of the guest's clock), never CPU seconds
    assert (counted.clock, counted.instructions) == ("instructions", 600_000_000)
    assert counted.cpu_s is None and counted.cpu_s_per_gb is None and counted.cpu_us_per_packet is None
    assert counted.instructions_per_packet == pytest.approx(600_000_000 / timed.link_packets)
    assert counted.instructions_per_byte == pytest.approx(600_000_000 / timed.bytes)
    assert counted.cpu_busy_pct == timed.cpu_busy_pct == pytest.approx(30.0)  # a share, on either clock
    assert timed.clock is None and timed.instructions is None and timed.cpu_s == pytest.approx(0.6)
    assert "clock" not in timed.to_json() and counted.to_json()["clock"] == "instructions"


def test_backlog_samples_that_found_no_shaper_make_the_point_an_anomaly():
    record = record_of(window(9.0, 0.99, shaper_lost=3))
    assert record.bound == "anomaly" and "missing in 3 of 23 samples" in record.bound_reason


def test_a_ledger_charges_each_lap_to_its_phase_in_the_windows_order(monkeypatch):
    from experiments.engine import phases

    clock = iter([10.0, 10.25, 12.75, 13.0, 13.5])
    monkeypatch.setattr(phases.time, "monotonic", lambda: next(clock))
    ledger = phases.Phases(since=9.5)  # the last record was built at 9.5
    ledger.lap(phases.WINDOW)       # 9.5 .. 10.0
    ledger.lap(phases.REFERENCE)    # .. 10.25
    ledger.lap(phases.WINDOW)       # .. 12.75, added to the first
    ledger.lap(phases.RECORD)       # .. 13.0
    ledger.lap("something new")     # .. 13.5: a phase of no known place goes last
    took = ledger.seconds()
    assert list(took) == [phases.REFERENCE, phases.WINDOW, phases.RECORD, "something new"]
    assert took == {phases.REFERENCE: 0.25, phases.WINDOW: 3.0, phases.RECORD: 0.25, "something new": 0.5}
    assert phases.outside(took) == pytest.approx(1.0)  # the window is measuring, the rest is not

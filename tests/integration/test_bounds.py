"""What bounded a point, found for real: each of the monitor's four classes produced on purpose.

- **link**: plain TCP on a 10 Mbit/s link: the shaper sends at its rate with a queue in front;
- **cpu**: 3DES with 100-byte segments offered 1000 Mbit/s: the kernel's CPU gives out long
  before the link is full;
- **other**: a 16 KiB socket buffer over 20 ms of netem delay on a 100 Mbit/s link: the window,
  not the link or the CPU, sets the rate (about 16 KiB per round trip);
- **anomaly**: the shaper's qdisc deleted and added again in the middle of the window: its
  counters restart from zero, which no real window can show.

Each point's record must carry the evidence behind its class, and the figures must agree with
``tc -s qdisc`` and the kernel's own counters where they can be checked independently.
"""
from __future__ import annotations

import subprocess
import threading
import time

import pytest

from experiments.engine import iperf
from experiments.engine.measure import flows_of, measure_with_retry, monitor_for, switch_ipsec
from experiments.engine.plan import Point, SweepSpec
from testbed import backends
from testbed.record import Record
from topologies import build_spec
from topologies.network import Network
from topologies.shaping import ShapingSpec, shaper_handle

WINDOW_S = 2.0


def measure(rate: float, profile: str, size: int, *, delay_ms: float | None = None,
            socket_buffer: int | None = None, during=None) -> dict:
    """One point measured as a sweep measures it (host to host, transport mode, IPv4);
    ``during(net)`` runs in a thread 1.2 s after the point starts (inside its window)."""
    spec = SweepSpec(topology="host_to_host", profiles=tuple(dict.fromkeys(("none", profile))), mode="transport",
                     rates_mbit=(rate,), sizes=(size,), repetitions=1, duration_s=WINDOW_S, warmup_s=0.5,
                     socket_buffer=socket_buffer)
    point = Point("host_to_host", profile, "transport", 4, "tcp", float(rate), size, "mss", 1, "", 0)
    meter = backends.current().cpu_meter()
    try:
        with Network(build_spec("host_to_host"), shaping=ShapingSpec(rate, delay_ms=delay_ms)) as net, \
                iperf.Servers(flows_of(net, 4)) as servers, monitor_for(net, servers, meter) as monitor:
            switch_ipsec(net, "none", profile, "transport", (4,))
            thread = None
            if during:
                thread = threading.Timer(1.2, during, args=(net,))
                thread.start()
            try:
                record = measure_with_retry(net, point, spec, servers, monitor)
            finally:
                if thread:
                    thread.join(10)
            tc = subprocess.run(["tc", "-n", net.ns("h1"), "-s", "qdisc", "show"],
                                capture_output=True, text=True).stdout
            return {**record.to_json(), "tc": tc}  # the record as results.jsonl has it, and the qdisc
    finally:
        meter.close()


def test_a_full_link_is_link_bound():
    r = measure(10, "none", 1460)
    assert not r["failed"], r.get("error")
    assert r["bound"] == "link", r["bound_reason"]
    assert r["link_utilization"] >= 0.97 and r["queue_busy"] >= 0.5
    # never an impossible value: at most what the link carries (tbf's bucket and timing aside)
    assert r["goodput_mbps"] <= r["theoretical_goodput_mbps"] * 1.01
    assert r["goodput_mbps"] >= r["theoretical_goodput_mbps"] * 0.95
    assert abs(r["window_s"] - WINDOW_S) < 0.1
    assert r["emulation_limited"] is False and 0 < r["cpu_busy_pct"] < 90
    assert r["cpu_s_per_gb"] > 0 and r["cpu_us_per_packet"] > 0
    assert r["link_packets"] > 0.97 * 10e6 * WINDOW_S / 8 / 1514


def test_a_saturated_cpu_is_cpu_bound():
    r = measure(1000, "3des-cbc-sha1", 100)
    assert not r["failed"], r.get("error")
    assert r["bound"] == "cpu", r["bound_reason"]
    assert r["emulation_limited"] is True
    assert r["link_utilization"] < 0.97
    assert max(r["cpu_busy_pct"], r["cpu_kernel_busy_pct"], r["cpu_busiest_pct"]) >= 90
    assert r["goodput_mbps"] < r["theoretical_goodput_mbps"]


def test_a_small_window_over_a_long_path_is_other():
    r = measure(100, "none", 1460, delay_ms=20, socket_buffer=16384)
    assert not r["failed"], r.get("error")
    assert r["bound"] == "other", r["bound_reason"]
    # about one window per 20 ms round trip: well below the link, and the CPU idles
    assert r["goodput_mbps"] < 20 and r["link_utilization"] < 0.3 and r["cpu_busy_pct"] < 50
    assert r["emulation_limited"] is False


def test_a_shaper_replaced_mid_window_is_an_anomaly_and_left_out():
    def replace_shaper(net):
        node, peer = net.spec.shaped_sender(net.spec.flows[0][0])
        dev, handle = net.ifname(node, peer), f"{shaper_handle(net.shaping) >> 16:x}:"
        batch = (f"qdisc del dev {dev} root\n"
                 f"qdisc add dev {dev} root handle {handle} tbf rate 10mbit burst 15000 latency 50ms\n")
        subprocess.run(["tc", "-n", net.ns(node), "-batch", "-"], input=batch, text=True, check=True)

    started = time.monotonic()
    r = measure(10, "none", 1460, during=replace_shaper)
    assert time.monotonic() - started > 1.2, "the replacement came after the point"
    assert not r["failed"], r.get("error")
    assert r["bound"] == "anomaly", (r["bound_reason"], r["tc"])
    # counters restarted from zero: behind the window's start (backwards), or ahead of it but then
    # short of what the receivers got; or a backlog sample found no shaper at all
    assert any(w in r["bound_reason"] for w in ("went backwards", "missing", "above what the shaper let through"))
    # the report leaves it out of the point's mean
    from analysis.stats import aggregate

    link = measure(10, "none", 1460)
    aggs = aggregate([Record.from_json({**stored, "repetition": rep})
                      for rep, stored in enumerate({k: v for k, v in d.items() if k != "tc"} for d in (r, link))])
    assert len(aggs) == 1 and aggs[0].goodput.n == 1 and aggs[0].n_anomaly == 1
    assert aggs[0].goodput.mean == pytest.approx(link["goodput_mbps"])

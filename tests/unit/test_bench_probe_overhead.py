"""bench probe_overhead: its command line, its sweeps in ABBA order, and its verdicts on synthetic runs."""
from __future__ import annotations

import pytest

from benchmarks import probe_overhead
from experiments.engine.plan import probe_share
from testbed.record import Bound, Record


def test_its_command_line_gives_the_old_parsers_options_and_refuses_a_bad_value_in_one_line(bench_cli):
    assert bench_cli.options("probe_overhead") == \
        probe_overhead.Options("vpn_gateway", "aes-gcm-256", 10.0, (100, 1460), 4, "ping")
    assert bench_cli.options("probe_overhead", "--topology", "host_to_host", "--profile", "chacha20-poly1305",
                             "--rate", "100", "--sizes", "250,1000", "--pairs", "6", "--probe-tool", "irtt") == \
        probe_overhead.Options("host_to_host", "chacha20-poly1305", 100.0, (250, 1000), 6, "irtt")
    for words in (["--pairs", "1"], ["--topology", "mesh"], ["--sizes", "50"], ["--probe-tool", "hping"],
                  ["--profile", "aes-gcm-7"]):
        bench_cli.refuses("probe_overhead", *words)


def test_its_runs_alternate_abba_the_probe_on_in_one_of_each_pair():
    assert probe_overhead.order(3) == [True, False, False, True, True, False]
    options = probe_overhead.Options(probe_tool="irtt", sizes=(1460,))
    on, off = options.sweep(True), options.sweep(False)
    assert on.latency_probe and on.probe_tool == "irtt" and not off.latency_probe
    assert (on.repetitions, on.most_repetitions, on.sizes, on.rates_mbit) == (1, 1, (1460,), (10.0,))


def record(profile: str, goodput: float, bound: Bound) -> Record:
    return Record(topology="vpn_gateway", profile=profile, mode="tunnel", ip_version=4, transport="tcp",
                  rate_mbit=10.0, size_bytes=1460, size_mode="mss", clients=1, repetition=0, goodput_mbps=goodput,
                  bound=bound)


def test_a_link_bound_point_is_judged_against_its_own_interval_and_the_probes_bytes():
    runs = [(True, [record("none", 9.40, Bound.LINK), record("aes-gcm-256", 9.00, Bound.CPU)]),
            (False, [record("none", 9.41, Bound.LINK), record("aes-gcm-256", 9.10, Bound.LINK)]),
            (False, [record("none", 9.43, Bound.LINK), record("aes-gcm-256", 9.20, Bound.LINK)]),
            (True, [record("none", 9.42, Bound.LINK), record("aes-gcm-256", 9.00, Bound.LINK)])]
    plain, ipsec = sorted(probe_overhead.points_of(runs), key=lambda p: p.profile != "none")
    assert (plain.with_probe, plain.without, plain.link_bound) == ((9.40, 9.42), (9.41, 9.43), True)
    assert not ipsec.link_bound  # one window was CPU-bound
    assert plain.difference[0] == pytest.approx(-0.01) and plain.own > 0.01
    assert plain.cost(10.0, 10.0) == pytest.approx(9.42 * probe_share(10.0, 10.0))
    result = probe_overhead.Result(4, 321.0, "/tmp/x", (plain, ipsec))
    text = probe_overhead.page(probe_overhead.Options(), result)
    assert text.startswith("4 sweeps in 321 s; vpn_gateway, 10 Mbit/s, one repetition per sweep, the probe by ping")
    assert "within the point's own interval" in text and "its bytes:" in text
    assert "not every window link-bound" in text
    assert "beyond the probe's own bytes: 1 of 1 link-bound points within their own intervals" in text
    assert text.endswith("run directories: /tmp/x") and probe_overhead.BENCHMARK.status(result) == 0

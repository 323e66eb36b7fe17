"""bench many_clients: its command line, its sweep, and its table from synthetic records."""
from __future__ import annotations

import os

from benchmarks import many_clients
from testbed.record import Bound, Record


def test_its_command_line_gives_the_old_parsers_options_and_refuses_a_bad_value_in_one_line(bench_cli, tmp_path):
    options = bench_cli.options("many_clients")
    assert options.clients == (1, 10, 50, 100, 200) and options.out == os.path.join(many_clients.REPO, "runs",
                                                                                    "many-clients")
    assert bench_cli.options("many_clients", "--clients", "1,10,50", "--out", str(tmp_path / "many")) == \
        many_clients.Options((1, 10, 50), str(tmp_path / "many"))
    for words in (["--clients", "0,5"], ["--clients", "x"], ["--clients", str(many_clients.MAX_CLIENTS + 1)]):
        bench_cli.refuses("many_clients", *words)


def test_each_sweep_is_road_warriors_plain_and_aes_gcm_256_at_two_rates_twice():
    spec = many_clients.sweep(50)
    assert (spec.topology, spec.clients, spec.profiles) == ("road_warrior", 50, ("none", "aes-gcm-256"))
    assert (spec.rates_mbit, spec.sizes, spec.repetitions, spec.most_repetitions) == ((10.0, 100.0), (1460,), 2, 2)


def record(profile: str, rate: float, repetition: int, **figures) -> Record:
    return Record(topology="road_warrior", profile=profile, mode="tunnel", ip_version=4, transport="tcp",
                  rate_mbit=rate, size_bytes=1460, size_mode="mss", clients=10, repetition=repetition, **figures)


def test_a_point_with_a_repetition_that_did_not_measure_is_shown_and_fails_the_run():
    records = [record(p, rate, i, goodput_mbps=rate * 0.9 + i, bound=Bound.LINK, clients_sending_s=0.5 + i)
               for p in many_clients.PROFILES for rate in many_clients.RATES for i in range(2)]
    records[-1] = record("aes-gcm-256", 100.0, 1, failed="iperf3 exited 1")
    rows = many_clients.rows_of(records)
    assert [(r.profile, r.rate_mbit, r.measured) for r in rows] == [
        ("none", 10.0, 2), ("none", 100.0, 2), ("aes-gcm-256", 10.0, 2), ("aes-gcm-256", 100.0, 1)]
    assert (rows[0].bounds, rows[0].connect_s, rows[0].goodput_mbps) == ("link", 1.5, 9.5)
    result = many_clients.Result("/runs/x", (many_clients.Sweep(10, 0, 61.4, "/runs/x/clients10", rows),))
    lines = many_clients.page(many_clients.Options(), result).splitlines()
    assert lines[0].split() == ["clients", "profile", "Mbit/s", "measured", "bound", "connect", "s", "goodput",
                                "sweep"]
    assert lines[1].split() == ["10", "none", "10", "2", "of", "2", "link", "1.50", "9.50", "exit", "0,", "61", "s"]
    assert lines[4].split() == ["10", "aes-gcm-256", "100", "1", "of", "2", "link", "0.50", "90.00"]
    assert lines[-1].endswith("logs in /runs/x")
    assert not result.everything and many_clients.BENCHMARK.status(result) == 1
    whole = many_clients.Result("/runs/x", (many_clients.Sweep(10, 0, 61.4, "", many_clients.rows_of(
        [record(p, rate, i, goodput_mbps=1.0) for p in many_clients.PROFILES for rate in many_clients.RATES
         for i in range(2)])),))
    assert many_clients.BENCHMARK.status(whole) == 0 and "–" in many_clients.page(many_clients.Options(), whole)

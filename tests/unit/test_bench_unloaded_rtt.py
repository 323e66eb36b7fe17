"""bench unloaded_rtt on captured output: ping's lines, the prediction's terms, the verdicts, its refusals."""
from __future__ import annotations

import math
import os
import re

import pytest

from benchmarks import unloaded_rtt as u
from cli import bench
from experiments.job import KernelChoice

# iputils ping 20240117's lines (trimmed), as it prints them in the client's namespace
PING = """PING 10.0.2.2 (10.0.2.2) 56(84) bytes of data.
64 bytes from 10.0.2.2: icmp_seq=1 ttl=62 time=0.412 ms
64 bytes from 10.0.2.2: icmp_seq=2 ttl=62 time=0.398 ms
64 bytes from 10.0.2.2: icmp_seq=3 ttl=62 time=1.05 ms

--- 10.0.2.2 ping statistics ---
3 packets transmitted, 3 received, 0% packet loss, time 41ms
rtt min/avg/max/mdev = 0.398/0.620/1.050/0.304 ms
"""


def test_the_floods_echoes_answered_are_its_statistics():
    assert u.ping_received(PING) == 3
    flood = ("PING 10.0.2.2 (10.0.2.2) 56(84) bytes of data.\n\n--- 10.0.2.2 ping statistics ---\n"
             "5000 packets transmitted, 4998 received, 0.04% packet loss, time 812ms\n")
    assert u.ping_received(flood) == 4998 and u.ping_received("ping: connect: Network is unreachable") == 0


def test_a_nic_would_serialise_the_tunnels_bytes_both_ways():
    plain, tunnel = u.probe_packet_bytes("aes-gcm-256")
    assert plain == 14 + 20 + 8 + 60
    assert tunnel - plain == 56  # outer IPv4 20, ESP header 8, IV 8, padding 2 + trailer 2, ICV 16
    assert u.nic_serialisation_ms("aes-gcm-256", 1.0) == pytest.approx(2 * 56 * 8 / 1e6 * 1000)
    assert u.nic_serialisation_ms("aes-gcm-256", 0) == 0.0
    assert u.probe_packet_bytes("none") == (plain, plain)


def _run(rate, profile, rnd, irtt_ms, cpu_us, ping_ms=None):
    return u.Run(rate, profile, rnd, [irtt_ms] * 10, [ping_ms if ping_ms is not None else irtt_ms / 2] * 10, cpu_us)


def test_the_tunnels_added_round_trip_is_taken_round_by_round_against_the_unshaped_paths_cpu_term():
    # the machine twice as slow in round 1: the differences stay, the means would not
    runs = [_run(0, "none", 0, 0.40, 300), _run(0, "aes-gcm-256", 0, 0.50, 400),
            _run(0, "aes-gcm-256", 1, 1.00, 800), _run(0, "none", 1, 0.80, 600),
            _run(0, "none", 2, 0.41, 300), _run(0, "aes-gcm-256", 2, 0.51, 401),
            _run(10, "none", 0, 0.40, None), _run(10, "aes-gcm-256", 0, 0.80, None),  # 0.27 ms beyond the term
            _run(10, "none", 1, 0.40, None), _run(10, "aes-gcm-256", 1, 0.81, None)]
    found = u.verdicts(runs, 0.05)
    assert [v.statistic for v in found] == ["mean", "mean", "minimum", "minimum"]
    unshaped, shaped = found[:2]
    for mean, fast in zip(found[:2], found[2:], strict=True):  # each run one value: its mean is its minimum
        assert (fast.irtt.mean, fast.ping.mean) == (pytest.approx(mean.irtt.mean), pytest.approx(mean.ping.mean))
    assert (unshaped.rate_mbit, unshaped.profile, unshaped.irtt.n) == (0, "aes-gcm-256", 3)
    assert unshaped.irtt.mean == pytest.approx((0.1 + 0.2 + 0.1) / 3)
    term = (0.1 + 0.2 + 0.101) / 3
    assert unshaped.cpu_ms.mean == pytest.approx(term) and shaped.cpu_ms == unshaped.cpu_ms  # the path's work
    assert unshaped.residual.mean == pytest.approx(unshaped.irtt.mean - term)
    assert unshaped.residual.ci95 == pytest.approx(math.hypot(unshaped.irtt.ci95, unshaped.cpu_ms.ci95))
    assert not unshaped.within(unshaped.residual)  # the term's interval alone is 0.14 ms wide
    assert unshaped.serialisation_ms == 0.0 and unshaped.nic_ms == 0.0
    assert unshaped.ping.mean == pytest.approx(unshaped.irtt.mean / 2)
    assert unshaped.ping_residual.mean == pytest.approx(unshaped.ping.mean - term)
    assert shaped.residual.mean == pytest.approx(0.405 - term) and not shaped.within(shaped.residual)
    assert shaped.nic_ms == pytest.approx(u.nic_serialisation_ms("aes-gcm-256", 10))
    tight = u.Verdict(0, "x", shaped.irtt, None, shaped.cpu_ms, u.Added(0.01, 0.03, 4), None, 0, 0, 0.05)
    assert tight.within(tight.residual) and not tight.within(None)
    assert not tight.within(u.Added(0.03, 0.03, 4)) and not tight.within(u.Added(0.0, None, 1))
    # without the unshaped path's flood there is no CPU term, so no verdict
    assert u.verdicts(runs[6:], 0.05) == [] and u.verdicts(runs[:2], 0.05) == []


def test_the_minimum_is_the_runs_lone_packet_at_full_speed():
    assert u.summed([], "minimum") is None and u.summed([], "mean") is None
    assert u.summed([0.3, 0.1, 0.2], "minimum") == 0.1 and u.summed(list(range(1, 201)), "mean") == 100.5

    # the emulator slow on most packets (a factor: the tunnel's 0.1 ms of work taking 0.16), fast on a tenth
    def bimodal(rate, profile, rnd, fast, slow, cpu_us):
        ping = [fast] * 20 + [slow] * 180
        return u.Run(rate, profile, rnd, ping, ping, cpu_us)

    runs = [bimodal(0, "none", 0, 0.020, 0.105, 60), bimodal(0, "aes-gcm-256", 0, 0.045, 0.205, 85),
            bimodal(0, "aes-gcm-256", 1, 0.046, 0.210, 86), bimodal(0, "none", 1, 0.021, 0.110, 61)]
    mean, fast = u.verdicts(runs, 0.05)
    assert mean.ping.mean == pytest.approx(0.9 * 0.1 + 0.1 * 0.025) and not mean.within(mean.ping_residual)
    assert (fast.statistic, fast.ping.mean) == ("minimum", pytest.approx(0.025))
    assert fast.ping_residual.mean == pytest.approx(0.0) and fast.within(fast.ping_residual)


def test_the_flood_is_the_sweeps_reference_least_judged_for_ping_alone():
    # sparse echoes slow (the guest asleep between them), the flood of 50 at full speed: the sweep's figure
    def run(profile, rnd, sparse, flood, cpu_us):
        return u.Run(0, profile, rnd, [sparse * 3] * 10, [sparse] * 10, cpu_us, flood)

    runs = [run("none", 0, 0.05, 0.018, 48), run("aes-gcm-256", 0, 0.12, 0.040, 66),
            run("aes-gcm-256", 1, 0.15, 0.041, 67), run("none", 1, 0.06, 0.019, 48),
            run("none", 2, 0.05, None, 48), run("aes-gcm-256", 2, 0.12, 0.039, 66)]  # round 2: no flood answered
    by = {v.statistic: v for v in u.verdicts(runs, 0.05)}
    assert set(by) == {"mean", "minimum", "flood"}
    flood = by["flood"]
    assert flood.irtt is None and flood.residual is None  # irtt has no flood
    assert (flood.ping.mean, flood.ping.n) == (pytest.approx(0.022), 2)  # rounds 0 and 1: 0.022, 0.022
    term = (0.018 + 0.019 + 0.018) / 3  # the CPU term, from every round's 20000-echo flood
    assert flood.ping_residual.mean == pytest.approx(0.022 - term) and flood.within(flood.ping_residual)
    assert not by["minimum"].within(by["minimum"].ping_residual)  # the sparse echoes' least: 0.08 ms added
    assert u.figure_of(runs[0], "irtt", "flood") is None and u.figure_of(runs[0], "ping", "minimum") == 0.05


def options(*argv: str) -> u.Options:
    """The options ``ipsec-testbed bench unloaded_rtt ARGV...`` runs with."""
    return bench.options_from(u.BENCHMARK, bench.build_parser(u.BENCHMARK).parse_args(argv))


def test_the_command_line_gives_the_options_the_old_parser_gave():
    got = options("--profiles", "wireguard,aes-gcm-256", "--rates", "0,10", "--topology", "host_to_host",
                  "--seconds", "2", "--per-s", "20", "--rounds", "6", "--tolerance", "0.1", "--out", "/tmp/run",
                  "--uml-mem", "1G")
    assert got == u.Options(("wireguard", "aes-gcm-256"), (0.0, 10.0), "host_to_host", 2.0, 20.0, 6, 0.1, "/tmp/run",
                            KernelChoice(uml_mem="1G", keep_awake=True))
    assert got.profiles == ("none", "wireguard", "aes-gcm-256")  # plain first, beside every tunnel
    default = options()
    assert (default.profiles, default.rates, default.rounds) == (("none", "aes-gcm-256"), u.RATES, 4)
    assert default.out.endswith("-bench-unloaded_rtt") and os.path.isabs(default.out)


def test_the_guests_cpu_is_kept_awake_for_this_benchmark_unless_asked_not_to():
    assert options().kernel.keep_awake is True
    assert options("--no-uml-keep-awake").kernel.keep_awake is False


def test_bad_options_are_refused_in_one_line(capsys):
    for argv, says in ((["--rates", "-1"], "--rates: -1; 0 (unshaped) or Mbit/s"),
                       (["--profiles", "aes-foo"], "--profiles:"), (["--rounds", "1"], "--rounds must be 2"),
                       (["--per-s", "500"], "--per-s must be 1..100"), (["--seconds", "0.5"], "--seconds must be"),
                       (["--rates", "10,1"], "--rates must include 0")):
        with pytest.raises(ValueError, match="^" + re.escape(says)):
            options(*argv)
    with pytest.raises(SystemExit) as refused:
        bench.main(["unloaded_rtt", "--rounds", "1"])
    assert refused.value.code == 2
    assert capsys.readouterr().err == ("ipsec-testbed bench unloaded_rtt: error: --rounds must be 2 or more (a "
                                       "difference's interval needs two), not 1 (see ipsec-testbed bench "
                                       "unloaded_rtt --help)\n")


def test_the_page_is_every_runs_row_then_the_verdicts_and_the_report():
    runs = [_run(0, "none", 0, 0.40, 300), _run(0, "aes-gcm-256", 0, 0.45, 340),
            _run(0, "aes-gcm-256", 1, 0.46, 341), _run(0, "none", 1, 0.41, 301)]
    found = u.verdicts(runs, 0.05)
    args = u.Options(seconds=1, per_s=10, rates=(0,))
    lines = u.page(args, u.Result("UML (6.1.0)", "", tuple(runs), tuple(found), 12.4, "/r/report.html")).splitlines()
    assert lines[0] == ("UML (6.1.0); vpn_gateway; irtt then ping, 10 a second for 1 s each, 4 ABBA rounds per "
                        "path; ")
    assert lines[1] == u.ROW_HEADER and lines[2:6] == [u.row(r, args) for r in runs]
    assert lines[2].split() == ["unshaped", "0", "none", "0.400", "0.400", "0.200", "0.200", "–", "300.0", "10/10"]
    assert lines[6] == "4 runs in 12 s"
    assert lines[7:-1] == u.verdict_lines(found, 0.05) and lines[-1] == "report: /r/report.html"
    assert lines[-2] == "ping, minimum of each run: 1 of 1 paths and profiles within ±0.05 ms of the prediction"

"""bench rrul on captured output: iperf3's bidirectional summary, the words of its summary, its refusals."""
from __future__ import annotations

import gzip
import json
import re

import pytest

from benchmarks import rrul
from cli import bench
from experiments.job import KernelChoice
from testbed import kernelsource, umlkernel
from topologies.shaping import LEAF_HANDLE, ShapingSpec, plan_shaping


def test_the_goodput_each_way_is_iperf3s_bidirectional_end_summary():
    # the keys iperf3 3.12 writes with -J --bidir (trimmed)
    report = {"end": {"sum_sent": {"bits_per_second": 4.9e6}, "sum_received": {"bits_per_second": 4.71e6},
                      "sum_sent_bidir_reverse": {"bits_per_second": 4.8e6},
                      "sum_received_bidir_reverse": {"bits_per_second": 4.62e6}}}
    assert rrul.goodput_each_way(report) == (pytest.approx(4.71), pytest.approx(4.62))
    assert rrul.goodput_each_way({"error": "unable to connect"}) == (None, None)


def test_the_summary_says_what_ipsec_adds_and_what_fq_codel_takes_away():
    def run(profile, queue, ms):
        return rrul.Run(profile, queue, rrul.Series([0.5], [(i * 0.05, ms) for i in range(20)]), 20, 4.7, 4.6)

    runs = [run("none", "fifo", 50.0), run("aes-gcm-256", "fifo", 52.5), run("none", "fq_codel", 6.0),
            run("aes-gcm-256", "fq_codel", 7.0)]
    assert rrul.summary(runs) == [
        "aes-gcm-256 adds +2.5 ms to plain's 50.0 ms under load (fifo)",
        "aes-gcm-256 adds +1.0 ms to plain's 6.0 ms under load (fq_codel)",
        "fq_codel takes 44.0 ms of the 50.0 ms median away (none: 6.0 ms)",
        "fq_codel takes 45.5 ms of the 52.5 ms median away (aes-gcm-256: 7.0 ms)"]
    assert runs[0].lost == 0 and rrul.Run("none", "fifo", rrul.Series([], [(0.0, 1.0)]), 3, None, None).lost == 2
    lines = rrul.page(rrul.Options(), rrul.Result("UML (6.1.0)", tuple(runs), 95.0, "/r/report.html")).splitlines()
    assert lines[0] == "UML (6.1.0); vpn_gateway, 10 Mbit/s, 4 TCP flows each way for 20 s, ping every 50 ms"
    assert lines[1] == rrul.HEADER and lines[2].split() == ["none", "fifo", "0.50", "50.0", "50.0", "50.0", "0",
                                                             "4.70", "4.60"]
    assert lines[6:] == ["4 runs in 95 s", *rrul.summary(runs), "report: /r/report.html"]


def test_fq_codel_is_the_shapers_queue_when_asked():
    ops = plan_shaping(ShapingSpec(rate_mbit=10.0, queue="fq_codel"))
    assert [(o.kind, o.parent) for o in ops] == [("tbf", 0xFFFFFFFF), ("fq_codel", 0x10001)]
    assert ops[1].handle == LEAF_HANDLE
    htb = plan_shaping(ShapingSpec(rate_mbit=10.0, qdisc="htb", queue="fq_codel"))
    assert [o.kind for o in htb] == ["htb", "htb", "fq_codel"]
    assert [o.kind for o in plan_shaping(ShapingSpec(rate_mbit=10.0))] == ["tbf"]  # the FIFO: tbf's own
    with pytest.raises(ValueError, match="queue must be one of fifo, fq_codel, not 'red'"):
        ShapingSpec(rate_mbit=10.0, queue="red")


def options(*argv: str) -> rrul.Options:
    """The options ``ipsec-testbed bench rrul ARGV...`` runs with."""
    return bench.options_from(rrul.BENCHMARK, bench.build_parser(rrul.BENCHMARK).parse_args(argv))


def test_bad_options_are_refused_in_one_line():
    for argv, says in ((["--queues", "red"], "--queues: red; the queues are fifo, fq_codel"),
                       (["--profiles", "aes-foo"], "--profiles:"), (["--rate", "0"], "--rate must be Mbit/s"),
                       (["--seconds", "2"], "--seconds must be 5..600")):
        with pytest.raises(ValueError, match="^" + re.escape(says)):
            options(*argv)


def test_the_command_line_gives_the_options_the_old_parser_gave(monkeypatch, capsys):
    monkeypatch.delenv(umlkernel.KERNEL_ENV, raising=False)
    got = options("--profiles", "wireguard,aes-gcm-256", "--queues", "fifo", "--topology", "host_to_host", "--rate",
                  "100", "--seconds", "30", "--probe-tool", "irtt", "--out", "/tmp/run", "--kernel", "uml")
    assert got == rrul.Options(("wireguard", "aes-gcm-256"), ("fifo",), "host_to_host", 100.0, 30.0, "irtt", False,
                               "/tmp/run", KernelChoice(kernel="uml"))
    assert got.profiles == ("none", "wireguard", "aes-gcm-256")  # plain first, beside every tunnel
    default = options()
    assert (default.queues, default.rate, default.seconds, default.probe_tool, default.flent) == (
        ("fifo", "fq_codel"), 10.0, 20.0, "ping", False)
    # fq_codel: the project's kernel, which has it built in, unless a kernel is named
    assert default.kernel.uml_kernel == kernelsource.RECIPE and got.kernel.uml_kernel is None
    assert options("--uml-kernel", "debian").kernel.uml_kernel == "debian"
    monkeypatch.setenv(umlkernel.KERNEL_ENV, "debian")
    assert options().kernel.uml_kernel is None
    with pytest.raises(SystemExit) as refused:
        bench.main(["rrul", "--seconds", "2"])
    assert refused.value.code == 2
    assert capsys.readouterr().err == ("ipsec-testbed bench rrul: error: --seconds must be 5..600, not 2 (see "
                                       "ipsec-testbed bench rrul --help)\n")


def test_flents_round_trips_are_split_at_the_load_and_compared_with_the_probes(tmp_path):
    # flent's data file keeps each sample's unix time and value in raw_values, by series name
    data = {"raw_values": {"Ping (ms) ICMP": [{"t": 100.0 + i * 0.05, "val": 0.2 if i < 40 else 50.0}
                                             for i in range(200)],
                           "Ping (ms) UDP": [{"t": 100.0, "val": 0.6}, {"t": 103.0, "val": 50.4},
                                             {"t": 104.0, "val": None}, {"t": 109.5, "val": 51.0}]}}
    (tmp_path / "ping-2026-11-27T080000.000000.flent.gz").write_bytes(gzip.compress(json.dumps(data).encode()))
    series = rrul.flent_series(rrul.read_flent(str(tmp_path)), 102.0, 109.0)
    assert len(series["icmp"].idle_ms) == 40 and set(series["icmp"].idle_ms) == {0.2}
    assert series["icmp"].loaded[0] == (0.0, 50.0) and len(series["icmp"].loaded) == 141
    assert series["udp"].idle_ms == (0.6,) and series["udp"].loaded == ((1.0, 50.4),)  # lost and late ones out
    run = rrul.Run("none", "fifo", rrul.Series([0.5], [(0.0, 52.0), (0.05, 52.0)]), 2, 9.2, 9.2, series)
    assert rrul.flent_agreement([run]) == [
        "flent icmp (none, fifo): median 50.00 ms under load against the probe's 52.00 (+4.0 %), idle 0.200 "
        "against 0.500 ms (+0.300 ms)",
        "flent udp (none, fifo): median 50.40 ms under load against the probe's 52.00 (+3.2 %), idle 0.600 "
        "against 0.500 ms (-0.100 ms)"]
    assert rrul.flent_agreement([rrul.Run("none", "fifo", rrul.Series([], []), 0, None, None, series)]) == [
        "flent icmp (none, fifo): no round trips to compare", "flent udp (none, fifo): no round trips to compare"]
    (tmp_path / "second.flent.gz").write_bytes(b"")
    with pytest.raises(RuntimeError, match="2 data files"):
        rrul.read_flent(str(tmp_path))

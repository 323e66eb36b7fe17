"""The control-plane and scale benchmarks as objects: their command lines make the options the old parsers
gave (a bad value refused in one line, exit 2), and their pages say what the old code printed."""
from __future__ import annotations

import pytest

from benchmarks import ike_rekey, ike_setup, topology_build, xfrm_install_rate, xfrm_scale
from cli import bench
from experiments.benchmark import load
from experiments.job import KernelChoice


def parse(name: str, *words: str):
    """The options ``ipsec-testbed bench NAME WORDS`` makes (nothing runs)."""
    b = load(name)
    return bench.options_from(b, bench.build_parser(b).parse_args(list(words)))


def refusal(name: str, capsys: pytest.CaptureFixture[str], *words: str) -> str:
    """The one line ``ipsec-testbed bench NAME WORDS`` refuses its options with, exit status 2."""
    with pytest.raises(SystemExit) as e:
        bench.main([name, *words])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_xfrm_install_rate_takes_its_old_flags(capsys):
    assert parse("xfrm_install_rate") == xfrm_install_rate.Options()
    assert xfrm_install_rate.Options().sample == 100
    options = parse("xfrm_install_rate", "-v", "--pairs", "50", "--ip-sample", "all", "--no-batch",
                    "--algorithm", "aes-cbc-hmac-sha1", "--kernel", "uml")
    assert options == xfrm_install_rate.Options(pairs=50, algorithm="aes-cbc-hmac-sha1", ip_sample="all",
                                                no_batch=True, verbose=True, kernel=KernelChoice(kernel="uml"))
    assert options.sample is None and parse("xfrm_install_rate", "--verbose").verbose
    assert "--ip-sample must be a number of pairs (at least 1) or 'all', not '0'" in \
        refusal("xfrm_install_rate", capsys, "--ip-sample", "0")
    assert "--pairs must be in 1..65534, not 0" in refusal("xfrm_install_rate", capsys, "--pairs", "0")


def test_xfrm_install_rate_hands_its_verbose_to_the_guest_and_needs_esp_for_either_transform():
    b = xfrm_install_rate.BENCHMARK
    assert b.job(xfrm_install_rate.Options(verbose=True), ()).verbose == 1
    assert b.job(xfrm_install_rate.Options(), ()).verbose == 0
    assert "esp" in b.needs(xfrm_install_rate.Options(algorithm="aes-cbc-hmac-sha1")).capabilities


def test_xfrm_install_rate_page_gives_both_verdicts_and_the_sample():
    rows = (xfrm_install_rate.Row("netlink", "one call", 1000, 1000, 0.1, 0.1),
            xfrm_install_rate.Row("ip, 1 process/op", "a process each", 100, 1000, 10.0, 10.0),
            xfrm_install_rate.Row("ip -batch", "one process", 1000, 1000, 2.0, 2.0))
    text = xfrm_install_rate.page(xfrm_install_rate.Options(), xfrm_install_rate.Result(rows, "host"))
    assert "SAMPLED: `ip xfrm` one process per operation was timed on the first 100 of 1000 pairs" in text
    assert "about 200 s for 8,000 operations" in text
    assert text.splitlines()[-2:] == [
        "netlink layer vs one `ip xfrm` process per operation: 1000.0x faster (40,000 vs 40.0 ops/s); "
        "target >= 20x: MET",
        "netlink layer vs ip -batch: 20.0x faster (40,000 vs 2,000 ops/s); target >= 2x: MET"]
    assert xfrm_install_rate.Result(error="`ip` not found").status == 1
    assert xfrm_install_rate.Result(interrupted=True).status == 130
    assert xfrm_install_rate.BENCHMARK.status(xfrm_install_rate.Result(rows, "host")) == 0


def test_xfrm_scale_takes_its_old_flags(tmp_path, capsys):
    options = parse("xfrm_scale", "--tunnels", "1,100", "--prefix", "24", "--duration", "2", "--pings", "5",
                    "--profile", "aes-cbc-256-sha256", "--out", str(tmp_path))
    assert options == xfrm_scale.Options(tunnels=(1, 100), prefix=24, duration=2.0, pings=5,
                                         profile="aes-cbc-256-sha256", out=str(tmp_path))
    assert parse("xfrm_scale").out.endswith("-bench-xfrm_scale")
    assert "--duration must be above 1 s" in refusal("xfrm_scale", capsys, "--duration", "1")
    assert "invalid choice: 33" in refusal("xfrm_scale", capsys, "--prefix", "33")


def test_ike_setup_takes_its_old_flags(capsys):
    options = parse("ike_setup", "--clients", "2,5", "--profile", "aes-cbc-256-sha256", "--first-packets", "3",
                    "--uml-mem", "1G")
    assert (options.clients, options.profile, options.first_packets) == ((2, 5), "aes-cbc-256-sha256", 3)
    assert options.kernel == KernelChoice(uml_mem="1G") and options.out.endswith("-bench-ike_setup")
    assert parse("ike_setup").clients == (1, 10, 100)
    assert "--clients must be in 1..200, not [0]" in refusal("ike_setup", capsys, "--clients", "0,2")
    assert "--profile: unknown profile part 'aes-foo'" in refusal("ike_setup", capsys, "--profile", "aes-foo")


def test_ike_setup_page_ends_where_a_tunnel_did_not_come_up():
    row = ike_setup.Row(2, 0.5, (0.1, 0.3), (0.2,), (0.4, 0.6), 0.25, 8, (0.1, 0.1), 0.1)
    result = ike_setup.Result("host (6.1, 2 CPU(s))", (row,), (10, "no CHILD_SA"), "/r/report.html")
    lines = ike_setup.page(ike_setup.Options(), result).splitlines()
    assert lines[0].startswith("host (6.1, 2 CPU(s)); road_warrior, aes-gcm-256 tunnel, IKEv2 ")
    assert lines[2].split() == ["2", "0.50", "0.200", "0.300", "5.0", "0.200", "0.500", "0.600", "0.25", "8.0",
                                "8", "0.100", "10.0", "20.0"]
    assert lines[3:] == ["     10 failed: no CHILD_SA", "report: /r/report.html"]
    assert ike_setup.BENCHMARK.status(result) == 1
    assert ike_setup.BENCHMARK.status(ike_setup.Result("host", (row,))) == 0


def test_ike_rekey_takes_its_old_flags(capsys):
    options = parse("ike_rekey", "--rate", "20", "--seconds", "8", "--at", "4", "--kernel", "host")
    assert (options.rate, options.seconds, options.at) == (20.0, 8.0, 4.0)
    assert options.kernel == KernelChoice(kernel="host") and options.out.endswith("-bench-ike_rekey")
    assert "--at must leave half a second before and a second after it in the 6 s transfer, not 5.5" in \
        refusal("ike_rekey", capsys, "--at", "5.5")
    assert "--rate must be Mbit/s" in refusal("ike_rekey", capsys, "--rate", "0")


def test_ike_rekey_page_marks_the_interval_the_rekey_fell_in():
    base = ike_rekey.Run("none", tuple((i / 10, 9.0 + i / 100) for i in range(1, 61)), retransmits=3)
    child = ike_rekey.Run("child", tuple((i / 10, 8.0 if i == 31 else 9.5) for i in range(1, 61)), 7, 3.02, 3.1,
                          frozenset({0x10}), frozenset({0x20}))
    text = ike_rekey.page(ike_rekey.Options(), ike_rekey.Result("host (6.1)", (base, child), "/r/report.html"))
    lines = text.splitlines()
    assert lines[2] == "CHILD rekey requested at 3.02 s; new ESP SAs in the kernel 0.080 s later; gw1's ESP SPIs " \
        "before: 0x10; after: 0x20"
    assert "           3.1     8.00            9.31  <- rekey" in lines
    assert lines[-2] == "whole transfer: 7 retransmissions (baseline 3); lowest 0.1 s interval after the first " \
        "0.5 s 8.00 Mbit/s (baseline 9.06)"
    assert lines[-1] == "report: /r/report.html"


def test_topology_build_takes_its_old_flags_and_no_kernel_choice(capsys):
    options = parse("topology_build", "--where", "uml", "--clients", "5", "--repeat", "2", "--mem", "1G",
                    "--uml-keep-awake", "--profile", "aes-cbc-256-sha256")
    assert options == topology_build.Options(where="uml", clients=5, repeat=2, profile="aes-cbc-256-sha256",
                                             kernel=KernelChoice(uml_mem="1G", keep_awake=True))
    assert parse("topology_build") == topology_build.Options()
    assert "argument --where: invalid choice: 'moon'" in refusal("topology_build", capsys, "--where", "moon")
    assert "unrecognized arguments: --kernel" in refusal("topology_build", capsys, "--kernel", "uml")
    assert topology_build.BENCHMARK.needs is None  # it chooses its kernels itself


def test_topology_build_page_has_a_table_here_and_a_line_for_each_guest():
    row = topology_build.Row("road_warrior (5 clients)", 7, (1.0, 3.0), (), (), (0.5, 0.5))
    result = topology_build.Result((
        topology_build.Measured("host (6.1)", False, (row,), ()),
        topology_build.Elsewhere("User-Mode Linux", status=125, seconds=42.4),
        topology_build.Elsewhere("QEMU", why="no qemu-system-x86_64")))
    lines = topology_build.page(topology_build.Options(repeat=2), result).splitlines()
    assert lines[:2] == ["", "host (6.1); 2 build(s) per topology; IPsec: aes-gcm-256 tunnel, IPv4+IPv6 (not "
                         "measured: this kernel has no ESP)"]
    assert lines[3].split() == ["road_warrior", "(5", "clients)", "7", "2.00", "n/a", "n/a", "0.50"]
    assert lines[4:] == ["namespaces left behind: none", "(User-Mode Linux run, boot included: 42 s)", "",
                         "QEMU: not measured (no qemu-system-x86_64)"]
    assert result.status == 125 and topology_build.Result((result.kernels[0],)).status == 0

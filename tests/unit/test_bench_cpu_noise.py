"""bench cpu_noise: its command line, and its spreads taken apart from synthetic records and host samples."""
from __future__ import annotations

from benchmarks import cpu_noise
from testbed.record import Record


def test_its_command_line_gives_the_old_parsers_options_and_refuses_a_bad_value_in_one_line(bench_cli):
    assert bench_cli.options("cpu_noise") == cpu_noise.Options(10.0, 1000, "aes-gcm-256", 15, 10.0)
    assert bench_cli.options("cpu_noise", "--rate", "100", "--size", "250", "--profile", "chacha20-poly1305",
                             "--repetitions", "30", "--cpu-precision", "5") == \
        cpu_noise.Options(100.0, 250, "chacha20-poly1305", 30, 5.0)
    for words in (["--repetitions", "2"], ["--size", "40"], ["--profile", "aes-gcm-7"], ["--rate", "0"]):
        bench_cli.refuses("cpu_noise", *words)


def test_its_sweep_is_one_point_plain_and_the_profile_a_fixed_number_of_times():
    spec = cpu_noise.Options(rate=10.0, size=250, repetitions=20).sweep()
    assert (spec.rates_mbit, spec.sizes, spec.profiles) == ((10.0,), (250,), ("none", "aes-gcm-256"))
    assert (spec.repetitions, spec.most_repetitions) == (20, 20)


def record(profile: str, repetition: int, cpu_s: float, start: float) -> Record:
    return Record(topology="vpn_gateway", profile=profile, mode="tunnel", ip_version=4, transport="tcp",
                  rate_mbit=10.0, size_bytes=1000, size_mode="mss", clients=1, repetition=repetition,
                  goodput_mbps=9.5, link_packets=1000, cpu_s=cpu_s, window_start_unix=start, window_s=2.0,
                  cpu_s_per_gb=cpu_s * 400)


def test_each_point_keeps_the_repetitions_with_host_samples_and_the_page_takes_their_spread_apart():
    records = [record("none", i, (20 + i) / 100, 100.0 * i) for i in range(4)] + \
        [record("aes-gcm-256", 0, 0.5, 1000.0), record("aes-gcm-256", 1, 0.5, 1100.0)]
    # the host saw 1000 timeslices in every window but the first plain one's
    points = cpu_noise.points_of(records, lambda t0, t1: None if t0 == 0.0 else (0.3, 1000.0))
    assert [(p.profile, len(p.repetitions)) for p in points] == [("aes-gcm-256", 2), ("none", 3)]
    plain = points[1].repetitions
    assert [r.cpu_s for r in plain] == [0.21, 0.22, 0.23] and {r.timeslices for r in plain} == {1000.0}
    result = cpu_noise.Result("the default sweep with rates_mbit=10", "/tmp/x", "/cg/itb-1", 90, 6, points)
    text = cpu_noise.page(cpu_noise.Options(), result)
    assert text.splitlines()[:2] == ["sweep: the default sweep with rates_mbit=10, into /tmp/x",
                                     "guest cgroup: /cg/itb-1; 90 samples, 6 repetitions"]
    assert "aes-gcm-256 10 Mbit/s 1000 B: 2 repetitions with host samples, too few" in text
    line = next(x for x in text.splitlines() if x.startswith("none 10 Mbit/s 1000 B"))
    assert "  0.00%" in line and "  220.0µs" in line  # the packets repeat exactly; 0.22 s over 1000 slices
    assert "probe" not in text.split("CV: standard")[0]  # no speed probe timed these windows
    assert cpu_noise.BENCHMARK.status(result) == 0
    empty = cpu_noise.Result("the default sweep", "/tmp/x", None, 0, 6, ())
    assert "no repetition had host samples" in cpu_noise.page(cpu_noise.Options(), empty)
    assert cpu_noise.BENCHMARK.status(empty) == 1

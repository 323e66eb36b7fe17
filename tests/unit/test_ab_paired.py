"""The paired kernel A/B's plan (regress --ab): two sweeps alike but for their kernel and turns."""
from __future__ import annotations

import pytest

from cli.regress import two_guests_fit
from experiments import ab
from testbed.options import parse_size
from testbed.record import Record


def test_both_sides_measure_the_same_windows_on_one_cpu_each_with_its_turns(tmp_path):
    argvs = ab.paired_argv(["--rates", "1000", "--repetitions", "24"], ("uml", "host"), 12, str(tmp_path), cpu=1,
                           extra=(("--arms", "0"), ("--arms", "3000")))
    a, b = argvs["a"], argvs["b"]

    def value(argv, option):  # the last one given wins, as argparse reads it
        return argv[len(argv) - 1 - argv[::-1].index(option) + 1]

    for side, argv in (("a", a), ("b", b)):
        assert value(argv, "--repetitions") == value(argv, "--max-repetitions") == "12"  # no adaptive extras
        assert value(argv, "--turns") == str(tmp_path / "turns" / side)
        assert value(argv, "--out") == str(tmp_path / side)
        assert value(argv, "--host-cpu") == "1"
    assert (value(a, "--kernel"), value(b, "--kernel")) == ("uml", "host")
    assert (value(a, "--arms"), value(b, "--arms")) == ("0", "3000")
    with pytest.raises(ValueError, match="at least 2 repetitions"):
        ab.paired_argv([], ("uml", "uml"), 1, str(tmp_path), cpu=None)


def test_the_sides_become_the_arms_of_one_run():
    a = [Record(profile="aes-gcm-256", repetition=r, arm="a", goodput_mbps=100.0 + r) for r in range(2)]
    b = [Record(profile="aes-gcm-256", repetition=r, arm="a", goodput_mbps=90.0 + r) for r in range(2)]
    merged = ab.as_arms(a, b)
    assert [(r.arm, r.repetition, r.goodput_mbps) for r in merged] == [
        ("a", 0, 100.0), ("a", 1, 101.0), ("b", 0, 90.0), ("b", 1, 91.0)]


def test_two_guests_are_refused_in_one_line_where_they_do_not_fit(monkeypatch, tmp_path):
    assert parse_size("2G") == 2 << 30 and parse_size("512M") == 512 << 20
    with pytest.raises(ValueError, match="not a size"):
        parse_size("2 GB")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:    4000000 kB\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: real_open(meminfo if p == "/proc/meminfo" else p, *a, **k))
    why = two_guests_fit("2G")
    assert why == "two guests of 2G need 5.0 GiB with room for the host, and 3.8 GiB is available"
    assert two_guests_fit("1G") is None

"""bench regress_false_alarms: its command line, and its tally of the gate's verdicts on synthetic runs."""
from __future__ import annotations

import pytest

from benchmarks import regress_false_alarms as rfa
from testbed.record import Record

META = {"backend": "uml", "kernel_release": "6.1.176", "cpu_model": "x", "cpu_count": 1}


def records(goodputs: list[float]) -> list[Record]:
    return [Record(topology="vpn_gateway", profile="none", mode="tunnel", ip_version=4, transport="tcp",
                   rate_mbit=100.0, size_bytes=1000, size_mode="mss", clients=1, repetition=i, goodput_mbps=g)
            for i, g in enumerate(goodputs)]


def test_its_command_line_gives_the_old_parsers_options_and_refuses_a_bad_value_in_one_line(bench_cli):
    assert bench_cli.options("regress_false_alarms") == rfa.Options("smoke", 4, 5.0, 95.0)
    assert bench_cli.options("regress_false_alarms", "--suite", "quick", "--runs", "6", "--max-drop", "2.5",
                             "--confidence", "99") == rfa.Options("quick", 6, 2.5, 99.0)
    for words in (["--runs", "1"], ["--suite", "slow"], ["--max-drop", "0"]):
        bench_cli.refuses("regress_false_alarms", *words)


def test_identical_runs_raise_no_alarm_and_a_ten_percent_drop_is_seen():
    runs = [(records([95.0, 95.2, 95.1, 94.9]), META), (records([95.1, 94.9, 95.0, 95.2]), META),
            (records([94.8, 95.0, 94.9, 95.1]), META)]
    result = rfa.judge(runs, 5.0, 95.0, "/tmp/x")
    assert (result.compared, result.flagged, result.detected) == (6, 0, 6)
    assert result.worst == pytest.approx(94.95 / 95.05)  # the lowest mean against a higher one
    text = rfa.page(rfa.Options(runs=3), result)
    assert "3 identical runs, 6 ordered pairs, 6 point comparisons" in text
    assert "false alarms: 0 of 6 = 0.00%" in text and "flagged 6 of 6 = 100.0%" in text

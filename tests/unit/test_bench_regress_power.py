"""bench regress_power: its command line, the gate's verdicts on five synthetic arms, and its trials kept and
resumed, with stand-ins for the calibration and the sweeps."""
from __future__ import annotations

import json

import pytest

from benchmarks import regress_power
from experiments import injection
from experiments.catalogue.suites import gate_defaults
from testbed import rundir
from testbed.record import Meta, Record

#: The CPU cost per packet of arms a..e over arm a's: as is, +5 %, as is, +2 %, +10 % (ARMS).
SLOWER = {"a": 1.0, "b": 1.05, "c": 1.0, "d": 1.02, "e": 1.10}
BASE_US = (50.0, 50.4, 49.6, 50.2, 49.8, 50.0)
COUNTS = {"a": 0, "b": 1500, "c": 0, "d": 600, "e": 3000}
CALIBRATION = injection.Calibration("k", "detect", "1000 Mbit/s", 50.0, 10 / 6000, 6000, 4, "2026-11-29T00:00Z")


def five_arms() -> list[Record]:
    """The detect suite's CPU-bound point in five arms, each repetition 0.1 % off its neighbour's alternately."""
    return [Record(topology="vpn_gateway", profile="aes-gcm-256", mode="tunnel", ip_version=4, transport="tcp",
                   rate_mbit=1000.0, size_bytes=1460, size_mode="mss", clients=1, arm=arm, repetition=rep,
                   injected_instructions=COUNTS[arm], goodput_mbps=1000 / cost, bound="cpu", cpu_us_per_packet=cost)
            for k, arm in enumerate("abcde") for rep, base in enumerate(BASE_US)
            for cost in [base * SLOWER[arm] * (1 + 0.001 * (-1) ** (rep + k))]]


def test_its_command_line_gives_the_old_parsers_options_and_refuses_a_bad_value_in_one_line(tmp_path, bench_cli):
    assert bench_cli.options("regress_power") == regress_power.Options(
        "detect", 10, f"{regress_power.REPO}/runs/regress-power", False)
    assert bench_cli.options("regress_power", "--suite", "counted", "--trials", "3", "--out", str(tmp_path),
                             "--no-suite-run") == regress_power.Options("counted", 3, str(tmp_path), True)
    for words in (["--suite", "smoke"], ["--trials", "-1"], ["--suite", "none"]):
        bench_cli.refuses("regress_power", *words)


def test_each_kind_is_judged_by_the_gate_between_its_arms():
    trial = regress_power.judge(five_arms(), Meta(), gate_defaults("detect"), COUNTS, 1, 60.0, "/r/trial01")
    flagged = {kind: c.flagged for kind, c in trial.kinds.items()}
    assert flagged == {"identical": False, "2 %": True, "5 %": True, "10 %": True}
    assert trial.kinds["5 %"].measured_pct == pytest.approx(5.0, abs=0.3) and trial.kinds["10 %"].against == "c"
    assert set(trial.kinds["2 %"].metrics) == {"goodput_mbps", "cpu_us_per_packet"}
    assert regress_power.Trial.from_json(json.loads(json.dumps(regress_power.dataclasses.asdict(trial)))) == trial


def test_the_trials_are_kept_and_a_second_run_goes_on_from_them(tmp_path, monkeypatch):
    swept = []

    def sweep(spec, run_dir):
        swept.append(run_dir)
        if len(swept) == 3:
            return 1
        with rundir.open_results(run_dir) as f:
            for r in five_arms():
                rundir.append(f, r.to_json())
        return 0

    monkeypatch.setattr(injection, "kernel_identity", lambda kernel: "k")
    monkeypatch.setattr(injection, "calibrated", lambda suite, spec, kernel, measure, out, say: CALIBRATION)
    monkeypatch.setattr(regress_power, "sweep", sweep)
    args = regress_power.Options(trials=3, out=str(tmp_path), no_suite_run=True)
    with pytest.raises(regress_power.Refused, match="trial 3 failed"):
        regress_power.run(args)
    result = regress_power.run(args)  # the third again, the first two read back from trials.jsonl
    assert [d.rsplit("/", 1)[1] for d in swept] == ["trial01", "trial02", "trial03", "trial03"]
    assert [t.trial for t in result.trials] == [1, 2, 3] and result.suite_run is None
    assert result.cross_boot.pairs == 6 and [t for t, _ in result.cross_boot.flagged] == [0.5, 1.0, 2.0, 3.0, 5.0]
    lines = regress_power.page(args, result).splitlines()
    assert lines[0].startswith("suite detect, gate: goodput, ") and "3 trials of" in lines[0]
    identical = next(line for line in lines if line.startswith("identical"))
    assert identical.split()[1:3] == ["0%", "+0.0"] and " 0/3 " in identical
    assert any(line.strip().startswith("0.5 %: identical") for line in lines)

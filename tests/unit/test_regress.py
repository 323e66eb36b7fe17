"""The regression gate's statistics and files, on synthetic data with known answers."""
import dataclasses
import json
import random
import xml.etree.ElementTree as ET

import pytest

from analysis import regress, regress_report
from analysis.stats import t_critical_95
from testbed.record import FIELD, Record


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 10, 19, 30])
def test_t_quantile_agrees_with_the_95_table(df):
    assert regress.t_quantile(0.975, df) == pytest.approx(t_critical_95(df), abs=1e-8)


def test_t_quantiles_at_other_levels():
    # published one-sided values: t(0.95, 4) = 2.132, t(0.99, 10) = 2.764, t(0.90, 1) = 3.078
    assert regress.t_quantile(0.95, 4) == pytest.approx(2.131847, abs=1e-6)
    assert regress.t_quantile(0.99, 10) == pytest.approx(2.763769, abs=1e-6)
    assert regress.t_quantile(0.90, 1) == pytest.approx(3.077684, abs=1e-6)
    assert regress.t_quantile(0.05, 4) == pytest.approx(-2.131847, abs=1e-6)
    assert regress.t_cdf(0.0, 3.5) == pytest.approx(0.5)


def test_a_ten_percent_drop_is_flagged_and_noise_is_not():
    base = [95.1, 95.4, 95.2, 95.3, 95.0]
    ratio, upper, _df, regressed = regress.judge(base, [g * 0.9 for g in base], 0.05, 0.95)
    assert ratio == pytest.approx(0.9) and regressed and upper < 0.95
    _, _, _, regressed = regress.judge(base, [95.3, 95.0, 95.2, 95.4, 95.1], 0.05, 0.95)
    assert not regressed
    _, _, _, regressed = regress.judge(base, [g * 1.2 for g in base], 0.05, 0.95)  # faster is no regression
    assert not regressed


def test_a_drop_hidden_in_noise_is_not_claimed():
    # 10% lower on average, but the repetitions spread +-15%: no confidence in a drop
    ratio, upper, _, regressed = regress.judge([80, 95, 110], [70, 86, 101], 0.05, 0.95)
    assert ratio < 0.95 and upper > 0.95 and not regressed


def test_hand_computed_bound():
    # means 10 and 9, sample variance 4/3 each, n 4: relative variances of the means
    # (4/3)/10^2/4 and (4/3)/9^2/4, Welch df, upper = 0.9 + t(0.95, df) * 0.9 * sqrt(vb + vc)
    b, c = [9, 11, 9, 11], [8, 10, 8, 10]
    vb, vc = (4 / 3) / 100 / 4, (4 / 3) / 81 / 4
    df = (vb + vc) ** 2 / (vb ** 2 / 3 + vc ** 2 / 3)
    _ratio, upper, got_df, _ = regress.judge(b, c, 0.05, 0.95)
    assert got_df == pytest.approx(df)
    assert upper == pytest.approx(0.9 + regress.t_quantile(0.95, df) * 0.9 * (vb + vc) ** 0.5)


def test_one_repetition_cannot_be_judged():
    with pytest.raises(regress.RegressError, match="at least 2 repetitions"):
        regress.judge([95.0], [90.0, 91.0], 0.05, 0.95)


@pytest.mark.parametrize("drop, conf", [(0, 0.95), (1, 0.95), (0.05, 0.5), (0.05, 1.0)])
def test_thresholds_are_checked(drop, conf):
    with pytest.raises(ValueError):
        regress.judge([1, 2], [1, 2], drop, conf)


def test_false_alarm_and_detection_rates_on_simulated_noise():
    # 2000 pairs of 3 repetitions, 1% coefficient of variation (the default sweep's spread is
    # under 0.5%): identical configurations are almost never flagged, a 10% drop almost always.
    rng = random.Random(20261123)
    def sample(mean):
        return [rng.gauss(mean, mean * 0.01) for _ in range(3)]
    false_alarms = sum(regress.judge(sample(95), sample(95), 0.05, 0.95)[3] for _ in range(2000))
    detected = sum(regress.judge(sample(95), sample(95 * 0.9), 0.05, 0.95)[3] for _ in range(2000))
    assert false_alarms == 0
    assert detected >= 1980


def records(goodputs, profile="none", size=1000, meta_rate=100.0):
    return [Record(topology="vpn_gateway", profile=profile, mode="tunnel", ip_version=4, transport="tcp",
                   rate_mbit=meta_rate, size_bytes=size, size_mode="mss", clients=1, repetition=i,
                   goodput_mbps=g) for i, g in enumerate(goodputs)]


META = {"backend": "uml", "kernel_release": "6.1.176", "cpu_model": "x", "cpu_count": 1}


def test_baseline_round_trip_and_comparison(tmp_path):
    run = records([95.0, 95.2, 95.1]) + records([60.0, 61.0, 59.0], profile="aes-gcm-256")
    path = str(tmp_path / "base.json")
    regress.save_baseline(regress.make_baseline(run, META, "runs/a"), path)
    base = regress.load_baseline(path)
    assert base["machine"] == META and len(base["points"]) == 2
    slower = records([95.0, 95.1, 95.2]) + records([50.0, 50.5, 49.5], profile="aes-gcm-256")
    verdicts = regress.compare(base, slower)
    assert [(v.point.profile, v.regressed) for v in verdicts] == [("none", False), ("aes-gcm-256", True)]
    assert regress.exit_status(verdicts) == 1
    assert regress.exit_status(regress.compare(base, run)) == 0


def test_failed_repetitions_are_not_samples():
    run = records([95.0, 95.2, None, 95.1])
    (point,) = regress.make_baseline(run, META)["points"]
    assert point[FIELD.goodput_mbps] == [95.0, 95.2, 95.1]


def test_a_point_missing_from_the_run_is_an_error(tmp_path):
    base = regress.make_baseline(records([95.0, 95.2]) + records([60.0, 61.0], size=500), META)
    with pytest.raises(regress.RegressError, match="1 of the baseline's 2 points are not in the run"):
        regress.compare(base, records([95.0, 95.2]))


@pytest.mark.parametrize("text, message", [
    ("not json", "not a readable baseline"), ('{"format": "other"}', "not an ipsec-testbed baseline"),
    (json.dumps({"format": regress.BASELINE_FORMAT, "points": []}), "no points"),
    (json.dumps({"format": regress.BASELINE_FORMAT, "points": [{"goodput_mbps": 3}]}), "no list of goodput"),
])
def test_bad_baselines_are_named(tmp_path, text, message):
    path = tmp_path / "b.json"
    path.write_text(text)
    with pytest.raises(regress.RegressError, match=message):
        regress.load_baseline(str(path))
    with pytest.raises(regress.RegressError, match="no such baseline"):
        regress.load_baseline(str(tmp_path / "none.json"))


def test_machine_differences_are_listed():
    base = regress.make_baseline(records([1.0, 2.0]), META)
    assert regress.machine_differences(base, META) == []
    assert regress.machine_differences(base, {**META, "backend": "host", "kernel_release": "6.18"}) == [
        "backend: 'uml' -> 'host'", "kernel_release: '6.1.176' -> '6.18'"]


def test_junit_and_markdown_say_the_same():
    base = regress.make_baseline(records([95.0, 95.2, 95.1]) + records([60.0, 61.0, 59.0], size=500), META)
    verdicts = regress.compare(base, records([95.0, 95.1, 95.2]) + records([50.0, 50.5, 49.5], size=500))
    suite = ET.fromstring(regress_report.junit_xml(verdicts, 0.05, 0.95, ["kernel differs"]))
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert failed == ["vpn_gateway none tunnel IPv4 tcp 100 Mbit/s mss 500 B"]
    assert any(p.get("value") == "kernel differs" for p in suite.iter("property"))
    md = regress_report.markdown(verdicts, 0.05, 0.95, ["kernel differs"])
    assert "**1 of 2 points regressed**" in md and "> **Warning:** kernel differs" in md
    assert md.count("**REGRESSED**") == 1


def test_two_sided_interval_holds_the_ratio_and_is_wider_than_one_sided():
    b, c = [95.1, 95.4, 95.2, 95.3], [90.0, 90.4, 90.1, 90.3]
    low, high = regress.interval(b, c, 0.95)
    ratio, upper, _, _ = regress.judge(b, c, 0.05, 0.95)
    assert low < ratio < upper < high
    assert high - ratio == pytest.approx(ratio - low)


def test_a_cpu_cost_regresses_when_it_rises_not_when_it_falls():
    base = [120.0, 121.5, 119.0, 120.5]
    ratio, bound, _, regressed = regress.judge(base, [c * 1.1 for c in base], 0.05, 0.95, better=-1)
    assert ratio == pytest.approx(1.1) and bound > 1.05 and bound < ratio and regressed
    assert not regress.judge(base, [c * 0.9 for c in base], 0.05, 0.95, better=-1)[3]  # cheaper: no regression
    # 10% dearer on average but spread +-15%: no confidence in a rise
    assert not regress.judge([100, 120, 140], [110, 132, 154], 0.05, 0.95, better=-1)[3]
    with pytest.raises(ValueError, match="better"):
        regress.judge(base, base, 0.05, 0.95, better=0)


def test_each_metric_is_judged_in_its_own_direction():
    def run(goodputs, cpu):
        return [dataclasses.replace(r, cpu_s_per_gb=c, cpu_us_per_packet=c / 10)
                for r, c in zip(records(goodputs), cpu, strict=True)]
    base = regress.make_baseline(run([95.0, 95.2, 95.1], [120.0, 121.0, 119.5]), META)
    assert base["points"][0][FIELD.cpu_s_per_gb] == [120.0, 121.0, 119.5]
    # the same goodput, but every gigabyte costs 10% more CPU: only the CPU metrics regress
    dearer = run([95.1, 95.0, 95.2], [132.0, 133.1, 131.4])
    timed = tuple(m for m in regress.METRICS if m not in regress.COUNTED.values())  # the counted are refused here
    verdicts = regress.compare(base, dearer, metrics=timed)
    assert [(v.label, v.regressed) for v in verdicts] == [
        ("goodput", False), ("CPU per GB", True), ("CPU per packet", True)]
    assert verdicts[1].worse(0.05) == "CPU per GB rose by more than 5%" and verdicts[1].limit(0.05) == 1.05
    assert regress.exit_status(regress.compare(base, dearer)) == 0  # goodput alone, the default
    md = regress_report.markdown(verdicts, 0.05, 0.95)
    assert "| CPU per GB (s/GB) |" in md and md.count("**REGRESSED**") == 2
    suite = ET.fromstring(regress_report.junit_xml(verdicts, 0.05, 0.95))
    assert [c.find("failure").get("message") for c in suite.iter("testcase") if c.find("failure") is not None] == [
        "CPU per GB rose by more than 5%", "CPU per packet rose by more than 5%"]
    # anomalies are not samples; a baseline without CPU figures cannot judge them
    (point,) = regress.make_baseline(run([95.0, 95.2, 95.1], [1.0, 2.0, 3.0])[:2] + [
        dataclasses.replace(records([99.0])[0], repetition=2, bound="anomaly", cpu_s_per_gb=9.0)], META)["points"]
    assert point[FIELD.goodput_mbps] == [95.0, 95.2] and point[FIELD.cpu_s_per_gb] == [1.0, 2.0]
    old = regress.make_baseline(records([95.0, 95.2, 95.1]), META)
    with pytest.raises(regress.RegressError, match="baseline has no CPU per GB"):
        regress.compare(old, dearer, metrics=("cpu_s_per_gb",))
    with pytest.raises(regress.RegressError, match="unknown metric"):
        regress.compare(base, dearer, metrics=("joules",))


@pytest.mark.parametrize("value,ok", [("0", True), ("5", True), ("99.5", True), ("100", False), ("-1", False),
                                      ("five", False)])
def test_inject_slowdown_takes_what_its_help_promises(value, ok, capsys):
    """Its help says 0 makes two identical arms (a false-alarm check): the parser must take 0."""
    from cli.main import build_parser

    parser = build_parser()
    if ok:
        assert parser.parse_args(["regress", "--inject-slowdown", value]).inject_slowdown == float(value)
    else:
        with pytest.raises(SystemExit):
            parser.parse_args(["regress", "--inject-slowdown", value])
        assert "is not a percentage in [0, 100)" in capsys.readouterr().err
    help_text = " ".join(parser._subparsers._group_actions[0].choices["regress"].format_help().split())
    assert "0 makes two identical arms (a false-alarm check)" in help_text


def counted(ipps, arm="", clock="instructions"):
    """Records of the counted backend: instructions per packet where a timed run has CPU per packet."""
    return [dataclasses.replace(r, arm=arm, clock=clock, instructions_per_packet=ipp, instructions=int(ipp * 1000),
                                link_packets=1000)
            for r, ipp in zip(records([100.0] * len(ipps), profile="aes-gcm-256"), ipps, strict=True)]


def test_a_counted_run_is_judged_on_instructions_where_a_timed_one_is_on_cpu_time(tmp_path):
    # the suite names CPU per packet; a counted run answers it in instructions per packet
    base = regress.make_baseline(counted([59_000, 59_010, 58_990, 59_005]), META, "runs/a")
    now = counted([59_700, 59_690, 59_710, 59_705])  # +1.2 %
    verdicts = regress.compare(base, now, 0.005, 0.95, (FIELD.goodput_mbps, FIELD.cpu_us_per_packet))
    assert [v.metric for v in verdicts] == [FIELD.goodput_mbps, FIELD.instructions_per_packet]
    assert verdicts[1].regressed and verdicts[1].ratio == pytest.approx(1.0118, abs=1e-3)
    # arms of one counted run, pair by pair: identical arms pass, +1 % is flagged
    arms = counted([59_000, 59_050, 58_990, 59_020], "a") + counted([59_010, 59_040, 59_000, 59_015], "b") + \
        counted([59_590, 59_640, 59_580, 59_610], "c")
    same = regress.compare_arms(arms, META, "a", "b", 0.005, 0.95, (FIELD.cpu_us_per_packet,))
    slower = regress.compare_arms(arms, META, "a", "c", 0.005, 0.95, (FIELD.cpu_us_per_packet,))
    assert (same[0].metric, same[0].regressed, slower[0].regressed) == (FIELD.instructions_per_packet, False, True)


def test_instructions_and_cpu_time_never_share_a_comparison():
    timed_base = regress.make_baseline(records([95.0, 95.2, 95.1], profile="aes-gcm-256"), META)
    with pytest.raises(regress.RegressError, match="mix CPU time and counted instructions"):
        regress.clock_of(counted([1.0, 2.0]) + records([95.0]))
    with pytest.raises(regress.RegressError, match="counted only on the counted backend"):
        regress.compare(timed_base, records([95.0, 95.1]), metrics=(FIELD.instructions_per_packet,))
    with_cpu = [dataclasses.replace(r, cpu_us_per_packet=3.0) for r in records([95.0, 95.1, 95.2], "aes-gcm-256")]
    with pytest.raises(regress.RegressError, match="different clocks"):
        regress.compare(regress.make_baseline(with_cpu, META), counted([59_000, 59_010]),
                        metrics=(FIELD.cpu_us_per_packet,))


@pytest.mark.parametrize(("words", "counted"), [
    (["--ab", "debian", "6.1"], True),  # two kernels paired, nothing else said: counted
    (["--bisect", "v6.7", "v6.8", "--tree", "/src/linux"], True),
    (["--inject-slowdown", "1"], True),
    (["--ab", "debian", "6.1", "--suite", "counted"], True),
    (["--ab", "debian", "6.1", "--suite", "detect"], False),  # a timed suite asked for: UML's
    (["--ab", "uml", "uml"], False),  # a backend named: that backend
    (["--ab", "debian", "6.1", "--kernel", "uml"], False),
    (["--suite", "smoke", "--baseline", "b.json"], False),  # a baseline keeps the backend it was made on
])
def test_the_paired_comparisons_count_by_default_where_qemu_runs(words, counted, monkeypatch):
    from cli import regress as regress_cli
    from cli.main import build_parser
    from testbed import backends

    monkeypatch.setattr(backends.QemuBackend, "unavailable", lambda self: None)
    args = build_parser().parse_args(["regress", *words])
    assert regress_cli.counted_by_default(args) is counted


def test_without_qemu_the_paired_comparisons_are_timed_and_say_why(monkeypatch, capsys):
    from cli import regress as regress_cli
    from cli.main import build_parser
    from testbed import backends

    monkeypatch.setattr(backends.QemuBackend, "unavailable", lambda self: "qemu-system-x86_64 is not installed")
    args = build_parser().parse_args(["regress", "--ab", "debian", "6.1"])
    assert not regress_cli.counted_by_default(args)
    assert "qemu-system-x86_64 is not installed" in capsys.readouterr().err

"""analysis.stats on synthetic data whose answers were worked out by hand.

Every expected number below is a literal computed on paper (with the t values of a printed
table), never by the code under test; the derivation sits next to it.
"""
from __future__ import annotations

import logging
import math
import random

import numpy as np
import pytest

from analysis import stats
from analysis.stats import (
    PLAIN_PROFILE,
    Summary,
    aggregate,
    at_common_speed,
    elasticities,
    normalize,
    ratio_of_means,
    repetitions_for,
    t_critical_95,
)
from testbed.record import POINT_FIELDS, Record

# --- t_critical_95 ---------------------------------------------------------------------------

# Two-sided 95 % values as printed in any statistics textbook's t table (3 decimals).
PRINTED_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
               10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000,
               120: 1.980}


@pytest.mark.parametrize("df,printed", sorted(PRINTED_T95.items()))
def test_t_matches_the_printed_table(df, printed):
    assert t_critical_95(df) == pytest.approx(printed, abs=5.1e-4)


def test_t_at_infinity_is_the_normal_quantile():
    assert t_critical_95(math.inf) == pytest.approx(1.959964, abs=1e-6)
    assert t_critical_95(1e9) == pytest.approx(1.959964, abs=1e-6)


def _two_sided_coverage(t: float, df: float) -> float:
    """P(|T| <= t) for Student's t with df degrees of freedom, by Simpson's rule on the density.

    Independent of the code under test: the density is written out from its definition.
    """
    n = 400_001  # odd: Simpson needs an even number of intervals
    x = np.linspace(0.0, t, n)
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    f = c * (1 + x * x / df) ** (-(df + 1) / 2)
    h = t / (n - 1)
    return 2 * h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())


@pytest.mark.parametrize("df", range(1, 31))
def test_t_table_gives_95_percent_coverage(df):
    # d coverage / dt = 2 f(t) >= 0.0039 (df = 1, t = 12.7), so 1e-9 in coverage is < 3e-7 in t
    assert _two_sided_coverage(t_critical_95(df), df) == pytest.approx(0.95, abs=1e-9)


@pytest.mark.parametrize("df", [30.5, 31, 33, 37, 45, 50, 75, 100, 250, 1000, 12345.6])
def test_t_approximation_beyond_the_table(df):
    assert _two_sided_coverage(t_critical_95(df), df) == pytest.approx(0.95, abs=1e-8)


def test_t_decreases_with_df_and_joins_the_table_smoothly():
    values = [t_critical_95(df) for df in range(1, 301)]
    assert all(a > b for a, b in zip(values, values[1:], strict=False))
    # the step from the table (30) to the expansion (31) is the size of its neighbours' steps
    steps = [values[i] - values[i + 1] for i in (27, 28, 29, 30)]
    assert steps[2] == pytest.approx((steps[1] + steps[3]) / 2, rel=0.02)


def test_fractional_df_below_30_rounds_down():
    # rounding down widens the interval: the conservative choice for Welch degrees of freedom
    assert t_critical_95(4.7) == t_critical_95(4)
    assert t_critical_95(1.2) == t_critical_95(1)
    assert t_critical_95(3.9999999999) == t_critical_95(4)  # floating-point noise is not "3"
    assert t_critical_95(np.int64(4)) == t_critical_95(4)
    assert t_critical_95(np.float64(2.0)) == pytest.approx(4.302653, abs=1e-6)


@pytest.mark.parametrize("bad", [0, 0.5, -3, math.nan, "4", None, True])
def test_t_rejects_impossible_df(bad):
    with pytest.raises(ValueError, match="df"):
        t_critical_95(bad)


# --- Summary and aggregate -------------------------------------------------------------------

def test_summary_of_three_values():
    s = Summary.of([9.0, 10.0, 11.0])
    # mean 10; squared deviations 1 + 0 + 1 = 2, / (3 - 1) = 1 -> std 1
    # CI = t(2) * 1 / sqrt(3) = 4.302653 / 1.732051 = 2.484138
    assert (s.n, s.mean, s.std, s.min, s.max) == (3, 10.0, 1.0, 9.0, 11.0)
    assert s.ci95 == pytest.approx(2.484138, abs=1e-6)


def test_summary_of_five_values():
    s = Summary.of([26.0, 20.0, 24.0, 28.0, 22.0])
    # mean 24; deviations 16 + 4 + 0 + 4 + 16 = 40, / 4 = 10 -> std sqrt(10) = 3.162278
    # CI = t(4) * 3.162278 / sqrt(5) = 2.776445 * 1.414214 = 3.926486
    assert s.mean == 24.0
    assert s.std == pytest.approx(3.162278, abs=1e-6)
    assert s.ci95 == pytest.approx(3.926486, abs=1e-6)


def test_one_repetition_has_no_spread():
    s = Summary.of([7.5])
    assert (s.n, s.mean, s.std, s.ci95, s.min, s.max) == (1, 7.5, None, None, 7.5, 7.5)
    with pytest.raises(ValueError):
        Summary.of([])


def record(profile="aes-gcm-256", size=1000, rep=0, goodput=9.0, rate=10.0, mode="tunnel", **extra):
    r = {"topology": "vpn_gateway", "profile": profile, "mode": mode, "ip_version": 4, "transport": "tcp",
         "rate_mbit": rate, "size_bytes": size, "size_mode": "mss", "clients": 1, "repetition": rep,
         "duration_s": 2.0, "goodput_mbps": goodput, "theoretical_goodput_mbps": None, "loss_pct": None,
         "retransmits": 0, "cpu_busy_pct": None, "cpu_system_pct": None, "cpu_softirq_pct": None,
         "cpu_s_per_gb": None, "emulation_limited": False, "backend": "uml", "kernel_release": "6.1.176"}
    r.update(extra)
    return Record(**r)


def test_aggregate_groups_by_point_without_repetition():
    records = ([record(PLAIN_PROFILE, s, i, g) for s, gs in ((500, (9, 10, 11)), (1000, (20, 22, 24, 26, 28)))
                for i, g in enumerate(gs)]
               + [record("aes-gcm-256", 500, i, g) for i, g in enumerate((8.1, 9.0, 9.9))])
    random.Random(3).shuffle(records)
    aggs = aggregate(records)
    assert [(a.profile, a.size_bytes, a.goodput.n) for a in aggs] == [
        (PLAIN_PROFILE, 500, 3), (PLAIN_PROFILE, 1000, 5), ("aes-gcm-256", 500, 3)]
    # "arm" only for the arms of an A/B within a sweep
    assert set(aggs[0].point.to_json()) == set(POINT_FIELDS) - {"arm"}
    assert aggs[0].goodput.mean == 10.0 and aggs[0].goodput.ci95 == pytest.approx(2.484138, abs=1e-6)
    assert aggs[1].goodput.mean == 24.0 and aggs[1].goodput.ci95 == pytest.approx(3.926486, abs=1e-6)
    assert aggs[2].goodput.mean == pytest.approx(9.0)
    # std of 8.1, 9.0, 9.9: deviations 0.81 + 0 + 0.81 = 1.62, / 2 = 0.81 -> 0.9
    assert aggs[2].goodput.std == pytest.approx(0.9)


def test_aggregate_summarises_cpu_fields_that_are_present():
    records = [record(rep=0, cpu_s_per_gb=3.0, cpu_busy_pct=40.0),
               record(rep=1, cpu_s_per_gb=5.0, cpu_busy_pct=None),
               record(rep=2, cpu_s_per_gb=4.0, cpu_busy_pct=50.0)]
    (a,) = aggregate(records)
    # s/GB: mean 4, std 1, CI = 4.302653 / sqrt(3) = 2.484138; busy: two values, 40 and 50
    assert a.cpu_s_per_gb.mean == 4.0 and a.cpu_s_per_gb.ci95 == pytest.approx(2.484138, abs=1e-6)
    assert (a.cpu["cpu_busy_pct"].n, a.cpu["cpu_busy_pct"].mean) == (2, 45.0)
    # 45 +- t(1) * 7.0711 / sqrt(2) = 12.706205 * 5 = 63.531024
    assert a.cpu["cpu_busy_pct"].ci95 == pytest.approx(63.531024, abs=1e-5)
    assert "cpu_system_pct" not in a.cpu  # never measured: no summary rather than zeros


def test_aggregate_counts_flags_failures_and_theoretical():
    records = [record(rep=0, goodput=9.0, theoretical_goodput_mbps=9.46, emulation_limited=True),
               record(rep=1, goodput=8.0, theoretical_goodput_mbps=9.46),
               record(rep=2, goodput=None, error="iperf3: connection refused")]
    (a,) = aggregate(records)
    assert (a.goodput.n, a.n_failed, a.n_emulation_limited, a.emulation_limited) == (2, 1, 1, True)
    assert a.goodput.mean == 8.5
    assert a.theoretical_goodput_mbps == pytest.approx(9.46)


def test_point_without_any_goodput_is_left_out_and_logged(caplog):
    # logged as detail (INFO): the report and its table count failed repetitions themselves
    records = [record(rep=0, goodput=None), record(rep=1, goodput=None), record(size=500, goodput=7.0)]
    with caplog.at_level(logging.INFO, logger="analysis.stats"):
        aggs = aggregate(records)
    assert [a.size_bytes for a in aggs] == [500]
    assert "none of its 2 repetitions" in caplog.text


def test_repeated_repetition_counts_once_and_the_last_wins(caplog):
    records = [record(rep=0, goodput=1.0), record(rep=1, goodput=2.0), record(rep=0, goodput=3.0)]
    with caplog.at_level(logging.WARNING, logger="analysis.stats"):
        (a,) = aggregate(records)
    assert (a.goodput.n, a.goodput.mean) == (2, 2.5)
    assert "repetition 0 appears more than once" in caplog.text


def test_aggregate_with_other_keys():
    records = [record(size=s, rep=0, goodput=g) for s, g in ((500, 4.0), (1000, 6.0))]
    (a,) = aggregate(records, keys=("profile",))
    assert a.point.to_json() == {"profile": "aes-gcm-256"} and (a.goodput.n, a.goodput.mean) == (2, 5.0)


def test_aggregate_orders_rates_numerically_and_unshaped_last():
    records = [record(rate=r, goodput=1.0) for r in (100.0, None, 2.0, 34.0)]
    assert [a.rate_mbit for a in aggregate(records)] == [2.0, 34.0, 100.0, None]


# --- ratios ----------------------------------------------------------------------------------

def test_ratio_with_equal_relative_spread():
    # IPsec 8.1, 9.0, 9.9 (mean 9, s 0.9); plain 9, 10, 11 (mean 10, s 1); R = 0.9
    # u = s_x^2 / (n_x m_y^2) = 0.81 / 300 = 0.0027; v = R^2 s_y^2 / (n_y m_y^2) = 0.81 / 300 = 0.0027
    # se = sqrt(0.0054) = 0.0734847; Welch df = 0.0054^2 / (0.0027^2 / 2 + 0.0027^2 / 2) = 4
    # half-width = t(4) * se = 2.776445 * 0.0734847 = 0.204026
    r = ratio_of_means(Summary.of([8.1, 9.0, 9.9]), Summary.of([9.0, 10.0, 11.0]))
    assert r.value == pytest.approx(0.9)
    assert r.df == pytest.approx(4.0)
    assert r.ci95 == pytest.approx(0.204026, abs=2e-6)
    assert (r.low, r.high) == (pytest.approx(0.695974, abs=2e-6), pytest.approx(1.104026, abs=2e-6))


def test_ratio_with_welch_degrees_of_freedom():
    # IPsec 8, 9, 10 (mean 9, s 1); plain 9, 10, 11 (mean 10, s 1); R = 0.9
    # u = 1 / 300 = 0.0033333; v = 0.81 / 300 = 0.0027; se = sqrt(0.0060333) = 0.0776745
    # df = 0.0060333^2 / (0.0033333^2 / 2 + 0.0027^2 / 2) = 3.640e-5 / 9.2006e-6 = 3.956 -> t(3)
    # half-width = 3.182446 * 0.0776745 = 0.247195
    r = ratio_of_means(Summary.of([8.0, 9.0, 10.0]), Summary.of([9.0, 10.0, 11.0]))
    assert r.df == pytest.approx(3.9564, abs=1e-4)
    assert r.ci95 == pytest.approx(0.247195, abs=2e-6)


def test_ratio_edge_cases():
    one = Summary.of([9.0])
    three = Summary.of([9.0, 10.0, 11.0])
    r = ratio_of_means(one, three)
    assert (r.value, r.ci95, r.df, r.low) == (0.9, None, None, None)
    assert ratio_of_means(three, Summary.of([0.0, 0.0])) is None
    flat = ratio_of_means(Summary.of([5.0, 5.0]), Summary.of([10.0, 10.0]))
    assert (flat.value, flat.ci95) == (0.5, 0.0)


def test_normalize_matches_the_same_point_only():
    plain = ((9, 2), (10, 2), (11, 2))
    ipsec = ((8.1, 5), (9.0, 6), (9.9, 7))
    records = ([record(PLAIN_PROFILE, 1000, i, g, cpu_s_per_gb=c) for i, (g, c) in enumerate(plain)]
               + [record("aes-gcm-256", 1000, i, g, cpu_s_per_gb=c) for i, (g, c) in enumerate(ipsec)]
               + [record("aes-gcm-256", 500, 0, 4.0)]  # no plain at 500 bytes
               + [record("aes-gcm-256", 1000, 0, 1.0, rate=34.0)])  # no plain at 34 Mbit/s
    ratios = normalize(aggregate(records))
    assert len(ratios) == 1
    (r,) = ratios
    assert (r.profile, r.size_bytes, r.rate_mbit) == ("aes-gcm-256", 1000, 10.0)
    assert r.plain.is_plain and r.ipsec.profile == "aes-gcm-256"
    assert r.goodput.value == pytest.approx(0.9) and r.goodput.ci95 == pytest.approx(0.204026, abs=2e-6)
    # CPU s/GB: IPsec 5, 6, 7 (mean 6, s 1) over plain 2, 2, 2 (mean 2, s 0): R = 3
    # u = 1 / (3 * 4) = 0.083333, v = 0; se = 0.288675; df = u^2 / (u^2 / 2) = 2
    # half-width = t(2) * 0.288675 = 4.302653 * 0.288675 = 1.242069
    assert r.cpu_s_per_gb.value == pytest.approx(3.0)
    assert r.cpu_s_per_gb.df == pytest.approx(2.0)
    assert r.cpu_s_per_gb.ci95 == pytest.approx(1.242069, abs=2e-6)


def test_plain_baseline_without_a_mode_serves_every_mode():
    records = ([record(PLAIN_PROFILE, 1000, i, 10.0, mode=None) for i in range(2)]
               + [record("aes-gcm-256", 1000, i, 9.0, mode="tunnel") for i in range(2)]
               + [record("aes-gcm-256", 1000, i, 9.5, mode="transport") for i in range(2)])
    ratios = normalize(aggregate(records))
    assert sorted((r.point.mode, r.goodput.value) for r in ratios) == [("transport", 0.95), ("tunnel", 0.9)]


def test_plain_baseline_with_a_mode_matches_that_mode_only():
    records = ([record(PLAIN_PROFILE, 1000, 0, 10.0, mode="tunnel"), record("aes-gcm-256", 1000, 0, 9.0, mode="tunnel"),
                record("aes-gcm-256", 1000, 0, 9.5, mode="transport")])
    assert [r.point.mode for r in normalize(aggregate(records))] == ["tunnel"]


def test_normalize_needs_profiles():
    with pytest.raises(ValueError, match="profile"):
        normalize(aggregate([record()], keys=("size_bytes",)))
    assert normalize([]) == []


# --- repetitions_for ---------------------------------------------------------------------------

@pytest.mark.parametrize("spread, target, expected", [
    (0.0, 0.10, 2),     # no spread: the fewest a confidence interval takes
    (0.08, 0.10, 5),    # 2.776 * 8 / sqrt(5) = 9.93 %; with 4: 3.182 * 8 / 2 = 12.7 %
    (0.10, 0.10, 7),    # 2.447 * 10 / sqrt(7) = 9.25 %; with 6: 2.571 * 10 / sqrt(6) = 10.5 %
    (0.01, 0.02, 4),    # 4.303 * 1 / sqrt(3) = 2.48 % is too wide; 3.182 * 1 / 2 = 1.59 %
])
def test_repetitions_for_is_the_fewest_whose_interval_meets_the_target(spread, target, expected):
    n = repetitions_for(spread, target)
    assert n == expected
    assert t_critical_95(n - 1) * spread / math.sqrt(n) <= target
    assert n == 2 or t_critical_95(n - 2) * spread / math.sqrt(n - 1) > target


def test_repetitions_for_gives_up_beyond_most_and_rejects_nonsense():
    assert repetitions_for(0.5, 0.01) is None
    assert repetitions_for(0.5, 0.01, most=10_000) is not None
    with pytest.raises(ValueError):
        repetitions_for(float("nan"), 0.1)
    with pytest.raises(ValueError):
        repetitions_for(0.1, 0)


# -- CPU costs at the run's common machine speed (a speed probe beside the guest) -------------

def probed(profile, size, rep, speed, cost, rate=10.0, **extra):
    """A repetition whose window the speed probe timed at ``speed`` ns per operation."""
    return record(profile, size, rep, rate=rate, cpu_s_per_gb=cost, cpu_us_per_packet=cost / 10,
                  speed_probe_ns=speed, **extra)


def slow_and_fast_run(elasticity=1.0, noise=0.01, seed=5):
    """Two profiles, three sizes, six repetitions, on a machine whose speed swings +-20 %:
    each cost is its point's cost at speed 100, times (speed / 100) ** elasticity, times noise."""
    rng = random.Random(seed)
    out = []
    for profile, base in ((PLAIN_PROFILE, 100.0), ("aes-gcm-256", 200.0)):
        for size in (250, 500, 1000):
            for rep in range(6):
                speed = 100.0 * rng.uniform(0.8, 1.2)
                out.append(probed(profile, size, rep, speed,
                                  base * 1000 / size * (speed / 100) ** elasticity * rng.gauss(1, noise)))
    return out


def test_costs_at_common_speed_lose_the_machines_swing_and_keep_what_was_measured():
    records = slow_and_fast_run()
    slopes = elasticities(records)
    assert slopes[None] == pytest.approx(1.0, abs=0.1)
    adjusted = at_common_speed(records)
    for before, after in zip(records, adjusted, strict=True):
        assert after.cpu_s_per_gb_measured == before.cpu_s_per_gb
        assert after.cpu_us_per_packet_measured == before.cpu_us_per_packet
        assert after.cpu_s_per_gb == pytest.approx(before.cpu_s_per_gb * after.speed_factor)
        assert after.cpu_us_per_packet == pytest.approx(before.cpu_us_per_packet * after.speed_factor)
    assert records[0].speed_factor is None  # the records given are left as they were
    for a in aggregate(records):
        common, measured = a.cpu_s_per_gb, a.cpu["cpu_s_per_gb_measured"]
        # +-20 % of speed spreads the costs as measured ~12 %; at one speed only the 1 % noise is left
        assert measured.std / measured.mean > 0.05
        assert common.std / common.mean < 0.025
        assert common.mean == pytest.approx(measured.mean, rel=0.12)


def test_costs_that_do_not_follow_the_probe_are_left_nearly_as_they_are():
    records = slow_and_fast_run(elasticity=0.0, noise=0.05)
    assert elasticities(records)[None] < 0.2
    for a in aggregate(records):
        assert a.cpu_s_per_gb.std == pytest.approx(a.cpu["cpu_s_per_gb_measured"].std, rel=0.3)


def test_each_rate_is_set_to_its_own_reference_speed():
    # the guest's own load slows the probe: 100 Mbit/s windows read slower on the same machine
    records = slow_and_fast_run() + [
        probed(PLAIN_PROFILE, 1000, rep, speed, 50.0 * speed / 150, rate=100.0)
        for rep, speed in enumerate((150.0, 160.0, 140.0, 155.0, 145.0, 150.0))]
    adjusted = at_common_speed(records)
    for rate in (10.0, 100.0):
        at_rate = [r for r in adjusted if r.rate_mbit == rate]
        reference = sum(math.log(r.speed_probe_ns) for r in at_rate) / len(at_rate)
        for r in at_rate:  # each window set to its own rate's mean speed, not to the run's
            assert math.log(r.speed_factor) == pytest.approx(
                elasticities(records)[stats._speed_group(r)] * (reference - math.log(r.speed_probe_ns)))
    fast = [r.cpu_s_per_gb for r in adjusted if r.rate_mbit == 100.0]
    assert max(fast) / min(fast) < 1.01  # the group is thin (5 beyond its first): the run's elasticity, ~1


def test_without_a_probe_nothing_changes_and_nothing_is_adjusted_twice():
    plain = [record(rep=i, cpu_s_per_gb=c) for i, c in enumerate((3.0, 5.0, 4.0))]
    assert at_common_speed(plain) == plain
    records = slow_and_fast_run()
    once = at_common_speed(records)
    assert at_common_speed(once) == once
    # an anomaly's figures are never averaged, so never adjusted either
    odd = probed(PLAIN_PROFILE, 250, 9, 120.0, 999.0, bound="anomaly")
    assert at_common_speed([*records, odd])[-1] is odd


def test_an_elasticity_never_goes_below_zero_and_a_thin_group_takes_the_runs():
    # costs falling as the machine slows: noise, not physics
    backwards = [probed(PLAIN_PROFILE, 500, rep, speed, 1000.0 / speed) for rep, speed in enumerate((90, 100, 110))]
    assert elasticities(backwards)[None] == 0.0
    records = slow_and_fast_run() + [probed("aes-gcm-128", 500, rep, s, 100.0) for rep, s in enumerate((95, 105))]
    slopes = elasticities(records)
    thin = next(k for k in slopes if k and k.profile == "aes-gcm-128")  # one repetition beyond the first
    assert slopes[thin] == slopes[None]


def test_a_point_whose_cpu_was_saturated_is_left_as_measured():
    # a saturated CPU's time is the window's whatever the speed: its cost must not follow the probe
    records = slow_and_fast_run()
    busy = [probed("aes-gcm-256", 100, rep, speed, 500.0, cpu_busy_pct=pct)
            for rep, (speed, pct) in enumerate(((80.0, 99.0), (120.0, 95.0), (100.0, 85.0)))]
    adjusted = at_common_speed([*records, *busy])
    assert adjusted[-3:] == busy  # on the mean (93 %) saturated: all three left alone, the 85 % one too
    assert elasticities([*records, *busy]) == elasticities(records)
    assert all(r.speed_factor is not None for r in adjusted[:-3])

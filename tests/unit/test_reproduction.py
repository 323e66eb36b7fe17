"""The reproduction analysis on synthetic data with known answers; the seed scripts against their reference files."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from pathlib import Path

import pytest

from analysis import penalty, reproduction, reproduction_report
from analysis.reproduction import FAILS, HOLDS, NOT_TESTABLE, UNDECIDED, UNMEASURED, Row, evaluate_claim
from analysis.stats import RatioEstimate, Summary, aggregate, combine, mean_of, normalize, paired, t_critical_95
from experiments import catalogue, reproduce
from experiments.engine.plan import Point
from experiments.transactions import Timing
from ipsec import overhead
from testbed.record import Group, MetaPart, MetaSweep, Record, TransactionRecord
from testbed.rundir import ResultsError, load_existing

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEEDS = ("000", "001", "002", "003", "004")


# -- the overhead model for UDP and bulk writes --------------------------------------------------

def test_udp_expected_goodput_without_fragmentation():
    # 1000-byte datagrams, IPv4, no IPsec: 1000 + 8 + 20 + 14 bytes on the wire per 1000 delivered
    assert overhead.expected_udp_goodput_mbps(100, 1000) == pytest.approx(100 * 1000 / 1042)


def test_udp_expected_goodput_fragments_in_multiples_of_eight():
    # 4000 + 8 = 4008 bytes of UDP over IPv4 MTU 1500: fragments carry 1480, 1480, 1048 bytes
    wire = (1480 + 20 + 14) * 2 + (1048 + 20 + 14)
    assert overhead.expected_udp_goodput_mbps(100, 4000) == pytest.approx(100 * 4000 / wire)
    # IPv6 adds an 8-byte fragment header: 1500 - 40 - 8 = 1452 -> 1448 bytes per fragment
    wire6 = (1448 + 48 + 14) * 2 + (4008 - 2 * 1448 + 48 + 14)
    assert overhead.expected_udp_goodput_mbps(100, 4000, ip_version=6) == pytest.approx(100 * 4000 / wire6)


def test_udp_expected_goodput_with_esp_adds_the_packets_overhead():
    inner = 1000 + 8 + 20
    added = overhead.packet_overhead("aes-gcm-256", "tunnel", 4, inner)
    got = overhead.expected_udp_goodput_mbps(10, 1000, "aes-gcm-256", "tunnel", 4)
    assert got == pytest.approx(10 * 1000 / (inner + added + 14))
    assert got < overhead.expected_udp_goodput_mbps(10, 1000)


def test_udp_with_esp_in_ipv4_tunnel_mode_fragments_then_encapsulates_then_fragments_again():
    # 4000 + 8 bytes: fragments of 1500, 1500 and 1068 bytes; AES-GCM-256 tunnel adds 56 to each
    # (20 outer IP, 8 ESP, 8 IV, 2 trailer and 2 pad, 16 ICV); a 1556-byte packet leaves as 1500 + 76
    wire = 2 * ((1500 + 14) + (76 + 14)) + (1068 + 56 + 14)
    assert overhead.expected_udp_goodput_mbps(100, 4000, "aes-gcm-256", "tunnel", 4) == pytest.approx(100 * 4000 / wire)


def test_udp_with_esp_in_transport_mode_protects_the_datagram_then_fragments_it():
    # 16384 + 8 bytes of UDP, ESP 3DES + HMAC-SHA1 (8 + 8 IV + 16392 + 6 pad + 2 + 12 ICV = 16428) under
    # AH HMAC-MD5 (24): 16452 bytes after the IP header, in 11 fragments of 1480 and one of 172
    wire = 16452 + 12 * (20 + 14)
    got = overhead.expected_udp_goodput_mbps(100, 16384, "3des-cbc-sha1+ah-md5", "transport", 4)
    assert got == pytest.approx(100 * 16384 / wire)


def test_point_expectation_follows_transport_and_size_mode():
    tcp = Group(rate_mbit=10.0, profile="none", mode="tunnel", ip_version=4, transport="tcp")
    assert overhead.expected_point_goodput_mbps(tcp.replace(size_mode="mss", size_bytes=500)) == \
        pytest.approx(overhead.expected_goodput_mbps(10, 500))
    # bulk writes are cut into full segments whatever their size
    assert overhead.expected_point_goodput_mbps(tcp.replace(size_mode="write", size_bytes=1024)) == \
        pytest.approx(overhead.expected_goodput_mbps(10, 1460))
    assert overhead.expected_point_goodput_mbps(tcp.replace(size_mode="transaction", size_bytes=100)) is None


# -- penalty decomposition ---------------------------------------------------------------------

def test_decompose_known_answer():
    # expected 90 vs 100 Mbit/s: the bytes explain 10 %; measured 0.7: 20 % is something else
    p = penalty.decompose(0.7, 90.0, 100.0, plain_goodput=97.0)
    assert p.penalty == pytest.approx(0.3)
    assert p.wire == pytest.approx(0.1)
    assert p.other == pytest.approx(0.2)
    assert p.plain_link_bound is True
    assert penalty.decompose(0.7, 90.0, 100.0, plain_goodput=60.0).plain_link_bound is False


def test_decompose_without_a_model_keeps_the_penalty_only():
    p = penalty.decompose(0.8, None, 100.0)
    assert p.penalty == pytest.approx(0.2) and p.wire is None and p.other is None


def test_penalty_of_a_link_bound_point_is_all_wire():
    point = dict(topology="vpn_gateway", mode="tunnel", ip_version=4, transport="tcp", rate_mbit=10.0,
                 size_bytes=500, size_mode="mss", clients=1)
    plain = overhead.expected_goodput_mbps(10, 500)
    ipsec = overhead.expected_goodput_mbps(10, 500, "aes-gcm-256", "tunnel")
    records = [Record(**point, profile=p, repetition=r, goodput_mbps=g)
               for r in range(3) for p, g in (("none", plain), ("aes-gcm-256", ipsec))]
    (ratio,) = normalize(aggregate(records))
    p = penalty.penalty_of(ratio)
    assert p.wire == pytest.approx(1 - ipsec / plain)
    assert p.other == pytest.approx(0.0, abs=1e-12)
    assert p.plain_link_bound is True


# -- claims on synthetic rows ------------------------------------------------------------------

def row(part="p", profile="none", ip=4, size=1000, rate=10.0, clients=1, limited=False, bound=None, spread=1e-4,
        n=5, **metrics) -> Row:
    """A point whose metrics have ``n`` repetitions, each with a 95 % half-width of ``spread`` of its value
    (None: one repetition, no interval)."""
    point = Group(topology="t", profile=profile, mode="tunnel", ip_version=ip, transport="tcp", rate_mbit=rate,
                  size_bytes=size, size_mode="mss", clients=clients)

    def summary(v: float) -> Summary:
        if spread is None:
            return Summary.of([v])
        ci = abs(v) * spread
        return Summary(n, v, ci * math.sqrt(n) / t_critical_95(n - 1), ci, v - ci, v + ci)

    wrapped = {k: RatioEstimate(v, None if spread is None else abs(v) * spread, None) if k == "normalized_goodput"
               else summary(v) for k, v in metrics.items()}
    return Row(point, wrapped, part=part, reference=part, mtu=1500, limited=limited, bound=bound, ratio_bound=bound)


def claim(**check):
    return {"id": "c", "statement": "s", "check": check}


def verdict(which: str) -> reproduction.ClaimVerdict:
    """A claim's verdict that is ``which`` (a claim on no data, relabelled)."""
    return dataclasses.replace(evaluate_claim(claim(metric="goodput_mbps", op="value", low=1), []), verdict=which)


def test_a_claim_is_judged_on_points_bound_as_the_seeds_were_and_otherwise_not_testable():
    # the seed's ratio was link-bound; here every point was CPU-bound: nothing to judge
    rows = [row(profile="x", size=s, bound="cpu", normalized_goodput=v) for s, v in ((800, 0.6), (1000, 0.62))]
    c = {**claim(metric="normalized_goodput", op="value", low=0.85, high=0.95),
         "seed_bound": "link", "seed_bound_reason": "tbf below the gateways' capacity"}
    got = evaluate_claim(c, rows)
    assert got.verdict == NOT_TESTABLE and got.in_range is False
    assert got.bounds == {"cpu": 2}
    assert "2 of the 2 points it rests on were bound here 2 by the emulator's CPU" in got.not_testable
    assert "tbf below the gateways' capacity" in got.not_testable
    # one link-bound point among them: the verdict rests on it alone, the others are shown and counted
    rows.append(row(profile="x", size=1400, bound="link", normalized_goodput=0.9))
    got = evaluate_claim(c, rows)
    assert got.verdict == HOLDS and (got.min, got.max) == (0.9, 0.9) and got.left_out == 2
    assert [m.judged for m in got.measured] == [False, False, True]
    assert "judged on 1 of 3 values" in got.note and "the emulator's CPU" in got.note
    # ... and fails on it when it is out of range, whatever the CPU-bound points say
    rows[-1] = row(profile="x", size=1400, bound="link", normalized_goodput=0.97)
    assert evaluate_claim(c, rows).verdict == FAILS
    # a claim that names no seed bound, or points without a class (old runs), is judged on every value
    got = evaluate_claim(claim(metric="normalized_goodput", op="value", low=0.5), rows)
    assert got.verdict == HOLDS and got.left_out == 0 and got.min == 0.6
    old = [row(profile="x", normalized_goodput=0.6)]
    assert evaluate_claim(c, old).verdict == FAILS


def test_a_mean_over_points_keeps_those_bound_as_the_seeds_were():
    rows = [row(profile="x", size=s, bound=b, normalized_goodput=v)
            for s, b, v in ((100, "cpu", 0.3), (250, "link", 0.8), (1000, "link", 0.95), (1460, "link", 0.96))]
    c = {**claim(metric="normalized_goodput", op="ratio", means=True, select={"profile": "x"},
                 num={"size_bytes": [100, 250]}, den={"size_bytes": [1000, 1460]}, high=0.999),
         "seed_bound": "link"}
    got = evaluate_claim(c, rows)
    assert got.verdict == HOLDS and got.min == pytest.approx(0.8 / 0.955)
    assert "leave out 1 points" in got.note


def test_a_cpu_claim_on_link_bound_points_is_not_testable_even_in_range():
    rows = [row(profile="x", bound="link", normalized_goodput=0.5)]
    c = {**claim(metric="normalized_goodput", op="value", low=0.4, high=0.6), "seed_bound": "cpu"}
    got = evaluate_claim(c, rows)
    assert got.verdict == NOT_TESTABLE and got.in_range is True
    assert reproduction_report.verdict_counts([got, verdict(HOLDS)]) == \
        "1 of 2 claims hold, 1 not testable here"


def test_cpu_shares_at_scaled_rates_are_not_testable():
    rows = [row(profile="none", bound="link", cpu_system_pct=2.0), row(profile="x", bound="link", cpu_system_pct=9.0)]
    c = {**claim(metric="cpu_system_pct", op="difference", num={"profile": "x"}, den={"profile": "none"}, low=5),
         "seed_bound": "link"}
    assert evaluate_claim(c, rows).verdict == HOLDS
    got = evaluate_claim(c, rows, scale=4.0)
    assert got.verdict == NOT_TESTABLE and "divided by 4" in got.not_testable


def test_scaled_rows_carry_the_seeds_rate_and_values_compare_as_shares():
    spec = MetaSweep.of(mtu=1500)
    records = [Record(topology="t", profile="none", mode="tunnel", ip_version=4, transport="tcp", rate_mbit=25.0,
                      size_bytes=1460, size_mode="mss", clients=1, repetition=r, goodput_mbps=23.5 + r * 0.1,
                      bound="link") for r in range(2)]
    (r,) = reproduction.rows_of([reproduction.MeasuredPart(MetaPart.of(name="p", spec=spec), records)], scale=4.0)
    assert r.point.rate_mbit == 100.0 and r.emulated_rate_mbit == 25.0 and r.bound == "link"
    ref = {"values": [{"id": "a", "source": "s", "quote": "94", "value": 94, "unit": "Mbit/s", "mbps_per_unit": 1,
                       "metric": "goodput_mbps", "where": {"part": "p", "rate_mbit": 100}}]}
    (v,) = reproduction.compare_values(ref, [r], scale=4.0)
    assert v.ours == pytest.approx(23.55) and v.ours_over_seed == pytest.approx(23.55 * 4 / 94)
    assert "compared as ours × 4" in v.note


def test_value_claim_holds_only_when_every_point_is_in_range():
    rows = [row(profile="x", size=s, normalized_goodput=v) for s, v in ((800, 0.9), (1000, 0.88), (500, 0.5))]
    c = claim(metric="normalized_goodput", op="value", select={"size_bytes": {"min": 751}}, low=0.85, high=0.95)
    got = evaluate_claim(c, rows)
    assert got.verdict == HOLDS and got.min == pytest.approx(0.88) and len(got.measured) == 2
    c["check"]["select"] = {}
    assert evaluate_claim(c, rows).verdict == FAILS


def test_ratio_claim_pairs_points_equal_in_every_other_key():
    rows = [row(ip=4, goodput_mbps=100.0), row(ip=6, goodput_mbps=98.0),
            row(ip=4, size=500, goodput_mbps=50.0), row(ip=6, size=500, goodput_mbps=40.0)]
    c = claim(metric="goodput_mbps", op="ratio", num={"ip_version": 6}, den={"ip_version": 4}, low=0.97, high=1.0)
    got = evaluate_claim(c, rows)
    assert sorted(m.value for m in got.measured) == pytest.approx([0.8, 0.98])
    assert got.verdict == FAILS
    c["check"]["select"] = {"size_bytes": 1000}
    assert evaluate_claim(c, rows).verdict == HOLDS


def test_difference_and_means_claims():
    rows = [row(profile="none", cpu_system_pct=2.0), row(profile="x", cpu_system_pct=12.5)]
    c = claim(metric="cpu_system_pct", op="difference", num={"profile": "x"}, den={"profile": "none"}, low=5, high=15)
    assert evaluate_claim(c, rows).measured[0].value == pytest.approx(10.5)
    rows = [row(clients=n, goodput_mbps=g) for n, g in ((1, 90.0), (2, 30.0), (3, 20.0))]
    c = claim(metric="goodput_mbps", op="ratio", means=True, num={"clients": {"min": 2}}, den={"clients": 1},
              high=0.75)
    got = evaluate_claim(c, rows)
    assert got.measured[0].value == pytest.approx(25 / 90) and got.verdict == HOLDS


def test_pairs_across_parts_ignore_the_keys_named():
    rows = [row(part="mtu3000", size=2960, goodput_mbps=99.0), row(part="throughput", size=1460, goodput_mbps=100.0)]
    c = claim(metric="goodput_mbps", op="ratio", num={"part": "mtu3000"}, den={"part": "throughput"}, low=0.97,
              high=1.03)
    assert evaluate_claim(c, rows).verdict == UNMEASURED  # sizes differ: no pair
    c["check"]["ignore"] = ["size_bytes"]
    assert evaluate_claim(c, rows).verdict == HOLDS


def test_a_claim_without_data_is_not_measured_and_counts_cpu_bound_points():
    assert evaluate_claim(claim(metric="goodput_mbps", op="value", select={"part": "nope"}, low=1),
                          [row()]).verdict == UNMEASURED
    rows = [row(profile="x", limited=True, normalized_goodput=0.5)]
    got = evaluate_claim(claim(metric="normalized_goodput", op="value", low=0.9), rows)
    assert got.verdict == FAILS and got.points_cpu_bound == 1


def test_published_values_and_transfer_ratios():
    ref = {"values": [
        {"id": "a", "source": "s", "quote": "100 Mbit/s", "value": 100, "unit": "Mbit/s", "mbps_per_unit": 1,
         "metric": "goodput_mbps", "where": {"part": "p", "profile": "none"}},
        {"id": "b", "source": "s", "quote": "5000KB", "value": 5000, "unit": "KB/s", "mbps_per_unit": 0.008192,
         "metric": "goodput_mbps", "where": {"part": "p", "profile": "x", "mode": "tunnel"}},
        {"id": "c", "source": "s", "quote": "9", "value": 9, "unit": "%", "metric": "penalty_pct", "where": {}}]}
    rows = [row(profile="none", goodput_mbps=80.0), row(profile="x", goodput_mbps=20.0)]
    values = reproduction.compare_values(ref, rows)
    assert [v.id for v in values] == ["a", "b"]  # penalty_pct is a claim's, not a table's
    assert values[1].seed_value == pytest.approx(40.96)
    assert values[1].ours_over_seed == pytest.approx(20 / 40.96)
    (ratio,) = reproduction.transfer_ratios(ref, rows)
    assert ratio.ratio == "IPsec/plain" and ratio.seed == pytest.approx(0.4096)
    assert ratio.ours == pytest.approx(0.25)


# -- a run directory end to end ------------------------------------------------------------------

def test_report_of_a_synthetic_run(tmp_path):
    from experiments.engine.sweep import SweepSpec

    spec = SweepSpec(topology="vpn_gateway", profiles=("none", "aes-cbc-128-md5"), rates_mbit=(10.0,),
                     sizes=(500, 1000), repetitions=2)
    meta = {"seed": "003", "backend": "uml", "kernel_release": "6.1.0", "cpu_model": "test CPU", "cpu_count": 1,
            "parts": [{"name": "gateway", "title": "t", "reference": "gateway", "spec": spec.to_json(),
                       "transactions": 0}]}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    part = tmp_path / "gateway"
    part.mkdir()
    lines = []
    for size in (500, 1000):
        plain = overhead.expected_goodput_mbps(10, size)
        for rep in range(2):
            for profile, share in (("none", 1.0), ("aes-cbc-128-md5", 0.9 if size == 1000 else 0.6)):
                lines.append({"topology": "vpn_gateway", "profile": profile, "mode": "tunnel", "ip_version": 4,
                              "transport": "tcp", "rate_mbit": 10.0, "size_bytes": size, "size_mode": "mss",
                              "clients": 1, "repetition": rep, "goodput_mbps": plain * share + rep * 0.01,
                              "cpu_busy_pct": 50.0, "cpu_system_pct": 20.0, "cpu_s_per_gb": 10.0 / share,
                              "emulation_limited": False, "failed": False})
    (part / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    path = reproduction_report.write_report(str(tmp_path))
    data = json.loads((tmp_path / "comparison.json").read_text())  # the file, as JSON
    evaluated = reproduction.evaluate(str(tmp_path))
    assert data == json.loads(json.dumps(evaluated.to_json(), default=str))
    assert {c.id: c.verdict for c in evaluated.claims} == {c["id"]: c["verdict"] for c in data["claims"]}
    verdicts = {c["id"]: c["verdict"] for c in data["claims"]}
    assert verdicts["ninety-percent"] == HOLDS  # 0.9 at 1000 bytes, 10 Mbit/s
    assert verdicts["small-less-efficient"] == HOLDS  # 0.6 at 500 against 0.9
    assert verdicts["cpu-small-packets"] == UNMEASURED  # no 100- or 1460-byte points
    assert {Group(**p["point"]).size_bytes for p in data["penalties"]} == {500, 1000}
    page = Path(path).read_text()
    assert "IPsec becomes less efficient" in page and page.count('class="holds"') == 2

    # the same run read as one at a quarter of the seed's rates: rows carry the seed's rate, the
    # report says the rates were scaled, and two runs compare side by side in Markdown
    scaled = tmp_path / "scaled"
    scaled.mkdir()
    (scaled / "gateway").mkdir()
    (scaled / "gateway" / "results.jsonl").write_text((part / "results.jsonl").read_text())
    (scaled / "meta.json").write_text(json.dumps({**meta, "scale": {"factor": 4.0, "how": "given: --scale 4"}}))
    data_scaled = reproduction.evaluate(str(scaled))
    assert data_scaled.scale.factor == 4.0 and data_scaled.scale_factor == 4.0
    assert "every shaped rate is the seed's divided by 4" in reproduction_report.markdown(data_scaled)
    md = reproduction_report.markdown_compared([str(tmp_path), str(scaled)], [evaluated, data_scaled])
    assert "the seed's rates" in md and "rates ÷ 4" in md and "(ninety-percent) | 0.850 .. 0.950 | link |" in md
    # two runs: whether each claim's verdict was the same in both, the last column
    same = {c.id: c.verdict == d.verdict for c, d in zip(evaluated.claims, data_scaled.claims, strict=True)}
    rows = [line for line in md.splitlines() if line.startswith("| \u201c")]
    assert "the same verdict in every run |" in md and len(rows) == len(same)
    assert [row.endswith("| yes |") for row in rows] == list(same.values())


# -- the seed scripts and their reference files --------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_script_defaults_plan_valid_parts_within_ten_minutes(seed):
    repro = catalogue.reproduction(seed)
    parts = repro.select()
    assert parts and len({p.name for p in parts}) == len(parts)
    # the plan's own estimate (UML figures) in the regimes the default plans; the measured times are in docs
    planned = reproduce.plan_regimes(parts, 1.0, reproduction.load_reference(seed))
    assert len({p.name for p in planned}) == len(planned)
    assert sum(p.estimate_seconds() for p in planned) < 8 * 60
    assert all(p.spec.repetitions >= 2 for p in parts), "a confidence interval needs 2 repetitions"


@pytest.mark.parametrize("seed", SEEDS)
def test_every_claim_and_compared_value_names_a_part_of_the_script(seed):
    repro = catalogue.reproduction(seed)
    parts = repro.select()
    names = {p.name for p in parts} | {p.reference for p in parts}
    ref = reproduction.load_reference(seed)
    for c in ref["claims"]:
        for where in (c["check"].get(k, {}) for k in ("select", "num", "den")):
            wanted = where.get("part", [])
            assert set(wanted if isinstance(wanted, list) else [wanted]) <= names, (c["id"], wanted)
    for v in ref["values"]:
        if v["metric"] in reproduction.COMPARED_METRICS and seed in ("000", "001"):
            assert v["where"]["part"] in names | {"summary"}, v["id"]


def test_parts_option_selects_and_refuses_unknown_names(tmp_path):
    from cli.reproduce import build_parser, job_from

    repro = catalogue.reproduction("000")
    argv = ["--parts", "bulk,mtu3000", "--repetitions", "4", "--bulk-seconds", "7", "--out", str(tmp_path)]
    job = job_from(repro, build_parser(repro).parse_args(argv), argv)
    parts = job.work.parts
    assert [p.name for p in parts] == ["bulk", "mtu3000"] and {p.spec.repetitions for p in parts} == {4}
    assert parts[0].spec.duration_s == 7.0  # the seed's own option reached its part
    assert job.command == ("ipsec-testbed", "reproduce", "000", *argv) and job.out_dir == str(tmp_path)
    assert type(job).loads(job.dumps()) == job  # as a guest gets it
    with pytest.raises(ValueError, match="unknown part nope"):
        repro.select(parts=["nope"])


def test_a_part_whose_keying_is_fixed_keeps_it_under_keying():
    repro = catalogue.reproduction("000")
    parts = {p.name: p for p in repro.select(keying="ike")}
    assert parts["ikev2"].spec.keying == "ike-rsa" and parts["bulk"].spec.keying == "ike"


def test_transaction_summary():
    from experiments.transactions import summarize

    t = summarize([0.001 * i for i in range(1, 101)], elapsed_s=5.05)
    assert t.count == 100 and t.mean_ms == pytest.approx(50.5) and t.median_ms == pytest.approx(50.5)
    assert t.p95_ms == pytest.approx(95.0)
    assert not math.isnan(t.elapsed_s)
    with pytest.raises(ValueError):
        summarize([], 0.0)


def test_transaction_rows_carry_their_point_and_the_ratio_to_plain():
    records = []
    for profile, ms in (("none", (1.0, 1.2)), ("3des-cbc-sha1", (2.0, 2.4))):
        for rep, mean in enumerate(ms):
            point = Point("host_to_host", profile, "transport", 4, "tcp", 100.0, 100, "transaction", 1, "", rep)
            records.append(TransactionRecord(**point.fields(), mean_ms=mean, cpu_busy_pct=50.0, cpu_system_pct=20.0))
    rows = reproduction._transaction_rows(records, {"part": "latency", "reference": "latency", "mtu": 1500})
    assert [(r.point.profile, r.part, r.point.size_mode) for r in rows] == [
        ("none", "latency", "transaction"), ("3des-cbc-sha1", "latency", "transaction")]
    assert rows[1].metrics["transaction_ms"].mean == pytest.approx(2.2)
    assert rows[1].metrics["transaction_ms_ratio"].value == pytest.approx(2.2 / 1.1)


def _transactions(profile, means, keying="static"):
    return [TransactionRecord(**Point("host_to_host", profile, "transport", 4, "tcp", 1000.0, 1000, "transaction", 1,
                                      "", rep).fields(), mean_ms=ms, cpu_busy_pct=99.0, cpu_system_pct=50.0,
                              keying=keying)
            for rep, ms in enumerate(means)]


def test_arms_measured_side_by_side_are_compared_pair_by_pair():
    # the machine slows by half after the third repetition, both arms alike: the pairs' ratios stay
    # 1.30, and so does their mean, to a narrow interval; the means' ratio counts the slowdown as noise
    plain = [0.33, 0.34, 0.33, 0.50, 0.51, 0.49]
    des3 = [0.429, 0.442, 0.429, 0.650, 0.663, 0.637]
    got = paired("ratio", dict(enumerate(des3)), dict(enumerate(plain)))
    assert got.value == pytest.approx(1.30) and got.ci95 < 0.001 and got.df == 5
    unpaired = combine("ratio", Summary.of(des3), Summary.of(plain))
    assert unpaired.ci95 > 0.2
    # only the repetitions both sides have count; fewer than two pairs, or a ratio over 0: None
    assert paired("ratio", {0: 2.0, 1: 4.0, 7: 9.0}, {0: 1.0, 1: 2.0, 3: 1.0}).value == pytest.approx(2.0)
    assert paired("ratio", {0: 2.0}, {0: 1.0}) is None and paired("ratio", {0: 1, 1: 1}, {0: 1, 1: 0}) is None
    assert paired("difference", {0: 3.0, 1: 5.0, 2: 4.0}, {0: 1.0, 1: 3.0, 2: 2.0}).value == pytest.approx(2.0)
    with pytest.raises(ValueError):
        paired("sum", {}, {})

    # seed 002's latency and keying claims on two parts measured interleaved take their pairs
    reference = reproduction.load_reference("002")
    place = {"reference": "latency", "mtu": 1500}
    static = _transactions("none", plain) + _transactions("3des-cbc-sha1", des3)
    by_ike = _transactions("3des-cbc-sha1", [x * 1.02 for x in des3], keying="ike")
    rows = (reproduction._transaction_rows(static, {"part": "latency", **place})
            + reproduction._transaction_rows(by_ike, {"part": "latency_ike", **place}))
    claims = {c["id"]: c for c in reference["claims"]}
    latency = evaluate_claim(claims["latency"], rows)
    assert latency.verdict == FAILS and latency.ci95 < 0.001 and latency.min == pytest.approx(1.30)
    keying = evaluate_claim(claims["keying"], rows)
    assert keying.verdict == HOLDS and keying.min == pytest.approx(1.02)
    (des3_row,) = [r for r in rows if r.part == "latency" and r.point.profile != "none"]
    assert des3_row.metrics["transaction_ms_ratio"].value == pytest.approx(1.30)


def test_ipsec_over_plain_is_taken_round_by_round_where_the_sweep_measured_them_side_by_side(tmp_path):
    # CPU-bound points on a machine whose speed moves from round to round: each round IPsec keeps 0.70 of
    # plain; the ratio of the means would count the machine's moves as noise, the rounds' ratios do not
    _seed003_run(tmp_path, (0.9, 0.9))  # its meta.json; the results are written below
    lines = []
    for rep, speed in enumerate((1.0, 0.6, 0.8, 1.2)):
        for profile, share in (("none", 1.0), ("aes-cbc-128-md5", 0.70)):
            lines.append({**_record(profile, 1000, rep, 9.0 * speed * share), "bound": "cpu"})
    (tmp_path / "gateway" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    _, measured = reproduction.load_run(str(tmp_path))
    (ipsec,) = [r for r in reproduction.rows_of(measured) if r.point.profile != "none"]
    got = ipsec.metrics["normalized_goodput"]
    assert got.value == pytest.approx(0.70) and got.ci95 == pytest.approx(0.0, abs=1e-9)
    goodput = [r.metrics["goodput_mbps"] for r in reproduction.rows_of(measured)]
    assert combine("ratio", goodput[1], goodput[0]).ci95 > 0.3  # what the means would have said
    # a round whose plain point is missing is left out of the pairs (three remain)
    (tmp_path / "gateway" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines[1:]))
    _, measured = reproduction.load_run(str(tmp_path))
    (ipsec,) = [r for r in reproduction.rows_of(measured) if r.point.profile != "none"]
    assert ipsec.metrics["normalized_goodput"].df == 2


def test_two_points_of_one_part_compare_round_by_round_and_points_of_two_parts_do_not(tmp_path):
    # seed 000's IPv6-against-IPv4 UDP loss: the offered load moves the loss of both from round to round
    _seed003_run(tmp_path, (0.9, 0.9))  # its meta.json; the results are written below
    lines = [{**_record("none", 1000, rep, 5.0), "ip_version": ip, "loss_pct": load + (1.0 if ip == 6 else 0.0)}
             for rep, load in enumerate((10.0, 30.0, 20.0)) for ip in (4, 6)]
    (tmp_path / "gateway" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    _, measured = reproduction.load_run(str(tmp_path))
    rows = reproduction.rows_of(measured)
    check = claim(metric="loss_pct", op="difference", num={"ip_version": 6}, den={"ip_version": 4}, low=0.5)
    got = evaluate_claim(check, rows)
    assert got.verdict == HOLDS and got.ci95 == pytest.approx(0.0, abs=1e-9) and got.min == pytest.approx(1.0)
    # the same points as two parts (measured apart): the means' interval, which the load's moves widen
    v4, v6 = sorted(rows, key=lambda r: r.point.ip_version)
    apart = [dataclasses.replace(v4, part="a"), dataclasses.replace(v6, part="b", by_repetition={
        k: {("b", rep): x for (_, rep), x in v.items()} for k, v in v6.by_repetition.items()})]
    got = evaluate_claim(claim(metric="loss_pct", op="difference", num={"part": "b"}, den={"part": "a"}, low=0.5,
                               ignore=["ip_version"]), apart)
    assert got.verdict == UNDECIDED and got.ci95 > 20


def _tx_part(name, profiles, repetitions, keying="static", topology="host_to_host"):
    from experiments.engine.plan import SweepSpec
    from experiments.job import Part

    return Part(name, name, SweepSpec(topology=topology, mode="transport", profiles=profiles, keying=keying,
                                      plain="none" in profiles, rates_mbit=(1000.0,), sizes=(100,),
                                      repetitions=repetitions), transactions=1000)


def test_transactions_parts_of_one_network_are_measured_interleaved_abba():
    latency = _tx_part("latency", ("none", "3des-cbc-sha1"), 3)
    ike = _tx_part("latency_ike", ("3des-cbc-sha1",), 2, keying="ike")
    other = _tx_part("elsewhere", ("none",), 1, topology="vpn_gateway")
    assert [[p.name for p in g] for g in reproduce.transaction_groups([latency, other, ike])] == [
        ["latency", "latency_ike"], ["elsewhere"]]
    got = [(part.name, point.profile, point.repetition) for part, point in reproduce.plan_transactions([latency, ike])]
    assert got == [("latency", "none", 0), ("latency", "3des-cbc-sha1", 0), ("latency_ike", "3des-cbc-sha1", 0),
                   ("latency_ike", "3des-cbc-sha1", 1), ("latency", "3des-cbc-sha1", 1), ("latency", "none", 1),
                   ("latency", "none", 2), ("latency", "3des-cbc-sha1", 2)]
    with pytest.raises(ValueError, match="not one network"):
        reproduce.run_transactions([latency, other], "/nonexistent")


def test_a_deciding_round_brings_every_transactions_part_of_a_network_to_the_same_repetitions(monkeypatch):
    latency = _tx_part("latency", ("none", "3des-cbc-sha1"), 10)
    ike = _tx_part("latency_ike", ("3des-cbc-sha1",), 10, keying="ike")
    calls = []
    monkeypatch.setattr(reproduce, "run_transactions",
                        lambda parts, out_dir, progress=None: calls.append(
                            [(p.name, p.spec.repetitions) for p in parts]) or {"measured": 3})
    assert reproduce.measure_focus({"latency": {("latency",): 11}}, [latency, ike], "/run", ()) == 3
    assert calls == [[("latency", 11), ("latency_ike", 11)]]


def test_transaction_records_are_read_back_as_written(tmp_path):
    # the writer (experiments.reproduce.run_transactions) gives a record every field of a Timing
    assert {f.name for f in dataclasses.fields(Timing)} <= {f.name for f in dataclasses.fields(TransactionRecord)}
    point = Point("host_to_host", "none", "transport", 4, "tcp", 100.0, 100, "transaction", 1, "", 0)
    record = TransactionRecord(**point.fields(), count=100, elapsed_s=0.2, mean_ms=2.0, median_ms=1.9, p95_ms=3.0,
                               cpu_busy_pct=50.0)
    line = json.dumps({**record.to_json(), "schema": 2})
    (tmp_path / "results.jsonl").write_text(line + "\n" + line[:40])  # and a partial line a killed run left
    assert load_existing(tmp_path, required=(), kind=TransactionRecord) == [record]
    assert load_existing(tmp_path / "none", required=(), kind=TransactionRecord) == []
    (tmp_path / "results.jsonl").write_text(json.dumps({**record.to_json(), "colour": "red"}) + "\n")
    with pytest.raises(ResultsError, match="not a transactions record's fields: colour"):
        load_existing(tmp_path, required=(), kind=TransactionRecord)


def test_verdict_counts_reads_as_a_sentence():
    claims = [verdict(HOLDS), verdict(FAILS), verdict(UNMEASURED), verdict(HOLDS)]
    assert reproduction_report.verdict_counts(claims) == "2 of 4 claims hold, 1 does not, 1 not measured by this run"
    assert reproduction_report.verdict_counts([verdict(HOLDS)]) == "1 of 1 claim holds"


def test_the_seeds_own_cpu_is_not_called_the_emulators():
    rows = [row(profile="x", size=s, bound="link", normalized_goodput=v) for s, v in ((800, 0.6), (1000, 0.62))]
    c = {**claim(metric="normalized_goodput", op="value", low=0.85, high=0.95), "seed_bound": "cpu",
         "seed_bound_reason": "a 2002 Pentium III"}
    text = evaluate_claim(c, rows).not_testable
    assert "2 by the shaped link" in text and "the seed's were bound by the seed's own CPU" in text
    assert "emulator" not in text
    # ... nor in the note of a claim judged on part of its values, nor in that of a mean
    rows.append(row(profile="x", size=1400, bound="cpu", normalized_goodput=0.5))
    got = evaluate_claim({**c, "check": {**c["check"], "low": 0.4, "high": 0.6}}, rows)
    assert got.verdict == HOLDS and got.note.endswith("the seed's by the seed's own CPU"), got.note
    assert "unshaped" not in got.regime and "the seed's rates (10 Mbit/s)" in got.regime
    means = {**claim(metric="normalized_goodput", op="ratio", means=True, num={"size_bytes": 1400},
                     den={"size_bytes": [800, 1000, 1400]}, high=2.0), "seed_bound": "cpu"}
    assert evaluate_claim(means, rows).note.endswith("(by the seed's own CPU)")
    # a claim not testable says at what it was measured nowhere as "judged at"
    assert evaluate_claim(c, rows[:2]).regime == ""


def test_claims_print_as_blocks_with_the_verdict_and_numbers_on_one_line_at_80_columns(tmp_path):
    import io
    import shutil

    from rich.console import Console

    run = tmp_path / "seed002"
    shutil.copytree(os.path.join(REPO, "examples", "runs", "seed002"), run)
    data = reproduction.evaluate(str(run))
    out = io.StringIO()
    reproduction_report.print_claims(Console(file=out, width=80), data)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("Seed 002: Claims (") and all(len(line) <= 80 for line in lines)
    for c in data.claims:  # each claim's verdict, id and measured value start one line
        head = next(line for line in lines if f"{c.id}: measured" in line)
        assert head.startswith(c.verdict.upper())
    assert any(line.strip().startswith("\u201c") for line in lines)  # the seed's words, folded below


# -- verdicts with confidence ------------------------------------------------------------------

def test_combine_gives_welch_intervals_for_two_summaries_and_adds_estimates_in_quadrature():
    a, b = Summary.of([10.0, 12.0, 11.0]), Summary.of([5.0, 5.5, 4.5, 5.0])
    d = combine("difference", a, b)
    se = math.sqrt(a.std ** 2 / 3 + b.std ** 2 / 4)
    df = se ** 4 / ((a.std ** 2 / 3) ** 2 / 2 + (b.std ** 2 / 4) ** 2 / 3)
    assert d.value == pytest.approx(6.0) and d.ci95 == pytest.approx(t_critical_95(df) * se)
    assert combine("ratio", a, b) == reproduction.ratio_of_means(a, b)
    r = combine("ratio", RatioEstimate(0.9, 0.009, None), RatioEstimate(0.5, 0.005, None))
    assert r.value == pytest.approx(1.8) and r.ci95 == pytest.approx(1.8 * math.hypot(0.01, 0.01))
    assert combine("difference", RatioEstimate(1.0, 0.3, None), Summary.of([0.5, 0.5])).ci95 == pytest.approx(0.3)
    assert combine("ratio", RatioEstimate(1.0, None, None), RatioEstimate(2.0, 0.1, None)).ci95 is None
    m = mean_of([RatioEstimate(1.0, 0.3, None), RatioEstimate(2.0, 0.4, None)])
    assert (m.value, m.ci95) == (pytest.approx(1.5), pytest.approx(0.25))
    with pytest.raises(ValueError):
        combine("sum", a, b)


def test_position_and_the_repetitions_that_would_decide_a_value():
    assert reproduction.position(0.95, 0.005, 0.94, 0.97) == reproduction.INSIDE
    assert reproduction.position(0.95, 0.02, 0.94, 0.97) == reproduction.STRADDLES
    assert reproduction.position(0.90, 0.02, 0.94, 0.97) == reproduction.OUTSIDE
    assert reproduction.position(1.2, 0.1, 1.0, math.inf) == reproduction.INSIDE
    assert reproduction.position(0.95, None, 0.0, 1.0) == reproduction.STRADDLES  # one repetition: no interval
    # 0.02 at n=3 is a spread of 0.02 sqrt(3) / t(2) = 0.00805; 0.01 from the bound: t(n-1) 0.00805 / sqrt(n)
    # is 0.0128 at n=4 and 0.00999 at n=5
    assert reproduction.repetitions_to_decide(0.95, 0.02, 3, 0.94, 0.97) == 5
    assert reproduction.repetitions_to_decide(0.95, 0.0101, 3, 0.94, 0.97) == 4  # at least one more
    assert reproduction.repetitions_to_decide(0.95, 0.02, 1, 0.94, 0.97) is None
    assert reproduction.repetitions_to_decide(0.9401, 0.5, 3, 0.94, 0.97) is None  # beyond MOST_TO_DECIDE
    assert reproduction.repetitions_to_decide(0.94, 0.02, 3, 0.94, 0.97) is None  # on the bound
    assert reproduction.repetitions_to_decide(0.95, None, 1, 0.94, 0.97) is None


def test_a_claim_holds_only_when_every_interval_lies_in_its_range_and_is_undecided_when_one_straddles():
    c = claim(metric="normalized_goodput", op="value", low=0.94, high=0.97)
    assert evaluate_claim(c, [row(profile="x", normalized_goodput=0.955, spread=0.005)]).verdict == HOLDS
    # the same mean, a wider interval: neither holds nor fails (the flip between two runs the verdict made before)
    rows = [row(profile="x", normalized_goodput=0.955, goodput_mbps=8.6, spread=0.03, n=3),
            row(profile="none", goodput_mbps=9.0)]
    got = evaluate_claim(c, rows)
    assert got.verdict == UNDECIDED and got.in_range is True
    assert got.measured[0].position == reproduction.STRADDLES and got.measured[0].repetitions == 3
    spread = 0.955 * 0.03 * math.sqrt(3) / t_critical_95(2)
    assert got.decide_repetitions == min(n for n in range(2, 100) if t_critical_95(n - 1) * spread / math.sqrt(n)
                                         <= 0.015)
    assert "0.955 ± 0.0286 straddles 0.94 and 0.97" in got.undecided
    assert f"about {got.decide_repetitions} repetitions" in got.undecided
    assert [d["profile"] for d in got.deciding] == ["x"]
    # one value wholly outside decides it, whatever another straddles
    rows.append(row(profile="x", size=500, normalized_goodput=0.80, spread=0.01))
    assert evaluate_claim(c, rows).verdict == FAILS
    # one repetition: no interval, undecided, and it says so
    got = evaluate_claim(c, [row(profile="x", normalized_goodput=0.955, spread=None)])
    assert got.verdict == UNDECIDED and got.decide_repetitions is None and "no interval" in got.undecided


def test_an_undecided_ratio_names_both_points_it_rests_on():
    rows = [row(ip=4, goodput_mbps=100.0, spread=0.02, n=3), row(ip=6, goodput_mbps=98.5, spread=0.02, n=3)]
    c = claim(metric="goodput_mbps", op="ratio", num={"ip_version": 6}, den={"ip_version": 4}, low=0.97, high=1.0)
    got = evaluate_claim(c, rows)
    assert got.verdict == UNDECIDED and sorted(d["ip_version"] for d in got.deciding) == [4, 6]
    assert reproduction_report.verdict_counts([got, verdict(HOLDS)]) == "1 of 2 claims hold, 1 undecided"


def _seed003_run(tmp_path, shares):
    """A seed-003 run directory: the gateway part at 10 Mbit/s, 500 and 1000 B, two repetitions; the
    IPsec point at 1000 B with the goodput shares ``shares`` (one per repetition)."""
    from experiments.engine.sweep import SweepSpec
    from experiments.job import Part

    spec = SweepSpec(topology="vpn_gateway", profiles=("none", "aes-cbc-128-md5"), rates_mbit=(10.0,),
                     sizes=(500, 1000), repetitions=2)
    part = Part("gateway", "t", spec, reference="gateway")
    meta = {"seed": "003", "backend": "uml", "kernel_release": "6.1.0", "cpu_model": "test CPU", "cpu_count": 1,
            "parts": [part.to_json()]}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    (tmp_path / "gateway").mkdir()
    lines = []
    for size in (500, 1000):
        plain = overhead.expected_goodput_mbps(10, size)
        for rep, share in enumerate(shares):
            for profile, s in (("none", 1.0), ("aes-cbc-128-md5", share if size == 1000 else 0.6)):
                lines.append(_record(profile, size, rep, plain * s + rep * 0.001))
    (tmp_path / "gateway" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return [part]


def _record(profile, size, rep, goodput):
    return {"topology": "vpn_gateway", "profile": profile, "mode": "tunnel", "ip_version": 4, "transport": "tcp",
            "rate_mbit": 10.0, "size_bytes": size, "size_mode": "mss", "clients": 1, "repetition": rep,
            "goodput_mbps": goodput, "cpu_busy_pct": 50.0, "bound": "link", "failed": False}


def test_an_undecided_claims_points_get_one_more_repetition_a_round_until_it_is_decided(tmp_path, monkeypatch, capsys):
    from experiments import reproduce

    parts = _seed003_run(tmp_path, (0.93, 0.96))  # ninety-percent: 0.945 ± 0.19, astride 0.95
    (c,) = [c for c in reproduction.evaluate(str(tmp_path)).claims if c.id == "ninety-percent"]
    assert c.verdict == UNDECIDED
    plan = reproduce.plan_round_for(c, parts, str(tmp_path))
    # the IPsec point at 1000 B and its plain baseline, each to a third repetition; nothing at 500 B
    assert sorted((k[1], k[6], n) for k, n in plan["gateway"].items()) == [("aes-cbc-128-md5", 1000, 3),
                                                                           ("none", 1000, 3)]
    plain = overhead.expected_goodput_mbps(10, 1000)
    rounds = []

    def measure(focus, parts, out_dir, command_line):  # stands in for the network: quiet repetitions at 0.92
        rounds.append(focus)
        with open(tmp_path / "gateway" / "results.jsonl", "a") as f:
            for key, n in focus["gateway"].items():
                share = 1.0 if key[1] == "none" else 0.92
                f.write(json.dumps(_record(key[1], key[6], n - 1, plain * share)) + "\n")
        return len(focus["gateway"])

    monkeypatch.setattr(reproduce, "measure_focus", measure)
    got = reproduce.decide(parts, str(tmp_path), started_unix=time.time(), budget_s=600)
    assert got["rounds"] == len(rounds) >= 1 and got["measured"] == 2 * got["rounds"]
    (c,) = [c for c in reproduction.evaluate(str(tmp_path)).claims if c.id == "ninety-percent"]
    assert c.verdict in (HOLDS, FAILS)
    assert "every claim decided" in capsys.readouterr().err

    # a round that measures nothing (every attempt failed) ends the deciding, said
    stuck = tmp_path / "stuck"
    stuck.mkdir()
    parts = _seed003_run(stuck, (0.93, 0.96))
    monkeypatch.setattr(reproduce, "measure_focus", lambda *args: 0)
    assert reproduce.decide(parts, str(stuck), started_unix=time.time(), budget_s=600) == {"rounds": 1, "measured": 0}
    assert "deciding round 1 measured nothing" in capsys.readouterr().err

    # a budget that cannot pay for what deciding would take: nothing measured, what it would take said
    other = tmp_path / "other"
    other.mkdir()
    parts = _seed003_run(other, (0.93, 0.96))
    rounds.clear()
    got = reproduce.decide(parts, str(other), started_unix=time.time(), budget_s=5)
    assert got == {"rounds": 0, "measured": 0} and not rounds
    err = capsys.readouterr().err
    assert "undecided: ninety-percent: about" in err and "min of the time budget left (--budget)" in err


def test_a_sweep_focus_measures_only_the_points_named_up_to_their_repetitions():
    from experiments.engine import sweep
    from experiments.engine.sweep import SweepSpec

    spec = SweepSpec(topology="vpn_gateway", profiles=("none", "aes-gcm-256"), rates_mbit=(10.0,), sizes=(500, 1000),
                     repetitions=2)
    records = [Record(**{k: v for k, v in _record(p, s, r, 9.0).items()}) for p in ("none", "aes-gcm-256")
               for s in (500, 1000) for r in range(2)]
    groups = sweep.by_point(records)
    assert sweep._next_round(spec, 10.0, groups) == []  # the spec's own rule: nothing more
    key = next(k for k in groups if k[1] == "aes-gcm-256" and k[6] == 1000)
    todo = sweep._next_round(spec, 10.0, groups, focus={key: 3})
    assert [(p.point_key(), p.repetition) for p in todo] == [(key, 2)]
    assert sweep._next_round(spec, 10.0, groups, focus={key: 2}) == []
    assert sweep.needs_focus(groups[key], 3) and not sweep.needs_focus(groups[key], 2)


# -- the seed's regime, per claim --------------------------------------------------------------

def test_parts_are_planned_in_the_regimes_their_claims_rest_on():
    from experiments.engine.sweep import SweepSpec
    from experiments.job import Part

    spec = SweepSpec(topology="host_to_host", mode="transport", rates_mbit=(100.0, 10.0), sizes=(1000,))
    parts = [Part("a", "A", spec), Part("b", "B", spec), Part("c", "C", spec), Part("t", "T", spec, transactions=10)]
    ref = {"claims": [
        {"seed_bound": "cpu", "check": {"select": {"part": "a"}}},
        {"seed_bound": "cpu", "check": {"num": {"part": "b"}, "den": {"part": ["c"]}}},
        {"seed_bound": "link", "check": {"select": {"part": "c"}}},
        {"check": {"select": {"part": "t"}}}]}
    assert reproduce.claim_kinds(parts, ref) == {"a": {"cpu"}, "b": {"cpu"}, "c": {"cpu", "link"}, "t": {""}}
    planned = {p.name: p for p in reproduce.plan_regimes(parts, 4.0, ref)}
    # a part of CPU claims only runs unshaped; one of both kinds in both; a transactions part scaled
    assert sorted(planned) == ["a_cpu", "b_cpu", "c", "c_cpu", "t"]
    cpu = planned["a_cpu"]
    assert (cpu.regime, cpu.reference, cpu.seed_rate_mbit) == ("cpu", "a", 100.0)
    assert cpu.spec.rates_mbit == (reproduce.CPU_REGIME_MBIT,)
    assert planned["c"].regime == "link" and planned["c"].spec.rates_mbit == (25.0, 2.5)
    assert planned["t"].spec.rates_mbit == (25.0, 2.5)
    # a claim that names no part rests on every part
    assert reproduce.claim_kinds(parts[:2], {"claims": [{"seed_bound": "cpu", "check": {}}]}) == \
        {"a": {"cpu"}, "b": {"cpu"}}
    again = Part.from_json(json.loads(json.dumps(cpu.to_json())))
    assert again == cpu


def test_unshaped_rows_stand_for_the_seeds_rate_and_carry_cpu_shares_at_scaled_runs():
    records = [Record(topology="t", profile=p, mode="tunnel", ip_version=4, transport="tcp",
                      rate_mbit=10000.0, size_bytes=1000, size_mode="mss", clients=1, repetition=r,
                      goodput_mbps=g + r * 0.5, cpu_busy_pct=94.0 + r * 0.5, bound="cpu")
               for p, g in (("none", 900.0), ("x", 300.0)) for r in range(3)]
    part = MetaPart.of(name="p_cpu", reference="p", spec=MetaSweep.of(mtu=1500), regime="cpu", seed_rate_mbit=100.0)
    rows = reproduction.rows_of([reproduction.MeasuredPart(part, records)], scale=8.0)
    assert {(r.point.rate_mbit, r.emulated_rate_mbit, r.regime) for r in rows} == {(100.0, 10000.0, "cpu")}
    assert all(r.unshaped for r in rows) and rows[0].where_values()["regime"] == "cpu"
    # a CPU share in a run at scaled rates: judged on the unshaped points (the seed's CPU-bound regime)
    c = {**claim(metric="cpu_busy_pct", op="value", select={"part": "p", "profile": "x"}, low=90, high=100),
         "seed_bound": "cpu"}
    got = evaluate_claim(c, rows, scale=8.0)
    assert got.verdict == HOLDS and "unshaped (10000 Mbit/s here)" in got.regime
    shaped = [dataclasses.replace(r, regime="") for r in rows]
    assert evaluate_claim(c, shaped, scale=8.0).verdict == NOT_TESTABLE
    # a ratio pairs points of one regime only
    both = rows + [dataclasses.replace(r, regime="link", emulated_rate_mbit=12.5) for r in rows]
    ratio = claim(metric="goodput_mbps", op="ratio", num={"profile": "x"}, den={"profile": "none"}, high=0.5)
    assert len(evaluate_claim(ratio, both, scale=8.0).measured) == 2
    # a published figure is set beside the shaped point where a part was measured in both regimes
    ref = {"values": [{"id": "v", "source": "s", "quote": "q", "value": 90, "unit": "Mbit/s", "metric": "goodput_mbps",
                       "where": {"part": "p", "profile": "none"}}]}
    (v,) = reproduction.compare_values(ref, both, scale=8.0)
    assert v.ours == pytest.approx(900.5) and "compared as ours × 8" in v.note
    (v,) = reproduction.compare_values(ref, rows, scale=8.0)  # the unshaped one alone: as measured
    assert v.note.startswith("measured unshaped") and v.ours_over_seed == pytest.approx(900.5 / 90)


def test_a_finished_reproduction_writes_its_report_and_prints_its_claims(tmp_path, capsys):
    from cli.sweep import finish
    from experiments.job import Job, ReproductionWork

    parts = _seed003_run(tmp_path, (0.90, 0.901))
    job = Job(ReproductionWork("003", tuple(parts), None), out_dir=str(tmp_path))
    assert finish(job, "ipsec-testbed reproduce 003", 0) == 0
    assert (tmp_path / "comparison.json").exists() and (tmp_path / "report.html").exists()
    assert "Seed 003: Claims" in capsys.readouterr().out


def test_the_calibration_covers_every_shaped_parts_heaviest_point_each_transport_once():
    from experiments.calibrate import heaviest_points, nice_factor

    parts = catalogue.reproduction("000").select()
    points = heaviest_points(parts)
    keys = [(h.point, h.mtu, h.pmtu, h.udp_bitrate) for h in points]
    assert len(keys) == len(set(keys))
    # TCP and UDP each at their part's smallest size; the IPComp parts and the MTU-3000 network too
    assert {h.point.transport for h in points} == {"tcp", "udp"}
    assert {h.mtu for h in points} == {1500, 3000}
    assert any(h.point.profile.endswith("+ipcomp") and h.point.transport == "udp" for h in points)
    assert all(h.point.rate_mbit == max(max(p.spec.rates_mbit) for p in parts if p.name == h.part) for h in points)
    assert (nice_factor(7.2), nice_factor(11), nice_factor(0.5)) == (8.0, 12.5, 1.0)
    # seed 002: the parts whose claims rest on the seed's CPU run unshaped, so they are not calibrated
    seed2 = catalogue.reproduction("002").select()
    shaped = reproduce.shaped_parts(seed2, reproduction.load_reference("002"))
    assert {p.name for p in shaped} == {"3hgh", "3h2h", "latency", "latency_ike"}


def test_an_arms_blocks_add_up_to_its_repetition():
    t = reproduce._ArmTotals()
    t.add([0.001] * 200, 0.25, 240_000_000, 250_000_000, (96.0, 40.0, 10.0), None)
    t.add([0.002] * 200, 0.75, 700_000_000, 750_000_000, (100.0, 60.0, 20.0), ["sa"])
    assert len(t.times) == 400 and t.elapsed_s == 1.0 and (t.cpu_ns, t.clock_ns) == (940_000_000, 1_000_000_000)
    assert t.shares() == {"cpu_kernel_busy_pct": pytest.approx(99.0), "cpu_system_pct": pytest.approx(55.0),
                          "cpu_softirq_pct": pytest.approx(17.5)}
    assert t.ike_sas == ["sa"] and reproduce._blocks(1000) == [200] * 5 and reproduce._blocks(7) == [2, 2, 1, 1, 1]
    assert reproduce._blocks(3) == [1, 1, 1]

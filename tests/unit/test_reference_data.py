"""The published numbers in analysis/reference/seed*.json, checked against the documents they come from.

Every value carries a short verbatim quote and a longer verbatim anchor around it. With the documents
at hand ($IPSEC_TESTBED_SEEDS, else shared/seeds beside the repository) each anchor must occur exactly
once in its document; without them those tests are skipped, or fail if IPSEC_TESTBED_REQUIRE_SEEDS=1.
The rest (schema, vocabulary, the number each quote states, unit conversions, complete tables,
hand-checked answers, agreement between a document's tables and its own prose) needs only the JSON.
"""
from __future__ import annotations

import functools
import itertools
import json
import math
import os
import re

import pytest

from ipsec.profiles import CATALOG
from topologies import TOPOLOGIES

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REFERENCE = os.path.join(REPO, "analysis", "reference")
SEEDS = ("000", "001", "002", "003", "004")

KB_PER_S_IN_MBPS = 1024 * 8 / 1e6  # netio's KB is 1024 bytes
MBPS_PER_UNIT = {"Mbit/s": 1, "KB/s": KB_PER_S_IN_MBPS}
METRIC_UNITS = {
    "goodput_mbps": {"Mbit/s", "KB/s"}, "rate_mbit": {"Mbit/s"},
    "loss_pct": {"%"}, "cpu_system_pct": {"%"}, "cpu_busy_pct": {"%"}, "penalty_pct": {"%"}, "ratio_pct": {"%"},
    "size_bytes": {"bytes", "kb"}, "count": {"clients", "runs", "transactions"}, "duration_s": {"s", "min", "ms"},
}
PARTS = {"throughput", "bulk", "annex_tunnel", "annex_transport", "summary",  # 000
         "netio",  # 001
         "ttcp", "latency",  # 002
         "user_categories", "high_powered", "payload_size", "shaping", "conclusion",  # 003
         "tests", "testbed", "results"}  # 004


def positive_int(v: object) -> bool:
    return type(v) is int and v > 0


WHERE = {
    "part": PARTS.__contains__,
    "transport": {"tcp", "udp"}.__contains__,
    "ip_version": lambda v: type(v) is int and v in (4, 6),
    "mode": {"tunnel", "transport"}.__contains__,
    "profile": {n.name for n in CATALOG}.__contains__,
    "topology": TOPOLOGIES.__contains__,
    "compare": {"ipsec/plain", "ipv6/ipv4", "ipcomp/no-ipcomp", "ipsec-plain"}.__contains__,
    "encrypted": lambda v: type(v) is bool,
    "size": {"small"}.__contains__,
    "size_bytes": positive_int,
    "clients": positive_int,
}
REQUIRED = {"id", "source", "quote", "anchor", "value", "unit", "metric", "where"}
OPTIONAL = {"mbps_per_unit", "conversion", "note"}


# -- data -------------------------------------------------------------------------------------
@functools.cache
def reference(seed: str) -> dict:
    with open(os.path.join(REFERENCE, f"seed{seed}.json"), encoding="utf-8") as f:
        return json.load(f)


def values(seed: str, metric: str | None = None, **where: object) -> list[dict]:
    """The values of a seed with this metric whose "where" has all these items."""
    return [v for v in reference(seed)["values"] if metric in (None, v["metric"])
            and all(k in v["where"] and v["where"][k] == w and type(v["where"][k]) is type(w)
                    for k, w in where.items())]


def the(seed: str, metric: str, **where: object) -> float:
    """The one value matching; in Mbit/s for throughputs."""
    found = values(seed, metric, **where)
    assert len(found) == 1, f"{len(found)} values in seed {seed} match {metric} {where}"
    return found[0]["value"] * found[0].get("mbps_per_unit", 1)


ALL = [(seed, v) for seed in SEEDS for v in reference(seed)["values"]]
ALL_IDS = [f"{seed}:{v['id']}" for seed, v in ALL]


@pytest.fixture(scope="session")
def seeds_dir() -> str:
    path = os.environ.get("IPSEC_TESTBED_SEEDS") or os.path.join(os.path.dirname(REPO), "shared", "seeds")
    if not os.path.isdir(path):
        reason = f"source documents not found at {path} (set IPSEC_TESTBED_SEEDS to their directory)"
        if os.environ.get("IPSEC_TESTBED_REQUIRE_SEEDS") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def document(seeds: str, seed: str) -> str:
    with open(os.path.join(seeds, reference(seed)["file"]), encoding="utf-8") as f:
        return f.read()


# -- what a quote says ------------------------------------------------------------------------
PHRASES = {"no datagrams lost": 0, "less than 1%": 1}
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}
NUMBER = r"\d[\d,]*(?:\.\d+)?"


def stated(quote: str, value_id: str) -> float:
    """The number a quote states ('~0.004% lost', '10905KB', 'five minutes', ...); of a range
    such as '4~5%', the low end for an id ending in -low, the high end for -high."""
    if quote in PHRASES:
        return PHRASES[quote]
    span = re.fullmatch(rf"[^\d]*({NUMBER})~({NUMBER})[^\d]*", quote)
    if span:
        assert value_id.endswith(("-low", "-high")), f"a range quote needs a -low or -high id: {value_id}"
        return float(span.group(1 if value_id.endswith("-low") else 2))
    numbers = [float(n.replace(",", "")) for n in re.findall(NUMBER, quote)]
    numbers += [WORDS[w] for w in re.findall(r"[a-z]+", quote.lower()) if w in WORDS]
    assert len(numbers) == 1, f"quote {quote!r} states {len(numbers)} numbers"
    return numbers[0]


def occurrences(text: str, quote: str) -> int:
    """How often quote occurs in text other than as part of a longer number."""
    before = r"(?<!\d)(?<!\d\.)" if quote[0].isdigit() else ""
    after = r"(?!\d)(?!\.\d)" if quote[-1].isdigit() else ""
    return len(re.findall(rf"{before}(?={re.escape(quote)}{after})", text))


def test_the_quote_reader_on_each_form():
    assert stated("930 Mbit/s", "x") == 930 and stated("5305 KB", "x") == 5305
    assert stated("~0.00045% lost", "x") == 0.00045 and stated("cpu%sys: 11.8", "x") == 11.8
    assert (stated("4~5%", "a-low"), stated("4~5%", "a-high")) == (4, 5)
    assert stated("no datagrams lost", "x") == 0 and stated("less than 1%", "x") == 1
    assert stated("five minutes", "x") == 5 and stated("34mbit", "x") == 34
    with pytest.raises(AssertionError):
        stated("4~5%", "no-end")
    with pytest.raises(AssertionError):
        stated("1KB10905KB", "x")
    assert occurrences("1000, 750, 500, 250 and 100 all", "100") == 1
    assert occurrences("cpu%sys: 12.1", "2.1") == 0 and occurrences("1KB10905KB5157KB", "10905KB") == 1


# -- every file, every value ------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_file_header(seed):
    data = reference(seed)
    assert set(data) - {"note"} == {"seed", "file", "title", "setup", "values", "claims"}
    assert data["seed"] == seed and re.fullmatch(rf"{seed}_[0-9a-f]{{16}}\.txt", data["file"])
    assert data["title"] or data.get("note"), "a document without a title needs a note saying so"
    assert len(data["setup"]) > 40 and data["values"]
    ids = [v["id"] for v in data["values"]]
    assert len(ids) == len(set(ids)), f"repeated ids: {sorted(i for i in ids if ids.count(i) > 1)}"


@pytest.mark.parametrize("seed, v", ALL, ids=ALL_IDS)
def test_value_shape_and_vocabulary(seed, v):
    assert REQUIRED <= set(v) <= REQUIRED | OPTIONAL, set(v) ^ REQUIRED
    assert re.fullmatch(r"[a-z0-9][a-z0-9+.-]*", v["id"])
    assert all(isinstance(v[k], str) and v[k] for k in ("source", "quote", "anchor", "unit"))
    assert 20 <= len(v["anchor"]) <= 200
    assert isinstance(v["value"], (int, float)) and not isinstance(v["value"], bool)
    assert v["unit"] in METRIC_UNITS[v["metric"]], f"{v['unit']} is no unit of {v['metric']}"
    bad = {k: w for k, w in v["where"].items() if k not in WHERE or not WHERE[k](w)}
    assert v["where"] and not bad, f"where keys or values outside the vocabulary: {bad}"
    if v["metric"] == "goodput_mbps":
        assert v["mbps_per_unit"] == MBPS_PER_UNIT[v["unit"]]
        assert (v["mbps_per_unit"] == 1) != bool(v.get("conversion")), "a conversion is explained iff not 1"
    else:
        assert "mbps_per_unit" not in v and "conversion" not in v


@pytest.mark.parametrize("seed, v", ALL, ids=ALL_IDS)
def test_quote_states_the_value_once_in_its_anchor(seed, v):
    assert occurrences(v["anchor"], v["quote"]) == 1, f"{v['quote']!r} must occur once in {v['anchor']!r}"
    assert math.isclose(stated(v["quote"], v["id"]), v["value"], rel_tol=1e-12)


@pytest.mark.parametrize("seed, v", ALL, ids=ALL_IDS)
def test_anchor_occurs_once_in_the_document(seeds_dir, seed, v):
    text = document(seeds_dir, seed)
    assert text.count(v["anchor"]) == 1, f"anchor found {text.count(v['anchor'])} times: {v['anchor']!r}"


@pytest.mark.parametrize("seed", SEEDS)
def test_title_is_the_documents(seeds_dir, seed):
    assert reference(seed)["title"] in document(seeds_dir, seed)


# -- complete tables --------------------------------------------------------------------------
PLAIN_AES, ANNEX = ("none", "aes-gcm-256"), ("none", "null-sha1", "null-sha1+ipcomp")
SIZES_001 = tuple(1024 << i for i in range(6))
GRIDS = [  # seed, part, metric, the where-keys every cell of the table is labelled with
    ("000", "throughput", "goodput_mbps", dict(transport=("tcp", "udp"), ip_version=(4, 6), profile=PLAIN_AES)),
    ("000", "throughput", "loss_pct", dict(transport=("udp",), ip_version=(4, 6), profile=PLAIN_AES)),
    ("000", "bulk", "goodput_mbps", dict(transport=("tcp",), ip_version=(4, 6), profile=PLAIN_AES)),
    ("000", "bulk", "cpu_system_pct", dict(transport=("tcp",), ip_version=(4, 6), profile=PLAIN_AES)),
    *[("000", part, metric, dict(transport=tr, ip_version=(4,), profile=ANNEX))
      for part in ("annex_tunnel", "annex_transport")
      for metric, tr in [("goodput_mbps", ("tcp", "udp")), ("cpu_system_pct", ("tcp",)), ("loss_pct", ("udp",))]],
    ("001", "netio", "goodput_mbps",
     dict(transport=("tcp", "udp"), size_bytes=SIZES_001, profile=("none", "3des-cbc-sha1+ah-md5"))),
]


@pytest.mark.parametrize("seed, part, metric, axes", GRIDS, ids=[f"{g[0]}-{g[1]}-{g[2]}" for g in GRIDS])
def test_every_cell_of_a_table_once(seed, part, metric, axes):
    cells = sorted(tuple(v["where"][k] for k in axes)
                   for v in values(seed, metric, part=part) if "compare" not in v["where"])
    assert cells == sorted(itertools.product(*axes.values()))


# -- known answers, read off the documents by hand --------------------------------------------
IPSEC_001 = "3des-cbc-sha1+ah-md5"
KNOWN = [  # seed, metric, where, value (Mbit/s for throughputs)
    ("000", "goodput_mbps", dict(part="throughput", transport="tcp", ip_version=4, profile="none"), 930),
    ("000", "goodput_mbps", dict(part="throughput", transport="udp", ip_version=6, profile="aes-gcm-256"), 867),
    ("000", "loss_pct", dict(part="throughput", ip_version=6, profile="aes-gcm-256"), 5),
    ("000", "cpu_system_pct", dict(part="bulk", ip_version=6, profile="aes-gcm-256"), 13.2),
    ("000", "goodput_mbps", dict(part="annex_transport", transport="tcp", profile="null-sha1"), 918),
    ("000", "loss_pct", dict(part="annex_tunnel", profile="null-sha1+ipcomp"), 0.0035),
    ("001", "goodput_mbps", dict(transport="udp", size_bytes=2048, profile=IPSEC_001), 35.39),  # 4320 KB/s
    ("001", "goodput_mbps", dict(transport="tcp", size_bytes=1024, profile="none"), 89.33),  # 10905 KB/s
    ("001", "goodput_mbps", dict(transport="tcp", size_bytes=4096, profile=IPSEC_001), 43.46),  # 5305 KB/s
    ("001", "goodput_mbps", dict(transport="udp", size_bytes=32768, profile="none"), 96.20),  # 11743 KB/s
    ("002", "ratio_pct", dict(topology="host_to_host", size="small"), 40),
    ("002", "ratio_pct", dict(topology="host_to_host", size_bytes=8192), 30),
    ("002", "penalty_pct", dict(part="latency", profile="3des-cbc-sha1"), 10),
    ("002", "rate_mbit", dict(topology="multi_host_to_host", clients=3), 300),
    ("003", "ratio_pct", dict(part="conclusion", profile="aes-cbc-128-md5"), 90),
    ("003", "rate_mbit", dict(part="shaping"), 34),
    ("004", "cpu_busy_pct", dict(profile="aes-cbc-128-md5", transport="tcp"), 60),
    ("004", "cpu_busy_pct", dict(profile="des-cbc-md5", transport="udp"), 100),
    ("004", "penalty_pct", dict(compare="ipv6/ipv4", encrypted=False), 1),
]


@pytest.mark.parametrize("seed, metric, where, expected", KNOWN,
                         ids=[f"{k[0]}-{k[1]}-{i}" for i, k in enumerate(KNOWN)])
def test_known_answer(seed, metric, where, expected):
    assert the(seed, metric, **where) == pytest.approx(expected, abs=0.01)


def by_id(seed: str) -> dict[str, float]:
    return {v["id"]: v["value"] for v in reference(seed)["values"]}


def test_seed000_summary_and_annex_constants():
    v = by_id("000")
    assert (v["summary-text-mtu-tried"], v["summary-text-mtu-default"]) == (3000, 1500)
    for part in ("annex_tunnel", "annex_transport"):  # the annex repeats the benchmark reference
        for metric, tr, src in [("goodput_mbps", "tcp", "bulk"), ("cpu_system_pct", "tcp", "bulk"),
                                ("goodput_mbps", "udp", "throughput"), ("loss_pct", "udp", "throughput")]:
            ref = dict(transport=tr, ip_version=4, profile="none")
            assert the("000", metric, part=part, **ref) == the("000", metric, part=src, **ref)


def test_seed001_units_and_columns():
    assert MBPS_PER_UNIT["KB/s"] == 0.008192
    for tr, size in itertools.product(("tcp", "udp"), SIZES_001):
        ratio = (the("001", "goodput_mbps", transport=tr, size_bytes=size, profile=IPSEC_001)
                 / the("001", "goodput_mbps", transport=tr, size_bytes=size, profile="none"))
        assert 0.35 < ratio < 0.55, f"IPsec 'diminishes by half': {tr} {size} gives {ratio:.2f}"


def test_seed003_sizes_rates_and_payload_arithmetic():
    v = by_id("003")
    assert sorted(x["value"] for x in values("003", "size_bytes", part="high_powered")) == [
        100, 250, 500, 750, 1000, 1250, 1460]
    assert sorted(x["value"] for x in values("003", "rate_mbit", part="high_powered")) == [10, 34, 44, 51, 100]
    assert sorted(x["value"] for x in values("003", "rate_mbit", part="user_categories")) == [
        1, 2, 4, 10, 34, 44, 51, 100]
    assert v["overhead-new-ip-header"] + v["overhead-esp"] == v["overhead-tunnel"] == 100
    assert v["frame-payload"] - v["tcp-header"] - v["original-ip-header"] == v["payload-plain"] == 1440
    assert v["payload-plain"] - v["overhead-tunnel"] == v["payload-ipsec"] == 1340
    assert v["sweep-duration"] == 5 and v["conclusion-size-threshold"] == 750


def test_seed004_test_plan():
    v = by_id("004")
    assert v["test-duration-min"] * 60 == v["test-duration-s"] == 240 and v["test-repetitions"] == 3
    assert sorted(x["value"] for x in values("004", "count", part="tests") if x["unit"] == "clients") == [1, 2, 3, 4, 5]


# -- seed 000's prose agrees with its own tables ----------------------------------------------
@pytest.mark.parametrize("part", ["throughput", "bulk"])
def test_seed000_analysis_ranges_match_the_tables(part):
    """Each 'a~b%' penalty of sections 4.2/4.3, recomputed from the table above it (within the
    document's rounding to whole percent: 0.5 points)."""
    ranges = [v for v in values("000", "penalty_pct", part=part) if v["id"].endswith("-low")]
    assert len(ranges) == 4
    for low in ranges:
        w, top = low["where"], by_id("000")[low["id"].removesuffix("-low") + "-high"]
        for tr in ("tcp", "udp") if part == "throughput" else ("tcp",):
            rate = functools.partial(the, "000", "goodput_mbps", part=part, transport=tr)
            if w["compare"] == "ipsec/plain":
                penalty = 1 - rate(ip_version=w["ip_version"], profile="aes-gcm-256") / rate(
                    ip_version=w["ip_version"], profile="none")
            else:
                penalty = 1 - rate(ip_version=6, profile=w["profile"]) / rate(ip_version=4, profile=w["profile"])
            assert low["value"] - 0.5 <= 100 * penalty <= top + 0.5, (low["id"], tr, 100 * penalty)


# -- claims -----------------------------------------------------------------------------------
CLAIMS = [(seed, c) for seed in SEEDS for c in reference(seed).get("claims", [])]
CLAIM_IDS = [f"{seed}:{c['id']}" for seed, c in CLAIMS]


@pytest.mark.parametrize("seed", SEEDS)
def test_every_seed_has_claims_with_unique_ids(seed):
    ids = [c["id"] for c in reference(seed)["claims"]]
    assert ids and len(ids) == len(set(ids))


@pytest.mark.parametrize("seed, claim", CLAIMS, ids=CLAIM_IDS)
def test_claim_is_checkable(seed, claim):
    from analysis.reproduction import METRICS

    assert {"id", "source", "quote", "statement", "reading", "check"} <= set(claim)
    check = claim["check"]
    assert check["metric"] in METRICS
    assert check.get("op", "value") in ("value", "ratio", "difference")
    assert "low" in check or "high" in check, "a claim needs a range to be judged against"
    if "seed_bound" in claim:  # what bounded the seed's own points, and why the reference file says so
        assert claim["seed_bound"] in ("link", "cpu", "other") and len(claim.get("seed_bound_reason", "")) > 20
    if "low" in check and "high" in check:
        assert check["low"] < check["high"]
    if check.get("op", "value") != "value":
        assert check.get("num") and check.get("den"), "a ratio or difference needs num and den"
    for where in (check.get("select", {}), check.get("num", {}), check.get("den", {})):
        assert set(where) <= {"part", "profile", "ip_version", "transport", "size_bytes", "rate_mbit", "clients",
                              "mode", "mtu"}


@pytest.mark.parametrize("seed, claim", CLAIMS, ids=CLAIM_IDS)
def test_claim_quote_is_the_documents(seeds_dir, seed, claim):
    assert claim["quote"] in document(seeds_dir, seed)

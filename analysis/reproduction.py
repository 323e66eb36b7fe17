"""A seed's published numbers and claims next to a reproduction run's measurements.

Reads a run directory that :mod:`experiments.reproduce` wrote (``meta.json`` naming the
seed and its parts, one sub-directory of results per part) and the seed's reference file
(``analysis/reference/seedNNN.json``: its numbers, each with its source, and its claims
as checkable statements), and computes:

* **values** -- every published throughput, loss and CPU figure next to ours at the same
  point (mean, 95 % CI, ours/seed);
* **ratios that transfer** -- IPsec/plain, IPv6/IPv4, IPComp/none, tunnel/transport, N
  clients/1 client: the same ratio from the seed's numbers and from ours (absolute
  figures depend on the hardware; these less so);
* **claims** -- each of the seed's claims judged on this run's data, every value with its 95 %
  interval: ``holds`` when every interval lies inside the claim's range, ``does not hold`` when
  one lies wholly outside it, ``undecided`` when one straddles a bound (with how many
  repetitions would decide it), ``not testable here`` or ``not measured``; for one that does
  not hold, what differs between the seed's set-up and this run, as far as the data shows;
* **penalties** -- every IPsec point's penalty split into what the extra bytes on the wire
  explain and the rest (:mod:`analysis.penalty`).

Nothing here is typed by hand: a verdict is a comparison of measured numbers with the
range the reference file states.  :func:`evaluate` returns it all as an :class:`Evaluation`
(:class:`ValueComparison`, :class:`TransferRatio`, :class:`ClaimVerdict`, ...), whose
``to_json()`` is ``comparison.json``; :mod:`analysis.reproduction_report` writes that file and
``report.html`` and prints the tables.

A claim's ``check`` (in the reference file)::

    {"metric": "goodput_mbps" | "normalized_goodput" | "loss_pct" | "cpu_system_pct" |
               "cpu_busy_pct" | "cpu_s_per_gb" | "transaction_ms",
     "op": "value" | "ratio" | "difference",
     "select": {WHERE}, "num": {WHERE}, "den": {WHERE},
     "means": false, "ignore": [KEY, ...], "low": X, "high": Y}

``value``: the metric of every point matching ``select`` lies in [low, high].  ``ratio`` /
``difference``: each point matching select+num against the point matching select+den
that equals it in every other key but those in ``ignore`` (or, with ``means``, the mean over all of select+num
against the mean over all of select+den) lies in [low, high].  The claim holds when every
computed value does.  A WHERE maps point keys (``part`` is the reference part name,
``profile``, ``ip_version``, ``transport``, ``size_bytes``, ``rate_mbit``, ``clients``,
``mode``, ``mtu``) to a value, a list of values, or ``{"min": a, "max": b}`` (inclusive).
"""
from __future__ import annotations

import dataclasses
import importlib.resources
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from analysis.penalty import Penalty, penalty_of
from analysis.stats import (
    PLAIN_PROFILE,
    Estimate,
    Summary,
    aggregate,
    as_estimate,
    combine,
    mean_of,
    normalize,
    paired,
    ratio_of_means,
    repetitions_for,
    t_critical_95,
)
from testbed.record import (
    FIELD,
    META_FIELD,
    Bound,
    Group,
    Meta,
    MetaPart,
    MetaScale,
    MetaSweep,
    Record,
    TransactionRecord,
    as_meta,
    usable,
)
from testbed.rundir import load_existing, load_meta

#: The seeds' reference files: package data of ``analysis`` (``reference/seedNNN.json``), read through
#: importlib.resources so that an installed wheel finds them as a checkout does.
REFERENCE = importlib.resources.files("analysis") / "reference"
#: A claim's metrics: record fields, and the IPsec/plain goodput ratio and time per transaction.
NORMALIZED = "normalized_goodput"
TRANSACTION_MS = "transaction_ms"
METRICS = (FIELD.goodput_mbps, NORMALIZED, FIELD.loss_pct, FIELD.cpu_system_pct, FIELD.cpu_busy_pct,
           FIELD.cpu_s_per_gb, TRANSACTION_MS)
COMPARED_METRICS = (FIELD.goodput_mbps, FIELD.loss_pct, FIELD.cpu_system_pct)
#: The ``size_mode`` of a transactions part's records (what makes their keys unique).
TRANSACTION_MODE = "transaction"
HOLDS, FAILS, UNMEASURED = "holds", "does not hold", "not measured"
#: A claim one of whose values' 95 % interval straddles a bound of its range: more repetitions decide it.
UNDECIDED = "undecided"
#: A claim whose points here were mostly bounded by something else than the seed's were.
NOT_TESTABLE = "not testable here"
VERDICTS = (HOLDS, FAILS, UNDECIDED, NOT_TESTABLE, UNMEASURED)
#: Where a value's 95 % interval lies against a claim's range.
INSIDE, OUTSIDE, STRADDLES = "inside", "outside", "straddles"
#: What comparison.json keeps of meta.json: the machine, and when and how the run was made.
RUN_FIELDS = (META_FIELD.backend, META_FIELD.kernel_release, META_FIELD.cpu_model, META_FIELD.host_cpu_model,
              META_FIELD.cpu_count, META_FIELD.started, META_FIELD.finished, META_FIELD.command_line,
              META_FIELD.versions)
#: The regime of a part measured unshaped, so that this machine's CPU bounds its points (experiments.job.REGIMES).
CPU_REGIME = "cpu"
#: Metrics that are shares of the CPU at the link's rate: not the seed's at scaled rates.
CPU_SHARE_METRICS = (FIELD.cpu_busy_pct, FIELD.cpu_system_pct)


class ReproductionError(ValueError):
    """The run directory or the reference file cannot be read as a reproduction."""


def load_reference(seed: str) -> dict:
    """The reference file of ``seed`` ("000".."004")."""
    path = REFERENCE / f"seed{seed}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReproductionError(f"no reference data for seed {seed!r} ({path})") from None


# -- rows: one per measured point of the run, every metric beside it ----------------------

@dataclasses.dataclass(frozen=True, eq=False)
class Row:
    """One point of a reproduction run (repetitions aggregated)."""

    point: Group  # rate_mbit: the seed's, when the run's rates were scaled
    metrics: Mapping[str, Any]  # name -> Summary or RatioEstimate
    part: str = ""  # the part that measured it
    reference: str = ""  # ... and the part of the reference file it answers
    mtu: int = 1500
    emulated_rate_mbit: float | None = None  # the rate measured here, when the run's rates were scaled
    limited: bool = False
    penalty: Penalty | None = None  # for IPsec sweep points
    bound: Bound | None = None  # what bounded the point here (analysis.stats.Aggregate.bound)
    ratio_bound: Bound | None = None  # ... and its IPsec/plain ratio (the more cautious side)
    regime: str = ""  # its part's regime (experiments.job.REGIMES): "cpu" for a point measured unshaped
    #: metric -> repetition -> value, for points measured in pairs (a transactions part's arms, interleaved
    #: repetition by repetition): a ratio between two such rows is taken pair by pair (analysis.stats.paired)
    by_repetition: Mapping[str, Mapping[Any, float]] = dataclasses.field(default_factory=dict)

    def bound_for(self, metric: str) -> Bound | None:
        return self.ratio_bound if metric == NORMALIZED else self.bound

    @property
    def repetitions(self) -> int | None:
        """The fewest repetitions behind any of the point's summaries (None: none)."""
        counts = [m.n for m in self.metrics.values() if isinstance(m, Summary)]
        return min(counts) if counts else None

    def value(self, metric: str) -> tuple[float, float | None] | None:
        """(mean, 95 % CI half-width) of ``metric``, or None."""
        m = self.metrics.get(metric)
        if m is None:
            return None
        e = as_estimate(m)
        return e.value, e.ci95

    def where_values(self) -> dict[str, Any]:
        """What a reference file's WHERE can name, by name: the fields the point is identified by,
        ``part``, ``reference`` and ``mtu`` (and ``emulated_rate_mbit`` in a scaled run, ``regime`` for a
        part planned in one)."""
        out = {**self.point.to_json(), "part": self.part, "reference": self.reference, "mtu": self.mtu}
        if self.emulated_rate_mbit is not None:
            out["emulated_rate_mbit"] = self.emulated_rate_mbit
        if self.regime:
            out["regime"] = self.regime
        return out

    @property
    def unshaped(self) -> bool:
        """Measured in the cpu regime: unshaped, this machine's CPU the limit, standing for the seed's rate."""
        return self.regime == CPU_REGIME


@dataclasses.dataclass(frozen=True)
class MeasuredPart:
    """One part of a reproduction run: meta.json's entry, and its measured records (failed ones left out)."""

    part: MetaPart
    records: Sequence[Record]


def load_run(run_dir: str) -> tuple[Meta, list[MeasuredPart]]:
    """``meta.json`` of a reproduction run and its parts, each with its measured records
    (:class:`~testbed.record.Record`; a transactions part's, :class:`~testbed.record.TransactionRecord`)."""
    meta = load_meta(run_dir)
    if not meta.is_reproduction:
        raise ReproductionError(f"{run_dir}: not a reproduction run (meta.json names no seed and parts)")
    parts = []
    for part in meta.parts:
        part_dir = os.path.join(run_dir, str(part.name))
        records: Sequence[Record]
        if part.transactions:
            records = load_existing(part_dir, required=(), kind=TransactionRecord)
        else:
            records = load_existing(part_dir)
        parts.append(MeasuredPart(part, [r for r in records if not r.failed]))
    return meta, parts


def rows_of(parts: Sequence[MeasuredPart], scale: float = 1.0) -> list[Row]:
    """Every point of every part, with goodput, loss, CPU, normalized goodput and penalty.

    With ``scale`` (a run whose link rates were the seed's divided by it) a row's point has the
    seed's rate, which the reference file's WHEREs name, and its ``emulated_rate_mbit`` is the
    rate measured here; so has a point of a part in the cpu regime (measured unshaped, standing for
    the part's ``seed_rate_mbit``).
    """
    rows = []
    for measured in parts:
        part, records = measured.part, measured.records
        spec = part.spec or MetaSweep()
        place = {"part": part.name, "reference": part.reference or part.name, "mtu": spec.mtu or 1500}
        if part.transactions:
            rows += _transaction_rows(records, place)
            continue
        aggs = aggregate(records)
        ratios = {id(r.ipsec): r for r in normalize(aggs)}
        rounds = by_repetition(records, FIELD.goodput_mbps)
        losses = by_repetition(records, FIELD.loss_pct)
        for a in aggs:
            metrics: dict[str, Any] = {FIELD.goodput_mbps: a.goodput, FIELD.loss_pct: a.loss_pct}
            metrics.update({f: a.cpu.get(f) for f in (FIELD.cpu_system_pct, FIELD.cpu_busy_pct, FIELD.cpu_s_per_gb)})
            ratio = ratios.get(id(a))
            penalty = None
            if ratio is not None:
                # a repetition's IPsec and plain points are measured in the same round, one after the other
                # (ABBA): their ratio is taken pair by pair where both have two rounds or more in common
                metrics[NORMALIZED] = paired("ratio", rounds.get(a.point, {}),
                                             rounds.get(ratio.plain.point, {})) or ratio.goodput
                penalty = penalty_of(ratio, place["mtu"], spec.pmtu or "discover")
            point, emulated = a.point, None
            if part.regime == CPU_REGIME and part.seed_rate_mbit is not None and point.rate_mbit is not None:
                point, emulated = point.replace(rate_mbit=float(part.seed_rate_mbit)), point.rate_mbit
            elif scale != 1.0 and point.rate_mbit is not None:
                point, emulated = point.replace(rate_mbit=round(point.rate_mbit * scale, 6)), point.rate_mbit
            # a part's points of one round were measured in the same minute or so: two of its points compare
            # round by round (the key holds the part: points of other parts were not measured beside them)
            paired_by = {FIELD.goodput_mbps: {(part.name, k): v for k, v in rounds.get(a.point, {}).items()},
                         FIELD.loss_pct: {(part.name, k): v for k, v in losses.get(a.point, {}).items()}}
            rows.append(Row(point, metrics, **place, emulated_rate_mbit=emulated, limited=a.bound == Bound.CPU,
                            penalty=penalty, bound=a.bound, ratio_bound=ratio.bound if ratio is not None else None,
                            regime=part.regime or "", by_repetition=paired_by))
    return rows


def by_repetition(records: Sequence[Record], field: str) -> dict[Group, dict[int, float]]:
    """Each point's ``field`` by repetition, of its usable records (the later record of a repetition measured
    twice; pure)."""
    out: dict[Group, dict[int, float]] = {}
    for r in records:
        value = getattr(r, field, None)
        if usable(r) and value is not None:
            out.setdefault(Group.of(r), {})[r.repetition] = value
    return out


def _transaction_rows(records: Sequence[TransactionRecord], place: Mapping[str, Any]) -> list[Row]:
    groups: dict[Group, list[TransactionRecord]] = {}
    for r in records:
        groups.setdefault(Group.of(r), []).append(r)
    rows = []
    for point, group in groups.items():
        metrics = {TRANSACTION_MS: Summary.of([r.mean_ms for r in group]),
                   FIELD.cpu_busy_pct: Summary.of([r.cpu_busy_pct for r in group]),
                   FIELD.cpu_system_pct: Summary.of([r.cpu_system_pct for r in group])}
        # each repetition's arms were measured one after the other (the ABBA order, the parts interleaved):
        # ratios between them are taken pair by pair (the later record of a repetition measured twice)
        by_rep = {TRANSACTION_MS: {r.repetition: r.mean_ms for r in group}}
        rows.append(Row(point, metrics, **place, by_repetition=by_rep))
    plain = {r.point.replace(profile=None): r for r in rows if r.point.profile == PLAIN_PROFILE}
    for r in rows:
        base = plain.get(r.point.replace(profile=None))
        if base is not None and r is not base:
            r.metrics["transaction_ms_ratio"] = _combine_rows("ratio", TRANSACTION_MS, r, base)
    return rows


# -- matching a WHERE -----------------------------------------------------------------------

def _match_one(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, list):
        return any(_match_one(actual, w) for w in wanted)
    if isinstance(wanted, dict):
        if actual is None or isinstance(actual, str):
            return False
        return wanted.get("min", -math.inf) <= actual <= wanted.get("max", math.inf)
    if isinstance(wanted, (int, float)) and isinstance(actual, (int, float)):
        return math.isclose(float(actual), float(wanted))
    return actual == wanted


def matches(row: Row, where: Mapping[str, Any]) -> bool:
    """Whether ``row`` is a point ``where`` describes; keys a row does not have are ignored."""
    values = row.where_values()
    for key, wanted in where.items():
        if key == "part":
            if not (_match_one(row.reference, wanted) or _match_one(row.part, wanted)):
                return False
        elif key in values and not _match_one(values[key], wanted):
            return False
    return True


def select(rows: Sequence[Row], where: Mapping[str, Any], metric: str | None = None) -> list[Row]:
    return [r for r in rows if matches(r, where) and (metric is None or r.value(metric) is not None)]


# -- published values next to ours ------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ValueComparison:
    """A published throughput, loss or CPU figure next to this run's at the same point (None where
    there is none)."""

    id: str
    source: str
    quote: str
    metric: str
    seed_value: float  # in the metric's unit (goodput converted to Mbit/s)
    seed_unit: str
    seed_quoted: float  # as the seed wrote it
    ours: float | None = None
    ci95: float | None = None
    n: int | None = None
    ours_over_seed: float | None = None
    limited: bool | None = None
    bound: Bound | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        """The entry of comparison.json's ``values``."""
        return dataclasses.asdict(self)


def _shaped_first(found: list[Row]) -> list[Row]:
    """``found``, or where a part was measured in two regimes its shaped points only: a published figure is
    set beside the point of the regime it was measured in, the shaped one standing for a link-bound seed."""
    return ([r for r in found if not r.unshaped] or found) if len(found) > 1 else found


def compare_values(reference: Mapping[str, Any], rows: Sequence[Row], scale: float = 1.0) -> list[ValueComparison]:
    """One entry per published throughput, loss or CPU figure: the seed's and ours.

    In a run at scaled rates our goodput is compared as ours × ``scale`` (the share of the
    link it is, at the seed's rate) and CPU shares are not compared.
    """
    out = []
    for v in reference.get("values", []):
        if v.get("metric") not in COMPARED_METRICS or "compare" in v.get("where", {}):
            continue  # a value that compares two set-ups is a claim's (see "claims")
        seed_value = v["value"] * v.get("mbps_per_unit", 1) if v["metric"] == FIELD.goodput_mbps else v["value"]
        found = select(rows, v.get("where", {}), v["metric"])
        found = _shaped_first(found)
        entry = ValueComparison(id=v["id"], source=v["source"], quote=v["quote"], metric=v["metric"],
                                seed_value=seed_value, seed_unit=v["unit"], seed_quoted=v["value"])
        if len(found) == 1:
            mean, ci = found[0].value(v["metric"])
            scaled = scale != 1.0 and not found[0].unshaped
            comparable = v["metric"] != FIELD.loss_pct and not (scaled and v["metric"] in CPU_SHARE_METRICS)
            factor = scale if v["metric"] == FIELD.goodput_mbps and scaled else 1.0
            note = ""
            if found[0].unshaped:
                note = "measured unshaped here: this machine's CPU against the seed's"
            elif scaled and v["metric"] == FIELD.goodput_mbps:
                note = f"at 1/{scale:g} of the seed's rate: compared as ours × {scale:g}"
            elif not comparable and v["metric"] in CPU_SHARE_METRICS:
                note = "a CPU share at a scaled rate: not compared"
            entry = dataclasses.replace(
                entry, ours=mean, ci95=ci, n=found[0].metrics[v["metric"]].n, limited=found[0].limited,
                bound=found[0].bound, ours_over_seed=mean * factor / seed_value if seed_value and comparable else None,
                note=note)
        else:
            entry = dataclasses.replace(
                entry, note="not measured by this run" if not found else f"{len(found)} points match; not compared")
        out.append(entry)
    return out


#: Ratios that carry across hardware: (name, key, test on the numerator's and denominator's value).
TRANSFERS = (
    ("IPsec/plain", FIELD.profile,
     lambda a, b: b == PLAIN_PROFILE and a != PLAIN_PROFILE and not a.endswith("+ipcomp")),
    ("IPComp/none", FIELD.profile, lambda a, b: a == f"{b}+ipcomp"),
    ("IPv6/IPv4", FIELD.ip_version, lambda a, b: a == 6 and b == 4),
    ("tunnel/transport", "part", lambda a, b: "tunnel" in str(a) and str(b) == str(a).replace("tunnel", "transport")),
    ("N clients/1 client", FIELD.clients, lambda a, b: b == 1 and a > 1),
)


@dataclasses.dataclass(frozen=True)
class TransferRatio:
    """A ratio of two of the seed's values that differ in one key (:data:`TRANSFERS`), and ours at the
    same pair (None where this run has not both)."""

    ratio: str  # its name: IPsec/plain, IPv6/IPv4, ...
    numerator: str  # the seed's values, by id
    denominator: str
    where: Mapping[str, Any]  # what the two share
    seed: float
    ours: float | None = None
    ci95: float | None = None
    limited: bool | None = None  # either point CPU-bound

    def to_json(self) -> dict[str, Any]:
        """The entry of comparison.json's ``ratios``."""
        return dataclasses.asdict(self)


def transfer_ratios(reference: Mapping[str, Any], rows: Sequence[Row]) -> list[TransferRatio]:
    """The seed's throughput ratios (pairs of its values differing in one key) and ours at the same pair."""
    values = [v for v in reference.get("values", []) if v.get("metric") == FIELD.goodput_mbps]
    out = []
    for a in values:
        for b in values:
            wa, wb = a.get("where", {}), b.get("where", {})
            # the plain baseline has no IPsec mode: compare it with IPsec values of any mode
            wa = {k: v for k, v in wa.items() if k != FIELD.mode or FIELD.mode in wb}
            wb = {k: v for k, v in wb.items() if k != FIELD.mode or FIELD.mode in wa}
            if a is b or set(wa) != set(wb):
                continue
            differ = [k for k in wa if wa[k] != wb[k]]
            if len(differ) != 1 or (differ == ["part"] and wa.get(FIELD.profile) == PLAIN_PROFILE):
                continue  # (without IPsec, "tunnel" and "transport" are the same network)
            for name, key, test in TRANSFERS:
                if differ[0] != key or not test(wa[key], wb[key]):
                    continue
                seed_ratio = (a["value"] * a.get("mbps_per_unit", 1)) / (b["value"] * b.get("mbps_per_unit", 1))
                ra = _shaped_first(select(rows, wa, FIELD.goodput_mbps))
                rb = _shaped_first(select(rows, wb, FIELD.goodput_mbps))
                ours = (ratio_of_means(ra[0].metrics[FIELD.goodput_mbps], rb[0].metrics[FIELD.goodput_mbps])
                        if len(ra) == 1 and len(rb) == 1 else None)
                out.append(TransferRatio(
                    ratio=name, numerator=a["id"], denominator=b["id"], where={k: v for k, v in wa.items() if k != key},
                    seed=seed_ratio, ours=ours.value if ours else None, ci95=ours.ci95 if ours else None,
                    limited=(ra[0].limited or rb[0].limited) if ours else None))
    return out


# -- claims -----------------------------------------------------------------------------------

def _pairs(rows: Sequence[Row], check: Mapping[str, Any]) -> list[tuple[Row, Row]]:
    metric = check["metric"]
    base = check.get("select", {})
    nums = select(rows, {**base, **check.get("num", {})}, metric)
    dens = select(rows, {**base, **check.get("den", {})}, metric)
    varied = set(check.get("num", {})) | set(check.get("den", {})) | set(check.get("ignore", ()))
    if "part" in varied:
        varied |= {"part", "reference"}
    pairs = []
    for n in nums:
        same = [d for d in dens if d is not n
                and all(_match_one(d.where_values().get(k), v) for k, v in n.where_values().items() if k not in varied)]
        if len(same) == 1:
            pairs.append((n, same[0]))
    return pairs


@dataclasses.dataclass(frozen=True)
class MeasuredValue:
    """One value a claim rests on: what it is, its 95 % interval, and where that lies against the
    claim's range (:data:`INSIDE`, :data:`OUTSIDE`, :data:`STRADDLES`); whether it was judged."""

    what: str
    value: float
    in_range: bool  # the value itself (its interval aside)
    judged: bool
    ci95: float | None = None  # None: no interval (a point of one repetition)
    position: str = STRADDLES
    repetitions: int | None = None  # the fewest behind it


def position(value: float, ci95: float | None, low: float, high: float) -> str:
    """Where ``value ± ci95`` lies against ``[low, high]`` (pure): wholly inside, wholly outside, or
    straddling a bound (also when there is no interval: one value says nothing of its spread)."""
    if ci95 is None:
        return STRADDLES
    lo, hi = value - ci95, value + ci95
    if low <= lo and hi <= high:
        return INSIDE
    if hi < low or lo > high:
        return OUTSIDE
    return STRADDLES


#: The most repetitions per point :func:`repetitions_to_decide` counts up to.
MOST_TO_DECIDE = 1000


def repetitions_to_decide(value: float, ci95: float | None, n: int | None, low: float, high: float) -> int | None:
    """About how many repetitions per point would bring ``value``'s 95 % interval off the nearer bound of
    ``[low, high]`` (pure): the spread behind the interval (``ci95 sqrt(n) / t(n-1)``) is taken to stay
    as it is, and the fewest repetitions whose ``t(n'-1) spread / sqrt(n')`` is within the distance to
    the bound are counted, at least one more.  None when it cannot be said: no interval, the value on the
    bound itself, or more than :data:`MOST_TO_DECIDE`."""
    if ci95 is None or not n or n < 2:
        return None
    distance = min(abs(value - b) for b in (low, high) if math.isfinite(b))
    if distance <= 1e-9 * max(1.0, abs(value)):
        return None
    spread = ci95 * math.sqrt(n) / t_critical_95(n - 1)
    needed = repetitions_for(spread, distance, most=MOST_TO_DECIDE)
    return None if needed is None else max(n + 1, needed)


@dataclasses.dataclass(frozen=True)
class ClaimVerdict:
    """The verdict on one of the seed's claims, with the values it rests on (:func:`evaluate_claim`)."""

    id: str
    source: str  # where the seed says it
    quote: str  # ... in its words
    statement: str  # what is checked
    reading: str  # how the words were read
    metric: str
    op: str  # value, ratio or difference
    low: float | None  # the range (None: unbounded)
    high: float | None
    verdict: str  # HOLDS, FAILS, UNDECIDED, NOT_TESTABLE or UNMEASURED
    measured: tuple[MeasuredValue, ...]
    min: float | None  # of the values judged (all of them when none could be)
    max: float | None
    points_cpu_bound: int
    points: int  # the distinct points the values rest on
    bounds: Mapping[str, int]  # ... counted by what bounded them here ("unknown": not classified)
    seed_bound: str | None  # what bounded the seed's own points, as the reference file says
    in_range: bool | None  # whether every value judged lies in the range
    not_testable: str  # why not, or ""
    left_out: int  # values not judged (bound otherwise than the seed's)
    note: str
    cpu_busy_mean: float | None  # over the points involved
    cpu_system_mean: float | None
    differs: str = ""  # for a claim that does not hold: what differs between the seed's set-up and this run
    undecided: str = ""  # for an undecided claim: which value straddles which bound, and what would decide it
    decide_repetitions: int | None = None  # ... about this many repetitions per point (None: cannot be said)
    deciding: tuple[Mapping[str, Any], ...] = ()  # ... of these points (Row.where_values)
    regime: str = ""  # the regime(s) and rates of the points it was judged on

    @property
    def ci95(self) -> float | None:
        """The interval of a claim judged on one value (None otherwise)."""
        judged = [m for m in self.measured if m.judged]
        return judged[0].ci95 if len(judged) == 1 else None

    def to_json(self) -> dict[str, Any]:
        """The entry of comparison.json's ``claims``."""
        return dataclasses.asdict(self)


def evaluate_claim(claim: Mapping[str, Any], rows: Sequence[Row], scale: float = 1.0) -> ClaimVerdict:
    """The verdict on one claim, with the values it rests on; see the module docstring.

    Every value carries its 95 % interval (a point's from its repetitions; a ratio's or a
    difference's through :func:`analysis.stats.combine`): the claim holds when every judged
    value's interval lies inside the range, does not hold when one lies wholly outside, and is
    undecided otherwise, with the points that would decide it and about how many repetitions.

    A claim that names what bounded the seed's own points (``seed_bound``) is judged on the
    values whose points were bounded the same way here; the others are kept and shown, but
    left out of the verdict (an IPsec/plain ratio measured on CPU-bound points says nothing
    of a seed whose ratio was its link's). When no value is left to judge, the claim is "not
    testable here", with the reason. So is a claim on a CPU share in a run whose rates were
    scaled (a share at another rate is not the seed's).
    """
    check = claim["check"]
    metric, op = check["metric"], check.get("op", "value")
    if metric not in METRICS:
        raise ReproductionError(f"claim {claim.get('id')}: unknown metric {metric!r}")
    low, high = check.get("low", -math.inf), check.get("high", math.inf)
    wanted = claim.get("seed_bound")
    share_scaled = scale != 1.0 and metric in CPU_SHARE_METRICS  # only an unshaped point's share is the seed's

    def like_seed(r: Row) -> bool:
        if share_scaled and not r.unshaped:
            return False
        return not wanted or (r.bound_for(metric) or "unknown") in (wanted, "unknown")

    entries: list[tuple[str, Estimate, list[Row]]] = []  # (what, value, the rows behind it)
    means_left = 0  # points left out of a mean, bound otherwise than the seed's
    if op == "value":
        for r in select(rows, check.get("select", {}), metric):
            entries.append((_label(r), as_estimate(r.metrics[metric]), [r]))
    elif check.get("means"):
        base = check.get("select", {})
        nums = select(rows, {**base, **check.get("num", {})}, metric)
        dens = select(rows, {**base, **check.get("den", {})}, metric)
        if nums and dens:
            # the mean over the points bounded like the seed's, when each side has some
            alike = [r for r in nums if like_seed(r)], [r for r in dens if like_seed(r)]
            if all(alike):
                entries += _means_entry(op, metric, *alike)
                means_left = len(nums) + len(dens) - len(alike[0]) - len(alike[1])
            else:
                entries += _means_entry(op, metric, nums, dens)
    else:
        for n, d in _pairs(rows, check):
            value = _combine_rows(op, metric, n, d)
            if value is not None:
                entries.append((f"{_label(n)} vs {_label(d)}", value, [n, d]))
    distinct = list({id(r): r for _, _, rs in entries for r in rs}.values())
    bounds: dict[str, int] = {}
    for r in distinct:
        b = r.bound_for(metric) or "unknown"
        bounds[b] = bounds.get(b, 0) + 1
    judged = [e for e in entries if all(like_seed(r) for r in e[2])]
    left_out = len(entries) - len(judged)
    why_not = _why_not_testable(claim, metric, bounds, scale, judged=bool(judged)) if entries else ""
    basis = judged if judged and not why_not else entries
    values = [e.value for _, e, _ in basis]
    in_range = all(low <= v <= high for v in values) if values else None
    where = {id(e): position(e.value, e.ci95, low, high) for _, e, _ in entries}
    if not entries:
        verdict = UNMEASURED
    elif why_not:
        verdict = NOT_TESTABLE
    else:
        places = {where[id(e)] for _, e, _ in basis}
        verdict = FAILS if OUTSIDE in places else HOLDS if places == {INSIDE} else UNDECIDED
    note = ""
    if why_not:
        left_out = 0  # nothing was judged
    elif left_out and judged:
        others = {r.bound_for(metric) for _, _, rs in entries for r in rs if not like_seed(r)}
        note = (f"judged on {len(judged)} of {len(entries)} values: the other {left_out} rest on points bound here by "
                f"{' and '.join(_BOUND_WORDS.get(b, str(b)) for b in sorted(others))}, the seed's by "
                f"{_SEED_BOUND_WORDS.get(wanted, wanted)}")
    elif means_left and not why_not:
        note = (f"the means leave out {means_left} points bound here otherwise than the seed's were (by "
                f"{_SEED_BOUND_WORDS.get(wanted, wanted)})")
    involved = [r for _, _, rs in entries for r in rs]

    def reps(rs: Sequence[Row]) -> int | None:
        counts = [r.repetitions for r in rs if r.repetitions is not None]
        return min(counts) if counts else None

    measured = tuple(MeasuredValue(w, e.value, low <= e.value <= high, (w, e, rs) in judged, e.ci95, where[id(e)],
                                   reps(rs)) for w, e, rs in entries)
    undecided, decide, deciding = "", None, ()
    if verdict == UNDECIDED:
        undecided, decide, deciding = _undecided(
            [(m, rs) for m, (_, _, rs) in zip(measured, entries, strict=True)
             if m.position == STRADDLES and (not judged or m.judged)], low, high)
    return ClaimVerdict(
        id=claim["id"], source=claim.get("source", ""), quote=claim.get("quote", ""), statement=claim["statement"],
        reading=claim.get("reading", ""), metric=metric, op=op, low=check.get("low"), high=check.get("high"),
        verdict=verdict, measured=measured,
        min=min(values) if values else None, max=max(values) if values else None,
        points_cpu_bound=sum(1 for r in distinct if r.limited), points=len(distinct), bounds=bounds,
        seed_bound=wanted, in_range=in_range, not_testable=why_not, left_out=left_out if judged else 0, note=note,
        cpu_busy_mean=_mean_of(involved, FIELD.cpu_busy_pct), cpu_system_mean=_mean_of(involved, FIELD.cpu_system_pct),
        undecided=undecided, decide_repetitions=decide, deciding=deciding,
        regime=_regime_words([r for _, _, rs in basis for r in rs], scale) if basis and not why_not else "")


def _combine_rows(op: str, metric: str, num: Row, den: Row) -> Estimate | None:
    """``num`` against ``den`` on ``metric``: pair by pair where both were measured in the same pairs
    (:attr:`Row.by_repetition`), else from their summaries (:func:`analysis.stats.combine`)."""
    pairs = paired(op, num.by_repetition.get(metric, {}), den.by_repetition.get(metric, {}))
    return pairs if pairs is not None else combine(op, num.metrics[metric], den.metrics[metric])


def _regime_words(rows: Sequence[Row], scale: float) -> str:
    """The regimes and rates ``rows`` were measured at, in words (pure): "unshaped (10000 Mbit/s here):
    this machine's CPU the limit; the seed's rates ÷ 8 (12.5 Mbit/s here)"."""
    words = []
    unshaped = sorted({r.emulated_rate_mbit for r in rows if r.unshaped and r.emulated_rate_mbit})
    shaped = [r for r in rows if not r.unshaped and r.point.rate_mbit is not None]
    if unshaped:
        words.append(f"unshaped ({', '.join(f'{x:g}' for x in unshaped)} Mbit/s here): this machine's CPU the limit")
    if shaped:
        here = sorted({r.emulated_rate_mbit or r.point.rate_mbit for r in shaped})
        rates = ", ".join(f"{x:g}" for x in here)
        words.append(f"the seed's rates ÷ {scale:g} ({rates} Mbit/s here)" if scale != 1.0 else
                     f"the seed's rates ({rates} Mbit/s)")
    return "; ".join(words)


def _undecided(straddling: Sequence[tuple[MeasuredValue, Sequence[Row]]], low: float,
               high: float) -> tuple[str, int | None, tuple[Mapping[str, Any], ...]]:
    """For an undecided claim: the words, the repetitions per point that would decide it (None: cannot
    be said), and the points behind its straddling values (their plain baselines too)."""
    words, needs = [], []
    points: dict[tuple, Mapping[str, Any]] = {}
    for m, rs in straddling:
        needs.append(repetitions_to_decide(m.value, m.ci95, m.repetitions, low, high))
        if m.ci95 is None:
            words.append(f"{m.what}: {_fmt(m.value)} from one repetition, no interval")
        else:
            crossed = [b for b in (low, high) if m.value - m.ci95 <= b <= m.value + m.ci95]
            words.append(f"{m.what}: {_fmt(m.value)} ± {_fmt(m.ci95)} straddles "
                         f"{' and '.join(_fmt(b) for b in crossed)}")
        for r in rs:
            points[tuple(sorted((k, str(v)) for k, v in r.where_values().items()))] = r.where_values()
    decide = None if not needs or None in needs else max(needs)
    if decide is not None:
        now = min(m.repetitions or 0 for m, _ in straddling)
        words.append(f"about {decide} repetitions per point would decide it ({now} now)")
    else:
        words.append(f"more than {MOST_TO_DECIDE} repetitions per point, or a value on the bound itself or without "
                     "an interval: the number cannot be said")
    return "; ".join(words), decide, tuple(points.values())


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def _means_entry(op: str, metric: str, nums: Sequence[Row],
                 dens: Sequence[Row]) -> list[tuple[str, Estimate, list[Row]]]:
    value = combine(op, mean_of([r.metrics[metric] for r in nums]), mean_of([r.metrics[metric] for r in dens]))
    if value is None:
        return []
    return [(f"mean of {len(nums)} / mean of {len(dens)} points", value, [*nums, *dens])]


_BOUND_WORDS = {Bound.LINK: "the shaped link", Bound.CPU: "the emulator's CPU", Bound.OTHER: "neither link nor CPU"}
#: The same classes said of the seed's own points: its CPU is the seed's machine's, not this emulator's.
_SEED_BOUND_WORDS = {Bound.LINK: "their link", Bound.CPU: "the seed's own CPU", Bound.OTHER: "neither link nor CPU"}


def _why_not_testable(claim: Mapping[str, Any], metric: str, bounds: Mapping[str, int], scale: float,
                      judged: bool = False) -> str:
    """Why the claim cannot be tested by these points, or "" (pure).

    ``judged``: some of its values rest only on points bound as the seed's were.
    """
    if scale != 1.0 and metric in CPU_SHARE_METRICS and not judged:
        return (f"this machine keeps the link the limit only at the seed's rates divided by {scale:g} (the "
                "calibration), and a CPU share at that rate is not the seed's share at its own; at the seed's own "
                "rate this machine's CPU, not the link, is the limit")
    wanted = claim.get("seed_bound")
    known = {b: n for b, n in bounds.items() if b != "unknown"}
    if not wanted or not known or judged:
        return ""
    other = {b: n for b, n in known.items() if b != wanted}
    here = ", ".join(f"{n} by {_BOUND_WORDS.get(b, b)}" for b, n in sorted(other.items(), key=lambda kv: -kv[1]))
    return (f"{sum(other.values())} of the {sum(known.values())} points it rests on were bound here {here}; "
            f"the seed's were bound by {_SEED_BOUND_WORDS.get(wanted, wanted)}: "
            f"{claim.get('seed_bound_reason') or 'see the reference file'}")


def _mean_of(rows: Sequence[Row], metric: str) -> float | None:
    values = [r.value(metric)[0] for r in {id(r): r for r in rows}.values() if r.value(metric) is not None]
    return sum(values) / len(values) if values else None


def _label(row: Row) -> str:
    p = row.point
    bits = [row.part, str(p.profile), f"IPv{p.ip_version}", str(p.transport)]
    if p.size_mode != TRANSACTION_MODE:
        bits.append(f"{p.size_bytes} B")
    bits.append(f"{p.rate_mbit:g} Mbit/s")
    if p.clients not in (None, 1):
        bits.append(f"{p.clients} clients")
    return " ".join(bits)


def run_kernel(meta: Meta | Mapping[str, Any]) -> str:
    """The kernel a run measured on, as its meta.json names it ("User-Mode Linux 6.1.176")."""
    return as_meta(meta).kernel_label()


def differences(meta: Meta, reference: Mapping[str, Any], verdict: ClaimVerdict) -> str:
    """What differs between the seed's set-up and this run, as far as the data shows (for a claim that fails)."""
    out = []
    if verdict.points:
        out.append(f"{verdict.points_cpu_bound} of the {verdict.points} points it rests on were CPU-bound "
                   "here (the emulator's CPU, not the link, limited them)")
    out.append(f"this run: {run_kernel(meta)} on {meta.host_cpu_model or meta.cpu_model or '?'}"
               f" -- {meta.backend_note or 'all hosts on one machine'}")
    if verdict.metric.startswith("cpu_"):
        out.append("CPU here is the whole machine's share (every emulated host), the seed's one host's")
    if verdict.metric == FIELD.cpu_system_pct and verdict.cpu_busy_mean is not None:
        out.append(f"on these points the CPU was {verdict.cpu_busy_mean:.0f} % busy but only "
                   f"{verdict.cpu_system_mean:.1f} % system: this kernel's accounting does not put its "
                   "network and crypto work under system time as the seed's did")
    return "; ".join(out)


def scale_of(meta: Meta) -> float:
    """The factor a run divided the seed's link rates by (1.0: the seed's rates)."""
    return meta.scale.divisor if meta.scale else 1.0


def _bound_counts(rows: Sequence[Row]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in rows:
        if r.point.size_mode != TRANSACTION_MODE:
            counts[r.bound or "unknown"] = counts.get(r.bound or "unknown", 0) + 1
    return counts


@dataclasses.dataclass(frozen=True)
class PartSummary:
    """A part of the run as comparison.json names it: meta.json's entry and how many records it measured."""

    name: str | None
    title: str | None
    reference: str | None
    points: int
    regime: str = ""  # experiments.job.REGIMES


@dataclasses.dataclass(frozen=True)
class PartPenalty:
    """An IPsec point's penalty split into wire and other (:mod:`analysis.penalty`), with its part."""

    penalty: Penalty
    part: str
    limited: bool  # the point was CPU-bound

    def to_json(self) -> dict[str, Any]:
        """The entry of comparison.json's ``penalties``: the penalty's fields, its part and ``limited``."""
        return self.penalty.to_json() | {"part": self.part, "limited": self.limited}


@dataclasses.dataclass(frozen=True)
class TransactionSummary:
    """A request/response point: its mean time per transaction and the ratio to the plain baseline's."""

    point: Mapping[str, Any]  # Row.where_values
    mean_ms: float
    ci95: float | None
    ratio: float | None  # over the plain baseline's (None for the baseline itself)


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """A reproduction run judged against its seed: everything the report shows (:func:`evaluate`);
    :meth:`to_json` is ``comparison.json``."""

    seed: str | None
    title: str | None  # the seed's, from its reference file
    seed_setup: str | None  # ... and its set-up
    run: Meta  # what comparison.json keeps of meta.json (RUN_FIELDS; the others None)
    parts: tuple[PartSummary, ...]
    scale: MetaScale | None  # None: the seed's rates
    bounds: Mapping[str, int]  # the run's points by what bounded them ("unknown": not classified)
    values: tuple[ValueComparison, ...]
    ratios: tuple[TransferRatio, ...]
    claims: tuple[ClaimVerdict, ...]
    penalties: tuple[PartPenalty, ...]
    transactions: tuple[TransactionSummary, ...]

    @property
    def scale_factor(self) -> float:
        """What the seed's link rates were divided by (1.0: the seed's rates)."""
        return self.scale.divisor if self.scale else 1.0

    def to_json(self) -> dict[str, Any]:
        """comparison.json's object."""
        return {"seed": self.seed, "title": self.title, "seed_setup": self.seed_setup, "run": self.run.to_json(),
                "parts": [dataclasses.asdict(p) for p in self.parts],
                "scale": self.scale.to_json() if self.scale else None, "bounds": dict(self.bounds),
                "values": [v.to_json() for v in self.values], "ratios": [r.to_json() for r in self.ratios],
                "claims": [c.to_json() for c in self.claims], "penalties": [p.to_json() for p in self.penalties],
                "transactions": [dataclasses.asdict(t) for t in self.transactions]}


def evaluate(run_dir: str) -> Evaluation:
    """Everything :func:`analysis.reproduction_report.write_report` shows."""
    meta, parts = load_run(run_dir)
    reference = load_reference(str(meta.seed))
    scale = scale_of(meta)
    rows = rows_of(parts, scale)
    claims = []
    for claim in reference.get("claims", []):
        verdict = evaluate_claim(claim, rows, scale)
        claims.append(dataclasses.replace(
            verdict, differs=differences(meta, reference, verdict) if verdict.verdict == FAILS else ""))
    return Evaluation(
        seed=meta.seed, title=reference.get("title"), seed_setup=reference.get("setup"), run=meta.keep(RUN_FIELDS),
        parts=tuple(PartSummary(p.part.name, p.part.title, p.part.reference, len(p.records), p.part.regime or "")
                    for p in parts),
        scale=meta.scale or None, bounds=_bound_counts(rows),
        values=tuple(compare_values(reference, rows, scale)), ratios=tuple(transfer_ratios(reference, rows)),
        claims=tuple(claims),
        penalties=tuple(PartPenalty(r.penalty, r.part, r.limited) for r in rows if r.penalty is not None),
        transactions=tuple(
            TransactionSummary(r.where_values(), r.value(TRANSACTION_MS)[0], r.value(TRANSACTION_MS)[1],
                               r.metrics["transaction_ms_ratio"].value if r.metrics.get("transaction_ms_ratio")
                               else None)
            for r in rows if r.value(TRANSACTION_MS) is not None))


# -- output -----------------------------------------------------------------------------------

"""The regression gate: a run compared with a baseline, point by point, with its noise.

A *baseline* is a file (JSON) that keeps, for every point of a run, each repetition's goodput
and CPU cost (seconds per GB and microseconds per packet), plus the machine it was measured
on.  :func:`compare` takes a baseline and a run's records and gives one :class:`Verdict` per
point and metric (:data:`METRICS`; goodput unless others are asked for):

- the ratio ``R = mean(current) / mean(baseline)`` of the point's metric;
- its standard error by the delta method, ``R * sqrt(sc²/(nc·mc²) + sb²/(nb·mb²))``, with
  Welch-Satterthwaite degrees of freedom, as for a difference of means of unequal variances;
- ``regressed`` when the metric got worse by more than the allowed change at ``confidence``:
  for goodput (higher is better) the one-sided upper confidence bound of ``R`` lies below
  ``1 - max_drop``; for a CPU cost (lower is better) the one-sided lower bound lies above
  ``1 + max_drop``.  Noise alone (the same configuration measured again) almost never does
  that; ``benchmarks/regress_false_alarms.py`` measures how often it does.

A point with fewer than two repetitions on either side has no noise estimate and cannot be
judged: that is an error of the gate's set-up, not a pass.  Pure functions and the baseline's file
format only; :mod:`analysis.regress_report` writes verdicts as JUnit XML and Markdown, and
``ipsec-testbed regress`` runs sweeps and writes files.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from analysis.stats import Summary, aggregate
from testbed.record import FIELD, POINT_FIELDS, Bound, Group, Meta, Record, as_json, as_meta
from testbed.rundir import atomic_write

BASELINE_FORMAT = "ipsec-testbed-baseline/1"
#: What the gate can judge, per record field: (name, unit, +1 when higher is better, -1 when lower is).
METRICS: dict[str, tuple[str, str, int]] = {
    FIELD.goodput_mbps: ("goodput", "Mbit/s", 1),
    FIELD.cpu_s_per_gb: ("CPU per GB", "s/GB", -1),
    FIELD.cpu_us_per_packet: ("CPU per packet", "µs", -1),
    FIELD.instructions_per_packet: ("instructions per packet", "instructions", -1),
    FIELD.instructions_per_byte: ("instructions per byte", "instructions", -1),
}
DEFAULT_METRICS = (FIELD.goodput_mbps,)
#: A cost timed and the same cost counted (the counted backend's records have the second, never the first).
COUNTED = {FIELD.cpu_us_per_packet: FIELD.instructions_per_packet, FIELD.cpu_s_per_gb: FIELD.instructions_per_byte}


def clock_of(records: Sequence[Record]) -> str:
    """What the records' CPU figures count: ``instructions`` (all of them, the counted backend's) or ``time``;
    :class:`RegressError` when they mix the two (one chart, one baseline, one clock)."""
    clocks = {r.clock or "time" for r in records if not r.failed}
    if len(clocks) > 1:
        raise RegressError("the records mix CPU time and counted instructions (runs on the counted backend and on "
                           "another): compare each with its own kind")
    return clocks.pop() if clocks else "time"


def on_clock(metrics: Sequence[str], records: Sequence[Record]) -> tuple[str, ...]:
    """``metrics`` as the records can answer them: a CPU cost named in time is judged in instructions where the
    records count instructions (a suite's defaults name the timed cost), and a counted one refused where they
    time it."""
    if clock_of(records) == "instructions":
        return tuple(dict.fromkeys(COUNTED.get(m, m) for m in metrics))
    counted = [m for m in metrics if m in COUNTED.values()]
    if counted:
        raise RegressError(f"{METRICS[counted[0]][0]} is counted only on the counted backend (--kernel qemu); "
                           "this run timed its CPU")
    return tuple(metrics)


class RegressError(ValueError):
    """A baseline or run that cannot be compared (unreadable, no overlap, too few repetitions)."""


# -- Student's t ---------------------------------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` (> 0, fractional allowed) degrees of freedom."""
    if df <= 0:
        raise ValueError(f"df must be positive, not {df!r}")
    tail = 0.5 * _betai(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`t_cdf`)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), not {p!r}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2.0


# -- baselines -----------------------------------------------------------------------------

def _baseline_point(entry: Mapping[str, Any]) -> Group:
    """The point of one of a baseline file's points (its fields there; an empty one is none, as in
    :meth:`~testbed.record.Group.of`)."""
    return Group(**{f: None if entry.get(f) == "" else entry.get(f) for f in POINT_FIELDS})


def point_words(p: Group) -> str:
    """A point in words, as verdicts and the history name it:
    ``vpn_gateway aes-gcm-256 tunnel IPv4 tcp 100 Mbit/s mss 1400 B``."""
    return (f"{p.topology} {p.profile} {p.mode} IPv{p.ip_version} "
            f"{p.transport} {p.rate_mbit:g} Mbit/s {p.size_mode} {p.size_bytes} B")


def point_fields(point: Group) -> dict:
    """A point as messages and ``--json`` show it: every field of :data:`~testbed.record.POINT_FIELDS`."""
    return dict(zip(POINT_FIELDS, point.key(), strict=True))


def _measured(records: Sequence[Record], point: Group, metric: str) -> list[Record]:
    """The repetitions of ``point`` that measured ``metric`` (failed ones and anomalies did not)."""
    return [r for r in records
            if Group.of(r) == point and getattr(r, metric) is not None and r.bound is not Bound.ANOMALY]


def _samples(records: Sequence[Record], point: Group, metric: str) -> list[float]:
    """``metric`` of every repetition of ``point`` that measured it (failed ones and anomalies do not)."""
    return [float(getattr(r, metric)) for r in _measured(records, point, metric)]


def make_baseline(records: Sequence[Record], meta: Meta | Mapping[str, Any], source: str = "") -> dict:
    """A baseline from a run's records and metadata: every point's repetitions, and the machine."""
    points = []
    for agg in aggregate(records):
        entry = agg.point.to_json()
        for metric in METRICS:
            samples = _samples(records, agg.point, metric)
            if samples or metric == FIELD.goodput_mbps:  # goodput always: load_baseline needs its list
                entry[metric] = samples
        points.append(entry)
    if not points:
        raise RegressError("the run has no measured point to make a baseline of")
    meta = as_meta(meta)
    return {"format": BASELINE_FORMAT, "created": datetime.datetime.now(datetime.UTC).isoformat(
        timespec="seconds"), "source": source,
        **as_json({"machine": meta.machine(), "command_line": meta.command_line}), "points": points}


def load_baseline(path: str) -> dict:
    """Read a baseline file; :class:`RegressError` says what is wrong with it."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise RegressError(f"{path}: no such baseline file (make one with --save-baseline)") from None
    except (OSError, json.JSONDecodeError) as e:
        raise RegressError(f"{path}: not a readable baseline ({e})") from None
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT:
        raise RegressError(f"{path}: not an ipsec-testbed baseline (format {BASELINE_FORMAT!r} expected)")
    for i, p in enumerate(data.get("points") or []):
        if not isinstance(p, dict) or not isinstance(p.get(FIELD.goodput_mbps), list):
            raise RegressError(f"{path}: point {i} has no list of goodput samples")
    if not data.get("points"):
        raise RegressError(f"{path}: the baseline has no points")
    return data


def save_baseline(baseline: dict, path: str) -> None:
    """Write atomically (beside, then renamed over)."""
    atomic_write(path, json.dumps(baseline, indent=1, sort_keys=True) + "\n")


def machine_differences(baseline: Mapping[str, Any], meta: Meta | Mapping[str, Any]) -> list[str]:
    """``field: baseline -> now`` for every machine field (:data:`~testbed.record.MACHINE_FIELDS`) that differs."""
    then = baseline.get("machine") or {}
    return [f"{f}: {then.get(f)!r} -> {now!r}" for f, now in as_meta(meta).machine().items() if then.get(f) != now]


# -- the comparison ------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Verdict:
    """One point (the baseline's, without its repetitions) and metric: baseline and current values,
    their ratio and its one-sided bound on the side that would be worse (upper for goodput, lower
    for a CPU cost)."""

    point: Group
    baseline: Summary
    current: Summary
    ratio: float
    bound: float          # one-sided confidence bound of the ratio, on the worse side
    df: float
    regressed: bool
    low2: float = math.nan   # two-sided interval of the ratio at the same confidence
    high2: float = math.nan
    metric: str = FIELD.goodput_mbps

    @property
    def name(self) -> str:
        return point_words(self.point)

    @property
    def label(self) -> str:
        """The metric's name ("goodput", "CPU per GB")."""
        return METRICS[self.metric][0]

    @property
    def unit(self) -> str:
        return METRICS[self.metric][1]

    @property
    def better(self) -> int:
        """+1 when a higher value is better, -1 when a lower one is."""
        return METRICS[self.metric][2]

    def limit(self, max_change: float) -> float:
        """The ratio beyond which the metric counts as worse: 1 - max_change or 1 + max_change."""
        return 1.0 - max_change if self.better > 0 else 1.0 + max_change

    def worse(self, max_change: float) -> str:
        """What a regression of this metric is, in words."""
        return f"{self.label} {'fell' if self.better > 0 else 'rose'} by more than {max_change * 100:g}%"


def judge(baseline: Sequence[float], current: Sequence[float], max_drop: float, confidence: float,
          better: int = 1) -> tuple[float, float, float, bool]:
    """(ratio, bound, df, regressed) for one point's samples; see the module docstring.

    ``better``: +1 when higher values are better (goodput: the bound is the upper one, and a
    regression is a fall by more than ``max_drop``), -1 when lower ones are (a CPU cost: the
    lower bound, and a rise by more than ``max_drop``).
    """
    if not 0.0 < max_drop < 1.0:
        raise ValueError(f"max_drop must be a fraction in (0, 1), not {max_drop!r}")
    if better not in (1, -1):
        raise ValueError(f"better must be 1 or -1, not {better!r}")
    ratio, half, df = _ratio_spread(baseline, current, confidence)
    if better > 0:
        return ratio, ratio + half, df, ratio + half < 1.0 - max_drop
    return ratio, ratio - half, df, ratio - half > 1.0 + max_drop


def interval(baseline: Sequence[float], current: Sequence[float], confidence: float) -> tuple[float, float]:
    """The two-sided ``confidence`` interval of ``mean(current) / mean(baseline)``."""
    ratio, half, _ = _ratio_spread(baseline, current, (1.0 + confidence) / 2.0)
    return ratio - half, ratio + half


def _ratio_spread(baseline: Sequence[float], current: Sequence[float], level: float) -> tuple[float, float, float]:
    """(ratio of means, its one-sided ``level`` half-width, Welch-Satterthwaite df)."""
    if not 0.5 < level < 1.0:
        raise ValueError(f"confidence must be in (0.5, 1), not {level!r}")
    b, c = Summary.of(list(baseline)), Summary.of(list(current))
    if b.n < 2 or c.n < 2:
        raise RegressError(f"a point needs at least 2 repetitions on both sides to be judged "
                           f"(baseline {b.n}, current {c.n})")
    if b.mean <= 0:
        raise RegressError("the baseline's mean is not positive")
    ratio = c.mean / b.mean
    # relative variances of the two means; the delta method adds them for a ratio
    vc = (c.std / c.mean) ** 2 / c.n if c.mean > 0 else 0.0
    vb = (b.std / b.mean) ** 2 / b.n
    var = vc + vb
    if var == 0.0:
        return ratio, 0.0, math.inf
    df = var ** 2 / ((vc ** 2 / (c.n - 1) if vc else 0.0) + (vb ** 2 / (b.n - 1) if vb else 0.0))
    return ratio, t_quantile(level, df) * ratio * math.sqrt(var), df


def compare(baseline: Mapping[str, Any], records: Sequence[Record], max_drop: float = 0.05,
            confidence: float = 0.95, metrics: Sequence[str] = DEFAULT_METRICS) -> list[Verdict]:
    """One verdict per baseline point and metric; :class:`RegressError` when a point is missing
    from the run, or a metric from the baseline or the run."""
    _check_metrics(metrics)
    metrics = on_clock(metrics, records)
    present = {agg.point for agg in aggregate(records)}
    verdicts, missing = [], []
    for p in baseline["points"]:
        point = _baseline_point(p)
        if point not in present:
            missing.append(point)
            continue
        for metric in metrics:
            then, now = p.get(metric), _samples(records, point, metric)
            if not then:
                other = COUNTED.get(metric) or next((t for t, c in COUNTED.items() if c == metric), None)
                if other and p.get(other):  # the same cost on the other clock
                    raise RegressError("the baseline and the run count CPU on different clocks (one timed, one "
                                       "counted on --kernel qemu): make the baseline on the run's backend")
                raise RegressError(f"the baseline has no {METRICS[metric][0]} for {point_fields(point)} (a baseline "
                                   "made by an older version keeps goodput only: make it again)")
            if not now:
                raise RegressError(f"the run has no {METRICS[metric][0]} for {point_fields(point)}")
            better = METRICS[metric][2]
            ratio, bound, df, regressed = judge(then, now, max_drop, confidence, better)
            low2, high2 = interval(then, now, confidence)
            verdicts.append(Verdict(point, Summary.of(then), Summary.of(now), ratio, bound, df, regressed,
                                    low2, high2, metric))
    if missing:
        raise RegressError(f"{len(missing)} of the baseline's {len(baseline['points'])} points are not in the "
                           f"run (first: {point_fields(missing[0])}): the run must measure what the baseline did")
    return verdicts


def arms(records: Sequence[Record]) -> list[str]:
    """The arms of an A/B within one sweep (``"a"``, ``"b"``, ...) its records hold, in order."""
    return sorted({r.arm for r in records if r.arm})


def arm_records(records: Sequence[Record], arm: str) -> list[Record]:
    """The records of ``arm``, with the arm taken off, so the arms' points line up."""
    return [dataclasses.replace(r, arm="") for r in records if r.arm == arm]


def judge_paired(pairs: Sequence[tuple[float, float]], max_drop: float, confidence: float,
                 better: int = 1) -> tuple[float, float, float, bool, float, float]:
    """(ratio, bound, df, regressed, low2, high2) from (baseline, current) pairs measured side by side.

    The ratio is the geometric mean of the pairs' ratios; its interval is Student's t on their
    logarithms (a paired t-test).  A slow drift of the machine moves both values of a pair alike
    and so cancels, where :func:`judge`, comparing the two means, counts it as noise.
    """
    if not 0.0 < max_drop < 1.0:
        raise ValueError(f"max_drop must be a fraction in (0, 1), not {max_drop!r}")
    if not 0.5 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0.5, 1), not {confidence!r}")
    logs = [math.log(c / b) for b, c in pairs if b > 0 and c > 0]
    n = len(logs)
    if n < 2:
        raise RegressError(f"a paired comparison needs at least 2 pairs (has {n})")
    mean = math.fsum(logs) / n
    se = math.sqrt(math.fsum((x - mean) ** 2 for x in logs) / (n - 1) / n)
    one, two = t_quantile(confidence, n - 1) * se, t_quantile((1 + confidence) / 2, n - 1) * se
    ratio = math.exp(mean)
    if better > 0:
        bound = math.exp(mean + one)
        regressed = bound < 1.0 - max_drop
    else:
        bound = math.exp(mean - one)
        regressed = bound > 1.0 + max_drop
    return ratio, bound, float(n - 1), regressed, math.exp(mean - two), math.exp(mean + two)


def compare_arms(records: Sequence[Record], meta: Meta | Mapping[str, Any], base: str = "a",
                 current: str = "b", max_drop: float = 0.05, confidence: float = 0.95,
                 metrics: Sequence[str] = DEFAULT_METRICS, paired: bool = True) -> list[Verdict]:
    """Arm ``current`` of an A/B within one sweep judged against arm ``base``, point by point.

    ``paired`` (the default): the arms' repetitions of the same number were measured side by
    side (ABBA), so they are compared pair by pair (:func:`judge_paired`); otherwise as
    :func:`compare` judges a run against a baseline.
    """
    present = arms(records)
    for arm in (base, current):
        if arm not in present:
            raise RegressError(f"the run has no arm {arm!r} (arms: {', '.join(present) or 'none'}): an A/B "
                               "within a sweep is measured with `ipsec-testbed sweep --arms`")
    then, now = arm_records(records, base), arm_records(records, current)
    if not paired:
        return compare(make_baseline(then, meta), now, max_drop, confidence, metrics)
    _check_metrics(metrics)
    metrics = on_clock(metrics, records)
    verdicts = []
    for agg in aggregate(then):
        point = agg.point
        for metric in metrics:
            pairs = pairs_of(then, now, point, metric)
            if not pairs:
                raise RegressError(f"arm {current} has no {METRICS[metric][0]} for {point_fields(point)}")
            ratio, bound, df, regressed, low2, high2 = judge_paired(pairs, max_drop, confidence,
                                                                    METRICS[metric][2])
            verdicts.append(Verdict(point, Summary.of([p[0] for p in pairs]), Summary.of([p[1] for p in pairs]),
                                    ratio, bound, df, regressed, low2, high2, metric))
    return verdicts


def by_repetition(records: Sequence[Record], point: Group, metric: str) -> dict:
    """``metric`` of ``point``'s repetitions by repetition number (failed ones and anomalies left out)."""
    return {r.repetition: float(getattr(r, metric)) for r in _measured(records, point, metric)}


def pairs_of(then: Sequence[Record], now: Sequence[Record], point: Group,
             metric: str) -> list[tuple[float, float]]:
    """(then, now) values of ``metric`` at ``point``, repetition by repetition, where both have one."""
    a, b = by_repetition(then, point, metric), by_repetition(now, point, metric)
    return [(a[k], b[k]) for k in sorted(a) if k in b]


def _check_metrics(metrics: Sequence[str]) -> None:
    unknown = [m for m in metrics if m not in METRICS]
    if unknown or not metrics:
        raise RegressError(f"unknown metric {unknown[0] if unknown else '(none)'}; metrics: {', '.join(METRICS)}")


def exit_status(verdicts: Sequence[Verdict]) -> int:
    """0 when nothing regressed, 1 otherwise (2, an error, is the caller's)."""
    return 1 if any(v.regressed for v in verdicts) else 0


"""Statistics over result records: per-point summaries and IPsec/plain ratios, with 95 % intervals.

Pure functions on lists of :class:`~testbed.record.Record` (as :func:`testbed.rundir.load_results`
returns them; a results.jsonl line is taken as its record); numpy
is not needed, the standard library's arithmetic is exact enough for a few dozen repetitions.

* :func:`t_critical_95` -- the two-sided 95 % quantile of Student's t (no scipy): a table for
  1..30 degrees of freedom, the Cornish-Fisher expansion beyond.
* :func:`aggregate` -- mean, sample standard deviation, n, 95 % CI half-width, min and max of the
  goodput and of each CPU field, per point (the point key without the repetition).
* :func:`normalize` -- IPsec/plain ratios at the same point, with a delta-method interval;
  :func:`combine` and :func:`mean_of` -- ratios, differences and means of any two estimates, likewise.
* :func:`at_common_speed` -- CPU costs set to one machine speed, where a speed probe timed each
  window (:mod:`testbed.speedprobe`); :func:`aggregate` summarises those.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from testbed.record import (
    CAUTION_ORDER,
    COMPARED_FIELDS,
    CPU_FIELDS,
    FIELD,
    MATCH_FIELDS,
    PLAIN_PROFILE,
    POINT_FIELDS,
    Bound,
    Group,
    Record,
    Tunnel,
    as_records,
    usable,
)

log = logging.getLogger(__name__)

#: Repetitions beyond each point's first that a group of points (a profile at a rate) needs
#: for an elasticity of its own; with fewer it takes the run's.
ELASTICITY_MIN_DF = 8

#: The CPU doing a point's work counts as saturated when its meter found it busy this share of
#: the window, in percent (experiments.engine.verdict classes such a point ``cpu`` unless the link was
#: full) ...
CPU_SATURATED_PCT = 90.0
#: ... or when its kernel found no idle moment (its own /proc/stat, all CPUs, in percent) ...
KERNEL_BUSY_PCT = 99.0
#: ... or one of its CPUs this busy: a flow's work runs on one or two CPUs at a time, so on a
#: machine of many CPUs one saturated CPU bounds a point while the rest idle.
BUSIEST_CPU_PCT = 95.0


#: ``mode`` values a plain baseline may carry when the sweep records no IPsec mode for it.
NO_MODE = (None, "none", "")

# t_{0.975, df}: two-sided 95 %. Computed by integrating Student's density numerically
# (Simpson, 200 000 intervals) and bisecting; they agree with published tables to every digit
# those print (12.706, 4.303, 3.182, ... 2.042). tests/unit/test_analysis_stats.py re-derives them.
_T95_TABLE = (
    12.706204736, 4.302652730, 3.182446305, 2.776445105, 2.570581836,  # 1-5
    2.446911851, 2.364624252, 2.306004135, 2.262157163, 2.228138852,  # 6-10
    2.200985160, 2.178812830, 2.160368656, 2.144786688, 2.131449546,  # 11-15
    2.119905299, 2.109815578, 2.100922040, 2.093024054, 2.085963447,  # 16-20
    2.079613845, 2.073873068, 2.068657610, 2.063898562, 2.059538553,  # 21-25
    2.055529439, 2.051830516, 2.048407142, 2.045229642, 2.042272456,  # 26-30
)
_Z975 = 1.959963984540054  # standard normal 0.975 quantile


def t_critical_95(df: float) -> float:
    """Two-sided 95 % critical value of Student's t with ``df`` degrees of freedom.

    Integer ``df`` in 1..30: the table above (9 decimals). ``df`` > 30 (fractional allowed, and
    ``math.inf``): the Cornish-Fisher expansion of the t quantile in powers of 1/df
    (Abramowitz & Stegun 26.7.5, four terms), within 3e-8 of the exact value from 30 on.
    Fractional ``df`` below 30 (Welch-Satterthwaite degrees of freedom) are rounded *down*, the
    conservative choice (a slightly wider interval); interpolating the table would be off by
    up to 1 % below df = 3.
    """
    if isinstance(df, bool) or not isinstance(df, numbers.Real) or math.isnan(df):
        raise ValueError(f"df must be a number >= 1, not {df!r}")
    if df < 1:
        raise ValueError(f"df must be >= 1 (a sample of n values has n - 1), not {df!r}")
    if math.isinf(df):
        return _Z975
    if df <= 30:
        # 1e-9: a Welch df of 3.9999999999 is 4 computed in floating point, not 3
        return _T95_TABLE[min(30, math.floor(df + 1e-9)) - 1]
    z = _Z975
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    g4 = (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160
    return z + g1 / df + g2 / df ** 2 + g3 / df ** 3 + g4 / df ** 4


def repetitions_for(spread: float, target: float, most: int = 50) -> int | None:
    """The fewest repetitions (at least 2) whose 95 % confidence interval half-width,
    ``t_critical_95(n - 1) * spread / sqrt(n)``, is within ``target``, for values whose
    coefficient of variation is ``spread`` (both shares of the mean); None beyond ``most``."""
    if not (spread >= 0 and target > 0):
        raise ValueError(f"spread must be >= 0 and target > 0, not {spread!r} and {target!r}")
    for n in range(2, most + 1):
        if t_critical_95(n - 1) * spread / math.sqrt(n) <= target:
            return n
    return None


@dataclasses.dataclass(frozen=True)
class Summary:
    """One quantity over the repetitions of a point.

    ``std`` is the sample standard deviation (n - 1 in the denominator); ``ci95`` the half-width
    of the 95 % confidence interval of the mean, ``t(n-1) * std / sqrt(n)``. Both are None for a
    single repetition: one value says nothing about the spread.
    """

    n: int
    mean: float
    std: float | None
    ci95: float | None
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        if not values:
            raise ValueError("a summary needs at least one value")
        n = len(values)
        mean = math.fsum(values) / n
        lo, hi = float(min(values)), float(max(values))
        if n < 2:
            return cls(n, mean, None, None, lo, hi)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
        return cls(n, mean, std, t_critical_95(n - 1) * std / math.sqrt(n), lo, hi)


class _PointFields:
    """Named access to the point every aggregate and ratio carries."""

    point: Group

    @property
    def profile(self) -> Any:
        return self.point.profile

    @property
    def rate_mbit(self) -> float | None:
        return self.point.rate_mbit

    @property
    def size_bytes(self) -> Any:
        return self.point.size_bytes


@dataclasses.dataclass(frozen=True, eq=False)
class Aggregate(_PointFields):
    """The repetitions of one point, summarised.

    ``point`` has the grouping fields' values (``profile``, ``rate_mbit``, ``size_bytes``, ...;
    the others None). ``cpu`` holds a :class:`Summary` per field of
    :data:`~testbed.record.CPU_FIELDS` that the records carry.
    ``bounds`` counts the repetitions by what bounded them (``link``, ``cpu``, ``other``,
    ``anomaly``; see :mod:`experiments.engine.verdict`); anomalies are left out of every summary.
    ``n_emulation_limited`` counts repetitions limited by the emulator's CPU rather than by the
    emulated link (``cpu``, or the flag of runs from before the classes); ``n_failed`` those
    without a goodput.
    """

    point: Group
    goodput: Summary  # Mbit/s
    cpu: Mapping[str, Summary]
    theoretical_goodput_mbps: float | None
    retransmits: Summary | None
    loss_pct: Summary | None
    n_emulation_limited: int = 0
    n_failed: int = 0
    bounds: Mapping[Bound, int] = dataclasses.field(default_factory=dict)
    #: the latency probe's medians over the repetitions (ms): under load, its 99th percentile, unloaded
    rtt_ms: Summary | None = None
    rtt_p99_ms: Summary | None = None
    idle_rtt_ms: Summary | None = None

    @property
    def is_plain(self) -> bool:
        return Tunnel.of(self.profile) is None

    @property
    def bound(self) -> Bound | None:
        """What bounded most of the point's repetitions (anomalies aside); ties go to the more
        cautious class (cpu, other, link). Runs from before the monitor carry only the CPU flag:
        ``cpu`` when a repetition was flagged, else None (not known)."""
        counted = {b: n for b, n in self.bounds.items() if b.counted}
        if not counted:
            return Bound.CPU if self.n_emulation_limited else None
        return max(counted, key=lambda b: (counted[b], -CAUTION_ORDER.index(b)))

    @property
    def n_anomaly(self) -> int:
        return self.bounds.get(Bound.ANOMALY, 0)

    @property
    def emulation_limited(self) -> bool:
        return self.n_emulation_limited > 0

    @property
    def cpu_s_per_gb(self) -> Summary | None:
        return self.cpu.get(FIELD.cpu_s_per_gb)

    @property
    def counted(self) -> bool:
        """Whether its CPU cost was counted in instructions (the counted backend) rather than timed."""
        return FIELD.instructions_per_byte in self.cpu

    @property
    def cost(self) -> Summary | None:
        """Its CPU cost per byte delivered, on its own clock: instructions per byte where it was counted, CPU
        seconds per GB where it was timed (never the one in place of the other: :attr:`counted` says which)."""
        return self.cpu.get(FIELD.instructions_per_byte) if self.counted else self.cpu_s_per_gb

    @property
    def cpu_saturated(self) -> bool:
        """Whether the CPU doing the work was saturated, on the mean of the repetitions.

        Then its CPU-seconds per GB are mostly the CPU there was divided by the bytes moved: they
        follow the goodput and cannot show one profile costlier than that. At 100 Mbit/s in
        User-Mode Linux the guest is 93-100 % busy with the link full, plain or AES-GCM-256, and
        their CPU per GB at MSS 1460 differ by 1.09x, while at 10 Mbit/s (12-17 % busy) by 1.45x.
        """
        return saturated({field: s.mean for field, s in self.cpu.items()})

    @property
    def cpu_at_common_speed(self) -> bool:
        """Whether its CPU costs were set to the run's common speed (:func:`at_common_speed`)."""
        return FIELD.cpu_s_per_gb_measured in self.cpu

    @property
    def cpu_s_per_gb_as_measured(self) -> Summary | None:
        """CPU-seconds per GB as measured, before any setting to the run's common speed."""
        return self.cpu.get(FIELD.cpu_s_per_gb_measured, self.cpu_s_per_gb)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        return None
    return float(value)


def _summary_of(records: Sequence[Record], field: str) -> Summary | None:
    values = [v for v in (_number(getattr(r, field)) for r in records) if v is not None]
    return Summary.of(values) if values else None


def sort_key(point: Group, keys: Sequence[str]) -> tuple:
    """Order points by ``keys``; the plain profile before the others, None last, numbers numerically."""
    out = []
    for k in keys:
        v = getattr(point, k)
        if k == FIELD.profile:
            out.append((v != PLAIN_PROFILE, str(v)))
        elif v is None:
            out.append((2, 0, ""))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append((0, v, ""))
        else:
            out.append((1, 0, str(v)))
    return tuple(out)


def aggregate(records: Iterable[Record | Mapping[str, Any]], keys: Sequence[str] = POINT_FIELDS) -> list[Aggregate]:
    """Group records by ``keys`` (the point without its repetition) and summarise each group.

    A repetition written twice for the same point (a resumed run that measured it again) counts
    once: the later record wins, with a warning. Records without a goodput (a failed
    measurement) are counted in ``n_failed``; a point with no goodput at all is left out with a
    warning. The result is sorted by ``keys``.
    """
    keys = tuple(keys)
    groups: dict[Group, list[Record]] = {}
    for r in at_common_speed(_latest_per_repetition(as_records(records), keys)):
        # an arm only for the arms of an A/B within a sweep (experiments.engine.plan.SweepSpec.arms)
        groups.setdefault(Group.of(r, keys), []).append(r)
    out = []
    for point, group in groups.items():
        with_goodput = [r for r in group if _number(r.goodput_mbps) is not None]
        bounds: dict[Bound, int] = {}
        for r in with_goodput:
            if r.bound:
                bounds[r.bound] = bounds.get(r.bound, 0) + 1
        # an anomaly's figures contradict each other: counted, never averaged
        measured = [r for r in with_goodput if usable(r)]
        if not measured:
            # the report and the table say how many repetitions failed; this is detail
            log.info("point %s: none of its %d repetitions has a usable goodput; left out", point, len(group))
            continue
        theoretical = _summary_of(measured, FIELD.theoretical_goodput_mbps)
        cpu = {f: s for f in CPU_FIELDS if (s := _summary_of(measured, f)) is not None}
        out.append(Aggregate(
            point=point,
            goodput=_summary_of(measured, FIELD.goodput_mbps),
            cpu=cpu,
            theoretical_goodput_mbps=theoretical.mean if theoretical else None,
            retransmits=_summary_of(measured, FIELD.retransmits),
            loss_pct=_summary_of(measured, FIELD.loss_pct),
            n_emulation_limited=sum(1 for r in measured if r.bound is Bound.CPU
                                    or (r.bound is None and r.emulation_limited is True)),
            n_failed=len(group) - len(with_goodput),
            bounds=bounds,
            rtt_ms=_summary_of(measured, FIELD.probe_rtt_ms),
            rtt_p99_ms=_summary_of(measured, FIELD.probe_rtt_p99_ms),
            # the path unloaded, taken before a point's first repetition: whatever that window then measured
            idle_rtt_ms=_summary_of(with_goodput, FIELD.idle_rtt_ms),
        ))
    out.sort(key=lambda a: sort_key(a.point, keys))
    return out


def _latest_per_repetition(records: Sequence[Record], keys: Sequence[str]) -> list[Record]:
    """Drop a repetition written again later for the same point (the point being :data:`~testbed.record.POINT_FIELDS`
    and ``keys``, whichever is finer), keeping file order otherwise."""
    identity = tuple(dict.fromkeys((*POINT_FIELDS, *keys)))
    latest: dict[tuple, int] = {}
    for i, r in enumerate(records):
        key = (*(getattr(r, k) for k in identity), r.repetition)
        if key in latest:
            log.warning("point %s: repetition %s appears more than once; using the last record",
                        Group.of(r, identity).to_json(), r.repetition)
        latest[key] = i
    keep = set(latest.values())
    return [r for i, r in enumerate(records) if i in keep]


@dataclasses.dataclass(frozen=True)
class RatioEstimate:
    """A ratio of two means with the half-width of its 95 % confidence interval.

    ``ci95`` and ``df`` are None when either side has a single repetition.
    """

    value: float
    ci95: float | None
    df: float | None

    @property
    def low(self) -> float | None:
        return None if self.ci95 is None else self.value - self.ci95

    @property
    def high(self) -> float | None:
        return None if self.ci95 is None else self.value + self.ci95


def ratio_of_means(num: Summary, den: Summary) -> RatioEstimate | None:
    """``num.mean / den.mean`` with a 95 % interval by the delta method; None when ``den.mean`` is 0.

    The two samples are independent (different runs), so the first-order Taylor expansion of
    R = X/Y gives ``Var(R) ~ u + v`` with ``u = s_x^2 / (n_x * m_y^2)`` and
    ``v = R^2 * s_y^2 / (n_y * m_y^2)``. The interval is ``R +- t(df) * sqrt(u + v)`` with
    Welch-Satterthwaite degrees of freedom ``(u + v)^2 / (u^2 / (n_x - 1) + v^2 / (n_y - 1))``.

    The delta method is chosen over Fieller's interval because it is symmetric and always exists;
    it is accurate while the baseline's relative standard error is small (below about 10 %, the
    case for goodput through a shaped link). Fieller's interval is asymmetric and becomes
    unbounded as the baseline's mean approaches zero within its own noise.
    """
    if den.mean == 0:
        return None
    r = num.mean / den.mean
    if num.std is None or den.std is None:
        return RatioEstimate(r, None, None)
    u = num.std ** 2 / (num.n * den.mean ** 2)
    v = r ** 2 * den.std ** 2 / (den.n * den.mean ** 2)
    if u + v == 0:
        return RatioEstimate(r, 0.0, None)
    df = (u + v) ** 2 / (u ** 2 / (num.n - 1) + v ** 2 / (den.n - 1))
    return RatioEstimate(r, t_critical_95(df) * math.sqrt(u + v), df)


#: An estimate with the half-width of its 95 % interval, whatever it estimates (a ratio, a difference).
Estimate = RatioEstimate


def difference_of_means(num: Summary, den: Summary) -> Estimate:
    """``num.mean - den.mean`` with Welch's 95 % interval (``ci95`` None when either side has a
    single repetition): the two samples are independent, ``se^2 = s_x^2 / n_x + s_y^2 / n_y``."""
    d = num.mean - den.mean
    if num.std is None or den.std is None:
        return Estimate(d, None, None)
    u, v = num.std ** 2 / num.n, den.std ** 2 / den.n
    if u + v == 0:
        return Estimate(d, 0.0, None)
    df = (u + v) ** 2 / (u ** 2 / (num.n - 1) + v ** 2 / (den.n - 1))
    return Estimate(d, t_critical_95(df) * math.sqrt(u + v), df)


def combine(op: str, num: Summary | Estimate, den: Summary | Estimate) -> Estimate | None:
    """``num / den`` (``op`` "ratio") or ``num - den`` ("difference") with a 95 % interval; None for a
    ratio over 0.  Two summaries take :func:`ratio_of_means` / :func:`difference_of_means`; an
    estimate on either side (itself a ratio, or a mean of means) adds its interval in quadrature,
    relative for a ratio, absolute for a difference: first order, as the delta method."""
    if op not in ("ratio", "difference"):
        raise ValueError(f"op must be ratio or difference, not {op!r}")
    if isinstance(num, Summary) and isinstance(den, Summary):
        return ratio_of_means(num, den) if op == "ratio" else difference_of_means(num, den)
    x, y = as_estimate(num), as_estimate(den)
    a, ca, b, cb = x.value, x.ci95, y.value, y.ci95
    if op == "difference":
        return Estimate(a - b, None if ca is None or cb is None else math.hypot(ca, cb), None)
    if b == 0:
        return None
    r = a / b
    if ca is None or cb is None or a == 0:
        return Estimate(r, None, None)
    return Estimate(r, abs(r) * math.hypot(ca / a, cb / b), None)


def paired(op: str, num: Mapping[Any, float], den: Mapping[Any, float]) -> Estimate | None:
    """``num / den`` (``op`` "ratio") or ``num - den`` ("difference") of two quantities measured in pairs:
    ``num[k]`` beside ``den[k]`` for each key ``k`` (a repetition, its two sides measured one after the
    other), as the mean of the pairs' ratios (differences) with a t interval over them (pure).

    Pairing takes out what drifts between pairs (the machine's speed from one minute to the next),
    which the unpaired :func:`ratio_of_means` counts twice as noise.  None with fewer than two pairs,
    or for a ratio over 0."""
    if op not in ("ratio", "difference"):
        raise ValueError(f"op must be ratio or difference, not {op!r}")
    keys = sorted(set(num) & set(den))
    if len(keys) < 2 or (op == "ratio" and any(den[k] == 0 for k in keys)):
        return None
    s = Summary.of([num[k] / den[k] if op == "ratio" else num[k] - den[k] for k in keys])
    return Estimate(s.mean, s.ci95, float(s.n - 1))


def mean_of(estimates: Sequence[Summary | Estimate]) -> Estimate:
    """The mean of several points' values, with ``sqrt(sum ci_i^2) / k`` as its interval (the points
    are measured independently; None when any has none)."""
    if not estimates:
        raise ValueError("a mean needs at least one value")
    each = [as_estimate(e) for e in estimates]
    k = len(each)
    ci = None if any(e.ci95 is None for e in each) else math.sqrt(math.fsum(e.ci95 ** 2 for e in each)) / k
    return Estimate(math.fsum(e.value for e in each) / k, ci, None)


def as_estimate(x: Summary | Estimate) -> Estimate:
    """A summary as its mean with its interval; an estimate as it is (pure)."""
    return Estimate(x.mean, x.ci95, None) if isinstance(x, Summary) else x


@dataclasses.dataclass(frozen=True, eq=False)
class Ratio(_PointFields):
    """An IPsec point against the plain baseline at the same point.

    ``goodput`` is IPsec goodput / plain goodput (1.0 = no cost); ``cpu_s_per_gb`` is IPsec
    CPU-seconds per GB / plain CPU-seconds per GB (2.0 = twice the CPU for the same data), or, counted, the
    same of instructions per byte.
    """

    point: Group  # the IPsec aggregate's point (profile included)
    ipsec: Aggregate
    plain: Aggregate
    goodput: RatioEstimate | None
    cpu_s_per_gb: RatioEstimate | None

    @property
    def bound(self) -> Bound | None:
        """The more cautious class of the two sides: a ratio is no more a property of the link
        than its less link-bound side (cpu, then other, then link)."""
        sides = [b for b in (self.ipsec.bound, self.plain.bound) if b is not None]
        return min(sides, key=CAUTION_ORDER.index) if sides else None


def _match_key(point: Group, *, any_mode: bool = False) -> tuple:
    return (point.replace(mode=None) if any_mode else point).key(MATCH_FIELDS)


def find_baseline(point: Group, plain: Sequence[Aggregate]) -> Aggregate | None:
    """The plain aggregate matching ``point`` on :data:`~testbed.record.MATCH_FIELDS`.

    A plain record has no IPsec mode; when the sweep wrote it with ``mode`` null or "none"
    instead of repeating the IPsec points' mode, it matches IPsec points of any mode.
    """
    exact = [a for a in plain if _match_key(a.point) == _match_key(point)]
    if exact:
        return exact[0]
    modeless = [a for a in plain if a.point.mode in NO_MODE
                and _match_key(a.point, any_mode=True) == _match_key(point, any_mode=True)]
    return modeless[0] if modeless else None


def normalize(aggregates: Sequence[Aggregate]) -> list[Ratio]:
    """IPsec/plain ratios of goodput and of CPU-seconds per GB, one per IPsec aggregate with a baseline.

    IPsec aggregates without a plain baseline at the same point are left out (logged at INFO).
    See :func:`ratio_of_means` for the interval.
    """
    if aggregates and aggregates[0].point.profile is None:
        raise ValueError("normalize needs aggregates grouped by 'profile' (see testbed.record.POINT_FIELDS)")
    plain = [a for a in aggregates if a.is_plain]
    out = []
    for a in aggregates:
        if a.is_plain:
            continue
        base = find_baseline(a.point, plain)
        if base is None:
            log.info("point %s: no plain baseline at the same point; no ratio", a.point.to_json())
            continue
        cpu = None
        if a.cost is not None and base.cost is not None and a.counted == base.counted:
            cpu = ratio_of_means(a.cost, base.cost)
        out.append(Ratio(point=a.point, ipsec=a, plain=base,
                         goodput=ratio_of_means(a.goodput, base.goodput), cpu_s_per_gb=cpu))
    return out


#: The points that share an elasticity: a profile at a rate (every point field but the size).
_SPEED_GROUP = tuple(f for f in POINT_FIELDS if f != FIELD.size_bytes)


def _speed_group(r: Record) -> Group:
    return Group.of(r, _SPEED_GROUP)


#: The monitor's rule for a saturated CPU: a field at or above its limit (see CPU_SATURATED_PCT).
SATURATION_LIMITS = ((FIELD.cpu_busy_pct, CPU_SATURATED_PCT), (FIELD.cpu_kernel_busy_pct, KERNEL_BUSY_PCT),
                     (FIELD.cpu_busiest_pct, BUSIEST_CPU_PCT))


def saturated(means: Mapping[str, float]) -> bool:
    """Whether a point's CPU was saturated by the monitor's rule, from the means of its
    repetitions' CPU fields (a field at or above its limit in :data:`SATURATION_LIMITS`)."""
    return any(field in means and means[field] >= limit for field, limit in SATURATION_LIMITS)


def _speed_timed(records: Sequence[Record]) -> dict[Group, list[Record]]:
    """The repetitions whose CPU cost can be set to another machine speed, by point: the probe
    timed the window, there is a cost, it is no anomaly, and its point's CPU was not saturated
    on the mean of these repetitions (a saturated CPU's time is the window's, whatever the
    speed: its cost follows the goodput, not the probe; the whole point is left as measured,
    as it is marked)."""
    points: dict[Group, list[Record]] = {}
    for r in records:
        if ((_number(r.speed_probe_ns) or 0) > 0 and (_number(r.cpu_s_per_gb) or 0) > 0
                and r.bound is not Bound.ANOMALY):
            points.setdefault(Group.of(r), []).append(r)
    return {key: group for key, group in points.items()
            if not saturated({f: s.mean for f, _ in SATURATION_LIMITS if (s := _summary_of(group, f))})}


def elasticities(records: Sequence[Record | Mapping[str, Any]]) -> dict[Group | None, float]:
    """How a CPU cost follows the machine's speed: the slope of log(CPU per GB) on log(probe ns
    per operation) between repetitions of the same point, pooled over a profile at a rate (key:
    :func:`_speed_group`) and over the whole run (key None), never below 0.  Only repetitions
    with both figures at points whose CPU was not saturated count; a point with one such
    repetition adds nothing."""
    return _elasticities(_speed_timed(as_records(records)))


def _elasticities(points: Mapping[Group, Sequence[Record]]) -> dict[Group | None, float]:
    """:func:`elasticities` of repetitions already chosen and grouped by :func:`_speed_timed`."""
    sums: dict[Group | None, list[float]] = {}
    for group in points.values():
        xy = [(math.log(r.speed_probe_ns), math.log(r.cpu_s_per_gb)) for r in group]
        if len(xy) < 2:
            continue
        mx = math.fsum(x for x, _ in xy) / len(xy)
        my = math.fsum(y for _, y in xy) / len(xy)
        sxx = math.fsum((x - mx) ** 2 for x, _ in xy)
        sxy = math.fsum((x - mx) * (y - my) for x, y in xy)
        for g in (_speed_group(group[0]), None):
            acc = sums.setdefault(g, [0.0, 0.0, 0.0])
            acc[0], acc[1], acc[2] = acc[0] + sxx, acc[1] + sxy, acc[2] + len(xy) - 1
    slopes = {g: max(0.0, sxy / sxx) if sxx > 0 else 0.0 for g, (sxx, sxy, _) in sums.items()}
    run = slopes.get(None, 0.0)
    return {g: (s if g is None or sums[g][2] >= ELASTICITY_MIN_DF else run) for g, s in slopes.items()}


def at_common_speed(records: Sequence[Record | Mapping[str, Any]]) -> list[Record]:
    """The records, with their CPU costs set to what they would have been at the run's common
    machine speed, where a speed probe timed their windows.

    On a shared machine the same work costs different CPU time from window to window; a probe
    on a spare CPU (testbed.speedprobe) times a fixed workload over each window.  A record's
    costs (:data:`~testbed.record.SPEED_ADJUSTED`) are multiplied by ``(reference / probe) ** b``.  ``b`` is
    the elasticity of its point's group (:func:`elasticities`).  The reference is the
    geometric mean of the probe over the windows of every point compared with it (all
    profiles, sizes and arms at its rate): a repetition measured while the machine ran slow
    counts at the speed of the others.  Each rate has a reference of its own because the
    guest's load slows the probe a little (~1 % at 100 Mbit/s against 10, on a quiet hour).
    Each cost as measured is kept (its ``_measured`` field), and ``speed_factor`` says what it
    was multiplied by (:meth:`~testbed.record.Record.at_speed`).  Points whose CPU was saturated (on the mean of their
    repetitions, as the reports mark them) are left as they are: the CPU time of a saturated
    window is the window's, whatever the machine's speed.  So are records without a probe
    figure, and runs with fewer than three others; where the costs do not follow the probe
    ``b`` is near 0, and so is the change.
    """
    records = as_records(records)
    if any(r.speed_factor is not None for r in records):  # set already
        return records
    points = _speed_timed(records)
    timed = [r for group in points.values() for r in group]
    if len(timed) < 3:
        return records
    logs: dict[Group, list[float]] = {}
    for r in timed:
        logs.setdefault(Group.of(r, COMPARED_FIELDS), []).append(math.log(r.speed_probe_ns))
    reference = {key: math.fsum(xs) / len(xs) for key, xs in logs.items()}
    slopes = _elasticities(points)
    chosen = {id(r) for r in timed}
    out: list[Record] = []
    for r in records:
        if id(r) not in chosen:
            out.append(r)
            continue
        slope = slopes.get(_speed_group(r), slopes.get(None, 0.0))
        factor = math.exp(slope * (reference[Group.of(r, COMPARED_FIELDS)] - math.log(r.speed_probe_ns)))
        out.append(r.at_speed(factor))
    return out

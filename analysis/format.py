"""How points are named, grouped and written as text: labels, numbers with their CI, scenarios and panels.

Pure functions on :mod:`analysis.stats` aggregates, shared by the figures, the terminal tables and the HTML page.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from analysis.stats import (
    BUSIEST_CPU_PCT,
    CPU_SATURATED_PCT,
    KERNEL_BUSY_PCT,
    NO_MODE,
    PLAIN_PROFILE,
    Aggregate,
    Ratio,
    RatioEstimate,
    Summary,
)
from testbed.record import CAUTION_ORDER, FIELD, Bound, Group


def profile_label(profile: Any) -> str:
    """How a profile is named in legends and tables."""
    return "plain (no IPsec)" if profile == PLAIN_PROFILE else str(profile)


def rate_label(rate_mbit: float | None) -> str:
    return "unshaped link" if rate_mbit is None else f"{rate_mbit:g} Mbit/s link"


def describe(key: str, value: Any) -> str:
    if key == FIELD.rate_mbit:
        return rate_label(value)
    if key == FIELD.mode and value in NO_MODE:
        return "no IPsec mode"
    if value is None:
        return f"{key} n/a"
    if key == FIELD.ip_version:
        return f"IPv{value}"
    if key == FIELD.transport:
        return str(value).upper()
    if key == FIELD.mode:
        return f"{value} mode"
    if key == FIELD.clients:
        return f"{value} client{'s' if value != 1 else ''}"
    if key == FIELD.size_mode:
        return {"mss": "sized by MSS", "write": "sized by write", "datagram": "sized by datagram"}.get(
            value, f"size mode {value}")
    if key == FIELD.topology:
        return str(value)
    return f"{key} {value}"


def fmt_num(x: float | None, sig: int = 3) -> str:
    """``x`` with ``sig`` significant digits, never in exponent notation; "–" for None."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{decimals(x, sig)}f}"


def decimals(x: float, sig: int) -> int:
    if x == 0 or not math.isfinite(x):
        return max(0, sig - 1)
    return max(0, sig - 1 - math.floor(math.log10(abs(x))))


def fmt_mean_ci(mean: float | None, ci: float | None, sig: int = 3) -> tuple[str, str]:
    """Mean and CI half-width with the same number of decimals (those of the mean)."""
    if mean is None:
        return "–", "–"
    d = decimals(mean, sig)
    return f"{mean:.{d}f}", ("–" if ci is None else f"{ci:.{d}f}")


NOT_SCENARIO = (FIELD.profile, FIELD.size_bytes)


def panel_key(point: Group) -> tuple:
    """The scenario and rate a point is drawn in: its fields but the profile and size, as (name, value)."""
    return tuple((k, v) for k, v in point.to_json().items() if k not in NOT_SCENARIO)


@dataclasses.dataclass
class Panel:
    key: tuple
    items: list = dataclasses.field(default_factory=list)

    @property
    def point(self) -> Group:
        return Group(**dict(self.key))

    @property
    def size_mode(self) -> Any:
        return self.point.size_mode


def group_panels(items: Sequence[Any]) -> list[Panel]:
    """Group aggregates (or ratios) into panels, in order; a plain baseline recorded without a
    mode joins every panel whose IPsec points differ from it only by the mode."""
    panels: dict[tuple, Panel] = {}
    modeless_plain = []
    for it in items:
        if it.point.profile == PLAIN_PROFILE and it.point.mode in NO_MODE:
            modeless_plain.append(it)
            continue
        key = panel_key(it.point)
        panels.setdefault(key, Panel(key)).items.append(it)
    for it in modeless_plain:
        own = panel_key(it.point)
        rest = tuple((k, v) for k, v in own if k != FIELD.mode)
        targets = [p for k, p in panels.items() if tuple((a, b) for a, b in k if a != FIELD.mode) == rest]
        if not targets:
            targets = [panels.setdefault(own, Panel(own))]
        for p in targets:
            p.items.append(it)
    ordered = sorted(panels.values(), key=lambda p: panel_sort(p.point))
    return ordered


def panel_sort(point: Group) -> tuple:
    # the rate apart: a plain point has no arm where its IPsec arms have one, so the tuples differ in length
    scenario = tuple((v is None, str(v)) for k, v in point.to_json().items() if k != FIELD.rate_mbit)
    return scenario, (point.rate_mbit is None, point.rate_mbit or 0)


def panel_titles(panels: Sequence[Panel]) -> list[str]:
    keys = [k for k, _ in panels[0].key] if panels else []
    varying = [k for k in keys if k not in (FIELD.rate_mbit, FIELD.size_mode)
               and len({str(getattr(p.point, k)) for p in panels}) > 1]
    titles = []
    for p in panels:
        parts = [describe(k, getattr(p.point, k)) for k in varying]
        parts.append(describe(FIELD.rate_mbit, p.point.rate_mbit))
        titles.append(" · ".join(parts))
    return titles


def scenario_summary(points: Sequence[Group]) -> str:
    """What all points share besides the topology, e.g. "TCP · IPv4 · tunnel mode · 1 client"."""
    parts = []
    for k in (FIELD.transport, FIELD.ip_version, FIELD.mode, FIELD.clients):
        values = {getattr(p, k) for p in points if not (k == FIELD.mode and p.profile == PLAIN_PROFILE)}
        if len(values) == 1:
            (v,) = values
            if v is not None:
                parts.append(describe(k, v))
    return " · ".join(parts)


def scenario_key(panel: Panel) -> tuple:
    return tuple((k, v) for k, v in panel.key if k != FIELD.rate_mbit)


def row_order(a: Aggregate) -> tuple:
    # mode after size: a plain baseline recorded without a mode stays next to the IPsec rows of every mode
    return (panel_sort(a.point.replace(mode=None, profile=None, size_bytes=None)), a.size_bytes or 0,
            a.profile != PLAIN_PROFILE, str(a.point.mode or ""), str(a.profile))


def table_rows(aggs: Sequence[Aggregate]) -> list[Aggregate]:
    """Aggregates ordered so that plain and IPsec at the same size are adjacent."""
    return sorted(aggs, key=row_order)


def ratio_index(ratios: Sequence[Ratio]) -> dict[int, Ratio]:
    return {id(r.ipsec): r for r in ratios}


def scenario_of(a: Aggregate, varying: Sequence[str]) -> str:
    return " · ".join(describe(k, getattr(a.point, k)) for k in varying)


def varying_scenario_keys(aggs: Sequence[Aggregate]) -> list[str]:
    keys = [k for k in (aggs[0].point.to_json() if aggs else {}) if k not in (*NOT_SCENARIO, FIELD.rate_mbit)]
    out = []
    for k in keys:
        values = {str(getattr(a.point, k)) for a in aggs
                  if not (k == FIELD.mode and a.is_plain and a.point.mode in NO_MODE)}
        if len(values) > 1:
            out.append(k)
    return out


def bound_text(a: Aggregate) -> str:
    """What bounded the point's repetitions: "link", "CPU 2/3, link 1/3", plus anomalies left out
    and failed repetitions. Runs from before the monitor say only "CPU-bound" where flagged."""
    counted = {b: n for b, n in a.bounds.items() if b is not Bound.ANOMALY}
    total = sum(counted.values())
    flags = []
    if len(counted) == 1:
        flags.append(next(iter(counted)).label)
    elif counted:
        order = sorted(counted, key=CAUTION_ORDER.index)
        flags.append(", ".join(f"{b.label} {counted[b]}/{total}" for b in order))
    elif a.emulation_limited:
        flags.append("CPU-bound" if a.n_emulation_limited == a.goodput.n
                     else f"CPU-bound {a.n_emulation_limited}/{a.goodput.n}")
    if a.n_anomaly:
        flags.append(f"{a.n_anomaly} {'anomaly' if a.n_anomaly == 1 else 'anomalies'} left out")
    if a.n_failed:
        flags.append(f"{a.n_failed} failed")
    return ", ".join(flags)


#: What the latency column says.
RTT_HELP = ("the latency probe's median round trip during the window, with the point's flows (every 100 ms on the "
            "first flow's path, by ping or irtt: meta.json's spec says which; the records have its 90th and 99th "
            "percentiles, and irtt's one-way delays), and in brackets the same just before the flows started")


def rtt_text(a: Aggregate) -> str:
    """The probe's median round trip under load and unloaded, ms: ``4.31 (0.42)``."""
    if a.rtt_ms is None:
        return ""
    idle = f" ({a.idle_rtt_ms.mean:.2f})" if a.idle_rtt_ms is not None else ""
    return f"{a.rtt_ms.mean:.2f}{idle}"


def ratio_text(r: RatioEstimate | None) -> str:
    if r is None:
        return ""
    return f"{r.value:.3f}" if r.ci95 is None else f"{r.value:.3f} ± {r.ci95:.3f}"


def summary_text(s: Summary | None) -> str:
    if s is None:
        return ""
    mean, ci = fmt_mean_ci(s.mean, s.ci95)
    return mean if s.ci95 is None else f"{mean} ± {ci}"


#: Marks a CPU cost taken with the CPU saturated (Aggregate.cpu_saturated), explained by SATURATED_HELP.
SATURATED_MARK = "*"
SATURATED_HELP = (f"the CPU was at least {CPU_SATURATED_PCT:g} % busy (or one CPU {BUSIEST_CPU_PCT:g} %, or the "
                  f"kernel's own account {KERNEL_BUSY_PCT:g} %): the CPU "
                  "per GB is then mostly the CPU there was over the goodput, so it follows the goodput and shows "
                  "a costlier profile as less costly than it is; compare CPU costs where the CPU was less busy")


#: Says that CPU costs were set to the run's common machine speed (analysis.stats.at_common_speed).
AT_COMMON_SPEED_HELP = ("at the run's common machine speed: a speed probe on a spare host CPU timed every window, "
                        "and each repetition's cost was set to the mean speed of its rate's windows, so a "
                        "repetition taken while the shared machine ran slow counts at the speed of the others "
                        "(each as measured is in results.jsonl)")


def any_at_common_speed(aggs: Sequence[Aggregate]) -> bool:
    """Whether any point's CPU costs were set to the run's common speed (shown with AT_COMMON_SPEED_HELP)."""
    return any(a.cpu_at_common_speed for a in aggs)


def cpu_cost_marked(a: Aggregate) -> bool:
    """Whether the point has a CPU cost, taken with its CPU saturated (shown with SATURATED_MARK)."""
    return a.cost is not None and a.cpu_saturated


#: What a counted cost is, for a table's caption.
COUNTED_HELP = ("instructions per byte of goodput, counted by the emulator on the counted backend (--kernel qemu): "
                "all of the guest's work, the same on every machine; not CPU seconds")


def cost_header(aggs: Sequence[Aggregate]) -> str:
    """The CPU cost column's name: CPU seconds per GB, or instructions per byte where the points were counted (a
    table holds one clock: a report refuses to mix them, analysis.regress.clock_of)."""
    return "insn/B" if any(a.counted for a in aggs) else "CPU s/GB"


def cpu_cost_text(a: Aggregate) -> str:
    """The point's CPU cost per byte (± 95 % CI) on its clock, marked when its CPU was saturated."""
    text = summary_text(a.cost)
    return f"{text} {SATURATED_MARK}" if cpu_cost_marked(a) else text


def cpu_ratio_text(r: Ratio | None) -> str:
    """IPsec/plain CPU per GB (± 95 % CI), marked when either side's CPU was saturated."""
    text = ratio_text(r.cpu_s_per_gb if r else None)
    return f"{text} {SATURATED_MARK}" if text and (r.ipsec.cpu_saturated or r.plain.cpu_saturated) else text


def group_of(a: Aggregate, varying: Sequence[str]) -> tuple:
    """Rows of one scenario and rate belong together in tables."""
    return scenario_of(a, [k for k in varying if k != "mode"]), a.rate_mbit


def compare_key(a: Aggregate) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in a.point.to_json().items()))

"""Figures, tables and the HTML report of a sweep, from its aggregated results.

Every ``fig_*`` function returns a plotly :class:`~plotly.graph_objects.Figure` and writes nothing;
:func:`render_html` returns the page as a string; the command line (:mod:`analysis.cli`) writes it.

Figures follow the 2005 gateway study (shared/seeds/003): goodput against payload size, one panel
per link rate, plain and IPsec in the same panel (its Fig. 6); IPsec/plain goodput against size
(its Fig. 7a, "normalized throughput"); CPU cost against size (its Figs. 4-5, here as CPU-seconds
per gigabyte delivered, which does not depend on how fast the link is). A panel is one link rate
of one scenario (topology, transport, IP version, mode, ...); the panel title names only what
differs between panels. Each profile keeps its colour in every figure; the plain baseline is
dark grey.
"""
from __future__ import annotations

import dataclasses
import html
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional, Union

import plotly.graph_objects as go
from plotly.subplots import make_subplots
from rich import box
from rich.table import Table

from testbed.rundir import load_meta, load_results
from analysis.stats import (
    NO_MODE,
    PLAIN_PROFILE,
    Aggregate,
    Ratio,
    RatioEstimate,
    Summary,
    aggregate,
    normalize,
)

EMULATION_LIMITED_LABEL = "CPU-bound (emulator limit)"
THEORETICAL_LABEL = "theoretical goodput (dashed)"
PLAIN_COLOR = "#3a3a3a"
# Okabe & Ito's colour-blind-safe palette (yellow left out: unreadable on white).
PROFILE_PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#8C564B", "#7F7F7F")
RUN_DASHES = ("solid", "dot", "dashdot", "longdash")  # runs in a comparison
RUN_SYMBOLS = ("circle", "diamond", "square", "triangle-up")

SIZE_AXIS_TITLES = {
    "mss": "TCP MSS (bytes)",
    "write": "write size (bytes)",
    "datagram": "UDP payload (bytes)",
}
_PANEL_HEIGHT_PX = 340
_MAX_COLUMNS = 3
_FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"


# ---------------------------------------------------------------------------------------------
# labels and colours

def profile_label(profile: Any) -> str:
    """How a profile is named in legends and tables."""
    return "plain (no IPsec)" if profile == PLAIN_PROFILE else str(profile)


def profile_colors(profiles: Iterable[Any]) -> dict[Any, str]:
    """A colour per profile: the plain baseline dark grey, the others by sorted name.

    Every figure of a report calls this with the same set of profiles (a figure of ratios has
    no plain profile, which takes no palette slot), so a profile keeps its colour throughout.
    """
    names = sorted({str(p) for p in profiles if p != PLAIN_PROFILE})
    colors: dict[Any, str] = {PLAIN_PROFILE: PLAIN_COLOR}
    for i, name in enumerate(names):
        colors[name] = PROFILE_PALETTE[i % len(PROFILE_PALETTE)]
    return colors


def _color_of(colors: Mapping[Any, str], profile: Any) -> str:
    return colors.get(profile) or colors.get(str(profile)) or PROFILE_PALETTE[-1]


def rate_label(rate_mbit: Optional[float]) -> str:
    return "unshaped link" if rate_mbit is None else f"{rate_mbit:g} Mbit/s link"


def _describe(key: str, value: Any) -> str:
    if key == "rate_mbit":
        return rate_label(value)
    if key == "mode" and value in NO_MODE:
        return "no IPsec mode"
    if value is None:
        return f"{key} n/a"
    if key == "ip_version":
        return f"IPv{value}"
    if key == "transport":
        return str(value).upper()
    if key == "mode":
        return f"{value} mode"
    if key == "clients":
        return f"{value} client{'s' if value != 1 else ''}"
    if key == "size_mode":
        return {"mss": "sized by MSS", "write": "sized by write", "datagram": "sized by datagram"}.get(
            value, f"size mode {value}")
    if key == "topology":
        return str(value)
    return f"{key} {value}"


def fmt_num(x: Optional[float], sig: int = 3) -> str:
    """``x`` with ``sig`` significant digits, never in exponent notation; "–" for None."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{_decimals(x, sig)}f}"


def _decimals(x: float, sig: int) -> int:
    if x == 0 or not math.isfinite(x):
        return max(0, sig - 1)
    return max(0, sig - 1 - math.floor(math.log10(abs(x))))


def fmt_mean_ci(mean: Optional[float], ci: Optional[float], sig: int = 3) -> tuple[str, str]:
    """Mean and CI half-width with the same number of decimals (those of the mean)."""
    if mean is None:
        return "–", "–"
    d = _decimals(mean, sig)
    return f"{mean:.{d}f}", ("–" if ci is None else f"{ci:.{d}f}")


# ---------------------------------------------------------------------------------------------
# panels: one per (scenario, link rate)

_NOT_SCENARIO = ("profile", "size_bytes")


def _panel_key(point: Mapping[str, Any]) -> tuple:
    return tuple((k, v) for k, v in point.items() if k not in _NOT_SCENARIO)


@dataclasses.dataclass
class _Panel:
    key: tuple
    items: list = dataclasses.field(default_factory=list)

    @property
    def point(self) -> dict[str, Any]:
        return dict(self.key)

    @property
    def size_mode(self) -> Any:
        return self.point.get("size_mode")


def _panels(items: Sequence[Any]) -> list[_Panel]:
    """Group aggregates (or ratios) into panels, in order; a plain baseline recorded without a
    mode joins every panel whose IPsec points differ from it only by the mode."""
    panels: dict[tuple, _Panel] = {}
    modeless_plain = []
    for it in items:
        if it.point.get("profile") == PLAIN_PROFILE and it.point.get("mode") in NO_MODE:
            modeless_plain.append(it)
            continue
        key = _panel_key(it.point)
        panels.setdefault(key, _Panel(key)).items.append(it)
    for it in modeless_plain:
        own = _panel_key(it.point)
        rest = tuple((k, v) for k, v in own if k != "mode")
        targets = [p for k, p in panels.items() if tuple((a, b) for a, b in k if a != "mode") == rest]
        if not targets:
            targets = [panels.setdefault(own, _Panel(own))]
        for p in targets:
            p.items.append(it)
    ordered = sorted(panels.values(), key=lambda p: _panel_sort(p.point))
    return ordered


def _panel_sort(point: Mapping[str, Any]) -> tuple:
    out = []
    for k, v in point.items():
        if k == "rate_mbit":
            continue
        out.append((v is None, str(v)))
    rate = point.get("rate_mbit")
    out.append((rate is None, rate or 0))
    return tuple(out)


def _panel_titles(panels: Sequence[_Panel]) -> list[str]:
    keys = [k for k, _ in panels[0].key] if panels else []
    varying = [k for k in keys if k != "rate_mbit" and len({str(p.point.get(k)) for p in panels}) > 1
               and k != "size_mode"]
    titles = []
    for p in panels:
        parts = [_describe(k, p.point.get(k)) for k in varying]
        parts.append(_describe("rate_mbit", p.point.get("rate_mbit")))
        titles.append(" · ".join(parts))
    return titles


def _scenario_summary(points: Sequence[Mapping[str, Any]]) -> str:
    """What all points share besides the topology, e.g. "TCP · IPv4 · tunnel mode · 1 client"."""
    parts = []
    for k in ("transport", "ip_version", "mode", "clients"):
        values = {p.get(k) for p in points if not (k == "mode" and p.get("profile") == PLAIN_PROFILE)}
        if len(values) == 1:
            (v,) = values
            if v is not None:
                parts.append(_describe(k, v))
    return " · ".join(parts)


def _scenario_key(panel: _Panel) -> tuple:
    return tuple((k, v) for k, v in panel.key if k != "rate_mbit")


def _positions(panels: Sequence[_Panel]) -> tuple[list[tuple[int, int]], int, int]:
    """(row, col) of each panel, 1-based, and the grid's rows and columns.

    Up to three panels per row; each scenario starts a new row, so with several scenarios
    (IPv4 and IPv6, say) the same link rate sits in the same column.
    """
    per_scenario: dict[tuple, int] = {}
    for p in panels:
        per_scenario[_scenario_key(p)] = per_scenario.get(_scenario_key(p), 0) + 1
    cols = min(_MAX_COLUMNS, max(per_scenario.values(), default=1))
    positions, row, seen = [], 0, {}
    for p in panels:
        key = _scenario_key(p)
        i = seen.get(key, 0)
        if i == 0 or i % cols == 0:
            row += 1
        seen[key] = i + 1
        positions.append((row, i % cols + 1))
    return positions, max(row, 1), cols


def _make_grid(panels: Sequence[_Panel], *, shared_y: bool, y_title: str) -> go.Figure:
    positions, rows, cols = _positions(panels)
    used = set(positions)
    # no axes where no panel is (the end of a short row); titles go to the panels in row order
    fig = make_subplots(rows=rows, cols=cols,
                        specs=[[{} if (r, c) in used or not panels else None for c in range(1, cols + 1)]
                               for r in range(1, rows + 1)],
                        subplot_titles=_panel_titles(panels) or None,
                        horizontal_spacing=0.07 if cols > 1 else 0.0,
                        # ~120 px between rows: the x axis title above, the next panel's title below
                        vertical_spacing=min(0.3, 120 / (rows * _PANEL_HEIGHT_PX)) if rows > 1 else 0.0,
                        shared_yaxes="all" if shared_y else False)
    for panel, (row, col) in zip(panels, positions):
        fig.update_xaxes(title_text=SIZE_AXIS_TITLES.get(panel.size_mode, "payload size (bytes)"),
                         row=row, col=col)
        if col == 1:  # the unit is the same in every panel; the scales are each panel's own
            fig.update_yaxes(title_text=y_title, row=row, col=col)
    fig.update_xaxes(rangemode="tozero", showline=True, linecolor="#888", ticks="outside",
                     gridcolor="#e6e6e6", zeroline=False)
    fig.update_yaxes(rangemode="tozero", showline=True, linecolor="#888", ticks="outside",
                     gridcolor="#e6e6e6", zeroline=False)
    fig.update_annotations(font_size=14)  # the panel titles
    fig.update_layout(
        template="plotly_white",
        font=dict(family=_FONT, size=13, color="#222"),
        height=rows * _PANEL_HEIGHT_PX + 150,
        margin=dict(l=70, r=30, t=110, b=60),
        hovermode="closest",
        legend=dict(orientation="v", x=1.01, xanchor="left", y=1.0, yanchor="top",
                    bgcolor="rgba(255,255,255,0.9)", bordercolor="#ccc", borderwidth=1,
                    font=dict(size=12), tracegroupgap=4),
    )
    return fig


def _cell(panels: Sequence[_Panel], i: int) -> dict[str, int]:
    row, col = _positions(panels)[0][i]
    return {"row": row, "col": col}


def _marker_symbols(flags: Sequence[bool]) -> list[str]:
    return ["circle-open" if f else "circle" for f in flags]


def _ci_array(values: Sequence[Optional[float]]) -> list[Optional[float]]:
    return [None if v is None else float(v) for v in values]


def _theoretical_legend(fig: go.Figure) -> None:
    """One legend entry for every profile's dashed theoretical line (each in its profile's colour)."""
    fig.add_trace(go.Scatter(
        x=[None], y=[None], mode="lines", name=THEORETICAL_LABEL, showlegend=True,
        legendgroup="theoretical", legendrank=1500, line=dict(color="#777", width=1.5, dash="dash"),
        meta={"kind": "legend", "what": "theoretical"}, hoverinfo="skip"))


def _emulation_legend(fig: go.Figure) -> None:
    """A legend entry explaining hollow markers (the trace has no points of its own)."""
    fig.add_trace(go.Scatter(
        x=[None], y=[None], mode="markers", name=EMULATION_LIMITED_LABEL, showlegend=True,
        legendgroup="emulation-limited", legendrank=2000,
        marker=dict(symbol="circle-open", size=10, color="#555", line=dict(width=2, color="#555")),
        meta={"kind": "legend", "what": "emulation_limited"}, hoverinfo="skip"))


def _title(text: str, subtitle: str) -> dict:
    return dict(text=text, x=0.0, xanchor="left", xref="paper", font=dict(size=18),
                subtitle=dict(text=subtitle, font=dict(size=13, color="#555")))


def _no_data(fig: go.Figure, what: str) -> go.Figure:
    fig.add_annotation(text=what, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5,
                       font=dict(size=15, color="#777"))
    return fig


# ---------------------------------------------------------------------------------------------
# figures

def fig_throughput(aggs: Sequence[Aggregate], colors: Optional[Mapping[Any, str]] = None) -> go.Figure:
    """Goodput against payload size: a panel per link rate (and scenario), a line per profile.

    Markers are the mean over repetitions, error bars the 95 % confidence interval of the mean,
    the dashed line of the same colour the theoretical goodput when the records carry one.
    Points the runner flagged as limited by the emulator's CPU have hollow markers.
    ``colors`` (profile -> colour) defaults to :func:`profile_colors` of these aggregates.
    """
    panels = _panels(aggs)
    fig = _make_grid(panels, shared_y=False, y_title="goodput (Mbit/s)")
    subtitle = ["mean of the repetitions", "error bars: 95 % confidence interval"]
    if any(a.theoretical_goodput_mbps is not None for a in aggs):
        subtitle.append("dashed: theoretical goodput")
    if any(a.emulation_limited for a in aggs):
        subtitle.append("hollow: CPU-bound")
    fig.update_layout(title=_title("Goodput vs payload size", " · ".join(subtitle)))
    if not panels:
        return _no_data(fig, "no measured points")
    colors = colors or profile_colors(a.profile for a in aggs)
    shown: set[str] = set()
    any_limited = any_theoretical = False
    for i, panel in enumerate(panels):
        for profile, series in _by_profile(panel.items):
            color = _color_of(colors, profile)
            label = profile_label(profile)
            flags = [a.emulation_limited for a in series]
            any_limited |= any(flags)
            fig.add_trace(_measured_trace(
                series, [a.goodput for a in series], profile, label, color, flags, label not in shown,
                customdata=[[a.goodput.n, fmt_num(a.goodput.ci95), fmt_num(a.goodput.min), fmt_num(a.goodput.max),
                             "yes" if a.emulation_limited else "no"] for a in series],
                hovertemplate=(f"<b>{html.escape(label)}</b><br>size %{{x}} B<br>goodput %{{y:.3g}} Mbit/s "
                               "± %{customdata[1]} (95 % CI, n=%{customdata[0]})<br>"
                               "min %{customdata[2]}, max %{customdata[3]}<br>CPU-bound: %{customdata[4]}"
                               "<extra></extra>"),
                meta={"kind": "goodput", "profile": profile, "rate_mbit": panel.point.get("rate_mbit")},
            ), **_cell(panels, i))
            shown.add(label)
            theo = [a for a in series if a.theoretical_goodput_mbps is not None]
            if theo:
                any_theoretical = True
                theo_label = f"{label}: theoretical"
                # in the profile's legend group (hidden with it), explained by one shared legend entry
                fig.add_trace(go.Scatter(
                    x=[a.size_bytes for a in theo], y=[a.theoretical_goodput_mbps for a in theo],
                    mode="lines", name=theo_label, legendgroup=str(profile), showlegend=False,
                    line=dict(color=color, width=1.5, dash="dash"), opacity=0.85,
                    hovertemplate=f"{html.escape(theo_label)}<br>size %{{x}} B<br>%{{y:.3g}} Mbit/s<extra></extra>",
                    meta={"kind": "theoretical", "profile": profile, "rate_mbit": panel.point.get("rate_mbit")},
                ), **_cell(panels, i))
    if any_theoretical:
        _theoretical_legend(fig)
    if any_limited:
        _emulation_legend(fig)
    return fig


def fig_normalized(ratios: Sequence[Ratio], colors: Optional[Mapping[Any, str]] = None) -> go.Figure:
    """IPsec goodput / plain goodput against payload size, a panel per link rate, shared y axis.

    Error bars are the delta-method 95 % interval of the ratio (:func:`analysis.stats.ratio_of_means`);
    the grey line at 1.0 is "no cost". Hollow markers: the IPsec or the plain point was CPU-bound.
    """
    usable = [r for r in ratios if r.goodput is not None]
    panels = _panels(usable)
    fig = _make_grid(panels, shared_y=True, y_title="IPsec / plain goodput")
    fig.update_layout(title=_title(
        "Normalized goodput: IPsec / plain at the same point",
        "1.0 = IPsec costs nothing · error bars: 95 % confidence interval (delta method)"))
    if not panels:
        return _no_data(fig, "no IPsec point has a plain baseline at the same point")
    colors = colors or profile_colors(r.profile for r in usable)
    shown: set[str] = set()
    any_limited = False
    top = 1.0
    for i, panel in enumerate(panels):
        for profile, series in _by_profile(panel.items):
            color = _color_of(colors, profile)
            label = profile_label(profile)
            flags = [r.ipsec.emulation_limited or r.plain.emulation_limited for r in series]
            any_limited |= any(flags)
            top = max([top] + [r.goodput.value + (r.goodput.ci95 or 0) for r in series])
            fig.add_trace(go.Scatter(
                x=[r.size_bytes for r in series], y=[r.goodput.value for r in series],
                mode="lines+markers", name=label, legendgroup=str(profile), showlegend=label not in shown,
                line=dict(color=color, width=2),
                marker=dict(symbol=_marker_symbols(flags), size=9, color=color, line=dict(width=2, color=color)),
                error_y=dict(type="data", array=_ci_array([r.goodput.ci95 for r in series]), color=color,
                             thickness=1.5, width=5),
                customdata=[[fmt_num(r.goodput.ci95, 2), fmt_num(r.ipsec.goodput.mean), fmt_num(r.plain.goodput.mean)]
                            for r in series],
                hovertemplate=(f"<b>{html.escape(label)}</b><br>size %{{x}} B<br>IPsec/plain %{{y:.3f}} "
                               "± %{customdata[0]}<br>%{customdata[1]} / %{customdata[2]} Mbit/s<extra></extra>"),
                meta={"kind": "ratio", "profile": profile, "rate_mbit": panel.point.get("rate_mbit")},
            ), **_cell(panels, i))
            shown.add(label)
    fig.add_hline(y=1.0, line=dict(color="#777", width=1.5, dash="dot"), row="all", col="all")
    fig.update_yaxes(range=[0, max(1.1, top) * 1.05], rangemode="normal")
    if any_limited:
        _emulation_legend(fig)
    return fig


def fig_cpu(aggs: Sequence[Aggregate], colors: Optional[Mapping[Any, str]] = None) -> go.Figure:
    """CPU-seconds per gigabyte delivered against payload size, a panel per link rate, a line per profile.

    CPU-seconds per GB divides the CPU time the runner measured by the data delivered, so links
    of different rates compare directly; error bars are 95 % confidence intervals.
    """
    usable = [a for a in aggs if a.cpu_s_per_gb is not None]
    panels = _panels(usable)
    fig = _make_grid(panels, shared_y=False, y_title="CPU time per GB (s/GB)")
    fig.update_layout(title=_title(
        "CPU cost per gigabyte delivered",
        "CPU-seconds spent per GB of goodput · lower is better · error bars: 95 % confidence interval"))
    if not panels:
        return _no_data(fig, "no CPU measurements in these results")
    colors = colors or profile_colors(a.profile for a in aggs)
    shown: set[str] = set()
    any_limited = False
    for i, panel in enumerate(panels):
        for profile, series in _by_profile(panel.items):
            color = _color_of(colors, profile)
            label = profile_label(profile)
            flags = [a.emulation_limited for a in series]
            any_limited |= any(flags)
            fig.add_trace(_measured_trace(
                series, [a.cpu_s_per_gb for a in series], profile, label, color, flags, label not in shown,
                customdata=[[a.cpu_s_per_gb.n, fmt_num(a.cpu_s_per_gb.ci95),
                             fmt_num(a.cpu["cpu_busy_pct"].mean) if "cpu_busy_pct" in a.cpu else "–"]
                            for a in series],
                hovertemplate=(f"<b>{html.escape(label)}</b><br>size %{{x}} B<br>%{{y:.3g}} s/GB ± %{{customdata[1]}}"
                               " (n=%{customdata[0]})<br>CPU busy %{customdata[2]} %<extra></extra>"),
                meta={"kind": "cpu_s_per_gb", "profile": profile, "rate_mbit": panel.point.get("rate_mbit")},
            ), **_cell(panels, i))
            shown.add(label)
    if any_limited:
        _emulation_legend(fig)
    return fig


def _measured_trace(series: Sequence[Any], summaries: Sequence[Any], profile: Any, label: str, color: str,
                    flags: Sequence[bool], showlegend: bool, **more: Any) -> go.Scatter:
    """One profile's measured means against payload size, with 95 % CI bars; hollow where CPU-bound."""
    return go.Scatter(
        x=[a.size_bytes for a in series], y=[m.mean for m in summaries],
        mode="lines+markers", name=label, legendgroup=str(profile), showlegend=showlegend,
        line=dict(color=color, width=2.5 if profile == PLAIN_PROFILE else 2),
        marker=dict(symbol=_marker_symbols(flags), size=9, color=color, line=dict(width=2, color=color)),
        error_y=dict(type="data", array=_ci_array([m.ci95 for m in summaries]), color=color, thickness=1.5, width=5),
        **more)


def _by_profile(items: Sequence[Any]) -> list[tuple[Any, list[Any]]]:
    groups: dict[Any, list[Any]] = {}
    for it in items:
        groups.setdefault(it.point.get("profile"), []).append(it)
    ordered = sorted(groups.items(), key=lambda kv: (kv[0] != PLAIN_PROFILE, str(kv[0])))
    return [(p, sorted(s, key=lambda it: it.point.get("size_bytes") or 0)) for p, s in ordered]


# ---------------------------------------------------------------------------------------------
# a run: its records, metadata and label

@dataclasses.dataclass(frozen=True, eq=False)
class RunData:
    """One run directory's results, aggregated, with the label it carries in comparisons."""

    label: str
    meta: Mapping[str, Any]
    records: list[dict[str, Any]]
    aggregates: list[Aggregate]
    ratios: list[Ratio]
    run_dir: Optional[str] = None

    @classmethod
    def from_records(cls, records: Sequence[Mapping[str, Any]], meta: Optional[Mapping[str, Any]] = None,
                     *, label: Optional[str] = None, run_dir: Optional[str] = None) -> "RunData":
        meta = dict(meta or {})
        aggs = aggregate(records)
        return cls(label=label or run_label(meta, records), meta=meta, records=list(records),
                   aggregates=aggs, ratios=normalize(aggs), run_dir=run_dir)

    @classmethod
    def from_dir(cls, run_dir: Union[str, os.PathLike], *, label: Optional[str] = None) -> "RunData":
        return cls.from_records(load_results(run_dir), load_meta(run_dir), label=label, run_dir=str(run_dir))


def run_label(meta: Mapping[str, Any], records: Sequence[Mapping[str, Any]] = ()) -> str:
    """"uml · kernel 6.1.176" from the metadata, or from the records when the metadata lacks it."""
    first = records[0] if records else {}
    backend = meta.get("backend") or first.get("backend") or "unknown backend"
    release = meta.get("kernel_release") or first.get("kernel_release") or "unknown"
    return f"{backend} · kernel {release}"


# ---------------------------------------------------------------------------------------------
# terminal tables

def _row_order(a: Aggregate) -> tuple:
    # mode after size: a plain baseline recorded without a mode stays next to the IPsec rows of every mode
    scenario = {k: v for k, v in _panel_key(a.point) if k != "mode"}
    return (_panel_sort(scenario), a.size_bytes or 0, a.profile != PLAIN_PROFILE,
            str(a.point.get("mode") or ""), str(a.profile))


def _table_rows(aggs: Sequence[Aggregate]) -> list[Aggregate]:
    """Aggregates ordered so that plain and IPsec at the same size are adjacent."""
    return sorted(aggs, key=_row_order)


def _ratio_index(ratios: Sequence[Ratio]) -> dict[int, Ratio]:
    return {id(r.ipsec): r for r in ratios}


def _scenario_of(a: Aggregate, varying: Sequence[str]) -> str:
    return " · ".join(_describe(k, a.point.get(k)) for k in varying)


def _varying_scenario_keys(aggs: Sequence[Aggregate]) -> list[str]:
    keys = [k for k in (aggs[0].point if aggs else {}) if k not in ("profile", "size_bytes", "rate_mbit")]
    out = []
    for k in keys:
        values = {str(a.point.get(k)) for a in aggs if not (k == "mode" and a.is_plain and a.point.get(k) in NO_MODE)}
        if len(values) > 1:
            out.append(k)
    return out


def _flag(a: Aggregate) -> str:
    flags = []
    if a.emulation_limited:
        flags.append("CPU-bound" if a.n_emulation_limited == a.goodput.n
                     else f"CPU-bound {a.n_emulation_limited}/{a.goodput.n}")
    if a.n_failed:
        flags.append(f"{a.n_failed} failed")
    return ", ".join(flags)


def _ratio_text(r: Optional[RatioEstimate]) -> str:
    if r is None:
        return ""
    return f"{r.value:.3f}" if r.ci95 is None else f"{r.value:.3f} ± {r.ci95:.3f}"


def _summary_text(s: Optional[Summary]) -> str:
    if s is None:
        return ""
    mean, ci = fmt_mean_ci(s.mean, s.ci95)
    return mean if s.ci95 is None else f"{mean} ± {ci}"


def _rich_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], *,
                left: Sequence[str] = (), styles: Sequence[Optional[str]] = (),
                sections: Sequence[bool] = ()) -> Table:
    """A compact table whose cells never wrap (a wrapped "0.91 ± 0.03" reads as two values);
    only the headers wrap when the terminal is narrow."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for j, h in enumerate(headers):
        width = max([len(r[j]) for r in rows] + [min(len(w) for w in h.split()) if h.strip() else 1])
        table.add_column(h, justify="left" if h in left else "right", min_width=width)
    for i, row in enumerate(rows):
        table.add_row(*row, style=styles[i] if i < len(styles) else None,
                      end_section=sections[i] if i < len(sections) else False)
    return table


def terminal_table(aggs: Sequence[Aggregate], ratios: Sequence[Ratio], title: Optional[str] = None) -> Table:
    """The aggregated points as a rich table: plain and IPsec side by side per size.

    Columns: profile, rate, size, mean goodput, its 95 % CI half-width, repetitions, IPsec/plain
    goodput (± 95 % CI), CPU-seconds per GB (± 95 % CI), and flags (CPU-bound, failed
    repetitions). A scenario column comes first when the points span several scenarios.
    """
    varying = _varying_scenario_keys(aggs)
    by_ipsec = _ratio_index(ratios)
    headers = ["profile", "rate Mbit/s", "size B", "mean Mbit/s", "±95% CI", "n", "IPsec/plain", "CPU s/GB", "flag"]
    if varying:
        headers.insert(0, "scenario")
    rows, styles, sections = [], [], []
    ordered = _table_rows(aggs)
    for i, a in enumerate(ordered):
        mean, ci = fmt_mean_ci(a.goodput.mean, a.goodput.ci95)
        ratio = by_ipsec.get(id(a))
        cells = ["plain" if a.is_plain else str(a.profile), "unshaped" if a.rate_mbit is None else f"{a.rate_mbit:g}",
                 str(a.size_bytes), mean, ci, str(a.goodput.n), _ratio_text(ratio.goodput if ratio else None),
                 _summary_text(a.cpu_s_per_gb), _flag(a)]
        if varying:
            cells.insert(0, _scenario_of(a, varying))
        nxt = ordered[i + 1] if i + 1 < len(ordered) else None
        rows.append(cells)
        styles.append("bold" if a.is_plain else None)
        sections.append(nxt is not None and _group_of(nxt, varying) != _group_of(a, varying))
    return _rich_table(title or "Goodput per point (mean of repetitions, 95 % confidence intervals)",
                       headers, rows, left=("scenario", "profile", "flag"), styles=styles, sections=sections)


def _group_of(a: Aggregate, varying: Sequence[str]) -> tuple:
    """Rows of one scenario and rate belong together in tables."""
    return _scenario_of(a, [k for k in varying if k != "mode"]), a.rate_mbit


def _compare_key(a: Aggregate) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in a.point.items()))


def compare_rows(runs: Sequence[RunData]) -> tuple[list[str], list[list[str]], list[bool]]:
    """Headers, rows and which rows are plain, for the comparison of runs (terminal and HTML)."""
    all_aggs = [a for run in runs for a in run.aggregates]
    varying = _varying_scenario_keys(all_aggs)
    headers = (["scenario"] if varying else []) + ["profile", "rate Mbit/s", "size B"]
    for run in runs:
        headers += [f"{run.label}: Mbit/s", f"{run.label}: IPsec/plain"]
    indexes = [({_compare_key(a): a for a in run.aggregates}, _ratio_index(run.ratios)) for run in runs]
    seen: dict[tuple, Aggregate] = {}
    for a in all_aggs:
        seen.setdefault(_compare_key(a), a)
    rows, plain = [], []
    for key, a in sorted(seen.items(), key=lambda kv: _row_order(kv[1])):
        cells = (["plain" if a.is_plain else str(a.profile), "unshaped" if a.rate_mbit is None else f"{a.rate_mbit:g}",
                  str(a.size_bytes)])
        if varying:
            cells.insert(0, _scenario_of(a, varying))
        for aggs_by_key, ratio_by_ipsec in indexes:
            mine = aggs_by_key.get(key)
            if mine is None:
                cells += ["", ""]
                continue
            ratio = ratio_by_ipsec.get(id(mine))
            cells += [_summary_text(mine.goodput), _ratio_text(ratio.goodput if ratio else None)]
        rows.append(cells)
        plain.append(a.is_plain)
    return headers, rows, plain


def compare_table(runs: Sequence[RunData]) -> Table:
    """The same points side by side across runs: mean goodput ± 95 % CI and IPsec/plain per run.

    Rows are the union of the runs' points; a point a run did not measure is left blank.
    Absolute goodput differs between backends (UML has one CPU and no AES-NI); the ratios are
    what transfers, so they stand next to each other.
    """
    headers, rows, plain = compare_rows(runs)
    return _rich_table("Comparison: the same points across runs (goodput Mbit/s ± 95 % CI; IPsec/plain)",
                       headers, rows, left=("scenario", "profile"), styles=["bold" if p else None for p in plain])


# ---------------------------------------------------------------------------------------------
# comparison figure

def fig_compare(runs: Sequence[RunData], colors: Optional[Mapping[Any, str]] = None) -> go.Figure:
    """IPsec/plain goodput against size for several runs, a panel per link rate.

    Colour is the profile (the same colours as the other figures); the line style and marker
    shape tell the runs apart (solid circles for the first run, dotted diamonds for the second, ...).
    """
    items = [(run, r) for run in runs for r in run.ratios if r.goodput is not None]
    panels = _panels([r for _, r in items])
    fig = _make_grid(panels, shared_y=True, y_title="IPsec / plain goodput")
    fig.update_layout(title=_title("Comparison of runs: IPsec / plain goodput",
                                   "colour: profile · line style: run (backend · kernel) · "
                                   "error bars: 95 % confidence interval"))
    if not panels:
        return _no_data(fig, "no run has an IPsec point with a plain baseline")
    run_of = {id(r): run for run, r in items}
    colors = colors or profile_colors(a.profile for run in runs for a in run.aggregates)
    shown: set[str] = set()
    top = 1.0
    for i, panel in enumerate(panels):
        for j, run in enumerate(runs):
            mine = [r for r in panel.items if run_of[id(r)] is run]
            for profile, series in _by_profile(mine):
                name = f"{run.label} — {profile_label(profile)}"
                top = max([top] + [r.goodput.value + (r.goodput.ci95 or 0) for r in series])
                color = _color_of(colors, profile)
                fig.add_trace(go.Scatter(
                    x=[r.size_bytes for r in series], y=[r.goodput.value for r in series],
                    mode="lines+markers", name=name, legendgroup=name, showlegend=name not in shown,
                    line=dict(color=color, width=2, dash=RUN_DASHES[j % len(RUN_DASHES)]),
                    marker=dict(size=8, color=color, symbol=RUN_SYMBOLS[j % len(RUN_SYMBOLS)]),
                    error_y=dict(type="data", array=_ci_array([r.goodput.ci95 for r in series]), color=color,
                                 thickness=1.5, width=5),
                    hovertemplate=f"{html.escape(name)}<br>size %{{x}} B<br>IPsec/plain %{{y:.3f}}<extra></extra>",
                    meta={"kind": "compare", "run": run.label, "profile": profile,
                          "rate_mbit": panel.point.get("rate_mbit")},
                ), **_cell(panels, i))
                shown.add(name)
    fig.add_hline(y=1.0, line=dict(color="#777", width=1.5, dash="dot"), row="all", col="all")
    fig.update_yaxes(range=[0, max(1.1, top) * 1.05], rangemode="normal")
    return fig


# ---------------------------------------------------------------------------------------------
# HTML

_CSS = """
body { font-family: %(font)s; color: #222; margin: 0; background: #fafafa; }
main { max-width: 1320px; margin: 0 auto; padding: 24px 32px 48px; background: #fff; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 20px; margin: 36px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.subtitle { color: #555; margin: 0 0 18px; font-size: 15px; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 4px 18px; margin: 0 0 16px; font-size: 14px; }
dl.meta dt { color: #666; }
dl.meta dd { margin: 0; }
code, pre { font-family: ui-monospace, 'DejaVu Sans Mono', Menlo, monospace; font-size: 13px; }
pre.cmd { background: #f3f3f3; padding: 6px 10px; margin: 0; white-space: pre-wrap; word-break: break-all; }
.howto { background: #f5f8fc; border-left: 4px solid #9db7d5; padding: 10px 16px; font-size: 14.5px; line-height: 1.5; }
.warning { background: #fff4e5; border-left: 4px solid #E69F00; padding: 8px 16px; font-size: 14px; }
.figure { margin: 28px 0 12px; border-top: 1px solid #e2e2e2; padding-top: 8px; }
table.points { border-collapse: collapse; font-size: 13.5px; width: 100%%; }
table.points th, table.points td { padding: 4px 10px; border-bottom: 1px solid #e4e4e4; white-space: nowrap; }
table.points th { text-align: left; background: #f0f0f0; position: sticky; top: 0; white-space: normal; vertical-align: bottom; }
table.points td.num, table.points th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.points tr.plain td { font-weight: 600; }
table.points tr.newgroup td { border-top: 2px solid #bbb; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 6px; vertical-align: -1px; }
.flag { color: #a04000; }
footer { margin-top: 32px; color: #777; font-size: 13px; }
""" % {"font": _FONT}


def _esc(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def _meta_rows(meta: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
               aggs: Sequence[Aggregate]) -> list[tuple[str, str]]:
    def values(field: str) -> list[str]:
        return sorted({str(r.get(field)) for r in records if r.get(field) is not None})

    rows = []
    topologies = values("topology")
    rows.append(("topology", _esc(", ".join(topologies) or "–")))
    scenario = _scenario_summary([a.point for a in aggs])
    if scenario:
        rows.append(("scenario", _esc(scenario)))
    profiles = sorted({str(a.profile) for a in aggs if not a.is_plain})
    rows.append(("IPsec profiles", _esc(", ".join(profiles) or "none (plain only)")))
    rates = sorted({a.rate_mbit for a in aggs}, key=lambda r: (r is None, r or 0))
    rows.append(("link rates", _esc(", ".join("unshaped" if r is None else f"{r:g} Mbit/s" for r in rates))))
    backend = meta.get("backend") or ", ".join(values("backend")) or "–"
    rows.append(("backend", _esc(backend)))
    rows.append(("kernel", _esc(meta.get("kernel_release") or ", ".join(values("kernel_release")) or "–")))
    cpu = meta.get("cpu_model") or "–"
    if meta.get("cpu_count"):
        cpu = f"{cpu} × {meta['cpu_count']} CPUs"
    if meta.get("host_cpu_model"):  # a UML guest's cpuinfo names no CPU
        cpu = f"{cpu}, on the host's {meta['host_cpu_model']}"
    rows.append(("CPU", _esc(cpu)))
    command = meta.get("command_line")
    if isinstance(command, (list, tuple)):
        command = " ".join(str(c) for c in command)
    rows.append(("command line", f'<pre class="cmd">{_esc(command or "–")}</pre>'))
    if meta.get("started") or meta.get("finished"):
        rows.append(("run", _esc(f"started {meta.get('started') or '?'}, finished {meta.get('finished') or 'not recorded'}")))
    durations = values("duration_s")
    reps = sorted({a.goodput.n for a in aggs})
    rows.append(("measurements", _esc(
        f"{len(records)} records, {len(aggs)} points, "
        f"{'/'.join(str(n) for n in reps) or '0'} repetitions per point"
        + (f", {', '.join(durations)} s each" if durations else ""))))
    versions = meta.get("versions")
    if isinstance(versions, Mapping) and versions:
        rows.append(("versions", _esc(", ".join(f"{k} {v}" for k, v in versions.items()))))
    return rows


def _warnings(meta: Mapping[str, Any], records: Sequence[Mapping[str, Any]], aggs: Sequence[Aggregate]) -> list[str]:
    out = []
    for field in ("backend", "kernel_release"):
        seen = sorted({str(r.get(field)) for r in records if r.get(field) is not None})
        if len(seen) > 1:
            out.append(f"These results mix several values of {field} ({', '.join(seen)}): "
                       "a resumed run on another kernel? Points of different kernels are averaged together.")
    limited = [a for a in aggs if a.emulation_limited]
    if limited:
        out.append(f"{len(limited)} of {len(aggs)} points were CPU-bound: the emulator's CPU, not the emulated "
                   "link, limited their goodput (hollow markers, flagged in the table). Their absolute goodput "
                   "says more about this machine than about the network being emulated.")
    failed = sum(a.n_failed for a in aggs)
    if failed:
        out.append(f"{failed} repetitions have no goodput (the measurement failed); they are left out of the means.")
    return out


_HOWTO = """
<p><b>How to read this report.</b> Each point is one configuration (IPsec profile, link rate, payload
size) measured several times; the marker is the mean goodput (application data delivered per second)
and the error bar the 95&nbsp;% confidence interval of that mean (Student's t, n&nbsp;&minus;&nbsp;1
degrees of freedom). Non-overlapping bars mean a difference larger than the run-to-run noise. The
dashed lines are the goodput the link rate allows after protocol headers, when the sweep computed
it. <b>Normalized goodput</b> divides IPsec goodput by plain goodput at the same point: 1.0 means
IPsec costs nothing, 0.9 means 10&nbsp;% less goodput; its interval comes from the delta method.
On a shaped link that is not CPU-bound, the ratio reflects ESP's per-packet overhead and so rises with
payload size; where it falls much lower, the CPU is the bottleneck. <b>CPU per GB</b> is
CPU-seconds spent per gigabyte delivered: the cost of the data, independent of the link rate.
<b>Hollow markers</b> are points the runner found CPU-bound (the emulator ran out of CPU before the
emulated link was full).</p>
"""


def _penalty_text(ratio: Optional[Ratio], link_mtu: int) -> str:
    """An IPsec point's penalty as 'total = wire + other' (percent of plain); see analysis.penalty."""
    from analysis.penalty import penalty_of

    p = penalty_of(ratio, link_mtu) if ratio else None
    if p is None:
        return ""
    if p.wire is None:
        return f"{100 * p.penalty:.1f} %"
    return f"{100 * p.penalty:.1f} = {100 * p.wire:.1f} + {100 * p.other:.1f} %"


def _points_table(aggs: Sequence[Aggregate], ratios: Sequence[Ratio], colors: Mapping[Any, str],
                  link_mtu: int = 1500) -> str:
    by_ipsec = _ratio_index(ratios)
    varying = _varying_scenario_keys(aggs)
    head = (["scenario"] if varying else []) + ["profile", "rate (Mbit/s)", "size (B)", "n", "mean goodput (Mbit/s)",
                                                 "±95 % CI", "min – max", "theoretical (Mbit/s)",
                                                 "IPsec / plain", "penalty = wire + other", "CPU s/GB",
                                                 "CPU ratio", "flag"]
    numeric = {"rate (Mbit/s)", "size (B)", "n", "mean goodput (Mbit/s)", "±95 % CI", "min – max",
               "theoretical (Mbit/s)", "IPsec / plain", "penalty = wire + other", "CPU s/GB", "CPU ratio"}
    out = ['<table class="points" id="points"><thead><tr>']
    out += [f'<th class="{"num" if h in numeric else ""}">{_esc(h)}</th>' for h in head]
    out.append("</tr></thead><tbody>")
    last_group = None
    for a in _table_rows(aggs):
        group = _group_of(a, varying)
        classes = []
        if a.is_plain:
            classes.append("plain")
        if last_group is not None and group != last_group:
            classes.append("newgroup")
        last_group = group
        mean, ci = fmt_mean_ci(a.goodput.mean, a.goodput.ci95)
        lo_d = _decimals(a.goodput.mean, 3)
        ratio = by_ipsec.get(id(a))
        cells = []
        if varying:
            cells.append(("", _esc(_scenario_of(a, varying))))
        cells += [
            ("", f'<span class="swatch" style="background:{_color_of(colors, a.profile)}"></span>'
                 f"{_esc(profile_label(a.profile))}"),
            ("num", _esc("unshaped" if a.rate_mbit is None else f"{a.rate_mbit:g}")),
            ("num", _esc(a.size_bytes)),
            ("num", _esc(a.goodput.n)),
            ("num", _esc(mean)),
            ("num", _esc(ci)),
            ("num", _esc(f"{a.goodput.min:.{lo_d}f} – {a.goodput.max:.{lo_d}f}")),
            ("num", _esc(fmt_num(a.theoretical_goodput_mbps))),
            ("num", _esc(_ratio_text(ratio.goodput if ratio else None))),
            ("num", _esc(_penalty_text(ratio, link_mtu))),
            ("num", _esc(_summary_text(a.cpu_s_per_gb))),
            ("num", _esc(_ratio_text(ratio.cpu_s_per_gb if ratio else None))),
            ("flag", _esc(_flag(a))),
        ]
        out.append(f'<tr class="{" ".join(classes)}">'
                   + "".join(f'<td class="{c}">{v}</td>' for c, v in cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _compare_html(runs: Sequence[RunData]) -> str:
    """The comparison table as HTML (the same rows as :func:`compare_table`)."""
    headers, rows, plain = compare_rows(runs)
    text = {"scenario", "profile"}
    out = ['<table class="points" id="comparison"><thead><tr>']
    out += [f'<th class="{"" if h in text else "num"}">{_esc(h)}</th>' for h in headers]
    out.append("</tr></thead><tbody>")
    for row, is_plain in zip(rows, plain):
        out.append(f'<tr class="{"plain" if is_plain else ""}">'
                   + "".join(f'<td class="{"" if h in text else "num"}">{_esc(c)}</td>' for h, c in zip(headers, row))
                   + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _figure_div(fig: go.Figure, div_id: str, first: bool) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=True if first else False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True,
                               "toImageButtonOptions": {"format": "svg", "filename": div_id}})


def render_html(run_dir_or_records: Union[str, os.PathLike, Sequence[Mapping[str, Any]]],
                meta: Optional[Mapping[str, Any]] = None, *, compare: Sequence[RunData] = ()) -> str:
    """One self-contained HTML page: header, how to read it, figures, table of points.

    ``run_dir_or_records`` is a run directory (its ``results.jsonl`` and, when ``meta`` is None,
    its ``meta.json`` are read) or the records themselves. plotly.js is embedded inline once, so
    the page opens offline. ``compare``: other runs to set side by side with this one (a figure of
    IPsec/plain per run and a table); pass this run first among them.
    """
    if isinstance(run_dir_or_records, (str, os.PathLike)):
        records = load_results(run_dir_or_records)
        if meta is None:
            meta = load_meta(run_dir_or_records)
    else:
        records = [dict(r) for r in run_dir_or_records]
    meta = dict(meta or {})
    aggs = aggregate(records)
    ratios = normalize(aggs)

    # one colour per profile for the whole page, whichever profiles a figure happens to show
    colors = profile_colors([a.profile for a in aggs] + [a.profile for run in compare for a in run.aggregates])
    figures = [("throughput", "Goodput vs payload size", fig_throughput(aggs, colors))]
    if ratios:
        figures.append(("normalized", "Normalized goodput (IPsec / plain)", fig_normalized(ratios, colors)))
    if any(a.cpu_s_per_gb is not None for a in aggs):
        figures.append(("cpu", "CPU cost per gigabyte", fig_cpu(aggs, colors)))
    if len(compare) > 1:
        figures.append(("compare", "Comparison of runs", fig_compare(compare, colors)))

    title = "IPsec Testbed report"
    topologies = sorted({str(r.get("topology")) for r in records if r.get("topology")})
    subtitle = f"Goodput vs payload size, plain and with IPsec — {', '.join(topologies) or 'no topology recorded'}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_esc(title)}: {_esc(', '.join(topologies))}</title>",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<style>{_CSS}</style>",
        "</head><body><main>",
        f"<h1>{_esc(title)}</h1>",
        f'<p class="subtitle">{_esc(subtitle)}</p>',
        '<dl class="meta">',
        *[f"<dt>{k}</dt><dd>{v}</dd>" for k, v in _meta_rows(meta, records, aggs)],
        "</dl>",
        *[f'<p class="warning">{_esc(w)}</p>' for w in _warnings(meta, records, aggs)],
        f'<div class="howto">{_HOWTO}</div>',
    ]
    for i, (div_id, heading, fig) in enumerate(figures):
        # the figure carries its own title; the section only separates and anchors it
        parts.append(f'<section class="figure" id="{div_id}" aria-label="{_esc(heading)}">')
        if div_id == "compare":
            parts.append("<p>Runs compared: " + "; ".join(_esc(r.label) for r in compare) + ". Absolute goodput "
                         "differs between backends (User-Mode Linux has one CPU and generic C crypto); the "
                         "IPsec/plain ratio is what carries over.</p>")
        parts.append(_figure_div(fig, "fig-" + div_id, first=i == 0))
        parts.append("</section>")
    parts.append("<h2>Aggregated points</h2>")
    parts.append("<p>One row per point; the plain baseline in bold, the IPsec rows after it at the same size. "
                 "CI: half-width of the 95&nbsp;% confidence interval. IPsec/plain and CPU ratio: delta-method "
                 "intervals. Penalty: 1 &minus; IPsec/plain in percent of the plain goodput, split into what the "
                 "bytes IPsec adds explain on a saturated link (wire, from the overhead model) and the rest "
                 "(other: encryption and packet processing, or an emulator out of CPU).</p>")
    parts.append(_points_table(aggs, ratios, colors, (meta.get("sweep") or {}).get("mtu") or 1500))
    if len(compare) > 1:
        parts.append("<h2>Comparison table</h2>")
        parts.append(_compare_html(compare))
    parts.append('<footer>Generated by the IPsec Testbed <code>analysis</code> package from '
                 f'{_esc(len(records))} result records.</footer>')
    parts.append("</main></body></html>")
    return "\n".join(parts)

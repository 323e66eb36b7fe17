"""The report's figures, as plotly :class:`~plotly.graph_objects.Figure` objects (nothing is written).

Figures follow the 2005 gateway study (shared/seeds/003): goodput against payload size, one panel
per link rate, plain and IPsec in the same panel (its Fig. 6); IPsec/plain goodput against size
(its Fig. 7a, "normalized throughput"); CPU cost against size (its Figs. 4-5, here as CPU-seconds
per gigabyte delivered, which does not depend on how fast the link is). A panel is one link rate
of one scenario (topology, transport, IP version, mode, ...); the panel title names only what
differs between panels. Each profile keeps its colour in every figure; the plain baseline is
dark grey. The marker's shape says what bounded the point (see :data:`BOUND_SYMBOLS`).
"""
from __future__ import annotations

import html
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.format import Panel, bound_text, fmt_num, group_panels, panel_titles, profile_label, scenario_key
from analysis.run import RunData
from analysis.stats import PLAIN_PROFILE, Aggregate, Ratio
from testbed.record import FIELD, Bound

EMULATION_LIMITED_LABEL = "CPU-bound (emulator limit)"

#: The marker of each bound class (the link's is the plain filled circle).
BOUND_SYMBOLS = {Bound.LINK: "circle", Bound.CPU: "circle-open", Bound.OTHER: "diamond-open"}

#: The legend entries that explain the hollow markers, with their legend ranks.
BOUND_LEGENDS = {Bound.CPU: (EMULATION_LIMITED_LABEL, "emulation_limited", 2000),
                 Bound.OTHER: ("other-bound (neither link nor CPU)", "other_bound", 2001)}


THEORETICAL_LABEL = "theoretical goodput (dashed)"


PLAIN_COLOR = "#3a3a3a"


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


FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"


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


def color_of(colors: Mapping[Any, str], profile: Any) -> str:
    return colors.get(profile) or colors.get(str(profile)) or PROFILE_PALETTE[-1]


def _positions(panels: Sequence[Panel]) -> tuple[list[tuple[int, int]], int, int]:
    """(row, col) of each panel, 1-based, and the grid's rows and columns.

    Up to three panels per row; each scenario starts a new row, so with several scenarios
    (IPv4 and IPv6, say) the same link rate sits in the same column.
    """
    per_scenario: dict[tuple, int] = {}
    for p in panels:
        per_scenario[scenario_key(p)] = per_scenario.get(scenario_key(p), 0) + 1
    cols = min(_MAX_COLUMNS, max(per_scenario.values(), default=1))
    positions, row, seen = [], 0, {}
    for p in panels:
        key = scenario_key(p)
        i = seen.get(key, 0)
        if i == 0 or i % cols == 0:
            row += 1
        seen[key] = i + 1
        positions.append((row, i % cols + 1))
    return positions, max(row, 1), cols


def _make_grid(panels: Sequence[Panel], *, shared_y: bool, y_title: str) -> go.Figure:
    positions, rows, cols = _positions(panels)
    used = set(positions)
    # no axes where no panel is (the end of a short row); titles go to the panels in row order
    fig = make_subplots(rows=rows, cols=cols,
                        specs=[[{} if (r, c) in used or not panels else None for c in range(1, cols + 1)]
                               for r in range(1, rows + 1)],
                        subplot_titles=panel_titles(panels) or None,
                        horizontal_spacing=0.07 if cols > 1 else 0.0,
                        # ~120 px between rows: the x axis title above, the next panel's title below
                        vertical_spacing=min(0.3, 120 / (rows * _PANEL_HEIGHT_PX)) if rows > 1 else 0.0,
                        shared_yaxes="all" if shared_y else False)
    for panel, (row, col) in zip(panels, positions, strict=True):
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
        font=dict(family=FONT, size=13, color="#222"),
        height=rows * _PANEL_HEIGHT_PX + 150,
        margin=dict(l=70, r=30, t=110, b=60),
        hovermode="closest",
        legend=dict(orientation="v", x=1.01, xanchor="left", y=1.0, yanchor="top",
                    bgcolor="rgba(255,255,255,0.9)", bordercolor="#ccc", borderwidth=1,
                    font=dict(size=12), tracegroupgap=4),
    )
    return fig


def _cell(panels: Sequence[Panel], i: int) -> dict[str, int]:
    row, col = _positions(panels)[0][i]
    return {"row": row, "col": col}


def _marker_symbols(bounds: Sequence[Bound | None]) -> list[str]:
    return [BOUND_SYMBOLS.get(b or Bound.LINK, "circle") for b in bounds]


def _ci_array(values: Sequence[float | None]) -> list[float | None]:
    return [None if v is None else float(v) for v in values]


def _theoretical_legend(fig: go.Figure) -> None:
    """One legend entry for every profile's dashed theoretical line (each in its profile's colour)."""
    fig.add_trace(go.Scatter(
        x=[None], y=[None], mode="lines", name=THEORETICAL_LABEL, showlegend=True,
        legendgroup="theoretical", legendrank=1500, line=dict(color="#777", width=1.5, dash="dash"),
        meta={"kind": "legend", "what": "theoretical"}, hoverinfo="skip"))


def _bound_legends(fig: go.Figure, seen: set[Bound | None]) -> None:
    """A legend entry for each hollow marker shape in the figure (the entries have no points)."""
    for bound, (name, what, rank) in BOUND_LEGENDS.items():
        if bound in seen:
            fig.add_trace(go.Scatter(
                x=[None], y=[None], mode="markers", name=name, showlegend=True,
                legendgroup=what, legendrank=rank,
                marker=dict(symbol=BOUND_SYMBOLS[bound], size=10, color="#555", line=dict(width=2, color="#555")),
                meta={"kind": "legend", "what": what}, hoverinfo="skip"))


def _bound_subtitle(bounds: set[Bound | None]) -> list[str]:
    return [f"{shape}: {what}" for b, shape, what in ((Bound.CPU, "hollow", "CPU-bound"),
                                                     (Bound.OTHER, "diamond", "neither link nor CPU"))
            if b in bounds]


def _bound_hover(item: Any) -> str:
    text = bound_text(item) if isinstance(item, Aggregate) else (item.bound or "")
    return text or "not recorded"


def _title(text: str, subtitle: str) -> dict:
    return dict(text=text, x=0.0, xanchor="left", xref="paper", font=dict(size=18),
                subtitle=dict(text=subtitle, font=dict(size=13, color="#555")))


def _no_data(fig: go.Figure, what: str) -> go.Figure:
    fig.add_annotation(text=what, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5,
                       font=dict(size=15, color="#777"))
    return fig


def fig_throughput(aggs: Sequence[Aggregate], colors: Mapping[Any, str] | None = None) -> go.Figure:
    """Goodput against payload size: a panel per link rate (and scenario), a line per profile.

    Markers are the mean over repetitions, error bars the 95 % confidence interval of the mean,
    the dashed line of the same colour the theoretical goodput when the records carry one.
    The marker's shape is what bounded the point (:data:`BOUND_SYMBOLS`): filled for the link,
    hollow for the emulator's CPU, a hollow diamond for neither.
    ``colors`` (profile -> colour) defaults to :func:`profile_colors` of these aggregates.
    """
    panels = group_panels(aggs)
    fig = _make_grid(panels, shared_y=False, y_title="goodput (Mbit/s)")
    subtitle = ["mean of the repetitions", "error bars: 95 % confidence interval"]
    if any(a.theoretical_goodput_mbps is not None for a in aggs):
        subtitle.append("dashed: theoretical goodput")
    subtitle += _bound_subtitle({a.bound for a in aggs})
    fig.update_layout(title=_title("Goodput vs payload size", " · ".join(subtitle)))
    if not panels:
        return _no_data(fig, "no measured points")
    colors = colors or profile_colors(a.profile for a in aggs)
    seen: set[Bound | None] = set()
    any_theoretical = False
    for i, panel, profile, series, color, label, legend in _lines(panels, colors, seen):
        fig.add_trace(_measured_trace(
            series, [a.goodput for a in series], profile, label, color, [a.bound for a in series], legend,
            customdata=[[a.goodput.n, fmt_num(a.goodput.ci95), fmt_num(a.goodput.min), fmt_num(a.goodput.max),
                         _bound_hover(a)] for a in series],
            hovertemplate=(f"<b>{html.escape(label)}</b><br>size %{{x}} B<br>goodput %{{y:.3g}} Mbit/s "
                           "± %{customdata[1]} (95 % CI, n=%{customdata[0]})<br>"
                           "min %{customdata[2]}, max %{customdata[3]}<br>bound: %{customdata[4]}"
                           "<extra></extra>"),
            meta={"kind": "goodput", "profile": profile, "rate_mbit": panel.point.rate_mbit},
        ), **_cell(panels, i))
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
                meta={"kind": "theoretical", "profile": profile, "rate_mbit": panel.point.rate_mbit},
            ), **_cell(panels, i))
    if any_theoretical:
        _theoretical_legend(fig)
    _bound_legends(fig, seen)
    return fig


def fig_normalized(ratios: Sequence[Ratio], colors: Mapping[Any, str] | None = None) -> go.Figure:
    """IPsec goodput / plain goodput against payload size, a panel per link rate, shared y axis.

    Error bars are the delta-method 95 % interval of the ratio (:func:`analysis.stats.ratio_of_means`);
    the grey line at 1.0 is "no cost". The marker is the more cautious class of the two points
    (:attr:`analysis.stats.Ratio.bound`): hollow when the IPsec or the plain point was CPU-bound.
    """
    usable = [r for r in ratios if r.goodput is not None]
    panels = group_panels(usable)
    fig = _make_grid(panels, shared_y=True, y_title="IPsec / plain goodput")
    fig.update_layout(title=_title(
        "Normalized goodput: IPsec / plain at the same point",
        "1.0 = IPsec costs nothing · error bars: 95 % confidence interval (delta method)"))
    if not panels:
        return _no_data(fig, "no IPsec point has a plain baseline at the same point")
    colors = colors or profile_colors(r.profile for r in usable)
    seen: set[Bound | None] = set()
    top = 1.0
    for i, panel, profile, series, color, label, legend in _lines(panels, colors, seen):
        bounds = [r.bound for r in series]
        top = max([top] + [r.goodput.value + (r.goodput.ci95 or 0) for r in series])
        fig.add_trace(go.Scatter(
            x=[r.size_bytes for r in series], y=[r.goodput.value for r in series],
            mode="lines+markers", name=label, legendgroup=str(profile), showlegend=legend,
            line=dict(color=color, width=2),
            marker=dict(symbol=_marker_symbols(bounds), size=9, color=color, line=dict(width=2, color=color)),
            error_y=dict(type="data", array=_ci_array([r.goodput.ci95 for r in series]), color=color,
                         thickness=1.5, width=5),
            customdata=[[fmt_num(r.goodput.ci95, 2), fmt_num(r.ipsec.goodput.mean), fmt_num(r.plain.goodput.mean),
                         _bound_hover(r.ipsec), _bound_hover(r.plain)] for r in series],
            hovertemplate=(f"<b>{html.escape(label)}</b><br>size %{{x}} B<br>IPsec/plain %{{y:.3f}} "
                           "± %{customdata[0]}<br>%{customdata[1]} / %{customdata[2]} Mbit/s<br>"
                           "bound: %{customdata[3]} / %{customdata[4]}<extra></extra>"),
            meta={"kind": "ratio", "profile": profile, "rate_mbit": panel.point.rate_mbit},
        ), **_cell(panels, i))
    fig.add_hline(y=1.0, line=dict(color="#777", width=1.5, dash="dot"), row="all", col="all")
    fig.update_yaxes(range=[0, max(1.1, top) * 1.05], rangemode="normal")
    _bound_legends(fig, seen)
    return fig


def fig_cpu(aggs: Sequence[Aggregate], colors: Mapping[Any, str] | None = None) -> go.Figure:
    """CPU-seconds per gigabyte delivered against payload size, a panel per link rate, a line per profile.

    CPU-seconds per GB divides the CPU time the runner measured by the data delivered, so links
    of different rates compare directly; error bars are 95 % confidence intervals.
    """
    usable = [a for a in aggs if a.cost is not None]
    counted = any(a.counted for a in usable)
    panels = group_panels(usable)
    unit = "instructions/B" if counted else "s/GB"
    fig = _make_grid(panels, shared_y=False,
                     y_title="instructions per byte (counted)" if counted else "CPU time per GB (s/GB)")
    fig.update_layout(title=_title(
        "Instructions per byte delivered" if counted else "CPU cost per gigabyte delivered",
        ("the guest's instructions per byte of goodput, counted by the emulator (--kernel qemu): the same on every "
         "machine" if counted else "CPU-seconds spent per GB of goodput")
        + " · lower is better · error bars: 95 % confidence interval"))
    if not panels:
        return _no_data(fig, "no CPU measurements in these results")
    colors = colors or profile_colors(a.profile for a in aggs)
    seen: set[Bound | None] = set()
    for i, panel, profile, series, color, label, legend in _lines(panels, colors, seen):
        fig.add_trace(_measured_trace(
            series, [a.cost for a in series], profile, label, color, [a.bound for a in series], legend,
            customdata=[[a.cost.n, fmt_num(a.cost.ci95),
                         (fmt_num(a.cpu[FIELD.cpu_busy_pct].mean) + " %" if FIELD.cpu_busy_pct in a.cpu else "–")
                         + (" (saturated: this cost follows the goodput)" if a.cpu_saturated else "")]
                        for a in series],
            hovertemplate=(f"<b>{html.escape(label)}</b><br>size %{{x}} B<br>%{{y:.3g}} {unit} ± %{{customdata[1]}}"
                           " (n=%{customdata[0]})<br>CPU busy %{customdata[2]}<extra></extra>"),
            meta={"kind": "cpu_s_per_gb", "profile": profile, "rate_mbit": panel.point.rate_mbit},
        ), **_cell(panels, i))
    _bound_legends(fig, seen)
    return fig


def _lines(panels: Sequence[Any], colors: Mapping[Any, str], seen: set[str | None]) -> Iterator[tuple]:
    """(panel index, panel, profile, series, colour, label, whether the legend shows it) for every
    profile's line in every panel; the series' bound classes are added to ``seen`` (for the legend)."""
    shown: set[str] = set()
    for i, panel in enumerate(panels):
        for profile, series in _by_profile(panel.items):
            label = profile_label(profile)
            seen.update(x.bound for x in series)
            yield i, panel, profile, series, color_of(colors, profile), label, label not in shown
            shown.add(label)


def _measured_trace(series: Sequence[Any], summaries: Sequence[Any], profile: Any, label: str, color: str,
                    bounds: Sequence[str | None], showlegend: bool, **more: Any) -> go.Scatter:
    """One profile's measured means against payload size, with 95 % CI bars; shaped by bound class."""
    return go.Scatter(
        x=[a.size_bytes for a in series], y=[m.mean for m in summaries],
        mode="lines+markers", name=label, legendgroup=str(profile), showlegend=showlegend,
        line=dict(color=color, width=2.5 if profile == PLAIN_PROFILE else 2),
        marker=dict(symbol=_marker_symbols(bounds), size=9, color=color, line=dict(width=2, color=color)),
        error_y=dict(type="data", array=_ci_array([m.ci95 for m in summaries]), color=color, thickness=1.5, width=5),
        **more)


def _by_profile(items: Sequence[Any]) -> list[tuple[Any, list[Any]]]:
    groups: dict[Any, list[Any]] = {}
    for it in items:
        groups.setdefault(it.point.profile, []).append(it)
    ordered = sorted(groups.items(), key=lambda kv: (kv[0] != PLAIN_PROFILE, str(kv[0])))
    return [(p, sorted(s, key=lambda it: it.point.size_bytes or 0)) for p, s in ordered]


def fig_compare(runs: Sequence[RunData], colors: Mapping[Any, str] | None = None) -> go.Figure:
    """IPsec/plain goodput against size for several runs, a panel per link rate.

    Colour is the profile (the same colours as the other figures); the line style and marker
    shape tell the runs apart (solid circles for the first run, dotted diamonds for the second, ...).
    """
    items = [(run, r) for run in runs for r in run.ratios if r.goodput is not None]
    panels = group_panels([r for _, r in items])
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
                color = color_of(colors, profile)
                fig.add_trace(go.Scatter(
                    x=[r.size_bytes for r in series], y=[r.goodput.value for r in series],
                    mode="lines+markers", name=name, legendgroup=name, showlegend=name not in shown,
                    line=dict(color=color, width=2, dash=RUN_DASHES[j % len(RUN_DASHES)]),
                    marker=dict(size=8, color=color, symbol=RUN_SYMBOLS[j % len(RUN_SYMBOLS)]),
                    error_y=dict(type="data", array=_ci_array([r.goodput.ci95 for r in series]), color=color,
                                 thickness=1.5, width=5),
                    customdata=[[r.bound or "not recorded"] for r in series],
                    hovertemplate=(f"{html.escape(name)}<br>size %{{x}} B<br>IPsec/plain %{{y:.3f}}<br>"
                                   "bound: %{customdata[0]}<extra></extra>"),
                    meta={"kind": "compare", "run": run.label, "profile": profile,
                          "rate_mbit": panel.point.rate_mbit},
                ), **_cell(panels, i))
                shown.add(name)
    fig.add_hline(y=1.0, line=dict(color="#777", width=1.5, dash="dot"), row="all", col="all")
    fig.update_yaxes(range=[0, max(1.1, top) * 1.05], rangemode="normal")
    return fig

"""The history as one self-contained page: each series against its kernels, change points marked, runs clickable.

One figure per series (:class:`analysis.history.Series`): every run a dot at its kernel with its 95 % interval,
each jumpavg group a line at its mean across its kernels, each change point labelled with its size
(red: regression, green: progression).  A click on a dot opens that run's report (its run directory's
report.html, or the directory).  plotly.js is inline, as in a sweep's report: the page opens offline.
"""
from __future__ import annotations

import html
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

import plotly.graph_objects as go

from analysis.benchpage import LAYOUT
from analysis.history import Row, Series
from analysis.page import CSS, figure_div
from analysis.regress import METRICS
from testbed.rundir import atomic_write

COLOURS = {"regression": "#c0392b", "progression": "#1e8449", "": "#34495e"}
#: Opens the clicked run (each dot carries its page's URL).
CLICK = """<script>
document.querySelectorAll('.plotly-graph-div').forEach(function (div) {
  div.on('plotly_click', function (e) {
    var url = e.points[0].customdata; if (url) { window.open(url, '_blank'); }
  });
});
</script>"""


def run_url(run_dir: str) -> str:
    """The run's page (its report.html, else its directory) as a URL; "" when it is not on this machine (a runner's
    run, merged)."""
    report = os.path.join(run_dir, "report.html")
    for target in (report, run_dir):
        if os.path.exists(target):
            return Path(target).resolve().as_uri()
    return ""


def series_figure(s: Series, rows: Sequence[Row]) -> go.Figure:
    name, unit, _ = METRICS[s.metric]
    fig = go.Figure()
    fig.update_layout(title=s.name, **{**LAYOUT, "showlegend": False})
    fig.update_xaxes(title="kernel (history order)", type="category", categoryorder="array",
                     categoryarray=list(s.kernels))
    fig.update_yaxes(title=f"{name} ({unit}, {s.clock})")
    mine = [r for r in rows if r.series == s.series_key]
    urls = [run_url(r.run_dir) for r in mine]
    fig.add_trace(go.Scatter(
        x=[r.key for r in mine], y=[r.value for r in mine], mode="markers",
        marker=dict(size=9, color=COLOURS[""]),
        error_y=dict(type="data", symmetric=False, array=[r.high - r.value for r in mine],
                     arrayminus=[r.value - r.low for r in mine], thickness=1),
        customdata=urls,
        hovertext=[f"{r.kernel} {r.kernel_commit[:12]}<br>{r.value:.6g} ({r.low:.6g}..{r.high:.6g}), n={r.n}<br>"
                   f"{r.date} on {html.escape(r.machine)}<br>testbed {r.project}" + ("; click: the run" if url else "")
                   for r, url in zip(mine, urls, strict=True)],
        hoverinfo="text"))
    for g in s.groups:
        colour = COLOURS[g.label]
        fig.add_trace(go.Scatter(x=[g.kernels[0], g.kernels[-1]], y=[g.mean, g.mean], mode="lines",
                                 line=dict(color=colour, width=3), hoverinfo="skip"))
        if g.label:
            fig.add_annotation(x=g.kernels[0], y=g.mean, text=f"{g.label} {g.change * 100:+.2f} %",
                               font=dict(color=colour), showarrow=True, arrowcolor=colour, ay=-40)
    return fig


def write(rows: Sequence[Row], path: str, where: str, series: Sequence[Series]) -> str:
    """The page of ``rows`` and their ``series`` (:func:`analysis.history.series_of`; one clock per chart:
    :func:`analysis.history.one_clock` first) at ``path``."""
    changes = sum(1 for s in series for g in s.groups if g.label)
    parts = ["<h1>IPsec Testbed: results history</h1>",
             f'<p class="subtitle">{len(rows)} figures of {len({r.run_id for r in rows})} runs on '
             f'{len({r.key for r in rows})} kernels from {html.escape(where)}; {changes} change point(s) found '
             "by jumpavg (FD.io CSIT's minimum description length grouping)</p>",
             '<p class="howto">Each dot is one run (its mean and 95 % interval over its repetitions), at its kernel; '
             "kernels run left to right by version, then by place in their git history, then by first run. A "
             "line is a group of kernels whose runs are one distribution; a new group starts at a change point, "
             "labelled regression (worse) or progression (better) with its size. Click a dot to open its run.</p>"]
    for i, s in enumerate(series):
        parts.append(f'<div class="figure">{figure_div(series_figure(s, rows), f"series{i}", first=i == 0)}</div>')
    data = json.dumps([{"series": s.name, "clock": s.clock, "kernels": list(s.kernels),
                        "groups": [{"kernels": list(g.kernels), "mean": g.mean, "label": g.label, "change": g.change}
                                   for g in s.groups]} for s in series])
    safe = data.replace("</", "<\\/")  # (JSON in a script element: only "</" could end it early)
    parts.append(f'<script type="application/json" id="history-data">{safe}</script>')
    parts.append(f"<footer>written {time.strftime('%Y-%m-%d %H:%M:%S')}</footer>")
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>results history</title>'
            f"<style>{CSS}</style></head><body><main>{''.join(parts)}</main>{CLICK}</body></html>\n")
    atomic_write(path, page)
    return path

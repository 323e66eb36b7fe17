"""A benchmark's run directory: its figures as one self-contained page, its numbers as JSON.

The control-plane and scale benchmarks (``ike_setup``, ``ike_rekey``, ``xfrm_scale``) print their
tables and also write ``--out DIR`` (``runs/<date>-bench-NAME`` by default): ``results.json``,
what the tables hold, and ``report.html``, their plots, plotly.js inline so that the page opens
offline, as a sweep's report does.
"""
from __future__ import annotations

import dataclasses
import html
import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from analysis.figures import FONT
from analysis.page import CSS, figure_div
from testbed.rundir import atomic_write

#: The figures' common look.
LAYOUT = dict(template="plotly_white", font=dict(family=FONT, size=14), height=460,
              margin=dict(l=70, r=30, t=60, b=60), legend=dict(orientation="h", y=-0.18))


@dataclasses.dataclass(frozen=True)
class Section:
    """One figure of the page, with its heading and a sentence on how to read it."""

    heading: str
    text: str
    figure: go.Figure


def figure(title: str, x_title: str, y_title: str, log_x: bool = False) -> go.Figure:
    """An empty figure in the page's look.  Its x axis is logarithmic with ``log_x``; otherwise plotly takes its
    type from the data: numbers on a linear axis, names (paths, tests and sizes) as categories, which a linear
    axis would not draw at all."""
    fig = go.Figure()
    fig.update_layout(title=title, **LAYOUT)
    fig.update_xaxes(title=x_title, **({"type": "log", "dtick": 1} if log_x else {}))
    fig.update_yaxes(title=y_title, rangemode="tozero")
    return fig


def write(out_dir: str, title: str, subtitle: str, sections: Sequence[Section], data: Mapping[str, Any]) -> str:
    """Write ``results.json`` and ``report.html`` into ``out_dir``; the page's path."""
    os.makedirs(out_dir, exist_ok=True)
    atomic_write(os.path.join(out_dir, "results.json"), json.dumps(data, indent=1) + "\n")
    parts = [f"<h1>{html.escape(title)}</h1>", f'<p class="subtitle">{html.escape(subtitle)}</p>']
    for i, s in enumerate(sections):
        parts += [f"<h2>{html.escape(s.heading)}</h2>", f'<p class="howto">{html.escape(s.text)}</p>',
                  f'<div class="figure">{figure_div(s.figure, f"fig{i}", first=i == 0)}</div>']
    parts.append(f"<footer>written {time.strftime('%Y-%m-%d %H:%M:%S')}; the numbers: results.json</footer>")
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{CSS}</style></head><body><main>{''.join(parts)}</main></body></html>\n")
    path = os.path.join(out_dir, "report.html")
    atomic_write(path, page)
    return path

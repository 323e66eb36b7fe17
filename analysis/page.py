"""The HTML report: one self-contained page of a run's figures and points (returned as a string).

The command line (:mod:`cli.report`) writes it.
"""
from __future__ import annotations

import html
import os
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from analysis.figures import FONT, color_of, fig_compare, fig_cpu, fig_normalized, fig_throughput, profile_colors
from analysis.format import (
    AT_COMMON_SPEED_HELP,
    RTT_HELP,
    SATURATED_HELP,
    SATURATED_MARK,
    any_at_common_speed,
    bound_text,
    cost_header,
    cpu_cost_marked,
    cpu_cost_text,
    cpu_ratio_text,
    decimals,
    fmt_mean_ci,
    fmt_num,
    group_of,
    profile_label,
    ratio_index,
    ratio_text,
    rtt_text,
    scenario_of,
    scenario_summary,
    table_rows,
    varying_scenario_keys,
)
from analysis.penalty import penalty_of
from analysis.run import RunData
from analysis.stats import Aggregate, Ratio, aggregate, normalize
from analysis.tables import compare_rows
from ipsec.overhead import overhead_row
from testbed.hostload import FOREIGN_PCT
from testbed.record import FIELD, Bound, Meta, MetaSweep, Record, Tunnel, as_meta, as_records
from testbed.rundir import load_meta, load_results

CSS = f"""
body {{ font-family: {FONT}; color: #222; margin: 0; background: #fafafa; }}
main {{ max-width: 1320px; margin: 0 auto; padding: 24px 32px 48px; background: #fff; }}
h1 {{ font-size: 26px; margin: 0 0 4px; }}
h2 {{ font-size: 20px; margin: 36px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }}
.subtitle {{ color: #555; margin: 0 0 18px; font-size: 15px; }}
dl.meta {{ display: grid; grid-template-columns: max-content 1fr; gap: 4px 18px; margin: 0 0 16px; font-size: 14px; }}
dl.meta dt {{ color: #666; }}
dl.meta dd {{ margin: 0; }}
code, pre {{ font-family: ui-monospace, 'DejaVu Sans Mono', Menlo, monospace; font-size: 13px; }}
pre.cmd {{ background: #f3f3f3; padding: 6px 10px; margin: 0; white-space: pre-wrap; word-break: break-all; }}
.howto {{ background: #f5f8fc; border-left: 4px solid #9db7d5; padding: 10px 16px;
          font-size: 14.5px; line-height: 1.5; }}
.warning {{ background: #fff4e5; border-left: 4px solid #E69F00; padding: 8px 16px; font-size: 14px; }}
.figure {{ margin: 28px 0 12px; border-top: 1px solid #e2e2e2; padding-top: 8px; }}
table.points {{ border-collapse: collapse; font-size: 13.5px; width: 100%; }}
table.points th, table.points td {{ padding: 4px 10px; border-bottom: 1px solid #e4e4e4; white-space: nowrap; }}
table.points th {{ text-align: left; background: #f0f0f0; position: sticky; top: 0; white-space: normal;
                   vertical-align: bottom; }}
table.points td.num, table.points th.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
table.points tr.plain td {{ font-weight: 600; }}
table.points tr.newgroup td {{ border-top: 2px solid #bbb; }}
.swatch {{ display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 6px;
           vertical-align: -1px; }}
.flag {{ color: #a04000; }}
footer {{ margin-top: 32px; color: #777; font-size: 13px; }}
"""


def _esc(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def _meta_rows(meta: Meta, records: Sequence[Record],
               aggs: Sequence[Aggregate]) -> list[tuple[str, str]]:
    def values(field: str) -> list[str]:
        return sorted({str(getattr(r, field)) for r in records if getattr(r, field) is not None})

    rows = []
    topologies = values(FIELD.topology)
    rows.append(("topology", _esc(", ".join(topologies) or "–")))
    scenario = scenario_summary([a.point for a in aggs])
    if scenario:
        rows.append(("scenario", _esc(scenario)))
    profiles = sorted({str(a.profile) for a in aggs if not a.is_plain})
    rows.append(("IPsec profiles", _esc(", ".join(profiles) or "none (plain only)")))
    rates = sorted({a.rate_mbit for a in aggs}, key=lambda r: (r is None, r or 0))
    rows.append(("link rates", _esc(", ".join("unshaped" if r is None else f"{r:g} Mbit/s" for r in rates))))
    backend = meta.backend or ", ".join(values(FIELD.backend)) or "–"
    rows.append(("backend", _esc(backend)))
    rows.append(("kernel", _esc(meta.kernel_release or ", ".join(values(FIELD.kernel_release)) or "–")))
    cpu = meta.cpu_model or "–"
    if meta.cpu_count:
        cpu = f"{cpu} × {meta.cpu_count} CPUs"
    if meta.host_cpu_model:  # a UML guest's cpuinfo names no CPU
        cpu = f"{cpu}, on the host's {meta.host_cpu_model}"
    rows.append(("CPU", _esc(cpu)))
    command = meta.command_line
    if isinstance(command, (list, tuple)):
        command = " ".join(str(c) for c in command)
    rows.append(("command line", f'<pre class="cmd">{_esc(command or "–")}</pre>'))
    if meta.started or meta.finished:
        finished = meta.finished or "not recorded"
        rows.append(("run", _esc(f"started {meta.started or '?'}, finished {finished}")))
    durations = values("duration_s")
    reps = sorted({a.goodput.n for a in aggs})
    rows.append(("measurements", _esc(
        f"{len(records)} records, {len(aggs)} points, "
        f"{'/'.join(str(n) for n in reps) or '0'} repetitions per point"
        + (f", {', '.join(durations)} s each" if durations else ""))))
    versions = meta.versions
    if versions:
        rows.append(("versions", _esc(", ".join(f"{k} {v}" for k, v in versions.items()))))
    return rows


def _warnings(meta: Meta, records: Sequence[Record], aggs: Sequence[Aggregate]) -> list[str]:
    out = []
    for field in (FIELD.backend, FIELD.kernel_release):
        seen = sorted({str(getattr(r, field)) for r in records if getattr(r, field) is not None})
        if len(seen) > 1:
            out.append(f"These results mix several values of {field} ({', '.join(seen)}): "
                       "a resumed run on another kernel? Points of different kernels are averaged together.")
    limited = [a for a in aggs if a.bound == Bound.CPU]
    if limited:
        out.append(f"{len(limited)} of {len(aggs)} points were CPU-bound: the emulator's CPU, not the emulated "
                   "link, limited their goodput (hollow circles; \"CPU\" in the table's bound column). Their "
                   "absolute goodput says more about this machine than about the network being emulated.")
    other = [a for a in aggs if a.bound == Bound.OTHER]
    if other:
        out.append(f"{len(other)} of {len(aggs)} points were bound by neither the link nor the CPU (hollow "
                   "diamonds; \"other\" in the table): a small window, loss or a slow receiver set their "
                   "goodput. Look at them before drawing conclusions.")
    anomalies = sum(a.n_anomaly for a in aggs)
    if anomalies:
        were = "repetition was an anomaly" if anomalies == 1 else "repetitions were anomalies"
        out.append(f"{anomalies} {were}: the monitor's own counters contradicted each other (e.g. more "
                   "goodput than the link carries), so they are left out of the means; each record says why "
                   "in bound_reason.")
    failed = sum(a.n_failed for a in aggs)
    if failed:
        out.append(f"{failed} repetitions have no goodput (the measurement failed); they are left out of the means.")
    foreign = foreign_load_text(records)
    if foreign:
        out.append(foreign)
    return out


def foreign_load_text(records: Sequence[Record]) -> str:
    """A sentence on the windows the host's CPUs spent on other work during (testbed.hostload), or ""
    when none did beyond :data:`~testbed.hostload.FOREIGN_PCT` of a CPU (pure)."""
    timed = [r.foreign_cpu_pct for r in records if r.foreign_cpu_pct is not None]
    loaded = [x for x in timed if x > FOREIGN_PCT]
    if not loaded:
        return ""
    return (f"{len(loaded)} of {len(timed)} windows ran while the host's CPUs did other work, beyond "
            f"{FOREIGN_PCT:g} % of a CPU (at most {max(loaded):.0f} %): their figures are not a quiet machine's, "
            "and CPU-bound ones least of all; each record's foreign_cpu_pct says how much.")


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
CPU-seconds spent per gigabyte delivered, so links of different rates share one scale. It is the cost at
that load, not a constant of the data: a CPU that is seldom busy pays its wake-ups packet by packet, a
busy one batches (in User-Mode Linux, AES-GCM-256 with 100-byte segments cost about 1,600 s/GB at
10&nbsp;Mbit/s and 190 at 100&nbsp;Mbit/s). A CPU cost marked * in the table was taken with the CPU
saturated: it is then mostly the CPU there was over the goodput, and shows a costlier profile as less
costly than it is; compare CPU costs where the CPU was less busy.
<b>The marker's shape says what bounded the point</b>, as the monitor behind every measurement
found it: a filled circle, the shaped link (the figure is the emulated network's); a hollow circle,
the emulator's CPU (it ran out before the link was full: the figure is this machine's); a hollow
diamond, neither (a small window, loss or a slow receiver). The table's "bound" column says the same
per repetition.</p>
"""


def _penalty_text(ratio: Ratio | None, link_mtu: int, pmtu: str = "discover") -> str:
    """An IPsec point's penalty as 'total = wire + other' (percent of plain); see analysis.penalty."""
    p = penalty_of(ratio, link_mtu, pmtu) if ratio else None
    if p is None:
        return ""
    if p.wire is None:
        return f"{100 * p.penalty:.1f} %"
    return f"{100 * p.penalty:.1f} = {100 * p.wire:.1f} + {100 * p.other:.1f} %"


def _points_table(aggs: Sequence[Aggregate], ratios: Sequence[Ratio], colors: Mapping[Any, str],
                  link_mtu: int = 1500, pmtu: str = "discover") -> str:
    by_ipsec = ratio_index(ratios)
    varying = varying_scenario_keys(aggs)
    head = (["scenario"] if varying else []) + ["profile", "rate (Mbit/s)", "size (B)", "n", "mean goodput (Mbit/s)",
                                                 "±95 % CI", "min – max", "theoretical (Mbit/s)",
                                                 "IPsec / plain", "penalty = wire + other", cost_header(aggs),
                                                 "CPU ratio", "bound"]
    numeric = {"rate (Mbit/s)", "size (B)", "n", "mean goodput (Mbit/s)", "±95 % CI", "min – max",
               "theoretical (Mbit/s)", "IPsec / plain", "penalty = wire + other", cost_header(aggs), "CPU ratio",
               "RTT ms (idle)"}
    probed = any(a.rtt_ms is not None for a in aggs)
    if probed:
        head.insert(head.index("bound"), "RTT ms (idle)")
    out = ['<table class="points" id="points"><thead><tr>']
    out += [f'<th class="{"num" if h in numeric else ""}">{_esc(h)}</th>' for h in head]
    out.append("</tr></thead><tbody>")
    last_group = None
    for a in table_rows(aggs):
        group = group_of(a, varying)
        classes = []
        if a.is_plain:
            classes.append("plain")
        if last_group is not None and group != last_group:
            classes.append("newgroup")
        last_group = group
        mean, ci = fmt_mean_ci(a.goodput.mean, a.goodput.ci95)
        lo_d = decimals(a.goodput.mean, 3)
        ratio = by_ipsec.get(id(a))
        cells = []
        if varying:
            cells.append(("", _esc(scenario_of(a, varying))))
        cells += [
            ("", f'<span class="swatch" style="background:{color_of(colors, a.profile)}"></span>'
                 f"{_esc(profile_label(a.profile))}"),
            ("num", _esc("unshaped" if a.rate_mbit is None else f"{a.rate_mbit:g}")),
            ("num", _esc(a.size_bytes)),
            ("num", _esc(a.goodput.n)),
            ("num", _esc(mean)),
            ("num", _esc(ci)),
            ("num", _esc(f"{a.goodput.min:.{lo_d}f} – {a.goodput.max:.{lo_d}f}")),
            ("num", _esc(fmt_num(a.theoretical_goodput_mbps))),
            ("num", _esc(ratio_text(ratio.goodput if ratio else None))),
            ("num", _esc(_penalty_text(ratio, link_mtu, pmtu))),
            ("num", _esc(cpu_cost_text(a))),
            ("num", _esc(cpu_ratio_text(ratio))),
            *([("num", _esc(rtt_text(a)))] if probed else []),
            ("bound", _esc(bound_text(a))),
        ]
        out.append(f'<tr class="{" ".join(classes)}">'
                   + "".join(f'<td class="{c}">{v}</td>' for c, v in cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _tunnels_html(ratios: Sequence[Ratio]) -> str:
    """IPsec and WireGuard side by side: each tunnel profile against plain at each rate's largest size (its
    goodput with the byte model's figure beside it, its CPU per GB), and what their bytes are made of."""
    def where(r: Ratio) -> tuple:
        return r.point.topology, r.point.ip_version, r.point.transport, r.point.rate_mbit

    largest: dict[tuple, int] = {}
    for r in ratios:
        largest[where(r)] = max(largest.get(where(r), 0), r.point.size_bytes or 0)
    rows = [r for r in ratios if (r.point.size_bytes or 0) == largest[where(r)]]
    rows.sort(key=lambda r: (r.point.topology or "", r.point.rate_mbit or float("inf"), str(r.point.profile)))
    head = ["topology", "rate (Mbit/s)", "size (B)", "profile", "tunnel", "goodput / plain", "byte model",
            "CPU per GB / plain", "bound"]
    out = ['<table class="points" id="tunnels-table"><thead><tr>']
    out += [f'<th class="{"" if h in ("topology", "profile", "tunnel", "bound") else "num"}">{_esc(h)}</th>'
            for h in head]
    out.append("</tr></thead><tbody>")
    for r in rows:
        # the byte model says what a full link gives: beside CPU-bound points it says nothing
        model = (r.ipsec.theoretical_goodput_mbps / r.plain.theoretical_goodput_mbps
                 if r.ipsec.theoretical_goodput_mbps and r.plain.theoretical_goodput_mbps
                 and r.ipsec.bound is Bound.LINK and r.plain.bound is Bound.LINK else None)
        cells = [("", r.point.topology or ""), ("num", "unshaped" if r.point.rate_mbit is None else
                                                f"{r.point.rate_mbit:g}"),
                 ("num", r.point.size_bytes), ("", profile_label(r.point.profile)),
                 ("", Tunnel.of(r.point.profile).value if Tunnel.of(r.point.profile) else ""),
                 ("num", ratio_text(r.goodput)), ("num", f"{model:.3f}" if model else ""),
                 ("num", cpu_ratio_text(r)), ("", bound_text(r.ipsec))]
        out.append("<tr>" + "".join(f'<td class="{c}">{_esc(v)}</td>' for c, v in cells) + "</tr>")
    out.append("</tbody></table>")
    profiles = sorted({str(r.point.profile) for r in rows})
    bytes_rows = []
    for name in profiles:
        for version in sorted({r.point.ip_version for r in rows if str(r.point.profile) == name}):
            row = overhead_row(name, "tunnel", version)
            bytes_rows.append(f"{_esc(name)} IPv{version}: {row.added_at_mtu} bytes on a full packet, "
                              f"{row.added_min}&ndash;{row.added_max} on others, inner MTU {row.inner_mtu}")
    out.append("<p>What each tunnel adds on the wire (the byte model, <code>ipsec-testbed overhead</code>): "
               + "; ".join(bytes_rows) + ". ESP ChaCha20-Poly1305 and WireGuard use the same cipher: on a shaped "
               "link their difference is these bytes (WireGuard's UDP header and its padding to 16, and the "
               "smaller inner MTU wg-quick sets for either IP version); where the CPU bounds the points it is the "
               "cost of each protocol's path through the kernel per packet (xfrm's ESP in the sender's context "
               "against WireGuard's device, its queues and workers).</p>")
    return "\n".join(out)


def _compare_html(runs: Sequence[RunData]) -> str:
    """The comparison table as HTML (the same rows as :func:`compare_table`)."""
    headers, rows, plain = compare_rows(runs)
    text = {"scenario", "profile"}
    out = ['<table class="points" id="comparison"><thead><tr>']
    out += [f'<th class="{"" if h in text else "num"}">{_esc(h)}</th>' for h in headers]
    out.append("</tr></thead><tbody>")
    for row, is_plain in zip(rows, plain, strict=True):
        out.append(f'<tr class="{"plain" if is_plain else ""}">'
                   + "".join(f'<td class="{"" if h in text else "num"}">{_esc(c)}</td>'
                             for h, c in zip(headers, row, strict=True))
                   + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def figure_div(fig: go.Figure, div_id: str, first: bool) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=bool(first), div_id=div_id,
                       config={"displaylogo": False, "responsive": True,
                               "toImageButtonOptions": {"format": "svg", "filename": div_id}})


def render_html(run_dir_or_records: str | os.PathLike | Sequence[Record | Mapping[str, Any]],
                meta: Meta | Mapping[str, Any] | None = None, *, compare: Sequence[RunData] = ()) -> str:
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
        records = as_records(run_dir_or_records)
    meta = as_meta(meta)
    aggs = aggregate(records)
    ratios = normalize(aggs)

    # one colour per profile for the whole page, whichever profiles a figure happens to show
    colors = profile_colors([a.profile for a in aggs] + [a.profile for run in compare for a in run.aggregates])
    figures = [("throughput", "Goodput vs payload size", fig_throughput(aggs, colors))]
    if ratios:
        figures.append(("normalized", "Normalized goodput (IPsec / plain)", fig_normalized(ratios, colors)))
    if any(a.cost is not None for a in aggs):
        figures.append(("cpu", "CPU cost per gigabyte", fig_cpu(aggs, colors)))
    if len(compare) > 1:
        figures.append(("compare", "Comparison of runs", fig_compare(compare, colors)))

    title = "IPsec Testbed report"
    topologies = sorted({r.topology for r in records if r.topology})
    subtitle = f"Goodput vs payload size, plain and with IPsec — {', '.join(topologies) or 'no topology recorded'}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_esc(title)}: {_esc(', '.join(topologies))}</title>",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<style>{CSS}</style>",
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
        parts.append(figure_div(fig, "fig-" + div_id, first=i == 0))
        parts.append("</section>")
    parts.append("<h2>Aggregated points</h2>")
    parts.append("<p>One row per point; the plain baseline in bold, the IPsec rows after it at the same size. "
                 "CI: half-width of the 95&nbsp;% confidence interval. IPsec/plain and CPU ratio: delta-method "
                 "intervals. Penalty: 1 &minus; IPsec/plain in percent of the plain goodput, split into what the "
                 "bytes IPsec adds explain on a saturated link (wire, from the overhead model) and the rest "
                 "(other: encryption and packet processing, or an emulator out of CPU).</p>")
    if any(cpu_cost_marked(a) for a in aggs):
        parts.append(f"<p>CPU s/GB or CPU ratio marked {_esc(SATURATED_MARK)}: {_esc(SATURATED_HELP)}.</p>")
    if any_at_common_speed(aggs):
        parts.append(f"<p>CPU s/GB and CPU ratio: {_esc(AT_COMMON_SPEED_HELP)}.</p>")
    if any(a.rtt_ms is not None for a in aggs):
        parts.append(f"<p>RTT ms: {_esc(RTT_HELP)}.</p>")
    sweep = meta.sweep or MetaSweep()
    parts.append(_points_table(aggs, ratios, colors, sweep.mtu or 1500, sweep.pmtu or "discover"))
    if len({Tunnel.of(r.point.profile) for r in ratios}) > 1:
        parts.append('<h2 id="tunnels">Tunnels side by side</h2>')
        parts.append("<p>Each tunnel against the plain baseline at the largest size of each rate, measured in "
                     "this run, in the same network and on the same kernel.</p>")
        parts.append(_tunnels_html(ratios))
    if len(compare) > 1:
        parts.append("<h2>Comparison table</h2>")
        parts.append(_compare_html(compare))
    parts.append('<footer>Generated by the IPsec Testbed <code>analysis</code> package from '
                 f'{_esc(len(records))} result records.</footer>')
    parts.append("</main></body></html>")
    return "\n".join(parts)

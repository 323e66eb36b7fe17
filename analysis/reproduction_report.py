"""A reproduction's evaluation written out: the terminal summary, Markdown for a CI summary, the HTML page.

Everything here renders the :class:`~analysis.reproduction.Evaluation` that :func:`analysis.reproduction.evaluate`
returns; nothing is evaluated here.
"""
from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from analysis.figures import fig_normalized, fig_throughput, profile_colors
from analysis.page import CSS, figure_div
from analysis.reproduction import (
    FAILS,
    HOLDS,
    NOT_TESTABLE,
    UNDECIDED,
    UNMEASURED,
    ClaimVerdict,
    Evaluation,
    evaluate,
    load_run,
    run_kernel,
)
from analysis.stats import aggregate, normalize
from testbed.record import FIELD, Bound, Group, MetaSweep
from testbed.rundir import atomic_write

#: A verdict's colour on the terminal.
VERDICT_STYLE = {HOLDS: "green", FAILS: "red", UNDECIDED: "magenta", NOT_TESTABLE: "yellow"}
#: ... and its row's class on the page.
VERDICT_CLASS = {HOLDS: "holds", FAILS: "fails", UNDECIDED: "undecided", NOT_TESTABLE: "untestable",
                 UNMEASURED: "unmeasured"}


def _num(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"


def _pm(mean: float | None, ci: float | None) -> str:
    return "–" if mean is None else _num(mean) + (f" ± {_num(ci, 2)}" if ci is not None else "")


def value_rows(data: Evaluation) -> tuple[list[str], list[list[str]]]:
    headers = ["published value (source)", "seed", "seed (converted)", "this run", "this run / seed", ""]
    rows = []
    for v in data.values:
        unit = {FIELD.goodput_mbps: "Mbit/s", FIELD.loss_pct: "% lost", FIELD.cpu_system_pct: "% sys CPU"}[v.metric]
        rows.append([v.source, f"{v.quote}", f"{_num(v.seed_value)} {unit}",
                     _pm(v.ours, v.ci95) if v.ours is not None else v.note,
                     _num(v.ours_over_seed),
                     "; ".join(x for x in (_bound_word(v.bound, v.limited),
                                           v.note if v.ours is not None else "") if x)])
    return headers, rows


def _bound_word(bound: Bound | None, limited: bool | None = None) -> str:
    """How a point's class reads in a reproduction table: only what is not the link is worth a word."""
    if bound is None:
        return "CPU-bound" if limited else ""
    words = {Bound.CPU: "CPU-bound", Bound.OTHER: "bound by neither link nor CPU", Bound.ANOMALY: "anomaly"}
    return words.get(bound, "")


def bounds_text(bounds: Mapping[str, int]) -> str:
    """'link 6, CPU 2' (pure)."""
    names = {**{b: b.label for b in Bound}, "unknown": "not classified"}
    order = (Bound.LINK, Bound.CPU, Bound.OTHER, "unknown")
    return ", ".join(f"{names.get(b, b)} {bounds[b]}" for b in sorted(bounds, key=lambda b: (
        order.index(b) if b in order else len(order), b)))


def scale_text(data: Evaluation) -> str:
    """What a scaled run can and cannot show, or "" for a run at the seed's rates."""
    unshaped = [p.name for p in data.parts if p.regime == "cpu"]
    cpu = (f" Parts {', '.join(unshaped)} ran unshaped instead, so that this machine's CPU bounds their points as "
           "the seed's own CPU bounded the seed's: the claims that rested on the seed's CPU are judged on them."
           if unshaped else "")
    if data.scale_factor == 1.0:
        return cpu.strip()
    f = data.scale_factor
    how = data.scale.how if data.scale and data.scale.how else ""
    if unshaped:
        what_not = ("What does not: a CPU share at a scaled rate (it is judged on the unshaped parts only).")
    else:
        what_not = ("What does not: the seed's CPU costs (its shares of a CPU, and ratios the seed measured on "
                    "CPU-bound points, are not testable here).")
    return (f"Link rates scaled: every shaped rate is the seed's divided by {f:g} ({how}), so that this machine's "
            "CPU stays out of the way. What carries over: the bytes IPsec adds (goodput as a share of the link, "
            f"IPsec/plain ratios on link-bound points) and protocol behaviour. {what_not}{cpu} "
            "Rates below are the seed's; the emulated ones are 1/" + f"{f:g} of them.")


def ratio_rows(data: Evaluation) -> tuple[list[str], list[list[str]]]:
    headers = ["ratio", "at", "seed", "this run", ""]
    rows = [[r.ratio, ", ".join(f"{k}={v}" for k, v in r.where.items()), _num(r.seed),
             _pm(r.ours, r.ci95), "CPU-bound" if r.limited else ""] for r in data.ratios]
    return headers, rows


def range_text(claim: ClaimVerdict) -> str:
    """The range a claim's values must fall in: "0.850 .. 0.950", "\u2265 1.00", "\u2264 0.999"."""
    if claim.high is None:
        return f"\u2265 {_num(claim.low)}"
    if claim.low is None:
        return f"\u2264 {_num(claim.high)}"
    return f"{_num(claim.low)} .. {_num(claim.high)}"


def _span(c: ClaimVerdict) -> str:
    """A claim's values judged: "0.963 ± 0.004" (one value, with its 95 % interval), "0.91 .. 0.95"."""
    if c.min == c.max:
        return _pm(c.min, c.ci95)
    return f"{_num(c.min)} .. {_num(c.max)}"


def claim_rows(data: Evaluation) -> tuple[list[str], list[list[str]]]:
    headers = ["claim (seed's words)", "checked as", "range", "measured here", "points here by bound", "verdict"]
    rows = []
    for c in data.claims:
        measured = "–" if c.min is None else _span(c)
        n = len(c.measured)
        if c.left_out:
            measured += f" ({n - c.left_out} of {n} values judged)"
        elif n > 1:
            measured += f" ({n} values)"
        rng = range_text(c)
        if c.not_testable:
            measured += (" (in the range)" if c.in_range else " (outside the range)")
        seed_bound = f"; the seed's: {c.seed_bound}" if c.seed_bound else ""
        regime = f"; judged at {c.regime}" if c.regime else ""
        rows.append([f"\u201c{c.quote}\u201d ({c.source})", c.statement, rng, measured,
                     (bounds_text(c.bounds or {}) or "–") + seed_bound + regime, c.verdict])
    return headers, rows


def verdict_counts(claims: Sequence[ClaimVerdict]) -> str:
    """'3 of 6 claims hold, 1 does not, 1 undecided, 1 not testable here' (pure)."""
    n = {v: sum(1 for c in claims if c.verdict == v) for v in (HOLDS, FAILS, UNDECIDED, NOT_TESTABLE, UNMEASURED)}
    text = f"{n[HOLDS]} of {len(claims)} claim{'s' if len(claims) != 1 else ''} hold{'s' if len(claims) == 1 else ''}"
    if n[FAILS]:
        text += f", {n[FAILS]} {'does' if n[FAILS] == 1 else 'do'} not"
    if n[UNDECIDED]:
        text += f", {n[UNDECIDED]} undecided"
    if n[NOT_TESTABLE]:
        text += f", {n[NOT_TESTABLE]} not testable here"
    if n[UNMEASURED]:
        text += f", {n[UNMEASURED]} not measured by this run"
    return text


def markdown(data: Evaluation) -> str:
    """The claims, the published numbers and the ratios as Markdown tables (for a README or a CI summary)."""
    def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
        def cell(c: Any) -> str:
            return str(c).replace("|", "\\|").replace("\n", " ")

        return ["| " + " | ".join(map(cell, headers)) + " |", "|" + "---|" * len(headers),
                *("| " + " | ".join(map(cell, r)) + " |" for r in rows), ""]

    run = data.run
    where = f"{run_kernel(run)} on {run.host_cpu_model or run.cpu_model}"
    out = [f"Seed {data.seed}, measured with {where}: {verdict_counts(data.claims)}.", ""]
    if scale_text(data):
        out += [f"> {scale_text(data)}", ""]
    out += table(*claim_rows(data))
    notes = [f"- **{c.id}** not testable here: {c.not_testable}" if c.not_testable else
             f"- **{c.id}** undecided: {c.undecided}" if c.undecided else
             f"- **{c.id}** {c.note}" for c in data.claims if c.not_testable or c.undecided or c.note]
    if notes:
        out += [*notes, ""]
    headers, rows = value_rows(data)
    rows = [r for r in rows if r[3] and not r[3].startswith(("not measured", "2 points"))]
    if rows:
        out += table(headers, rows)
    headers, rows = ratio_rows(data)
    if rows:
        out += table(headers, rows)
    return "\n".join(out)


def print_summary(run_dir: str, data: Evaluation | None = None) -> None:
    """The claims, values and ratios tables on the terminal."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    data = data or evaluate(run_dir)
    console = Console()
    if scale_text(data):
        console.print(f"[bold]{scale_text(data)}[/bold]", highlight=False)
    print_claims(console, data)
    for title, (headers, rows) in (("Published numbers", value_rows(data)),
                                   ("Ratios that transfer", ratio_rows(data))):
        if not rows:
            continue
        table = Table(title=f"Seed {data.seed}: {title}", box=box.SIMPLE_HEAD, title_justify="left")
        for h in headers:
            table.add_column(h, overflow="fold")
        for row in rows:
            style = VERDICT_STYLE.get(row[-1])
            table.add_row(*row, style=style)
        console.print(table)


def claim_blocks(data: Evaluation) -> list[tuple[str, str, list[str]]]:
    """Each claim for a terminal of any width (pure): (verdict, its line of numbers, the lines below it: the
    seed's words, how it was checked, a note).  The verdict and its numbers stay on one line; the words
    fold beneath."""
    _headers, rows = claim_rows(data)
    out = []
    for c, (quote, statement, rng, measured, bounds, verdict) in zip(data.claims, rows, strict=True):
        head = f"{c.id}: measured {measured}, range {rng}; points here by bound: {bounds}"
        below = [quote, f"checked as: {statement}"]
        if c.not_testable:
            below.append(f"not testable here: {c.not_testable}")
        else:
            below += [line for line in (c.undecided, c.note) if line]
        out.append((verdict, head, below))
    return out


def print_claims(console, data: Evaluation) -> None:
    """The claims as short blocks: the verdict and the numbers on one line, the seed's words folded below."""
    from rich.table import Table
    from rich.text import Text

    blocks = claim_blocks(data)
    if not blocks:
        return
    console.print(Text(f"Seed {data.seed}: Claims ({verdict_counts(data.claims)})", style="bold"))
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1, overflow="fold")
    for verdict, head, below in blocks:
        style = VERDICT_STYLE.get(verdict, "")
        grid.add_row(Text(verdict.upper(), style=style), Text(head))
        for line in below:
            grid.add_row("", Text(line, style="dim" if line.startswith("\u201c") else ""))
        grid.add_row("", "")
    console.print(grid)


def _html_table(table_id: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    esc = html.escape
    out = [f'<table class="points wrap" id="{table_id}"><thead><tr>']
    out += [f"<th>{esc(h)}</th>" for h in headers]
    out.append("</tr></thead><tbody>")
    for row in rows:
        cls = VERDICT_CLASS.get(row[-1], "")
        out.append(f'<tr class="{cls}">' + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def render_html(run_dir: str, data: Evaluation | None = None,
                compare: Sequence[tuple[str, Evaluation]] = ()) -> str:
    """The reproduction's page: set-ups, claims, published numbers, ratios, penalties, figures per part."""

    esc = html.escape
    data = data or evaluate(run_dir)
    run = data.run
    where = run_kernel(run)
    head = [f"<h1>Seed {esc(data.seed)} reproduction</h1>",
            f'<p class="subtitle">{esc(data.title or "")}</p>',
            '<dl class="meta">',
            f"<dt>the seed</dt><dd>{esc(data.seed_setup or '')}</dd>",
            f"<dt>this run</dt><dd>{esc(where)} on {esc(str(run.host_cpu_model or run.cpu_model))} "
            f"({esc(str(run.cpu_count))} CPU{'s' if run.cpu_count != 1 else ''} for the run); "
            f"{esc(str(run.started))} .. {esc(str(run.finished))}</dd>",
            f"<dt>command</dt><dd><code>{esc(' '.join(run.command_line or []))}</code></dd>",
            "<dt>parts</dt><dd>" + "; ".join(f"{esc(p.name)} ({p.points} records): {esc(p.title)}"
                                              for p in data.parts) + "</dd>",
            "</dl>"]
    body = []
    body.append(f"<h2>Claims</h2><p>{esc(verdict_counts(data.claims))}. "
                "Each verdict compares values measured in this run directory, with their 95 % intervals, with the "
                "range written next to the claim in the reference file (the range is how the seed's words were "
                "read): a claim holds when every interval lies inside the range, does not hold when one lies "
                "wholly outside it, and is undecided when one straddles a bound.</p>")
    if scale_text(data):
        body.insert(0, f'<p class="howto"><b>{esc(scale_text(data))}</b></p>')
    body.append(_html_table("claims", *claim_rows(data)))
    sections = (
        ("Why a claim is not testable here", "What bounded the points a claim rests on here differs from what "
         "bounded the seed's: the comparison would measure this machine, not the claim.",
         lambda c: c.not_testable),
        ("Undecided claims", "A value's 95 % interval straddles a bound of the claim's range: this run cannot tell "
         "on which side the value lies. More repetitions of the points named narrow the interval (as 1/\u221an).",
         lambda c: c.undecided),
        ("Claims judged on part of their values", "Values whose points were bounded here otherwise than the seed's "
         "are shown in the table but left out of the verdict.", lambda c: "" if c.not_testable else c.note),
    )
    for title, intro, text in sections:
        listed = [c for c in data.claims if text(c)]
        if listed:
            body.append(f"<h3>{esc(title)}</h3><p>{esc(intro)}</p><ul>")
            body += [f"<li><b>{esc(c.id)}</b>: {esc(text(c))}</li>" for c in listed]
            body.append("</ul>")
    if len(compare) > 1:
        body.append("<h3>The same claims in the runs compared</h3>")
        body.append(_html_table("claims-compared", *claims_compared([d for d, _ in compare], [x for _, x in compare])))
    failing = [c for c in data.claims if c.differs]
    if failing:
        body.append("<h3>What differs, where a claim does not hold</h3><p>As far as this run's data shows; "
                    "the seed's set-up is at the top of the page.</p><ul>")
        body += [f"<li><b>{esc(c.id)}</b>: {esc(c.differs)}</li>" for c in failing]
        body.append("</ul>")
    headers, rows = value_rows(data)
    if rows:
        body.append("<h2>Published numbers and this run's</h2><p>Means over repetitions with the half-width "
                    "of the 95&nbsp;% confidence interval. Absolute figures depend on the machine; see the "
                    "ratios below.</p>")
        body.append(_html_table("values", headers, rows))
    headers, rows = ratio_rows(data)
    if rows:
        body.append("<h2>Ratios that transfer across hardware</h2>")
        body.append(_html_table("ratios", headers, rows))
    if data.transactions:
        body.append("<h2>Request/response transactions</h2>")
        body.append(_html_table("transactions", ["profile", "mean per transaction", "IPsec/plain"],
                                [[t.point[FIELD.profile], _pm(t.mean_ms, t.ci95) + " ms", _num(t.ratio)]
                                 for t in data.transactions]))
    if data.penalties:
        body.append("<h2>Where the IPsec penalty comes from</h2><p>Penalty = 1 &minus; IPsec/plain goodput. "
                    "Wire: what the bytes IPsec adds explain on a saturated link (the overhead model); other: "
                    "the rest (encryption and packet processing time, an emulator out of CPU). "
                    "&ldquo;plain link-bound&rdquo; says whether the plain point reached 90&nbsp;% of its "
                    "expected goodput, i.e. whether the link was the bottleneck.</p>")
        body.append(_html_table("penalties", ["part", "point", "IPsec/plain", "penalty", "wire", "other",
                                              "plain link-bound", ""],
                                [[p.part, _point_text(p.penalty.point), _num(p.penalty.ratio), _pct(p.penalty.penalty),
                                  _pct(p.penalty.wire), _pct(p.penalty.other),
                                  {True: "yes", False: "no", None: "–"}[p.penalty.plain_link_bound],
                                  "CPU-bound" if p.limited else ""] for p in data.penalties]))
    figures = _part_figures(run_dir)
    if figures:
        body.append("<h2>Figures</h2>")
        for i, (name, fig) in enumerate(figures):
            body.append(f'<section class="figure" id="{esc(name)}">')
            body.append(figure_div(fig, "fig-" + name, first=i == 0))
            body.append("</section>")
    css = CSS + ("table.points.wrap td{white-space:normal;vertical-align:top}"
                               "table.points.wrap td:last-child{white-space:nowrap}"
                               "tr.holds td:last-child{color:#006d2c;font-weight:600}"
                               "tr.fails td:last-child{color:#b30000;font-weight:600}"
                               "tr.untestable td:last-child{color:#8a6d00;font-weight:600}"
                               "tr.undecided td:last-child{color:#7a1fa2;font-weight:600}")
    return "\n".join(["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
                      f"<title>Seed {esc(data.seed)} reproduction</title>",
                      '<meta name="viewport" content="width=device-width, initial-scale=1">',
                      f"<style>{css}</style>", "</head><body><main>", *head, *body,
                      "<footer>Generated by the IPsec Testbed <code>analysis</code> package from the run directory "
                      "and <code>analysis/reference/</code>.</footer>", "</main></body></html>"])


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x + 0.0:.1f} %".replace("-0.0 %", "0.0 %")


def _point_text(p: Group) -> str:
    bits = [str(p.profile), f"IPv{p.ip_version}", str(p.transport), f"{p.size_mode} {p.size_bytes} B",
            f"{p.rate_mbit:g} Mbit/s"]
    if p.clients not in (None, 1):
        bits.append(f"{p.clients} clients")
    return " ".join(bits)


def _part_figures(run_dir: str) -> list:
    """Goodput and normalized-goodput figures of the parts that vary size or rate."""

    _, parts = load_run(run_dir)
    figures = []
    for measured in parts:
        part, spec = measured.part, measured.part.spec or MetaSweep()
        if part.transactions or not measured.records:
            continue
        if len(spec.sizes or ()) < 2 and len(spec.rates_mbit or ()) < 2:
            continue
        aggs = aggregate(measured.records)
        colors = profile_colors([a.profile for a in aggs])
        figures.append((f"{part.name}-goodput", fig_throughput(aggs, colors)))
        ratios = normalize(aggs)
        if ratios:
            figures.append((f"{part.name}-normalized", fig_normalized(ratios, colors)))
    return figures


def write_report(run_dir: str, out: str | None = None, compare: Sequence[tuple[str, Evaluation]] = (),
                 data: Evaluation | None = None) -> str:
    """Write ``comparison.json`` and ``report.html`` (or ``out``) into ``run_dir``; returns the report's path.

    ``compare``: (run directory, :func:`evaluate` data) of several runs of the same seed, this
    one first, whose claims the page sets side by side; ``data``: this run's :func:`evaluate`, if made already.
    """
    data = data or evaluate(run_dir)
    atomic_write(os.path.join(run_dir, "comparison.json"),
                 json.dumps(data.to_json(), indent=2, sort_keys=True, default=str))
    path = out or os.path.join(run_dir, "report.html")
    atomic_write(path, render_html(run_dir, data, compare))
    return path


def claims_compared(run_dirs: Sequence[str], datas: Sequence[Evaluation]) -> tuple[list[str], list[list[str]]]:
    """One row per claim of the first run: its verdict and measured range in every run, and with several
    runs whether the verdict was the same in all of them."""
    headers = ["the seed says", "read as", "the seed's points"] + [
        run_title(d, x) for d, x in zip(run_dirs, datas, strict=True)]
    if len(datas) > 1:
        headers.append("the same verdict in every run")
    rows = []
    for claim in datas[0].claims:
        row = [f"\u201c{claim.quote}\u201d ({claim.id})", range_text(claim), claim.seed_bound or "–"]
        verdicts = []
        for data in datas:
            c = next((c for c in data.claims if c.id == claim.id), None)
            verdicts.append(c.verdict if c is not None else UNMEASURED)
            if c is None or c.min is None:
                row.append(UNMEASURED)
            else:
                bounds = bounds_text(c.bounds or {})
                judged = f"; judged on {len(c.measured) - c.left_out} of {len(c.measured)}" if c.left_out else ""
                row.append(f"**{c.verdict}**: {_span(c)}" + (f" ({bounds}{judged})" if bounds else ""))
        if len(datas) > 1:
            row.append("yes" if len(set(verdicts)) == 1 else "**no**")
        rows.append(row)
    return headers, rows


def run_title(run_dir: str, data: Evaluation) -> str:
    """A run's column title: its directory, kernel, and its rates when they were scaled."""
    factor = data.scale_factor
    rates = f"rates ÷ {factor:g}" if factor != 1.0 else "the seed's rates"
    return (f"{os.path.basename(os.path.normpath(run_dir))}: {rates} ({data.run.backend} "
            f"{data.run.kernel_release})")


def markdown_compared(run_dirs: Sequence[str], datas: Sequence[Evaluation]) -> str:
    """The claims of several runs of one seed side by side, as Markdown (pure)."""
    headers, rows = claims_compared(run_dirs, datas)
    out = [f"Seed {datas[0].seed}: " + "; ".join(
        f"{run_title(d, x)}: {verdict_counts(x.claims)}" for d, x in zip(run_dirs, datas, strict=True)) + ".", ""]
    out.append("| " + " | ".join(headers) + " |")
    out.append("|" + "---|" * len(headers))
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def print_claims_compared(run_dirs: Sequence[str], datas: Sequence[Evaluation]) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    headers, rows = claims_compared(run_dirs, datas)
    table = Table(title="Claims across runs", box=box.SIMPLE_HEAD, title_justify="left")
    for h in headers:
        table.add_column(h, overflow="fold")
    for row in rows:
        table.add_row(*row)
    Console().print(table)

"""The terminal tables of a run and of a comparison of runs (rich tables; nothing is printed here)."""
from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.table import Table

from analysis.format import (
    AT_COMMON_SPEED_HELP,
    COUNTED_HELP,
    RTT_HELP,
    SATURATED_HELP,
    SATURATED_MARK,
    any_at_common_speed,
    bound_text,
    compare_key,
    cost_header,
    cpu_cost_marked,
    cpu_cost_text,
    fmt_mean_ci,
    group_of,
    ratio_index,
    ratio_text,
    row_order,
    rtt_text,
    scenario_of,
    summary_text,
    table_rows,
    varying_scenario_keys,
)
from analysis.run import RunData
from analysis.stats import Aggregate, Ratio
from testbed.record import CAUTION_ORDER


def _rich_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], *,
                left: Sequence[str] = (), styles: Sequence[str | None] = (),
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


def terminal_table(aggs: Sequence[Aggregate], ratios: Sequence[Ratio], title: str | None = None) -> Table:
    """The aggregated points as a rich table: plain and IPsec side by side per size.

    Columns: profile, rate, size, mean goodput, its 95 % CI half-width, repetitions, IPsec/plain
    goodput (± 95 % CI), CPU-seconds per GB (± 95 % CI; marked when the CPU was saturated),
    and what bounded the point (link, CPU, other; anomalies left out and failed repetitions),
    explained in the caption.
    A scenario column comes first when the points span several scenarios.
    """
    varying = varying_scenario_keys(aggs)
    by_ipsec = ratio_index(ratios)
    cost = cost_header(aggs)
    headers = ["profile", "rate Mbit/s", "size B", "mean Mbit/s", "±95% CI", "n", "IPsec/plain", cost, "bound"]
    if varying:
        headers.insert(0, "scenario")
    rows, styles, sections = [], [], []
    ordered = table_rows(aggs)
    probed = any(a.rtt_ms is not None for a in ordered)
    if probed:  # the latency probe's round trip under load (its unloaded one in brackets)
        headers.insert(headers.index("bound"), "RTT ms (idle)")
    for i, a in enumerate(ordered):
        mean, ci = fmt_mean_ci(a.goodput.mean, a.goodput.ci95)
        ratio = by_ipsec.get(id(a))
        arm = f" arm {a.point.arm}" if a.point.arm else ""  # an A/B within the sweep (--arms)
        cells = ["plain" if a.is_plain else f"{a.profile}{arm}",
                 "unshaped" if a.rate_mbit is None else f"{a.rate_mbit:g}",
                 str(a.size_bytes), mean, ci, str(a.goodput.n), ratio_text(ratio.goodput if ratio else None),
                 cpu_cost_text(a), bound_text(a)]
        if probed:
            cells.insert(len(cells) - 1, rtt_text(a))
        if varying:
            cells.insert(0, scenario_of(a, varying))
        nxt = ordered[i + 1] if i + 1 < len(ordered) else None
        rows.append(cells)
        styles.append("bold" if a.is_plain else None)
        sections.append(nxt is not None and group_of(nxt, varying) != group_of(a, varying))
    table = _rich_table(title or "Goodput per point (mean of repetitions, 95 % confidence intervals)",
                        headers, rows, left=("scenario", "profile", "bound"), styles=styles, sections=sections)
    seen = {b for a in ordered for b in a.bounds if b.counted}
    captions = []
    if seen:
        captions.append("bound: " + "; ".join(f"{b.label} = {b.meaning}" for b in CAUTION_ORDER if b in seen))
    if any(cpu_cost_marked(a) for a in ordered):
        captions.append(f"{cost} {SATURATED_MARK}: {SATURATED_HELP}")
    if any_at_common_speed(ordered):
        captions.append(f"CPU s/GB: {AT_COMMON_SPEED_HELP}")
    if probed:
        captions.append(f"RTT ms: {RTT_HELP}")
    if cost == "insn/B":
        captions.append(f"insn/B: {COUNTED_HELP}")
    if captions:
        table.caption = "\n".join(captions)
        table.caption_justify = "left"
    return table


def compare_rows(runs: Sequence[RunData]) -> tuple[list[str], list[list[str]], list[bool]]:
    """Headers, rows and which rows are plain, for the comparison of runs (terminal and HTML)."""
    all_aggs = [a for run in runs for a in run.aggregates]
    varying = varying_scenario_keys(all_aggs)
    headers = (["scenario"] if varying else []) + ["profile", "rate Mbit/s", "size B"]
    for run in runs:
        headers += [f"{run.label}: Mbit/s", f"{run.label}: IPsec/plain"]
    indexes = [({compare_key(a): a for a in run.aggregates}, ratio_index(run.ratios)) for run in runs]
    seen: dict[tuple, Aggregate] = {}
    for a in all_aggs:
        seen.setdefault(compare_key(a), a)
    rows, plain = [], []
    for key, a in sorted(seen.items(), key=lambda kv: row_order(kv[1])):
        cells = (["plain" if a.is_plain else str(a.profile), "unshaped" if a.rate_mbit is None else f"{a.rate_mbit:g}",
                  str(a.size_bytes)])
        if varying:
            cells.insert(0, scenario_of(a, varying))
        for aggs_by_key, ratio_by_ipsec in indexes:
            mine = aggs_by_key.get(key)
            if mine is None:
                cells += ["", ""]
                continue
            ratio = ratio_by_ipsec.get(id(mine))
            cells += [summary_text(mine.goodput), ratio_text(ratio.goodput if ratio else None)]
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

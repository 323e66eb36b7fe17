"""A seed's published numbers and claims next to a reproduction run's measurements.

Reads a run directory that :mod:`experiments.reproduce` wrote (``meta.json`` naming the
seed and its parts, one sub-directory of results per part) and the seed's reference file
(``analysis/reference/seedNNN.json``: its numbers, each with its source, and its claims
as checkable statements), and computes:

* **values** -- every published throughput, loss and CPU figure next to ours at the same
  point (mean, 95 % CI, ours/seed);
* **ratios that transfer** -- IPsec/plain, IPv6/IPv4, IPComp/none, tunnel/transport, N
  clients/1 client: the same ratio from the seed's numbers and from ours (absolute
  figures depend on the hardware; these less so);
* **claims** -- each of the seed's claims judged on this run's data: ``holds``, ``does
  not hold`` or ``not measured``, with the measured values, and for one that does not
  hold what differs between the seed's set-up and this run, as far as the data shows;
* **penalties** -- every IPsec point's penalty split into what the extra bytes on the wire
  explain and the rest (:mod:`analysis.penalty`).

Nothing here is typed by hand: a verdict is a comparison of measured numbers with the
range the reference file states.  :func:`write_report` writes ``comparison.json`` and
``report.html``; :func:`print_summary` prints the tables.

A claim's ``check`` (in the reference file)::

    {"metric": "goodput_mbps" | "normalized_goodput" | "loss_pct" | "cpu_system_pct" |
               "cpu_busy_pct" | "cpu_s_per_gb" | "transaction_ms",
     "op": "value" | "ratio" | "difference",
     "select": {WHERE}, "num": {WHERE}, "den": {WHERE},
     "means": false, "ignore": [KEY, ...], "low": X, "high": Y}

``value``: the metric of every point matching ``select`` lies in [low, high].  ``ratio`` /
``difference``: each point matching select+num against the point matching select+den
that equals it in every other key but those in ``ignore`` (or, with ``means``, the mean over all of select+num
against the mean over all of select+den) lies in [low, high].  The claim holds when every
computed value does.  A WHERE maps point keys (``part`` is the reference part name,
``profile``, ``ip_version``, ``transport``, ``size_bytes``, ``rate_mbit``, ``clients``,
``mode``, ``mtu``) to a value, a list of values, or ``{"min": a, "max": b}`` (inclusive).
"""
from __future__ import annotations

import dataclasses
import html
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from analysis.stats import POINT_KEYS, RatioEstimate, Summary, aggregate, normalize, ratio_of_means

REFERENCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference")
METRICS = ("goodput_mbps", "normalized_goodput", "loss_pct", "cpu_system_pct", "cpu_busy_pct", "cpu_s_per_gb",
           "transaction_ms")
COMPARED_METRICS = ("goodput_mbps", "loss_pct", "cpu_system_pct")
HOLDS, FAILS, UNMEASURED = "holds", "does not hold", "not measured"


class ReproductionError(ValueError):
    """The run directory or the reference file cannot be read as a reproduction."""


def load_reference(seed: str) -> dict:
    """The reference file of ``seed`` ("000".."004")."""
    path = os.path.join(REFERENCE_DIR, f"seed{seed}.json")
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise ReproductionError(f"no reference data for seed {seed!r} ({path})") from None


# -- rows: one per measured point of the run, every metric beside it ----------------------

@dataclasses.dataclass(frozen=True, eq=False)
class Row:
    """One point of a reproduction run (repetitions aggregated)."""

    point: Mapping[str, Any]  # POINT_KEYS + part, reference, mtu
    metrics: Mapping[str, Any]  # name -> Summary or RatioEstimate
    limited: bool = False
    penalty: Any = None  # analysis.penalty.Penalty for IPsec sweep points

    def value(self, metric: str) -> Optional[tuple[float, Optional[float]]]:
        """(mean, 95 % CI half-width) of ``metric``, or None."""
        m = self.metrics.get(metric)
        if m is None:
            return None
        if isinstance(m, RatioEstimate):
            return m.value, m.ci95
        return m.mean, m.ci95


def load_run(run_dir: str) -> tuple[dict, list[dict]]:
    """``meta.json`` of a reproduction run and its parts, each with its records."""
    from testbed.rundir import load_meta, load_results

    meta = load_meta(run_dir)
    if not meta.get("seed") or not meta.get("parts"):
        raise ReproductionError(f"{run_dir}: not a reproduction run (meta.json names no seed and parts)")
    parts = []
    for part in meta["parts"]:
        part_dir = os.path.join(run_dir, part["name"])
        records = load_results(part_dir) if os.path.exists(os.path.join(part_dir, "results.jsonl")) else []
        parts.append({**part, "records": [r for r in records if not r.get("failed")]})
    return meta, parts


def rows_of(parts: Sequence[dict]) -> list[Row]:
    """Every point of every part, with goodput, loss, CPU, normalized goodput and penalty."""
    from analysis.penalty import penalty_of

    rows = []
    for part in parts:
        extra = {"part": part["name"], "reference": part.get("reference") or part["name"],
                 "mtu": part["spec"].get("mtu", 1500)}
        records = part["records"]
        if part.get("transactions"):
            rows += _transaction_rows(records, extra)
            continue
        aggs = aggregate(records)
        ratios = {id(r.ipsec): r for r in normalize(aggs)}
        for a in aggs:
            metrics: dict[str, Any] = {"goodput_mbps": a.goodput, "loss_pct": a.loss_pct}
            metrics.update({f: a.cpu.get(f) for f in ("cpu_system_pct", "cpu_busy_pct", "cpu_s_per_gb")})
            ratio = ratios.get(id(a))
            penalty = None
            if ratio is not None:
                metrics["normalized_goodput"] = ratio.goodput
                penalty = penalty_of(ratio, extra["mtu"])
            rows.append(Row({**a.point, **extra}, metrics, a.emulation_limited, penalty))
    return rows


def _transaction_rows(records: Sequence[Mapping[str, Any]], extra: Mapping[str, Any]) -> list[Row]:
    groups: dict[tuple, list] = {}
    for r in records:
        groups.setdefault(tuple(r.get(k) for k in POINT_KEYS), []).append(r)
    rows = []
    for key, group in groups.items():
        metrics = {"transaction_ms": Summary.of([r["mean_ms"] for r in group]),
                   "cpu_busy_pct": Summary.of([r["cpu_busy_pct"] for r in group]),
                   "cpu_system_pct": Summary.of([r["cpu_system_pct"] for r in group])}
        rows.append(Row({**dict(zip(POINT_KEYS, key)), **extra}, metrics))
    plain = {tuple(v for k, v in r.point.items() if k != "profile"): r for r in rows if r.point["profile"] == "none"}
    for r in rows:
        base = plain.get(tuple(v for k, v in r.point.items() if k != "profile"))
        if base is not None and r is not base:
            r.metrics["transaction_ms_ratio"] = ratio_of_means(r.metrics["transaction_ms"],
                                                               base.metrics["transaction_ms"])
    return rows


# -- matching a WHERE -----------------------------------------------------------------------

def _match_one(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, list):
        return any(_match_one(actual, w) for w in wanted)
    if isinstance(wanted, dict):
        if actual is None or isinstance(actual, str):
            return False
        return wanted.get("min", -math.inf) <= actual <= wanted.get("max", math.inf)
    if isinstance(wanted, (int, float)) and isinstance(actual, (int, float)):
        return math.isclose(float(actual), float(wanted))
    return actual == wanted


def matches(row: Row, where: Mapping[str, Any]) -> bool:
    """Whether ``row`` is a point ``where`` describes; keys a row does not have are ignored."""
    for key, wanted in where.items():
        if key == "part":
            if not (_match_one(row.point["reference"], wanted) or _match_one(row.point["part"], wanted)):
                return False
        elif key in row.point:
            if not _match_one(row.point[key], wanted):
                return False
    return True


def select(rows: Sequence[Row], where: Mapping[str, Any], metric: Optional[str] = None) -> list[Row]:
    return [r for r in rows if matches(r, where) and (metric is None or r.value(metric) is not None)]


# -- published values next to ours ------------------------------------------------------------

def compare_values(reference: Mapping[str, Any], rows: Sequence[Row]) -> list[dict]:
    """One entry per published throughput, loss or CPU figure: the seed's and ours."""
    out = []
    for v in reference.get("values", []):
        if v.get("metric") not in COMPARED_METRICS or "compare" in v.get("where", {}):
            continue  # a value that compares two set-ups is a claim's (see "claims")
        seed_value = v["value"] * v.get("mbps_per_unit", 1) if v["metric"] == "goodput_mbps" else v["value"]
        found = select(rows, v.get("where", {}), v["metric"])
        entry = {"id": v["id"], "source": v["source"], "quote": v["quote"], "metric": v["metric"],
                 "seed_value": seed_value, "seed_unit": v["unit"], "seed_quoted": v["value"],
                 "ours": None, "ci95": None, "n": None, "ours_over_seed": None, "limited": None, "note": ""}
        if len(found) == 1:
            mean, ci = found[0].value(v["metric"])
            entry.update(ours=mean, ci95=ci, n=found[0].metrics[v["metric"]].n, limited=found[0].limited,
                         ours_over_seed=mean / seed_value if seed_value and v["metric"] != "loss_pct" else None)
        else:
            entry["note"] = "not measured by this run" if not found else f"{len(found)} points match; not compared"
        out.append(entry)
    return out


#: Ratios that carry across hardware: (name, key, test on the numerator's and denominator's value).
TRANSFERS = (
    ("IPsec/plain", "profile", lambda a, b: b == "none" and a != "none" and not a.endswith("+ipcomp")),
    ("IPComp/none", "profile", lambda a, b: a == f"{b}+ipcomp"),
    ("IPv6/IPv4", "ip_version", lambda a, b: a == 6 and b == 4),
    ("tunnel/transport", "part", lambda a, b: "tunnel" in str(a) and str(b) == str(a).replace("tunnel", "transport")),
    ("N clients/1 client", "clients", lambda a, b: b == 1 and a > 1),
)


def transfer_ratios(reference: Mapping[str, Any], rows: Sequence[Row]) -> list[dict]:
    """The seed's throughput ratios (pairs of its values differing in one key) and ours at the same pair."""
    values = [v for v in reference.get("values", []) if v.get("metric") == "goodput_mbps"]
    out = []
    for a in values:
        for b in values:
            wa, wb = a.get("where", {}), b.get("where", {})
            # the plain baseline has no IPsec mode: compare it with IPsec values of any mode
            wa = {k: v for k, v in wa.items() if k != "mode" or "mode" in wb}
            wb = {k: v for k, v in wb.items() if k != "mode" or "mode" in wa}
            if a is b or set(wa) != set(wb):
                continue
            differ = [k for k in wa if wa[k] != wb[k]]
            if len(differ) != 1 or (differ == ["part"] and wa.get("profile") == "none"):
                continue  # (without IPsec, "tunnel" and "transport" are the same network)
            for name, key, test in TRANSFERS:
                if differ[0] != key or not test(wa[key], wb[key]):
                    continue
                seed_ratio = (a["value"] * a.get("mbps_per_unit", 1)) / (b["value"] * b.get("mbps_per_unit", 1))
                ra, rb = select(rows, wa, "goodput_mbps"), select(rows, wb, "goodput_mbps")
                ours = (ratio_of_means(ra[0].metrics["goodput_mbps"], rb[0].metrics["goodput_mbps"])
                        if len(ra) == 1 and len(rb) == 1 else None)
                out.append({"ratio": name, "numerator": a["id"], "denominator": b["id"],
                            "where": {k: v for k, v in wa.items() if k != key}, "seed": seed_ratio,
                            "ours": ours.value if ours else None, "ci95": ours.ci95 if ours else None,
                            "limited": (ra[0].limited or rb[0].limited) if ours else None})
    return out


# -- claims -----------------------------------------------------------------------------------

def _pairs(rows: Sequence[Row], check: Mapping[str, Any]) -> list[tuple[Row, Row]]:
    metric = check["metric"]
    base = check.get("select", {})
    nums = select(rows, {**base, **check.get("num", {})}, metric)
    dens = select(rows, {**base, **check.get("den", {})}, metric)
    varied = set(check.get("num", {})) | set(check.get("den", {})) | set(check.get("ignore", ()))
    if "part" in varied:
        varied |= {"part", "reference"}
    pairs = []
    for n in nums:
        same = [d for d in dens if d is not n
                and all(_match_one(d.point.get(k), v) for k, v in n.point.items() if k not in varied)]
        if len(same) == 1:
            pairs.append((n, same[0]))
    return pairs


def _combine(op: str, a: float, b: float) -> Optional[float]:
    if op == "ratio":
        return a / b if b else None
    return a - b


def evaluate_claim(claim: Mapping[str, Any], rows: Sequence[Row]) -> dict:
    """The verdict on one claim, with the values it rests on; see the module docstring."""
    check = claim["check"]
    metric, op = check["metric"], check.get("op", "value")
    if metric not in METRICS:
        raise ReproductionError(f"claim {claim.get('id')}: unknown metric {metric!r}")
    low, high = check.get("low", -math.inf), check.get("high", math.inf)
    computed: list[tuple[str, float]] = []
    involved: list[Row] = []
    if op == "value":
        for r in select(rows, check.get("select", {}), metric):
            computed.append((_label(r), r.value(metric)[0]))
            involved.append(r)
    elif check.get("means"):
        base = check.get("select", {})
        nums = select(rows, {**base, **check.get("num", {})}, metric)
        dens = select(rows, {**base, **check.get("den", {})}, metric)
        if nums and dens:
            a = sum(r.value(metric)[0] for r in nums) / len(nums)
            b = sum(r.value(metric)[0] for r in dens) / len(dens)
            value = _combine(op, a, b)
            if value is not None:
                computed.append((f"mean of {len(nums)} / mean of {len(dens)} points", value))
            involved += nums + dens
    else:
        for n, d in _pairs(rows, check):
            value = _combine(op, n.value(metric)[0], d.value(metric)[0])
            if value is not None:
                computed.append((f"{_label(n)} vs {_label(d)}", value))
                involved += [n, d]
    if not computed:
        verdict = UNMEASURED
    else:
        verdict = HOLDS if all(low <= v <= high for _, v in computed) else FAILS
    values = [v for _, v in computed]
    return {"id": claim["id"], "source": claim.get("source", ""), "quote": claim.get("quote", ""),
            "statement": claim["statement"], "reading": claim.get("reading", ""), "metric": metric, "op": op,
            "low": check.get("low"), "high": check.get("high"), "verdict": verdict,
            "measured": [{"what": w, "value": v, "in_range": low <= v <= high} for w, v in computed],
            "min": min(values) if values else None, "max": max(values) if values else None,
            "points_cpu_bound": sum(1 for r in {id(r): r for r in involved}.values() if r.limited),
            "points": len({id(r) for r in involved}),
            "cpu_busy_mean": _mean_of(involved, "cpu_busy_pct"), "cpu_system_mean": _mean_of(involved, "cpu_system_pct")}


def _mean_of(rows: Sequence[Row], metric: str) -> Optional[float]:
    values = [r.value(metric)[0] for r in {id(r): r for r in rows}.values() if r.value(metric) is not None]
    return sum(values) / len(values) if values else None


def _label(row: Row) -> str:
    p = row.point
    bits = [p["part"], str(p["profile"]), f"IPv{p['ip_version']}", str(p["transport"])]
    if p.get("size_mode") != "transaction":
        bits.append(f"{p['size_bytes']} B")
    bits.append(f"{p['rate_mbit']:g} Mbit/s")
    if p.get("clients", 1) != 1:
        bits.append(f"{p['clients']} clients")
    return " ".join(bits)


def run_kernel(meta: Mapping[str, Any]) -> str:
    """The kernel a run measured on, as its meta.json names it ("User-Mode Linux 6.1.176")."""
    label = meta.get("backend_label") or f"{meta.get('backend') or 'the'} kernel"
    release = meta.get("kernel_release")
    return label if not release or release in label else f"{label} ({release})"


def differences(meta: Mapping[str, Any], reference: Mapping[str, Any], verdict: Mapping[str, Any]) -> str:
    """What differs between the seed's set-up and this run, as far as the data shows (for a claim that fails)."""
    out = []
    if verdict["points"]:
        out.append(f"{verdict['points_cpu_bound']} of the {verdict['points']} points it rests on were CPU-bound "
                   "here (the emulator's CPU, not the link, limited them)")
    out.append(f"this run: {run_kernel(meta)} on {meta.get('host_cpu_model') or meta.get('cpu_model') or '?'}"
               f" -- {meta.get('backend_note') or 'all hosts on one machine'}")
    if verdict["metric"].startswith("cpu_"):
        out.append("CPU here is the whole machine's share (every emulated host), the seed's one host's")
    if verdict["metric"] == "cpu_system_pct" and verdict.get("cpu_busy_mean") is not None:
        out.append(f"on these points the CPU was {verdict['cpu_busy_mean']:.0f} % busy but only "
                   f"{verdict['cpu_system_mean']:.1f} % system: this kernel's accounting does not put its "
                   "network and crypto work under system time as the seed's did")
    return "; ".join(out)


def evaluate(run_dir: str) -> dict:
    """Everything :func:`write_report` shows, as JSON-able data."""
    meta, parts = load_run(run_dir)
    reference = load_reference(meta["seed"])
    rows = rows_of(parts)
    claims = []
    for claim in reference.get("claims", []):
        verdict = evaluate_claim(claim, rows)
        verdict["differs"] = differences(meta, reference, verdict) if verdict["verdict"] == FAILS else ""
        claims.append(verdict)
    penalties = [dataclasses.asdict(r.penalty) | {"part": r.point["part"], "limited": r.limited}
                 for r in rows if r.penalty is not None]
    return {"seed": meta["seed"], "title": reference.get("title"), "seed_setup": reference.get("setup"),
            "run": {k: meta.get(k) for k in ("backend", "kernel_release", "cpu_model", "host_cpu_model", "cpu_count", "started",
                                              "finished", "command_line", "versions")},
            "parts": [{k: p[k] for k in ("name", "title", "reference")} | {"points": len(p["records"])}
                      for p in parts],
            "values": compare_values(reference, rows), "ratios": transfer_ratios(reference, rows),
            "claims": claims, "penalties": penalties,
            "transactions": [{"point": dict(r.point), "mean_ms": r.value("transaction_ms")[0],
                              "ci95": r.value("transaction_ms")[1],
                              "ratio": (r.metrics["transaction_ms_ratio"].value
                                        if r.metrics.get("transaction_ms_ratio") else None)}
                             for r in rows if r.value("transaction_ms") is not None]}


# -- output -----------------------------------------------------------------------------------

def _num(x: Optional[float], digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(x)))))
    return f"{x:.{decimals}f}"


def _pm(mean: Optional[float], ci: Optional[float]) -> str:
    return "–" if mean is None else _num(mean) + (f" ± {_num(ci, 2)}" if ci is not None else "")


def value_rows(data: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    headers = ["published value (source)", "seed", "seed (converted)", "this run", "this run / seed", ""]
    rows = []
    for v in data["values"]:
        unit = {"goodput_mbps": "Mbit/s", "loss_pct": "% lost", "cpu_system_pct": "% sys CPU"}[v["metric"]]
        rows.append([v["source"], f"{v['quote']}", f"{_num(v['seed_value'])} {unit}",
                     _pm(v["ours"], v["ci95"]) if v["ours"] is not None else v["note"],
                     _num(v["ours_over_seed"]), "CPU-bound" if v["limited"] else ""])
    return headers, rows


def ratio_rows(data: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    headers = ["ratio", "at", "seed", "this run", ""]
    rows = [[r["ratio"], ", ".join(f"{k}={v}" for k, v in r["where"].items()), _num(r["seed"]),
             _pm(r["ours"], r["ci95"]), "CPU-bound" if r["limited"] else ""] for r in data["ratios"]]
    return headers, rows


def claim_rows(data: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    headers = ["claim (seed's words)", "checked as", "range", "measured here", "verdict"]
    rows = []
    for c in data["claims"]:
        measured = "–" if c["min"] is None else (_num(c["min"]) if c["min"] == c["max"]
                                                 else f"{_num(c['min'])} .. {_num(c['max'])}")
        measured += f" ({len(c['measured'])} values)" if len(c["measured"]) > 1 else ""
        rng = (f"\u2265 {_num(c['low'])}" if c["high"] is None else f"\u2264 {_num(c['high'])}" if c["low"] is None
               else f"{_num(c['low'])} .. {_num(c['high'])}")
        rows.append([f"\u201c{c['quote']}\u201d ({c['source']})", c["statement"], rng, measured, c["verdict"]])
    return headers, rows


def verdict_counts(claims: Sequence[Mapping[str, Any]]) -> str:
    """'3 of 5 claims hold, 1 does not, 1 not measured' (pure)."""
    n = {v: sum(1 for c in claims if c["verdict"] == v) for v in (HOLDS, FAILS, UNMEASURED)}
    text = f"{n[HOLDS]} of {len(claims)} claim{'s' if len(claims) != 1 else ''} hold{'s' if len(claims) == 1 else ''}"
    if n[FAILS]:
        text += f", {n[FAILS]} {'does' if n[FAILS] == 1 else 'do'} not"
    if n[UNMEASURED]:
        text += f", {n[UNMEASURED]} not measured by this run"
    return text


def markdown(data: Mapping[str, Any]) -> str:
    """The claims, the published numbers and the ratios as Markdown tables (for a README or a CI summary)."""
    def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
        cell = lambda c: str(c).replace("|", "\\|").replace("\n", " ")  # noqa: E731
        return ["| " + " | ".join(map(cell, headers)) + " |", "|" + "---|" * len(headers),
                *("| " + " | ".join(map(cell, r)) + " |" for r in rows), ""]

    run = data["run"]
    where = f"{run_kernel(run)} on {run.get('host_cpu_model') or run.get('cpu_model')}"
    out = [f"Seed {data['seed']}, measured with {where}: {verdict_counts(data['claims'])}.", ""]
    out += table(*claim_rows(data))
    headers, rows = value_rows(data)
    rows = [r for r in rows if r[3] and not r[3].startswith(("not measured", "2 points"))]
    if rows:
        out += table(headers, rows)
    headers, rows = ratio_rows(data)
    if rows:
        out += table(headers, rows)
    return "\n".join(out)


def print_summary(run_dir: str, data: Optional[Mapping[str, Any]] = None) -> None:
    """The claims, values and ratios tables on the terminal."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    data = data or evaluate(run_dir)
    console = Console()
    for title, (headers, rows) in (("Claims", claim_rows(data)), ("Published numbers", value_rows(data)),
                                   ("Ratios that transfer", ratio_rows(data))):
        if not rows:
            continue
        table = Table(title=f"Seed {data['seed']}: {title}", box=box.SIMPLE_HEAD, title_justify="left")
        for h in headers:
            table.add_column(h, overflow="fold")
        for row in rows:
            style = "green" if row[-1] == HOLDS else "red" if row[-1] == FAILS else None
            table.add_row(*row, style=style)
        console.print(table)


def _html_table(table_id: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    esc = html.escape
    out = [f'<table class="points wrap" id="{table_id}"><thead><tr>']
    out += [f"<th>{esc(h)}</th>" for h in headers]
    out.append("</tr></thead><tbody>")
    for row in rows:
        cls = {HOLDS: "holds", FAILS: "fails", UNMEASURED: "unmeasured"}.get(row[-1], "")
        out.append(f'<tr class="{cls}">' + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def render_html(run_dir: str, data: Optional[Mapping[str, Any]] = None,
                compare: Sequence[tuple[str, Mapping]] = ()) -> str:
    """The reproduction's page: set-ups, claims, published numbers, ratios, penalties, figures per part."""
    from analysis import report as sweep_report

    esc = html.escape
    data = data or evaluate(run_dir)
    run = data["run"]
    where = run_kernel(run)
    head = [f"<h1>Seed {esc(data['seed'])} reproduction</h1>",
            f'<p class="subtitle">{esc(data.get("title") or "")}</p>',
            '<dl class="meta">',
            f"<dt>the seed</dt><dd>{esc(data.get('seed_setup') or '')}</dd>",
            f"<dt>this run</dt><dd>{esc(where)} on {esc(str(run.get('host_cpu_model') or run.get('cpu_model')))} "
            f"({esc(str(run.get('cpu_count')))} CPU{'s' if run.get('cpu_count') != 1 else ''} for the run); "
            f"{esc(str(run.get('started')))} .. {esc(str(run.get('finished')))}</dd>",
            f"<dt>command</dt><dd><code>{esc(' '.join(run.get('command_line') or []))}</code></dd>",
            "<dt>parts</dt><dd>" + "; ".join(f"{esc(p['name'])} ({p['points']} records): {esc(p['title'])}"
                                              for p in data["parts"]) + "</dd>",
            "</dl>"]
    body = []
    body.append(f"<h2>Claims</h2><p>{esc(verdict_counts(data['claims']))}. Each verdict compares values measured in this run directory with the "
                "range written next to the claim in the reference file; the range is how the seed's words were "
                "read.</p>")
    body.append(_html_table("claims", *claim_rows(data)))
    if len(compare) > 1:
        body.append("<h3>The same claims in the runs compared</h3>")
        body.append(_html_table("claims-compared", *claims_compared([d for d, _ in compare], [x for _, x in compare])))
    failing = [c for c in data["claims"] if c["differs"]]
    if failing:
        body.append("<h3>What differs, where a claim does not hold</h3><p>As far as this run's data shows; "
                    "the seed's set-up is at the top of the page.</p><ul>")
        body += [f"<li><b>{esc(c['id'])}</b>: {esc(c['differs'])}</li>" for c in failing]
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
    if data["transactions"]:
        body.append("<h2>Request/response transactions</h2>")
        body.append(_html_table("transactions", ["profile", "mean per transaction", "IPsec/plain"],
                                [[t["point"]["profile"], _pm(t["mean_ms"], t["ci95"]) + " ms", _num(t["ratio"])]
                                 for t in data["transactions"]]))
    if data["penalties"]:
        body.append("<h2>Where the IPsec penalty comes from</h2><p>Penalty = 1 &minus; IPsec/plain goodput. "
                    "Wire: what the bytes IPsec adds explain on a saturated link (the overhead model); other: "
                    "the rest (encryption and packet processing time, an emulator out of CPU). "
                    "&ldquo;plain link-bound&rdquo; says whether the plain point reached 90&nbsp;% of its "
                    "expected goodput, i.e. whether the link was the bottleneck.</p>")
        body.append(_html_table("penalties", ["part", "point", "IPsec/plain", "penalty", "wire", "other",
                                              "plain link-bound", ""],
                                [[p["part"], _point_text(p["point"]), _num(p["ratio"]), _pct(p["penalty"]),
                                  _pct(p["wire"]), _pct(p["other"]),
                                  {True: "yes", False: "no", None: "–"}[p["plain_link_bound"]],
                                  "CPU-bound" if p["limited"] else ""] for p in data["penalties"]]))
    figures = _part_figures(run_dir)
    if figures:
        body.append("<h2>Figures</h2>")
        for i, (name, fig) in enumerate(figures):
            body.append(f'<section class="figure" id="{esc(name)}">')
            body.append(sweep_report._figure_div(fig, "fig-" + name, first=i == 0))
            body.append("</section>")
    css = sweep_report._CSS + ("table.points.wrap td{white-space:normal;vertical-align:top}"
                               "table.points.wrap td:last-child{white-space:nowrap}"
                               "tr.holds td:last-child{color:#006d2c;font-weight:600}"
                               "tr.fails td:last-child{color:#b30000;font-weight:600}")
    return "\n".join(["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
                      f"<title>Seed {esc(data['seed'])} reproduction</title>",
                      '<meta name="viewport" content="width=device-width, initial-scale=1">',
                      f"<style>{css}</style>", "</head><body><main>", *head, *body,
                      "<footer>Generated by the IPsec Testbed <code>analysis</code> package from the run directory "
                      "and <code>analysis/reference/</code>.</footer>", "</main></body></html>"])


def _pct(x: Optional[float]) -> str:
    return "–" if x is None else f"{100 * x + 0.0:.1f} %".replace("-0.0 %", "0.0 %")


def _point_text(p: Mapping[str, Any]) -> str:
    bits = [str(p.get("profile")), f"IPv{p.get('ip_version')}", str(p.get("transport")),
            f"{p.get('size_mode')} {p.get('size_bytes')} B", f"{p.get('rate_mbit'):g} Mbit/s"]
    if p.get("clients", 1) != 1:
        bits.append(f"{p['clients']} clients")
    return " ".join(bits)


def _part_figures(run_dir: str) -> list:
    """Goodput and normalized-goodput figures of the parts that vary size or rate."""
    from analysis import report as sweep_report

    _, parts = load_run(run_dir)
    figures = []
    for part in parts:
        spec = part["spec"]
        if part.get("transactions") or not part["records"]:
            continue
        if len(spec.get("sizes", ())) < 2 and len(spec.get("rates_mbit", ())) < 2:
            continue
        aggs = aggregate(part["records"])
        colors = sweep_report.profile_colors([a.profile for a in aggs])
        figures.append((f"{part['name']}-goodput", sweep_report.fig_throughput(aggs, colors)))
        ratios = normalize(aggs)
        if ratios:
            figures.append((f"{part['name']}-normalized", sweep_report.fig_normalized(ratios, colors)))
    return figures


def write_report(run_dir: str, out: Optional[str] = None, compare: Sequence[tuple[str, Mapping]] = (),
                 data: Optional[Mapping[str, Any]] = None) -> str:
    """Write ``comparison.json`` and ``report.html`` (or ``out``) into ``run_dir``; returns the report's path.

    ``compare``: (run directory, :func:`evaluate` data) of several runs of the same seed, this
    one first, whose claims the page sets side by side; ``data``: this run's :func:`evaluate`, if made already.
    """
    data = data or evaluate(run_dir)
    _atomic_write(os.path.join(run_dir, "comparison.json"), json.dumps(data, indent=2, sort_keys=True, default=str))
    path = out or os.path.join(run_dir, "report.html")
    _atomic_write(path, render_html(run_dir, data, compare))
    return path


def claims_compared(run_dirs: Sequence[str], datas: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """One row per claim of the first run: its verdict and measured range in every run."""
    headers = ["claim"] + [f"{os.path.basename(os.path.normpath(d))} ({x['run'].get('backend')} "
                           f"{x['run'].get('kernel_release')})" for d, x in zip(run_dirs, datas)]
    rows = []
    for claim in datas[0]["claims"]:
        row = [claim["id"]]
        for data in datas:
            c = next((c for c in data["claims"] if c["id"] == claim["id"]), None)
            if c is None or c["min"] is None:
                row.append(UNMEASURED)
            else:
                span = _num(c["min"]) if c["min"] == c["max"] else f"{_num(c['min'])} .. {_num(c['max'])}"
                row.append(f"{c['verdict']} ({span})")
        rows.append(row)
    return headers, rows


def print_claims_compared(run_dirs: Sequence[str], datas: Sequence[Mapping[str, Any]]) -> None:
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


def _atomic_write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)

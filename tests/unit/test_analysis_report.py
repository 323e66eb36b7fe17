"""testbed.rundir, the analysis modules (run, figures, tables, page) and cli.report on a synthetic run directory.

The figures are checked through the plotly Figure objects (which traces, where, with which error
bars and markers); tests/host/test_report_chromium.py checks that a browser really draws them.
"""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from plotly.offline import get_plotlyjs
from rich.console import Console

from analysis.figures import (
    EMULATION_LIMITED_LABEL,
    PLAIN_COLOR,
    THEORETICAL_LABEL,
    fig_cpu,
    fig_normalized,
    fig_throughput,
    profile_colors,
)
from analysis.page import render_html
from analysis.run import RunData
from analysis.stats import aggregate, normalize
from analysis.tables import compare_table, terminal_table
from cli import report as cli
from testbed.record import Meta, as_records
from testbed.rundir import ResultsError, load_meta, load_results

RATES = (10.0, 34.0)
SIZES = (250, 750, 1400)
PROFILES = ("none", "aes-gcm-256", "aes-cbc-128-sha1")
# goodput per repetition: plain 9, 10, 11 (x rate/10), IPsec 8.1, 9.0, 9.9 (x rate/10) -> ratio 0.9
# whose delta-method CI is 0.204026 (see test_analysis_stats.py); CBC 7.2, 8.0, 8.8 -> 0.8
GOODPUT = {"none": (9.0, 10.0, 11.0), "aes-gcm-256": (8.1, 9.0, 9.9), "aes-cbc-128-sha1": (7.2, 8.0, 8.8)}
CPU_S_PER_GB = {"none": (2.0, 2.0, 2.0), "aes-gcm-256": (5.0, 6.0, 7.0), "aes-cbc-128-sha1": (7.0, 8.0, 9.0)}
META = {"kernel_release": "6.1.176", "backend": "uml", "cpu_model": "Test CPU <X> @ 2.2GHz", "cpu_count": 2,
        "versions": {"iperf3": "3.12"}, "command_line": "packet_size_sweep.py --sizes 250,750,1400 --x '<b>'",
        "started": "2026-11-22T06:00:00Z", "finished": "2026-11-22T06:40:00Z"}


def synthetic_records(limited=((34.0, "aes-cbc-128-sha1", 250),), backend="uml", kernel="6.1.176", scale=1.0):
    out = []
    for rate in RATES:
        for profile in PROFILES:
            for size in SIZES:
                for rep in range(3):
                    out.append({
                        "topology": "vpn_gateway", "profile": profile, "mode": "tunnel", "ip_version": 4,
                        "transport": "tcp", "rate_mbit": rate, "size_bytes": size, "size_mode": "mss",
                        "clients": 1, "repetition": rep, "duration_s": 2.0,
                        "goodput_mbps": GOODPUT[profile][rep] * rate / 10 * scale,
                        "theoretical_goodput_mbps": rate * 0.95 if profile == "none" else rate * 0.9,
                        "loss_pct": None, "retransmits": rep, "cpu_busy_pct": 40.0, "cpu_system_pct": 30.0,
                        "cpu_softirq_pct": 8.0, "cpu_s_per_gb": CPU_S_PER_GB[profile][rep],
                        "emulation_limited": (rate, profile, size) in limited, "backend": backend,
                        "kernel_release": kernel, "time": "2026-11-22T06:40:00Z"})
    return out


def write_run(path: Path, records, meta=META, tail="") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    if meta is not None:
        (path / "meta.json").write_text(json.dumps(meta))
    return path


@pytest.fixture
def aggs():
    return aggregate(synthetic_records())


def traces(fig, kind):
    return [t for t in fig.data if isinstance(t.meta, dict) and t.meta.get("kind") == kind]


# --- results.jsonl -----------------------------------------------------------------------------

def test_trailing_partial_line_is_ignored_with_a_warning(tmp_path, caplog):
    records = synthetic_records()[:4]
    run = write_run(tmp_path / "run", records, tail='{"topology": "vpn_gateway", "profile": "aes-gc')
    with caplog.at_level(logging.WARNING, logger="testbed.rundir"):
        loaded = load_results(run)
    assert loaded == as_records(records)
    assert "results.jsonl:5: skipped a partial record" in caplog.text and "last line" in caplog.text


def test_complete_file_reads_without_warnings(tmp_path, caplog):
    run = write_run(tmp_path / "run", synthetic_records()[:3])
    with caplog.at_level(logging.WARNING):
        assert len(load_results(run)) == 3
    assert caplog.text == ""


def test_partial_line_followed_by_a_resumed_run(tmp_path, caplog):
    a, b, c = synthetic_records()[:3]
    text = (json.dumps(a) + "\n" + json.dumps(b)[:40] + "\n"  # killed; the resumed run started a new line
            + json.dumps(b)[:33] + json.dumps(c) + "\n")  # killed again; resumed without a newline
    (tmp_path / "results.jsonl").write_text(text)
    with caplog.at_level(logging.WARNING, logger="testbed.rundir"):
        loaded = load_results(tmp_path)
    assert loaded == as_records([a, c])
    assert ":2: skipped a partial record" in caplog.text
    assert ":3: skipped a partial record" in caplog.text and "kept the complete record" in caplog.text


@pytest.mark.parametrize("line,message", [
    ("[1, 2]", "expected one JSON object per line"),
    ("garbage", "not a JSON record"),
    ('{"profile": "none", "size_bytes": 100}', "record lacks goodput_mbps"),
])
def test_unreadable_lines_are_errors_with_their_line_number(tmp_path, line, message):
    (tmp_path / "results.jsonl").write_text(json.dumps(synthetic_records()[0]) + "\n" + line + "\n")
    with pytest.raises(ResultsError, match=f"results.jsonl:2: {message}"):
        load_results(tmp_path)


def test_missing_files(tmp_path, caplog):
    with pytest.raises(ResultsError, match="no such file"):
        load_results(tmp_path)
    with caplog.at_level(logging.WARNING, logger="testbed.rundir"):
        assert load_meta(tmp_path) == Meta() and not load_meta(tmp_path)
    assert "meta.json: missing" in caplog.text
    (tmp_path / "meta.json").write_text('{"backend": "u')
    assert load_meta(tmp_path) == Meta()
    (tmp_path / "meta.json").write_text(json.dumps(META))
    assert load_meta(tmp_path).to_json() == META and load_meta(tmp_path).backend == "uml"


# --- figures -----------------------------------------------------------------------------------

def test_throughput_has_a_trace_per_profile_and_rate_with_ci_error_bars(aggs):
    fig = fig_throughput(aggs)
    goodput = traces(fig, "goodput")
    assert sorted((t.meta["rate_mbit"], t.meta["profile"]) for t in goodput) == sorted(
        (r, p) for r in RATES for p in PROFILES)
    for t in goodput:
        assert list(t.x) == list(SIZES)
        scale = t.meta["rate_mbit"] / 10
        assert list(t.y) == pytest.approx([GOODPUT[t.meta["profile"]][1] * scale] * 3)
        assert t.error_y.type == "data"
        expected = {"none": 2.484138, "aes-gcm-256": 2.235724, "aes-cbc-128-sha1": 1.987310}[t.meta["profile"]]
        # t(2) * s / sqrt(3): s = 1, 0.9, 0.8 at 10 Mbit/s (x 3.4 at 34 Mbit/s)
        assert list(t.error_y.array) == pytest.approx([expected * scale] * 3, abs=1e-5)
    # one panel per rate: traces of the same rate share axes, the two rates do not
    axes = {(t.meta["rate_mbit"], t.xaxis) for t in goodput}
    assert len(axes) == 2 and len({a for _, a in axes}) == 2
    assert [a.text for a in fig.layout.annotations[:2]] == ["10 Mbit/s link", "34 Mbit/s link"]


def test_throughput_axes_are_linear_and_carry_units(aggs):
    fig = fig_throughput(aggs)
    assert fig.layout.xaxis.title.text == "TCP MSS (bytes)"
    assert fig.layout.yaxis.title.text == "goodput (Mbit/s)"
    for axis in (fig.layout.xaxis, fig.layout.yaxis, fig.layout.xaxis2, fig.layout.yaxis2):
        assert axis.type in (None, "-", "linear")
        assert axis.rangemode == "tozero"


def test_legend_names_each_profile_once(aggs):
    fig = fig_throughput(aggs)
    shown = [t.name for t in fig.data if t.showlegend is not False]
    assert shown == ["plain (no IPsec)", "aes-cbc-128-sha1", "aes-gcm-256", THEORETICAL_LABEL,
                     EMULATION_LIMITED_LABEL]


def test_theoretical_goodput_is_a_dashed_line_in_the_profile_colour(aggs):
    fig = fig_throughput(aggs)
    colors = {t.meta["profile"]: t.line.color for t in traces(fig, "goodput")}
    theoretical = traces(fig, "theoretical")
    assert len(theoretical) == len(RATES) * len(PROFILES)
    for t in theoretical:
        assert t.line.dash == "dash" and t.mode == "lines"
        assert t.line.color == colors[t.meta["profile"]]
        expected = 0.95 if t.meta["profile"] == "none" else 0.9
        assert list(t.y) == pytest.approx([t.meta["rate_mbit"] * expected] * 3)
    # no theoretical values in the records: no dashed lines, no legend entry
    plain = [dict(r, theoretical_goodput_mbps=None) for r in synthetic_records()]
    fig = fig_throughput(aggregate(plain))
    assert traces(fig, "theoretical") == [] and THEORETICAL_LABEL not in [t.name for t in fig.data]


def test_emulation_limited_points_are_hollow(aggs):
    fig = fig_throughput(aggs)
    for t in traces(fig, "goodput"):
        hollow = [s == "circle-open" for s in t.marker.symbol]
        expected = [t.meta["rate_mbit"] == 34.0 and t.meta["profile"] == "aes-cbc-128-sha1" and size == 250
                    for size in SIZES]
        assert hollow == expected, (t.meta, list(t.marker.symbol))
    legend = [t for t in fig.data if t.name == EMULATION_LIMITED_LABEL]
    assert len(legend) == 1 and legend[0].marker.symbol == "circle-open" and legend[0].showlegend
    # nothing limited: no legend entry
    fig = fig_throughput(aggregate(synthetic_records(limited=())))
    assert EMULATION_LIMITED_LABEL not in [t.name for t in fig.data]


def test_each_profile_keeps_its_colour_in_every_figure(aggs):
    ratios = normalize(aggs)
    figures = [fig_throughput(aggs), fig_normalized(ratios), fig_cpu(aggs)]
    colors: dict[str, set] = {}
    for fig in figures:
        for t in fig.data:
            if isinstance(t.meta, dict) and "profile" in t.meta:
                colors.setdefault(t.meta["profile"], set()).add(t.line.color)
    assert all(len(c) == 1 for c in colors.values()), colors
    assert colors["none"] == {PLAIN_COLOR}
    assert len({next(iter(c)) for c in colors.values()}) == len(PROFILES)


def test_normalized_figure_has_ratios_with_ci_and_a_line_at_one(aggs):
    fig = fig_normalized(normalize(aggs))
    ratio = traces(fig, "ratio")
    assert sorted((t.meta["rate_mbit"], t.meta["profile"]) for t in ratio) == sorted(
        (r, p) for r in RATES for p in PROFILES[1:])
    for t in ratio:
        value = {"aes-gcm-256": 0.9, "aes-cbc-128-sha1": 0.8}[t.meta["profile"]]
        assert list(t.y) == pytest.approx([value] * 3)
    gcm = [t for t in ratio if t.meta["profile"] == "aes-gcm-256"]
    assert all(list(t.error_y.array) == pytest.approx([0.204026] * 3, abs=2e-6) for t in gcm)
    lines_at_one = [s for s in fig.layout.shapes if s.type == "line" and s.y0 == 1.0 and s.y1 == 1.0]
    assert len(lines_at_one) == len(RATES)
    assert fig.layout.yaxis.title.text == "IPsec / plain goodput"
    assert fig.layout.yaxis.range[0] == 0 and fig.layout.yaxis.range[1] > 1.1


def test_cpu_figure(aggs):
    fig = fig_cpu(aggs)
    cpu = traces(fig, "cpu_s_per_gb")
    assert len(cpu) == len(RATES) * len(PROFILES)
    for t in cpu:
        assert list(t.y) == pytest.approx([CPU_S_PER_GB[t.meta["profile"]][1]] * 3)
    assert fig.layout.yaxis.title.text == "CPU time per GB (s/GB)"
    none_measured = aggregate([dict(r, cpu_s_per_gb=None) for r in synthetic_records()])
    assert len(fig_cpu(none_measured).data) == 0


def test_unshaped_points_get_their_own_panel():
    records = [dict(r, rate_mbit=None) for r in synthetic_records() if r["rate_mbit"] == 10.0]
    fig = fig_throughput(aggregate(records))
    assert next(a.text for a in fig.layout.annotations) == "unshaped link"


# --- tables and HTML ---------------------------------------------------------------------------

def _text(table) -> str:
    console = Console(record=True, width=200)
    console.print(table)
    return console.export_text()


def classed_records():
    """The synthetic run with monitor classes: link everywhere, except at 34 Mbit/s CBC 250 B
    (CPU in every repetition), CBC 750 B (other in one of three) and GCM 1400 B (its last
    repetition an anomaly whose goodput, 1000 Mbit/s, must stay out of the mean)."""
    records = synthetic_records(limited=())
    for r in records:
        r.pop("emulation_limited")
        r["bound"] = "link"
        if r["rate_mbit"] != 34.0:
            continue
        if r["profile"] == "aes-cbc-128-sha1" and r["size_bytes"] == 250:
            r["bound"] = "cpu"
        elif r["profile"] == "aes-cbc-128-sha1" and r["size_bytes"] == 750 and r["repetition"] == 0:
            r["bound"] = "other"
        elif r["profile"] == "aes-gcm-256" and r["size_bytes"] == 1400 and r["repetition"] == 2:
            r["bound"], r["goodput_mbps"] = "anomaly", 1000.0
    return records


def test_bound_classes_shape_markers_and_fill_the_table():
    aggs = aggregate(classed_records())
    at = {(a.rate_mbit, a.profile, a.size_bytes): a for a in aggs}
    gcm = at[34.0, "aes-gcm-256", 1400]
    assert gcm.goodput.n == 2 and gcm.n_anomaly == 1 and gcm.goodput.mean == pytest.approx(8.55 * 3.4)
    assert at[34.0, "aes-cbc-128-sha1", 750].bound == "link"  # two of three
    assert at[34.0, "aes-cbc-128-sha1", 250].bound == "cpu"
    fig = fig_throughput(aggs)
    for t in traces(fig, "goodput"):
        want = ["circle-open" if (t.meta["rate_mbit"], t.meta["profile"], size) == (34.0, "aes-cbc-128-sha1", 250)
                else "circle" for size in SIZES]
        assert list(t.marker.symbol) == want, t.meta
    assert EMULATION_LIMITED_LABEL in [t.name for t in fig.data]
    # a ratio takes the more cautious class of its two sides
    ratios = {(r.rate_mbit, r.profile, r.size_bytes): r for r in normalize(aggs)}
    assert ratios[34.0, "aes-cbc-128-sha1", 250].bound == "cpu"
    assert ratios[34.0, "aes-gcm-256", 1400].bound == "link"
    text = _text(terminal_table(aggs, normalize(aggs)))
    rows = {tuple(line.split()[:3]): line for line in text.splitlines() if len(line.split()) > 3}
    assert rows["aes-cbc-128-sha1", "34", "250"].rstrip().endswith("CPU")
    assert rows["aes-cbc-128-sha1", "34", "750"].rstrip().endswith("other 1/3, link 2/3")
    assert rows["aes-gcm-256", "34", "1400"].rstrip().endswith("link, 1 anomaly left out")
    assert "bound: CPU = the emulator's CPU" in " ".join(text.split())


def test_other_bound_points_are_hollow_diamonds(tmp_path):
    records = classed_records()
    for r in records:
        if r["rate_mbit"] == 10.0 and r["profile"] == "none" and r["size_bytes"] == 750:
            r["bound"] = "other"
    aggs = aggregate(records)
    fig = fig_throughput(aggs)
    plain10 = next(t for t in traces(fig, "goodput") if t.meta["rate_mbit"] == 10.0 and t.meta["profile"] == "none")
    assert list(plain10.marker.symbol) == ["circle", "diamond-open", "circle"]
    names = [t.name for t in fig.data if isinstance(t.meta, dict) and t.meta.get("kind") == "legend"]
    assert "other-bound (neither link nor CPU)" in names
    # the IPsec ratios at that point inherit the plain side's class
    norm = fig_normalized(normalize(aggs))
    for t in traces(norm, "ratio"):
        if t.meta["rate_mbit"] == 10.0:
            assert list(t.marker.symbol) == ["circle", "diamond-open", "circle"], t.meta
    page = render_html(write_run(tmp_path / "run", records))
    assert "1 of 18 points were bound by neither the link nor the CPU" in page
    assert "1 repetition was an anomaly: the monitor" in page


def test_terminal_table(aggs):
    table = terminal_table(aggs, normalize(aggs))
    headers = [c.header for c in table.columns]
    assert headers == ["profile", "rate Mbit/s", "size B", "mean Mbit/s", "±95% CI", "n", "IPsec/plain",
                       "CPU s/GB", "bound"]
    assert table.row_count == len(aggs)
    text = _text(table)
    # 10 Mbit/s, 250 B: plain 10.0 +- 2.48, then GCM 9.00 +- 2.24, ratio 0.900 +- 0.204
    lines = [line.split() for line in text.splitlines() if line.split()[:3] in (["plain", "10", "250"],
                                                                        ["aes-gcm-256", "10", "250"])]
    assert lines[0][3:6] == ["10.0", "2.5", "3"]
    assert lines[1][3:10] == ["9.00", "2.24", "3", "0.900", "±", "0.204", "6.00"]
    assert sum("CPU-bound" in line for line in text.splitlines()) == 1


def test_a_sweep_with_arms_and_the_plain_baseline_has_a_row_per_arm(tmp_path):
    # the plain point has no arm where the IPsec points have a and b: they sort together all the same
    records = [r for r in synthetic_records(limited=()) if r["rate_mbit"] == 10.0 and r["size_bytes"] == 250]
    armed = [{**r, "arm": arm} if r["profile"] != "none" else r for r in records for arm in "ab"
             if r["profile"] != "none" or arm == "a"]
    ordered = aggregate(armed)
    text = _text(terminal_table(ordered, normalize(ordered)))
    assert [line.split()[:3] for line in text.splitlines() if line.split()[:1] == ["aes-gcm-256"]] == [
        ["aes-gcm-256", "arm", "a"], ["aes-gcm-256", "arm", "b"]]
    assert cli.main([str(write_run(tmp_path / "run", armed)), "--no-html"]) == 0


def test_render_html_is_self_contained_with_header_figures_and_table(tmp_path):
    run = write_run(tmp_path / "run", synthetic_records())
    page = render_html(run)
    bundle_head = get_plotlyjs()[:200]
    assert page.count(bundle_head) == 1  # plotly.js inline, once
    # no script loaded from anywhere (the bundle's own text mentions cdn.plot.ly for map data it never fetches here)
    assert re.findall(r"<script[^>]*\bsrc=", page) == []
    assert '<link rel="stylesheet"' not in page
    for div in ("fig-throughput", "fig-normalized", "fig-cpu"):
        assert f'id="{div}"' in page
    # header: topology, backend, kernel, CPU, the command line (escaped)
    assert "<dt>topology</dt><dd>vpn_gateway</dd>" in page
    assert "<dt>backend</dt><dd>uml</dd>" in page and "<dt>kernel</dt><dd>6.1.176</dd>" in page
    assert "Test CPU &lt;X&gt; @ 2.2GHz × 2 CPUs" in page
    assert "--x &#x27;&lt;b&gt;&#x27;" in page and "'<b>'" not in page
    assert "How to read this report" in page
    # the table: a row per aggregated point, with its mean, CI, n and ratio
    table = page[page.index('<table class="points" id="points">'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr class=") == len(RATES) * len(PROFILES) * len(SIZES)
    assert '<td class="num">9.00</td><td class="num">2.24</td>' in table
    assert "0.900 ± 0.204" in table and "CPU-bound" in table
    assert "1 of 18 points were CPU-bound" in page


def test_render_html_from_records_and_meta():
    page = render_html(synthetic_records(), {"backend": "host", "kernel_release": "6.18.44"})
    assert "<dt>backend</dt><dd>host</dd>" in page and "<dt>kernel</dt><dd>6.18.44</dd>" in page
    page = render_html(synthetic_records())  # no meta: backend and kernel from the records
    assert "<dt>backend</dt><dd>uml</dd>" in page


def test_html_warns_when_kernels_are_mixed():
    records = synthetic_records()
    records[0] = dict(records[0], kernel_release="6.18.44")
    assert "mix several values of kernel_release (6.1.176, 6.18.44)" in render_html(records, META)


# --- the command line --------------------------------------------------------------------------

def test_cli_writes_the_report_and_prints_the_table(tmp_path, capsys, caplog):
    run = write_run(tmp_path / "run", synthetic_records(), tail='{"partial')
    with caplog.at_level(logging.WARNING, logger="testbed.rundir"):
        assert cli.main(["report", str(run)]) == 0
    out, err = capsys.readouterr()
    assert (run / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert "aes-gcm-256" in out and "0.900 ± 0.204" in out
    assert "skipped a partial record" in caplog.text and "report.html" in err


def test_cli_compares_runs_side_by_side(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # room for the run labels in the headers
    one = write_run(tmp_path / "uml-run", synthetic_records())
    two = write_run(tmp_path / "host-run", synthetic_records(backend="host", kernel="6.18.44", scale=2.0),
                    meta=dict(META, backend="host", kernel_release="6.18.44"))
    out_file = tmp_path / "cmp.html"
    assert cli.main([str(one), str(two), "--out", str(out_file)]) == 0  # "report" may be left out
    out = capsys.readouterr().out
    assert "uml · kernel 6.1.176" in out and "host · kernel 6.18.44" in out
    # the same point side by side: plain 10 Mbit/s 250 B is 10.0 in one run and 20.0 in the other
    row = next(line for line in out.splitlines() if line.split()[:3] == ["plain", "10", "250"] and line.count("±") == 2)
    assert "10.0 ± 2.5" in row and "20.0 ± 5.0" in row
    page = out_file.read_text()
    assert 'id="fig-compare"' in page and 'id="comparison"' in page
    assert not (one / "report.html").exists()


def test_compare_labels_identical_runs_by_directory(tmp_path):
    runs = [RunData.from_dir(write_run(tmp_path / name, synthetic_records())) for name in ("a", "b")]
    labels = cli._labels(runs)
    assert labels == ["uml · kernel 6.1.176 (a)", "uml · kernel 6.1.176 (b)"]
    assert compare_table(runs).row_count == len(RATES) * len(PROFILES) * len(SIZES)


def test_cli_errors(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path / "nope")]) == 1
    assert "not a directory" in capsys.readouterr().err
    assert cli.main(["report", str(tmp_path)]) == 1
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "results.jsonl").write_text("")
    assert cli.main(["report", str(tmp_path)]) == 1
    assert "no measured points" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["report"])
    assert e.value.code == 2


def test_each_scenario_starts_a_row_so_rates_line_up():
    rates = (1.0, 2.0, 4.0, 10.0)  # four rates: a row of three, then one
    records = [dict(r, rate_mbit=rate, ip_version=ip) for r in synthetic_records(limited=())
               if r["rate_mbit"] == 10.0 for rate in rates for ip in (4, 6)]
    fig = fig_throughput(aggregate(records))
    titles = {(a.text, round(a.x, 2)) for a in fig.layout.annotations}
    # IPv4 and IPv6 panels of the same rate share a column (the same x position)
    for rate in ("1 Mbit/s", "10 Mbit/s"):
        xs = {x for text, x in titles if text.endswith(f"· {rate} link")}
        assert len(xs) == 1, (rate, titles)
    assert {t for t, _ in titles} == {f"IPv{ip} · {r:g} Mbit/s link" for ip in (4, 6) for r in rates}
    # 2 scenarios x 2 rows (3 + 1 panels): 8 panels drawn, no empty axes for the 4 unused cells
    assert len([k for k in fig.layout if k.startswith("xaxis")]) == 8


def test_page_colours_hold_when_a_profile_has_no_baseline():
    # "aes-cbc-128-sha1" (first in the palette) is measured only where no plain point exists
    records = [r for r in synthetic_records() if not (r["profile"] == "aes-cbc-128-sha1" and r["rate_mbit"] == 10.0)]
    records = [dict(r, rate_mbit=99.0) if r["profile"] == "aes-cbc-128-sha1" else r for r in records]
    aggs = aggregate(records)
    page_colors = {t.meta["profile"]: t.line.color for t in traces(fig_throughput(aggs), "goodput")}
    ratio_fig = fig_normalized(normalize(aggs), profile_colors(a.profile for a in aggs))
    assert {t.meta["profile"] for t in traces(ratio_fig, "ratio")} == {"aes-gcm-256"}
    assert {t.line.color for t in traces(ratio_fig, "ratio")} == {page_colors["aes-gcm-256"]}
    assert page_colors["aes-gcm-256"] != page_colors["aes-cbc-128-sha1"]


def test_points_table_splits_each_ipsec_penalty_into_wire_and_other():
    from analysis.page import _points_table
    from analysis.stats import aggregate, normalize
    from ipsec.overhead import expected_goodput_mbps

    point = {"topology": "vpn_gateway", "mode": "tunnel", "ip_version": 4, "transport": "tcp", "rate_mbit": 10.0,
             "size_bytes": 1000, "size_mode": "mss", "clients": 1}
    plain = expected_goodput_mbps(10, 1000)
    ipsec = expected_goodput_mbps(10, 1000, "aes-gcm-256", "tunnel")
    records = [{**point, "profile": p, "repetition": r, "goodput_mbps": g}
               for r in range(2) for p, g in (("none", plain), ("aes-gcm-256", ipsec / 2))]
    aggs = aggregate(records)
    page = _points_table(aggs, normalize(aggs), profile_colors(["none", "aes-gcm-256"]))
    wire = 1 - ipsec / plain
    total = 1 - ipsec / 2 / plain
    assert f"{100 * total:.1f} = {100 * wire:.1f} + {100 * (total - wire):.1f} %" in page


def _saturated_records():
    """The synthetic run with plain and AES-GCM-256 at 34 Mbit/s, 1400 B, 96 % busy; and GCM at
    10 Mbit/s, 250 B, with one of several CPUs 97 % busy (the machine 40 %)."""
    out = []
    for r in synthetic_records(limited=()):
        if r["rate_mbit"] == 34.0 and r["size_bytes"] == 1400 and r["profile"] in ("none", "aes-gcm-256"):
            r = dict(r, cpu_busy_pct=96.0)
        if r["rate_mbit"] == 10.0 and r["size_bytes"] == 250 and r["profile"] == "aes-gcm-256":
            r = dict(r, cpu_busiest_pct=97.0)
        out.append(r)
    return out


def test_cpu_saturated_follows_the_monitors_limits():
    from analysis.stats import BUSIEST_CPU_PCT, CPU_SATURATED_PCT, KERNEL_BUSY_PCT
    from experiments.engine import verdict

    assert verdict.CPU_SATURATED * 100 == CPU_SATURATED_PCT and verdict.BUSIEST_CPU_PCT == BUSIEST_CPU_PCT
    assert verdict.KERNEL_BUSY_PCT == KERNEL_BUSY_PCT
    by_point = {(a.rate_mbit, a.size_bytes, a.profile): a for a in aggregate(_saturated_records())}
    assert by_point[(34.0, 1400, "none")].cpu_saturated and by_point[(34.0, 1400, "aes-gcm-256")].cpu_saturated
    assert by_point[(10.0, 250, "aes-gcm-256")].cpu_saturated  # one CPU of several
    assert not by_point[(34.0, 1400, "aes-cbc-128-sha1")].cpu_saturated  # 40 % busy
    assert not by_point[(10.0, 250, "none")].cpu_saturated
    # on the mean of the repetitions: one busy repetition of three does not make the point saturated
    records = [dict(r, cpu_busy_pct=99.0 if r["repetition"] == 0 else 40.0) for r in synthetic_records()]
    assert not any(a.cpu_saturated for a in aggregate(records))
    # the kernel's own account finding no idle moment counts too, as in the monitor's ``cpu`` class
    records = [dict(r, cpu_kernel_busy_pct=KERNEL_BUSY_PCT if r["profile"] == "none" else 98.0)
               for r in synthetic_records(limited=())]
    assert {a.profile for a in aggregate(records) if a.cpu_saturated} == {"none"}
    # runs without CPU figures are not marked
    assert not any(a.cpu_saturated for a in aggregate([{k: v for k, v in r.items() if not k.startswith("cpu")}
                                                       for r in _saturated_records()]))


def test_saturated_cpu_costs_are_marked_and_explained_in_the_table():
    aggs = aggregate(_saturated_records())
    text = _text(terminal_table(aggs, normalize(aggs)))
    marked = [line.split()[:3] for line in text.splitlines() if " * " in line]
    assert sorted(marked) == sorted([["plain", "34", "1400"], ["aes-gcm-256", "34", "1400"],
                                     ["aes-gcm-256", "10", "250"]])
    assert "CPU s/GB *: the CPU was at least 90 % busy" in " ".join(text.split())
    plain = _text(terminal_table(aggregate(synthetic_records()), []))
    assert " * " not in plain and "CPU s/GB *" not in plain


def test_saturated_cpu_costs_are_marked_in_the_page():
    page = render_html(_saturated_records(), META)
    table = page[page.index('<table class="points" id="points">'):]
    table = table[:table.index("</table>")]
    rows = [row for row in table.split("<tr")[2:]]
    marked = [row for row in rows if "±" in row and " *</td>" in row]
    # the three saturated points' CPU per GB, and the CPU ratio of every IPsec point with a saturated
    # side: GCM at 34/1400 and 10/250, and CBC at 34/1400, whose plain baseline was saturated
    assert len(marked) == 4
    assert sum(row.count(" *</td>") for row in marked) == 6
    cbc = next(row for row in marked if "aes-cbc-128-sha1" in row)
    assert cbc.count(" *</td>") == 1 and '<td class="num">8.00 ± 2.48</td>' in cbc
    assert "CPU s/GB or CPU ratio marked *: the CPU was at least 90 % busy" in page
    assert "marked *:" not in render_html(synthetic_records(), META)


def test_costs_at_the_runs_common_speed_are_said_so_in_table_and_page():
    records = [dict(r, speed_probe_ns=100.0 + 7 * (i % 5)) for i, r in enumerate(_saturated_records())]
    for text in (" ".join(_text(terminal_table(aggregate(records), [])).split()), render_html(records, META)):
        assert "at the run&#x27;s common machine speed" in text or "at the run's common machine speed" in text
    for text in (_text(terminal_table(aggregate(_saturated_records()), [])), render_html(_saturated_records(), META)):
        assert "common machine speed" not in text

"""report.html as a browser shows it: headless Chromium renders a report made from a synthetic run.

Checks that the figures were drawn, not only written: the DOM after rendering holds plotly's SVG
with one marker per measured point (hollow where the point was CPU-bound), one error bar per
point, the line at 1.0 in every panel of the normalized figure, the axis titles; and a screenshot
shows the profiles' colours on the page. No network: the page must render from the file alone
(plotly.js inline), so Chromium runs with networking features off.
"""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from analysis.figures import PROFILE_PALETTE
from cli import report as cli

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--mute-audio", "--virtual-time-budget=10000"]

RATES = (10.0, 100.0)
SIZES = (100, 500, 1000, 1460)
PROFILES = ("none", "aes-cbc-128-sha1", "aes-gcm-256")  # colours: grey, palette[0], palette[1]
LIMITED = {(100.0, "aes-cbc-128-sha1", s) for s in (100, 500)} | {(100.0, "aes-gcm-256", 100)}
N_POINTS = len(RATES) * len(PROFILES) * len(SIZES)  # 24 aggregated points
N_RATIOS = len(RATES) * (len(PROFILES) - 1) * len(SIZES)  # 16 IPsec/plain ratios


def synthetic_run(path: Path) -> Path:
    """A run directory like the sweep writes: 3 repetitions per point, a killed last line."""
    path.mkdir()
    lines = []
    cpu_cost = {"none": 2.0, "aes-cbc-128-sha1": 9.0, "aes-gcm-256": 7.0}
    overhead = {"none": 52, "aes-cbc-128-sha1": 52 + 73, "aes-gcm-256": 52 + 57}
    for rate in RATES:
        for profile in PROFILES:
            for size in SIZES:
                theoretical = rate * size / (size + overhead[profile])
                limited = (rate, profile, size) in LIMITED
                for rep in range(3):
                    goodput = (0.4 if limited else 0.96) * theoretical * (1 + 0.02 * (rep - 1))
                    lines.append(json.dumps({
                        "topology": "vpn_gateway", "profile": profile, "mode": "tunnel", "ip_version": 4,
                        "transport": "tcp", "rate_mbit": rate, "size_bytes": size, "size_mode": "mss",
                        "clients": 1, "repetition": rep, "duration_s": 2.0, "goodput_mbps": goodput,
                        "theoretical_goodput_mbps": theoretical, "loss_pct": None, "retransmits": rep,
                        "cpu_busy_pct": 50.0, "cpu_system_pct": 35.0, "cpu_softirq_pct": 9.0,
                        "cpu_s_per_gb": cpu_cost[profile] * 1460 / size * (1 + 0.05 * (rep - 1)),
                        "emulation_limited": limited, "backend": "uml", "kernel_release": "6.1.176",
                        "time": "2026-11-22T06:40:00Z"}))
    (path / "results.jsonl").write_text("\n".join(lines) + '\n{"topology": "vpn_gat')
    (path / "meta.json").write_text(json.dumps({
        "kernel_release": "6.1.176", "backend": "uml", "cpu_model": "Synthetic CPU", "cpu_count": 2,
        "versions": {"iperf3": "3.12"}, "command_line": "experiments/packet_size_sweep.py --synthetic",
        "started": "2026-11-22T06:00:00Z", "finished": "2026-11-22T06:40:00Z"}))
    return path


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("chromium is missing: scripts/install.sh installs it (apt-get install chromium); "
                    "this test renders report.html in it", pytrace=False)
    return path


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    run = synthetic_run(tmp_path_factory.mktemp("report") / "run")
    assert cli.main(["report", str(run)]) == 0
    return run / "report.html"


def run_chromium(chromium: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.iterdir()))}"  # fresh for every run
    profile.mkdir()
    proc = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, timeout=180)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    return proc


def figure_sections(dom: str) -> dict[str, str]:
    """The rendered DOM of each figure div, scripts removed (plotly.js's own text is no evidence)."""
    dom = re.sub(r"<script\b.*?</script>", "", dom, flags=re.S)
    starts = [(m.group(1), m.start()) for m in re.finditer(r'<div id="fig-([a-z]+)"', dom)]
    return {name: dom[start:(starts[i + 1][1] if i + 1 < len(starts) else len(dom))]
            for i, (name, start) in enumerate(starts)}


def test_figures_are_drawn_in_the_dom(chromium, report, tmp_path):
    dom = run_chromium(chromium, tmp_path, "--dump-dom", report.as_uri()).stdout.decode()
    figures = figure_sections(dom)
    assert list(figures) == ["throughput", "normalized", "cpu"], "the report should have three figures"
    expected_points = {"throughput": N_POINTS, "normalized": N_RATIOS, "cpu": N_POINTS}
    for name, svg in figures.items():
        assert 'class="main-svg"' in svg, f"{name}: plotly drew no SVG"
        assert svg.count('class="scatterlayer') == len(RATES), f"{name}: one scatter layer per panel"
        points = re.findall(r'<path class="point[^"]*" transform="translate\(([^)]*)\)"[^>]*style="([^"]*)"', svg)
        assert len(points) == expected_points[name], f"{name}: one marker per point"
        for xy, _ in points:
            x, y = (float(v) for v in xy.split(","))
            assert math_finite(x) and math_finite(y) and x >= 0 and y >= 0, f"{name}: marker at {xy}"
        hollow = sum("fill: none" in style for _, style in points)
        assert hollow == {"throughput": 3, "normalized": 3, "cpu": 3}[name], f"{name}: CPU-bound markers hollow"
        assert svg.count('class="errorbar"') == expected_points[name], f"{name}: one error bar per point"
        # lines were drawn through the points: a trace's path has many segments
        lines = re.findall(r'<path class="js-line" d="M([^"]*)"', svg)
        assert sum(1 for d in lines if d.count("L") >= len(SIZES) - 1) >= len(RATES) * (len(PROFILES) - 1)
    legend = re.findall(r'class="legendtext"[^>]*>([^<]*)<', figures["throughput"])
    assert legend == ["plain (no IPsec)", "aes-cbc-128-sha1", "aes-gcm-256", "theoretical goodput (dashed)",
                      "CPU-bound (emulator limit)"]
    # the reference line at 1.0 in each panel of the normalized figure
    assert figures["normalized"].count('class="shape-group"') == len(RATES)
    titles = re.findall(r'class="[xy]title"[^>]*>([^<]*)<', "".join(figures.values()))
    assert {"TCP MSS (bytes)", "goodput (Mbit/s)", "IPsec / plain goodput", "CPU time per GB (s/GB)"} <= set(titles)


def math_finite(v: float) -> bool:
    return v == v and abs(v) != float("inf")


def read_png(data: bytes) -> np.ndarray:
    """Decode an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes) to an (h, w, 3) array."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    width, height, depth, color_type, _, _, interlace = header
    assert depth == 8 and interlace == 0 and color_type in (2, 6), f"unexpected PNG format {header}"
    bpp = 3 if color_type == 2 else 4
    stride = width * bpp
    raw = zlib.decompress(b"".join(idat))
    prev = bytearray(stride)
    out = bytearray()
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        cur = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if ftype == 1:  # Sub
            for i in range(bpp, stride):
                cur[i] = (cur[i] + cur[i - bpp]) & 255
        elif ftype == 2:  # Up
            cur = bytearray((a + b) & 255 for a, b in zip(cur, prev, strict=True))
        elif ftype == 3:  # Average
            for i in range(stride):
                cur[i] = (cur[i] + (((cur[i - bpp] if i >= bpp else 0) + prev[i]) >> 1)) & 255
        elif ftype == 4:  # Paeth
            for i in range(stride):
                a = cur[i - bpp] if i >= bpp else 0
                b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                cur[i] = (cur[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out += cur
        prev = cur
    return np.frombuffer(bytes(out), dtype=np.uint8).reshape(height, width, bpp)[:, :, :3]


def pixels_near(image: np.ndarray, hex_color: str, tolerance: int = 10) -> int:
    rgb = np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)
    return int((np.abs(image.astype(np.int16) - rgb).max(axis=2) <= tolerance).sum())


def test_screenshot_shows_the_plots(chromium, report, tmp_path):
    shot = tmp_path / "report.png"
    # 1400 x 1300: the header, the how-to-read box and the whole first figure
    run_chromium(chromium, tmp_path, "--window-size=1400,1300", f"--screenshot={shot}", report.as_uri())
    image = read_png(shot.read_bytes())
    assert image.shape == (1300, 1400, 3)
    non_white = int((image.min(axis=2) < 235).sum())
    assert non_white > 0.04 * image.shape[0] * image.shape[1], f"page nearly blank ({non_white} pixels drawn)"
    # the traces in their colours: nothing else on the page uses the two profile colours (the plain
    # baseline's dark grey is not checked: antialiased text has that grey too)
    for color, what in ((PROFILE_PALETTE[0], "aes-cbc-128-sha1"), (PROFILE_PALETTE[1], "aes-gcm-256")):
        assert pixels_near(image, color) > 400, f"{what} ({color}) not drawn: {pixels_near(image, color)} pixels"
    # and they are in the plot area (below the header), not in some legend swatch only
    plot_area = image[700:, :1150]
    assert pixels_near(plot_area, PROFILE_PALETTE[1]) > 300


def test_png_reader_on_a_known_image(tmp_path):
    """The reader must be right for the screenshot test to mean anything: a 3x2 image, filters 1 and 4."""
    pixels = [[(255, 0, 0), (0, 255, 0), (0, 0, 255)], [(10, 20, 30), (40, 50, 60), (255, 255, 255)]]

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    def paeth(a, b, c):
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        return a if pa <= pb and pa <= pc else b if pb <= pc else c

    row0 = bytes(v for px in pixels[0] for v in px)
    row1 = bytes(v for px in pixels[1] for v in px)
    sub0 = bytes((row0[i] - (row0[i - 3] if i >= 3 else 0)) & 255 for i in range(9))
    paeth1 = bytes((row1[i] - paeth(row1[i - 3] if i >= 3 else 0, row0[i], row0[i - 3] if i >= 3 else 0)) & 255
                   for i in range(9))
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 3, 2, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(b"\x01" + sub0 + b"\x04" + paeth1)) + chunk(b"IEND", b""))
    assert read_png(png).tolist() == [[list(p) for p in row] for row in pixels]


def test_a_benchmarks_page_draws_markers_at_named_x_values(chromium, tmp_path):
    # unloaded_rtt's paths and transactions' tests are names on x: on a linear axis plotly drew none of them
    from analysis import benchpage

    fig = benchpage.figure("What the tunnel adds to the unloaded round trip", "path", "ms")
    paths = ["unshaped", "100 Mbit/s", "10 Mbit/s", "1 Mbit/s"]
    fig.add_scatter(x=paths, y=[0.025, 0.022, 0.018, 0.022], mode="markers", name="ping",
                    error_y={"type": "data", "array": [0.006, 0.005, 0.008, 0.005]})
    page = benchpage.write(str(tmp_path / "run"), "unloaded_rtt", "synthetic",
                           [benchpage.Section("Measured against predicted", "how to read it", fig)], {})
    dom = run_chromium(chromium, tmp_path, "--dump-dom", Path(page).as_uri()).stdout.decode()
    svg = re.sub(r"<script\b.*?</script>", "", dom, flags=re.S)
    points = re.findall(r'<path class="point[^"]*" transform="translate\(([^)]*)\)"', svg)
    assert len(points) == len(paths), "one marker per path"
    ticks = re.findall(r'class="xtick"[^>]*>.*?>([^<]+)</text>', svg)
    assert [t for t in ticks if t in paths] == paths, ticks  # the axis names the paths

"""A benchmark's run directory: its numbers as JSON, its figures on one page that opens offline."""
from __future__ import annotations

import json

from analysis import benchpage


def test_the_page_holds_every_figure_with_plotly_once_and_the_numbers_beside_it(tmp_path):
    one = benchpage.figure("Goodput", "tunnels (log)", "Mbit/s", log_x=True)
    one.add_scatter(x=[1, 10, 100], y=[350.0, 344.2, 351.9], name="h1 -> h2")
    two = benchpage.figure("Round trip", "tunnels", "ms")
    two.add_scatter(x=[1, 10], y=[0.17, 0.18], name="avg")
    sections = [benchpage.Section("Goodput <against> N", "how to read it", one),
                benchpage.Section("Round trip", "and this one", two)]
    path = benchpage.write(str(tmp_path / "run"), "xfrm_scale", "UML 6.1", sections, {"rows": [{"tunnels": 1}]})
    page = (tmp_path / "run" / "report.html").read_text()
    assert path == str(tmp_path / "run" / "report.html")
    assert page.count("<h2>") == 2 and "Goodput &lt;against&gt; N" in page  # escaped
    assert page.count("plotly.js v") == 1 and 'src="http' not in page  # inline once, nothing fetched
    assert '"fig0"' in page and '"fig1"' in page and "344.2" in page
    assert json.loads((tmp_path / "run" / "results.json").read_text()) == {"rows": [{"tunnels": 1}]}


def test_an_axis_of_names_is_drawn_as_categories_and_one_of_numbers_as_numbers():
    # unloaded_rtt's paths and transactions' tests on x: a linear axis drew none of their markers (2026-11-28)
    paths = benchpage.figure("What the tunnel adds", "path", "ms")
    paths.add_scatter(x=["unshaped", "100 Mbit/s"], y=[0.02, 0.03], mode="markers")
    assert paths.layout.xaxis.type is None  # plotly's own choice: a category axis for names
    assert benchpage.figure("Goodput", "tunnels (log)", "Mbit/s", log_x=True).layout.xaxis.type == "log"


def test_both_files_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
    # through the run directory's one atomic write: a benchmark killed mid-write leaves the old file
    written = []
    monkeypatch.setattr(benchpage, "atomic_write", lambda path, text: written.append((path, text[-1])))
    path = benchpage.write(str(tmp_path / "run"), "ike_setup", "host", [], {"rows": []})
    assert written == [(str(tmp_path / "run" / "results.json"), "\n"), (path, "\n")]
    assert not list((tmp_path / "run").iterdir())  # nothing written beside it

"""The default sweep's terminal table and report.html, from a real run, are what they were.

The fixture (``fixtures/sweep-default``) is the default sweep as measured at 2026-11-26 on an Intel Xeon with AMX
(``ipsec-testbed sweep --out DIR``, in the project's UML kernel). Its rendering is kept as ``table.txt`` and the
SHA-256 of report.html without plotly's own library (which depends on the installed plotly, not on this code):
a change of the code that renders or reads runs must leave both byte for byte as they were, unless the change
means to alter them, in which case ``IPSEC_TESTBED_WRITE_GOLDEN=1`` writes them anew (and the diff is reviewed).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

from cli import report

FIXTURE = Path(__file__).parent / "fixtures" / "sweep-default"
#: a script of the page; plotly.js, inlined once, is the one of more than a megabyte
SCRIPT = re.compile(r"<script>.*?</script>", re.S)


def _render(tmp_path: Path, monkeypatch, capsys) -> tuple[str, str]:
    # the table's title holds the run directory, and its length decides where the title wraps: a path of one
    # length wherever pytest keeps its temporary files (/tmp/itb-golden-XXXXXXXX/run)
    run = Path(tempfile.mkdtemp(prefix="itb-golden-", dir="/tmp")) / "run"
    run.mkdir(parents=True)
    for name in ("results.jsonl", "meta.json"):
        shutil.copy(FIXTURE / name, run / name)
    monkeypatch.setenv("COLUMNS", "100")
    assert report.main(["report", str(run)]) == 0
    out = capsys.readouterr()
    text = (out.out + out.err).replace(str(run), "RUN")
    html = (run / "report.html").read_text(encoding="utf-8").replace(str(run), "RUN")
    bundles = [m for m in SCRIPT.finditer(html) if m.end() - m.start() > 1_000_000]
    assert len(bundles) == 1, "the page inlines plotly.js once"
    stripped = html[:bundles[0].start()] + "<script>PLOTLY</script>" + html[bundles[0].end():]
    shutil.rmtree(run.parent)
    return text, hashlib.sha256(stripped.encode()).hexdigest()


def test_the_default_sweeps_table_and_report_are_byte_for_byte_what_they_were(tmp_path, monkeypatch, capsys):
    text, digest = _render(tmp_path, monkeypatch, capsys)
    if os.environ.get("IPSEC_TESTBED_WRITE_GOLDEN"):
        (FIXTURE / "table.txt").write_text(text, encoding="utf-8")
        (FIXTURE / "report.sha256").write_text(digest + "\n")
    assert text == (FIXTURE / "table.txt").read_text(encoding="utf-8")
    assert digest == (FIXTURE / "report.sha256").read_text().strip()


def test_the_golden_check_sees_a_changed_figure(tmp_path, monkeypatch, capsys):
    """The check can fail: one goodput changed in the fixture changes both the table and the page."""
    good_text, good_digest = _render(tmp_path / "good", monkeypatch, capsys)
    bad = tmp_path / "bad-fixture"
    shutil.copytree(FIXTURE, bad)
    lines = (bad / "results.jsonl").read_text().splitlines()
    lines[0] = re.sub(r'"goodput_mbps": ([0-9.]+)', lambda m: f'"goodput_mbps": {float(m.group(1)) * 0.9}', lines[0])
    (bad / "results.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(__import__(__name__), "FIXTURE", bad)
    text, digest = _render(tmp_path / "bad", monkeypatch, capsys)
    assert text != good_text and digest != good_digest

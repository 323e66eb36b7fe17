"""The run-directory module: results appended and read back, meta.json's runs, the lock, atomic writes."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import rundir
from testbed.rundir import ResultsError, RunDirBusy, load_meta, load_results


def record(**kw):
    return {"profile": "none", "size_bytes": 1000, "goodput_mbps": 9.5, **kw}


def test_results_appended_are_read_back_in_order(tmp_path):
    with rundir.open_results(tmp_path) as f:
        for i in range(3):
            rundir.append(f, record(repetition=i))
    got = rundir.load_results(tmp_path)
    assert [r.repetition for r in got] == [0, 1, 2]
    assert (tmp_path / rundir.RESULTS_FILE).read_text().count("\n") == 3


def test_partial_records_of_killed_runs_are_skipped_and_garbage_is_an_error(tmp_path, caplog):
    path = tmp_path / rundir.RESULTS_FILE
    path.write_text(json.dumps(record()) + "\n" + '{"profile": "no')  # the last line, unterminated
    assert len(rundir.load_existing(tmp_path)) == 1
    # a killed run's partial record with the resumed run's first record glued on: the latter is kept
    path.write_text('{"profile": "no' + json.dumps(record(repetition=1)) + "\n" + json.dumps(record()) + "\n")
    got = rundir.load_results(tmp_path)
    assert [r.repetition for r in got] == [1, 0] and "skipped a partial record" in caplog.text
    path.write_text("garbage\n")
    with pytest.raises(ResultsError, match="line 1|:1: not a JSON record"):
        rundir.load_results(tmp_path)


def test_records_without_the_required_fields_are_refused(tmp_path):
    (tmp_path / rundir.RESULTS_FILE).write_text(json.dumps({"profile": "none"}) + "\n")
    with pytest.raises(ResultsError):
        rundir.load_results(tmp_path)


def test_runs_are_recorded_and_the_top_says_how_the_last_ended(tmp_path):
    rundir.start_run(tmp_path, {"kernel_release": "6.1"}, command_line=["sweep"])
    rundir.finish_run(tmp_path, interrupted="SIGTERM", complete=False)
    meta = rundir.load_meta(tmp_path)
    assert meta.interrupted == "SIGTERM" and meta.complete is False
    assert meta.last_run.interrupted == "SIGTERM" and meta.last_run.finished == meta.finished
    rundir.start_run(tmp_path, {"kernel_release": "6.1"}, command_line=["sweep"])
    rundir.finish_run(tmp_path, complete=True)
    meta = rundir.load_meta(tmp_path)
    assert len(meta.runs) == 2 and meta.interrupted is None and meta.complete is True
    text = (tmp_path / rundir.META_FILE).read_text()
    assert '"interrupted"' not in text.split('"runs"')[0] and text.count('"interrupted": "SIGTERM"') == 1


def test_atomic_write_leaves_the_old_file_or_the_new_one(tmp_path, monkeypatch):
    path = tmp_path / "meta.json"
    rundir.atomic_write(path, "old")

    def fail(*_a):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        rundir.atomic_write(path, "new")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.json"]  # no temporary left


def test_a_second_holder_of_the_lock_is_refused_naming_the_first(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from testbed import rundir\n"
        f"with rundir.locked({str(tmp_path)!r}, 'sweep'):\n"
        "    print('held', flush=True); time.sleep(30)\n")], stdout=subprocess.PIPE, text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirBusy, match=str(holder.pid)), rundir.locked(tmp_path, "sweep"):
            pass
    finally:
        holder.kill()
        holder.wait()
    with rundir.locked(tmp_path, "sweep"):  # free again once the holder is gone
        pass


SCHEMA1 = Path(__file__).parent / "fixtures" / "rundir-schema1"  # a real sweep's, written before versions


def test_a_run_directory_from_before_schema_versions_is_read_as_schema_1(tmp_path):
    records = load_results(SCHEMA1)
    assert len(records) == 8 and all(r.goodput_mbps > 0 and r.bound == "link" for r in records)
    assert load_meta(SCHEMA1).backend == "uml" and load_meta(SCHEMA1).schema is None
    # resumed, it gains records of the current schema beside the old ones, and meta.json says so
    run = tmp_path / "run"
    shutil.copytree(SCHEMA1, run)
    rundir.start_run(run, {"backend": "uml"})
    with rundir.open_results(run) as f:
        rundir.append(f, dataclasses.replace(records[0], repetition=99).to_json())
    lines = [json.loads(line) for line in (run / rundir.RESULTS_FILE).read_text().splitlines()]
    assert [line.get("schema", 1) for line in lines] == [1] * 8 + [rundir.SCHEMA]
    assert load_results(run)[-1] == dataclasses.replace(records[0], repetition=99)
    assert load_meta(run).schema == rundir.SCHEMA


@pytest.mark.parametrize("what", ["record", "meta"])
def test_what_a_newer_version_wrote_is_refused_in_one_line(tmp_path, what):
    run = tmp_path / "run"
    shutil.copytree(SCHEMA1, run)
    newer = rundir.SCHEMA + 1
    if what == "record":
        with open(run / "results.jsonl", "a") as f:
            f.write(json.dumps({"profile": "none", "size_bytes": 100, "goodput_mbps": 1.0, "schema": newer}) + "\n")
        with pytest.raises(ResultsError, match=rf"results.jsonl:9: written by a newer ipsec-testbed \(schema {newer};"):
            load_results(run)
    else:
        meta = json.loads((run / "meta.json").read_text())
        (run / "meta.json").write_text(json.dumps({**meta, "schema": newer}))
        with pytest.raises(ResultsError, match=rf"meta.json: written by a newer ipsec-testbed \(schema {newer};"):
            load_meta(run)
        with pytest.raises(ResultsError, match="newer"):  # nor is a run started on it
            rundir.start_run(run, {"backend": "uml"})
    out = subprocess.run([sys.executable, "-c", f"from cli.report import main; raise SystemExit(main(['report', "
                          f"{str(run)!r}, '--no-html']))"], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 1 and "written by a newer ipsec-testbed" in out.stderr
    assert "Traceback" not in out.stderr

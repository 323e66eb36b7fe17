"""meta.json as testbed.record.Meta: real files read and written back byte for byte, a run's start and end
as the dict-based rules wrote them, older and unknown fields kept, and docs/meta.md current."""
from __future__ import annotations

import copy
import json
import logging
import shutil
from pathlib import Path

import pytest

from testbed import recordpage, rundir
from testbed.record import (
    MACHINE_FIELDS,
    META_FIELD,
    Meta,
    MetaPart,
    MetaRun,
    MetaScale,
    MetaSweep,
    MetaVersions,
    as_meta,
)

REPO = Path(__file__).resolve().parents[2]
#: Every meta.json the repository holds: the examples' (schema 2, reproductions and their parts) and a
#: sweep's from before schema versions (schema 1).
STORED = sorted([*(REPO / "examples" / "runs").rglob("meta.json"),
                 REPO / "tests" / "unit" / "fixtures" / "rundir-schema1" / "meta.json"])
NOW = "2026-12-01T10:00:00Z"


def written(data: dict) -> str:
    """The text rundir.write_json writes."""
    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"


def test_there_are_old_and_new_files_to_read():
    schemas = {json.loads(p.read_text()).get("schema", 1) for p in STORED}
    assert len(STORED) >= 12 and schemas == {1, rundir.SCHEMA}


@pytest.mark.parametrize("path", STORED, ids=lambda p: str(p.relative_to(REPO)))
def test_every_stored_meta_json_reads_and_writes_back_byte_for_byte(path):
    text = path.read_text()
    meta = Meta.from_json(json.loads(text))
    assert written(meta.to_json()) == text
    assert meta == rundir.load_meta(path.parent) and meta.extra == {}  # every field known by name
    assert isinstance(meta.versions, MetaVersions) and meta.versions.iperf3 == "3.12"
    # a transactions part's run has its command as null (experiments.reproduce passes none)
    assert meta.runs and all(isinstance(r, MetaRun) and isinstance(r.command_line, tuple | None) for r in meta.runs)
    assert meta.backend == "uml" and meta.kernel_label() == "User-Mode Linux 6.1.176"


def test_a_reproductions_parts_and_scale_are_typed():
    meta = rundir.load_meta(REPO / "examples" / "runs" / "seed000")
    assert meta.is_reproduction and meta.seed == "000"
    assert [p.name for p in meta.parts] == ["throughput_tcp", "ikev2"] and isinstance(meta.parts[0], MetaPart)
    assert meta.parts[1].spec.keying == "ike-rsa" and meta.parts[0].transactions == 0
    assert isinstance(meta.parts[1].spec, MetaSweep) and meta.parts[1].spec.sizes == (1460,)
    assert meta.scale == MetaScale(factor=10.0, how="given: --scale 10") and meta.scale.divisor == 10.0
    assert meta.last_run.points_missing == {} and meta.last_run.attempts_failed == 0
    seed001 = rundir.load_meta(REPO / "examples" / "runs" / "seed001")
    assert seed001.scale is None and '"scale": null' in written(seed001.to_json())  # null stays null
    part = rundir.load_meta(REPO / "examples" / "runs" / "seed000" / "ikev2")
    assert not part.is_reproduction and part.sweep.keying == "ike-rsa" and part.complete is True


def test_a_sweeps_meta_has_the_specs_fields_and_gives_the_spec_back():
    import dataclasses

    from experiments.engine.plan import SweepSpec, default_sweep

    # testbed sits below experiments: the two lists are held equal here, in the spec's order
    assert [f.name for f in MetaSweep.known()] == [f.name for f in dataclasses.fields(SweepSpec)]
    for spec in (SweepSpec(), default_sweep(rates_mbit=(1.0, 10.0), arms=(0, 300), socket_buffer=65535)):
        data = json.loads(json.dumps(spec.to_json()))  # as meta.json holds it
        sweep = Meta.from_json({"sweep": data}).sweep
        assert sweep.extra == {} and written(sweep.to_json()) == written(data)  # the same bytes
        assert sweep.rates_mbit == spec.rates_mbit and SweepSpec.from_meta(sweep) == spec
    # an older version's: iperf3's omit_s for the warm-up, no probe tool (irtt, its one tool then), a field
    # since removed (kept as it was)
    older = MetaSweep.from_json({"rates_mbit": [10.0], "omit_s": 0.5, "retired": 1})
    assert older.warmup_s is None and older.probe_tool is None and older.extra == {"omit_s": 0.5, "retired": 1}
    spec = SweepSpec.from_meta(older)
    assert (spec.rates_mbit, spec.warmup_s, spec.probe_tool) == ((10.0,), 0.5, "irtt")


def test_a_schema_1_file_is_read_as_it_is():
    meta = rundir.load_meta(REPO / "tests" / "unit" / "fixtures" / "rundir-schema1")
    assert meta.schema is None and "schema" not in meta.to_json()  # absent stays absent
    assert meta.last_run.points_measured == 113 and meta.kernel_reason == "--uml-kernel was given (debian)"
    assert meta.machine() == {"backend": "uml", "kernel_release": "6.1.176", "cpu_model": "UML", "cpu_count": 1}


def test_fields_this_version_does_not_know_are_kept_and_written_back():
    data = {"backend": "host", "gpu": "none", "versions": {"iperf3": "3.16", "netperf": "2.7"},
            "runs": [{"started": "x", "exit_code": 0}], "scale": {"factor": 2.0, "how": "h", "by": "me"}}
    meta = Meta.from_json(data)
    assert meta.extra == {"gpu": "none"} and meta.versions.extra == {"netperf": "2.7"}
    assert meta.runs[0].extra == {"exit_code": 0} and meta.scale.extra == {"by": "me"}
    assert meta.to_json() == data
    assert meta.versions.items() == [("iperf3", "3.16"), ("netperf", "2.7")]


def test_an_object_is_false_when_it_holds_nothing_as_json_s_empty_object_is():
    assert not Meta() and not Meta.from_json({}) and not MetaScale.from_json({})
    assert Meta(backend="uml") and MetaRun.of(command_line=None)  # a field written as null is something
    assert MetaRun.of(command_line=None).to_json() == {"command_line": None}


def test_a_malformed_object_is_refused_by_name_and_load_meta_says_so(tmp_path, caplog):
    with pytest.raises(ValueError, match="meta.json: runs: expected a list, got dict"):
        Meta.from_json({"runs": {"started": "x"}})
    with pytest.raises(ValueError, match="meta.json: versions: expected a JSON object, got str"):
        Meta.from_json({"versions": "3.12"})
    (tmp_path / rundir.META_FILE).write_text(json.dumps({"backend": "uml", "parts": [1]}))
    with caplog.at_level(logging.WARNING, logger="testbed.rundir"):
        assert rundir.load_meta(tmp_path) == Meta()
    assert "parts: expected a JSON object, got int; kernel, CPU and command line unknown" in caplog.text
    assert rundir.read_meta(tmp_path) == Meta() and rundir.read_meta(tmp_path / "nowhere") == Meta()


def test_as_meta_and_what_a_report_keeps():
    assert as_meta(None) == Meta() and as_meta({"seed": "003"}).seed == "003"
    meta = Meta(backend="uml", backend_label="User-Mode Linux 6.1.176", kernel_release="6.1.176")
    assert as_meta(meta) is meta
    kept = meta.keep((META_FIELD.backend, META_FIELD.kernel_release, META_FIELD.cpu_count))
    assert kept.to_json() == {"backend": "uml", "kernel_release": "6.1.176", "cpu_count": None}  # null where none
    assert kept.kernel_label() == "uml kernel (6.1.176)" and meta.kernel_label() == "User-Mode Linux 6.1.176"
    assert Meta().kernel_label() == "the kernel" and tuple(Meta().machine()) == MACHINE_FIELDS


# -- a run's start and end, against the dict-based rules they replace ---------------------------------

def old_start(meta: dict, machine: dict, fields: dict) -> dict:
    """testbed.rundir.start_run's change before meta.json was typed."""
    meta.update(machine)
    meta.update(fields)
    meta["schema"] = rundir.SCHEMA
    meta.setdefault("started", NOW)
    meta.setdefault("runs", []).append({"command_line": fields.get("command_line"), "started": NOW})
    return meta


def old_finish(meta: dict, fields: dict) -> dict:
    """testbed.rundir.finish_run's change before meta.json was typed."""
    runs = meta.setdefault("runs", [{}])
    runs[-1].setdefault("finished", NOW)
    runs[-1].update({k: v for k, v in fields.items() if k != "complete"})
    meta["finished"] = runs[-1]["finished"]
    if "complete" in fields:
        meta["complete"] = fields["complete"]
    if fields.get("interrupted"):
        meta["interrupted"] = fields["interrupted"]
    else:
        meta.pop("interrupted", None)
    return meta


MACHINE = {"kernel_release": "6.1.176", "backend": "uml", "backend_label": "User-Mode Linux 6.1.176",
           "cpu_model": "UML", "cpu_count": 1, "python": "3.11.2", "kernel_recipe_key": None,
           "versions": {"iperf3": "3.12", "mininet": None, "testbed": "abc"}}
#: What each of the project's calls of start_run and finish_run passes (experiments.engine.sweep,
#: experiments.reproduce), in the order a run makes them.
STARTS = [
    {"command_line": ["ipsec-testbed", "sweep"], "sweep": {"topology": "vpn_gateway", "keying": "static"},
     "cpu_accounting": "cgroup", "speed_probe": None},
    {"sweep": {"topology": "host_to_host"}, "transactions": 200, "cpu_accounting": "cgroup"},
    {"seed": "000", "script": "ipsec-testbed reproduce 000", "command_line": ["ipsec-testbed", "reproduce", "000"],
     "parts": [{"name": "p", "title": "t", "spec": {"mtu": 1500}, "transactions": 0, "reference": "p"}],
     "scale": None},
    {"seed": "000", "script": "s", "command_line": ["x"], "parts": [],
     "scale": MetaScale.of(factor=10.0, how="given: --scale 10")},
]
FINISHES = [
    {"points_measured": 4, "points_failed": 0, "complete": True},
    {"points_measured": 3, "complete": False},
    {"points_missing": {"p": 2}, "attempts_failed": 1},
    {"interrupted": "SIGTERM", "complete": False},
    {"interrupted": "SIGINT"},
    {},
]


@pytest.mark.parametrize("start", range(len(STARTS)))
@pytest.mark.parametrize("finish", range(len(FINISHES)))
@pytest.mark.parametrize("before", ["none", "schema1", "seed000"])
def test_a_run_starts_and_ends_as_the_dict_rules_wrote_it(tmp_path, monkeypatch, start, finish, before):
    monkeypatch.setattr(rundir, "now_iso", lambda: NOW)
    if before != "none":
        source = {"schema1": REPO / "tests" / "unit" / "fixtures" / "rundir-schema1",
                  "seed000": REPO / "examples" / "runs" / "seed000"}[before]
        shutil.copy(source / rundir.META_FILE, tmp_path / rundir.META_FILE)
    path = tmp_path / rundir.META_FILE
    old = json.loads(path.read_text()) if path.exists() else {}
    fields = STARTS[start]
    json_fields = {k: (v.to_json() if isinstance(v, MetaScale) else v) for k, v in fields.items()}
    old = old_start(old, copy.deepcopy(MACHINE), copy.deepcopy(json_fields))
    rundir.start_run(tmp_path, MACHINE, **fields)
    assert path.read_text() == written(old)
    for _ in range(2):  # a second end (a signal after a normal end) as well
        old = old_finish(old, copy.deepcopy(FINISHES[finish]))
        rundir.finish_run(tmp_path, **FINISHES[finish])
        assert path.read_text() == written(old)


def test_resumed_runs_ending_every_way_in_turn_as_the_dict_rules_wrote_them(tmp_path, monkeypatch):
    # an interrupted run resumed and ended normally: the top's interrupted goes, the entry's stays
    monkeypatch.setattr(rundir, "now_iso", lambda: NOW)
    old: dict = {}
    for i, finish in enumerate([*FINISHES, *reversed(FINISHES)]):
        fields = STARTS[i % len(STARTS)]
        old = old_start(old, copy.deepcopy(MACHINE), copy.deepcopy(
            {k: (v.to_json() if isinstance(v, MetaScale) else v) for k, v in fields.items()}))
        rundir.start_run(tmp_path, MACHINE, **fields)
        old = old_finish(old, copy.deepcopy(finish))
        rundir.finish_run(tmp_path, **finish)
        assert (tmp_path / rundir.META_FILE).read_text() == written(old), (i, finish)
    assert '"interrupted": "SIGINT"' in written(old) and "interrupted" not in old  # ended normally last


def test_a_finish_without_a_start_makes_its_runs_entry():
    meta = Meta().finished_run({"points_measured": 1}, now=NOW, interrupted="SIGTERM")
    assert meta.to_json() == {"runs": [{"points_measured": 1, "interrupted": "SIGTERM", "finished": NOW}],
                              "finished": NOW, "interrupted": "SIGTERM"}


# -- the page ---------------------------------------------------------------------------------------

def test_docs_meta_md_is_what_the_record_module_says():
    assert recordpage.META_PAGE.read_text() == recordpage.render_meta(), \
        "docs/meta.md is out of date: run `.venv/bin/python -m cli.pages` and commit it"
    page = recordpage.META_PAGE.read_text()
    for kind in (Meta, MetaVersions, MetaScale, MetaSweep, MetaPart, MetaRun):
        assert all(f"| `{f.name}` | {f.metadata['doc']} |" in page and f.metadata["doc"] for f in kind.known())


def test_the_page_check_fails_on_a_stale_page(tmp_path, monkeypatch, capsys):
    from cli import pages as cli_pages

    stale = tmp_path / "meta.md"
    stale.write_text("# meta.json\n")
    monkeypatch.setattr(recordpage.pages, "REPO", tmp_path)
    monkeypatch.setattr(cli_pages, "generated", lambda: [(tmp_path / "records.md", recordpage.render, "record.py"),
                                                         (stale, recordpage.render_meta, "record.py")])
    (tmp_path / "records.md").write_text(recordpage.render())
    assert cli_pages.main(["--check"]) == 1 and "meta.md is not what" in capsys.readouterr().err
    assert cli_pages.main([]) == 0 and cli_pages.main(["--check"]) == 0
    assert stale.read_text() == recordpage.render_meta()

"""The results history: rows from a run, the store (SQLite), change points, the nightly check, KCIDB."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import multiprocessing
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import history as hist
from analysis import kcidb
from analysis import store as st
from testbed import historyplace as place

FIXTURE = Path(__file__).parent / "fixtures" / "sweep-default"
REPO = Path(__file__).resolve().parents[2]
POINT = "vpn_gateway aes-gcm-256 tunnel IPv4 udp 1000 Mbit/s datagram 1400 B"


def row(kernel: str, value: float, *, run: str | None = None, metric: str = "instructions_per_packet",
        clock: str = "instructions", version: str = "6.1.192", position: int = -1, date: str = "2026-11-28T00:00:00Z",
        samples: tuple[float, ...] = (), backend: str = "qemu", machine: str = "AMD EPYC, 2 CPUs, vm") -> hist.Row:
    """A row; a kernel at a ``position`` is a git tree's commit (its name then tells it apart)."""
    samples = samples or (value,)
    commit = hashlib.sha1(kernel.encode()).hexdigest() if position >= 0 else ""
    return hist.Row(run_id=run or f"{kernel}-{value}-{date}", kind="regress", kernel=kernel, kernel_version=version,
                    kernel_source="git" if commit else "package", kernel_commit=commit, kernel_position=position,
                    recipe_key="", backend=backend, clock=clock, profile="aes-gcm-256", point=POINT, arm="",
                    metric=metric, value=value, low=value - 1, high=value + 1, n=len(samples),
                    samples=json.dumps(samples), machine=machine, project="abc1234", date=date, run_dir="/tmp/run")


def night(i: int) -> str:
    """The start of night ``i``'s run (one a day, from 2026-11-01)."""
    return f"2026-11-{i + 1:02d}T03:00:00Z"


def history(values, step_at=None, step=0.0):
    """Kernels c01.. in one git history, one a night, ``values`` with a step from ``step_at`` on."""
    return [row(f"c{i + 1:02d}", v * (1 + step if step_at is not None and i >= step_at else 1), position=i + 1,
                date=night(i)) for i, v in enumerate(values)]


#: Run means of identical kernels on the counted backend, boot to boot (instructions per packet).
NOISE = [52849.2, 52851.0, 52840.1, 52858.8, 52846.7, 52838.9, 52855.1, 52847.9, 52844.2, 52853.3]


# -- rows of a run ---------------------------------------------------------------------------------------------

def test_a_run_gives_a_row_per_point_and_metric_with_its_mean_interval_and_samples():
    rows = hist.rows_of_run(str(FIXTURE), "sweep")
    records = [json.loads(line) for line in (FIXTURE / "results.jsonl").read_text().splitlines()]
    points = {(r["topology"], r["profile"], r["mode"], r["rate_mbit"], r["size_bytes"]) for r in records
              if not r.get("failed")}
    goodput = [r for r in rows if r.metric == "goodput_mbps"]
    assert len(goodput) == len(points)
    for r in rows:
        values = r.values()
        assert r.n == len(values) and r.value == pytest.approx(sum(values) / len(values), rel=1e-6)
        assert r.low <= r.value <= r.high
    assert {r.kernel for r in rows} == {"6.1.192-itb"} and {r.clock for r in rows} == {"time"}
    assert {r.recipe_key for r in rows} == {"bc870408c618"} and rows[0].project
    # the same run stored again is the same run: its id does not change
    assert {r.run_id for r in rows} == {r.run_id for r in hist.rows_of_run(str(FIXTURE), "sweep")}
    with pytest.raises(ValueError, match="kind"):
        hist.rows_of_run(str(FIXTURE), "nightly")


def test_kernels_run_in_version_then_git_then_first_run_order():
    rows = [row("6.12", 1.0, version="6.12.58", date="2026-01-01T00:00:00Z"),
            row("tree@b", 1.0, position=12, date="2026-01-02T00:00:00Z"),
            row("tree@a", 1.0, position=11, date="2026-01-03T00:00:00Z"),
            row("6.12-rc3", 1.0, version="6.12.0-rc3", date="2026-01-04T00:00:00Z"),
            row("6.1", 1.0, date="2026-01-05T00:00:00Z"),
            row("v6.12", 1.0, version="6.12", date="2026-01-06T00:00:00Z")]
    # (a release before the commits made on it: a tree at the same version without a place comes first;
    # a release candidate before its release, however its version is written)
    assert hist.kernel_order(rows) == ["6.1 (6.1.192)", "tree@a", "tree@b", "6.12-rc3 (6.12.0-rc3)", "v6.12 (6.12)",
                                       "6.12 (6.12.58)"]
    assert hist.version_key("6.12-rc3") < hist.version_key("6.12") == hist.version_key("6.12.0")


def test_a_ref_that_moves_is_kept_by_its_commit_and_a_shallow_clone_has_no_place(tmp_path):
    tree = tmp_path / "linux"
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@localhost"}

    def git(*args, cwd=tree):
        return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                              text=True).stdout.strip()

    (tree / "arch" / "um").mkdir(parents=True)  # (what tells a kernel tree: a Makefile and arch/um)
    (tree / "arch" / "um" / "Kconfig").write_text("")
    git("init", "-q")
    git("add", "arch")
    shas = []
    for i in range(3):
        (tree / "Makefile").write_text(f"VERSION = {i}\n")
        git("add", "Makefile")
        git("commit", "-q", "-m", f"commit {i}")
        shas.append(git("rev-parse", "HEAD"))
    meta = type("Meta", (), {"kernel_version": "6.1.192", "kernel_release": None, "kernel_origin": "recipe"})()
    k = hist.kernel_of(meta, f"{tree}@HEAD")
    assert k.kernel == f"{tree}@{shas[-1]}" and k.commit == shas[-1] and k.position == 3
    assert hist.kernel_of(meta, f"{tree}@HEAD~2").position == 1
    git("clone", "-q", "--depth", "1", f"file://{tree}", str(tmp_path / "shallow"), cwd=tmp_path)
    k = hist.kernel_of(meta, f"{tmp_path / 'shallow'}@HEAD")
    assert k.commit == shas[-1] and k.position == -1


# -- change points ---------------------------------------------------------------------------------------------

def test_a_two_percent_step_is_found_at_its_kernel_with_its_sign_and_size():
    (series,) = hist.series_of(history(NOISE, step_at=6, step=0.02))
    assert [g.kernels[0] for g in series.groups] == ["c01", "c07"]
    assert series.groups[1].label == "regression"  # instructions per packet rose: worse
    assert series.groups[1].change == pytest.approx(0.02, abs=0.001)
    (series,) = hist.series_of(history(NOISE))
    assert len(series.groups) == 1 and not series.groups[0].label


def test_a_cheaper_kernel_is_a_progression_and_a_faster_one_too():
    (cost,) = hist.series_of(history(NOISE, step_at=5, step=-0.2))
    assert cost.groups[1].label == "progression" and cost.groups[1].change == pytest.approx(-0.2, abs=0.001)
    goodput = [dataclasses.replace(r, metric="goodput_mbps", value=r.value / 500) for r in history(NOISE, 5, 0.1)]
    (series,) = hist.series_of(goodput)
    assert series.groups[1].label == "progression"  # goodput rose: better


def test_the_check_fails_only_when_a_kernel_of_the_last_night_starts_a_regression():
    rows = history(NOISE, step_at=9, step=0.02)
    new, alarms = hist.check(rows)
    assert new == ["c10"] and len(alarms) == 1 and alarms[0].kernel == "c10"
    assert "regression of +2.0" in alarms[0].line()
    # a night later the regression is old news: the gate said so the night before
    rows.append(row("c11", NOISE[0] * 1.02, position=11, date=night(10)))
    assert hist.check(rows) == (["c11"], [])
    # ... unless asked about the nights since then
    assert [a.kernel for a in hist.check(rows, since=night(9))[1]] == ["c10"]
    assert hist.check(history(NOISE))[1] == []
    assert hist.check(history(NOISE, step_at=9, step=-0.05))[1] == []  # a progression is no alarm


def test_the_check_gates_every_kernel_of_the_night_not_only_the_last_one_measured():
    rows = history(NOISE, step_at=8, step=0.02)
    # two kernels measured the same night (a matrix), the regression at the first of them
    rows[9] = dataclasses.replace(rows[9], date=night(8).replace("03:00", "04:00"))
    new, alarms = hist.check(rows)
    assert new == ["c09", "c10"] and [a.kernel for a in alarms] == ["c09"]
    # an old kernel measured again last hides nothing
    rows.append(row("c01", NOISE[0], position=1, date=night(8).replace("03:00", "05:00"), run="again"))
    assert [a.kernel for a in hist.check(rows)[1]] == ["c09"]


def test_a_ref_measured_every_night_is_a_kernel_a_night():
    # the same tree at HEAD, a new commit each night: each row keeps its commit (kernel_of), so a +5 % night shows
    shas = [hashlib.sha1(str(i).encode()).hexdigest() for i in range(len(NOISE))]
    rows = [row(f"/src/linux@{sha}", v * (1.05 if i >= 8 else 1), position=i + 1, date=night(i))
            for i, (sha, v) in enumerate(zip(shas, NOISE, strict=True))]
    assert [a.kernel for a in hist.check(rows, since=night(8))[1]] == [f"/src/linux@{shas[8]}"]


def test_timed_figures_of_two_backends_or_machines_are_two_series_and_counted_ones_one():
    timed = [row("6.1", 100.0, clock="time", metric="cpu_us_per_packet", backend="uml", date=night(0)),
             row("6.12", 80.0, clock="time", metric="cpu_us_per_packet", backend="host", date=night(1),
                 version="6.12.58"),
             row("6.12", 81.0, clock="time", metric="cpu_us_per_packet", backend="uml", date=night(2),
                 version="6.12.58", machine="Intel Xeon, 2 CPUs, ci-7")]
    assert len(hist.series_of(timed)) == 3
    counted = [row("6.1", 52849.0, date=night(0)), row("6.1", 52850.0, date=night(1), machine="Intel Xeon, ci-7")]
    (series,) = hist.series_of(counted)
    assert series.runs == ((52849.0, 52850.0),) and series.machine == ""


def test_a_series_of_zeros_has_no_change_point():
    (series,) = hist.series_of([dataclasses.replace(r, value=0.0, metric="goodput_mbps") for r in history(NOISE)])
    assert len(series.groups) == 1 and not series.groups[0].label


def test_two_clocks_asked_to_share_a_chart_are_refused_in_one_line():
    rows = [row("6.1", 99.0, metric="goodput_mbps"), row("6.1", 95.0, metric="goodput_mbps", clock="time")]
    with pytest.raises(hist.HistoryError, match="two clocks.*--clock"):
        hist.one_clock(rows)
    hist.one_clock(rows[:1])
    # ... and they never share a series
    assert len(hist.series_of(rows)) == 2


# -- the store -------------------------------------------------------------------------------------------------

def test_sqlite_keeps_rows_replaces_a_run_stored_again_and_merges_only_new_runs(tmp_path):
    path = str(tmp_path / "h.sqlite")
    rows = history(NOISE)
    with st.open_store(path) as s:
        s.keep(rows)
        s.keep(rows[:3])  # the same runs again: replaced, not doubled
        assert s.rows() == rows
        s.keep([dataclasses.replace(rows[0], value=1.0)])  # a run stored again with other figures: the new ones
        assert s.rows()[0].value == 1.0 and len(s.rows()) == len(rows)
        s.keep(rows[:1])
        assert s.rows(metric="goodput_mbps") == []
    other = str(tmp_path / "cell.sqlite")
    extra = [row("c11", 52850.0, position=11, date=night(10))]
    with st.open_store(other) as s:
        s.keep(rows[:2] + extra)
    with st.open_store(path) as s, st.open_store(other, create=False) as source:
        assert s.merge(source.rows()) == 1
        assert len(s.rows()) == len(rows) + 1
        # a run resumed on its runner and merged again: its new rows replace the old
        resumed = [dataclasses.replace(extra[0], value=52851.0)]
        assert s.merge(resumed) == 1 and s.merge(resumed) == 0
        assert [r.value for r in s.rows() if r.kernel == "c11"] == [52851.0]


def test_a_store_of_a_newer_version_or_not_a_history_is_refused_in_one_line(tmp_path):
    newer = tmp_path / "newer.sqlite"
    with st.open_store(str(newer)) as s:
        s.keep(history(NOISE[:2]))
    db = sqlite3.connect(newer)
    db.execute(f"UPDATE {st.VERSION_TABLE} SET version = {st.SCHEMA + 1}")
    db.commit()
    db.close()
    with st.open_store(str(newer)) as s, pytest.raises(st.StoreError, match="newer ipsec-testbed.*upgrade"):
        s.keep(history(NOISE[:2]))
    with st.open_store(str(newer)) as s, pytest.raises(st.StoreError, match="newer"):
        s.rows()
    foreign = tmp_path / "foreign.sqlite"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE accounts (id INTEGER)")
    db.commit()
    db.close()
    with st.open_store(str(foreign)) as s, pytest.raises(st.StoreError, match="not a testbed history.*accounts"):
        s.keep(history(NOISE[:2]))
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not a database at all" * 100)
    with pytest.raises(st.StoreError, match="garbage.sqlite"), st.open_store(str(garbage)) as s:
        s.rows()
    with pytest.raises(st.StoreError, match="no such file"):
        st.open_store(str(tmp_path / "missing.sqlite"), create=False)


def test_a_run_that_fails_mid_write_leaves_nothing_of_itself(tmp_path):
    path = str(tmp_path / "h.sqlite")
    good = history(NOISE[:3])
    with st.open_store(path) as s:
        s.keep(good)
        broken = [*history(NOISE[3:6]), dataclasses.replace(good[0], run_id="broken", value=None)]
        with pytest.raises(st.StoreError, match="nothing of this run was written"):
            s.keep([dataclasses.replace(r, run_id="broken") for r in broken[:-1]] + broken[-1:])
        assert s.rows() == good


def _write_many(path: str, who: int) -> None:
    with st.open_store(path) as s:
        for i in range(20):
            s.keep([row(f"w{who}", 100.0 + j, run=f"w{who}-{i}", metric=m) for j, m in
                    enumerate(("goodput_mbps", "instructions_per_packet", "instructions_per_byte"))])


def at_once(target, where: str, writers: int = 3) -> None:
    """``target(where, n)`` in ``writers`` processes at once; each must end well."""
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=target, args=(where, w)) for w in range(writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0


def test_two_writers_at_once_each_write_every_row(tmp_path):
    path = str(tmp_path / "h.sqlite")
    with st.open_store(path) as s:
        s.migrate()
    at_once(_write_many, path)
    with st.open_store(path) as s:
        rows = s.rows()
    assert len(rows) == 3 * 20 * 3 and len({r.run_id for r in rows}) == 60


def _open_at_once(where: str, start, failed: list[str]) -> None:
    start.wait()
    try:
        st.open_store(where).close()
    except st.StoreError as e:
        failed.append(str(e))


def test_runs_that_open_a_new_store_at_once_all_open_it(tmp_path):
    # The two sides of a paired A/B open one new file at once.  Four threads let go together lost the race for
    # the write-ahead log in one trial of six before open_store asked again (the first fresh clone of 606f793 failed).
    import threading
    for trial in range(50):
        start, failed = threading.Barrier(4), []
        threads = [threading.Thread(target=_open_at_once, args=(str(tmp_path / f"h{trial}.sqlite"), start, failed))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failed == []


def test_the_front_door_names_every_metric_and_kind_the_history_has():
    from analysis.regress import METRICS
    from cli.history import KINDS, METRIC_NAMES

    assert set(METRIC_NAMES) == set(METRICS) and KINDS == hist.KINDS


def test_where_the_history_goes(monkeypatch, tmp_path):
    monkeypatch.delenv(place.ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert place.location(None) == str(tmp_path / "ipsec-testbed" / "history.sqlite")
    monkeypatch.setenv(place.ENV, "/srv/h.sqlite")
    assert place.location(None) == "/srv/h.sqlite" and place.location("x.sqlite") == "x.sqlite"
    assert place.location("off") is None
    assert place.describe("postgresql://ci:secret@db.example/ipsec") == "postgresql://ci:***@db.example/ipsec"


# -- KCIDB -----------------------------------------------------------------------------------------------------

def test_kcidb_output_is_valid_by_kcidb_ios_own_validator(tmp_path):
    rows = hist.rows_of_run(str(FIXTURE), "sweep") + history(NOISE[:2])
    document = kcidb.write(rows, str(tmp_path / "k.json"))
    assert json.loads((tmp_path / "k.json").read_text()) == document
    assert len(document["tests"]) == len(rows)
    test = document["tests"][0]
    assert test["number"]["value"] == rows[0].value and test["status"] == "DONE"
    assert {t["build_id"] for t in document["tests"]} <= {b["id"] for b in document["builds"]}
    assert {b["checkout_id"] for b in document["builds"]} <= {c["id"] for c in document["checkouts"]}


def test_kcidb_tells_non_ascii_points_apart_and_leaves_out_a_date_it_cannot_take():
    rows = [dataclasses.replace(r, point=p, date=d) for r, p, d in
            zip(history(NOISE[:3]), ("débit", "dèbit", "debit"), ("", "2026-11-28T03:00:00Z", "yesterday"),
                strict=True)]
    document = kcidb.report(rows)
    kcidb.validate(document)
    assert len({t["path"] for t in document["tests"]}) == 3
    assert ["start_time" in t for t in document["tests"]] == [False, True, False]


def test_a_malformed_kcidb_field_is_named_and_nothing_is_written(tmp_path):
    document = kcidb.report(history(NOISE[:2]))
    document["tests"][0]["number"]["value"] = "fast"
    with pytest.raises(hist.HistoryError, match="tests/0/number/value"):
        kcidb.validate(document)
    with pytest.raises(hist.HistoryError, match="origin"):
        kcidb.write(history(NOISE[:2]), str(tmp_path / "k.json"), origin="My CI")
    assert not (tmp_path / "k.json").exists()


# -- the command -----------------------------------------------------------------------------------------------

def _cli(*args: str, env_history: str) -> subprocess.CompletedProcess:
    env = {**os.environ, place.ENV: env_history}
    return subprocess.run([sys.executable, "-m", "cli", "history", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_history_command_gates_on_the_last_nights_kernels_and_writes_its_page(tmp_path):
    path = str(tmp_path / "h.sqlite")
    with st.open_store(path) as s:
        s.keep(history(NOISE, step_at=9, step=0.02))
    done = _cli("--check", "--page", str(tmp_path / "h.html"), env_history=path)
    assert done.returncode == 1, done.stderr
    assert "REGRESSION" in done.stdout and "at c10" in done.stdout and "regression +2.0" in done.stdout
    page = (tmp_path / "h.html").read_text()
    data = json.loads(page.split('id="history-data">')[1].split("</script>")[0].replace("<\\/", "</"))
    assert "plotly" in page and data[0]["groups"][1]["label"] == "regression"
    with st.open_store(path) as s:
        s.keep([row("c11", NOISE[0] * 1.02, position=11, date=night(10))])
    assert _cli("--check", env_history=path).returncode == 0
    assert _cli("--check", "--since", night(9), env_history=path).returncode == 1
    done = _cli("--check", "--since", night(9), "--json", env_history=path)
    data = json.loads(done.stdout)
    assert done.returncode == 1 and data["check"]["kernels"] == ["c10", "c11"]
    assert [r["kernel"] for r in data["check"]["regressions"]] == ["c10"]
    assert [g["label"] for g in data["series"][0]["groups"]] == ["", "regression"]


def test_the_history_command_refuses_bad_input_in_one_line(tmp_path):
    done = _cli("--history", "postgresql://nobody@127.0.0.1:1/none", env_history="off")
    assert done.returncode == 2 and "cannot connect" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    done = _cli(env_history="off")
    assert done.returncode == 2 and "off" in done.stderr
    done = _cli("--history", str(tmp_path / "none.sqlite"), env_history="off")
    assert done.returncode == 2 and "no such file" in done.stderr
    mixed = str(tmp_path / "mixed.sqlite")
    with st.open_store(mixed) as s:
        s.keep([row("6.1", 99.0, metric="goodput_mbps"), row("6.1", 95.0, metric="goodput_mbps", clock="time",
                                                             run="timed")])
    done = _cli("--page", str(tmp_path / "p.html"), env_history=mixed)
    assert done.returncode == 2 and "two clocks" in done.stderr and not (tmp_path / "p.html").exists()
    assert _cli("--clock", "time", "--page", str(tmp_path / "p.html"), env_history=mixed).returncode == 0


def test_a_run_is_kept_as_the_kind_of_command_that_made_it():
    from experiments.runner import history_kind

    assert history_kind(("ipsec-testbed", "-v", "regress", "--bisect", "a", "b", "--tree", "t")) == "bisect"
    assert history_kind(("ipsec-testbed", "regress", "--ab", "6.1", "6.12")) == "regress"
    assert history_kind(("ipsec-testbed", "reproduce", "003")) == "reproduce"
    assert history_kind(("ipsec-testbed", "sweep", "--rates", "10")) == "sweep"
    assert history_kind(("ipsec-testbed", "bench", "counted")) == "bench"
    assert history_kind(()) == "sweep"


def test_a_counted_run_on_the_generic_crypto_code_is_a_series_of_its_own(tmp_path):
    import shutil

    # the same run as if its guest had run the kernel's C crypto code (--qemu-crypto generic), or the x86 drivers
    for crypto, backend in (("generic", "qemu (generic crypto)"), ("x86", "qemu"), (None, "qemu")):
        run = tmp_path / f"run-{crypto}"
        shutil.copytree(FIXTURE, run)
        meta = json.loads((run / "meta.json").read_text())
        meta.update(backend="qemu", **({"qemu_crypto": crypto} if crypto else {}))
        (run / "meta.json").write_text(json.dumps(meta))
        assert {r.backend for r in hist.rows_of_run(str(run), "sweep")} == {backend}
    counted = [row("6.1", 52849.0, date=night(0)), row("6.1", 61000.0, date=night(1), backend="qemu (generic crypto)")]
    assert len(hist.series_of(counted)) == 2

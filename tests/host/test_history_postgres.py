"""A team's history on a real PostgreSQL server (Debian's postgresql), started here on a socket of its own.

The server listens on no TCP port at all (``listen_addresses=''``): only on a Unix socket in the test's own
directory, and stops with the test.  The package's own cluster is never touched.
"""
from __future__ import annotations

import dataclasses
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from analysis import store as st
from tests.unit.test_history import NOISE, _cli, at_once, history, row


def _pg_bin() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not found:
        pytest.fail("PostgreSQL is missing: scripts/install.sh installs Debian's postgresql", pytrace=False)
    return os.path.dirname(found[-1])


def _as_postgres(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", "postgres", "--", *argv], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def server():
    """A server of this module's own: (URL of its superuser's database, the socket's directory)."""
    base = Path(tempfile.mkdtemp(prefix="itb-pg-"))  # (pytest's own are root's alone: the server runs as postgres)
    postgres = pwd.getpwnam("postgres")
    os.chmod(base, 0o755)
    data, sock = base / "data", base / "sock"
    for d in (data, sock):
        d.mkdir()
        os.chown(d, postgres.pw_uid, postgres.pw_gid)
    bin_dir = _pg_bin()
    done = _as_postgres(f"{bin_dir}/initdb", "-D", str(data), "-U", "testbed", "--auth=trust", "-E", "UTF8")
    assert done.returncode == 0, done.stderr
    log = sock / "server.log"
    done = _as_postgres(f"{bin_dir}/pg_ctl", "-D", str(data), "-l", str(log), "-w", "-o",
                        f"-c listen_addresses='' -k {sock}", "start")
    assert done.returncode == 0, done.stdout + done.stderr + (log.read_text() if log.exists() else "")
    try:
        yield f"postgresql://testbed@/postgres?host={sock}", str(sock)
    finally:
        _as_postgres(f"{bin_dir}/pg_ctl", "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def database(server):
    """A fresh database on the server for one test; its URL."""
    url, sock = server
    import psycopg

    name = f"h{os.getpid()}_{abs(hash(os.urandom(8))) % 10 ** 8}"
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    return f"postgresql://testbed@/{name}?host={sock}"


def test_postgres_keeps_replaces_and_merges_as_sqlite_does(database, tmp_path):
    rows = history(NOISE, step_at=9, step=0.02)
    with st.open_store(database) as s:
        assert s.keep(rows) == len(rows) and s.keep(rows[:2]) == 2
        assert s.rows() == rows
    cell = str(tmp_path / "cell.sqlite")
    with st.open_store(cell) as c:
        c.keep(rows[:1] + [row("c11", NOISE[0] * 1.02, position=11, date="2026-11-29T00:00:00Z")])
    done = _cli("--history", database, "--merge", cell, "--check", env_history="off")
    assert "1 figures of new runs merged" in done.stderr, done.stderr
    assert done.returncode == 0, done.stdout  # c11 continues c10's group: no new regression
    with st.open_store(database) as s:
        assert len(s.rows()) == len(rows) + 1


def _write_many(url: str, who: int) -> None:
    with st.open_store(url) as s:
        for i in range(10):
            s.keep([row(f"w{who}", 100.0 + i, run=f"w{who}-{i}")])


def test_first_writers_at_once_on_an_empty_database_all_succeed(database):
    at_once(_write_many, database)
    with st.open_store(database) as s:
        assert len(s.rows()) == 30


def test_a_failed_write_leaves_nothing_and_a_user_without_rights_is_told_in_one_line(database, server):
    with st.open_store(database) as s:
        s.keep(history(NOISE[:3]))
        bad = [dataclasses.replace(r, run_id="bad") for r in history(NOISE[3:5])]
        with pytest.raises(st.StoreError, match="nothing of this run was written"):
            s.keep([*bad, dataclasses.replace(bad[0], point="other", value=None)])
        assert len(s.rows()) == 3
    import psycopg

    with psycopg.connect(database, autocommit=True) as db:
        db.execute("CREATE ROLE reader LOGIN")
    reader = database.replace("testbed@", "reader@")
    with st.open_store(reader) as s, pytest.raises(st.StoreError, match="cannot (read|write|set up)"):
        s.keep(history(NOISE[5:6]))
    done = _cli("--history", reader, env_history="off")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "permission denied" in done.stderr


def test_a_postgres_store_of_a_newer_version_is_refused(database):
    with st.open_store(database) as s:
        s.keep(history(NOISE[:1]))
        s.db.execute(f"UPDATE {st.VERSION_TABLE} SET version = {st.SCHEMA + 1}")
        s.db.commit()
        with pytest.raises(st.StoreError, match="newer ipsec-testbed"):
            s.keep(history(NOISE[1:2]))

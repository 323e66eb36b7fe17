"""The results store: the history's rows in an SQLite file (one per user) or a team's PostgreSQL server.

::

    store = open_store(None)                   # $IPSEC_TESTBED_HISTORY, else testbed.historyplace.default_path()
    store = open_store("/srv/ci/history.sqlite")
    store = open_store("postgresql://ci@db.example/ipsec")     # psycopg; the server's own auth
    with store:
        store.keep(rows)        # one transaction: every row of the runs, or none
        rows = store.rows()

One schema for both, versioned: the store keeps its version in ``ipsec_testbed_schema`` and :data:`MIGRATIONS`
takes an older store to this one when it is opened for writing; a store written by a newer version of the
testbed is refused (it may hold what this one would lose), as is one that is not a store.  Storing a run
again (the same run directory and start) replaces its rows.  Two runs that write at once each write their
own rows whole: SQLite takes its write lock for the transaction (``BEGIN IMMEDIATE``, waiting up to a
minute), PostgreSQL its transaction; a run that dies mid-write leaves nothing of its own behind.
"""
from __future__ import annotations

import dataclasses
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from typing import Any

from analysis.history import COLUMNS, Row, as_rows, rows_of_run
from testbed.historyplace import describe, is_url, location

#: The schema's version, and the statements that take a store from the version before to each.
SCHEMA = 1
_TYPES = {"value": "DOUBLE PRECISION", "low": "DOUBLE PRECISION", "high": "DOUBLE PRECISION", "n": "INTEGER",
          "kernel_position": "INTEGER"}
#: The tables, named as no other tool's are (a team's database holds others).
VERSION_TABLE = "ipsec_testbed_schema"
TABLE = "ipsec_testbed_results"
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (f"CREATE TABLE {VERSION_TABLE} (version INTEGER NOT NULL)",
        f"INSERT INTO {VERSION_TABLE} VALUES (0)",
        f"CREATE TABLE {TABLE} (" + ", ".join(f"{c} {_TYPES.get(c, 'TEXT')} NOT NULL" for c in COLUMNS)
        + ", PRIMARY KEY (run_id, point, arm, metric))",
        f"CREATE INDEX {TABLE}_series ON {TABLE} (clock, metric, point)"),
}
#: How long a writer waits for another's transaction, s.
BUSY_S = 60.0


class StoreError(RuntimeError):
    """The store cannot be opened, read or written: one line says what and what to do."""


class Store:
    """A connection to one store (see the module docstring); a context manager that closes it."""

    placeholder = "?"
    #: The driver's errors (a table that is not ours, permissions, a lost connection).
    errors: tuple[type[Exception], ...] = (sqlite3.Error,)

    def __init__(self, where: str, connection: Any) -> None:
        self.where = where
        self.db = connection

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    def _sql(self, text: str) -> str:
        return text.replace("?", self.placeholder)

    def _fail(self, what: str, e: Exception) -> StoreError:
        text = str(e).strip()
        why = text.splitlines()[0] if text else type(e).__name__
        return StoreError(f"history {describe(self.where)}: {what}: {why}")

    # -- schema --------------------------------------------------------------------------------------------

    def version(self) -> int:
        """The store's schema version (0: an empty database)."""
        raise NotImplementedError

    def migrate(self) -> None:
        """Bring the store to :data:`SCHEMA`, in one transaction; refuse a newer one."""
        try:
            self._begin()
            have = self.version()
            if have > SCHEMA:
                raise StoreError(f"history {describe(self.where)} was written by a newer ipsec-testbed (schema {have}; "
                                 f"this one reads up to {SCHEMA}): upgrade ipsec-testbed, or name another "
                                 "store with --history")
            cur = self.db.cursor()
            for version in range(have + 1, SCHEMA + 1):
                for statement in MIGRATIONS[version]:
                    cur.execute(statement)
                cur.execute(f"UPDATE {VERSION_TABLE} SET version = {version}")
            self.db.commit()
        except StoreError:
            self.db.rollback()
            raise
        except self.errors as e:
            self.db.rollback()
            raise self._fail("cannot set up its tables (is it a testbed history, and may you write it?)", e) from None

    def readable_version(self) -> int:
        """:meth:`version`, refused when it is newer than this testbed reads."""
        have = self.version()
        if have > SCHEMA:
            raise StoreError(f"history {describe(self.where)} was written by a newer ipsec-testbed (schema {have}; "
                             f"this one reads up to {SCHEMA}): upgrade ipsec-testbed")
        return have

    def _begin(self) -> None:
        pass

    # -- rows ----------------------------------------------------------------------------------------------

    def keep(self, rows: Sequence[Row]) -> int:
        """Store ``rows`` in one transaction, replacing any rows of their runs already there; how many."""
        if not rows:
            return 0
        self.migrate()
        marks = ", ".join("?" * len(COLUMNS))
        insert = self._sql(f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES ({marks})")
        try:
            self._begin()
            cur = self.db.cursor()
            for run_id in sorted({r.run_id for r in rows}):
                cur.execute(self._sql(f"DELETE FROM {TABLE} WHERE run_id = ?"), (run_id,))
            cur.executemany(insert, [tuple(getattr(r, c) for c in COLUMNS) for r in rows])
            self.db.commit()
        except self.errors as e:
            self.db.rollback()
            raise self._fail("cannot write its rows (nothing of this run was written)", e) from None
        return len(rows)

    def merge(self, rows: Iterable[Row]) -> int:
        """Add the runs of ``rows`` (another store's, a runner's) that are not here as they are there: new runs,
        and runs that have changed since (resumed and stored again); how many rows were added."""
        rows = list(rows)
        if not rows:
            return 0
        theirs: dict[str, list[Row]] = {}
        for r in rows:
            theirs.setdefault(r.run_id, []).append(r)
        ours: dict[str, list[Row]] = {}
        for r in self.rows():
            ours.setdefault(r.run_id, []).append(r)
        key = lambda run: sorted(dataclasses.astuple(r) for r in run)  # noqa: E731
        changed = [r for run_id, run in theirs.items() if run_id not in ours or key(ours[run_id]) != key(run)
                   for r in run]
        return self.keep(changed) if changed else 0

    def rows(self, clock: str | None = None, metric: str | None = None, kind: str | None = None) -> list[Row]:
        """The rows, oldest first, of one clock, metric or kind where given."""
        if self.readable_version() == 0:
            return []
        where, args = [], []
        for column, value in (("clock", clock), ("metric", metric), ("kind", kind)):
            if value:
                where.append(f"{column} = ?")
                args.append(value)
        sql = f"SELECT {', '.join(COLUMNS)} FROM {TABLE}" + (f" WHERE {' AND '.join(where)}" if where else "")
        return as_rows(dict(zip(COLUMNS, r, strict=True)) for r in self._query(sql + " ORDER BY date, run_id", args))

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        try:
            cur = self.db.cursor()
            cur.execute(self._sql(sql), tuple(args))
            out = cur.fetchall()
            self.db.commit()
            return out
        except self.errors as e:
            self.db.rollback()
            raise self._fail("cannot read it", e) from None


class SqliteStore(Store):
    def version(self) -> int:
        try:
            tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if VERSION_TABLE not in tables:
                if tables:
                    raise StoreError(f"history {self.where} is an SQLite database but not a testbed history (it has "
                                     f"tables {', '.join(sorted(tables))}): name another file with --history")
                return 0
            return int(self.db.execute(f"SELECT version FROM {VERSION_TABLE}").fetchone()[0])
        except (sqlite3.DatabaseError, ValueError, TypeError) as e:
            raise self._fail("is not an SQLite database (name another file with --history)", e) from None

    def _begin(self) -> None:
        if not self.db.in_transaction:
            self.db.execute("BEGIN IMMEDIATE")


class PostgresStore(Store):
    placeholder = "%s"
    #: The advisory lock a writer holds for its transaction (two first runs would each create the tables).
    LOCK = 0x69707365

    def __init__(self, where: str, connection: Any) -> None:
        import psycopg

        super().__init__(where, connection)
        self.errors = (psycopg.Error,)

    def _begin(self) -> None:
        self.db.cursor().execute(f"SELECT pg_advisory_xact_lock({self.LOCK})")

    def version(self) -> int:
        cur = self.db.cursor()
        try:
            # (no commit: inside migrate() that would end the transaction and the writers' lock with it)
            cur.execute(f"SELECT to_regclass('{VERSION_TABLE}') IS NOT NULL")
            if not cur.fetchone()[0]:
                return 0
            cur.execute(f"SELECT version FROM {VERSION_TABLE}")
            return int(cur.fetchone()[0])
        except (*self.errors, ValueError, TypeError) as e:
            self.db.rollback()
            raise self._fail("cannot read its schema version", e) from None


def open_store(history: str | None, *, create: bool = True) -> Store | None:
    """The store ``history`` names (see :func:`location`), connected; None when the history is off.

    ``create``: make the SQLite file (and its directory) when missing; without it a missing file is refused.
    """
    where = location(history)
    if where is None:
        return None
    if is_url(where):
        try:
            import psycopg
        except ImportError:
            raise StoreError("a PostgreSQL history needs psycopg (pip install 'psycopg[binary]'; ./run install "
                             "installs it)") from None
        try:
            return PostgresStore(where, psycopg.connect(where, connect_timeout=10))
        except psycopg.Error as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise StoreError(f"history {describe(where)}: cannot connect ({first}): check the URL, that the server "
                             "runs and lets this user in") from None
    if not create and not os.path.exists(where):
        raise StoreError(f"history {where}: no such file (runs write it; --history names another)")
    try:
        os.makedirs(os.path.dirname(os.path.abspath(where)), exist_ok=True)
        db = sqlite3.connect(where, timeout=BUSY_S, isolation_level="DEFERRED")
        _write_ahead(db)
    except (OSError, sqlite3.Error) as e:
        raise StoreError(f"history {where}: cannot open it ({e}): check the path and its permissions, or name "
                         "another with --history") from None
    return SqliteStore(where, db)


def _write_ahead(db: sqlite3.Connection) -> None:
    """Put the store in write-ahead-log mode (readers beside a writer).  A new file's first connections all ask
    at once (the two sides of a paired A/B); SQLite answers the losers "database is locked" at once instead of
    calling its busy handler, so ask again until :data:`BUSY_S` has passed."""
    deadline = time.monotonic() + BUSY_S
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def keep_run(run_dir: str, kind: str, kernel: str | None, history: str | None) -> tuple[int, str] | None:
    """Store the rows of one run directory (:func:`analysis.history.rows_of_run`); (how many, where), or None when
    the history is off.  :class:`StoreError` when the store refuses them."""
    store = open_store(history)
    if store is None:
        return None
    with store:
        return store.keep(rows_of_run(run_dir, kind, kernel)), describe(store.where)

"""Run directories: the one module that reads and writes them.

::

    RUN/results.jsonl    one JSON object per measured point, appended and fsynced as measured
    RUN/meta.json        what the results depend on and each run that wrote into the directory
    RUN/.lock            held (flock) by the one run writing into the directory
    RUN/report.html ...  anything else, written with :func:`atomic_write`

A run may be killed at any moment and resumed later, appending to the same file, so the
reader expects, and survives with a warning:

* a trailing partial line (the run was killed in the middle of a write);
* a partial line in the middle, left by a killed run and followed by the resumed run's records;
* a partial line glued to the first record of the resumed run (``{"topol{"topology": ...}``),
  when the resumed writer appended without starting a new line: the complete record is kept.

Anything else that is not a JSON object per line is an error naming the file and line: nothing
here guesses at data it cannot read.  Standard library only.

Both files carry the version of their layout, ``"schema"`` (:data:`SCHEMA`): every record and
meta.json.  A directory written before versions were recorded has none and is schema 1, read as
it is; one written by a newer version than this (a record or meta.json with a higher schema) is
refused in one line that says so, rather than read wrongly.
"""
from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

from testbed import counting
from testbed.errors import Refused
from testbed.record import Meta, Record, schema_of

R = TypeVar("R", bound=Record)

log = logging.getLogger(__name__)

RESULTS_FILE = "results.jsonl"
META_FILE = "meta.json"
LOCK_FILE = ".lock"

#: Fields every record carries (a measured point's); the rest are optional (missing = null).
REQUIRED_FIELDS = ("profile", "size_bytes", "goodput_mbps")

#: The layout of records and meta.json this version writes and reads.  1: before versions were
#: recorded (no "schema" field); 2: meta.json names the UML kernel and why it was chosen.
SCHEMA = 2

PathLike = str | os.PathLike


class ResultsError(ValueError):
    """A results file that cannot be read as runs write it."""


class RunDirBusy(Refused):
    """Another run is writing to this run directory."""


def now_iso() -> str:
    """The time now, UTC, as meta.json and records write it: the user's clock, in a counted guest too."""
    return datetime.datetime.fromtimestamp(counting.user_time(), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- whole files ----------------------------------------------------------------------------

def atomic_write(path: PathLike, text: str) -> None:
    """Write ``text`` to ``path`` so that a crash leaves the old file or the new one, never half.

    Written beside, flushed to disk, renamed over, and the directory synced.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _sync_directory(path.parent)


def _sync_directory(path: PathLike) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def publish_directory(staging: PathLike, path: PathLike) -> None:
    """Put the directory ``staging`` (whole, its files written) in place as ``path``, replacing what was
    there: a crash leaves the old one, or none, or the new one, never half of one."""
    path = Path(path)
    if path.exists():
        shutil.rmtree(path)
    os.rename(staging, path)
    _sync_directory(path.parent)


def read_json(path: PathLike) -> dict:
    """A JSON object file, or ``{}`` when it is missing or unreadable (a run killed before writing it)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json(path: PathLike, data: Any, indent: int = 2) -> None:
    atomic_write(path, json.dumps(data, indent=indent, sort_keys=True, default=str) + "\n")


# -- the lock -------------------------------------------------------------------------------

def try_lock(fd: int, shared: bool = False) -> bool:
    """An exclusive (or ``shared``) ``flock`` on ``fd`` if no one holds one that excludes it (False: someone
    does)."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise
        return False
    return True


@contextlib.contextmanager
def locked(run_dir: PathLike, what: str = "run") -> Iterator[None]:
    """Hold ``run_dir``'s lock for the block, or raise :class:`RunDirBusy` at once.

    An advisory ``flock`` on ``run_dir/.lock``; the kernel drops it when the holder
    exits, even by SIGKILL, so a dead run never leaves the directory locked.  A
    directory made here that is still empty afterwards (the run was refused before
    it measured anything) is removed again.
    """
    run_dir = os.fspath(run_dir)
    made = not os.path.isdir(run_dir)
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        if not try_lock(fd):
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise RunDirBusy(f"{run_dir} is being written by another {what} (pid {holder}): wait for it "
                             "to finish, or give this one another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            if made and os.listdir(run_dir) == [LOCK_FILE]:
                os.unlink(path)
                os.rmdir(run_dir)
    finally:
        os.close(fd)


# -- results.jsonl ----------------------------------------------------------------------------

def open_results(run_dir: PathLike) -> IO[str]:
    """``run_dir/results.jsonl`` for appending (made if missing), a partial last line (a killed
    write) cut off first."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, RESULTS_FILE)
    if os.path.exists(path):
        with open(path, "rb+") as f:
            data = f.read()
            if data and not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)
    return open(path, "a", encoding="utf-8")


def append(f: IO[str], record: dict) -> None:
    """One record, on the disk before the next point starts (with its :data:`SCHEMA`)."""
    f.write(json.dumps({**record, "schema": SCHEMA}, sort_keys=True) + "\n")
    f.flush()
    os.fsync(f.fileno())


def load_results(run_dir: PathLike, required: Sequence[str] = REQUIRED_FIELDS,
                 kind: type[R] = Record) -> list[R]:
    """The records of ``run_dir/results.jsonl``, in file order (see the module docstring), as
    ``kind`` (a sweep's :class:`~testbed.record.Record`; a transactions part's,
    :class:`~testbed.record.TransactionRecord`, with ``required=()``).

    Partial lines left by a killed run are skipped with a warning; a line that is valid JSON
    but not an object, a record missing one of ``required`` or with a field a record does not
    have, raises :class:`ResultsError` with the file and line number.
    """
    path = Path(run_dir) / RESULTS_FILE
    try:
        text = path.read_text(encoding="utf-8", errors="replace")  # a cut may split a character
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such file (is {run_dir} a run directory?)") from None
    lines = text.split("\n")
    # text ending in "\n" gives a last empty element; anything else there is an unterminated line
    records: list[R] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        record = _parse_line(path, number, line, unterminated=number == len(lines))
        if record is None:
            continue
        _check_schema(schema_of(record), f"{path}:{number}")
        missing = [f for f in required if f not in record]
        if missing:
            raise ResultsError(f"{path}:{number}: record lacks {', '.join(missing)} "
                               f"(required: {', '.join(required)})")
        try:
            records.append(kind.from_json(record))
        except (TypeError, ValueError) as e:
            raise ResultsError(f"{path}:{number}: {e}") from None
    log.debug("%s: %d records", path, len(records))
    return records


def load_existing(run_dir: PathLike, required: Sequence[str] = REQUIRED_FIELDS,
                  kind: type[R] = Record) -> list[R]:
    """:func:`load_results`, or ``[]`` when the directory has no results yet."""
    try:
        return load_results(run_dir, required, kind)
    except ResultsError:
        if not (Path(run_dir) / RESULTS_FILE).exists():
            return []
        raise


def _parse_line(path: Path, number: int, line: str, *, unterminated: bool) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        value = None
    else:
        if not isinstance(value, dict):
            raise ResultsError(f"{path}:{number}: expected one JSON object per line, got {type(value).__name__}")
        return value
    if not line.lstrip().startswith("{"):
        raise ResultsError(f"{path}:{number}: not a JSON record: {line[:80]!r}")
    where = "last line, no newline" if unterminated else "followed by more records"
    # A killed run's partial record with the resumed run's first record glued on: keep the latter.
    decoder = json.JSONDecoder()
    start = line.find("{", 1)
    while start != -1:
        try:
            value, end = decoder.raw_decode(line, start)
        except json.JSONDecodeError:
            value, end = None, -1
        if isinstance(value, dict) and not line[end:].strip():
            log.warning("%s:%d: skipped a partial record left by an interrupted run (%d bytes, %s); "
                        "kept the complete record that follows it on the same line",
                        path, number, start, where)
            return value
        start = line.find("{", start + 1)
    log.warning("%s:%d: skipped a partial record left by an interrupted run (%d bytes, %s)",
                path, number, len(line), where)
    return None


def _check_schema(schema: Any, where: str) -> None:
    """Refuse what a newer version wrote (see the module docstring); ``schema``: the file's (1 where it
    names none)."""
    if not isinstance(schema, int) or schema > SCHEMA:
        raise ResultsError(f"{where}: written by a newer ipsec-testbed (schema {schema!r}; this version reads "
                           f"up to {SCHEMA}): upgrade ipsec-testbed to read it")


# -- meta.json ----------------------------------------------------------------------------------

def load_meta(run_dir: PathLike) -> Meta:
    """``run_dir/meta.json`` as a :class:`~testbed.record.Meta`; an empty one with a warning when it is
    missing or unreadable, and :class:`ResultsError` when a newer version wrote it (see the module
    docstring).

    The metadata labels results (kernel, backend, CPU, command line), so a run whose
    ``meta.json`` was never finished can still be analysed.
    """
    path = Path(run_dir) / META_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        log.warning("%s: missing; kernel, CPU and command line unknown", path)
        return Meta()
    except json.JSONDecodeError as e:
        log.warning("%s: not valid JSON (%s); kernel, CPU and command line unknown", path, e)
        return Meta()
    if not isinstance(data, dict):
        log.warning("%s: expected a JSON object, got %s; ignored", path, type(data).__name__)
        return Meta()
    _check_schema(schema_of(data), str(path))
    try:
        return Meta.from_json(data, str(path))
    except ValueError as e:
        log.warning("%s; kernel, CPU and command line unknown", e)
        return Meta()


def read_meta(run_dir: PathLike) -> Meta:
    """``run_dir/meta.json`` as it is, quietly an empty :class:`~testbed.record.Meta` when it is missing
    or unreadable, whatever version wrote it: a look at a directory, not a reading of its results."""
    try:
        return Meta.from_json(json.loads((Path(run_dir) / META_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return Meta()


def update_meta(run_dir: PathLike, change: Callable[[Meta], Meta]) -> Meta:
    """Read ``meta.json``, write back what ``change`` makes of it, atomically; returns that."""
    path = Path(run_dir) / META_FILE
    meta = change(Meta.from_json(read_json(path), str(path)))
    write_json(path, meta.to_json())
    return meta


def start_run(run_dir: PathLike, machine: Mapping[str, Any], **fields: Any) -> Meta:
    """Record in meta.json that a run starts writing into ``run_dir``: ``machine`` (kernel,
    backend, CPU, versions) and ``fields`` (:class:`~testbed.record.Meta`'s names) at the top, a new
    entry in ``runs``."""
    def change(meta: Meta) -> Meta:
        # never append to what a newer version wrote
        _check_schema(schema_of(meta.to_json()), str(Path(run_dir) / META_FILE))
        return meta.started_run(machine, fields, schema=SCHEMA, now=now_iso())
    os.makedirs(run_dir, exist_ok=True)
    return update_meta(run_dir, change)


def finish_run(run_dir: PathLike, *, complete: bool | None = None, interrupted: str | None = None,
               **counts: Any) -> Meta:
    """Record that the latest run ended: ``counts`` (:class:`~testbed.record.MetaRun`'s names) and
    ``interrupted`` (the signal that ended it) go into its ``runs`` entry; ``complete``, if given,
    also at the top, and ``interrupted`` too: the top of meta.json says how the last run ended."""
    return update_meta(run_dir, lambda meta: meta.finished_run(counts, now=now_iso(), complete=complete,
                                                               interrupted=interrupted))

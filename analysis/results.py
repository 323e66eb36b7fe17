"""Read a sweep's run directory: ``results.jsonl`` (one record per measured point) and ``meta.json``.

A run directory is written by the sweep as it goes, and a sweep may be killed at any moment and
resumed later, appending to the same file. So the reader expects, and survives with a warning:

* a trailing partial line (the run was killed in the middle of a write);
* a partial line in the middle, left by a killed run and followed by the resumed run's records;
* a partial line glued to the first record of the resumed run (``{"topol{"topology": ...}``),
  when the resumed writer appended without starting a new line: the complete record is kept.

Anything else that is not a JSON object per line is an error naming the file and line: the
analysis never guesses at data it cannot read.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Union

log = logging.getLogger(__name__)

RESULTS_FILE = "results.jsonl"
META_FILE = "meta.json"

#: Fields every record must carry; the rest are optional (missing = null).
REQUIRED_FIELDS = ("profile", "size_bytes", "goodput_mbps")

PathLike = Union[str, os.PathLike]


class ResultsError(ValueError):
    """A results file that cannot be read as the sweep writes it."""


def load_results(run_dir: PathLike) -> list[dict[str, Any]]:
    """The records of ``run_dir/results.jsonl``, in file order.

    Partial lines left by a killed run are skipped with a warning (see the module docstring);
    a line that is valid JSON but not an object, or a record missing one of
    :data:`REQUIRED_FIELDS`, raises :class:`ResultsError` with the file and line number.
    """
    path = Path(run_dir) / RESULTS_FILE
    try:
        text = path.read_text(encoding="utf-8", errors="replace")  # a cut may split a character
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such file (is {run_dir} a sweep's run directory?)") from None
    lines = text.split("\n")
    # text ending in "\n" gives a last empty element; anything else there is an unterminated line
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        is_last = number == len(lines)
        record = _parse_line(path, number, line, unterminated=is_last)
        if record is None:
            continue
        missing = [f for f in REQUIRED_FIELDS if f not in record]
        if missing:
            raise ResultsError(f"{path}:{number}: record lacks {', '.join(missing)} "
                               f"(required: {', '.join(REQUIRED_FIELDS)})")
        records.append(record)
    log.debug("%s: %d records", path, len(records))
    return records


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


def load_meta(run_dir: PathLike) -> dict[str, Any]:
    """``run_dir/meta.json`` as a dict; ``{}`` with a warning when it is missing or unreadable.

    The metadata only labels the report (kernel, backend, CPU, command line), so a run whose
    ``meta.json`` was never finished can still be analysed.
    """
    path = Path(run_dir) / META_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        log.warning("%s: missing; the report will lack kernel, CPU and command line", path)
        return {}
    except json.JSONDecodeError as e:
        log.warning("%s: not valid JSON (%s); the report will lack kernel, CPU and command line", path, e)
        return {}
    if not isinstance(meta, dict):
        log.warning("%s: expected a JSON object, got %s; ignored", path, type(meta).__name__)
        return {}
    return meta

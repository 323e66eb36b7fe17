"""The history's rows in KernelCI's reporting format (KCIDB I/O, schema 5), checked by kcidb-io's own validator.

KCIDB's objects, as the rows give them:

- a *checkout* per kernel source (its name, version and git commit): what was built;
- a *build* per kernel image (the recipe's cache key, or Debian's package) on its architecture (``x86_64``
  for the counted backend's guest, ``um`` for User-Mode Linux);
- a *test* per row: ``path`` ``ipsec_testbed.<point>.<metric>``, status ``DONE`` (a measurement, not a
  verdict), and the figure in ``number`` (``value`` and ``unit``); its interval, repetitions, clock and run in
  ``misc``, the machine in ``environment``.

Every id starts with the origin (the name KernelCI gave the submitter; ``ipsec_testbed`` by default).  The file
is what ``kcidb-submit`` takes (KernelCI's credentials needed: see docs/history.md); this module writes, never
sends.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence

from analysis.history import HistoryError, Row
from analysis.regress import METRICS
from testbed.rundir import atomic_write

ORIGIN = "ipsec_testbed"
ORIGIN_RE = re.compile(r"^[a-z0-9_]+$")
ARCHITECTURE = {"qemu": "x86_64", "uml": "um"}


def _id(origin: str, *parts: object) -> str:
    return f"{origin}:{hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:20]}"


def _slug(text: str) -> str:
    """``text`` as a KCIDB path node (letters, digits, _ and -); a digest of it appended when that lost letters
    other than spaces and punctuation (two points or arms told apart only by non-ASCII letters stay two)."""
    slug = re.sub(r"_+", "_", re.sub(r"[^a-zA-Z0-9_-]", "_", text)).strip("_") or "point"
    if any(c.isalnum() and not c.isascii() for c in text):
        slug += "_" + hashlib.sha256(text.encode()).hexdigest()[:8]
    return slug


#: What KCIDB takes as a date-time (RFC 3339).
DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def report(rows: Sequence[Row], origin: str = ORIGIN) -> dict:
    """The KCIDB I/O document of ``rows`` (not yet validated: :func:`validate`)."""
    if not ORIGIN_RE.match(origin):
        raise HistoryError(f"KCIDB origin {origin!r}: lower-case letters, digits and _ only (the name KernelCI "
                           "gave you, e.g. ipsec_testbed)")
    checkouts, builds, tests = {}, {}, []
    for r in rows:
        checkout = (r.kernel, r.kernel_version, r.kernel_commit)
        checkout_id = _id(origin, "checkout", *checkout)
        if checkout_id not in checkouts:
            c = {"id": checkout_id, "origin": origin, "valid": True,
                 "misc": {"kernel": r.kernel, "version": r.kernel_version, "source": r.kernel_source}}
            if re.fullmatch(r"[0-9a-f]{40}", r.kernel_commit):
                c["git_commit_hash"] = r.kernel_commit
            checkouts[checkout_id] = c
        build_id = _id(origin, "build", *checkout, r.recipe_key, r.backend)
        if build_id not in builds:
            builds[build_id] = {"id": build_id, "checkout_id": checkout_id, "origin": origin, "status": "PASS",
                                "architecture": ARCHITECTURE.get(r.backend, "x86_64"),
                                "config_name": r.recipe_key or r.kernel_source,
                                "misc": {"backend": r.backend}}
        name, unit, better = METRICS[r.metric]
        test = {
            "id": _id(origin, "test", r.run_id, r.point, r.arm, r.metric), "build_id": build_id, "origin": origin,
            "path": f"{origin}.{_slug(r.point + ('_' + r.arm if r.arm else ''))}.{r.metric}",
            "status": "DONE",
            "number": {"value": r.value, "unit": unit},
            "comment": f"{name} at {r.point}{f' (arm {r.arm})' if r.arm else ''}, {r.clock}",
            "environment": {"comment": r.machine, "misc": {"backend": r.backend, "clock": r.clock}},
            "misc": {"low": r.low, "high": r.high, "n": r.n, "better": "higher" if better > 0 else "lower",
                     "clock": r.clock, "kind": r.kind, "run_dir": r.run_dir, "testbed": r.project}}
        if DATE_TIME.match(r.date):  # (a run added without its start has none)
            test["start_time"] = r.date
        tests.append(test)
    return {"version": {"major": 5, "minor": 3}, "checkouts": list(checkouts.values()),
            "builds": list(builds.values()), "tests": tests}


def validate(document: dict) -> None:
    """kcidb-io's validator on ``document``; :class:`HistoryError` naming the first field it refuses."""
    try:
        import jsonschema
        from kcidb_io import schema
    except ImportError:
        raise HistoryError("--kcidb needs kcidb-io (pip install kcidb-io; ./run install installs it)") from None
    try:
        schema.LATEST.validate(document)
    except jsonschema.exceptions.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "the document"
        raise HistoryError(f"KCIDB: {where}: {e.message}") from None


def write(rows: Sequence[Row], path: str, origin: str = ORIGIN) -> dict:
    """``rows`` as a validated KCIDB document at ``path`` (nothing written when it is not valid)."""
    document = report(rows, origin)
    validate(document)
    atomic_write(path, json.dumps(document, indent=1) + "\n")
    return document

"""docs/records.md, generated from :mod:`testbed.record`: ``python -m testbed.recordpage [--check]``."""
from __future__ import annotations

import dataclasses
import sys

from testbed import pages
from testbed.record import FIELDS, PLAIN_PROFILE, POINT_FIELDS, Bound, Keying, Record, TransactionRecord, Tunnel

PAGE = pages.REPO / "docs" / "records.md"


def render() -> str:
    """docs/records.md: every field of a record, the bounds, and a transactions record's own fields."""
    lines = ["# The result record", "",
             "One line of a run directory's `results.jsonl` per repetition of a point, generated from",
             "`testbed/record.py` by `python -m testbed.recordpage` (a unit test fails when they disagree).",
             "The report adjusts CPU costs to the run's common machine speed: each keeps its measured",
             "value as `<name>_measured`, and `speed_factor` says by what it was multiplied.", "",
             f"A point is identified by {', '.join(f'`{f}`' for f in POINT_FIELDS)};",
             "its repetitions share these. A record counts towards its point's means when it did not fail,",
             "has a goodput, and is not an anomaly.", "",
             "| field | meaning |", "|---|---|"]
    lines += [f"| `{f.name}` | {f.metadata['doc']} |" for f in dataclasses.fields(Record)]
    lines += ["", "## What bounded a point (`bound`)", "", "| bound | meaning | in the means |", "|---|---|---|"]
    lines += [f"| `{b.value}` | {b.meaning} | {'yes' if b.counted else 'no'} |" for b in Bound]
    lines += ["", "## How the SAs were made (`keying`)", "", "| keying | meaning |", "|---|---|"]
    lines += [f"| `{k.value}` | {k.meaning} |" for k in Keying]
    lines += ["", "## What carried the traffic", "",
              "A record has no field for it: its `profile` says it. The plain baseline "
              f"(`{PLAIN_PROFILE}`) has no tunnel; every other profile is "
              + " or ".join(f"`{t.value}`" for t in Tunnel) + " (`testbed.record.Tunnel`)."]
    own = [f for f in dataclasses.fields(TransactionRecord) if f.name not in FIELDS]
    lines += ["", "## A request and response part's record", "",
              "Seed 002's latency part times transactions instead of moving bulk data: its records have",
              "the fields above (no goodput, no bound) and these.", "",
              "| field | meaning |", "|---|---|"]
    lines += [f"| `{f.name}` | {f.metadata['doc']} |" for f in own]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return pages.main("testbed.recordpage", PAGE, render, "testbed/record.py", argv)


if __name__ == "__main__":
    sys.exit(main())

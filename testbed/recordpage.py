"""docs/records.md and docs/meta.md, generated from :mod:`testbed.record`:
``python -m cli.pages`` writes them."""
from __future__ import annotations

import dataclasses

from testbed import pages
from testbed.record import (
    FIELDS,
    MACHINE_FIELDS,
    PLAIN_PROFILE,
    POINT_FIELDS,
    Bound,
    Keying,
    Meta,
    MetaPart,
    MetaRun,
    MetaScale,
    MetaSweep,
    MetaVersions,
    Record,
    TransactionRecord,
    Tunnel,
)

PAGE = pages.REPO / "docs" / "records.md"
META_PAGE = pages.REPO / "docs" / "meta.md"


def render() -> str:
    """docs/records.md: every field of a record, the bounds, and a transactions record's own fields."""
    lines = ["# The result record", "",
             "One line of a run directory's `results.jsonl` per repetition of a point, generated from",
             "`testbed/record.py` by `python -m cli.pages` (a unit test fails when they disagree).",
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
              "Its `profile` says it, and each results.jsonl line repeats it under `tunnel` for those "
              "who read the lines (`jq 'select(.tunnel == \"wireguard\")'`). The plain baseline "
              f"(`{PLAIN_PROFILE}`) has no tunnel; every other profile is "
              + " or ".join(f"`{t.value}`" for t in Tunnel) + " (`testbed.record.Tunnel`)."]
    own = [f for f in dataclasses.fields(TransactionRecord) if f.name not in FIELDS]
    lines += ["", "## A request and response part's record", "",
              "Seed 002's latency part times transactions instead of moving bulk data: its records have",
              "the fields above (no goodput, no bound) and these.", "",
              "| field | meaning |", "|---|---|"]
    lines += [f"| `{f.name}` | {f.metadata['doc']} |" for f in own]
    return "\n".join(lines) + "\n"


def _fields(kind: type) -> list[str]:
    return ["| field | meaning |", "|---|---|",
            *(f"| `{f.name}` | {f.metadata['doc']} |" for f in kind.known())]


def _summary(kind: type) -> str:
    """The first paragraph of ``kind``'s docstring, on one line, in Markdown."""
    first = (kind.__doc__ or "").split("\n\n")[0]
    return " ".join(line.strip() for line in first.splitlines()).replace("``", "`")


def render_meta() -> str:
    """docs/meta.md: every field of meta.json, and of the objects in it."""
    lines = ["# meta.json", "",
             "What a run directory's results depend on, and each run that wrote into it: one JSON object,",
             "rewritten (atomically) when a run starts and when it ends. Generated from `testbed/record.py`",
             "(`Meta` and the objects in it) by `python -m cli.pages` (a unit test fails when they",
             "disagree); `testbed/rundir.py` reads and writes the file through them.", "",
             "Every field may be absent: a run killed before it wrote one, a file from an older version.",
             "A file is written back as it was read: a field it holds as null stays null, one it does not",
             "hold stays absent, and fields this version does not know are kept as they were. One whose",
             "`schema` is newer than this version's is refused.", "",
             "A regression baseline keeps the machine of it: " + ", ".join(f"`{f}`" for f in MACHINE_FIELDS) + ".",
             "",
             *_fields(Meta)]
    for title, kind in ((f"`versions` ({MetaVersions.__name__})", MetaVersions),
                        (f"`scale` ({MetaScale.__name__})", MetaScale),
                        (f"`sweep`, and each part's `spec` ({MetaSweep.__name__})", MetaSweep),
                        (f"Each of `parts` ({MetaPart.__name__})", MetaPart),
                        (f"Each of `runs` ({MetaRun.__name__})", MetaRun)):
        lines += ["", f"## {title}", "", _summary(kind), "", *_fields(kind)]
    return "\n".join(lines) + "\n"

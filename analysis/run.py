"""A run directory's results evaluated: its points aggregated and their IPsec/plain ratios (pure)."""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

from analysis.stats import Aggregate, Ratio, aggregate, normalize
from testbed.record import Meta, Record, as_meta, as_records
from testbed.rundir import load_meta, load_results


@dataclasses.dataclass(frozen=True, eq=False)
class RunData:
    """One run directory's results, aggregated, with the label it carries in comparisons."""

    label: str
    meta: Meta
    records: list[Record]
    aggregates: list[Aggregate]
    ratios: list[Ratio]
    run_dir: str | None = None

    @classmethod
    def from_records(cls, records: Sequence[Record | Mapping[str, Any]],
                     meta: Meta | Mapping[str, Any] | None = None, *, label: str | None = None,
                     run_dir: str | None = None) -> RunData:
        meta = as_meta(meta)
        records = as_records(records)
        aggs = aggregate(records)
        return cls(label=label or run_label(meta, records), meta=meta, records=records,
                   aggregates=aggs, ratios=normalize(aggs), run_dir=run_dir)

    @classmethod
    def from_dir(cls, run_dir: str | os.PathLike, *, label: str | None = None) -> RunData:
        return cls.from_records(load_results(run_dir), load_meta(run_dir), label=label, run_dir=str(run_dir))


def run_label(meta: Meta, records: Sequence[Record] = ()) -> str:
    """"uml · kernel 6.1.176" from the metadata, or from the records when the metadata lacks it."""
    first = records[0] if records else Record()
    backend = meta.backend or first.backend or "unknown backend"
    release = meta.kernel_release or first.kernel_release or "unknown"
    return f"{backend} · kernel {release}"

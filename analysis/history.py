"""The history of results: every run's figures as rows, kernels in order, and the change points among them.

A *row* is one figure of one run: a point's metric (its mean over the run's repetitions, with the 95 %
interval and the samples), on one kernel, on one backend and clock, on one machine, from one commit of the
project, on one date (:class:`Row`).  :func:`rows_of_run` makes them from a run directory; :mod:`analysis.store`
keeps them (SQLite, or a team's PostgreSQL); ``ipsec-testbed history`` shows them.

A *series* is what one chart line shows: one point and metric on one clock (a figure counted in instructions
and one timed never share a series, nor a chart), kernels in order (:func:`kernel_order`: by version, then by
position in their git history, then by when they were first measured).  :func:`changes` finds its change
points with FD.io CSIT's ``jumpavg`` (the minimum description length split of the kernels' run means into
groups of one normal distribution each), labelled regression or progression by the metric's better side, with
their size.  :func:`check` is the nightly gate: a kernel first measured in the last night starts a regression
group.

Pure functions on rows; no database here.
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from analysis.regress import METRICS, point_words
from analysis.stats import Summary
from testbed import kernelsource
from testbed.record import Bound, Group
from testbed.rundir import load_meta, load_results

#: The figures kept: the gate's metrics (goodput, the CPU costs timed and counted).
KEPT = tuple(METRICS)
#: What the run did, as rows say it.
KINDS = ("sweep", "regress", "bisect", "reproduce", "bench")


class HistoryError(ValueError):
    """Rows that cannot be read or shown as asked (one line says what and what to do)."""


@dataclasses.dataclass(frozen=True)
class Row:
    """One figure of one run (see the module docstring); the store's columns, in order."""

    run_id: str               # the run: a digest of its directory and start, the same when it is stored again
    kind: str                 # sweep, regress, bisect, reproduce, bench
    kernel: str               # as chosen: debian, recipe, 6.1, 6.12, PATH@REF, 6.1+patch:FILE; else uname -r
    kernel_version: str       # its version (make kernelversion, or uname -r)
    kernel_source: str        # debian, recipe, package, tarball, git, image, running (the machine's own)
    kernel_commit: str        # the git commit of a PATH@REF kernel, else ""
    kernel_position: int      # the commit's place in its history (git rev-list --count), else -1
    recipe_key: str           # the recipe's cache key of a kernel the project built, else ""
    backend: str              # uml, qemu, host; qemu (generic crypto) for --qemu-crypto generic
    clock: str                # instructions (counted) or time
    profile: str
    point: str                # the point in words (the part's name first, in a reproduction)
    arm: str                  # the arm of an A/B within one run, else ""
    metric: str               # a record field of analysis.regress.METRICS
    value: float              # the mean over the run's repetitions
    low: float                # its 95 % interval
    high: float
    n: int                    # repetitions
    samples: str              # each repetition's value, JSON
    machine: str              # the host's CPU model and CPU count, and its name
    project: str              # the testbed's commit
    date: str                 # when the run started, ISO 8601 UTC
    run_dir: str

    @property
    def series(self) -> tuple[str, ...]:
        """What one chart line shows: the clock, the point, its arm, the metric; a timed figure also by its backend
        and machine (a time from another backend or machine is another quantity), a counted one by its backend."""
        where = (self.backend, self.machine) if self.clock != "instructions" else (self.backend, "")
        return (self.clock, *where, self.point, self.arm, self.metric)

    @property
    def key(self) -> str:
        """The kernel as the history tells kernels apart: a git tree's by its commit (its name says which, the ref
        resolved when the run was kept), any other's by its name and version (Debian's 6.1 of two point releases
        is two kernels)."""
        return self.kernel if self.kernel_commit else f"{self.kernel} ({self.kernel_version})"

    def values(self) -> list[float]:
        return [float(x) for x in json.loads(self.samples)] if self.samples else [self.value]


COLUMNS = tuple(f.name for f in dataclasses.fields(Row))


def point_name(point: Group) -> str:
    """The point as a verdict names it, and its clients where there are several."""
    return point_words(point) + (f" x{point.clients}" if point.clients and point.clients > 1 else "")


def _parts(run_dir: str) -> list[tuple[str, str]]:
    """(part name, directory) of every sweep in a run directory: itself, or a reproduction's parts."""
    if os.path.exists(os.path.join(run_dir, "results.jsonl")):
        return [("", run_dir)]
    return [(name, os.path.join(run_dir, name)) for name in sorted(os.listdir(run_dir))
            if os.path.exists(os.path.join(run_dir, name, "results.jsonl"))]


@dataclasses.dataclass(frozen=True)
class KernelId:
    """The kernel columns of a row."""

    kernel: str
    version: str
    source: str
    commit: str = ""
    position: int = -1


def kernel_of(meta: Any, name: str | None) -> KernelId:
    """The kernel a run measured: the name it was chosen by (None: the backend's default), from its meta."""
    version = meta.kernel_version or meta.kernel_release or ""
    origin = meta.kernel_origin or "running"  # (none: the kernel this machine runs, named by its release)
    if not name:
        return KernelId(kernel="debian" if origin == "debian" else (meta.kernel_release or origin),
                        version=version, source=origin)
    try:
        parsed = kernelsource.parse(name)
    except kernelsource.KernelNameError:
        return KernelId(kernel=name, version=version, source="image")
    commit, position = "", -1
    if parsed.kind == "git":
        commit, position = kernelsource.commit_and_place(parsed.base, parsed.ref or "HEAD")
        if commit:  # a ref that moves (HEAD, master) names another kernel every night: kept by its commit
            name = parsed.with_ref(commit).canonical
    return KernelId(kernel=name, version=version, source=parsed.kind, commit=commit, position=position)



def recipe_key_of(meta: Any) -> str:
    """The recipe's cache key of a kernel the project built (its directory's name in the cache), else ""."""
    if meta.kernel_recipe_key:
        return meta.kernel_recipe_key
    path = meta.kernel_path or ""
    parent = os.path.dirname(path)
    return os.path.basename(parent) if os.path.basename(os.path.dirname(parent)) == "kernels" else ""


def machine_of(meta: Any) -> str:
    host = meta.host_cpu_model or meta.cpu_model or "unknown CPU"
    return f"{host}, {os.cpu_count()} CPUs, {os.uname().nodename}"


def run_id_of(run_dir: str, started: str | None) -> str:
    """A run's id: the same for the same machine, run directory and start, so that storing it again replaces its
    rows (and two runners' runs into the same directory in the same second stay two)."""
    text = f"{os.uname().nodename}\n{os.path.realpath(run_dir)}\n{started or ''}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def backend_of(meta) -> str:
    """The backend a run measured on, as the history tells series apart: a counted guest that ran the kernel's
    generic crypto code (``--qemu-crypto generic``) counts other instructions than one that ran the x86 drivers."""
    from testbed.backends.qemu import crypto_tag

    backend, tag = meta.backend or "", crypto_tag(meta.qemu_crypto)
    return f"{backend} ({tag} crypto)" if tag else backend


def rows_of_run(run_dir: str, kind: str, kernel: str | None = None) -> list[Row]:
    """The rows of a run directory (a sweep, an arm of an A/B, a reproduction's parts): every point's
    :data:`KEPT` metrics that it measured.  ``kernel``: the name the kernel was chosen by (None: the default)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    parts = _parts(run_dir)
    if not parts:
        return []
    metas = [load_meta(directory) for _, directory in parts]
    run_id = run_id_of(run_dir, metas[0].started)
    kid = kernel_of(metas[0], kernel)
    rows = []
    for (part, directory), meta in zip(parts, metas, strict=True):
        records = [r for r in load_results(directory) if not r.failed and r.bound is not Bound.ANOMALY]
        points: dict[Group, list] = {}
        for r in records:
            points.setdefault(Group.of(r), []).append(r)
        for point, recs in points.items():
            for metric in KEPT:
                values = [float(getattr(r, metric)) for r in recs if getattr(r, metric) is not None]
                values = [v for v in values if math.isfinite(v)]
                if not values:
                    continue
                summary = Summary.of(values)
                mean, half = summary.mean, summary.ci95 or 0.0
                rows.append(Row(
                    run_id=run_id, kind=kind, kernel=kid.kernel, kernel_version=kid.version, kernel_source=kid.source,
                    kernel_commit=kid.commit, kernel_position=kid.position, recipe_key=recipe_key_of(meta),
                    backend=backend_of(meta), clock=recs[0].clock or "time", profile=point.profile or "",
                    point=(f"{part}: " if part else "") + point_name(point), arm=point.arm or "", metric=metric,
                    value=mean, low=mean - half, high=mean + half, n=len(values),
                    samples=json.dumps([round(v, 6) for v in values]),
                    machine=machine_of(meta), project=(meta.versions.testbed if meta.versions else "") or "",
                    date=meta.started or "", run_dir=os.path.realpath(run_dir)))
    return rows


# -- kernels in order ----------------------------------------------------------------------------------------

def version_key(version: str) -> tuple[int, ...]:
    """``6.1.192`` as (6, 1, 192, 0, 0); ``6.12-rc3`` as (6, 12, 0, -1, 3): a release candidate before its
    release, ``6.12`` and ``6.12.0`` the same."""
    numbers = [int(x) for x in re.findall(r"\d+", version.split("-rc")[0])[:3]]
    numbers += [0] * (3 - len(numbers))
    rc = re.search(r"-rc(\d+)", version)
    return (*numbers, *((-1, int(rc.group(1))) if rc else (0, 0)))


def kernel_order(rows: Iterable[Row]) -> list[str]:
    """The kernels of ``rows`` (:attr:`Row.key`) in history order: by version, then by place in their git history,
    then by when each was first measured."""
    first: dict[str, tuple] = {}
    for r in rows:
        key = (version_key(r.kernel_version), r.kernel_position, r.date)
        if r.key not in first or key < first[r.key]:
            first[r.key] = key
    return sorted(first, key=lambda k: (first[k], k))


def first_measured(rows: Iterable[Row]) -> dict[str, str]:
    """Each kernel's first run's date."""
    first: dict[str, str] = {}
    for r in rows:
        if r.key not in first or r.date < first[r.key]:
            first[r.key] = r.date
    return first


# -- change points -------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Stretch:
    """A run of kernels in one series whose figures are one distribution (a jumpavg group)."""

    kernels: tuple[str, ...]
    mean: float
    stdev: float
    label: str            # "" for the first group, else regression, progression or "" (no change)
    change: float         # mean / the previous group's mean - 1 (0 for the first)


@dataclasses.dataclass(frozen=True)
class Series:
    clock: str
    backend: str
    machine: str          # "" for counted figures: the same on every machine
    point: str
    arm: str
    metric: str
    kernels: tuple[str, ...]
    runs: tuple[tuple[float, ...], ...]   # each kernel's run means, in kernel order
    groups: tuple[Stretch, ...]

    @property
    def name(self) -> str:
        where = f" ({self.backend}{f', {self.machine}' if self.machine else ''})"
        return f"{self.point}{f' [{self.arm}]' if self.arm else ''}: {METRICS[self.metric][0]}{where}"

    @property
    def series_key(self) -> tuple[str, ...]:
        return (self.clock, self.backend, self.machine, self.point, self.arm, self.metric)

    def group_of(self, kernel: str) -> Stretch:
        return next(g for g in self.groups if kernel in g.kernels)


def series_of(rows: Sequence[Row]) -> list[Series]:
    """Every series of ``rows``, each with its change points."""
    order = kernel_order(rows)
    by_series: dict[tuple, dict[str, list[float]]] = {}
    for r in rows:
        by_series.setdefault(r.series, {}).setdefault(r.key, []).append(r.value)
    out = []
    for key, per_kernel in sorted(by_series.items()):
        kernels = tuple(k for k in order if k in per_kernel)
        runs = tuple(tuple(per_kernel[k]) for k in kernels)
        out.append(Series(*key, kernels, runs, changes(runs, kernels, METRICS[key[-1]][2])))
    return out


def changes(runs: Sequence[Sequence[float]], kernels: Sequence[str], better: int) -> tuple[Stretch, ...]:
    """The groups jumpavg finds in ``runs`` (each kernel's run means, in order), labelled by ``better``
    (+1: higher is better, -1: lower is)."""
    import jumpavg

    if not runs:
        return ()
    if max(max(r) for r in runs) <= 0:  # (jumpavg codes values up to their maximum: none above 0, no change)
        mean = sum(sum(r) for r in runs) / sum(len(r) for r in runs)
        return (Stretch(tuple(kernels), mean, 0.0, "", 0.0),)
    glist = jumpavg.classify([list(r) for r in runs])
    groups, i, previous = [], 0, None
    for g in glist:
        size = len(g.run_list)
        mean, stdev = g.stats.avg, g.stats.stdev
        change = mean / previous - 1 if previous else 0.0
        label = ""
        if previous is not None and change:
            label = "progression" if change * better > 0 else "regression"
        groups.append(Stretch(tuple(kernels[i:i + size]), mean, stdev, label, change))
        i += size
        previous = mean
    return tuple(groups)


@dataclasses.dataclass(frozen=True)
class Alarm:
    series: Series
    kernel: str
    group: Stretch

    def line(self) -> str:
        return (f"{self.series.name} ({self.series.clock}): {self.group.label} of {self.group.change * 100:+.2f} % "
                f"at {self.kernel}")


#: The kernels a check gates by default: those first measured within this long before the newest run (the last
#: night's runs: a nightly job's runs a day apart are never both in it).
CHECK_WINDOW_S = 20 * 3600


def since_default(rows: Sequence[Row]) -> str:
    """:data:`CHECK_WINDOW_S` before the newest run's start, as an ISO date."""
    newest = max(datetime.datetime.fromisoformat(r.date.replace("Z", "+00:00")) for r in rows if r.date)
    return (newest - datetime.timedelta(seconds=CHECK_WINDOW_S)).strftime("%Y-%m-%dT%H:%M:%SZ")


def check(rows: Sequence[Row], since: str | None = None,
          series: Sequence[Series] | None = None) -> tuple[list[str], list[Alarm]]:
    """The nightly gate: the kernels first measured at or after ``since`` (ISO date; default
    :func:`since_default`: the last night's), and every regression group one of them starts.  ``series``:
    :func:`series_of` the rows, where the caller has it already (jumpavg's classification is the work)."""
    if not rows:
        return [], []
    since = since or since_default(rows)
    first = first_measured(rows)
    new = [k for k in kernel_order(rows) if first[k] >= since]
    alarms = [Alarm(s, g.kernels[0], g) for s in (series_of(rows) if series is None else series) for g in s.groups
              if g.label == "regression" and g.kernels[0] in new]
    return new, alarms


def every_change(rows: Sequence[Row]) -> list[Alarm]:
    """Every change point of every series (regressions and progressions), as alarms at the kernel starting it."""
    return [Alarm(s, g.kernels[0], g) for s in series_of(rows) for g in s.groups if g.label]


def one_clock(rows: Sequence[Row]) -> None:
    """:class:`HistoryError` when rows of one metric mix clocks, asked to share a chart."""
    clocks: dict[str, set] = {}
    for r in rows:
        clocks.setdefault(r.metric, set()).add(r.clock)
    mixed = [m for m, c in clocks.items() if len(c) > 1]
    if mixed:
        raise HistoryError(f"{METRICS[mixed[0]][0]} was measured on two clocks (instructions and time): each chart "
                           "shows one; choose one with --clock instructions or --clock time")


def as_rows(items: Iterable[Mapping[str, Any]]) -> list[Row]:
    """Rows from mappings of the store's columns."""
    return [Row(**{c: item[c] for c in COLUMNS}) for item in items]

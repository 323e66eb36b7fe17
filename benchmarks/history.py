"""The history's proof: a kernel history with one commit +2 % costlier, found by its change points, counted.

    sudo ipsec-testbed bench history                        # 8 commits, +2 % at 5; the same without; the cells
    sudo ipsec-testbed bench history --parts cells          # only the CI matrix's cells and their merge

Two parts, every run on the counted backend (``--kernel qemu``: instructions, the same on every machine):

    steps   bench bisect's history on Debian's linux-source-6.1: a first commit, then --commits commits on two
            branches; on branch ``slow`` commit --slow-commit also adds --extra-iterations loop iterations to
            every ESP packet's way out (180: about +2 % of the counted suite's instructions per packet).  Each
            commit of each branch is built and measured by ``regress --suite counted --uml-kernel TREE@SHA`` into a
            history of its branch's own.  Then ``history --check`` on each, and the change points found: on
            ``slow`` one, at the slow commit, a regression of about +2 %; on ``none`` none.
    cells   the example workflow's matrix (examples/github-actions/ipsec-history.yml) on this machine: kernels 6.1,
            6.12 and the history's first and last commits, each cell a process with a history of its own (the
            cell's runner), --runs times; then ``history --merge`` of the cells into one, its page and its check.
            Debian's 6.12 against 6.1 is a change of the kernel's own (AES-GCM's code, the stack), shown as a
            regression or progression with its size.

Every run directory, history, page and KCIDB file is kept under --out; the figures are printed at the end.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time

from analysis import history as hist
from analysis import store as st
from benchmarks.bisect import make_history
from experiments.benchmark import Benchmark, front_door, option

PARTS = ("steps", "cells")
#: The series a planted change moves: the change points looked for.
COST = "instructions per packet"


@dataclasses.dataclass(frozen=True)
class Options:
    """Which parts, the history to make and the matrix's cells; checked on construction."""

    parts: tuple[str, ...] = option(PARTS, f"which parts, of {','.join(PARTS)} (default: all)", show_default=False)
    commits: int = option(8, "commits after the first")
    slow_commit: int = option(5, "the costlier commit", metavar="K")
    extra_iterations: int = option(180, "its loop iterations per ESP packet (default: 180, about +2 % counted)",
                                   metavar="N", show_default=False)
    cells: tuple[str, ...] = option(("6.1", "6.12"), "the matrix's release kernels (default: 6.1,6.12; the "
                                    "history's first and last commits join them when steps ran)", metavar="K,...",
                                    show_default=False)
    runs: int = option(2, "runs per cell")
    out: str | None = option(None, "where everything goes (default: runs/<date>-bench-history)")

    def __post_init__(self) -> None:
        if not self.parts or set(self.parts) - set(PARTS):
            raise ValueError(f"--parts must be one or more of {', '.join(PARTS)}, not {','.join(self.parts)}")
        if not 1 <= self.slow_commit <= self.commits:
            raise ValueError(f"--slow-commit must be in 1..--commits ({self.commits}), not {self.slow_commit}")
        for flag, value in (("--extra-iterations", self.extra_iterations), ("--runs", self.runs)):
            if value < 1:
                raise ValueError(f"{flag} must be at least 1, not {value}")


@dataclasses.dataclass(frozen=True)
class Change:
    """A change point of a history: its series, the kernel it is at, regression or progression, and its size."""

    series: str
    kernel: str
    label: str
    change: float


@dataclasses.dataclass(frozen=True)
class Judged:
    """``history --check`` on one history: its exit status, page and KCIDB file; its kernels in order, its runs
    and its change points."""

    check_rc: int
    page: str
    kcidb: str
    kernels: tuple[str, ...]
    runs: int
    changes: tuple[Change, ...]


@dataclasses.dataclass(frozen=True)
class Branch:
    """A branch of the history: its commits (the first, then 1..N), each one's run's seconds, and its history
    judged."""

    shas: tuple[str, ...]
    seconds: tuple[float, ...]
    judged: Judged


@dataclasses.dataclass(frozen=True)
class Steps:
    """The steps part: the history's tree, which commit is the costlier, and its two branches."""

    tree: str
    slow_commit: int
    slow: Branch
    none: Branch

    @property
    def costs(self) -> list[Change]:
        """The slow branch's change points in the cost per packet."""
        return [c for c in self.slow.judged.changes if COST in c.series]

    @property
    def named(self) -> bool:
        """Whether the slow branch's one change point in the cost is a regression at the slow commit."""
        want = f"{self.tree}@{self.slow.shas[self.slow_commit]}"
        return len(self.costs) == 1 and self.costs[0].kernel == want and self.costs[0].label == "regression"

    @property
    def right(self) -> bool:
        """The slow commit named, and no change point at all without it."""
        return self.named and not self.none.judged.changes

    def to_json(self) -> dict:
        branches = {"slow": self.slow, "none": self.none}
        return {"tree": self.tree, "branches": {k: list(b.shas) for k, b in branches.items()},
                **{k: {**dataclasses.asdict(b.judged), "seconds": list(b.seconds)} for k, b in branches.items()}}


@dataclasses.dataclass(frozen=True)
class Result:
    """The parts that ran (None: not asked for), the minutes in all, and where everything is."""

    steps: Steps | None
    cells: Judged | None
    seconds: float
    out: str

    def to_json(self) -> dict:
        """As results.json keeps it."""
        out: dict = {}
        if self.steps:
            out["steps"] = self.steps.to_json()
        if self.cells:
            out["cells"] = dataclasses.asdict(self.cells)
        return {**out, "seconds": self.seconds}


def measure(kernel: str, store: str, run_dir: str, log: str) -> tuple[int, float]:
    """One counted suite's run on ``kernel`` into the history ``store``; (exit status, seconds, build included)."""
    cmd = [*front_door(), "regress", "--suite", "counted", "--kernel", "qemu", "--uml-kernel", kernel,
           "--history", store, "--out", run_dir]
    t0 = time.monotonic()
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        rc = subprocess.call(cmd, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)
    return rc, time.monotonic() - t0


def judge(store: str, out: str, name: str) -> Judged:
    """``history --check`` on ``store``, with its page and KCIDB file; and the change points, from the rows."""
    page, kcidb = os.path.join(out, f"history-{name}.html"), os.path.join(out, f"kcidb-{name}.json")
    cmd = [*front_door(), "history", "--history", store, "--check", "--clock", "instructions",
           "--page", page, "--kcidb", kcidb]
    done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    with open(os.path.join(out, f"history-{name}.txt"), "w") as f:
        f.write(done.stdout + done.stderr)
    with st.open_store(store, create=False) as s:
        rows = s.rows(clock="instructions")
    changes = tuple(Change(a.series.name, a.kernel, a.group.label, a.group.change) for a in hist.every_change(rows))
    return Judged(done.returncode, page, kcidb, tuple(hist.kernel_order(rows)), len({r.run_id for r in rows}),
                  changes)


def steps(args: Options, out: str) -> Steps:
    tree, branches = make_history(out, args.commits, args.slow_commit, args.extra_iterations)
    judged = {}
    for branch in ("slow", "none"):
        store = os.path.join(out, f"history-{branch}.sqlite")
        times = []
        for i, sha in enumerate(branches[branch]):
            rc, seconds = measure(f"{tree}@{sha}", store, os.path.join(out, "runs", f"{branch}-{i:02d}"),
                                  os.path.join(out, f"steps-{branch}.log"))
            times.append(seconds)
            print(f"  {branch} commit {i:2d} {sha[:12]}: exit {rc}, {seconds:.0f} s (build included)",
                  file=sys.stderr, flush=True)
            if rc != 0:
                raise SystemExit(f"history: the run on commit {i} of {branch} failed: {out}/steps-{branch}.log")
        judged[branch] = Branch(tuple(branches[branch]), tuple(times), judge(store, out, branch))
    return Steps(tree, args.slow_commit, judged["slow"], judged["none"])


def cells(args: Options, out: str, done: Steps | None) -> Judged:
    kernels = list(args.cells)
    if done:
        kernels += [f"{done.tree}@{done.slow.shas[0]}", f"{done.tree}@{done.slow.shas[-1]}"]
    stores = []
    for i, kernel in enumerate(kernels):
        store = os.path.join(out, f"cell-{i}.sqlite")
        stores.append(store)
        for n in range(args.runs):
            rc, seconds = measure(kernel, store, os.path.join(out, "runs", f"cell-{i}-{n}"),
                                  os.path.join(out, "cells.log"))
            print(f"  cell {i} ({os.path.basename(kernel)}) run {n + 1}: exit {rc}, {seconds:.0f} s",
                  file=sys.stderr, flush=True)
            if rc != 0:
                raise SystemExit(f"history: cell {i}'s run failed: {out}/cells.log")
    merged = os.path.join(out, "history-merged.sqlite")
    merging = subprocess.run([*front_door(), "history", "--history", merged, "--merge", *stores, "--clock",
                              "instructions", "--metric", "instructions_per_packet"],
                             capture_output=True, text=True, stdin=subprocess.DEVNULL)
    print(merging.stdout + merging.stderr, file=sys.stderr, flush=True)
    return judge(merged, out, "merged")


def run(args: Options) -> Result:
    """The parts asked for, steps first (the cells take its first and last commits); results.json under --out."""
    t0 = time.monotonic()
    done = steps(args, args.out) if "steps" in args.parts else None
    merged = cells(args, args.out, done) if "cells" in args.parts else None
    result = Result(done, merged, time.monotonic() - t0, args.out)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(result.to_json(), f, indent=1)
    return result


def page(args: Options, result: Result) -> str:
    """The change points each history found, against the ones planted; the merged cells' order and changes."""
    lines = []
    if result.steps:
        s = result.steps
        slow, none = s.slow.judged, s.none.judged
        lines.append(f"\nslow history ({len(slow.kernels)} commits): change points in {COST}: "
                     + (", ".join(f"{c.label} {c.change * 100:+.2f} % at commit "
                                  f"{s.slow.shas.index(c.kernel.rsplit('@', 1)[1])}" for c in s.costs) or "none")
                     + f" ({'right' if s.named else 'WRONG'}: the slow commit is {s.slow_commit}); "
                     f"history --check exit {slow.check_rc}; every change point: {len(slow.changes)}")
        lines.append(f"history without the slow commit ({len(none.kernels)} commits): "
                     f"{len(none.changes)} change points ({'right' if not none.changes else 'WRONG'}); "
                     f"history --check exit {none.check_rc}")
        lines += [f"  {c.series}: {c.label} {c.change * 100:+.3f} % at {os.path.basename(c.kernel)}"
                  for c in slow.changes + none.changes]
    if result.cells:
        c = result.cells
        order = ", ".join(os.path.basename(k) for k in c.kernels)
        lines.append(f"\ncells merged: {c.runs} runs of {len(c.kernels)} kernels, in order {order}; "
                     f"history --check exit {c.check_rc}; page {c.page}")
        lines += [f"  {ch.series}: {ch.label} {ch.change * 100:+.2f} % at {os.path.basename(ch.kernel)}"
                  for ch in c.changes]
    lines.append(f"\n{result.seconds / 60:.1f} min in all; everything under {result.out}")
    return "\n".join(lines)


BENCHMARK = Benchmark("history", Options, run, page, root="kernel builds' packages, namespaces, guests",
                      status=lambda result: 0 if result.steps is None or result.steps.right else 1)

"""The history's proof: a kernel history with one commit +2 % costlier, found by its change points, counted.

    sudo ipsec-testbed bench history                        # 8 commits, +2 % at 5; the same without; the cells
    sudo ipsec-testbed bench history --parts cells          # only the CI matrix's cells and their merge

Three parts, every run on the counted backend (``--kernel qemu``: instructions, the same on every machine):

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

import argparse
import json
import os
import subprocess
import sys
import time

from analysis import history as hist
from analysis import store as st
from benchmarks import _common
from benchmarks.bisect import make_history

PARTS = ("steps", "cells")


def measure(kernel: str, store: str, run_dir: str, log: str) -> tuple[int, float]:
    """One counted suite's run on ``kernel`` into the history ``store``; (exit status, seconds, build included)."""
    cmd = [*_common.front_door(), "regress", "--suite", "counted", "--kernel", "qemu", "--uml-kernel", kernel,
           "--history", store, "--out", run_dir]
    t0 = time.monotonic()
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        rc = subprocess.call(cmd, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)
    return rc, time.monotonic() - t0


def judge(store: str, out: str, name: str) -> dict:
    """``history --check`` on ``store``, with its page and KCIDB file; and the change points, from the rows."""
    page, kcidb = os.path.join(out, f"history-{name}.html"), os.path.join(out, f"kcidb-{name}.json")
    cmd = [*_common.front_door(), "history", "--history", store, "--check", "--clock", "instructions",
           "--page", page, "--kcidb", kcidb]
    done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    with open(os.path.join(out, f"history-{name}.txt"), "w") as f:
        f.write(done.stdout + done.stderr)
    with st.open_store(store, create=False) as s:
        rows = s.rows(clock="instructions")
    changes = [{"series": a.series.name, "kernel": a.kernel, "label": a.group.label, "change": a.group.change}
               for a in hist.every_change(rows)]
    return {"check_rc": done.returncode, "page": page, "kcidb": kcidb, "kernels": hist.kernel_order(rows),
            "runs": len({r.run_id for r in rows}), "changes": changes}


def steps(args: argparse.Namespace, out: str) -> dict:
    tree, branches = make_history(out, args.commits, args.slow_commit, args.extra_iterations)
    results = {"tree": tree, "branches": branches}
    for branch in ("slow", "none"):
        store = os.path.join(out, f"history-{branch}.sqlite")
        times = []
        for i, sha in enumerate(branches[branch]):
            rc, seconds = measure(f"{tree}@{sha}", store, os.path.join(out, "runs", f"{branch}-{i:02d}"),
                                  os.path.join(out, f"steps-{branch}.log"))
            times.append(seconds)
            print(f"  {branch} commit {i:2d} {sha[:12]}: exit {rc}, {seconds:.0f} s (build included)", flush=True)
            if rc != 0:
                raise SystemExit(f"history: the run on commit {i} of {branch} failed: {out}/steps-{branch}.log")
        results[branch] = {**judge(store, out, branch), "seconds": times}
    return results


def cells(args: argparse.Namespace, out: str, branches: dict | None, tree: str | None) -> dict:
    kernels = list(args.cells)
    if tree and branches:
        kernels += [f"{tree}@{branches['slow'][0]}", f"{tree}@{branches['slow'][-1]}"]
    stores = []
    for i, kernel in enumerate(kernels):
        store = os.path.join(out, f"cell-{i}.sqlite")
        stores.append(store)
        for n in range(args.runs):
            rc, seconds = measure(kernel, store, os.path.join(out, "runs", f"cell-{i}-{n}"),
                                  os.path.join(out, "cells.log"))
            print(f"  cell {i} ({os.path.basename(kernel)}) run {n + 1}: exit {rc}, {seconds:.0f} s", flush=True)
            if rc != 0:
                raise SystemExit(f"history: cell {i}'s run failed: {out}/cells.log")
    merged = os.path.join(out, "history-merged.sqlite")
    done = subprocess.run([*_common.front_door(), "history", "--history", merged, "--merge", *stores, "--clock",
                           "instructions", "--metric", "instructions_per_packet"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    print(done.stdout + done.stderr, flush=True)
    return {"kernels": kernels, **judge(merged, out, "merged")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 2)[2],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", default=",".join(PARTS), help=f"which parts, of {','.join(PARTS)} (default: all)")
    p.add_argument("--commits", type=int, default=8, help="commits after the first (default: %(default)s)")
    p.add_argument("--slow-commit", type=int, default=5, metavar="K", help="the costlier commit (default: %(default)s)")
    p.add_argument("--extra-iterations", type=int, default=180, metavar="N",
                   help="its loop iterations per ESP packet (default: %(default)s, about +2 %% counted)")
    p.add_argument("--cells", type=lambda s: tuple(s.split(",")), default=("6.1", "6.12"), metavar="K,...",
                   help="the matrix's release kernels (default: 6.1,6.12; the history's first and last commits "
                   "join them when steps ran)")
    p.add_argument("--runs", type=int, default=2, help="runs per cell (default: %(default)s)")
    p.add_argument("--out", default=None, help="where everything goes (default: runs/<date>-bench-history)")
    args = p.parse_args(argv)
    parts = args.parts.split(",")
    if set(parts) - set(PARTS):
        p.error(f"--parts: one or more of {', '.join(PARTS)}")
    if not 1 <= args.slow_commit <= args.commits:
        p.error("--slow-commit must be in 1..--commits")
    out = _common.root_out_dir("history", args.out, "kernel builds' packages, namespaces, guests")
    results: dict = {}
    t0 = time.monotonic()
    if "steps" in parts:
        results["steps"] = steps(args, out)
    if "cells" in parts:
        s = results.get("steps", {})
        results["cells"] = cells(args, out, s.get("branches"), s.get("tree"))
    results["seconds"] = time.monotonic() - t0
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    ok = True
    if "steps" in results:
        slow, none = results["steps"]["slow"], results["steps"]["none"]
        want = f"{results['steps']['tree']}@{results['steps']['branches']['slow'][args.slow_commit]}"
        costs = [c for c in slow["changes"] if "instructions per packet" in c["series"]]
        right = [c for c in costs if c["kernel"] == want and c["label"] == "regression"]
        ok &= len(right) == 1 and len(costs) == 1 and not none["changes"]
        print(f"\nslow history ({len(slow['kernels'])} commits): change points in instructions per packet: "
              + (", ".join(f"{c['label']} {c['change'] * 100:+.2f} % at commit "
                           f"{results['steps']['branches']['slow'].index(c['kernel'].rsplit('@', 1)[1])}"
                           for c in costs) or "none")
              + f" ({'right' if right and len(costs) == 1 else 'WRONG'}: the slow commit is {args.slow_commit}); "
              f"history --check exit {slow['check_rc']}; every change point: {len(slow['changes'])}")
        print(f"history without the slow commit ({len(none['kernels'])} commits): "
              f"{len(none['changes'])} change points ({'right' if not none['changes'] else 'WRONG'}); "
              f"history --check exit {none['check_rc']}")
        for c in slow["changes"] + none["changes"]:
            print(f"  {c['series']}: {c['label']} {c['change'] * 100:+.3f} % at {os.path.basename(c['kernel'])}")
    if "cells" in results:
        c = results["cells"]
        order = ", ".join(os.path.basename(k) for k in c["kernels"])
        print(f"\ncells merged: {c['runs']} runs of {len(c['kernels'])} kernels, in order {order}; "
              f"history --check exit {c['check_rc']}; page {c['page']}")
        for ch in c["changes"]:
            print(f"  {ch['series']}: {ch['label']} {ch['change'] * 100:+.2f} % at {os.path.basename(ch['kernel'])}")
    print(f"\n{results['seconds'] / 60:.1f} min in all; everything under {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

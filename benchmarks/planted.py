"""A change planted in the kernel's own source, measured by both backends: instructions (counted) and CPU time (UML).

    sudo ipsec-testbed bench planted                            # 450 iterations in esp_input: about +5 % counted
    sudo ipsec-testbed bench planted --iterations 90 --only qemu --trials 20 --identical 20   # +1 %, and A/A

One patch on Debian's linux-source-6.1 (the recipe's source) adds ``--iterations`` iterations of a small loop to
every ESP packet's way in (``esp_input`` in net/ipv4/esp4.c, the receive path; the bisect's proof plants its loop
on the way out).  The same change is then measured where each backend can see it, each kernel against the same
source without the patch, both up at once and paired window by window (``regress --ab``):

- counted (``--kernel qemu``): the recipe's x86-64 build (``6.1`` against ``6.1+patch:FILE``), the counted suite,
  judged on instructions per packet;
- UML: the recipe's UML build (``recipe`` against ``recipe+patch:FILE``), the same counted suite's point (paced
  UDP, so both backends carry the same packets) judged on CPU time per packet, then the detect suite (unshaped
  TCP, UML's own gate).

It prints each B/A with its interval, whether each flagged the change, whether the directions agree and the
sizes' ratio.  With ``--trials N`` each comparison runs N times (the gate's power: how many of N flagged the
change), and ``--identical M`` compares kernel A with itself M times as well, the two kinds taking turns (its false
alarms: how many of M flagged identical kernels, and how wide their intervals were), every comparison with its wall
time.

The four kernels are built on first use (about 10 minutes each for x86-64, 3-4 for UML on 2 CPUs;
`ipsec-testbed kernel list` shows them) and kept.  Each comparison's run directory and verdicts are kept
under --out.
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import subprocess
import sys
import tarfile
import time

from benchmarks import _common
from benchmarks.bisect import ESP, source_tarball, with_loop

#: The comparisons: (label, --kernel, kernel A, suite).
COMPARISONS = (("qemu", "qemu", "6.1", "counted"), ("uml", "uml", "recipe", "counted"),
               ("uml-detect", "uml", "recipe", "detect"))
#: What each judges the change on (the regress verdicts' metric): CPU time per packet, counted as instructions.
COSTS = ("cpu_us_per_packet", "instructions_per_packet")


def make_patch(out: str, iterations: int) -> str:
    """A ``patch -p1`` file adding the loop to esp_input() of the recipe's source; returns its path."""
    with tarfile.open(source_tarball()) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/" + ESP))
        text = tar.extractfile(member).read().decode()
    try:
        changed = with_loop(text, "esp_input", iterations, way="in")
    except ValueError as e:
        raise SystemExit(f"planted: {e}") from None
    diff = difflib.unified_diff(text.splitlines(keepends=True), changed.splitlines(keepends=True),
                                fromfile=f"a/{ESP}", tofile=f"b/{ESP}")
    path = os.path.join(out, f"esp-input-loop-{iterations}.patch")
    with open(path, "w") as f:
        f.writelines(diff)
    return path


def compare(out: str, label: str, kernel: str, base: str, suite: str, patch: str | None) -> dict:
    """One ``regress --ab``: ``base`` against itself with ``patch`` (against itself alone without one)."""
    json_path = os.path.join(out, f"{label}.json")
    other = f"{base}+patch:{patch}" if patch else base
    cmd = [*_common.front_door(), "regress", "--ab", base, other, "--suite", suite,
           "--kernel", kernel, "--out", os.path.join(out, label), "--json", json_path]
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    rc = subprocess.call(cmd, stdin=subprocess.DEVNULL)
    seconds = time.monotonic() - t0
    if not os.path.exists(json_path):
        return {"label": label, "rc": rc, "seconds": seconds, "verdicts": []}
    with open(json_path) as f:
        data = json.load(f)
    return {"label": label, "rc": rc, "seconds": seconds, "verdicts": data["verdicts"]}


def cost_verdict(result: dict) -> dict | None:
    return next((v for v in result["verdicts"] if v["metric"] in COSTS), None)


def flagged(result: dict) -> bool:
    """Whether the gate flagged this comparison: any of its verdicts a regression."""
    return any(v["regressed"] for v in result["verdicts"])


def tally(label: str, results: list[dict], want: str) -> None:
    """One line for the trials of one comparison: how many flagged, the cost's B/A range, the widest interval."""
    judged = [r for r in results if cost_verdict(r)]
    if not judged:
        print(f"  {label:14s} no verdicts")
        return
    ratios = [cost_verdict(r)["ratio"] for r in judged]
    halves = [(cost_verdict(r)["high"] - cost_verdict(r)["low"]) / 2 for r in judged]
    seconds = sorted(r["seconds"] for r in results)
    print(f"  {label:14s} flagged {sum(flagged(r) for r in judged)} of {len(results)} ({want}); cost B/A "
          f"{min(ratios):.4f}..{max(ratios):.4f}, widest interval +/-{100 * max(halves):.3f} %; wall time "
          f"{seconds[0]:.0f}..{seconds[-1]:.0f} s, median {seconds[len(seconds) // 2]:.0f} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 2)[2],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iterations", type=int, default=450, metavar="N",
                   help="loop iterations per ESP packet received (default: %(default)s, about +5 %% of the counted "
                   "suite's instructions per packet)")
    p.add_argument("--only", choices=[c[0] for c in COMPARISONS], action="append",
                   help="run only this comparison (again for more; default: all three)")
    p.add_argument("--trials", type=int, default=1, metavar="N",
                   help="run each comparison N times and count the flags (default: %(default)s; 0: only --identical)")
    p.add_argument("--identical", type=int, default=0, metavar="M",
                   help="also compare kernel A with itself M times, between the trials (the false alarms; default: "
                   "%(default)s)")
    p.add_argument("--out", default=None, help="where the patch and the comparisons go "
                   "(default: runs/<date>-bench-planted)")
    args = p.parse_args(argv)
    if args.trials < 0 or args.identical < 0 or not (args.trials or args.identical):
        p.error("--trials and --identical are counts, and one of them at least 1")
    out = _common.root_out_dir("planted", args.out, "kernel builds' packages, namespaces, guests")
    patch = make_patch(out, args.iterations)
    print(f"patch: {patch} ({args.iterations} iterations in esp_input)", flush=True)
    chosen = [c for c in COMPARISONS if not args.only or c[0] in args.only]
    results, identical = [], []
    for trial in range(1, max(args.trials, args.identical) + 1):
        for label, kernel, base, suite in chosen:
            if trial <= args.trials:
                tag = f"-{trial}" if args.trials > 1 else ""
                results.append({"comparison": label, **compare(out, label + tag, kernel, base, suite, patch)})
            if trial <= args.identical:
                identical.append({"comparison": label,
                                  **compare(out, f"{label}-identical-{trial}", kernel, base, suite, None)})
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"iterations": args.iterations, "patch": patch, "trials": args.trials, "results": results,
                   "identical": identical}, f, indent=1)
    if args.trials > 1 or args.identical:
        print(f"\n{args.trials} trial(s) and {args.identical} of identical kernels, paired, the gate's rule:")
        for label, *_ in chosen:
            tally(label, [r for r in results if r["comparison"] == label], "the change: all should")
            if args.identical:
                tally(f"{label} identical", [r for r in identical if r["comparison"] == label], "none should")
    print(f"\n+{args.iterations} loop iterations per ESP packet received, B/A of the cost per packet "
          "(instructions counted; CPU time in UML), paired:")
    ratios = {}
    for r in results:
        v = cost_verdict(r)
        if v is None:
            print(f"  {r['label']:11s} no verdict (regress exit {r['rc']}, {r['seconds']:.0f} s)")
            continue
        ratios[r["comparison"]] = v["ratio"]
        print(f"  {r['label']:11s} {v['ratio']:.4f} ({v['low']:.4f}..{v['high']:.4f}) "
              f"{'flagged' if v['regressed'] else 'NOT flagged'}; {r['seconds']:.0f} s with builds")
    if "qemu" in ratios and len(ratios) > 1:
        counted = ratios["qemu"] - 1
        for label, ratio in ratios.items():
            if label != "qemu":
                same = (ratio - 1) * counted > 0
                print(f"  {label} against counted: {'same' if same else 'OPPOSITE'} direction, size "
                      f"{(ratio - 1) / counted:.2f} x the counted one's" if counted else "")
    seen = all(cost_verdict(r) and cost_verdict(r)["regressed"] for r in results)
    judged = all(cost_verdict(r) for r in identical)
    return 0 if seen and judged and not any(flagged(r) for r in identical) else 1


if __name__ == "__main__":
    sys.exit(main())

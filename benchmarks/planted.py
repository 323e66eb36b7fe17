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

import dataclasses
import difflib
import json
import os
import subprocess
import sys
import tarfile
import time
from typing import Any

from benchmarks.bisect import ESP, source_tarball, with_loop
from experiments.benchmark import Benchmark, front_door, option

#: The comparisons: (label, --kernel, kernel A, suite).
COMPARISONS = (("qemu", "qemu", "6.1", "counted"), ("uml", "uml", "recipe", "counted"),
               ("uml-detect", "uml", "recipe", "detect"))
#: What each judges the change on (the regress verdicts' metric): CPU time per packet, counted as instructions.
COSTS = ("cpu_us_per_packet", "instructions_per_packet")


@dataclasses.dataclass(frozen=True)
class Options:
    """The change to plant, the comparisons and how often; checked on construction."""

    iterations: int = option(450, "loop iterations per ESP packet received (default: 450, about +5 % of the counted "
                             "suite's instructions per packet)", metavar="N", show_default=False)
    only: tuple[str, ...] = option((), "run only this comparison (again for more; default: all three)",
                                   choices=tuple(c[0] for c in COMPARISONS), repeat=True)
    trials: int = option(1, "run each comparison N times and count the flags (default: 1; 0: only --identical)",
                         metavar="N", show_default=False)
    identical: int = option(0, "also compare kernel A with itself M times, between the trials (the false alarms; "
                            "default: 0)", metavar="M", show_default=False)
    out: str | None = option(None, "where the patch and the comparisons go (default: runs/<date>-bench-planted)")

    def __post_init__(self) -> None:
        if self.trials < 0 or self.identical < 0 or not (self.trials or self.identical):
            raise ValueError(f"--trials and --identical must be counts, one of them at least 1, not {self.trials} "
                             f"and {self.identical}")
        if self.iterations < 1:
            raise ValueError(f"--iterations must be at least 1, not {self.iterations}")

    @property
    def chosen(self) -> tuple[tuple[str, str, str, str], ...]:
        """The comparisons to run (:data:`COMPARISONS`)."""
        return tuple(c for c in COMPARISONS if not self.only or c[0] in self.only)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One of ``regress --json``'s verdicts: a point's metric, B/A with its interval, and whether it was flagged."""

    point: dict[str, Any]
    metric: str
    ratio: float
    bound: float
    low: float
    high: float
    regressed: bool
    baseline_n: int
    current_n: int

    @classmethod
    def from_json(cls, data: dict) -> Verdict:
        return cls(**{f.name: data.get(f.name) for f in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One ``regress --ab``: which comparison, its run's name, regress's exit status, its seconds and verdicts."""

    comparison: str
    label: str
    rc: int
    seconds: float
    verdicts: tuple[Verdict, ...]

    @property
    def cost(self) -> Verdict | None:
        """Its verdict on the cost per packet (None: regress gave none)."""
        return next((v for v in self.verdicts if v.metric in COSTS), None)

    @property
    def flagged(self) -> bool:
        """Whether the gate flagged this comparison: any of its verdicts a regression."""
        return any(v.regressed for v in self.verdicts)


@dataclasses.dataclass(frozen=True)
class Result:
    """The patch, the comparisons with it and those of kernel A with itself."""

    patch: str
    results: tuple[Comparison, ...]
    identical: tuple[Comparison, ...]

    @property
    def right(self) -> bool:
        """Every comparison with the patch flagged in its cost, and none of identical kernels, each judged."""
        return (all(r.cost and r.cost.regressed for r in self.results) and all(r.cost for r in self.identical)
                and not any(r.flagged for r in self.identical))


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


def compare(out: str, comparison: str, label: str, kernel: str, base: str, suite: str, patch: str | None
            ) -> Comparison:
    """One ``regress --ab``: ``base`` against itself with ``patch`` (against itself alone without one)."""
    json_path = os.path.join(out, f"{label}.json")
    other = f"{base}+patch:{patch}" if patch else base
    cmd = [*front_door(), "regress", "--ab", base, other, "--suite", suite,
           "--kernel", kernel, "--out", os.path.join(out, label), "--json", json_path]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    t0 = time.monotonic()
    rc = subprocess.call(cmd, stdin=subprocess.DEVNULL)
    seconds = time.monotonic() - t0
    verdicts: tuple[Verdict, ...] = ()
    if os.path.exists(json_path):
        with open(json_path) as f:
            verdicts = tuple(Verdict.from_json(v) for v in json.load(f)["verdicts"])
    return Comparison(comparison, label, rc, seconds, verdicts)


def run(args: Options) -> Result:
    """The patch made, then each comparison's trials and identical kernels, taking turns; results.json under
    --out."""
    patch = make_patch(args.out, args.iterations)
    print(f"patch: {patch} ({args.iterations} iterations in esp_input)", file=sys.stderr, flush=True)
    results, identical = [], []
    for trial in range(1, max(args.trials, args.identical) + 1):
        for label, kernel, base, suite in args.chosen:
            if trial <= args.trials:
                tag = f"-{trial}" if args.trials > 1 else ""
                results.append(compare(args.out, label, label + tag, kernel, base, suite, patch))
            if trial <= args.identical:
                identical.append(compare(args.out, label, f"{label}-identical-{trial}", kernel, base, suite, None))
    result = Result(patch, tuple(results), tuple(identical))
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"iterations": args.iterations, "patch": patch, "trials": args.trials,
                   "results": [dataclasses.asdict(r) for r in results],
                   "identical": [dataclasses.asdict(r) for r in identical]}, f, indent=1)
    return result


def tally(label: str, results: list[Comparison], want: str) -> str:
    """One line for the trials of one comparison: how many flagged, the cost's B/A range, the widest interval."""
    judged = [r.cost for r in results if r.cost]
    if not judged:
        return f"  {label:14s} no verdicts"
    ratios = [v.ratio for v in judged]
    halves = [(v.high - v.low) / 2 for v in judged]
    seconds = sorted(r.seconds for r in results)
    return (f"  {label:14s} flagged {sum(r.flagged for r in results if r.cost)} of {len(results)} ({want}); cost "
            f"B/A {min(ratios):.4f}..{max(ratios):.4f}, widest interval +/-{100 * max(halves):.3f} %; wall time "
            f"{seconds[0]:.0f}..{seconds[-1]:.0f} s, median {seconds[len(seconds) // 2]:.0f} s")


def page(args: Options, result: Result) -> str:
    """Each comparison's B/A of the cost, flagged or not, the directions and sizes against the counted one; with
    several trials or identical kernels, how many of each flagged."""
    lines = []
    if args.trials > 1 or args.identical:
        lines.append(f"\n{args.trials} trial(s) and {args.identical} of identical kernels, paired, the gate's rule:")
        for label, *_ in args.chosen:
            lines.append(tally(label, [r for r in result.results if r.comparison == label], "the change: all should"))
            if args.identical:
                lines.append(tally(f"{label} identical", [r for r in result.identical if r.comparison == label],
                                   "none should"))
    lines.append(f"\n+{args.iterations} loop iterations per ESP packet received, B/A of the cost per packet "
                 "(instructions counted; CPU time in UML), paired:")
    ratios = {}
    for r in result.results:
        v = r.cost
        if v is None:
            lines.append(f"  {r.label:11s} no verdict (regress exit {r.rc}, {r.seconds:.0f} s)")
            continue
        ratios[r.comparison] = v.ratio
        lines.append(f"  {r.label:11s} {v.ratio:.4f} ({v.low:.4f}..{v.high:.4f}) "
                     f"{'flagged' if v.regressed else 'NOT flagged'}; {r.seconds:.0f} s with builds")
    if "qemu" in ratios and len(ratios) > 1:
        counted = ratios["qemu"] - 1
        for label, ratio in ratios.items():
            if label != "qemu":
                same = (ratio - 1) * counted > 0
                lines.append(f"  {label} against counted: {'same' if same else 'OPPOSITE'} direction, size "
                             f"{(ratio - 1) / counted:.2f} x the counted one's" if counted else "")
    return "\n".join(lines)


BENCHMARK = Benchmark("planted", Options, run, page, root="kernel builds' packages, namespaces, guests",
                      status=lambda result: 0 if result.right else 1)

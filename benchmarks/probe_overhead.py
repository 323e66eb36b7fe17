"""Does the latency probe change the goodput it rides beside?  Sweeps with and without it, alternated.

    sudo ipsec-testbed bench probe_overhead                           # vpn_gateway, aes-gcm-256, 10 Mbit/s
    sudo ipsec-testbed bench probe_overhead --rate 100 --pairs 6 --sizes 100,1460
    sudo ipsec-testbed bench probe_overhead --probe-tool irtt          # irtt's UDP probe instead of ICMP echo

Runs the default sweep of --topology, --profile, --rate and --sizes, each run a process of its own with one
repetition, alternately with the latency probe (the default) and without it, in ABBA order (on, off, off, on,
...) so that a drift of the machine falls on both alike.  Per point it prints the mean goodput with and
without the probe, their paired difference with its 95 % interval, and the point's own interval (the 95 %
half-width of its goodput without the probe): the probe passes where the difference is smaller than that.

A probe that crosses the path's bottleneck takes its own bytes of it, in the data's direction: a link-bound flow
beside it gives up the probe's share of the link (:func:`experiments.engine.plan.probe_share`, the tunnel's
bytes counted), 0.08 % of a 10 Mbit/s link for plain's 10 echoes a second, 0.13 % through AES-GCM-256.  Where
every window of a point was link-bound, its line also gives that predicted cost and what the difference shows
beyond it (the difference plus the prediction, with the same interval): the probe disturbs the flow beyond its
bytes (its timing, drops in the queue it shares) only where that residual is beyond the point's own interval.
Where the guest's CPU bounds a point, the probe's cost is CPU time, not link, and no prediction is printed.
Exit status 0 when it ran.
"""
from __future__ import annotations

import collections
import dataclasses
import os
import statistics
import sys
import tempfile
import time

from analysis.stats import t_critical_95
from experiments import runner
from experiments.benchmark import Benchmark, check_profiles_and_rate, option
from experiments.engine.plan import SweepSpec, default_sweep, probe_share
from experiments.engine.probe import TOOLS
from testbed.errors import Refused
from testbed.record import Bound, Record
from testbed.rundir import load_results
from topologies import TOPOLOGIES

#: What each sweep's job says it was started by (meta.json, the history).
COMMAND = ("ipsec-testbed", "bench", "probe_overhead")


@dataclasses.dataclass(frozen=True)
class Options:
    """The sweep measured with the probe and without, and how many times; checked on construction."""

    topology: str = option("vpn_gateway", "the sweep's topology", choices=tuple(TOPOLOGIES))
    profile: str = option("aes-gcm-256", "the tunnel beside plain")
    rate: float = option(10.0, "Mbit/s")
    sizes: tuple[int, ...] = option((100, 1460), "TCP MSS, comma-separated")
    pairs: int = option(4, "runs with the probe and without, each")
    probe_tool: str = option(TOOLS[0], f"the probe's tool in the runs with it (the sweep's --probe-tool; default: "
                             f"{TOOLS[0]})", choices=TOOLS, show_default=False)

    def __post_init__(self) -> None:
        check_profiles_and_rate((self.profile,), self.rate, "--profile")
        if not self.sizes or not 88 <= min(self.sizes) <= max(self.sizes) <= 1460:
            raise ValueError(f"--sizes must be TCP MSS values in 88..1460 (IPv4 at MTU 1500), not "
                             f"{','.join(map(str, self.sizes))}")
        if self.pairs < 2:
            raise ValueError(f"--pairs must be at least 2 (an interval needs two pairs), not {self.pairs}")
        self.sweep(True)  # what the sweep itself refuses (a topology's clients, a link too slow for the probe)

    def sweep(self, probe: bool) -> SweepSpec:
        """One repetition of every point, with the probe (by --probe-tool) or without it."""
        spec = default_sweep(topology=self.topology, profiles=(self.profile,), rates_mbit=(self.rate,),
                             sizes=self.sizes, repetitions=1, max_repetitions=1)
        return dataclasses.replace(spec, probe_tool=self.probe_tool) if probe else \
            dataclasses.replace(spec, latency_probe=False)


def order(pairs: int) -> list[bool]:
    """Whether each run has the probe: ABBA, on, off, off, on, ..."""
    return [k % 4 in (0, 3) for k in range(2 * pairs)]


@dataclasses.dataclass(frozen=True)
class Point:
    """A point's goodput in the runs with the probe and without (Mbit/s), and whether every window was link-bound."""

    profile: str
    size_bytes: int
    ip_version: int
    with_probe: tuple[float, ...]
    without: tuple[float, ...]
    link_bound: bool

    @property
    def difference(self) -> tuple[float, float]:
        """The paired difference's mean (with minus without) and its 95 % half-width."""
        diffs = [a - b for a, b in zip(self.with_probe, self.without, strict=False)]
        n = len(diffs)
        half = t_critical_95(n - 1) * statistics.stdev(diffs) / n ** 0.5 if n > 1 else float("nan")
        return statistics.fmean(diffs), half

    @property
    def own(self) -> float:
        """The point's own interval: the 95 % half-width of its goodput without the probe."""
        n = len(self.without)
        return t_critical_95(n - 1) * statistics.stdev(self.without) / n ** 0.5

    def cost(self, rate_mbit: float, probe_per_s: float) -> float:
        """The goodput the probe's bytes take from a link-bound flow, predicted (Mbit/s)."""
        return statistics.fmean(self.without) * probe_share(probe_per_s, rate_mbit, self.ip_version, self.profile)


@dataclasses.dataclass(frozen=True)
class Result:
    """Every point of the runs, how many runs and how long they took, and where they are."""

    runs: int
    seconds: float
    base: str
    points: tuple[Point, ...]


def points_of(runs: list[tuple[bool, list[Record]]]) -> tuple[Point, ...]:
    """Each point's goodput with the probe and without, from every run's records (with the probe or not)."""
    goodput: dict[tuple, dict[bool, list[float]]] = collections.defaultdict(lambda: {True: [], False: []})
    link_bound: dict[tuple, bool] = collections.defaultdict(lambda: True)  # every window of the point's
    for on, records in runs:
        for r in records:
            point = (r.profile, r.size_bytes, r.ip_version)
            goodput[point][on].append(r.goodput_mbps)
            link_bound[point] &= r.bound is Bound.LINK
    return tuple(Point(*key, tuple(by[True]), tuple(by[False]), link_bound[key])
                 for key, by in sorted(goodput.items()))


def run(args: Options) -> Result:
    """The sweep 2 x --pairs times, with the probe and without in ABBA order, each run a process of its own."""
    base = tempfile.mkdtemp(prefix="itb-bench-probe-")
    runs = order(args.pairs)
    done = []
    t0 = time.monotonic()
    for k, on in enumerate(runs):
        out = os.path.join(base, f"{k:02d}-{'probe' if on else 'none'}")
        print(f"run {k + 1} of {len(runs)}: {'with' if on else 'without'} the probe", file=sys.stderr, flush=True)
        rc = runner.sweep_apart(args.sweep(on), out, command=COMMAND)
        if rc != 0:
            raise Refused(f"the sweep failed (exit {rc}); its directory: {out}")
        done.append((on, load_results(out)))
    return Result(len(runs), time.monotonic() - t0, base, points_of(done))


def page(args: Options, result: Result) -> str:
    """Per point the paired difference against its own interval, and at a link-bound one against its bytes."""
    lines = [f"{result.runs} sweeps in {result.seconds:.0f} s; {args.topology}, {args.rate:g} Mbit/s, "
             f"one repetition per sweep, the probe by {args.probe_tool}", "",
             f"{'profile':>14s} {'size':>5s} {'with probe':>11s} {'without':>9s} {'difference (95 % CI)':>24s} "
             f"{'own interval':>13s}  verdict"]
    beyond_bytes = []
    for p in result.points:
        mean_diff, half = p.difference
        own = p.own
        verdict = "within" if abs(mean_diff) < own else "BEYOND"
        lines.append(f"{p.profile:>14s} {p.size_bytes:5d} {statistics.fmean(p.with_probe):11.3f} "
                     f"{statistics.fmean(p.without):9.3f} {mean_diff:+11.4f} ± {half:.4f} Mbit/s {own:9.4f}  "
                     f"{verdict} the point's own interval")
        if p.link_bound:
            cost = p.cost(args.rate, args.sweep(True).probe_per_s)  # the rate fitted to the link
            residual = mean_diff + cost
            beyond_bytes.append(abs(residual) >= own)
            lines.append(f"{'':>14s} {'':5s} {'its bytes:':>21s} {-cost:+11.4f} Mbit/s predicted; beyond them "
                         f"{residual:+.4f} ± {half:.4f}: {'BEYOND' if beyond_bytes[-1] else 'within'} the point's own "
                         "interval")
        else:
            lines.append(f"{'':>14s} {'':5s} {'':>21s} not every window link-bound: the probe's cost there is CPU "
                         "time, no prediction")
    if beyond_bytes:
        lines += ["", f"beyond the probe's own bytes: {sum(not b for b in beyond_bytes)} of {len(beyond_bytes)} "
                  "link-bound points within their own intervals"]
    lines += ["", f"run directories: {result.base}"]
    return "\n".join(lines)


BENCHMARK = Benchmark("probe_overhead", Options, run, page, root="the sweeps' namespaces, xfrm, tc")

"""How exactly a shaped veth gives the rate asked for: TCP goodput / theoretical goodput.

    sudo ipsec-testbed bench shaping_accuracy [--qdisc tbf|htb] [--duration 5]
    sudo ipsec-testbed bench shaping_accuracy --kernel uml

For each rate, both ends of a veth pair are shaped (topologies.shaping, default burst and
latency) and iperf3 measures plain TCP goodput from a to b with the given MSS.  The ratio
to :func:`ipsec.overhead.theoretical_goodput_mbps` (rate * payload / bytes the shaper
counts per segment) should be within 0.97..1.01 at every rate the CPU can fill.

Before the rates, the same pair is measured through the same qdisc at a rate that does not
bind (17 Gbit/s, half of tc's maximum): that is what the CPU allows between two namespaces on
this kernel, shaping work included (tbf splits GSO packets into frames, which costs).
Where a rate's theoretical goodput comes close to that ceiling, the shaper is not what
limits the result, and the table says "CPU-limited" instead of pretending.

Runs can be longer than --duration: iperf3's measured window can gain or lose up to about a
queue's worth of data at its ends (data queued in the shaper or held back by a loss), which
made the ratio swing by +-3% at 1 Mbit over 5 s on the host and by +1.5% at 4 Mbit over 6 s
inside UML (when its 100 ms burst made the queue 150 ms deep).  So every run carries at least
2000 full-size packets and lasts at least 100 times the shaper's queue (rate * latency +
burst, in seconds).

TCP congestion control: a loss-based one (cubic, else reno) is set in the pair's two
namespaces, since a shaper's accuracy is seen when the sender keeps its queue busy.  BBR
(this host's default) keeps the queue short and idles the link on purpose (PROBE_RTT); over
ten runs at 10 Mbit it gave 0.93..1.10, where reno gave 0.999..1.000.

It needs veth and the qdisc, not ESP: with --kernel auto it runs on the host kernel where that has them;
--kernel uml runs the whole benchmark inside User-Mode Linux.

    sudo ipsec-testbed bench shaping_accuracy --qdisc htb --rates 10,100 --duration 3
"""
from __future__ import annotations

import dataclasses
import logging
import math
import statistics
import subprocess
import sys

from experiments.benchmark import Benchmark, option, running_on
from experiments.job import KernelChoice
from ipsec.overhead import FRAMINGS, theoretical_goodput_mbps
from testbed.capabilities import Needs
from topologies.shaping import MAX_RATE_MBIT, QDISCS, ShapingSpec, kernel_burst_time_s, plan_shaping

log = logging.getLogger("shaping_accuracy")

RATES_MBIT = (1, 2, 4, 10, 34, 44, 51, 100, 1000)
TARGET = (0.97, 1.01)
#: A rate whose theoretical goodput is above this share of the CPU ceiling is CPU-limited.
CPU_LIMITED_SHARE = 0.8
CONGESTION_CONTROL = ("cubic", "reno")
#: The rate of the CPU-ceiling measurement: far above any rate measured, below tbf's peak.
CEILING_RATE_MBIT = round(MAX_RATE_MBIT / 2)
#: Each run carries at least this many full-size packets ...
MIN_PACKETS_PER_RUN = 2000
#: ... and lasts at least this many times the shaper's queue (see the module docstring).
MIN_QUEUES_PER_RUN = 100


@dataclasses.dataclass(frozen=True)
class RateRow:
    """One rate's line of the table: the median run's goodput against the theoretical goodput."""

    rate_mbit: float
    theoretical_mbps: float
    goodput_mbps: float
    seconds: int
    burst_bytes: int
    ratio: float
    runs: tuple[float, ...]  # each run's goodput, Mbit/s
    retransmits: int
    cpu_sender_pct: float
    cpu_limited: bool  # the theoretical goodput is near the CPU ceiling: not counted as a miss


def run_seconds(spec: ShapingSpec, min_duration_s: float, mtu: int = 1500) -> int:
    """How long to measure ``spec``, in the whole seconds iperf3 takes: --duration, or longer
    (see the module docstring)."""
    ops = plan_shaping(spec, mtu, kernel_burst_time_s())
    shaper = next(op for op in ops if op.kind in QDISCS)
    queue_bytes = shaper.params["limit_bytes"] if spec.qdisc == "tbf" else ops[-1].params["limit_packets"] * (mtu + 14)
    rate = spec.rate_bytes_per_s
    return math.ceil(max(min_duration_s, MIN_PACKETS_PER_RUN * (mtu + 14) / rate,
                         MIN_QUEUES_PER_RUN * queue_bytes / rate))


@dataclasses.dataclass(frozen=True)
class Options:
    """What to measure; checked on construction."""

    rates: tuple[float, ...] = option(RATES_MBIT, "shaped rates in Mbit/s", metavar="MBIT,...")
    qdisc: str = option("tbf", "shaper", choices=QDISCS)
    framing: str = option("tc", "what the shaper counts: tc's default, or Ethernet with preamble, FCS and gap",
                          choices=FRAMINGS)
    mss: int = option(1460, "TCP MSS (iperf3 -M)")
    duration: float = option(5.0, "measured seconds per run at least, after a 1 s warm-up iperf3 leaves out; runs "
                             f"last {MIN_PACKETS_PER_RUN} full-size packets and {MIN_QUEUES_PER_RUN} queue lengths "
                             "if that is longer", metavar="SECONDS")
    repeat: int = option(1, "measurements per rate (the median is used)")
    dry_run: bool = option(False, "print the tc plan of each rate and exit")
    verbose: bool = option(False, "log what is being done", flag=("-v", "--verbose"))
    kernel: KernelChoice = KernelChoice()

    def __post_init__(self) -> None:
        if not self.rates or min(self.rates) <= 0:
            raise ValueError(f"--rates must be positive Mbit/s values, not {self.rates!r}")
        ShapingSpec(1, qdisc=self.qdisc, framing=self.framing)
        if not 88 <= self.mss <= 1460:
            raise ValueError(f"--mss must be 88..1460 (TCP's minimum .. IPv4 at MTU 1500), not {self.mss}")
        if self.repeat < 1:
            raise ValueError(f"--repeat must be at least 1, not {self.repeat}")


@dataclasses.dataclass(frozen=True)
class Result:
    """Where it ran, the congestion control it set, the CPU ceiling and each rate's row; or, on a dry run, the plan."""

    where: str = ""
    congestion_control: str = ""
    ceiling_mbps: float = 0.0
    rows: tuple[RateRow, ...] = ()
    plan: tuple[str, ...] = ()

    @property
    def missed(self) -> int:
        """Rates the CPU could fill that missed the target."""
        return sum(verdict(r, self.ceiling_mbps) == "NO" for r in self.rows)


def set_congestion_control(namespaces: tuple[str, ...]) -> str:
    """Make a loss-based TCP congestion control the default in ``namespaces``; returns its name.

    A namespace other than the initial one may only choose algorithms listed in
    net.ipv4.tcp_allowed_congestion_control (here "reno bbr" on the host), hence the fallback.
    """
    for algo in CONGESTION_CONTROL:
        ok = all(subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                                 f"net.ipv4.tcp_congestion_control={algo}"],
                                capture_output=True, text=True).returncode == 0 for ns in namespaces)
        if ok:
            return algo
    out = subprocess.run(["ip", "netns", "exec", namespaces[0], "sysctl", "-n", "net.ipv4.tcp_congestion_control"],
                         capture_output=True, text=True)
    return out.stdout.strip() + " (could not set cubic or reno)"


def measure(args: Options) -> tuple[str, float, list[RateRow]]:
    from experiments.engine import iperf
    from topologies.shaping import shaped
    from topologies.veth_pair import veth_pair

    iperf.check()
    rows = []
    with veth_pair() as p:
        cc = set_congestion_control((p.a, p.b))
        print(f"  CPU ceiling: {args.qdisc} at {CEILING_RATE_MBIT} Mbit ...", file=sys.stderr, flush=True)
        free = ShapingSpec(CEILING_RATE_MBIT, qdisc=args.qdisc, framing=args.framing)
        with shaped(p.a, p.if_a, free, p.mtu), shaped(p.b, p.if_b, free, p.mtu):
            ceiling = iperf.measure(p.b, p.a, p.v4b, duration_s=math.ceil(min(args.duration, 3.0)),
                                    mss=args.mss).goodput_mbps
        for rate in args.rates:
            spec = ShapingSpec(rate, qdisc=args.qdisc, framing=args.framing)
            seconds = run_seconds(spec, args.duration, p.mtu)
            results = []
            for n in range(args.repeat):
                print(f"  {args.qdisc} {rate:g} Mbit, run {n + 1}/{args.repeat}, {seconds:.0f} s ...",
                      file=sys.stderr, flush=True)
                with shaped(p.a, p.if_a, spec, p.mtu) as ops, shaped(p.b, p.if_b, spec, p.mtu):
                    results.append(iperf.measure(p.b, p.a, p.v4b, duration_s=seconds, mss=args.mss))
            goodput = statistics.median(r.goodput_mbps for r in results)
            theory = theoretical_goodput_mbps(rate, args.mss, framing=args.framing)
            shaper = next(op for op in ops if op.kind == args.qdisc)
            rows.append(RateRow(rate_mbit=rate, theoretical_mbps=theory, goodput_mbps=goodput,
                                seconds=seconds, burst_bytes=shaper.params.get("burst_bytes") or
                                next(op for op in ops if op.target == "class").params["burst_bytes"],
                                ratio=goodput / theory, runs=tuple(r.goodput_mbps for r in results),
                                retransmits=sum(r.retransmits or 0 for r in results),
                                cpu_sender_pct=statistics.median(r.cpu_sender_pct or 0.0 for r in results),
                                cpu_limited=theory > CPU_LIMITED_SHARE * ceiling))
    return cc, ceiling, rows


def verdict(row: RateRow, ceiling: float) -> str:
    """Whether a rate met the target; one that could not (its theoretical goodput near what the
    CPU carries when the shaper does not bind) says so instead of counting as a miss."""
    lo, hi = TARGET
    if lo <= row.ratio <= hi:
        return "yes"
    if row.cpu_limited:
        return f"NO (CPU-limited: {ceiling:.0f} Mbit/s when the shaper does not bind; not counted)"
    return "NO"


def page(args: Options, result: Result) -> str:
    """The table: each rate's goodput against the theoretical one, and whether it met the target."""
    if args.dry_run:
        return "\n".join(result.plan)
    ceiling, rows = result.ceiling_mbps, result.rows
    lines = [f"Shaping accuracy: {args.qdisc}, framing {args.framing}, MSS {args.mss}, {args.duration:g} s per run, "
             f"{args.repeat} run(s) per rate (median), TCP {result.congestion_control}, both ends of a veth shaped",
             f"kernel: {result.where}; CPU ceiling (same qdisc at {CEILING_RATE_MBIT} Mbit, not binding): "
             f"{ceiling:.0f} Mbit/s",
             "CPU %: the sender's CPU use as iperf3 reports it (100 = one CPU busy)",
             f"target: goodput / theoretical within {TARGET[0]}..{TARGET[1]} at every rate the CPU can fill"]
    head = (f"{'rate Mbit/s':>11} {'burst B':>9} {'run s':>5} {'theory Mbit/s':>13} {'measured':>10} "
            f"{'ratio':>7} {'retrans':>7} {'CPU %':>5}  within target")
    lines += [head, "-" * len(head)]
    for r in rows:
        runs = "" if len(r.runs) == 1 else "  runs: " + ", ".join(f"{g:.3f}" for g in r.runs)
        lines.append(f"{r.rate_mbit:>11g} {r.burst_bytes:>9} {r.seconds:>5.0f} {r.theoretical_mbps:>13.3f} "
                     f"{r.goodput_mbps:>10.3f} {r.ratio:>7.4f} {r.retransmits:>7} {r.cpu_sender_pct:>5.0f}  "
                     f"{verdict(r, ceiling)}{runs}")
    lines.append(f"{len(rows) - result.missed}/{len(rows)} rates meet the target where the CPU can fill the link"
                 if not result.missed else f"{result.missed} rate(s) the CPU could fill missed the target")
    return "\n".join(lines)


def run(args: Options) -> Result:
    """What the benchmark measures, on the kernel it runs on (or, on a dry run, the tc plan of each rate)."""
    if args.dry_run:
        plan = []
        for rate in args.rates:
            plan.append(f"# {rate:g} Mbit/s, theoretical TCP goodput at MSS {args.mss}: "
                        f"{theoretical_goodput_mbps(rate, args.mss, framing=args.framing):.3f} Mbit/s")
            spec = ShapingSpec(rate, qdisc=args.qdisc, framing=args.framing)
            plan += [f"tc {op.describe()}" for op in plan_shaping(spec, burst_time_s=kernel_burst_time_s())]
        return Result(plan=tuple(plan))
    where = running_on()
    cc, ceiling, rows = measure(args)
    return Result(where=where, congestion_control=cc, ceiling_mbps=ceiling, rows=tuple(rows))


def needs(args: Options) -> Needs:
    """Veth and the qdisc, not ESP: the host kernel runs it where it has them."""
    return Needs(("veth", f"qdisc {args.qdisc}"))


BENCHMARK = Benchmark("shaping_accuracy", Options, run, page, root="network namespaces, tc", needs=needs)

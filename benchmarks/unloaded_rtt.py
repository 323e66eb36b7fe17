"""The unloaded round trip through a tunnel against what predicts it: the probe's accuracy.

    sudo ipsec-testbed bench unloaded_rtt                      # vpn_gateway: none, aes-gcm-256; unshaped, 100, 10, 1
    sudo ipsec-testbed bench unloaded_rtt --profiles aes-gcm-256,wireguard --rates 0,10 --rounds 6

The sweep's latency probe says how long a packet takes through the path; this checks it where the answer is
known in advance, for both of its tools (``sweep --probe-tool``), each run as a sweep runs it
(:mod:`experiments.engine.probe`).  On each path (unshaped: ``--rates 0``; or shaped by tbf as every sweep shapes
it) and for each profile beside plain, irtt runs alone, ``--per-s`` round trips a second for ``--seconds``; then
ICMP echo (iputils' ping, answered by the server's kernel: no process of its own on the path), its packets
irtt's size.  The profiles take turns in ABBA order, ``--rounds`` times, and what a tunnel adds to plain's round
trip is taken round by round (a pair's difference, with its 95 % interval over the rounds), so that the
machine's drift falls on both alike.

What the tunnel adds is predicted from two terms, each computed:

- **its bytes' serialisation**: the tunnel's extra bytes per probe packet (:func:`ipsec.overhead.packet_overhead`),
  request and reply, at the link's rate, where the link makes a lone packet wait for its bytes.  tbf does not:
  it sends a packet at once when its bucket holds the packet's tokens, and between two probes the bucket fills
  (it holds four frames or more), so an unloaded round trip through the shaper carries no serialisation: 0 at
  every rate, and a veth has no rate.  What a NIC at that rate would add is printed beside it, for context;
- **the emulator's CPU on the path**: inside User-Mode Linux the hosts and both gateways are one emulated CPU,
  so the cipher's work on the packet's way is time on its way.  It is counted where nothing but the path runs:
  a ping flood (``ping -f``, :data:`FLOOD_COUNT` echoes of the probe's size, each sent when the last came back)
  keeps the CPU busy with round trips alone, and the meter's CPU time over it per echo is one round trip's work; the
  tunnel's beyond plain's is the term.  It is counted on the unshaped path (``--rates`` must have 0), where the
  flood waits for no shaper, and is the same on every path: the cipher's work does not depend on the link's rate.
  (The CPU over the sparse probe's own run is no measure of it: the guest's timers and the tools' processes between
  probes weigh ten times the path there.)  On a host kernel the same count says
  how much CPU the tunnel's packets took, which there is not all time on the path.

Each run's round trips are summed up two ways: their **mean**, every packet; and their **minimum**, the
unloaded round trip as TCP's ``min_rtt`` and ping's own summary take it: the path's work when the emulator ran
at full speed, as the flood's CPU term was counted.  Between two lone packets the guest sleeps and its host CPU
halts, and a packet that wakes it runs slower, by a factor, not a fixed delay: on the machine of 2026-11-27
every sparse echo took about twice its CPU back to back, through the tunnel as plain, and spells of seconds
slowed even a kept-awake guest by as much (``docs/log/measurements.md``).  So the guest's host CPU is kept awake
during this benchmark (``--uml-keep-awake``, :mod:`testbed.awake`; ``--no-uml-keep-awake`` to let it halt),
and the minimum is like for like with the prediction, while the mean says what a user's sparse packets get.
A third figure is ping's alone: the **flood** of each run, the least round trip of a flood of 50 echoes after
its sparse ones (:func:`experiments.engine.probe.flood_least`), which is what a sweep records as its unloaded
reference's least (``idle_rtt_min_ms``): a flood gives the guest no time to sleep, kept awake or not.

Each tool and statistic is judged: accurate where what it measures the tunnel to add, less the prediction, is
within ``--tolerance`` (default 0.05 ms), the interval included.  ping, with no process at the far end, measures the
path; irtt adds its own processes' scheduling at both ends, which in a guest is the larger noise.
``--out DIR`` gets ``results.json`` (every run) and ``report.html``.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

from experiments import doctor
from experiments.benchmark import Benchmark, check_profiles_and_rate, option
from experiments.job import KernelChoice
from testbed.capabilities import Needs
from topologies import TOPOLOGIES
from topologies.shaping import MAX_RATE_MBIT

#: The rates of the default: unshaped (0), then the seeds' range.
RATES = (0.0, 100.0, 10.0, 1.0)
ETHERNET_BYTES = 14
#: Echoes of the flood that counts a round trip's CPU.
FLOOD_COUNT = 20000
#: Each run's round trips summed up as: their mean, and their minimum (:func:`summed`).
STATISTICS = ("mean", "minimum", "flood")
_RECEIVED = re.compile(r"(\d+) received")


@dataclasses.dataclass(frozen=True)
class Run:
    """One profile on one path in one round: the two tools' round trips (ms) and the CPU per probe round trip."""

    rate_mbit: float
    profile: str
    round: int
    irtt_ms: tuple[float, ...]
    ping_ms: tuple[float, ...]
    cpu_us_per_rt: float | None  # the emulator's CPU time over a ping flood, per echo answered: a round trip's work
    flood_ms: float | None = None  # the least round trip of the sweep's reference flood (ping's; None: no reply)


def summed(ms: Sequence[float], statistic: str) -> float | None:
    """A run's round trips as one of :data:`STATISTICS` says (pure): their mean or their minimum; None without
    round trips."""
    if not ms:
        return None
    return statistics.fmean(ms) if statistic == "mean" else min(ms)


def figure_of(run: Run, tool: str, statistic: str) -> float | None:
    """One tool's figure of ``run`` as ``statistic`` says (pure): its sparse round trips summed up, or for the
    flood ping's flood least (irtt has none)."""
    if statistic == "flood":
        return run.flood_ms if tool == "ping" else None
    return summed(run.irtt_ms if tool == "irtt" else run.ping_ms, statistic)


@dataclasses.dataclass(frozen=True)
class Added:
    """What a profile adds to plain's round trip on one path, round by round: mean and 95 % half-width (ms)."""

    mean: float
    ci95: float | None
    n: int


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One profile on one path: what the tools measured it to add, the prediction, and whether they agree."""

    rate_mbit: float
    profile: str
    irtt: Added | None  # None for the flood: ping's alone
    ping: Added | None
    cpu_ms: Added  # the CPU term: the profile's CPU per round trip beyond plain's, on the unshaped path
    residual: Added | None  # irtt's added round trip less the prediction, round by round
    ping_residual: Added | None  # ping's
    serialisation_ms: float  # what the shaper makes a lone packet wait for the tunnel's bytes (0 for tbf)
    nic_ms: float  # what a NIC at the rate would add (context; 0 unshaped)
    tolerance_ms: float
    statistic: str = "mean"  # how each run's round trips were summed up (:data:`STATISTICS`)

    def within(self, residual: Added | None) -> bool:
        """Whether a tool's residual, its interval included, lies inside ±tolerance."""
        return residual is not None and residual.ci95 is not None and \
            abs(residual.mean) + residual.ci95 <= self.tolerance_ms


def probe_packet_bytes(profile: str, ip_version: int = 4, mtu: int = 1500) -> tuple[int, int]:
    """A probe packet's bytes on the wire plain and through ``profile`` (Ethernet frame; pure)."""
    from experiments.engine.probe import PAYLOAD_BYTES
    from ipsec.overhead import IP_HEADER_BYTES, packet_overhead

    # IP, then UDP (irtt) or ICMP (ping): 8 bytes either way, then the probe's payload
    inner = IP_HEADER_BYTES[ip_version] + 8 + PAYLOAD_BYTES
    extra = packet_overhead(profile, "tunnel", ip_version, inner, mtu) if profile != "none" else 0
    return inner + ETHERNET_BYTES, inner + extra + ETHERNET_BYTES


def nic_serialisation_ms(profile: str, rate_mbit: float) -> float:
    """What a NIC sending at ``rate_mbit`` adds to a round trip for the tunnel's bytes: request and reply (pure)."""
    if rate_mbit <= 0:
        return 0.0
    plain, tunnel = probe_packet_bytes(profile)
    return 2 * (tunnel - plain) * 8 / (rate_mbit * 1e6) * 1000


def added(diffs: Sequence[float]) -> Added:
    """The mean of the rounds' differences (tunnel less plain) with its t interval (pure)."""
    from analysis.stats import Summary

    s = Summary.of(list(diffs))
    return Added(s.mean, s.ci95, s.n)


def _pairs(runs: Sequence[Run], rate: float, profile: str) -> list[tuple[Run, Run]]:
    """Plain's run and the profile's of each round on one path, where both answered."""
    keyed = {(r.rate_mbit, r.profile, r.round): r for r in runs}
    rounds = sorted(k[2] for k in keyed if k[:2] == (rate, profile) and (rate, "none", k[2]) in keyed)
    return [(keyed[(rate, "none", n)], keyed[(rate, profile, n)]) for n in rounds]


def less(a: Added | None, b: Added) -> Added | None:
    """``a - b`` of two estimates measured apart (their intervals combined in quadrature; pure)."""
    if a is None:
        return None
    ci = math.hypot(a.ci95, b.ci95) if a.ci95 is not None and b.ci95 is not None else None
    return Added(a.mean - b.mean, ci, min(a.n, b.n))


def verdicts(runs: Sequence[Run], tolerance_ms: float) -> list[Verdict]:
    """Per statistic (:data:`STATISTICS`), path and tunnel profile, its differences to plain round by round, and
    the prediction, whose CPU term is the unshaped path's (pure).  None without an unshaped path of two rounds or
    more for the profile."""
    return [v for statistic in STATISTICS for v in _verdicts(runs, tolerance_ms, statistic)]


def _verdicts(runs: Sequence[Run], tolerance_ms: float, statistic: str) -> list[Verdict]:
    out = []
    for profile in dict.fromkeys(r.profile for r in runs if r.profile != "none"):
        flooded = [(p, t) for p, t in _pairs(runs, 0.0, profile)
                   if p.cpu_us_per_rt is not None and t.cpu_us_per_rt is not None]
        if len(flooded) < 2:
            continue
        cpu = added([(t.cpu_us_per_rt - p.cpu_us_per_rt) / 1000 for p, t in flooded])
        serialisation = 0.0  # tbf sends a lone packet at once: its bucket refills between probes
        predicted = Added(serialisation + cpu.mean, cpu.ci95, cpu.n)
        for rate in sorted({r.rate_mbit for r in runs if r.profile == profile}, key=lambda x: (x != 0, -x)):
            both = _pairs(runs, rate, profile)
            irtt = _differences([(figure_of(p, "irtt", statistic), figure_of(t, "irtt", statistic)) for p, t in both])
            ping = _differences([(figure_of(p, "ping", statistic), figure_of(t, "ping", statistic)) for p, t in both])
            if len(irtt) < 2 and len(ping) < 2:
                continue
            by_irtt = added(irtt) if len(irtt) >= 2 else None
            by_ping = added(ping) if len(ping) >= 2 else None
            out.append(Verdict(rate, profile, by_irtt, by_ping, cpu, less(by_irtt, predicted),
                               less(by_ping, predicted), serialisation, nic_serialisation_ms(profile, rate),
                               tolerance_ms, statistic))
    return out


def _differences(pairs: Sequence[tuple[float | None, float | None]]) -> list[float]:
    """Tunnel less plain of each round where both have a figure (pure)."""
    return [t - p for p, t in pairs if p is not None and t is not None]


def ping_received(output: str) -> int:
    """The echoes answered, from ping's statistics line (pure); 0 when it printed none."""
    m = _RECEIVED.search(output)
    return int(m.group(1)) if m else 0


@dataclasses.dataclass(frozen=True)
class Options:
    """What to measure; checked on construction, plain put first among the profiles."""

    profiles: tuple[str, ...] = option(("aes-gcm-256",), "tunnels beside plain", metavar="NAME,...")
    rates: tuple[float, ...] = option(RATES, "paths: 0 unshaped, else the shaped link's rate", metavar="MBIT,...")
    topology: str = option("vpn_gateway", "network (default: vpn_gateway); the probe runs from its first client "
                           "to its server", choices=tuple(sorted(TOPOLOGIES)), show_default=False)
    seconds: float = option(4.0, "each tool's run per profile, path and round", metavar="S")
    per_s: float = option(50.0, "round trips a second, each tool", metavar="N")
    rounds: int = option(4, "ABBA rounds per path", metavar="N")
    tolerance: float = option(0.05, "how far the measured may lie from the predicted, its interval included",
                              metavar="MS")
    out: str | None = option(None, "where results.json and report.html (the plots) go (default: "
                             "runs/<date>-bench-unloaded_rtt in the checkout)", metavar="DIR")
    # lone packets at the emulator's full speed, as the CPU term is counted
    kernel: KernelChoice = KernelChoice(keep_awake=True)

    def __post_init__(self) -> None:
        check_profiles_and_rate(self.profiles, 1.0)
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"--topology must be one of {', '.join(sorted(TOPOLOGIES))}, not {self.topology!r}")
        bad = [r for r in self.rates if not (r == 0 or 0 < r <= MAX_RATE_MBIT)]
        if bad or not self.rates:
            raise ValueError(f"--rates: {', '.join(f'{r:g}' for r in bad) or 'none given'}; 0 (unshaped) or Mbit/s "
                             f"in (0, {MAX_RATE_MBIT:g}]")
        if not 1 <= self.seconds <= 60:
            raise ValueError(f"--seconds must be 1..60, not {self.seconds:g}")
        if not 1 <= self.per_s <= 100:
            raise ValueError(f"--per-s must be 1..100 round trips a second, not {self.per_s:g}")
        if 0 not in self.rates:
            raise ValueError("--rates must include 0: the unshaped path, where the CPU term is counted (a flood "
                             "would fill a shaped link)")
        if self.rounds < 2:
            raise ValueError(f"--rounds must be 2 or more (a difference's interval needs two), not {self.rounds}")
        object.__setattr__(self, "profiles", ("none", *[p for p in self.profiles if p != "none"]))


@dataclasses.dataclass(frozen=True)
class Result:
    """Where it ran, every run, the verdicts and the report it wrote."""

    where: str  # the backend and its kernel release
    awake: str  # what kept the guest's host CPU awake, as :func:`awake_said` says it
    runs: tuple[Run, ...]
    verdicts: tuple[Verdict, ...]
    elapsed_s: float
    report: str


def measure(net, meter, rate: float, profile: str, rnd: int, args: Options) -> Run:
    """Both tools, one after the other, then the flood that counts a round trip's CPU, on ``net`` as it is now
    (its profile and shaping set)."""
    from experiments.engine import iperf, probe

    client, server = net.spec.flows[0]
    cns, addr = net.ns(client), net.addr(server)
    rtts = {}
    for tool in (probe.IRTT, probe.PING):  # the sweep's probe, each tool as a sweep runs it
        got = probe.trips(probe.run(cns, addr, args.seconds, 1.0 / args.per_s, tool), args.seconds * 2 + 30)
        if isinstance(got, str):
            print(f"bench unloaded_rtt: {profile} at {_path(rate)}, round {rnd}: {got}", file=sys.stderr)
        rtts[tool] = () if isinstance(got, str) else tuple(t.rtt_ms for t in got if t.rtt_ms is not None)
    irtt, ping = rtts[probe.IRTT], rtts[probe.PING]
    least = probe.flood_least(cns, addr, 10.0)  # the sweep's reference least, as a sweep takes it
    if isinstance(least, str):
        print(f"bench unloaded_rtt: {profile} at {_path(rate)}, round {rnd}: {least}", file=sys.stderr)
    flood_ms = least if isinstance(least, float) else None
    if rate:  # the flood would fill the shaped link: its wait, not the path's work, would be counted
        return Run(rate, profile, rnd, irtt, ping, None, flood_ms)
    f0 = meter.sample()
    flood = iperf.popen_in(cns, probe.flood_argv(addr, FLOOD_COUNT), stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    flooded, _ = flood.communicate(timeout=120)
    f1 = meter.sample()
    answered = ping_received(flooded)
    cpu = (f1.cpu_ns - f0.cpu_ns) / 1000 / answered if answered else None
    return Run(rate, profile, rnd, irtt, ping, cpu, flood_ms)


def run(args: Options) -> Result:
    """What the benchmark measures, on the kernel it runs on: each run's row on stderr as it comes."""
    from experiments.engine import probe
    from experiments.engine.measure import switch_ipsec
    from testbed import backends
    from topologies import build_spec
    from topologies.network import Network
    from topologies.shaping import ShapingSpec

    spec = build_spec(args.topology)
    rates = sorted(args.rates, key=lambda r: (r != 0, -r))  # unshaped first: the network is built so
    where, awake = f"{backends.current().label()} ({os.uname().release})", awake_said()
    print(f"{heading(args, where, awake)}\n{ROW_HEADER}", file=sys.stderr, flush=True)
    runs: list[Run] = []
    meter = backends.current().cpu_meter()
    t0 = time.monotonic()
    first = ShapingSpec(rate_mbit=rates[0]) if rates[0] else None
    try:
        with Network(spec, shaping=first) as net, probe.Servers([net.ns(spec.flows[0][1])]):
            current = "none"
            for rate in rates:
                if rate and rate != rates[0]:
                    net.reshape(ShapingSpec(rate_mbit=rate))
                for rnd in range(args.rounds):
                    for profile in args.profiles if rnd % 2 == 0 else args.profiles[::-1]:
                        current = switch_ipsec(net, current, profile, "tunnel", (4,))
                        one = measure(net, meter, rate, profile, rnd, args)
                        runs.append(one)
                        print(row(one, args), file=sys.stderr, flush=True)
    finally:
        meter.close()
    elapsed = time.monotonic() - t0
    found = verdicts(runs, args.tolerance)
    return Result(where, awake, tuple(runs), tuple(found), elapsed, write_page(args, runs, found))


def heading(args: Options, where: str, awake: str) -> str:
    """The line that says where and how it measured."""
    return (f"{where}; {args.topology}; irtt then ping, {args.per_s:g} a second for {args.seconds:g} s each, "
            f"{args.rounds} ABBA rounds per path; {awake}")


ROW_HEADER = (f"{'path':>10s} {'round':>5s} {'profile':>22s} {'irtt mean':>9s} {'minimum':>7s} {'ping mean':>9s} "
              f"{'minimum':>7s} {'flood of 50':>11s} {'flood CPU µs/rt':>15s} {'answered':>8s}")


def page(args: Options, result: Result) -> str:
    """Every run's row, then what each tunnel adds against the prediction and how many agree, and the report."""
    return "\n".join([heading(args, result.where, result.awake), ROW_HEADER, *(row(r, args) for r in result.runs),
                      f"{len(result.runs)} runs in {result.elapsed_s:.0f} s",
                      *verdict_lines(result.verdicts, args.tolerance), f"report: {result.report}"])


def needs(args: Options) -> Needs:
    """Each profile's protocols (and veth and tbf): plain's beside the tunnels'."""
    return doctor.needs(args.profiles)


def _path(rate: float) -> str:
    return "unshaped" if not rate else f"{rate:g} Mbit/s"


def _f(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def keep_awake() -> str:
    """What kept the guest's host CPU from idling (:mod:`testbed.awake`), as the host handed it; "" for nothing."""
    from testbed import handoff

    return handoff.current().keep_awake


def awake_said() -> str:
    from testbed import backends

    if keep_awake():
        return f"the guest's host CPU kept awake ({keep_awake()})"
    return "the guest's host CPU left to idle" if backends.current().name == backends.UmlBackend.name else ""


def row(r: Run, args: Options) -> str:
    """A run's line of the table (pure)."""
    irtt, ping = ([_f(summed(ms, s)) for s in ("mean", "minimum")] for ms in (r.irtt_ms, r.ping_ms))
    return (f"{_path(r.rate_mbit):>10s} {r.round:>5d} {r.profile:>22s} {irtt[0]:>9s} {irtt[1]:>7s} "
            f"{ping[0]:>9s} {ping[1]:>7s} {_f(r.flood_ms):>11s} {_f(r.cpu_us_per_rt, 1):>15s} "
            f"{len(r.irtt_ms):>4d}/{int(args.seconds * args.per_s)}")


def _pm(a: Added | None) -> str:
    if a is None:
        return "–"
    return f"{a.mean:+.3f} ± {a.ci95:.3f}" if a.ci95 is not None else f"{a.mean:+.3f}"


def verdict_lines(found: Sequence[Verdict], tolerance_ms: float) -> list[str]:
    """The verdicts' table and, per tool and statistic, how many agree with the prediction (pure)."""
    lines = ["what the tunnel adds to plain's round trip, ms, round by round (95 % interval); the prediction: "
             "the shaper's serialisation of its bytes (tbf: none for a lone packet) + its CPU per round trip",
             f"{'each run':>8s} {'path':>10s} {'profile':>22s} {'CPU term':>16s} {'a NIC would add':>15s} "
             f"{'irtt':>16s} {'irtt - predicted':>16s} {'ping':>16s} {'ping - predicted':>16s}"]
    for v in found:
        lines.append(f"{v.statistic:>8s} {_path(v.rate_mbit):>10s} {v.profile:>22s} {_pm(v.cpu_ms):>16s} "
                     f"{v.nic_ms:>15.3f} {_pm(v.irtt):>16s} {_pm(v.residual):>16s} {_pm(v.ping):>16s} "
                     f"{_pm(v.ping_residual):>16s}")
    for statistic in STATISTICS:
        mine = [v for v in found if v.statistic == statistic]
        for tool, pick in (("irtt", lambda v: v.residual), ("ping", lambda v: v.ping_residual)):
            if not any(pick(v) for v in mine):
                continue  # irtt has no flood
            good = sum(v.within(pick(v)) for v in mine)
            lines.append(f"{tool}, {statistic} of each run: {good} of {len(mine)} paths and profiles within "
                         f"±{tolerance_ms:g} ms of the prediction")
    return lines


def write_page(args: Options, runs: Sequence[Run], found: Sequence[Verdict]) -> str:
    """The tunnel's added round trip against the prediction, per path and profile: a figure per statistic."""
    from analysis import benchpage
    from testbed import backends

    sections = []
    said = {"mean": "the mean of each run's sparse round trips", "minimum": "the least of each run's sparse round "
            "trips", "flood": "the least of each run's flood of 50 echoes (ping's alone: a sweep's idle_rtt_min_ms)"}
    short = {"mean": "each run's mean", "minimum": "each run's least", "flood": "each run's flood of 50"}
    colour = {"irtt": "#636efa", "ping": "#ef553b", "predicted": "#00cc96"}  # a tool's the same in every figure
    for statistic in STATISTICS:
        fig = benchpage.figure(f"What the tunnel adds to the unloaded round trip: {short[statistic]}", "path", "ms")
        for profile in dict.fromkeys(v.profile for v in found):
            mine = [v for v in found if v.profile == profile and v.statistic == statistic]
            xs = [_path(v.rate_mbit) for v in mine]
            if any(v.irtt for v in mine):
                fig.add_scatter(x=xs, y=[v.irtt.mean if v.irtt else None for v in mine], mode="markers",
                                marker={"color": colour["irtt"]}, name=f"{profile}: irtt",
                                error_y={"type": "data", "array": [(v.irtt.ci95 or 0) if v.irtt else 0 for v in mine]})
            fig.add_scatter(x=xs, y=[v.ping.mean if v.ping else None for v in mine], mode="markers",
                            marker={"color": colour["ping"]}, name=f"{profile}: ping",
                            error_y={"type": "data", "array": [(v.ping.ci95 or 0) if v.ping else 0 for v in mine]})
            fig.add_scatter(x=xs, y=[v.serialisation_ms + v.cpu_ms.mean for v in mine], mode="lines",
                            line={"dash": "dash", "color": colour["predicted"]},
                            name=f"{profile}: predicted (serialisation + CPU)")
        sections.append(benchpage.Section(
            f"Measured against predicted: {short[statistic]}",
            f"Markers: what the tunnel adds to plain's round trip ({said[statistic]}), round by "
            f"round, with its 95 % interval; dashed: the prediction. A tool is accurate where the two agree within "
            f"±{args.tolerance:g} ms.", fig))
    data = {"benchmark": "unloaded_rtt", "where": backends.current().label(), "kernel": os.uname().release,
            "topology": args.topology, "seconds": args.seconds, "per_s": args.per_s, "rounds": args.rounds,
            "keep_awake": keep_awake() or None,
            "verdicts": [{**dataclasses.asdict(v), "irtt_within": v.within(v.residual),
                          "ping_within": v.within(v.ping_residual)} for v in found],
            "runs": [dataclasses.asdict(r) for r in runs]}
    return benchpage.write(args.out, "unloaded_rtt: the probe against the prediction",
                           f"{data['where']} ({data['kernel']}); {args.topology}; {awake_said()}", sections, data)


BENCHMARK = Benchmark("unloaded_rtt", Options, run, page, root="network namespaces, SAs, qdiscs", needs=needs)

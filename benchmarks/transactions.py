"""Transactions and connections per second through the tunnel: netperf's TCP_RR and TCP_CRR, plain against IPsec.

    sudo ipsec-testbed bench transactions                      # vpn_gateway unshaped: none, aes-gcm-256
    sudo ipsec-testbed bench transactions --profiles aes-gcm-256,chacha20-poly1305,wireguard --sizes 1,1024
    sudo ipsec-testbed bench transactions --tests rr --rate 10 --sizes 1,1400,8000    # the link's serialisation

netperf (not in Debian's main archive) defines the two tests that published IPsec-against-WireGuard comparisons
report beside bulk goodput; the project's own code makes them (:mod:`experiments.transactions`):

- ``rr``: one TCP connection from the first flow's client to its server; a request of SIZE bytes, a response
  of SIZE bytes, the next request when the response is in, as many as fit in the window (TCP_NODELAY on both
  ends, as netperf's TCP_RR);
- ``crr``: the same with a new connection for every transaction (connect, request, response, close: TCP_CRR).

The server is a process of its own in the server's namespace.  Each window (``--duration``, after
``--warmup`` of the same transactions) counts the transactions it completed: transactions per second, and each
one's time (mean, median, 99th percentile).  The profiles are measured side by side, a window each in ABBA order
per round, so that a drift of the machine falls on all alike; rounds go on past ``--repetitions`` while a
profile's transactions per second, or its ratio to plain (taken round by round), has a 95 % interval wider than
``--precision`` percent, up to ``--max-repetitions``.  What bounded each window:

- ``cpu``: the machine emulating the hosts was saturated (its CPU meter, as the sweep's monitor says);
- ``link``: the shaped link's serialisation of a transaction's packets (request and response, each with its
  headers and the tunnel's bytes; for crr the handshake's and the close's too) was half of a transaction's time
  or more;
- ``round trip``: neither: the path's delay per exchange (the stacks, the tunnel's processing, the wait for the
  peer) set the pace.

As the check of this code against an independent tool, irtt (the sweep's latency probe) times the unloaded round
trip of the same path for each profile before its first window: a one-byte rr transaction is one round trip of
the path plus what the two processes add.

``--out DIR`` gets ``results.json`` (every window) and ``report.html``.  Inside User-Mode Linux every host shares
one emulated CPU: the figures are this machine's, not a network's, and the bound column says so.  They move
with the speed of the host CPU the guest runs on, which on a shared machine can change by a third within seconds
(``ipsec-testbed bench cpu_speed`` shows it): only more windows narrow the interval then, and a figure that
stops short of ``--precision`` says about how many it would take.
"""
from __future__ import annotations

import dataclasses
import math
import os
import statistics
import sys
import time
from collections.abc import Mapping, Sequence

from experiments import doctor, transactions
from experiments.benchmark import Benchmark, check_profiles_and_rate, option, running_on
from experiments.job import KernelChoice
from testbed.capabilities import Needs
from topologies import TOPOLOGIES

#: What a window's round trip or serialisation is called in the bound column.
ROUND_TRIP = "round trip"
#: A transaction counts as the link's when its packets' serialisation is at least this share of its time.
LINK_SHARE = 0.5
#: Bytes of a TCP segment's header with the timestamps option (Linux's default), and of a segment with none.
TCP_WITH_TIMESTAMPS = 32
#: Packets of a connection's opening and closing beside its data (SYN, SYN-ACK, ACK; FIN, ACK each way).
HANDSHAKE_PACKETS = 7
MODES = ("tunnel", "transport")


@dataclasses.dataclass(frozen=True)
class Window:
    """One profile's window at one point."""

    kind: str
    size: int
    profile: str
    repetition: int
    count: int
    elapsed_s: float
    per_s: float
    mean_ms: float
    median_ms: float
    p99_ms: float
    cpu_busy_pct: float
    serialisation_ms: float
    bound: str
    speed_ns: float | None = None  # the speed probe's ns per operation over the window (how slow the machine ran)


def serialisation_s(kind: str, size: int, profile: str, mode: str, ip_version: int, rate_mbit: float,
                    mtu: int = 1500) -> float:
    """The seconds the link takes to send one transaction's packets at ``rate_mbit`` (pure): the request and
    the response, each in as many segments as its size takes, with TCP's, IP's and Ethernet's headers and the
    tunnel's bytes (:func:`ipsec.overhead.packet_overhead`); for ``crr`` the connection's opening and closing
    packets too.  Acknowledgements that ride alone are left out (TCP delays them into the next segment)."""
    from ipsec.overhead import ETHERNET_HEADER_BYTES, IP_HEADER_BYTES, max_tcp_mss, packet_overhead

    mss = min(max_tcp_mss(profile, mode, ip_version, mtu), mtu - IP_HEADER_BYTES[ip_version] - TCP_WITH_TIMESTAMPS)

    def wire(payload: int) -> int:
        inner = IP_HEADER_BYTES[ip_version] + TCP_WITH_TIMESTAMPS + payload
        return inner + packet_overhead(profile, mode, ip_version, inner, mtu) + ETHERNET_HEADER_BYTES

    def message(n: int) -> int:
        full, rest = divmod(n, mss)
        return full * wire(mss) + (wire(rest) if rest else 0)

    total = 2 * message(size) + (HANDSHAKE_PACKETS * wire(0) if kind == "crr" else 0)
    return total * 8 / (rate_mbit * 1e6)


def bound_of(cpu_busy_pct: float, serialisation_ms: float, mean_ms: float) -> str:
    """What bounded a window (pure): the CPU, the link's serialisation, or the round trip."""
    from analysis.stats import CPU_SATURATED_PCT

    if cpu_busy_pct >= CPU_SATURATED_PCT:
        return "cpu"
    if mean_ms > 0 and serialisation_ms / mean_ms >= LINK_SHARE:
        return "link"
    return ROUND_TRIP


def window_of(kind: str, size: int, profile: str, repetition: int, times: Sequence[float], elapsed_s: float,
              cpu_busy_pct: float, serialisation_ms: float, speed_ns: float | None = None) -> Window:
    """A :class:`Window` from its transactions' durations (s) and wall time (pure)."""
    ms = sorted(t * 1000 for t in times)
    if not ms:
        raise ValueError(f"{kind} {size} B {profile}: no transaction completed in the window")
    p99 = ms[min(len(ms) - 1, max(0, math.ceil(0.99 * len(ms)) - 1))]
    mean = statistics.fmean(ms)
    return Window(kind, size, profile, repetition, len(ms), elapsed_s, len(ms) / elapsed_s, mean,
                  statistics.median(ms), p99, cpu_busy_pct, serialisation_ms,
                  bound_of(cpu_busy_pct, serialisation_ms, mean), speed_ns)


@dataclasses.dataclass(frozen=True)
class Figure:
    """One profile at one point over its windows: transactions per second and its ratio to plain."""

    kind: str
    size: int
    profile: str
    n: int
    per_s: float
    per_s_ci95: float | None
    ratio: float | None  # to plain, round by round
    ratio_ci95: float | None
    mean_ms: float
    p99_ms: float
    cpu_busy_pct: float
    bounds: str  # what bounded its windows, counted

    def precise(self, precision_pct: float) -> bool:
        def within(value: float | None, ci: float | None) -> bool:
            return value is None or (ci is not None and value > 0 and ci / value * 100 <= precision_pct)

        return within(self.per_s, self.per_s_ci95) and within(self.ratio, self.ratio_ci95)

    def _spreads(self) -> list[float] | None:
        """The windows' CV behind each of the two figures that has one (transactions per second, the ratio);
        None while one of them has no spread yet (one window, or no interval)."""
        from analysis.stats import t_critical_95

        out = []
        for value, ci in ((self.per_s, self.per_s_ci95), (self.ratio, self.ratio_ci95)):
            if value is None:
                continue
            if ci is None or not value or self.n < 2:
                return None
            out.append(ci / abs(value) * math.sqrt(self.n) / t_critical_95(self.n - 1))
        return out

    def windows_needed(self, precision_pct: float, most: int = 1000) -> int | None:
        """About how many windows this figure would take to be :meth:`precise` at the spread its windows had so
        far (the transactions per second's, and the ratio's); None when more than ``most``, or no spread is known."""
        from analysis.stats import repetitions_for

        spreads = self._spreads()
        if spreads is None:
            return None
        need = [self.n]
        for spread in spreads:
            n = repetitions_for(spread, precision_pct / 100, most)
            if n is None:
                return None
            need.append(n)
        return max(need)

    def needed_said(self, precision_pct: float, most: int = 1000) -> str:
        """:meth:`windows_needed` as the benchmark says it: a count, more than ``most``, or not yet known."""
        if self._spreads() is None:
            return "too few windows yet to tell how many it needs"
        need = self.windows_needed(precision_pct, most)
        return f"about {need} windows" if need is not None else f"more than {most:,} windows"


def figures(windows: Sequence[Window], plain: str = "none") -> list[Figure]:
    """Every profile's :class:`Figure` at every point of ``windows`` (pure)."""
    from analysis.stats import Summary, paired

    by: dict[tuple, list[Window]] = {}
    for w in windows:
        by.setdefault((w.kind, w.size, w.profile), []).append(w)
    out = []
    for (kind, size, profile), ws in by.items():
        s = Summary.of([w.per_s for w in ws])
        base = by.get((kind, size, plain)) if profile != plain else None
        ratio = paired("ratio", {w.repetition: w.per_s for w in ws}, {w.repetition: w.per_s for w in base}) \
            if base else None
        counts: dict[str, int] = {}
        for w in ws:
            counts[w.bound] = counts.get(w.bound, 0) + 1
        out.append(Figure(kind, size, profile, s.n, s.mean, s.ci95, ratio.value if ratio else None,
                          ratio.ci95 if ratio else None, statistics.fmean(w.mean_ms for w in ws),
                          statistics.fmean(w.p99_ms for w in ws), statistics.fmean(w.cpu_busy_pct for w in ws),
                          ", ".join(f"{b} {n}" for b, n in sorted(counts.items()))))
    return out


@dataclasses.dataclass(frozen=True)
class Options:
    """What to measure; checked on construction, plain put first among the profiles."""

    profiles: tuple[str, ...] = option(("aes-gcm-256",), "tunnels beside plain", metavar="NAME,...")
    tests: tuple[str, ...] = option(transactions.KINDS, "rr (TCP_RR), crr (TCP_CRR) or both (default: both)",
                                    metavar="rr,crr", show_default=False)
    sizes: tuple[int, ...] = option((1, 1024), f"request and response sizes, {transactions.MIN_SIZE}.."
                                    f"{transactions.MAX_SIZE}", metavar="BYTES,...")
    topology: str = option("vpn_gateway", "network", choices=tuple(sorted(TOPOLOGIES)))
    mode: str = option("tunnel", "IPsec mode", choices=MODES)
    ip: int = option(4, "IP version", choices=(4, 6))
    rate: float = option(10000.0, "the shaped link's rate (default: 10000: unshaped, the CPU and the round trip "
                         "the limits)", metavar="MBIT", show_default=False)
    duration: float = option(2.0, "each window", metavar="SECONDS")
    warmup: float = option(0.5, "transactions before each window, not counted", metavar="SECONDS")
    repetitions: int = option(3, "windows per profile at least", metavar="N")
    max_repetitions: int = option(12, "... and at most, while a figure is less precise than --precision",
                                  metavar="N")
    precision: float = option(2.0, "the 95% interval of a profile's transactions per second, and of its ratio to "
                              "plain, as a share of the value", metavar="PERCENT")
    out: str | None = option(None, "where results.json and report.html (the plots) go (default: "
                             "runs/<date>-bench-transactions in the checkout)", metavar="DIR")
    kernel: KernelChoice = KernelChoice()

    def __post_init__(self) -> None:
        bad = [t for t in self.tests if t not in transactions.KINDS]
        if bad or not self.tests:
            raise ValueError(f"--tests: {', '.join(bad) or 'none given'}; the tests are "
                             f"{', '.join(transactions.KINDS)}")
        for size in self.sizes:
            try:
                transactions.check_size(size)
            except ValueError as e:
                raise ValueError(f"--sizes: {e}") from None
        check_profiles_and_rate(self.profiles, self.rate)
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"--topology must be one of {', '.join(sorted(TOPOLOGIES))}, not {self.topology!r}")
        if self.mode not in MODES:
            raise ValueError(f"--mode must be {' or '.join(MODES)}, not {self.mode!r}")
        if self.ip not in (4, 6):
            raise ValueError(f"--ip must be 4 or 6, not {self.ip!r}")
        if not 0.5 <= self.duration <= 600 or not 0 <= self.warmup <= 60:
            raise ValueError("--duration must be seconds in 0.5..600 and --warmup in 0..60")
        if not 2 <= self.repetitions <= 50:
            raise ValueError(f"--repetitions must be 2..50 (an interval needs two windows), not {self.repetitions}")
        if self.max_repetitions < self.repetitions:
            raise ValueError(f"--max-repetitions {self.max_repetitions} is below --repetitions {self.repetitions}: "
                             "a figure's most windows cannot be fewer than its least")
        if not 0 < self.precision <= 100:
            raise ValueError(f"--precision must be a percentage in (0, 100], not {self.precision:g}")
        object.__setattr__(self, "profiles", ("none", *[p for p in self.profiles if p != "none"]))


@dataclasses.dataclass(frozen=True)
class Result:
    """Where it ran, every window, irtt's unloaded round trip of each profile and the report it wrote."""

    where: str  # the backend, its kernel release and CPUs
    windows: tuple[Window, ...]
    idle_rtt_ms: Mapping[str, float | None]  # irtt's median before the profile's first window (None: no answer)
    elapsed_s: float
    report: str


def run(args: Options) -> Result:
    """What the benchmark measures, on the kernel it runs on: each round's progress and each point's figures on
    stderr as they come."""
    from experiments.engine import probe
    from experiments.engine.measure import switch_ipsec
    from testbed import backends
    from topologies import build_spec
    from topologies.network import Network
    from topologies.shaping import ShapingSpec

    spec = build_spec(args.topology)
    where = running_on()
    print(f"{heading(args, where)}\n{HEADER}", file=sys.stderr, flush=True)
    windows: list[Window] = []
    idle: dict[str, float | None] = {}
    meter = backends.current().cpu_meter()
    t0 = time.monotonic()
    try:
        with Network(spec, shaping=ShapingSpec(rate_mbit=args.rate)) as net:
            client, server = spec.flows[0]
            cns, sns, addr = net.ns(client), net.ns(server), net.addr(server, args.ip)
            with probe.Servers([sns]):
                current = "none"
                for kind in args.tests:
                    for size in args.sizes:
                        with transactions.EchoServer(sns, args.ip, size):
                            point: list[Window] = []
                            rep = 0
                            while rep < args.max_repetitions:
                                order = args.profiles if rep % 2 == 0 else args.profiles[::-1]
                                for profile in order:
                                    current = switch_ipsec(net, current, profile, args.mode, (args.ip,))
                                    if profile not in idle:  # irtt's unloaded round trip, the check
                                        got = probe.result(probe.run(cns, addr, probe.IDLE_S,
                                                                     probe.IDLE_INTERVAL_S, probe.IRTT), 10.0)
                                        idle[profile] = got.rtt_median_ms if isinstance(got, probe.Summary) else None
                                    if args.warmup:
                                        transactions.exchange(cns, addr, args.ip, kind, size, args.warmup)
                                    c0 = meter.sample()
                                    times, took = transactions.exchange(cns, addr, args.ip, kind, size,
                                                                        args.duration)
                                    c1 = meter.sample()
                                    busy = 100.0 * (c1.cpu_ns - c0.cpu_ns) / ((c1.clock_ns - c0.clock_ns) * meter.cpus)
                                    ser = 1000 * serialisation_s(kind, size, profile, args.mode, args.ip, args.rate)
                                    point.append(window_of(kind, size, profile, rep, times, took, busy, ser,
                                                           c0.probe_ns_until(c1)))
                                rep += 1
                                done = figures(point)
                                print(progress(kind, size, rep, args.max_repetitions, done, time.monotonic() - t0),
                                      file=sys.stderr, flush=True)
                                if rep >= args.repetitions and all(f.precise(args.precision) for f in done):
                                    break
                            windows += point
                            for f in in_order(figures(point), args.profiles):
                                print(figure_line(f, idle.get(f.profile)), file=sys.stderr, flush=True)
    finally:
        meter.close()
    return Result(where, tuple(windows), idle, time.monotonic() - t0, write_page(args, windows, idle))


def heading(args: Options, where: str) -> str:
    """The line that says where and how it measured."""
    return (f"{where}; {args.topology}, {args.mode} mode, IPv{args.ip}, {args.rate:g} Mbit/s; windows of "
            f"{args.duration:g} s after {args.warmup:g} s, {args.repetitions}..{args.max_repetitions} per profile, "
            f"precision {args.precision:g} %")


def in_order(figs: Sequence[Figure], profiles: Sequence[str]) -> list[Figure]:
    """``figs`` point by point, each point's in the order of ``profiles`` (pure)."""
    points = list(dict.fromkeys((f.kind, f.size) for f in figs))
    return sorted(figs, key=lambda f: (points.index((f.kind, f.size)), profiles.index(f.profile)))


def page(args: Options, result: Result) -> str:
    """Each point's figures, the ones short of --precision with about how many windows they would take, and the
    report."""
    figs = figures(result.windows)
    lines = [heading(args, result.where), HEADER,
             *(figure_line(f, result.idle_rtt_ms.get(f.profile)) for f in in_order(figs, args.profiles)),
             f"{len(result.windows)} windows in {result.elapsed_s:.0f} s"]
    for f in figs:
        if not f.precise(args.precision):
            lines.append(f"not within {args.precision:g} % after {f.n} windows: {f.kind} {f.size} B {f.profile} "
                         f"(transactions/s ± {_pct(f.per_s, f.per_s_ci95)}, ratio ± {_pct(f.ratio, f.ratio_ci95)}); "
                         f"at this spread {f.needed_said(args.precision)} (--max-repetitions, or a longer --duration)")
    return "\n".join([*lines, f"report: {result.report}"])


def needs(args: Options) -> Needs:
    """Each profile's protocols (and veth and tbf): plain's beside the tunnels'."""
    return doctor.needs(args.profiles)


def progress(kind: str, size: int, rounds: int, most: int, done: Sequence[Figure], elapsed_s: float) -> str:
    """The line a finished round prints: each profile's transactions per second so far and how precise (pure)."""
    said = []
    for f in done:
        ratio = f", ratio ± {_pct(f.ratio, f.ratio_ci95)}" if f.ratio is not None else ""
        said.append(f"{f.profile} {f.per_s:,.0f}/s ± {_pct(f.per_s, f.per_s_ci95)}{ratio}")
    return f"  {kind} {size} B, round {rounds} of at most {most} ({elapsed_s:.0f} s): {'; '.join(said)}"


def _pct(value: float | None, ci: float | None) -> str:
    return "–" if value is None or ci is None or not value else f"{100 * ci / value:.1f} %"


HEADER = (f"{'test':>4s} {'size':>6s} {'profile':>22s} {'n':>3s} {'trans/s':>10s} {'±95%':>6s} {'/plain':>7s} "
          f"{'±95%':>6s} {'mean ms':>8s} {'p99 ms':>7s} {'CPU %':>6s} {'irtt ms':>8s}  bound")


def figure_line(f: Figure, idle_ms: float | None) -> str:
    """A figure's line of the table, with irtt's unloaded round trip of its profile (pure)."""
    ratio = f"{f.ratio:.3f}" if f.ratio is not None else "–"
    return (f"{f.kind:>4s} {f.size:>6d} {f.profile:>22s} {f.n:>3d} {f.per_s:>10.1f} "
            f"{_pct(f.per_s, f.per_s_ci95):>6s} {ratio:>7s} "
            f"{_pct(f.ratio, f.ratio_ci95) if f.ratio is not None else '':>6s} {f.mean_ms:>8.3f} {f.p99_ms:>7.3f} "
            f"{f.cpu_busy_pct:>6.0f} {(f'{idle_ms:.3f}' if idle_ms is not None else '–'):>8s}  {f.bounds}")


def write_page(args: Options, windows: Sequence[Window], idle: Mapping[str, float | None]) -> str:
    """The run directory's figures: transactions per second by profile at each point, and the ratio to plain."""
    from analysis import benchpage
    from testbed import backends

    figs = figures(windows)
    rates = benchpage.figure("Transactions per second (95 % interval)", "test and size", "transactions per second")
    ratios = benchpage.figure("Transactions per second against plain (round by round, 95 % interval)",
                              "test and size", "ratio to plain")
    for profile in args.profiles:
        mine = [f for f in figs if f.profile == profile]
        labels = [f"{f.kind} {f.size} B" for f in mine]
        rates.add_bar(x=labels, y=[f.per_s for f in mine], name=profile,
                      error_y={"type": "data", "array": [f.per_s_ci95 or 0 for f in mine]})
        if profile != "none":
            ratios.add_bar(x=labels, y=[f.ratio for f in mine], name=profile,
                           error_y={"type": "data", "array": [f.ratio_ci95 or 0 for f in mine]})
    sections = [
        benchpage.Section("Transactions per second", "Each bar is a profile's mean over its windows (the profiles "
                          "side by side, a window each per round); rr keeps one connection, crr opens one per "
                          "transaction.", rates),
        benchpage.Section("Against plain", "Each profile's transactions per second over plain's, taken round by "
                          "round (the two measured one after the other) and averaged.", ratios),
    ]
    data = {"benchmark": "transactions", "where": backends.current().label(), "kernel": os.uname().release,
            "topology": args.topology, "mode": args.mode, "ip_version": args.ip, "rate_mbit": args.rate,
            "duration_s": args.duration, "warmup_s": args.warmup, "idle_rtt_ms": idle,
            "figures": [dataclasses.asdict(f) for f in figs], "windows": [dataclasses.asdict(w) for w in windows]}
    return benchpage.write(args.out, "transactions: TCP_RR and TCP_CRR through the tunnel",
                           f"{data['where']} ({data['kernel']}); {args.topology}, {args.mode} mode, IPv{args.ip}, "
                           f"{args.rate:g} Mbit/s", sections, data)


BENCHMARK = Benchmark("transactions", Options, run, page, root="network namespaces, SAs", needs=needs)

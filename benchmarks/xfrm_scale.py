"""The data path with thousands of tunnels: goodput and latency through a VPN gateway holding N.

    sudo ipsec-testbed bench xfrm_scale [--tunnels 1,10,100,1000,10000] [--profile aes-gcm-256]

One ``vpn_gateway`` network (h1 - gw1 ==untrusted== gw2 - h2), its one real tunnel keyed
statically (IPv4, ``--profile``, tunnel mode), then, on both gateways, other tunnels added
until each holds N: every added tunnel is what a VPN concentrator holds per site, two SAs
(out and in) and three policies (out, in, fwd) between the gateways' outer addresses, its
selectors a /``--prefix`` site on each side from the benchmarking range 198.18.0.0/15 (RFC
2544), that no packet of the test matches.  For each N, ascending:

- ``install``: the added tunnels' SAs and policies installed on both gateways, through the
  netlink layer's batches (:mod:`ipsec.xfrm.batch`), with their rate in operations per second;
- ``goodput``: one TCP iperf3 flow h1 -> h2 through the real tunnel for ``--duration``
  seconds, its first second omitted.  The links are not shaped: what bounds it is the CPU
  that runs the data path (and, inside User-Mode Linux, the emulator), so it moves with the
  data path's cost per packet, which is what N could change;
- ``latency``: ``--pings`` echo requests h1 -> h2 (0.02 s apart), their round trip's median
  of min/avg/max as ``ping`` reports them;
- what the kernel says it holds (``ip xfrm state count``, ``ip xfrm policy count``) and how it
  looks policies up (``ip -s -s xfrm policy count``: the SPD hash's buckets, and the prefix
  thresholds above which a policy is hashed rather than searched, ``spdh_thresh``: with /32
  sites and the default thresholds (32 for IPv4) every added policy is hashed).

At the end every added tunnel is removed in one batch per gateway (the removal rate), and
the kernel must hold the real tunnel's SAs alone.  ``--out DIR`` gets ``results.json`` and
``report.html``: goodput, round trip and install rate against N, as plots.  Keys come from ``secrets`` and are never
printed.  Exit status 0 when every N was measured, 1 otherwise.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import subprocess
import sys
import time

from experiments import doctor
from experiments.benchmark import Benchmark, check_profiles, option, out_option, running_on
from experiments.engine import iperf
from experiments.job import KernelChoice
from ipsec.plan import AssociationSpec, Endpoint, SpiPlanner, plan_association
from testbed import backends
from testbed.capabilities import Needs
from topologies import build_spec
from topologies.network import Network

#: Sites behind gw1 come from 198.18.0.0/16, those behind gw2 from 198.19.0.0/16.
SITES = (ipaddress.IPv4Network("198.18.0.0/16"), ipaddress.IPv4Network("198.19.0.0/16"))
MAX_TUNNELS = 16384
#: Added tunnels' SPIs and reqids start far above the real tunnel's (0x1000, 1).
FIRST_SPI, FIRST_REQID = 0x100000, 1000
PROCESS_TIMEOUT_S = 60.0


class ScaleError(RuntimeError):
    """The benchmark could not measure one N."""


@dataclasses.dataclass(frozen=True)
class Options:
    """What to measure; checked on construction."""

    tunnels: tuple[int, ...] = option((1, 10, 100, 1000, 10000), f"tunnels per gateway, the real one included, "
                                      f"1..{MAX_TUNNELS}", metavar="N,...")
    profile: str = option("aes-gcm-256", "every tunnel's profile")
    prefix: int = option(32, "the added sites' prefix length; below the SPD's hash threshold (32 for IPv4) their "
                         "policies are searched, not hashed", choices=tuple(range(16, 33)), metavar="16..32")
    duration: float = option(5.0, "seconds of iperf3 per N, the first omitted", metavar="S")
    pings: int = option(50, "echo requests per N", metavar="K")
    out: str | None = out_option("xfrm_scale")
    kernel: KernelChoice = KernelChoice()

    def __post_init__(self) -> None:
        check_profiles((self.profile,), "--profile")
        bad = [n for n in self.tunnels if not 1 <= n <= MAX_TUNNELS]
        if bad or not self.tunnels:
            raise ValueError(f"--tunnels must be in 1..{MAX_TUNNELS}, not {bad or '(none)'}")
        if not 16 <= self.prefix <= 32:
            raise ValueError(f"--prefix must be in 16..32, not {self.prefix}")
        room = SITES[0].num_addresses // 2 ** (32 - self.prefix)
        if max(self.tunnels) - 1 > room:
            raise ValueError(f"--prefix {self.prefix} leaves room for {room} sites per side, "
                             f"fewer than the {max(self.tunnels) - 1} added tunnels")
        if self.duration <= 1.0:
            raise ValueError(f"--duration must be above 1 s (its first second is omitted), not {self.duration:g}")
        if self.pings < 1:
            raise ValueError(f"--pings must be at least 1, not {self.pings}")


@dataclasses.dataclass(frozen=True)
class Row:
    """One N's figures."""

    tunnels: int  # per gateway, the real one included
    added: int = 0  # tunnels installed for this row (both gateways)
    install_s: float = 0.0
    operations: int = 0  # SA and policy adds for this row, both gateways
    goodput_mbps: float = 0.0
    retransmits: int | None = None
    rtt_ms: tuple[float, float, float] = (0.0, 0.0, 0.0)  # min, avg, max
    sas: int = 0  # gw1's SAs (kernel count)
    policies: str = ""  # gw1's `ip xfrm policy count`
    spd: str = ""  # gw1's SPD hash figures


@dataclasses.dataclass(frozen=True)
class Removal:
    """Every added tunnel removed at the end, in one batch per gateway."""

    tunnels: int
    operations: int  # SA and policy deletes, both gateways
    seconds: float
    sas_left: int  # gw1's SAs after: the real tunnel's two

    @property
    def complete(self) -> bool:
        return self.sas_left == 2


@dataclasses.dataclass(frozen=True)
class Result:
    """Where it ran, each N measured, each N that could not be (and why), the removal, the report's path."""

    where: str
    rows: tuple[Row, ...] = ()
    failed: tuple[tuple[int, str], ...] = ()  # (N, why)
    removal: Removal | None = None
    interrupted: bool = False
    report: str = ""

    @property
    def status(self) -> int:
        """0 when every N was measured and the removal left the real tunnel alone; 1 otherwise; 130 interrupted."""
        if self.interrupted:
            return 130
        return 1 if self.failed or (self.removal and not self.removal.complete) else 0


def site(side: int, i: int, prefix: int) -> str:
    """The i-th /prefix site on ``side`` (0: behind gw1, 1: behind gw2)."""
    size = 2 ** (32 - prefix)
    return str(ipaddress.IPv4Network((int(SITES[side].network_address) + i * size, prefix)))


def filler_plans(net: Network, profile: str, first: int, count: int, prefix: int, planner: SpiPlanner) -> list:
    """Tunnels ``first .. first + count - 1`` between the gateways' outer addresses (pure but for keys)."""
    (real,) = net.associations(profile, "tunnel", 4)
    plans = []
    for i in range(first, first + count):
        a = Endpoint(real.a.ns, real.a.address, site(0, i, prefix))
        b = Endpoint(real.b.ns, real.b.address, site(1, i, prefix))
        plans.append(plan_association(AssociationSpec(profile, "tunnel", a, b, forward=True), planner))
    return plans


def apply(plans: list, action: str) -> tuple[float, int]:
    """``install`` or ``remove`` both sides of ``plans``, one batch per gateway; seconds and operations."""
    from ipsec.xfrm import XfrmSocket

    ops = 0
    t0 = time.perf_counter()
    for which in ("a", "b"):
        ns = plans[0].side(which)[0]
        sas = [sa for p in plans for sa in p.side(which)[1]]
        policies = [pol for p in plans for pol in p.side(which)[2]]
        with XfrmSocket(netns=ns) as xs:
            getattr(xs, action)(sas, policies)
        ops += len(sas) + len(policies)
    return time.perf_counter() - t0, ops


def ip(ns: str, *args: str) -> str:
    r = subprocess.run(["ip", "-n", ns, *args], capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S)
    if r.returncode:
        raise ScaleError(f"`ip -n {ns} {' '.join(args)}` failed: {r.stderr.strip()}")
    return r.stdout


def parse_rtt(text: str) -> tuple[float, float, float]:
    """(min, avg, max) in ms from ping's summary ("rtt min/avg/max/mdev = 0.1/0.2/0.3/0.0 ms")."""
    m = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/[\d.]+ ms", text)
    if not m:
        raise ScaleError(f"no round-trip summary in ping's output: {text.strip()[-200:]!r}")
    return float(m.group(1)), float(m.group(2)), float(m.group(3))


def parse_spd(policies: str, states: str) -> str:
    """The SPD's hash buckets and IPv4 thresholds (``ip -s -s xfrm policy count``) and the SAD's
    buckets (``ip -s xfrm state count``), as one phrase."""
    buckets = re.search(r"SPD buckets: count (\d+)", policies)
    thresh = re.search(r"SPD IPv4 thresholds: local (\d+) remote (\d+)", policies)
    sad = re.search(r"buckets count (\d+)", states)
    parts = []
    if buckets:
        parts.append(f"SPD {buckets.group(1)} buckets")
    if thresh:
        parts.append(f"hashed from /{thresh.group(1)}:/{thresh.group(2)}")
    if sad:
        parts.append(f"SAD {sad.group(1)} buckets")
    return ", ".join(parts) or "(not reported)"


def measure(net: Network, row: Row, duration_s: float, pings: int) -> Row:
    """``row`` with the data path's figures through the real tunnel and what gw1's kernel says it holds."""
    h1, h2 = net.ns("h1"), net.ns("h2")
    server = net.addr("h2", 4)
    r = iperf.measure(h2, h1, server, duration_s=duration_s, omit_s=1.0)
    done = subprocess.run(["ip", "netns", "exec", h1, "ping", "-4", "-q", "-c", str(pings), "-i", "0.02",
                           "-W", "2", server], capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S)
    if done.returncode:
        raise ScaleError(f"ping h1 -> h2 through the tunnel failed: {done.stdout.strip()[-200:]}")
    gw1 = net.ns("gw1")
    return dataclasses.replace(
        row, goodput_mbps=r.goodput_mbps, retransmits=r.retransmits, rtt_ms=parse_rtt(done.stdout),
        sas=int(re.search(r"SAD count (\d+)", ip(gw1, "xfrm", "state", "count")).group(1)),
        policies=" ".join(ip(gw1, "xfrm", "policy", "count").split()[1:]),
        spd=parse_spd(ip(gw1, "-s", "-s", "xfrm", "policy", "count"), ip(gw1, "-s", "xfrm", "state", "count")))


def measure_all(args: Options, rows: list[Row], failed: list[tuple[int, str]]) -> Removal | None:
    """Measure every N into ``rows`` (or ``failed``), then remove the added tunnels; the removal."""
    spec = build_spec("vpn_gateway")
    planner = SpiPlanner(first_spi=FIRST_SPI, first_reqid=FIRST_REQID)
    added: list = []
    removal = None
    with Network(spec) as net:
        net.apply_ipsec(args.profile, "tunnel", families=(4,))
        for n in sorted(args.tunnels):
            row = Row(n)
            want = n - 1 - len(added)
            print(f"  {n} tunnels per gateway: {max(want, 0)} added ...", file=sys.stderr, flush=True)
            if want > 0:
                plans = filler_plans(net, args.profile, len(added), want, args.prefix, planner)
                install_s, operations = apply(plans, "install")
                row = dataclasses.replace(row, added=want, install_s=install_s, operations=operations)
                added.extend(plans)
            try:
                rows.append(measure(net, row, args.duration, args.pings))
            except (ScaleError, iperf.IperfError) as e:
                failed.append((n, str(e)))
        if added:
            seconds, ops = apply(added, "remove")
            left = int(re.search(r"SAD count (\d+)", ip(net.ns("gw1"), "xfrm", "state", "count")).group(1))
            removal = Removal(tunnels=len(added), operations=ops, seconds=seconds, sas_left=left)
            if not removal.complete:
                print("xfrm_scale: the gateway does not hold the real tunnel alone after the removal",
                      file=sys.stderr)
    return removal


def run(args: Options) -> Result:
    """What the benchmark measures, on the kernel it runs on; the report written from every N measured,
    even when interrupted."""
    where = running_on()
    rows: list[Row] = []
    failed: list[tuple[int, str]] = []
    removal, interrupted = None, False
    try:
        removal = measure_all(args, rows, failed)
    except KeyboardInterrupt:
        print("xfrm_scale: interrupted", file=sys.stderr)
        interrupted = True
    result = Result(where, tuple(rows), tuple(failed), removal, interrupted)
    return dataclasses.replace(result, report=write_page(args, result)) if rows else result


def page(args: Options, result: Result) -> str:
    """The table: each N's install, goodput, round trip and what the kernel holds; the removal; the report."""
    lines = [f"{result.where}; vpn_gateway, {args.profile} tunnel, IPv4, links not shaped; added sites "
             f"/{args.prefix}; iperf3 {args.duration:g} s (1 s omitted), {args.pings} pings per N",
             f"{'tunnels':>7s} {'added':>6s} {'install s':>9s} {'ops/s':>7s} {'Mbit/s':>8s} {'retr':>5s} "
             f"{'rtt min/avg/max ms':>20s} {'SAs':>6s}  policies (gw1); SPD"]
    lines += [line for _, line in sorted([(r.tunnels, _row_line(r)) for r in result.rows] +
                                         [(n, f"{n:>7d} failed: {why}") for n, why in result.failed])]
    r = result.removal
    if r:
        lines.append(f"removed {r.tunnels} added tunnels ({r.operations} SAs and policies, both gateways) in "
                     f"{r.seconds:.2f} s: {r.operations / r.seconds:.0f} ops/s; gw1 holds {r.sas_left} SAs after "
                     "(the real tunnel's: 2)")
    if result.report:
        lines.append(f"report: {result.report}")
    return "\n".join(lines)


def _row_line(row: Row) -> str:
    rate = f"{row.operations / row.install_s:7.0f}" if row.install_s else f"{'–':>7s}"
    rtt = "/".join(f"{x:.3f}" for x in row.rtt_ms)
    return (f"{row.tunnels:>7d} {row.added:>6d} {row.install_s:>9.2f} {rate} {row.goodput_mbps:>8.1f} "
            f"{row.retransmits if row.retransmits is not None else '–':>5} {rtt:>20s} {row.sas:>6d}  "
            f"{row.policies}; {row.spd}")


def write_page(args: Options, result: Result) -> str:
    """The run directory's figures: goodput and round trip against the tunnels installed, and the install rate."""
    from analysis import benchpage

    rows, removal = result.rows, result.removal
    n = [r.tunnels for r in rows]
    goodput = benchpage.figure("Goodput through the live tunnel", "tunnels installed on each gateway (log)",
                               "TCP goodput, Mbit/s", log_x=True)
    goodput.add_scatter(x=n, y=[r.goodput_mbps for r in rows], mode="lines+markers", name="h1 -> h2")
    rtt = benchpage.figure("Round trip through the live tunnel", "tunnels installed on each gateway (log)",
                           "ping round trip, ms", log_x=True)
    for i, name in enumerate(("min", "avg", "max")):
        rtt.add_scatter(x=n, y=[r.rtt_ms[i] for r in rows], mode="lines+markers", name=name)
    installed = [r for r in rows if r.install_s]
    rate = benchpage.figure("Install rate of the added tunnels", "tunnels installed on each gateway (log)",
                            "SA and policy adds per second", log_x=True)
    rate.add_scatter(x=[r.tunnels for r in installed], y=[r.operations / r.install_s for r in installed],
                     mode="lines+markers", name="netlink batches")
    removed = (f" Removing all {removal.tunnels} added tunnels took {removal.seconds:.2f} s, "
               f"{removal.operations / removal.seconds:.0f} operations/s." if removal else "")
    sections = [
        benchpage.Section("Goodput against installed tunnels", "One TCP flow through the gateways' live tunnel; "
                          "the links are not shaped, so the CPU running the data path bounds it and it moves with "
                          "the data path's cost per packet. A flat line: the SAs and policies installed beside the "
                          "live tunnel do not slow it.", goodput),
        benchpage.Section("Round trip against installed tunnels", f"{args.pings} echo requests h1 -> h2 per N, "
                          "as ping reports them.", rtt),
        benchpage.Section("Install rate", "Each row's added tunnels (two SAs, three policies each, on both "
                          "gateways) through the netlink layer's batches." + removed, rate),
    ]
    data = {"benchmark": "xfrm_scale", "where": backends.current().label(), "kernel": os.uname().release,
            "profile": args.profile, "prefix": args.prefix, "duration_s": args.duration,
            "rows": [dataclasses.asdict(r) for r in rows],
            "removal": dataclasses.asdict(removal) if removal else {}}
    return benchpage.write(args.out, "xfrm_scale: a VPN gateway holding N tunnels",
                           f"{data['where']} ({data['kernel']}); vpn_gateway, {args.profile} tunnel, IPv4, links not "
                           f"shaped; added sites /{args.prefix}", sections, data)


def needs(args: Options) -> Needs:
    """The profile's protocols and the base: the host kernel runs it where it has them."""
    return doctor.needs((args.profile,))


BENCHMARK = Benchmark("xfrm_scale", Options, run, page, root="network namespaces, xfrm", needs=needs,
                      status=lambda result: result.status)

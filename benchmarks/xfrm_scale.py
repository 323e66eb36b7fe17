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

import argparse
import dataclasses
import ipaddress
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence

from benchmarks import _common
from cli.options import add_bench_out, add_kernel_options, csv, kernel_choice
from experiments import doctor
from experiments.engine import iperf
from ipsec.plan import AssociationSpec, Endpoint, SpiPlanner, plan_association
from testbed import backends
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


@dataclasses.dataclass
class Row:
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


def measure(net: Network, row: Row, duration_s: float, pings: int) -> None:
    h1, h2 = net.ns("h1"), net.ns("h2")
    server = net.addr("h2", 4)
    r = iperf.measure(h2, h1, server, duration_s=duration_s, omit_s=1.0)
    row.goodput_mbps, row.retransmits = r.goodput_mbps, r.retransmits
    done = subprocess.run(["ip", "netns", "exec", h1, "ping", "-4", "-q", "-c", str(pings), "-i", "0.02",
                           "-W", "2", server], capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S)
    if done.returncode:
        raise ScaleError(f"ping h1 -> h2 through the tunnel failed: {done.stdout.strip()[-200:]}")
    row.rtt_ms = parse_rtt(done.stdout)
    gw1 = net.ns("gw1")
    row.sas = int(re.search(r"SAD count (\d+)", ip(gw1, "xfrm", "state", "count")).group(1))
    row.policies = " ".join(ip(gw1, "xfrm", "policy", "count").split()[1:])
    row.spd = parse_spd(ip(gw1, "-s", "-s", "xfrm", "policy", "count"), ip(gw1, "-s", "xfrm", "state", "count"))


def run(args: argparse.Namespace, rows: list[Row], removal: dict) -> int:
    """Measure every N into ``rows``, the removal into ``removal``; the exit status."""
    spec = build_spec("vpn_gateway")
    planner = SpiPlanner(first_spi=FIRST_SPI, first_reqid=FIRST_REQID)
    added: list = []
    print(f"{'tunnels':>7s} {'added':>6s} {'install s':>9s} {'ops/s':>7s} {'Mbit/s':>8s} {'retr':>5s} "
          f"{'rtt min/avg/max ms':>20s} {'SAs':>6s}  policies (gw1); SPD")
    failed = 0
    with Network(spec) as net:
        net.apply_ipsec(args.profile, "tunnel", families=(4,))
        for n in sorted(args.tunnels):
            row = Row(n)
            want = n - 1 - len(added)
            if want > 0:
                plans = filler_plans(net, args.profile, len(added), want, args.prefix, planner)
                row.install_s, row.operations = apply(plans, "install")
                row.added = want
                added.extend(plans)
            try:
                measure(net, row, args.duration, args.pings)
            except (ScaleError, iperf.IperfError) as e:
                print(f"{n:>7d} failed: {e}", flush=True)
                failed += 1
                continue
            rows.append(row)
            rate = f"{row.operations / row.install_s:7.0f}" if row.install_s else f"{'–':>7s}"
            rtt = "/".join(f"{x:.3f}" for x in row.rtt_ms)
            print(f"{n:>7d} {row.added:>6d} {row.install_s:>9.2f} {rate} {row.goodput_mbps:>8.1f} "
                  f"{row.retransmits if row.retransmits is not None else '–':>5} {rtt:>20s} {row.sas:>6d}  "
                  f"{row.policies}; {row.spd}", flush=True)
        if added:
            seconds, ops = apply(added, "remove")
            left = int(re.search(r"SAD count (\d+)", ip(net.ns("gw1"), "xfrm", "state", "count")).group(1))
            removal.update(tunnels=len(added), operations=ops, seconds=seconds, sas_left=left)
            print(f"removed {len(added)} added tunnels ({ops} SAs and policies, both gateways) in {seconds:.2f} s: "
                  f"{ops / seconds:.0f} ops/s; gw1 holds {left} SAs after (the real tunnel's: 2)")
            if left != 2:
                print("xfrm_scale: the gateway does not hold the real tunnel alone after the removal",
                      file=sys.stderr)
                failed += 1
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tunnels", type=csv(int), default=(1, 10, 100, 1000, 10000), metavar="N,...",
                   help=f"tunnels per gateway, the real one included, 1..{MAX_TUNNELS} "
                        "(default: 1,10,100,1000,10000)")
    p.add_argument("--profile", default="aes-gcm-256", help="every tunnel's profile (default: %(default)s)")
    p.add_argument("--prefix", type=int, default=32, choices=range(16, 33), metavar="16..32",
                   help="the added sites' prefix length; below the SPD's hash threshold (32 for IPv4) "
                        "their policies are searched, not hashed (default: %(default)s)")
    p.add_argument("--duration", type=float, default=5.0, metavar="S",
                   help="seconds of iperf3 per N, the first omitted (default: %(default)s)")
    p.add_argument("--pings", type=int, default=50, metavar="K", help="echo requests per N (default: %(default)s)")
    add_bench_out(p, "xfrm_scale")
    add_kernel_options(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    bad = [n for n in args.tunnels if not 1 <= n <= MAX_TUNNELS]
    if bad:
        parser.error(f"--tunnels must be in 1..{MAX_TUNNELS}, not {bad}")
    room = SITES[0].num_addresses // 2 ** (32 - args.prefix)
    if max(args.tunnels) - 1 > room:
        parser.error(f"--prefix {args.prefix} leaves room for {room} sites per side, "
                     f"fewer than the {max(args.tunnels) - 1} added tunnels")
    if args.duration <= 1.0:
        parser.error("--duration must be above 1 s (its first second is omitted)")
    if os.geteuid() != 0:
        print("xfrm_scale: needs root (network namespaces, xfrm); run it with sudo", file=sys.stderr)
        return 1
    args.out = _common.out_dir(args.out, "xfrm_scale")
    job = _common.bench_job("xfrm_scale", args, kernel_choice(args), doctor.needs((args.profile,)))
    return _common.run_here_or_there(job, body)


def in_guest(job) -> int:
    """This benchmark where the kernel under test is (:mod:`cli.job`)."""
    return body(_common.options_of(job))


def body(args) -> int:
    """What the benchmark measures, on the kernel it runs on."""
    print(f"{backends.current().label()} ({os.uname().release}, {len(os.sched_getaffinity(0))} CPU(s)); "
          f"vpn_gateway, {args.profile} tunnel, IPv4, links not shaped; added sites /{args.prefix}; "
          f"iperf3 {args.duration:g} s (1 s omitted), {args.pings} pings per N")
    rows: list[Row] = []
    removal: dict = {}
    try:
        rc = run(args, rows, removal)
    except KeyboardInterrupt:
        print("xfrm_scale: interrupted", file=sys.stderr)
        rc = 130
    if rows:
        print(f"report: {write_page(args, rows, removal)}")
    return rc


def write_page(args: argparse.Namespace, rows: list[Row], removal: dict) -> str:
    """The run directory's figures: goodput and round trip against the tunnels installed, and the install rate."""
    from analysis import benchpage

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
    removed = (f" Removing all {removal['tunnels']} added tunnels took {removal['seconds']:.2f} s, "
               f"{removal['operations'] / removal['seconds']:.0f} operations/s." if removal else "")
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
            "rows": [dataclasses.asdict(r) for r in rows], "removal": removal}
    return benchpage.write(args.out, "xfrm_scale: a VPN gateway holding N tunnels",
                           f"{data['where']} ({data['kernel']}); vpn_gateway, {args.profile} tunnel, IPv4, links not "
                           f"shaped; added sites /{args.prefix}", sections, data)



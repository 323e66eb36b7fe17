"""How fast IKEv2 brings tunnels up: time to first packet, and tunnels per second, for N road warriors.

    sudo ipsec-testbed bench ike_setup [--clients 1,10,100] [--profile aes-gcm-256] [--kernel auto|host|uml]

For each N, a ``road_warrior`` network with N clients, each a road warrior with its own
strongSwan daemon (``--keying ike``, :mod:`ipsec.ike`) and the gateway's one daemon answering
all of them, as the IETF's IPsec benchmarking drafts (draft-ietf-bmwg-ipsec-term, -meth) name
the figures:

- ``daemons up``: every daemon started and its configuration loaded (N + 1 daemons);
- ``one by one``: the clients initiate in turn, each waiting for the last; per tunnel the IKE
  exchange (the request to the CHILD_SA installed, median and 95th percentile, the request's
  ``swanctl`` process included), and the tunnels per second that makes;
- ``first packet``: for up to ``--first-packets`` clients, from the request to the first echo
  reply through the new tunnel (the IKE exchange, then one ping, its process start included);
- ``on demand``: the daemons started afresh with each client's CHILD_SA as a trap policy
  (``start_action = trap``) and no SA anywhere; for up to ``--first-packets`` clients, one ping with
  no tunnel up, timed to its echo reply: the packet meets the trap policy, the kernel asks the
  daemon for SAs (an XFRM ACQUIRE), the IKE exchange runs, and the packet leaves through the new
  SA.  The client's namespace has ``net.core.xfrm_larval_drop`` at 0, so the kernel holds that
  packet until the SA is there instead of dropping it (the default drops it, and the figure would
  be the sender's retransmission timer): the BMWG drafts' time to first packet for traffic that
  starts with no SA, as a distribution over the clients;
- ``all at once``: the daemons started afresh, every client's request sent together, the time
  until the last tunnel is up, and the tunnels per second that makes;
- ``rekeys``: every tunnel's CHILD_SA rekeyed from its client, one after another (each until
  the kernel at both ends holds the new SAs and not the old) and then all together (until every
  end holds only new ones), as rekeys per second; the requests' ``swanctl`` processes are
  started before the clock, as for the tunnels at once.

``--out DIR`` gets ``results.json`` and ``report.html``: the set-up times per N and the rates
against N, as plots.  A tunnel that does not come up ends the run with the daemons' own reason.  Inside User-Mode
Linux every daemon and every ``swanctl`` shares one emulated CPU, so the figures are this
machine's, not a gateway's; the header says where they were measured.
"""
from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

from experiments import doctor
from experiments.benchmark import Benchmark, check_profiles, option, out_option, running_on
from experiments.job import KernelChoice
from ipsec import ike
from testbed import backends, netns, waiting
from testbed.capabilities import Needs
from testbed.errors import Refused
from topologies import build_spec
from topologies.network import Network
from topologies.spec import MAX_CLIENTS


@dataclasses.dataclass(frozen=True)
class Options:
    """What to measure; checked on construction."""

    clients: tuple[int, ...] = option((1, 10, 100), f"road warriors per run, 1..{MAX_CLIENTS}", metavar="N,...")
    profile: str = option("aes-gcm-256", "the CHILD_SAs' profile")
    first_packets: int = option(10, "clients whose time to the first packet is measured", metavar="K")
    out: str | None = out_option("ike_setup")
    kernel: KernelChoice = KernelChoice()

    def __post_init__(self) -> None:
        bad = [n for n in self.clients if not 1 <= n <= MAX_CLIENTS]
        if bad or not self.clients:
            raise ValueError(f"--clients must be in 1..{MAX_CLIENTS}, not {bad or '(none)'}")
        check_profiles((self.profile,), "--profile")
        if self.first_packets < 0:
            raise ValueError(f"--first-packets must be 0 or more, not {self.first_packets}")


@dataclasses.dataclass(frozen=True)
class Row:
    """One N's figures, in seconds."""

    clients: int
    daemons_s: float  # every daemon started and loaded
    setup: tuple[float, ...]  # each tunnel's IKE exchange, one by one
    first_packet: tuple[float, ...]  # request to first echo reply
    on_demand: tuple[float, ...]  # no SA: first echo sent to its reply
    together_s: float  # every tunnel requested at once, until the last is up
    sas: int  # SAs in the kernel then
    rekeys: tuple[float, ...]  # each tunnel's CHILD_SA rekey, one by one
    rekey_together_s: float  # every CHILD_SA rekeyed at once, until the last is replaced


@dataclasses.dataclass(frozen=True)
class Result:
    """Where it ran, each N's row, the N whose tunnel did not come up (and the daemons' reason), the report."""

    where: str
    rows: tuple[Row, ...] = ()
    failed: tuple[int, str] | None = None  # (N, why): the run ended there
    report: str = ""


def measure(clients: int, profile: str, first_packets: int) -> Row:
    spec = build_spec("road_warrior", clients=clients)
    with Network(spec) as net:
        tunnels = ike.tunnels_for(net.associations(profile, "tunnel", 4))
        keying = ike.Daemons(net.run_id)
        try:
            t0 = time.monotonic()
            keying.start(tunnels)
            daemons_s = time.monotonic() - t0
            setup, first_packet, on_demand = [], [], []
            for i, t in enumerate(keying.initiators):
                setup.append(keying.initiate(t))
                if i < first_packets:
                    first_packet.append(setup[-1] + _first_reply(net, t))
            keying.start(tunnels)  # afresh: every daemon restarted, no tunnel up
            together_s = keying.initiate_together(keying.initiators)
            sas = len(keying.sas())
            rekeys = [keying.rekey_together([t]) for t in keying.initiators]
            rekey_together_s = keying.rekey_together(keying.initiators)
            keying.start(tunnels, on_demand=True)  # afresh: trap policies, no SA anywhere
            for t in keying.initiators[:first_packets]:
                _hold_first_packets(t.me.ns)
                on_demand.append(_first_reply(net, t))
            up = len(keying.sas())
            if up != 4 * len(on_demand):  # each: an SA each way, in the client's kernel and the gateway's
                raise ike.IkeError(f"on demand: {up} SAs in the kernels after {len(on_demand)} first packets, "
                                   f"not {4 * len(on_demand)}")
        finally:
            keying.down()
    return Row(clients, daemons_s, tuple(setup), tuple(first_packet), tuple(on_demand), together_s, sas,
               tuple(rekeys), rekey_together_s)


def _hold_first_packets(ns: str, timeout_s: float = 10.0) -> None:
    """Wait for the trap policies of ``ns``'s daemon in its kernel, then have the kernel hold the packets
    that meet them until the SA is negotiated (``xfrm_larval_drop`` 0, in that namespace only)."""
    from ipsec.xfrm import XfrmSocket

    def trapped() -> bool:
        with XfrmSocket(ns) as x:
            return bool(x.dump_policy())

    try:
        waiting.until(trapped, timeout_s, f"the trap policies in {ns}", interval_s=0.05)
    except TimeoutError:
        raise ike.IkeError(f"on demand: no trap policy in {ns} after {timeout_s:g} s") from None
    netns.write_sysctls(ns, {"net.core.xfrm_larval_drop": "0"})


def _first_reply(net, tunnel: ike.Tunnel) -> float:
    """Seconds to the first echo reply through ``tunnel`` from its client (one ping, its process included)."""
    client = tunnel.me.ns.rsplit("-", 1)[1]
    server = net.spec.flows[0][1]
    t0 = time.monotonic()
    done = subprocess.run(["ip", "netns", "exec", tunnel.me.ns, "ping", "-4", "-c", "1", "-W", "5",
                           net.addr(server, 4)], capture_output=True, text=True)
    if done.returncode:
        raise ike.IkeError(f"no echo reply through the new tunnel from {client}: {done.stdout.strip()[-200:]}")
    return time.monotonic() - t0


def _q(xs: Sequence[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * len(xs)) - 1))]


def _row_line(r: Row) -> str:
    n, setup, first, demand = r.clients, r.setup, r.first_packet, r.on_demand
    return (f"{n:>7d} {r.daemons_s:>10.2f} {statistics.median(setup):>9.3f} {_q(setup, 0.95):>9.3f} "
            f"{n / sum(setup):>11.1f} "
            f"{(f'{statistics.median(first):.3f}' if first else '–'):>12s} "
            f"{(f'{statistics.median(demand):.3f} {_q(demand, 0.95):.3f}' if demand else '–'):>17s} "
            f"{r.together_s:>10.2f} {n / r.together_s:>11.1f} {r.sas:>6d} "
            f"{statistics.median(r.rekeys):>9.3f} {n / sum(r.rekeys):>10.1f} {n / r.rekey_together_s:>10.1f}")


def run(args: Options) -> Result:
    """What the benchmark measures, on the kernel it runs on: each N in turn, until a tunnel does not come up."""
    missing = ike.available()
    if missing:
        raise Refused(missing)
    where = running_on()
    rows: list[Row] = []
    failed = None
    for n in args.clients:
        print(f"  {n} road warrior(s) ...", file=sys.stderr, flush=True)
        try:
            rows.append(measure(n, args.profile, args.first_packets))
        except ike.IkeError as e:
            failed = (n, str(e))
            break
    result = Result(where, tuple(rows), failed)
    return dataclasses.replace(result, report=write_page(args, result.rows)) if rows else result


def page(args: Options, result: Result) -> str:
    """The table: each N's set-up, first-packet, all-at-once and rekey figures; the report's path."""
    lines = [f"{result.where}; road_warrior, {args.profile} tunnel, IKEv2 {ike.IKE_PROPOSAL}, PSK; times in s",
             f"{'clients':>7s} {'daemons up':>10s} {'setup med':>9s} {'setup p95':>9s} {'tunnels/s 1x1':>11s} "
             f"{'first packet':>12s} {'on demand med/p95':>17s} {'all at once':>10s} {'tunnels/s':>11s} "
             f"{'SAs':>6s} {'rekey med':>9s} {'rekeys/s 1x1':>10s} {'rekeys/s':>10s}"]
    lines += [_row_line(r) for r in result.rows]
    if result.failed:
        lines.append(f"{result.failed[0]:>7d} failed: {result.failed[1]}")
    if result.report:
        lines.append(f"report: {result.report}")
    return "\n".join(lines)


def write_page(args: Options, rows: Sequence[Row]) -> str:
    """The run directory's figures: each tunnel's set-up time per N, and the rates against N."""
    from analysis import benchpage

    spread = benchpage.figure("IKE exchange per tunnel, one after another", "road warriors: what was timed", "seconds")
    spread.update_xaxes(type="category")
    for r in rows:
        spread.add_box(y=r.setup, name=f"{r.clients}: IKE exchange", boxpoints="all", jitter=0.4, pointpos=0)
        if r.first_packet:
            spread.add_box(y=r.first_packet, name=f"{r.clients}: first packet", boxpoints="all", jitter=0.4,
                           pointpos=0)
        if r.on_demand:
            spread.add_box(y=r.on_demand, name=f"{r.clients}: on demand", boxpoints="all", jitter=0.4, pointpos=0)
    rates = benchpage.figure("Tunnels and rekeys per second", "road warriors (log)", "per second", log_x=True)
    n = [r.clients for r in rows]
    for name, ys in (("tunnels/s one by one", [r.clients / sum(r.setup) for r in rows]),
                     ("tunnels/s all at once", [r.clients / r.together_s for r in rows]),
                     ("rekeys/s one by one", [r.clients / sum(r.rekeys) for r in rows]),
                     ("rekeys/s all at once", [r.clients / r.rekey_together_s for r in rows])):
        rates.add_scatter(x=n, y=ys, mode="lines+markers", name=name)
    sections = [
        benchpage.Section("Set-up time", "Each dot is one tunnel brought up while no other was being brought up: "
                          "from the client's request (its swanctl started) to the CHILD_SA in the kernel, and, for "
                          f"the first {args.first_packets} clients, to the first echo reply through it; "
                          "\"on demand\": no SA at all, one echo request meets the client's trap policy, and "
                          "is timed to its reply (the kernel's ACQUIRE, the IKE exchange, the packet held "
                          "meanwhile).", spread),
        benchpage.Section("Rate against the number of road warriors", "One gateway daemon answers every client; "
                          "inside User-Mode Linux all daemons share one emulated CPU, so the rates are this "
                          "machine's, not a gateway's.", rates),
    ]
    data = {"benchmark": "ike_setup", "where": backends.current().label(), "kernel": os.uname().release,
            "profile": args.profile, "ike_proposal": ike.IKE_PROPOSAL, "rows": [dataclasses.asdict(r) for r in rows]}
    return benchpage.write(args.out, "ike_setup: IKEv2 tunnels coming up and rekeying",
                           f"{data['where']} ({data['kernel']}); road_warrior, {args.profile} tunnel, IKEv2 "
                           f"{ike.IKE_PROPOSAL}, PSK", sections, data)


def needs(args: Options) -> Needs:
    """The profile's protocols and the base: the host kernel runs it where it has them."""
    return doctor.needs((args.profile,))


BENCHMARK = Benchmark("ike_setup", Options, run, page, root="network namespaces, IKE daemons", needs=needs,
                      status=lambda result: 1 if result.failed else 0)

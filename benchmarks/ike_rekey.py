"""What a rekey does to traffic in flight: goodput every 0.1 s around a forced CHILD_SA or IKE_SA rekey.

    sudo ipsec-testbed bench ike_rekey [--rate 10] [--seconds 6] [--at 3] [--kernel auto|host|uml]

On ``vpn_gateway`` keyed by IKEv2 (``--keying ike``, AES-GCM-256 tunnel, the gateways' link
shaped to ``--rate`` Mbit/s), one TCP transfer from h1 to h2 runs for ``--seconds`` with
iperf3 reporting every 0.1 s.  ``--at`` seconds in, gw1's daemon is told to rekey: once the
CHILD_SA (new ESP SAs made, traffic moved onto them, the old ones deleted), once the IKE_SA
(the CHILD_SAs move to a new IKE_SA, their keys unchanged), and once nothing (the baseline).
For each, the report marks the rekey's request, says when the new SAs were in the kernel (the
ESP SPIs polled every 10 ms), and prints the goodput and retransmissions of every 0.1 s
interval (as the receiver got it) from half a second before to a second after, then the
whole transfer's retransmissions and the smallest interval's goodput against the baseline.
``--out DIR`` gets ``results.json`` and ``report.html``: the three transfers' goodput over time,
the rekeys marked, as a plot.
"""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import threading
import time

from experiments import doctor
from experiments.benchmark import Benchmark, check_profiles_and_rate, option, out_option
from experiments.engine import iperf
from experiments.job import KernelChoice
from ipsec import ike
from ipsec.xfrm import XfrmSocket
from testbed import backends
from testbed.capabilities import Needs
from testbed.errors import Refused
from testbed.record import Keying
from testbed.waiting import Deadline
from topologies import build_spec
from topologies.network import Network
from topologies.shaping import ShapingSpec

PORT = 5299
KINDS = ("none", "child", "ike")
#: Every run's profile: the CHILD_SAs' transform.
PROFILE = "aes-gcm-256"


@dataclasses.dataclass(frozen=True)
class Options:
    """What to measure; checked on construction."""

    rate: float = option(10.0, "the shaped link", metavar="MBIT")
    seconds: float = option(6.0, "the transfer's length")
    at: float = option(3.0, "when the rekey is asked for, s")
    out: str | None = out_option("ike_rekey")
    kernel: KernelChoice = KernelChoice()

    def __post_init__(self) -> None:
        check_profiles_and_rate((), self.rate)
        if not 0.5 < self.at < self.seconds - 1:
            raise ValueError(f"--at must leave half a second before and a second after it in the {self.seconds:g} s "
                             f"transfer, not {self.at:g}")


@dataclasses.dataclass(frozen=True)
class Run:
    """One transfer: the receiver's goodput every 0.1 s, the rekey asked (none for the baseline) and its SAs."""

    kind: str
    intervals: tuple[tuple[float, float], ...]  # (end s, Mbit/s received) per 0.1 s
    retransmits: int = 0  # the sender's, over the transfer
    asked_s: float | None = None  # the rekey requested, s into the transfer
    new_sas_s: float | None = None  # new ESP SPIs in gw1's kernel, s into the transfer
    spis_before: frozenset = frozenset()
    spis_after: frozenset = frozenset()


@dataclasses.dataclass
class Rekey:
    """What the rekey's timer thread saw, s into the transfer; or what went wrong there."""

    asked_s: float | None = None
    new_sas_s: float | None = None
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class Result:
    """Where it ran, the three transfers (no rekey, CHILD_SA, IKE_SA) and the report's path."""

    where: str
    runs: tuple[Run, ...]
    report: str = ""


def esp_spis(ns: str) -> frozenset:
    with XfrmSocket(ns) as x:
        return frozenset(sa.spi for sa in x.dump_sa() if sa.proto == "esp")


#: An interval line of iperf3's text output: start, end, bitrate and its unit, the retransmissions
#: (a sender's summary), and "sender"/"receiver" on the summary lines.
LINE = re.compile(r"\]\s+([\d.]+)-\s*([\d.]+)\s+sec\s+[\d.]+ \w?Bytes\s+([\d.]+) (\w?)bits/sec"
                  r"(?:\s+(\d+))?.*?(sender|receiver)?\s*$")
SCALE = {"": 1e-6, "K": 1e-3, "M": 1.0, "G": 1e3}


def transfer(net, keying: ike.Daemons, kind: str, seconds: float, at: float) -> Run:
    gw1, h1, h2 = net.ns("gw1"), net.ns("h1"), net.ns("h2")
    # The data goes h1 -> h2 from a server in h1 to a client in h2 (-R), whose 0.1 s intervals
    # are then what the receiver got (a sender's follow its socket buffer's bursts).  The rekey
    # is timed on iperf3's own clock: from its first interval line, read as it is printed.
    with iperf.Servers([iperf.Flow(h1, h2, net.addr("h1"))], port=PORT, one_off=True):  # listening
        before, intervals, retransmits, seen = esp_spis(gw1), [], 0, Rekey()
        client = iperf.popen_in(h2, [iperf.check(), "-c", net.addr("h1"), "-p", str(PORT), "-R", "-t",
                                     f"{seconds:g}", "-i", "0.1", "--forceflush"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        timer, said = None, []
        try:
            for line in client.stdout:
                said.append(line)
                m = LINE.search(line)
                if not m:
                    continue
                end, mbps = float(m.group(2)), float(m.group(3)) * SCALE[m.group(4)]
                if m.group(6) == "sender":
                    retransmits = int(m.group(5) or 0)
                elif m.group(6) is None:
                    intervals.append((end, mbps))
                    if timer is None and kind != "none":
                        zero = time.monotonic() - end  # iperf3's time 0 on this clock
                        timer = threading.Timer(max(0.0, at - end), rekey,
                                                args=(keying, kind, seen, before, zero, gw1))
                        timer.start()
            client.wait(timeout=30)
        finally:
            if timer is not None:
                timer.join()
            if client.poll() is None:
                client.kill()
                client.wait()
        if client.returncode:
            raise RuntimeError(f"iperf3 failed: {''.join(said)[-300:].strip()}")
        if seen.error:
            raise RuntimeError(seen.error)
        if kind != "none" and seen.asked_s is None:
            raise RuntimeError("the rekey was never asked for: iperf3 printed no interval")
        return Run(kind, tuple(intervals), retransmits, seen.asked_s, seen.new_sas_s, before, esp_spis(gw1))


def rekey(keying: ike.Daemons, kind: str, seen: Rekey, before: frozenset, zero: float, gw1: str) -> None:
    """In a timer's thread: ask for the rekey, then watch for SAs not in ``before``; a failure is kept in
    ``seen.error``."""
    try:
        tunnel = keying.initiators[0]
        seen.asked_s = time.monotonic() - zero
        done = keying.daemon(tunnel.me.ns).swanctl("--rekey", f"--{kind}", tunnel.name, timeout_s=30)
        if done.returncode:
            seen.error = f"rekey refused: {ike.cause(done.stdout, done.stderr) or done.stderr.strip()}"
            return
        if kind != "child":
            return  # an IKE_SA rekey keeps the CHILD_SAs
        for _ in Deadline(10, interval_s=0.01).polls():
            if esp_spis(gw1) - before:
                seen.new_sas_s = time.monotonic() - zero
                return
    except Exception as e:  # noqa: BLE001 (reported by the main thread)
        seen.error = f"rekey: {e}"


def page(args: Options, result: Result) -> str:
    """Each rekey's 0.1 s intervals around it against the baseline's, and the whole transfers' figures."""
    runs = result.runs
    lines = [f"{result.where}; vpn_gateway, {PROFILE} tunnel keyed by IKEv2, gw1-gw2 shaped to {args.rate:g} "
             f"Mbit/s; one TCP transfer h1 -> h2 of {args.seconds:g} s per run"]
    base = next(r for r in runs if r.kind == "none")
    for r in runs:
        if r.kind == "none":
            continue
        new = "kept (an IKE_SA rekey moves them)" if r.kind == "ike" else \
            f"in the kernel {r.new_sas_s - r.asked_s:.3f} s later" if r.new_sas_s else "never seen"
        before, after = (" ".join(sorted(f"{spi:#x}" for spi in spis)) for spis in (r.spis_before, r.spis_after))
        lines += ["", f"{r.kind.upper()} rekey requested at {r.asked_s:.2f} s; new ESP SAs {new}; "
                  f"gw1's ESP SPIs before: {before}; after: {after}",
                  f"{'interval end s':>14s} {'Mbit/s':>8s} {'baseline Mbit/s':>15s}"]
        marked = min((e for e, _ in r.intervals if e >= r.asked_s), default=None)  # the interval it fell in
        for (end, mbps), (_, bmbps) in zip(r.intervals, base.intervals, strict=False):
            if r.asked_s - 0.5 <= end <= r.asked_s + 1.05:
                mark = "  <- rekey" if end == marked else ""
                lines.append(f"{end:>14.1f} {mbps:>8.2f} {bmbps:>15.2f}{mark}")
        lowest = min(m for e, m in r.intervals if e > 0.5)
        base_lowest = min(m for e, m in base.intervals if e > 0.5)
        lines.append(f"whole transfer: {r.retransmits} retransmissions (baseline {base.retransmits}); lowest 0.1 s "
                     f"interval after the first 0.5 s {lowest:.2f} Mbit/s (baseline {base_lowest:.2f})")
    lines.append(f"report: {result.report}")
    return "\n".join(lines)


def run(args: Options) -> Result:
    """What the benchmark measures, on the kernel it runs on: a transfer with no rekey, one with a CHILD_SA
    rekey, one with an IKE_SA rekey, each on fresh daemons and SAs."""
    missing = ike.available()
    if missing:
        raise Refused(missing)
    where = f"{backends.current().label()} ({os.uname().release})"
    with Network(build_spec("vpn_gateway"), shaping=ShapingSpec(rate_mbit=args.rate)) as net:
        runs = []
        for kind in KINDS:  # every run on fresh daemons and SAs
            print(f"  transfer with {kind} rekey ...", file=sys.stderr, flush=True)
            net.apply_ipsec(PROFILE, "tunnel", families=(4,), keying=Keying.IKE)
            runs.append(transfer(net, net.ike_keying, kind, args.seconds, args.at))
            net.remove_ipsec()
    return Result(where, tuple(runs), write_page(args, runs))


def write_page(args: Options, runs: list[Run]) -> str:
    """The run directory's figure: goodput every 0.1 s of each transfer, the rekeys marked."""
    from analysis import benchpage

    fig = benchpage.figure("Receiver's goodput every 0.1 s", "seconds into the transfer", "Mbit/s")
    names = {"none": "no rekey (baseline)", "child": "CHILD_SA rekey", "ike": "IKE_SA rekey"}
    for r in runs:
        fig.add_scatter(x=[e for e, _ in r.intervals], y=[m for _, m in r.intervals], mode="lines",
                        name=f"{names[r.kind]} ({r.retransmits} retransmissions)")
        if r.asked_s is not None:  # at --at in each run: one label for them all
            label = {"annotation_text": "rekey asked", "annotation_position": "bottom right"}
            first = r is next(x for x in runs if x.asked_s is not None)
            fig.add_vline(x=r.asked_s, line_dash="dash", line_color="#888", **(label if first else {}))
        if r.new_sas_s is not None:
            fig.add_vline(x=r.new_sas_s, line_dash="dot", line_color="#444",
                          annotation_text="new ESP SAs in the kernel", annotation_position="top left")
    section = benchpage.Section(
        "Goodput around a forced rekey", f"One TCP transfer h1 -> h2 of {args.seconds:g} s per line, through the "
        f"IKE-keyed AES-GCM-256 tunnel, the gateways' link shaped to {args.rate:g} Mbit/s; the rekey asked of gw1's "
        f"daemon {args.at:g} s in (dashed), the new SAs seen in gw1's kernel (dotted). The legend counts the "
        "sender's retransmissions over the whole transfer.", fig)
    data = {"benchmark": "ike_rekey", "where": backends.current().label(), "kernel": os.uname().release,
            "rate_mbit": args.rate, "seconds": args.seconds, "at_s": args.at,
            "runs": [{**dataclasses.asdict(r), "spis_before": sorted(r.spis_before),
                      "spis_after": sorted(r.spis_after)} for r in runs]}
    return benchpage.write(args.out, "ike_rekey: what a rekey does to traffic in flight",
                           f"{data['where']} ({data['kernel']}); vpn_gateway keyed by IKEv2, {args.rate:g} Mbit/s",
                           [section], data)


def needs(args: Options) -> Needs:
    """ESP (its one profile's) and the base: the host kernel runs it where it has them."""
    return doctor.needs((PROFILE,))


BENCHMARK = Benchmark("ike_rekey", Options, run, page, root="network namespaces, IKE daemons", needs=needs)

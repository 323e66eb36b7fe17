"""Latency under load, RRUL-style: 4 TCP flows each way and a probe, plain against IPsec, FIFO against fq_codel.

    sudo ipsec-testbed bench rrul                              # vpn_gateway at 10 Mbit/s: none, aes-gcm-256
    sudo ipsec-testbed bench rrul --profiles aes-gcm-256,wireguard --rate 100 --seconds 30

flent's RRUL ("Realtime Response Under Load") loads a link with four TCP flows in each direction and times round
trips beside them: how long a packet waits behind bulk transfer, the bufferbloat question.  flent drives its load
with netperf, which Debian's main archive does not have, so this runs the same shape with the project's own
parts: iperf3 (``-P 4 --bidir``: four flows up, four down) from the first flow's client to its server through
the shaped link, and the sweep's latency probe (``--probe-tool``: ICMP echo by ping, its default, or irtt) every
50 ms over the same path for the whole test.  Each
combination of profile and queue runs ``--seconds`` loaded, after 2 s of the probe alone (the unloaded round
trip):

- ``fifo``: the shaper's own queue, as every sweep has it (tbf, ``latency`` 50 ms: the queue holds up to 60 ms);
- ``fq_codel``: fq_codel (RFC 8290) as the shaper's queue, its defaults (a queue per flow, CoDel's 5 ms
  target), the active queue management RRUL is usually run to show.  Inside User-Mode Linux it runs on the
  project's kernel, which has it built in (Debian's loads no ``sch_fq_codel``; built on first use).

It prints per combination the unloaded round trip, the median, 90th and 99th percentile under load, the
probe's losses and the goodput each way; then how much IPsec adds under load (its median against plain's, per
queue) and how much fq_codel takes away (per profile).  ``--out DIR`` gets ``results.json`` (every round trip
with its time) and ``report.html``: the round trip against time, and its CDF, as flent draws them.

``--flent`` adds flent itself as the outside check: its ``ping`` test (Debian's flent 2.1.1: ICMP echo by
iputils' ping, answered by the server's kernel, and UDP round trips by its own irtt client) runs from the same
client to the same server at the same interval for the same time, beside the project's probe, and its
medians, idle and under load, are printed beside the probe's.  What flent's RRUL would add, netperf's own
flows, is not here: the load is iperf3's either way.
"""
from __future__ import annotations

import contextlib
import dataclasses
import glob
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence

from experiments import doctor
from experiments.benchmark import Benchmark, check_profiles_and_rate, option
from experiments.engine import iperf, probe
from experiments.job import KernelChoice
from testbed import kernelsource, umlkernel
from testbed.capabilities import Needs
from topologies import TOPOLOGIES

#: The probe's interval (flent's RRUL pings every 200 ms by default; 50 ms gives 20 samples a second).
PROBE_EVERY_S = 0.05
#: The probe alone before the load: the unloaded round trip.
IDLE_S = 2.0
#: With --flent, this much longer before the load: flent's start (Python, its runners) inside a guest.
FLENT_START_S = 3.0
#: Flows each way, as RRUL.
FLOWS_EACH_WAY = 4
QUEUES = ("fifo", "fq_codel")
IPERF_PORT = 5301
#: flent's ping test's series, by the names this benchmark gives them.
FLENT_SERIES = {"icmp": "Ping (ms) ICMP", "udp": "Ping (ms) UDP"}


@dataclasses.dataclass(frozen=True)
class Series:
    """One probe's round trips, in ms: before the load, and under it with their times (s from the load's start)."""

    idle_ms: tuple[float, ...]
    loaded: tuple[tuple[float, float], ...]

    @property
    def rtts(self) -> list[float]:
        return [ms for _, ms in self.loaded]


@dataclasses.dataclass(frozen=True)
class Run:
    """One profile and queue: the probe's round trips, as flent's are (:class:`Series`), and the goodput."""

    profile: str
    queue: str
    probe: Series
    sent: int  # probe packets sent under load
    up_mbps: float | None
    down_mbps: float | None
    flent: dict[str, Series] = dataclasses.field(default_factory=dict)  # --flent: "icmp", "udp"

    @property
    def lost(self) -> int:
        return max(0, self.sent - len(self.probe.loaded))


def flent_series(data: dict, load_start_unix: float, load_end_unix: float) -> dict[str, Series]:
    """flent's ping test's round trips from its data file's contents ``data`` (its ``raw_values``: each sample's
    unix time ``t`` and ``val`` in ms), split at the load's start and end (pure)."""
    out = {}
    raw = data.get("raw_values", {})
    for name, series in FLENT_SERIES.items():
        samples = [(v["t"], v["val"]) for v in raw.get(series, []) if v.get("val") is not None and "t" in v]
        out[name] = Series(tuple(ms for t, ms in samples if t < load_start_unix),
                           tuple((t - load_start_unix, ms) for t, ms in samples
                                 if load_start_unix <= t <= load_end_unix))
    return out


def read_flent(directory: str) -> dict:
    """The contents of the one data file flent wrote into ``directory``."""
    files = glob.glob(os.path.join(directory, "*.flent.gz"))
    if len(files) != 1:
        raise RuntimeError(f"flent wrote {len(files)} data files into {directory}, not one")
    with gzip.open(files[0], "rt") as f:
        return json.load(f)


def goodput_each_way(report: dict) -> tuple[float | None, float | None]:
    """Mbit/s received up (client to server) and down, from iperf3 ``--bidir -J``'s end summary (pure)."""
    end = report.get("end", {})
    up = end.get("sum_received", {}).get("bits_per_second")
    down = end.get("sum_received_bidir_reverse", {}).get("bits_per_second")
    return (up / 1e6 if up is not None else None), (down / 1e6 if down is not None else None)


@dataclasses.dataclass(frozen=True)
class Options:
    """What to measure; checked on construction, plain put first among the profiles, and the project's UML kernel
    chosen for fq_codel unless a kernel is named (Debian's linux.uml loads no sch_fq_codel)."""

    profiles: tuple[str, ...] = option(("aes-gcm-256",), "tunnels beside plain", metavar="NAME,...")
    queues: tuple[str, ...] = option(QUEUES, "the shaper's queue: its own FIFO, fq_codel, or both (default: both)",
                                     metavar="fifo,fq_codel", show_default=False)
    topology: str = option("vpn_gateway", "network (default: vpn_gateway); the load runs between its first client "
                           "and server, whatever the topology's other flows", choices=tuple(sorted(TOPOLOGIES)),
                           show_default=False)
    rate: float = option(10.0, "the shaped link", metavar="MBIT")
    seconds: float = option(20.0, "the load's length", metavar="S")
    probe_tool: str = option(probe.TOOLS[0], "the probe's tool, as the sweep's --probe-tool: ICMP echo (ping, "
                             "answered by the server's kernel) or irtt (UDP to its own server)", choices=probe.TOOLS)
    flent: bool = option(False, "run flent's ping test (ICMP and UDP) beside the probe, the outside check of its "
                         "figures")
    out: str | None = option(None, "where results.json and report.html (the plots) go (default: "
                             "runs/<date>-bench-rrul in the checkout)", metavar="DIR")
    kernel: KernelChoice = KernelChoice()

    def __post_init__(self) -> None:
        bad = [q for q in self.queues if q not in QUEUES]
        if bad or not self.queues:
            raise ValueError(f"--queues: {', '.join(bad) or 'none given'}; the queues are {', '.join(QUEUES)}")
        check_profiles_and_rate(self.profiles, self.rate)
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"--topology must be one of {', '.join(sorted(TOPOLOGIES))}, not {self.topology!r}")
        if self.probe_tool not in probe.TOOLS:
            raise ValueError(f"--probe-tool must be one of {', '.join(probe.TOOLS)}, not {self.probe_tool!r}")
        if not 5 <= self.seconds <= 600:
            raise ValueError(f"--seconds must be 5..600, not {self.seconds:g}")
        if self.flent and not shutil.which("flent"):
            raise ValueError("--flent: flent is not installed (`sudo ./run install` installs Debian's)")
        object.__setattr__(self, "profiles", ("none", *[p for p in self.profiles if p != "none"]))
        if "fq_codel" in self.queues and not self.kernel.uml_kernel and not os.environ.get(umlkernel.KERNEL_ENV):
            object.__setattr__(self, "kernel", self.kernel.with_(uml_kernel=kernelsource.RECIPE))


@dataclasses.dataclass(frozen=True)
class Result:
    """Where it ran, each profile and queue's run, and the report it wrote."""

    where: str  # the backend and its kernel release
    runs: tuple[Run, ...]
    elapsed_s: float
    report: str


def _probe_lines(proc: subprocess.Popen, started: float, into: list[tuple[float, float]]) -> None:
    for line in proc.stdout:
        ms = probe.rtt_of_line(line)
        if ms is not None:
            into.append((time.monotonic() - started, ms))


def measure(net, profile: str, queue: str, args: Options) -> Run:
    """One combination on ``net``, its IPsec and queue already set."""
    client, server = net.spec.flows[0]
    cns, sns, addr = net.ns(client), net.ns(server), net.addr(server)
    idle: list[float] = []
    loaded: list[tuple[float, float]] = []
    idle_s = IDLE_S + (FLENT_START_S if args.flent else 0.0)
    total_s = idle_s + args.seconds + 1.0
    proc = iperf.popen_in(cns, probe.stream_argv(addr, PROBE_EVERY_S, total_s, args.probe_tool), stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    started = time.monotonic()
    flent = None
    if args.flent:  # the same path, interval and time; its irtt client to the same server
        flent_dir = tempfile.mkdtemp(prefix="itb-flent-")
        flent = iperf.popen_in(cns, ["flent", "ping", "-H", addr, "-l", f"{total_s:.0f}", "-s", f"{PROBE_EVERY_S:g}",
                                     "-D", flent_dir, "-f", "summary"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    samples: list[tuple[float, float]] = []
    reader = threading.Thread(target=_probe_lines, args=(proc, started, samples), daemon=True)
    reader.start()
    time.sleep(idle_s)
    with iperf.Servers([iperf.Flow(sns, cns, addr)], IPERF_PORT, one_off=True):
        load_at, load_at_unix = time.monotonic() - started, time.time()
        load = iperf.popen_in(cns, [iperf.check(), "-c", addr, "-p", str(IPERF_PORT), "-P", str(FLOWS_EACH_WAY),
                                    "--bidir", "-t", f"{args.seconds:g}", "-J"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = load.communicate(timeout=args.seconds + 60)
        load_end, load_end_unix = time.monotonic() - started, time.time()
    proc.wait(timeout=10)
    reader.join(timeout=5)
    flent_runs: dict[str, Series] = {}
    if flent is not None:
        said, _ = flent.communicate(timeout=60)
        try:
            flent_runs = flent_series(read_flent(flent_dir), load_at_unix, load_end_unix)
        except (OSError, ValueError, RuntimeError) as e:
            print(f"  flent gave no round trips (exit {flent.returncode}: {e}): {said.strip()[-300:]}",
                  file=sys.stderr, flush=True)
        finally:
            shutil.rmtree(flent_dir, ignore_errors=True)
    try:
        up, down = goodput_each_way(json.loads(out))
    except ValueError:
        up = down = None
    if load.returncode:
        print(f"  iperf3 failed (exit {load.returncode}): {out.strip()[-300:] or err.strip()[-300:]}",
              file=sys.stderr, flush=True)
    for t, ms in samples:
        if t < load_at:
            idle.append(ms)
        elif t <= load_end:
            loaded.append((t - load_at, ms))
    sent = int((load_end - load_at) / PROBE_EVERY_S)
    return Run(profile, queue, Series(tuple(idle), tuple(loaded)), sent, up, down, flent_runs)


def run(args: Options) -> Result:
    """What the benchmark measures, on the kernel it runs on: each run's lines on stderr as they come."""
    from experiments.engine.measure import switch_ipsec
    from testbed import backends
    from topologies import build_spec
    from topologies.network import Network
    from topologies.shaping import ShapingSpec

    spec = build_spec(args.topology)
    where = f"{backends.current().label()} ({os.uname().release})"
    print(f"{heading(args, where)}\n{HEADER}", file=sys.stderr, flush=True)
    runs: list[Run] = []
    t0 = time.monotonic()
    irtt = args.probe_tool == probe.IRTT or args.flent  # flent's ping test times UDP by irtt too
    with Network(spec, shaping=ShapingSpec(rate_mbit=args.rate)) as net, \
            (probe.Servers([net.ns(spec.flows[0][1])]) if irtt else contextlib.nullcontext()):
        current = "none"
        for queue in args.queues:
            net.reshape(ShapingSpec(rate_mbit=args.rate, queue=queue))
            for profile in args.profiles:
                current = switch_ipsec(net, current, profile, "tunnel", (4,))
                one = measure(net, profile, queue, args)
                runs.append(one)
                print("\n".join(run_lines(one)), file=sys.stderr, flush=True)
    return Result(where, tuple(runs), time.monotonic() - t0, write_page(args, runs))


def heading(args: Options, where: str) -> str:
    """The line that says where and how it measured."""
    return (f"{where}; {args.topology}, {args.rate:g} Mbit/s, {FLOWS_EACH_WAY} TCP flows each way for "
            f"{args.seconds:g} s, {args.probe_tool} every {PROBE_EVERY_S * 1000:g} ms")


HEADER = (f"{'profile':>22s} {'queue':>9s} {'idle ms':>8s} {'median':>7s} {'p90':>7s} {'p99':>7s} {'lost':>5s} "
          f"{'up Mbit/s':>10s} {'down':>7s}")


def page(args: Options, result: Result) -> str:
    """Each run's round trips and goodput, what IPsec adds and fq_codel takes away, and the report."""
    return "\n".join([heading(args, result.where), HEADER, *(line for r in result.runs for line in run_lines(r)),
                      f"{len(result.runs)} runs in {result.elapsed_s:.0f} s", *summary(result.runs),
                      f"report: {result.report}"])


def needs(args: Options) -> Needs:
    """Each profile's protocols (and veth and tbf): plain's beside the tunnels'."""
    return doctor.needs(args.profiles)


def _f(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def run_lines(r: Run) -> list[str]:
    """A run's line of the table, and one for each of flent's series beside it (pure)."""
    return [f"{r.profile:>22s} {r.queue:>9s} {_columns(r.probe)} {r.lost:>5d} {_f(r.up_mbps, 2):>10s} "
            f"{_f(r.down_mbps, 2):>7s}",
            *(f"{'flent ' + name:>32s} {_columns(series)}   ({len(series.idle_ms)} idle, {len(series.loaded)} under "
              "load)" for name, series in r.flent.items())]


def _columns(series: Series) -> str:
    """A series' idle median and its 50th, 90th and 99th percentiles under load, as the table's columns."""
    idle = statistics.median(series.idle_ms) if series.idle_ms else None
    return f"{_f(idle, 2):>8s} " + " ".join(f"{_f(probe.percentile(series.rtts, q)):>7s}" for q in (50, 90, 99))


def summary(runs: Sequence[Run]) -> list[str]:
    """What IPsec adds under load, per queue, and what fq_codel takes away, per profile, in words (pure)."""
    med = {(r.profile, r.queue): probe.percentile(r.probe.rtts, 50) for r in runs}
    lines = []
    for (profile, queue), m in med.items():
        base = med.get(("none", queue))
        if profile != "none" and m is not None and base is not None:
            lines.append(f"{profile} adds {m - base:+.1f} ms to plain's {base:.1f} ms under load ({queue})")
    for (profile, queue), m in med.items():
        fifo = med.get((profile, "fifo"))
        if queue == "fq_codel" and m is not None and fifo is not None:
            lines.append(f"fq_codel takes {fifo - m:.1f} ms of the {fifo:.1f} ms median away ({profile}: {m:.1f} ms)")
    lines += flent_agreement(runs)
    return lines


def flent_agreement(runs: Sequence[Run]) -> list[str]:
    """flent's medians against the probe's, idle and under load, per run that had flent beside it (pure)."""
    lines = []
    for r in runs:
        ours = (probe.percentile(r.probe.idle_ms, 50), probe.percentile(r.probe.rtts, 50))
        for name, series in r.flent.items():
            theirs = (probe.percentile(series.idle_ms, 50), probe.percentile(series.rtts, 50))
            if None in ours or None in theirs:
                lines.append(f"flent {name} ({r.profile}, {r.queue}): no round trips to compare")
                continue
            lines.append(f"flent {name} ({r.profile}, {r.queue}): median {theirs[1]:.2f} ms under load against the "
                         f"probe's {ours[1]:.2f} ({100 * (ours[1] / theirs[1] - 1):+.1f} %), idle {theirs[0]:.3f} "
                         f"against {ours[0]:.3f} ms ({ours[0] - theirs[0]:+.3f} ms)")
    return lines


def _cumulative(values: Sequence[float]) -> dict[str, list[float]]:
    """A CDF's points: the values sorted, each with the share of values at or below it (pure)."""
    xs = sorted(values)
    return {"x": xs, "y": [(i + 1) / len(xs) for i in range(len(xs))]}


def write_page(args: Options, runs: Sequence[Run]) -> str:
    """The round trip against time and its CDF, per profile and queue, as flent draws them."""
    from analysis import benchpage
    from testbed import backends

    over_time = benchpage.figure("Round trip under load", "seconds since the load started", "round trip, ms")
    cdf = benchpage.figure("Round trips under load, cumulative", "round trip, ms", "share of round trips")
    for r in runs:
        name = f"{r.profile}, {r.queue}"
        over_time.add_scatter(x=[t for t, _ in r.probe.loaded], y=r.probe.rtts, mode="lines", name=name)
        cdf.add_scatter(**_cumulative(r.probe.rtts), mode="lines", name=name)
        for probe_name, series in r.flent.items():
            cdf.add_scatter(**_cumulative(series.rtts), mode="lines", line={"dash": "dot"},
                            name=f"{name}: flent {probe_name}")
    sections = [
        benchpage.Section("Round trip against time", f"{args.probe_tool} every {PROBE_EVERY_S * 1000:g} ms beside "
                          f"{FLOWS_EACH_WAY} TCP flows each way; a gap is a lost probe.", over_time),
        benchpage.Section("Cumulative distribution", "The share of round trips at or below each delay: the further "
                          "left, the less the queue keeps a packet waiting. Dotted: flent's ping test beside the "
                          "probe (--flent), the outside check.", cdf),
    ]
    data = {"benchmark": "rrul", "where": backends.current().label(), "kernel": os.uname().release,
            "topology": args.topology, "rate_mbit": args.rate, "seconds": args.seconds, "summary": summary(runs),
            "runs": [dataclasses.asdict(r) for r in runs]}
    return benchpage.write(args.out, "rrul: latency under load through the tunnel",
                           f"{data['where']} ({data['kernel']}); {args.topology}, {args.rate:g} Mbit/s, "
                           f"{FLOWS_EACH_WAY} TCP flows each way", sections, data)


BENCHMARK = Benchmark("rrul", Options, run, page, root="network namespaces, SAs, qdiscs", needs=needs)

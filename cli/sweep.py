"""Throughput versus packet size, plain and through IPsec, over shaped links.

Every point records what bounded it, from the kernel's own counters: the shaped link
(`link`), the emulating machine's CPU (`cpu`), something else such as a TCP window
(`other`), or figures that contradict each other (`anomaly`, left out of the means).

In User-Mode Linux on a machine of two or more CPUs, a speed probe on a spare host CPU
times a small fixed workload over every window: on a shared machine the same work costs
different CPU time from minute to minute, and the CPU costs (their precision included) are
taken at the run's common machine speed, each as measured kept beside it.

Results go to a run directory: results.jsonl (one line per point, written as it is
measured), meta.json and report.html.  Running again with the same --out measures
only the points that are missing.  It runs on the host kernel when that can do what
the sweep needs (ESP for IPsec profiles) and inside User-Mode Linux otherwise, by itself.
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time

from cli.options import Parser, add_output_options, csv, kernel_choice
from cli.report import is_reproduction, render
from experiments import runner
from experiments.engine.plan import (
    DEFAULT_MAX_REPETITIONS,
    DEFAULT_REPETITIONS,
    MAX_PROBE_PER_S,
    MIN_PROBE_PER_S,
    PROBE_MOST_SHARE,
    PROBE_TOOLS,
    SweepSpec,
    default_sweep,
)
from experiments.job import INCOMPLETE, Job, SweepWork
from ipsec import ike
from ipsec.ike import KEYING_HELP, KEYINGS
from testbed.errors import Refused, run_main
from topologies import TOPOLOGIES

PROG = "ipsec-testbed sweep"
log = logging.getLogger("ipsec-testbed.sweep")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def description(d: SweepSpec) -> str:
    """The command's --help text: the module's, with what the default sweep ``d`` measures after its first line."""
    title, rest = __doc__.split("\n\n", 1)
    *first, last = (f"{r:g}" for r in d.rates_mbit)
    rates = f"{', '.join(first)} and {last}" if first else last
    least, most, window, warmup = d.repetitions, d.most_repetitions, f"{d.duration_s:g}", f"{d.warmup_s:g}"
    cpu = f"{d.cpu_precision_pct:g}"
    return f"""{title}

With no arguments it reproduces the shape of seed 003's curve (Ronan et al., 2005):
the vpn_gateway network (host - gateway - gateway - host), no IPsec against ESP
tunnel mode AES-GCM-256 between the gateways, TCP MSS {min(d.sizes)}..{max(d.sizes)} bytes, the
gateway link shaped to {rates} Mbit/s, IPv4, {window} s windows after a {warmup} s warm-up,
each point repeated until its 95 % confidence interval is within {d.precision_pct:g} % of its goodput
(and {cpu} % of its CPU cost per GB), {least} to {most} times, the repetitions beyond the first {least}
within a time budget that keeps the whole sweep under {budget_minutes(d)} minutes, boot included.

{rest}"""


def budget_minutes(d: SweepSpec) -> int:
    """The whole minutes the default sweep ``d`` ends within (its time budget)."""
    return math.ceil(d.budget_s / 60)


EPILOG = """\
examples:
  sudo ipsec-testbed sweep                       # seed 003's curve, ~{minutes} min
  sudo ipsec-testbed sweep --dry-run             # the plan and its time
  sudo ipsec-testbed sweep --rates 1,2,4,10,34,44,51,100 \\
        --profiles aes-cbc-128-md5 --out runs/seed003   # seed 003's rates and algorithm
  sudo ipsec-testbed sweep --topology host_to_host --mode transport \\
        --profiles 3des-cbc-sha1+ah-md5 --size-mode write --sizes 1024,2048,4096,8192
  sudo ipsec-testbed sweep --topology multi_host_to_host --clients 5 \\
        --ip 6 --mode transport --transport tcp,udp
  sudo ipsec-testbed sweep --topology road_warrior \\
        --profiles aes-gcm-256,chacha20-poly1305,wireguard --rates 10,100,10000   # ESP beside WireGuard

Profiles: `ipsec-testbed profiles`.  Interrupt with Ctrl-C or SIGTERM: the network is torn
down, the points measured so far stay, and the exit status is 130 or 143; run the same
command with the same --out to finish the sweep.  A point whose iperf3 test fails twice
is recorded as failed and measured again by the next run.  Exit status: 0 every point
measured, 3 some points could not be measured (the last line says how many and why; 0 with
--allow-failures), 1 error, 2 bad arguments.
"""


def build_parser() -> argparse.ArgumentParser:
    d = default_sweep()  # every option's default, and the numbers the help gives
    ipsec = tuple(name for name in d.profiles if name != "none")  # plain is measured unless --no-plain
    p = Parser(prog=PROG, description=description(d), epilog=EPILOG.format(minutes=budget_minutes(d)),
               formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("what to measure")
    g.add_argument("--topology", choices=tuple(TOPOLOGIES), default=d.topology,
                   help="network to build (default: %(default)s)")
    g.add_argument("--clients", type=int, default=d.clients, metavar="N",
                   help="clients of road_warrior / multi_host_to_host; they send at the same time "
                        "(default: %(default)s)")
    g.add_argument("--profiles", type=csv(str), default=ipsec, metavar="P,...",
                   help="IPsec profiles, or wireguard, to compare with the plain baseline, which is always "
                        f"measured (default: {','.join(ipsec)}; list: ipsec-testbed profiles)")
    g.add_argument("--mode", choices=("tunnel", "transport"), default=d.mode,
                   help="IPsec mode; WireGuard is always a tunnel (default: %(default)s)")
    g.add_argument("--keying", choices=KEYINGS, default=d.keying,
                   help=f"how the SAs are made: {KEYING_HELP} (default: %(default)s)")
    g.add_argument("--rates", type=csv(float), default=d.rates_mbit, metavar="MBIT,...",
                   help=f"rates of the shaped link in Mbit/s (default: {','.join(f'{r:g}' for r in d.rates_mbit)})")
    g.add_argument("--sizes", type=csv(int), default=d.sizes, metavar="BYTES,...",
                   help=f"packet sizes (default: {','.join(map(str, d.sizes))})")
    g.add_argument("--size-mode", choices=("mss", "write"), default=d.size_mode,
                   help="for TCP, what a size is: the MSS (iperf3 -M; seed 003) or the write size "
                        "(iperf3 -l; seed 001's netio); UDP sizes are datagram sizes (default: %(default)s)")
    g.add_argument("--ip", type=csv(int), default=d.ip_versions, metavar="4|6|4,6",
                   help=f"IP versions (default: {','.join(map(str, d.ip_versions))})")
    g.add_argument("--transport", type=csv(str), default=d.transports, metavar="tcp|udp|tcp,udp",
                   help=f"transports (default: {','.join(d.transports)})")
    g.add_argument("--udp-bitrate", default=d.udp_bitrate, metavar="RATE",
                   help="UDP offered rate for iperf3 -b; 0 = as fast as possible, as seed 000 (default: %(default)s)")
    g.add_argument("--connect-timeout", type=float, default=d.connect_timeout_s, metavar="SECONDS",
                   help="with several TCP clients (--clients), how long every one may take to connect before the "
                        "attempt fails, as iperf3's own --connect-timeout (default: 10 s, 0.5 s more per client, "
                        "and up to the 127 s in which Linux gives a dropped SYN up as the clients crowd the link: "
                        "one client per Mbit/s)")
    g.add_argument("--duration", type=float, default=d.duration_s, metavar="SECONDS",
                   help="the measured window of each point, in seconds (default: %(default)g)")
    g.add_argument("--warmup", type=float, default=d.warmup_s, metavar="SECONDS",
                   help="traffic before the window opens, in seconds, counted from the moment data reaches "
                        "the receivers: TCP's start and the shaper's initial token bucket stay out of the "
                        "figures (default: %(default)g)")
    g.add_argument("--repetitions", type=int, default=None, metavar="N",
                   help=f"repetitions per point at least; given alone, exactly N (default: {d.repetitions}, "
                        f"then more while the point is less precise than --precision and --cpu-precision, up to "
                        f"{d.max_repetitions})")
    g.add_argument("--max-repetitions", type=int, default=None, metavar="N",
                   help="repetitions per point at most, while it is less precise than --precision or "
                        f"--cpu-precision (default: {d.max_repetitions}, or --repetitions when that is given)")
    g.add_argument("--precision", type=float, default=d.precision_pct, metavar="PERCENT",
                   help="repeat a point until the 95%% confidence interval of its goodput is within this "
                        "share of the mean (default: %(default)g)")
    g.add_argument("--cpu-precision", type=float, default=d.cpu_precision_pct, metavar="PERCENT",
                   help="... and that of its CPU cost per GB (at the run's common machine speed, where a "
                        "speed probe timed the windows) within this share (default: %(default)g)")
    g.add_argument("--budget", type=float, default=d.budget_s, metavar="SECONDS",
                   help="start no repetition beyond the minimum that would end later than this long after "
                        "the command started (a User-Mode Linux boot included), keeping the time the later "
                        "rates' minimum repetitions need; the points left less "
                        "precise are counted at the end; 0 = no limit (default: %(default)g, the default sweep in "
                        f"{budget_minutes(d)} minutes; run again with --out DIR --budget 0 to finish what it cut)")
    g.add_argument("--pmtu", choices=("discover", "fragment"), default=d.pmtu,
                   help="hosts' path MTU behaviour: discover (modern) or fragment (2005-era: no DF, the "
                        "gateway fragments; reproduces seed 003's dip above ~1340 bytes) (default: %(default)s)")
    g.add_argument("--mtu", type=int, default=d.mtu, help="MTU of every link (default: %(default)s)")
    g.add_argument("--socket-buffer", type=int, default=d.socket_buffer, metavar="BYTES",
                   help="socket buffer of both ends (iperf3 -w), e.g. 65535 as seed 002's ttcp "
                        "(default: the kernel's, autotuned)")
    g.add_argument("--no-plain", dest="plain", action="store_false", default=d.plain,
                   help="leave out the plain profile (no IPsec), which is otherwise always measured: for "
                        "suites that watch IPsec alone; the IPsec/plain figures then have nothing to divide by")
    g.add_argument("--no-latency-probe", dest="latency_probe", action="store_false", default=d.latency_probe,
                   help="time no round trips: by default a probe (--probe-tool) times the first flow's path every "
                        f"{1000 / d.probe_per_s:g} ms through each window (the round trip under load: median, 90th "
                        "and 99th percentile, losses) and for 0.3 s before a point's first repetition (the unloaded "
                        "reference: its median and least, the same path for every repetition); the "
                        "records' probe_*, idle_rtt_ms and idle_rtt_min_ms")
    g.add_argument("--probe-rate", dest="probe_per_s", type=float, default=None, metavar="PER_S",
                   help=f"the latency probe's round trips a second, {MIN_PROBE_PER_S:g} to {MAX_PROBE_PER_S:g}, "
                        f"refused where its packets would take more than {PROBE_MOST_SHARE * 100:g}%% of the slowest "
                        f"link beside the flows it times (default: {d.probe_per_s:g}, fewer on a link below 1 "
                        "Mbit/s, as many as fit there)")
    g.add_argument("--probe-tool", choices=PROBE_TOOLS, default=d.probe_tool,
                   help="the latency probe's tool, as flent names them: ping (ICMP echo, answered by the server's "
                        "kernel: the round trip alone, the path's own figure; `bench unloaded_rtt` checks both "
                        "tools against what predicts them) or irtt (UDP to an irtt server; times each way too: the "
                        "records' probe_up_ms and probe_down_ms, with its own processes on the path) "
                        "(default: %(default)s)")
    g.add_argument("--arms", type=csv(int), default=d.arms, metavar="INSNS,...",
                   help="an A/B within the sweep: measure every IPsec point once per value in every round, "
                        "side by side, arm a, b, ... with that many extra BPF instructions on every ESP "
                        "packet's way out of an IPsec endpoint (0: none added; every arm carries the same chain "
                        "of filters, so that they differ in these alone). The regression gate's "
                        "known slowdown (`regress --inject-slowdown` picks the counts); e.g. 0,3000")
    add_output_options(p, "runs/<date>-<topology>", "print the planned points and the estimated time, then stop")
    return p


def repetitions_of(args) -> dict:
    """``repetitions`` and ``max_repetitions`` from the options (see their --help)."""
    reps = DEFAULT_REPETITIONS if args.repetitions is None else args.repetitions
    if args.max_repetitions is not None:
        if args.repetitions is None:
            reps = min(reps, max(1, args.max_repetitions))  # at most N: the default least follows it down
        elif args.max_repetitions < reps:
            raise ValueError(f"--max-repetitions {args.max_repetitions} is below --repetitions {reps}: a point's "
                             "most repetitions cannot be fewer than its least")
        most = args.max_repetitions
    elif args.repetitions is not None:
        most = reps  # a count given alone is a fixed count
    else:
        most = DEFAULT_MAX_REPETITIONS
    return {"repetitions": reps, "max_repetitions": most}


def spec_from(args):
    return default_sweep(topology=args.topology, profiles=args.profiles, mode=args.mode, keying=args.keying,
                         ip_versions=args.ip, transports=args.transport, rates_mbit=args.rates, sizes=args.sizes,
                         size_mode=args.size_mode, clients=args.clients,
                         connect_timeout_s=args.connect_timeout, **repetitions_of(args),
                         precision_pct=args.precision, cpu_precision_pct=args.cpu_precision,
                         duration_s=args.duration, warmup_s=args.warmup, udp_bitrate=args.udp_bitrate,
                         pmtu=args.pmtu, mtu=args.mtu, socket_buffer=args.socket_buffer, arms=args.arms,
                         plain=args.plain, budget_s=args.budget or None, latency_probe=args.latency_probe,
                         probe_per_s=args.probe_per_s or None, probe_tool=args.probe_tool)


def job_from(args: argparse.Namespace, argv: list[str]) -> Job:
    """The sweep's :class:`~experiments.job.Job` from its options (a ValueError names a bad value)."""
    spec = spec_from(args)
    return Job(SweepWork(spec), out_dir=runner.out_dir_of(args.out, REPO, spec.topology), kernel=kernel_choice(args),
               allow_failures=args.allow_failures, report=not args.no_report,
               command=("ipsec-testbed", "sweep", *argv), started_unix=time.time(), verbose=args.verbose,
               allow_concurrent=args.allow_concurrent, history=args.history)


def finish(job: Job, prog: str, rc: int) -> int:
    """After a job that measured into its run directory: on the host, its report and tables (a partial
    run's too: it says which points are missing), and the line on what is still missing, last."""
    if rc in (0, INCOMPLETE) and job.report:
        if os.path.exists(os.path.join(job.out_dir, "results.jsonl")) or is_reproduction(job.out_dir):
            render([job.out_dir])
        line = runner.missing_line(job)
        if line:
            print(line, file=sys.stderr)
    return rc


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)],
                        format="%(levelname)s %(name)s: %(message)s")

    def work() -> int:
        job = job_from(args, argv)
        if args.dry_run:
            return runner.dry_run(job)
        if ike.is_ike(job.work.spec.keying) and ike.available():
            raise Refused(ike.available())  # before a guest boots
        return finish(job, PROG, runner.run(job, PROG))

    return run_main(PROG, work, args.debug)

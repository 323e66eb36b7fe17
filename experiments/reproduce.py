"""The reproduction engine: one seed's experiment as named parts, measured into one run directory.

A seed's module (:mod:`experiments.catalogue`) describes its experiment as
:class:`Part` objects: each is a :class:`~experiments.engine.sweep.SweepSpec` (or a series of
request/response transactions) with a name the seed's reference file
(``analysis/reference/seed00N.json``) uses in its ``where.part``.  This module runs
them::

    RUN/meta.json                the seed, every part's spec, the machine
    RUN/<part>/results.jsonl     one line per measured point, as the sweep writes it
    RUN/<part>/meta.json
    RUN/comparison.json          published numbers next to ours, claims judged (host, after)
    RUN/report.html

All parts run in one process (one User-Mode Linux boot when the host kernel has no
ESP); running the script again on the same directory measures only what is missing.

``--scale`` divides every link rate of the seed by a factor (given, or ``auto``: found by a
short calibration of this machine's capacity for the seed's heaviest point,
:mod:`experiments.calibrate`), so that the shaped link, not the emulator's CPU, bounds the
points. meta.json records the factor and how it was found; the report says what a scaled run
can show (bytes on the wire, protocol behaviour) and what it cannot (the seed's CPU costs).
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import platform
import sys
from collections.abc import Callable, Sequence

from analysis.reproduction import TRANSACTION_MODE, evaluate
from experiments import runner
from experiments.calibrate import scale_for, scaled_rates
from experiments.engine.plan import Point, SweepSpec, estimate_seconds, plan_points, unmeasured
from experiments.engine.sweep import by_point, run_sweep
from experiments.engine.sweep import note_interrupted as note_part
from experiments.machine import machine_meta
from experiments.runner import add_output_options
from ipsec import ike
from ipsec.ike import KEYING_HELP, KEYINGS
from testbed import backends, rundir
from testbed.errors import Parser, Refused, run_main
from testbed.record import TransactionRecord
from topologies import build_spec
from topologies.shaping import ShapingSpec

log = logging.getLogger(__name__)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Part:
    """One measured part of a seed's experiment.

    ``spec`` says what to measure; ``reference`` is the ``where.part`` of the seed's
    published values this part answers (default: its name; two parts may answer one,
    e.g. a TCP and a UDP part of one table).  With ``transactions`` > 0 the part is not an iperf3
    sweep but ``transactions`` request/response transactions from the first flow's
    client to its server, per profile and repetition, on the spec's network (its first
    rate and IP version).  A part with ``keying_fixed`` keeps its spec's keying whatever
    ``--keying`` says (it is there to compare the keyings).
    """

    name: str
    title: str
    spec: SweepSpec
    transactions: int = 0
    reference: str = ""
    keying_fixed: bool = False

    def __post_init__(self) -> None:
        if not self.reference:
            object.__setattr__(self, "reference", self.name)
        if not self.name.replace("_", "").isalnum():
            raise ValueError(f"part name {self.name!r}: letters, digits and _ only (it is a directory)")

    def points(self) -> int:
        if self.transactions:
            return len(self.spec.profiles) * self.spec.repetitions
        return len(plan_points(self.spec))

    def estimate_seconds(self) -> float:
        if self.transactions:
            # about 2 ms a transaction inside UML, and a network to build
            return self.points() * (self.transactions * 0.002 + 1.0) + 6.0
        return estimate_seconds(self.spec, self.points())

    def to_json(self) -> dict:
        return {"name": self.name, "title": self.title, "spec": self.spec.to_json(),
                "transactions": self.transactions, "reference": self.reference}


@dataclasses.dataclass(frozen=True)
class Reproduction:
    """A seed's experiment: its parts as a function of its options (``ipsec-testbed reproduce SEED``).

    ``name`` is also the name of the script that runs it (``experiments/<name>.py``).
    """

    seed: str
    name: str
    doc: str
    parts: Callable[[argparse.Namespace], list[Part]]
    add_options: Callable[[argparse.ArgumentParser], None] = lambda parser: None
    epilog: str = ""

    @property
    def prog(self) -> str:
        return f"ipsec-testbed reproduce {self.seed}"


# -- measuring ----------------------------------------------------------------------------

def _plan_transactions(part: Part) -> list:
    spec = part.spec
    points = []
    for rep in range(spec.repetitions):
        order = spec.profiles if rep % 2 == 0 else spec.profiles[::-1]  # ABBA, as the sweep
        for profile in order:
            points.append(Point(spec.topology, profile, spec.mode, spec.ip_versions[0], "tcp",
                                float(spec.rates_mbit[0]), part.transactions, TRANSACTION_MODE, spec.clients, "", rep))
    return points


def run_transactions(part: Part, part_dir: str, progress=None) -> dict:
    """Measure a transactions part into ``part_dir/results.jsonl``; returns counts."""
    from experiments import transactions
    from experiments.engine.measure import switch_ipsec
    from experiments.engine.monitor import proc_stat_shares
    from topologies.network import Network

    spec = part.spec
    points = _plan_transactions(part)
    done = {(r.profile, r.repetition) for r in rundir.load_existing(part_dir, required=(), kind=TransactionRecord)
            if not r.failed}
    todo = [p for p in points if (p.profile, p.repetition) not in done]
    meter = backends.current().cpu_meter()
    rundir.start_run(part_dir, machine_meta(), sweep=spec.to_json(), transactions=part.transactions,
                     cpu_accounting=meter.method)
    measured = 0
    try:
        if todo:
            topo = build_spec(spec.topology, clients=spec.clients, mtu=spec.mtu, pmtu=spec.pmtu)
            client, server = topo.flows[0]
            with Network(topo, shaping=ShapingSpec(rate_mbit=spec.rates_mbit[0])) as net, \
                    rundir.open_results(part_dir) as out:
                current = "none"
                for point in todo:
                    current = switch_ipsec(net, current, point.profile, spec.mode, (point.ip_version,), spec.keying)
                    if progress:
                        progress(point, None, len(points) - len(todo) + measured, len(points))
                    c0, s0 = meter.sample(), proc_stat_shares()
                    timing = transactions.measure(net, client, server, point.ip_version, part.transactions)
                    c1, s1 = meter.sample(), proc_stat_shares()
                    busy, system, softirq = s0.until(s1)
                    record = TransactionRecord(
                        **point.fields(), **dataclasses.asdict(timing),
                        cpu_busy_pct=100.0 * (c1.cpu_ns - c0.cpu_ns) / ((c1.clock_ns - c0.clock_ns) * meter.cpus),
                        cpu_kernel_busy_pct=busy, cpu_system_pct=system, cpu_softirq_pct=softirq,
                        keying=spec.keying,
                        ike_sas=net.negotiated_sas() or None,  # none with static keying, or IPsec off
                        backend=backends.current().name, kernel_release=platform.release(), time=rundir.now_iso())
                    rundir.append(out, record.to_json())
                    measured += 1
                    if progress:
                        progress(point, record, len(points) - len(todo) + measured, len(points))
    finally:
        meter.close()
        rundir.finish_run(part_dir, points_measured=measured, complete=measured == len(todo))
    return {"planned": len(points), "already": len(points) - len(todo), "measured": measured, "failed": 0}


def scale_arg(text: str) -> str | float:
    """``--scale``: "auto" or a factor of at least 1."""
    if text == "auto":
        return text
    try:
        factor = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"auto or a number >= 1, not {text!r}") from None
    if not 1.0 <= factor <= 1000.0:
        raise argparse.ArgumentTypeError(f"a factor in 1..1000, not {text}")
    return factor


def scale_parts(parts: Sequence[Part], factor: float) -> list[Part]:
    """``parts`` with every link rate divided by ``factor``."""
    if factor == 1.0:
        return list(parts)
    return [dataclasses.replace(p, spec=dataclasses.replace(p.spec, rates_mbit=scaled_rates(p.spec.rates_mbit, factor)))
            for p in parts]


def choose_scale(requested: str | float | None, parts: Sequence[Part], out_dir: str) -> tuple[float, dict | None]:
    """The factor this run divides the seed's rates by, and its meta.json entry (None: the seed's rates).

    A run directory that was measured at a factor keeps it (a resumed ``auto`` run is not
    calibrated again); asking for another factor there is an error.
    """
    recorded = None
    if os.path.exists(os.path.join(out_dir, rundir.META_FILE)):
        recorded = rundir.load_meta(out_dir).scale
    if requested is None:
        if recorded and recorded.divisor != 1.0:
            raise ValueError(f"{out_dir} was measured with its rates divided by {recorded.factor:g}; "
                             f"add --scale {recorded.factor:g} (or auto) to resume it, or use another --out")
        return 1.0, None
    if recorded:
        factor = recorded.divisor
        if requested != "auto" and float(requested) != factor:
            raise ValueError(f"{out_dir} was measured with its rates divided by {factor:g}, not {requested:g}; "
                             "use that factor to resume it, or another --out")
        print(f"rates divided by {factor:g}, as when this run directory was started", file=sys.stderr)
        return factor, recorded
    if requested == "auto":
        print("calibrating: how fast this machine emulates the seed's heaviest point ...", file=sys.stderr,
              flush=True)
        factor, entry = scale_for(parts, say=lambda m: print(m, file=sys.stderr, flush=True))
        print(f"rates divided by {factor:g}: {entry['how']}", file=sys.stderr, flush=True)
        return factor, entry
    return float(requested), {"factor": float(requested), "how": f"given: --scale {float(requested):g}"}


def measure_parts(repro: Reproduction, parts: Sequence[Part], out_dir: str, scale: str | float | None = None,
                  allow_failures: bool = False) -> int:
    """Measure every part (what is missing of it) into ``out_dir``; the lock is the caller's.

    ``scale``: None (the seed's rates), a factor to divide them by, or "auto" (see :func:`choose_scale`).
    Returns :data:`experiments.runner.INCOMPLETE` when a part's points could not all be measured
    (0 with ``allow_failures``).
    """
    factor, scale_entry = choose_scale(scale, parts, out_dir)
    parts = scale_parts(parts, factor)
    command_line = runner.typed_command() or sys.argv
    rundir.start_run(out_dir, machine_meta(), seed=repro.seed, script=repro.prog, command_line=command_line,
                     parts=[p.to_json() for p in parts], scale=scale_entry)
    failed = 0
    with runner.progress_bar() as bar:
        for i, part in enumerate(parts, 1):
            task = bar.add_task(part.name, total=part.points())
            progress = runner.progress_callback(bar, task, prefix=f"[{i}/{len(parts)} {part.name}] ")
            part_dir = os.path.join(out_dir, part.name)
            if part.transactions:
                counts = run_transactions(part, part_dir, progress)
            else:
                counts = run_sweep(part.spec, part_dir, progress, command_line=command_line, lock=False)
            failed += counts["failed"]
            note = f", {counts['failed']} FAILED" if counts["failed"] else ""
            bar.update(task, completed=counts["planned"],
                       description=f"{part.name}: {counts['measured']} measured{note}")
    missing = {part.name: len(unmeasured(part.spec, by_point(rundir.load_existing(os.path.join(out_dir, part.name)))))
               for part in parts if not part.transactions}
    missing = {name: n for name, n in missing.items() if n}
    rundir.finish_run(out_dir, points_missing=missing, attempts_failed=failed)
    if missing:
        print(missing_line(out_dir), file=sys.stderr)
        return 0 if allow_failures else runner.INCOMPLETE
    return 0


def missing_line(out_dir: str) -> str | None:
    """One line on the points of each part the last run could not measure (None: it measured them all)."""
    last = rundir.load_meta(out_dir).last_run
    missing, failed = last.points_missing, last.attempts_failed or 0
    if not missing:
        return None
    return (f"INCOMPLETE: {sum(missing.values())} points could not be measured "
            f"({', '.join(f'{n} of {name}' for name, n in missing.items())}; {failed} attempts failed, their "
            "errors are in each part's results.jsonl); the same command measures them again "
            "(--allow-failures exits 0)")


def note_interrupted(out_dir: str, parts: Sequence[Part], why: str) -> None:
    """Mark the run directory (and the part that was being measured) as ended by ``why``."""
    for part in parts:
        if os.path.exists(os.path.join(out_dir, part.name, rundir.META_FILE)):
            note_part(os.path.join(out_dir, part.name), why)
    if os.path.exists(os.path.join(out_dir, rundir.META_FILE)):
        rundir.finish_run(out_dir, interrupted=why)


# -- the command line ---------------------------------------------------------------------

def build_parser(repro: Reproduction) -> argparse.ArgumentParser:
    p = Parser(prog=repro.prog, description=repro.doc, epilog=repro.epilog,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("how long")
    g.add_argument("--repetitions", type=int, default=None, metavar="N",
                   help="repetitions per point, for every part (default: each part's own, shown by --dry-run)")
    g.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                   help="the measured window of each point, in seconds (default: each part's own)")
    g.add_argument("--udp-bitrate", default=None, metavar="RATE",
                   help="offered rate of the UDP points (iperf3 -b, e.g. 300M); the seeds sent as fast as "
                        "they could (0), which inside User-Mode Linux's one CPU starves the receiver "
                        "(default: each part's own)")
    g.add_argument("--parts", default=None, metavar="NAME,...",
                   help="measure only these parts (default: all; --dry-run lists them)")
    g.add_argument("--scale", type=scale_arg, default=None, metavar="auto|FACTOR",
                   help="divide every link rate of the seed by FACTOR, or by the factor a short calibration "
                        "finds (auto: the heaviest point then asks at most 60%% of what this machine can "
                        "emulate), so that the links, not the emulator's CPU, bound the points; the report "
                        "says what that can show (bytes on the wire, protocol behaviour) and what it cannot "
                        "(the seed's CPU costs) (default: the seed's rates)")
    g = p.add_argument_group("how the SAs are made")
    g.add_argument("--keying", choices=KEYINGS, default=None,
                   help=f"how the SAs are made: {KEYING_HELP}; parts that compare keyings keep theirs "
                        "(default: static)")
    repro.add_options(p)
    add_output_options(p, f"runs/<date>-seed{repro.seed}", "print the parts, their points and the estimated time")
    return p


def select_parts(repro: Reproduction, args) -> list[Part]:
    """The parts ``args`` asks for, with --repetitions/--duration applied."""
    parts = repro.parts(args)
    overrides = {k: v for k, v in (("repetitions", args.repetitions), ("duration_s", args.duration),
                                   ("udp_bitrate", args.udp_bitrate), ("keying", args.keying)) if v is not None}
    if overrides:
        parts = [dataclasses.replace(p, spec=dataclasses.replace(
            p.spec, **{k: v for k, v in overrides.items() if not (k == "keying" and p.keying_fixed)})) for p in parts]
    if args.parts:
        wanted = [w.strip() for w in args.parts.split(",") if w.strip()]
        unknown = sorted(set(wanted) - {p.name for p in parts})
        if unknown:
            raise ValueError(f"--parts: unknown part {', '.join(unknown)}; parts: {', '.join(p.name for p in parts)}")
        parts = [p for p in parts if p.name in wanted]
    return parts


def dry_run(parts: Sequence[Part], out_dir: str, scale: str | float | None = None) -> int:
    if scale == "auto":
        print("rates: the seed's, divided by the factor a calibration finds at the start of the run "
              "(a few seconds per IPsec profile); shown here unscaled")
    elif scale is not None:
        parts = scale_parts(parts, float(scale))
        print(f"rates: the seed's divided by {float(scale):g}")
    total = 0.0
    for part in parts:
        s = part.spec
        if part.transactions:
            what = f"{part.transactions} request/response transactions"
        else:
            mode = "datagram" if s.transports == ("udp",) else s.size_mode
            what = (f"{'/'.join(s.transports)}, {mode} {','.join(map(str, s.sizes))} B, "
                    f"{','.join(f'{r:g}' for r in s.rates_mbit)} Mbit/s")
        seconds = part.estimate_seconds()
        total += seconds
        clients = f", {s.clients} clients" if s.clients > 1 else ""
        versions = ",".join(map(str, s.ip_versions))
        keyed = f", {ike.describe_keying(s.keying)}" if ike.is_ike(s.keying) else ""
        print(f"{part.name}: {part.title}\n    {s.topology}{clients}, {s.mode}{keyed}, IPv{versions}, "
              f"{what}, MTU {s.mtu}; {', '.join(s.profiles)}; {s.repetitions} x {s.duration_s} s: "
              f"{part.points()} points, ~{seconds / 60:.1f} min")
    sys.stdout.flush()
    print(f"{len(parts)} parts into {out_dir}; estimated {total / 60:.1f} min plus a UML boot if the host kernel "
          "has no ESP", file=sys.stderr)
    return 0


def report(repro: Reproduction, out_dir: str) -> None:
    from analysis.reproduction_report import print_summary, write_report

    data = evaluate(out_dir)
    path = write_report(out_dir, data=data)
    print_summary(out_dir, data)
    print(f"report: {path}", file=sys.stderr)


def main(repro: Reproduction, argv: Sequence[str]) -> int:
    """``ipsec-testbed reproduce SEED ARGV...``: see the module docstring."""
    from experiments import doctor

    argv = list(argv)
    args = build_parser(repro).parse_args(argv)
    logging.basicConfig(level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)],
                        format="%(levelname)s %(name)s: %(message)s")

    def work() -> int:
        parts = select_parts(repro, args)  # a ValueError here is the one-line message of a bad value
        out_dir = runner.out_dir_of(args.out, REPO, f"seed{repro.seed}")
        if args.dry_run:
            return dry_run(parts, out_dir, args.scale)
        if (args.keying and ike.is_ike(args.keying) or any(ike.is_ike(p.spec.keying) for p in parts)) \
                and ike.available():
            raise Refused(ike.available())  # before a guest boots
        needs = doctor.needs(p for part in parts for p in part.spec.profiles)
        return runner.run(repro.prog, ("reproduce", repro.seed), args, argv, out_dir, needs,
                          measure=lambda: measure_parts(repro, parts, out_dir, args.scale, args.allow_failures),
                          report=lambda: report(repro, out_dir),
                          on_interrupt=lambda why: note_interrupted(out_dir, parts, why),
                          missing=lambda: missing_line(out_dir))

    return run_main(repro.prog, work, args.debug)

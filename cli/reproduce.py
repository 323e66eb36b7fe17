"""``ipsec-testbed reproduce SEED``: one seed's experiment, measured and judged against the paper.

The seeds' experiments are data (:mod:`experiments.catalogue`), their options too
(:class:`~experiments.reproduce.SeedOption`); this module makes them a command line, and the command
line a :class:`~experiments.job.Job` that :mod:`experiments.runner` runs.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence

from cli.options import Parser, add_output_options, csv, kernel_choice
from cli.sweep import REPO, finish
from experiments import runner
from experiments.catalogue import reproduction, reproductions
from experiments.job import REPRODUCTION_BUDGET_S, Job, ReproductionWork
from experiments.reproduce import Reproduction
from ipsec import ike
from ipsec.ike import KEYING_HELP, KEYINGS
from testbed.errors import Refused, fail, run_main


def usage() -> str:
    lines = ["usage: ipsec-testbed reproduce SEED [OPTIONS]", "",
             "Reproduce a seed's published experiment: measure its parts into one run directory, then judge",
             "the seed's claims against the measurement (holds / does not hold / undecided / not testable here)",
             "in report.html.",
             "Each seed has options of its own: `ipsec-testbed reproduce SEED --help`.", "", "seeds:"]
    for r in reproductions():
        lines.append(f"  {r.seed}  {r.doc.strip().splitlines()[0].removeprefix(f'Seed {r.seed}: ')}")
    lines += ["", "examples:", "  sudo ipsec-testbed reproduce 003 --dry-run     # the parts, their points and time",
              "  sudo ipsec-testbed reproduce 003               # measure, then report.html with the verdicts",
              "  ipsec-testbed report runs/<date>-seed003       # the verdicts again, from the run directory"]
    return "\n".join(lines) + "\n"


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


def minutes_arg(text: str) -> float:
    """``--budget``: minutes, 0 or more."""
    try:
        minutes = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"minutes (a number), not {text!r}") from None
    if not 0.0 <= minutes <= 7 * 24 * 60:
        raise argparse.ArgumentTypeError(f"minutes in 0..{7 * 24 * 60}, not {text}")
    return minutes


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
    g.add_argument("--budget", type=minutes_arg, default=REPRODUCTION_BUDGET_S / 60, metavar="MINUTES",
                   help="time from the command's start (a guest's boot included) within which claims left "
                        "undecided (a value's 95%% interval astride a bound of the claim's range) get more "
                        "repetitions of the points they rest on; a claim the budget cannot decide is named with "
                        "what it would take; 0 adds none (default: %(default)g)")
    g.add_argument("--parts", default=None, metavar="NAME,...",
                   help="measure only these parts (default: all; --dry-run lists them)")
    g.add_argument("--scale", type=scale_arg, default="auto", metavar="auto|FACTOR",
                   help="auto: each part in the regime its claims need: where the seed's link bound its points, "
                        "the seed's rates divided by the factor a short calibration finds (the heaviest point "
                        "then asks at most 60%% of what this machine can emulate), so that links bound them here "
                        "too; where the seed's own CPU did, unshaped (parts named *_cpu), so that this "
                        "machine's CPU does; a part serving both in both. FACTOR: every rate divided by it, "
                        "nothing unshaped; 1 keeps the seed's rates exactly (default: %(default)s)")
    g = p.add_argument_group("how the SAs are made")
    g.add_argument("--keying", choices=KEYINGS, default=None,
                   help=f"how the SAs are made: {KEYING_HELP}; parts that compare keyings keep theirs "
                        "(default: static)")
    if repro.options:
        g = p.add_argument_group(f"seed {repro.seed}")
        for o in repro.options:
            g.add_argument(o.flag, dest=o.dest, type=csv(o.kind) if o.many else o.kind, default=o.default,
                           metavar=o.metavar, help=o.help, **({"choices": o.choices} if o.choices else {}))
    add_output_options(p, f"runs/<date>-seed{repro.seed}", "print the parts, their points and the estimated time")
    return p


def job_from(repro: Reproduction, args: argparse.Namespace, argv: Sequence[str]) -> Job:
    """The reproduction's :class:`~experiments.job.Job` from its options (a ValueError names a bad value)."""
    named = [w.strip() for w in (args.parts or "").split(",") if w.strip()]
    parts = repro.select({o.dest: getattr(args, o.dest) for o in repro.options}, parts=named,
                         repetitions=args.repetitions, duration_s=args.duration, udp_bitrate=args.udp_bitrate,
                         keying=args.keying)
    why = repro.refusal(parts, named, args.scale)
    if why:
        raise ValueError(why)
    return Job(ReproductionWork(repro.seed, tuple(parts), args.scale, budget_s=args.budget * 60.0),
               out_dir=runner.out_dir_of(args.out, REPO, f"seed{repro.seed}"), kernel=kernel_choice(args),
               allow_failures=args.allow_failures, report=not args.no_report,
               command=("ipsec-testbed", "reproduce", repro.seed, *argv), started_unix=time.time(),
               verbose=args.verbose, allow_concurrent=args.allow_concurrent,
               history=args.history)


def main(argv: Sequence[str]) -> int:
    """``argv``: SEED, then that seed's options."""
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), end="", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    try:
        repro = reproduction(argv[0])
    except ValueError as e:
        return fail("ipsec-testbed reproduce", f"error: {e}", 2)
    args = build_parser(repro).parse_args(argv[1:])
    logging.basicConfig(level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)],
                        format="%(levelname)s %(name)s: %(message)s")

    def work() -> int:
        job = job_from(repro, args, argv[1:])
        if args.dry_run:
            return runner.dry_run(job)
        if any(ike.is_ike(p.spec.keying) for p in job.work.parts) and ike.available():
            raise Refused(ike.available())  # before a guest boots
        return finish(job, repro.prog, runner.run(job, repro.prog))

    return run_main(repro.prog, work, args.debug)

"""``ipsec-testbed regress``: the regression gate, a run judged against a baseline, two kernels or two arms.

Three ways to get the two sides, one table of verdicts (:mod:`analysis.regress`):

- a suite (:mod:`experiments.catalogue.suites`) measured now, or a run directory, against a
  saved baseline (``--baseline``, ``--save-baseline``);
- ``--ab A B``: the suite on two kernels up at once, windows paired ABBA (:mod:`experiments.ab`);
- ``--inject-slowdown PCT``: the suite with two arms side by side, the second with the ESP path
  made PCT slower (:mod:`experiments.injection`): the gate's sensitivity on this machine.

Every sweep is a :class:`~experiments.job.Job` run through :mod:`experiments.runner` (a paired A/B's
two at once, each in a process of its own).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import sys
import time

from cli.options import (
    add_concurrent_option,
    add_history_option,
    add_kernel_options,
    add_speed_probe_option,
    kernel_choice,
    percent,
)
from cli.output import console
from experiments.job import INCOMPLETE, Job, SweepWork
from testbed import historyplace
from testbed.record import FIELD

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sweep_failed(prog: str, rc: int) -> int:
    """The exit status when a suite's sweep did not finish: a signal's (130, 143) passes on, else 2."""
    if rc >= 128:
        return rc  # the sweep has said where its points are
    what = "could not measure every point" if rc == INCOMPLETE else "failed"
    print(f"{prog}: the suite's sweep {what} (exit {rc}); nothing compared", file=sys.stderr)
    return 2


def add_parser(sub) -> None:
    """The ``regress`` subcommand and its options, on ``ipsec-testbed``'s subparsers ``sub``."""
    from experiments.catalogue.suites import SUITES

    p = sub.add_parser(
        "regress", help="compare a run with a baseline, point by point; exit 1 on a regression",
        description="The regression gate for CI.\n\n"
        "Run a named suite (or take an existing run directory) and compare it with a baseline file,\n"
        "point by point, on the metrics of --metrics. A point regresses when, at the given confidence,\n"
        "its goodput fell (or, with --metrics, its CPU cost rose) by more than --max-drop: the one-sided\n"
        "confidence bound of now/baseline on the worse side (ratio of means, delta method, Welch-\n"
        "Satterthwaite degrees of freedom) lies beyond 1 -/+ max-drop, so the repetitions' noise is\n"
        "accounted for. Prints a table; writes JUnit XML and a Markdown summary on request.\n\n"
        "Exit status: 0 nothing regressed, 1 a regression, 2 an error (including a point with fewer\n"
        "than 2 repetitions, which cannot be judged). A baseline records kernel, backend and CPU;\n"
        "comparing across different ones is done, with a loud warning.\n\n"
        "Two kernels paired (--ab, --bisect) and the gate's power (--inject-slowdown) run on the\n"
        "counted backend by default (--kernel auto, where QEMU runs and no suite but counted is asked\n"
        "for): the counted suite judged in instructions per packet, which do not move with the\n"
        "machine's speed (identical kernels within +-0.2 %, +1 % seen 20 times of 20). --kernel uml\n"
        "(or a suite such as detect) times CPU in User-Mode Linux instead.\n\n"
        "Every run adds its figures to the results history (--history; `ipsec-testbed history`). With no\n"
        "baseline, a suite's run on one kernel does only that: a nightly job then asks\n"
        "`ipsec-testbed history --check` whether this kernel starts a regression against the ones before.",
        epilog="suites:\n" + "\n".join(f"  {n:8s} {d}" for n, (d, _) in SUITES.items()) + "\n\nexamples:\n"
        "  sudo ipsec-testbed regress --suite smoke --save-baseline baseline.json   # on the reference kernel\n"
        "  sudo ipsec-testbed regress --suite smoke --baseline baseline.json --junit regress.xml\n"
        "  ipsec-testbed regress --run runs/x --baseline baseline.json --max-drop 3   # no new measurement\n"
        "  sudo ipsec-testbed regress --ab uml ~/linux-next/linux --suite ciphers   # two kernels, interleaved\n"
        "  sudo ipsec-testbed regress --suite counted --kernel qemu --uml-kernel ~/linux@HEAD   # into the history\n"
        "  (a GitHub Actions workflow to copy: examples/github-actions/ipsec-regress.yml)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--suite", choices=tuple(SUITES), default=None,
                      help="suite to run (default: smoke; with --ab, --bisect or --inject-slowdown on the counted "
                           "backend, which --kernel auto chooses for them where QEMU runs, counted; detect with "
                           "--bisect in UML)")
    what.add_argument("--run", metavar="RUN_DIR", help="compare this run directory instead of running a suite")
    p.add_argument("--ab", nargs=2, metavar=("KERNEL_A", "KERNEL_B"),
                   help="A/B: run the suite on two kernels (host; uml: the UML kernel chosen by default; or a kernel "
                        "name: debian, recipe, 6.1, 6.12, a tarball, PATH@REF of a git tree, +patch:FILE, "
                        "+config:FRAGMENT, a built image; see `ipsec-testbed kernel --help`: each is built on first "
                        "use) and judge B against A. Both kernels are up at "
                        "once, in two guests on one host CPU (2 x --uml-mem of memory), taking turns window by "
                        "window (ABBA), and B/A is judged pair by pair; where two guests do not fit in memory they "
                        "are booted in turn and compared unpaired (--rounds). With --inject-slowdown (A and B the "
                        "same kernel): B's ESP path made slower, the paired A/B's power")
    p.add_argument("--bisect", nargs=2, metavar=("GOOD", "BAD"),
                   help="find the commit of --tree between GOOD and BAD (refs: tags, branches, commits; GOOD an "
                        "ancestor of BAD) that made kernel IPsec worse: first a paired A/B confirms BAD is worse than "
                        "GOOD beyond the tolerance at the confidence (else: no regression, exit 0); then each step "
                        "builds the commit halfway between the last good and the first bad one (a kept tree: only "
                        "what changed is compiled) and pairs it with GOOD; a step whose interval lies on GOOD's side "
                        "of halfway to BAD's ratio is good, on BAD's side bad, across it unclear (measured again, "
                        "then skipped). Ends naming the first bad commit with its ratio (exit 1); the same command "
                        "on the same --out goes on where it stopped")
    p.add_argument("--tree", metavar="PATH",
                   help="with --bisect: the kernel's git work tree (with +patch:FILE and +config:FRAGMENT suffixes "
                        "for every step's build)")
    p.add_argument("--repetitions", type=int, metavar="N", help="with --ab or --bisect: repetitions (windows) per "
                   "kernel (default: the suite's)")
    p.add_argument("--rounds", type=int, metavar="N", help="with --ab where two guests do not fit: boots of each "
                   "kernel, ABBA, each measuring its share of the repetitions (default: one per repetition, at "
                   "most 4)")
    p.add_argument("--baseline", metavar="FILE", help="baseline to compare with")
    p.add_argument("--save-baseline", metavar="FILE", help="record the run as a baseline (with --baseline: "
                   "compare with the old one too)")
    p.add_argument("--max-drop", type=percent(0, 100), default=None, metavar="PERCENT",
                   help="goodput drop (or CPU cost rise) tolerated before a point counts as regressed "
                        "(default: the suite's, see below; 5 otherwise)")
    p.add_argument("--metrics", type=regress_metrics, default=None, metavar="M,...",
                   help="what is judged: goodput (higher is better), cpu-per-gb and cpu-per-packet (CPU "
                        "seconds per GB and microseconds per packet: lower is better; a baseline must have "
                        "been made by this version) (default: the suite's, see below; goodput otherwise)")
    p.add_argument("--confidence", type=percent(50, 100), default=95.0, metavar="PERCENT",
                   help="one-sided confidence the drop must have (default: %(default)g)")
    p.add_argument("--junit", metavar="FILE", help="write JUnit XML (one test case per point)")
    p.add_argument("--markdown", metavar="FILE", help="write a Markdown summary (appended when FILE is "
                   "$GITHUB_STEP_SUMMARY)")
    p.add_argument("--json", metavar="FILE", help="with --inject-slowdown or --ab: write the verdicts (and the "
                   "slowdown as measured) as JSON")
    p.add_argument("--inject-slowdown", type=percent(0, 100, low_included=True), metavar="PERCENT",
                   help="check the gate's sensitivity on this machine: run the suite with two arms side by side, "
                        "a as is and b with the kernel's ESP path made PERCENT slower (extra BPF instructions per "
                        "ESP packet: the CPU cost per packet at the suite's CPU-bound point grows by PERCENT), "
                        "judge b against a, and print the slowdown as measured. The first run on a kernel "
                        "calibrates (about 40 s, cached). 0 makes two identical arms (a false-alarm check). "
                        "Exit status: 0 when the gate got it right (flagged a slowdown, or nothing at 0), 1 when "
                        "it did not")
    p.add_argument("--recalibrate", action="store_true", help="with --inject-slowdown: measure the calibration "
                   "again instead of using the cached one")
    p.add_argument("--out", metavar="DIR", help="run directory for the suite (default: runs/regress-<date>-SUITE)")
    add_concurrent_option(p)
    add_history_option(p)
    add_kernel_options(p)
    add_speed_probe_option(p)
    p.set_defaults(func=run)


PROG = "ipsec-testbed regress"


def suite_job(args: argparse.Namespace, out_dir: str) -> Job:
    """The suite's sweep into ``out_dir`` on the kernel the options choose, without a report."""
    from experiments.catalogue.suites import suite_spec

    return Job(SweepWork(suite_spec(args.suite)), out_dir=os.path.abspath(out_dir), kernel=kernel_choice(args),
               report=False, command=("ipsec-testbed", *sys.argv[1:]), verbose=args.verbose,
               allow_concurrent=args.allow_concurrent, history=args.history)


def sweep(job: Job) -> int:
    """Run a suite's sweep ``job``; its exit status (an error is one line, then 1, as the sweep's own)."""
    from experiments import runner
    from testbed.errors import run_main

    return run_main(PROG, lambda: runner.run(job, PROG))


def run(args: argparse.Namespace) -> int:
    from experiments.catalogue.suites import gate_defaults
    from testbed import backends

    prog = PROG
    if counted_by_default(args):
        args.kernel = backends.QemuBackend.name
        print(f"{prog}: on the counted backend (--kernel qemu: instructions, the same on every machine; --kernel uml "
              "for CPU time)", file=sys.stderr)
    if args.suite is None:
        args.suite = "counted" if kernel_choice(args).counted else "detect" if args.bisect else "smoke"
    if args.bisect and (args.ab or args.run or args.baseline or args.save_baseline or args.inject_slowdown is not None):
        print(f"{prog}: --bisect measures GOOD and each step itself: no --ab, --run, --baseline, --save-baseline or "
              "--inject-slowdown with it", file=sys.stderr)
        return 2
    compares = args.ab or args.bisect or args.inject_slowdown is not None or args.baseline or args.save_baseline
    if not compares and (args.run or historyplace.location(args.history) is None):
        print(f"{prog}: give --baseline FILE to compare with, or --save-baseline FILE to record one (or --ab A B to "
              "compare two kernels; or a history, --history, to add the suite's figures to)", file=sys.stderr)
        return 2
    if bool(args.bisect) != bool(args.tree):
        print(f"{prog}: --bisect GOOD BAD and --tree PATH go together", file=sys.stderr)
        return 2
    defaults = gate_defaults(None if args.run else args.suite)
    if args.max_drop is None and not args.ab:  # --ab: its tolerance depends on whether it is paired
        paired = args.inject_slowdown is not None or args.bisect  # arms of one run, or steps paired with GOOD
        args.max_drop = defaults["arms_max_drop" if paired else "max_drop"]
    if args.metrics is None:
        args.metrics = defaults["metrics"]
    if args.allow_concurrent and (args.ab or args.bisect):
        print(f"{prog}: --allow-concurrent cannot go with --ab or --bisect: the paired A/B's turns need the CPU to "
              "themselves", file=sys.stderr)
        return 2
    if args.run and not (args.ab or args.bisect or args.inject_slowdown is not None):
        return _regress(args, prog, defaults)  # judges a run directory: measures nothing
    from testbed import measuring
    from testbed.errors import Refused

    try:
        with measuring.exclusive(("ipsec-testbed", *sys.argv[1:]), args.out, args.allow_concurrent):
            return _regress(args, prog, defaults)
    except Refused as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2


def _regress(args: argparse.Namespace, prog: str, defaults: dict) -> int:
    from analysis import regress
    from testbed.rundir import ResultsError, load_meta, load_results

    if args.bisect:
        return _regress_bisect(args, prog)
    if args.ab:
        if args.run or args.baseline or args.save_baseline:
            print(f"{prog}: --ab measures both kernels itself: no --run, --baseline or --save-baseline with it",
                  file=sys.stderr)
            return 2
        return _regress_ab(args, prog)
    if args.inject_slowdown is not None:
        if args.run or args.baseline or args.save_baseline:
            print(f"{prog}: --inject-slowdown compares two arms of one run it makes itself: no --run, "
                  "--baseline or --save-baseline with it", file=sys.stderr)
            return 2
        return _regress_injected(args, prog)
    if not (args.baseline or args.save_baseline):
        return _regress_into_history(args, prog)  # (run() refused this without a history)
    try:
        run_dir = args.run
        if run_dir is None:
            run_dir = _out_dir(args, "regress")
            print(f"regress: suite {args.suite} into {run_dir}", file=sys.stderr, flush=True)
            rc = sweep(suite_job(args, run_dir))
            if rc != 0:
                return sweep_failed(prog, rc)
        records, meta = load_results(run_dir), load_meta(run_dir)
        if args.save_baseline:
            regress.save_baseline(regress.make_baseline(records, meta, source=os.path.abspath(run_dir)),
                                  args.save_baseline)
            print(f"regress: baseline of {run_dir} written to {args.save_baseline}", file=sys.stderr)
            if not args.baseline:
                return 0
        baseline = regress.load_baseline(args.baseline)
        verdicts = regress.compare(baseline, records, args.max_drop / 100, args.confidence / 100, args.metrics)
    except (regress.RegressError, ResultsError, OSError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    warnings = [f"the baseline was measured on another machine or kernel ({d}): differences may be the "
                "machine's, not the change's" for d in regress.machine_differences(baseline, meta)]
    for w in warnings:
        print(f"WARNING: {w}", file=sys.stderr)
    return _report_verdicts(args, verdicts, warnings, ("baseline", "now"))


def _regress_into_history(args: argparse.Namespace, prog: str) -> int:
    """The suite measured on one kernel and its figures added to the history, to be judged there against every
    kernel before it (``ipsec-testbed history --check``): a nightly job's step, on any runner."""
    run_dir = _out_dir(args, "regress")
    print(f"regress: suite {args.suite} into {run_dir}; no baseline: its figures go to the history, "
          f"{historyplace.describe(historyplace.location(args.history))}", file=sys.stderr, flush=True)
    rc = sweep(suite_job(args, run_dir))
    if rc != 0:
        return sweep_failed(prog, rc)
    print("regress: `ipsec-testbed history --check` judges this kernel against the ones before it", file=sys.stderr)
    return 0


def _out_dir(args: argparse.Namespace, kind: str, suffix: str = "") -> str:
    """``--out``, or ``runs/KIND-<date>-SUITE<suffix>`` (in the checkout, or the current directory)."""
    when = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    from experiments.runner import runs_dir

    return args.out or os.path.join(runs_dir(REPO), f"{kind}-{when}-{args.suite}{suffix}")


def _regress_injected(args: argparse.Namespace, prog: str) -> int:
    """``--inject-slowdown``: the suite with arms a (as is) and b (the ESP path slowed), and the gate's
    verdicts on b against a, next to the slowdown as measured."""
    from analysis import regress
    from experiments import injection
    from testbed.rundir import ResultsError, load_meta, load_results

    def say(m: str) -> None:
        print(f"regress: {m}", file=sys.stderr, flush=True)

    pct = args.inject_slowdown
    try:
        out = _out_dir(args, "inject", f"-{pct:g}pct")
        job = suite_job(args, out)
        cal = injection.calibrated(
            args.suite, job.work.spec, injection.kernel_identity(args.kernel, args.uml_kernel, args.qemu_crypto),
            lambda spec, run_dir: sweep(_with(job, spec, run_dir)), out, say, args.recalibrate,
            injection.calibration_instructions(_clock(args.kernel)))
        n = cal.instructions_for(pct)
        run_dir = os.path.join(out, "ab")
        say(f"suite {args.suite} with arms a (nothing added) and b (a {pct:g} % slowdown: {n} extra instructions "
            f"per ESP packet), interleaved, into {run_dir}")
        rc = sweep(_with(job, dataclasses.replace(job.work.spec, arms=(0, n)), run_dir))
        if rc != 0:
            return sweep_failed(prog, rc)
        records, meta = load_results(run_dir), load_meta(run_dir)
        verdicts = regress.compare_arms(records, meta, "a", "b", args.max_drop / 100, args.confidence / 100,
                                        args.metrics)
        e = injection.effect(records, "b")
    except (regress.RegressError, injection.InjectionError, ResultsError, ValueError, RuntimeError, OSError) as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 2
    cost = "CPU" if cal.unit == "µs" else "instructions"
    measured = (f"injected slowdown: {pct:g} % requested ({n} extra instructions per ESP packet), "
                f"{e.pct:+.1f} % measured ({cost} per packet at {cal.point}, arm b / arm a = {e.ratio:.3f} pair by "
                f"pair, 95 % CI {e.low:.3f}..{e.high:.3f}, {e.n_base} and {e.n_arm} repetitions)")
    flagged = _report_verdicts(args, verdicts, [measured], ("arm a", "arm b")) == 1
    print(measured)
    # a sensitivity check: it passes when the gate saw the slowdown (or, at 0 %, saw nothing)
    right = flagged == (pct > 0)
    print(f"the gate {'flagged' if flagged else 'did not flag'} arm b: "
          f"{'as it should' if right else 'it MISSED the slowdown' if pct > 0 else 'a FALSE ALARM'}")
    status = 0 if right else 1
    if args.json:
        _write_json(args.json, verdicts, args, {"requested_pct": pct, "right": right, "instructions": n,
                                                "measured_pct": e.pct, "ratio": e.ratio, "low": e.low,
                                                "high": e.high, "calibration": vars(cal),
                                                "run_dir": run_dir})
    return status


def counted_by_default(args: argparse.Namespace) -> bool:
    """Whether a paired comparison (``--ab``, ``--bisect``, ``--inject-slowdown``) with ``--kernel auto`` runs on
    the counted backend: where QEMU can run it, with no suite but the counted one asked for
    and no kernel only another backend boots (``host``, ``uml``, a UML image).  Counted, identical kernels agree
    within ±0.2 % and +1 % instructions per ESP packet is seen 20 times of 20, on any machine; timed, this
    project's machines move by ±0.5 to ±4.5 % (docs/kernel.md)."""
    from testbed import backends, kernelsource

    counted = backends.QemuBackend.name
    if args.kernel != backends.AUTO or args.suite not in (None, "counted"):
        return False
    if not (args.ab or args.bisect or args.inject_slowdown is not None):
        return False
    if any(name in backends.names() for name in args.ab or ()):
        return False
    try:
        images = [kernelsource.parse(name) for name in args.ab or ()]
        if any(backends.booting(image.base).name != counted for image in images if image.kind == "image"):
            return False
        if args.uml_kernel and os.path.isfile(args.uml_kernel) and backends.booting(args.uml_kernel).name != counted:
            return False
    except ValueError:
        return False  # a name no backend takes: the comparison's own checks say so
    why = backends.get(counted).unavailable()
    if why:
        print(f"regress: the counted backend cannot run here ({why}): the comparison is timed, in UML",
              file=sys.stderr)
        return False
    return True


def _clock(kernel: str) -> str:
    """What the CPU meter of ``--kernel``'s backend counts (``auto``: time; :func:`counted_by_default` has chosen
    the counted backend before this is asked)."""
    from testbed import backends

    return backends.get(kernel).clock if kernel in backends.names() else backends.base.TIME


def _with(job: Job, spec, out_dir: str) -> Job:
    """``job`` measuring ``spec`` into ``out_dir``."""
    return job.with_(work=dataclasses.replace(job.work, spec=spec), out_dir=os.path.abspath(out_dir))


def _write_json(path: str, verdicts, args: argparse.Namespace, extra: dict | None = None) -> None:
    """The verdicts as JSON (one object per point and metric), for scripts."""
    from analysis import regress

    with open(path, "w") as f:
        json.dump({"max_drop": args.max_drop / 100, "confidence": args.confidence / 100,
                   "regressed": any(v.regressed for v in verdicts),
                   "verdicts": [{"point": regress.point_fields(v.point), "metric": v.metric, "ratio": v.ratio,
                                 "bound": v.bound, "low": v.low2, "high": v.high2, "regressed": v.regressed,
                                 "baseline_n": v.baseline.n, "current_n": v.current.n} for v in verdicts],
                   **(extra or {})}, f, indent=1)
        f.write("\n")


#: --metrics names -> record fields (analysis.regress.METRICS)
REGRESS_METRICS = {"goodput": FIELD.goodput_mbps, "cpu-per-gb": FIELD.cpu_s_per_gb,
                   "cpu-per-packet": FIELD.cpu_us_per_packet,
                   "instructions-per-packet": FIELD.instructions_per_packet,
                   "instructions-per-byte": FIELD.instructions_per_byte}


def regress_metrics(text: str) -> tuple[str, ...]:
    """``--metrics``: comma-separated names of :data:`REGRESS_METRICS`."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in REGRESS_METRICS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown metric {bad[0] if bad else '(none)'!r}; metrics: "
                                         f"{', '.join(REGRESS_METRICS)}")
    return tuple(dict.fromkeys(REGRESS_METRICS[n] for n in names))


#: What a paired A/B needs beside its two guests' memory (the host's own processes, page cache).
AB_SPARE_BYTES = 1 << 30


def two_guests_fit(uml_mem: str) -> str | None:
    """None when two guests of ``uml_mem`` each fit in the memory available now, else why not (one line)."""
    from cli.options import parse_size

    need = 2 * parse_size(uml_mem) + AB_SPARE_BYTES
    with open("/proc/meminfo") as f:
        available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    if available >= need:
        return None
    return (f"two guests of {uml_mem} need {need / 2**30:.1f} GiB with room for the host, and "
            f"{available / 2**30:.1f} GiB is available")


def _regress_ab(args: argparse.Namespace, prog: str) -> int:
    """``--ab A B``: both kernels up at once, taking turns window by window, B judged against A pair by
    pair; in turn, unpaired, where two guests do not fit.  With ``--inject-slowdown`` B's guest (on the
    same kernel) has its ESP path slowed: the paired A/B's power."""
    from analysis import regress
    from analysis.page import foreign_load_text
    from experiments import ab, doctor, injection, runner
    from experiments.catalogue.suites import gate_defaults
    from testbed.backends.uml import guest_cpu
    from testbed.hostload import FOREIGN_PCT
    from testbed.rundir import ResultsError, load_meta, load_results

    def say(m: str) -> None:
        print(f"regress: {m}", file=sys.stderr, flush=True)

    kernels = tuple(args.ab)
    pct = args.inject_slowdown
    counted = kernel_choice(args).counted  # the names are the counted backend's: Debian's x86-64, or x86 builds
    try:
        for kernel in kernels:
            build_named(kernel, counted)
        out = _out_dir(args, "ab", f"-{pct:g}pct" if pct is not None else "")
        job = suite_job(args, out)
        for kernel in kernels:  # each side would refuse a kernel that cannot run here: say so before any boot
            side = job.kernel.naming(kernel)
            choice = doctor.choose(side.kernel, runner.needs(job), side.options())
            if choice.backend is None:
                raise ValueError(f"kernel {kernel} cannot run the suite here: {choice.reason}")
        reps = args.repetitions or job.work.spec.repetitions
        cramped = two_guests_fit(args.uml_mem)
        if cramped:
            if pct is not None:
                raise ValueError(f"--inject-slowdown with --ab needs both guests up at once: {cramped}")
            say(f"{cramped}: the kernels are measured in turn, unpaired (the machine's drift between boots "
                "is not cancelled)")
            if args.max_drop is None:  # unpaired: a baseline's tolerance
                args.max_drop = gate_defaults(args.suite)["max_drop"]
            dir_a, dir_b = ab.run_ab(job, kernels, reps, sweep, say=say, rounds=args.rounds or min(reps, 4))
            baseline = regress.make_baseline(load_results(dir_a), load_meta(dir_a), source=dir_a)
            records_b = load_results(dir_b)
            verdicts = regress.compare(baseline, records_b, args.max_drop / 100, args.confidence / 100, args.metrics)
            notes = [f"kernel A is {kernels[0]}, kernel B is {kernels[1]}; measured in turn, unpaired: {dir_a} and "
                     f"{dir_b}"]
            notes += [t for t in [foreign_load_text([*load_results(dir_a), *records_b])] if t]
            status = _report_verdicts(args, verdicts, notes, ("A", "B"))
            for note in notes[1:]:
                print(note)
            return status
        if args.max_drop is None:  # paired: side by side, the drift cancels, as between arms
            args.max_drop = gate_defaults(args.suite)["arms_max_drop"]
        arms: tuple = ((), ())
        n = None
        if pct is not None:
            on_a = job.with_(kernel=job.kernel.naming(kernels[0]))
            identity = injection.kernel_identity(on_a.kernel.kernel, on_a.kernel.uml_kernel, on_a.kernel.qemu_crypto)
            cal = injection.calibrated(args.suite, job.work.spec, identity,
                                       lambda spec, run_dir: sweep(_with(on_a, spec, run_dir)), out, say,
                                       args.recalibrate, injection.calibration_instructions(_clock(on_a.kernel.kernel)))
            n = cal.instructions_for(pct)
            arms = ((0,), (n,))  # the same BPF program in both, B's made slower
            say(f"B's guest with its ESP path {pct:g} % slower ({n} extra instructions per ESP packet), "
                "A's with the same program adding none")
        cpu = guest_cpu()
        jobs = ab.paired_jobs(job, kernels, reps, cpu, arms)
        if all(side.kernel.counted for side in jobs.values()):
            say(f"kernels A ({kernels[0]}) and B ({kernels[1]}) up at once, each at its own pace (counted: their "
                f"windows need no turns), paired by their order, {reps} windows each, into {out}")
        else:
            say(f"kernels A ({kernels[0]}) and B ({kernels[1]}) up at once, both guests on host CPU "
                f"{cpu if cpu is not None else 'any'}, taking turns window by window (ABBA), {reps} windows each, "
                f"into {out}")
        dir_a, dir_b = ab.run_paired(jobs, out, say)
        records = ab.as_arms(load_results(dir_a), load_results(dir_b))
        verdicts = regress.compare_arms(records, load_meta(dir_a), "a", "b", args.max_drop / 100,
                                        args.confidence / 100, args.metrics)
        effect = injection.effect(records, "b") if pct is not None else None
    except (regress.RegressError, injection.InjectionError, ResultsError, ValueError, RuntimeError, OSError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    notes = [f"kernel A is {kernels[0]}, kernel B is {kernels[1]}; both up at once, windows paired ABBA; run "
             f"directories {dir_a} and {dir_b}"]
    foreign = foreign_load_text(records)
    if foreign:  # pairing cancels the machine's drift, not another job's share of the CPU the turns assume
        notes.append(foreign)
    if effect is not None:
        notes.append(f"injected slowdown in B: {pct:g} % requested ({n} extra instructions per ESP packet), "
                     f"{effect.pct:+.1f} % measured (CPU per packet, B / A = {effect.ratio:.3f} pair by pair, "
                     f"95 % CI {effect.low:.3f}..{effect.high:.3f})")
    status = _report_verdicts(args, verdicts, notes, ("A", "B"))
    for note in notes[1:]:
        print(note)
    if pct is None:
        if args.json:
            _write_json(args.json, verdicts, args, {"kernels": list(kernels), "paired": True, "run_dir": out})
        return status
    flagged = status == 1
    right = flagged == (pct > 0)
    print(f"the gate {'flagged' if flagged else 'did not flag'} kernel B: "
          f"{'as it should' if right else 'it MISSED the slowdown' if pct > 0 else 'a FALSE ALARM'}"
          f"{' (with other work on the host: not the gate of a quiet machine)' if foreign and not right else ''}")
    if args.json:
        _write_json(args.json, verdicts, args, {"requested_pct": pct, "right": right, "instructions": n,
                                                "measured_pct": effect.pct, "ratio": effect.ratio, "low": effect.low,
                                                "high": effect.high, "paired": True, "run_dir": out,
                                                "disturbed_windows": sum(1 for r in records
                                                                          if (r.foreign_cpu_pct or 0) > FOREIGN_PCT)})
    return 0 if right else 1


def build_named(kernel: str, counted: bool = False) -> None:
    """Build the kernel ``kernel`` names, if it is built by the recipe and not yet in the cache (one line on
    a bad name or a failed step, as a ValueError or a RuntimeError); ``counted``: for the counted backend."""
    from testbed import backends, kernelbuild

    if kernel not in backends.names():
        kernelbuild.ensure(kernel, variant=kernelbuild.variant_for(counted))


def _regress_bisect(args: argparse.Namespace, prog: str) -> int:
    """``--bisect GOOD BAD --tree PATH``: see :mod:`experiments.bisection`.  Exit 0 no regression, 1 the first
    bad commit found (or a range skips left), 2 an error."""
    from analysis import regress
    from experiments import ab
    from experiments import bisection as bisect
    from experiments.catalogue.suites import gate_defaults
    from testbed import kernelbuild, kernelsource
    from testbed.backends.uml import guest_cpu
    from testbed.rundir import ResultsError, atomic_write, load_meta, load_results

    def say(m: str) -> None:
        print(f"regress: {m}", file=sys.stderr, flush=True)

    good, bad = args.bisect
    try:
        tree = kernelsource.parse(args.tree)
        if tree.kind != "git":
            raise ValueError(f"--tree {args.tree}: a git work tree of a kernel, not a {tree.kind}")
        cramped = two_guests_fit(args.uml_mem)
        if cramped:
            raise ValueError(f"a bisect pairs each step with GOOD in two guests at once: {cramped}")
        if args.max_drop is None:
            args.max_drop = gate_defaults(args.suite)["arms_max_drop"]
        out = _out_dir(args, "bisect")
        job = suite_job(args, out)
        reps = args.repetitions or job.work.spec.repetitions
        metric = FIELD.cpu_us_per_packet if FIELD.cpu_us_per_packet in args.metrics else args.metrics[0]
        good_sha = kernelsource.resolve_ref(tree.base, good)
        good_name = tree.with_ref(good_sha).canonical
        cpu = guest_cpu()
        counted = kernel_choice(args).counted  # each commit built for the counted backend, judged in instructions

        def build(commit: str) -> str:
            name = tree.with_ref(commit)
            kernelbuild.build(name, variant=kernelbuild.variant_for(counted),
                              say=lambda m: say(f"build {commit[:12]}: {m}"))
            return name.canonical

        def measure(name: str) -> bisect.Ratio:
            commit = kernelsource.parse(name).ref or ""
            step_dir = os.path.join(out, f"ab-{time.strftime('%H%M%S')}-{commit[:12]}")
            jobs = ab.paired_jobs(job.with_(out_dir=step_dir), (good_name, name), reps, cpu)
            dir_a, dir_b = ab.run_paired(jobs, step_dir, say)
            records = ab.as_arms(load_results(dir_a), load_results(dir_b))
            verdicts = regress.compare_arms(records, load_meta(dir_a), "a", "b", args.max_drop / 100,
                                            args.confidence / 100, args.metrics)
            judged = regress.on_clock([metric], records)[0]  # instructions per packet on the counted backend
            v = next(v for v in verdicts if v.metric == judged)
            return bisect.Ratio(v.ratio, v.low2, v.high2, regressed=any(x.regressed for x in verdicts))

        build(good_sha)  # GOOD is every step's other side: built first, once
        run = bisect.Bisect(tree.base, good, bad, out, build, measure, say=lambda m: print(m, flush=True))
        run.load()
        say(f"bisecting {len(run.commits)} commits of {tree.base} between {good} and {bad} on suite {args.suite} "
            f"({reps} windows per kernel, paired; judged on {metric}, tolerance {args.max_drop:g} %) into {out}")
        outcome = run.run()
        atomic_write(os.path.join(out, "bisect.md"), bisect_markdown(run, outcome, args))
    except (bisect.BisectError, regress.RegressError, ResultsError, ValueError, RuntimeError, OSError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    confirm = run.confirmed()
    if outcome is None:
        print(f"no regression: {bad} against {good}, B/A {confirm.ratio:.3f} ({confirm.low:.3f}..{confirm.high:.3f}), "
              f"within the tolerance of {args.max_drop:g} % ({os.path.join(out, 'bisect.md')})")
        return 0
    first, suspects = outcome
    if first:
        step = next((s for s in reversed(run.steps) if s.commit == first and s.ratio is not None), confirm)
        print(f"first bad commit: {first} {bisect.subject(tree.base, first)}\n  B/A {step.ratio:.3f} "
              f"({step.low:.3f}..{step.high:.3f}) against {good}; {bad} measured {confirm.ratio:.3f} "
              f"({os.path.join(out, 'bisect.md')})")
    else:
        print(f"the first bad commit is one of {len(suspects)} (the others were skipped): "
              + ", ".join(c[:12] for c in suspects))
    return 1


def bisect_markdown(run, outcome, args: argparse.Namespace) -> str:
    """The bisect's report: every step as a row, then the outcome."""
    lines = [f"# Bisect of {run.tree}: {run.good} (good) .. {run.bad} (bad)", "",
             f"Suite {args.suite}, paired A/B against {run.good} at each step, tolerance {args.max_drop:g} %.", "",
             "| step | commit | subject | B/A | 95 % interval | verdict | build s | measure s |",
             "|---|---|---|---|---|---|---|---|"]
    for s in run.steps:
        ratio = f"{s.ratio:.3f}" if s.ratio is not None else "-"
        interval = f"{s.low:.3f}..{s.high:.3f}" if s.low is not None else "-"
        lines.append(f"| {s.kind} | `{s.commit[:12]}` | {s.subject.replace('|', '/')} | {ratio} | {interval} | "
                     f"{s.verdict}{f' ({s.note})' if s.note else ''} | {s.build_s:.0f} | {s.measure_s:.0f} |")
    if outcome is None:
        lines += ["", "No regression: the bad end is not worse than the good one beyond the tolerance."]
    elif outcome[0]:
        lines += ["", f"First bad commit: `{outcome[0]}`."]
    else:
        lines += ["", "The first bad commit is one of: " + ", ".join(f"`{c[:12]}`" for c in outcome[1]) + "."]
    return "\n".join(lines) + "\n"


def _report_verdicts(args: argparse.Namespace, verdicts, notes: list[str], labels: tuple[str, str]) -> int:
    """The table, the requested JUnit/Markdown files, and the exit status."""
    from analysis import regress, regress_report

    max_drop, confidence = args.max_drop / 100, args.confidence / 100
    _print_verdicts(verdicts, max_drop, confidence, labels)
    for path, text in ((args.junit, regress_report.junit_xml(verdicts, max_drop, confidence, notes)),
                       (args.markdown, regress_report.markdown(verdicts, max_drop, confidence, notes))):
        if path:
            with open(path, "a" if path == os.environ.get("GITHUB_STEP_SUMMARY") else "w") as f:
                f.write(text)
    return regress.exit_status(verdicts)


def _print_verdicts(verdicts, max_drop: float, confidence: float, labels: tuple[str, str]) -> None:
    from rich.table import Table

    then, now = labels
    table = Table(title=f"{now} against {then} (regressed: goodput fell or CPU cost rose by more than "
                        f"{max_drop * 100:g}% at {confidence:.0%} confidence)", title_justify="left")
    for col in ("point", "metric", then, now, f"{now}/{then}", f"{confidence:.0%} CI", "bound (worse side)", ""):
        table.add_column(col, justify="left" if col in ("point", "metric") else "right")
    for v in verdicts:
        table.add_row(v.name, f"{v.label} ({v.unit})", f"{v.baseline.mean:.2f} ± {v.baseline.ci95 or 0:.2f}",
                      f"{v.current.mean:.2f} ± {v.current.ci95 or 0:.2f}", f"{v.ratio:.3f}",
                      f"{v.low2:.3f}..{v.high2:.3f}", f"{v.bound:.3f}",
                      "[red bold]REGRESSED[/]" if v.regressed else "[green]ok[/]")
    out = console()
    out.print(table)
    bad = sum(v.regressed for v in verdicts)
    metrics = len({v.metric for v in verdicts})
    what = "points" if metrics == 1 else f"comparisons ({len(verdicts) // metrics} points x {metrics} metrics)"
    out.print(f"[bold {'red' if bad else 'green'}]{bad} of {len(verdicts)} {what} regressed[/]")



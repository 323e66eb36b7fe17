"""The ``ipsec-testbed`` command.

    ipsec-testbed doctor            what this kernel can do, probed for real
    ipsec-testbed profiles          the IPsec profiles experiments can use
    ipsec-testbed overhead          bytes per packet, inner MTU and MSS per profile
    ipsec-testbed report RUN_DIR    report.html and the table of a sweep
    ipsec-testbed regress           a run against a baseline: the CI regression gate
    ipsec-testbed demo TOPOLOGY     a network with IPsec and Mininet's CLI, for classrooms
    ipsec-testbed uml -- CMD...     run CMD as root inside User-Mode Linux
    ipsec-testbed test              unit tests, then the ESP integration tests
    ipsec-testbed clean             remove every testbed namespace, interface, guest
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence

from testbed import backends
from testbed.errors import Parser, add_debug_option, run_main
from testbed.options import (
    add_kernel_options,
    add_speed_probe_option,
    add_uml_options,
    backend_options,
    percent,
    positive_seconds,
)

log = logging.getLogger("ipsec-testbed")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

EPILOG = """\
examples:
  sudo ipsec-testbed doctor                     # can this kernel do ESP? which backend?
  sudo ipsec-testbed uml -- ipsec-testbed doctor   # the same, asked of the UML kernel
  sudo ipsec-testbed uml --mem 1G -- sh -c 'ip netns add x; ip -n x xfrm state'
  sudo ipsec-testbed test -- -k esp             # the test suite, passing -k esp to pytest
  sudo ipsec-testbed clean                      # after a crash or a SIGKILL

Most commands need root: they create network namespaces and talk to the kernel.
"""


def console():
    """A rich console; when the output is not a terminal (a pipe, a CI log), wide enough for our tables."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=160)


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise SystemExit(f"ipsec-testbed {what}: needs root (network namespaces, xfrm); run it with sudo")


def cmd_doctor(args: argparse.Namespace) -> int:
    _need_root("doctor")
    from experiments import doctor

    options = backend_options(args)
    report = doctor.probe(options=options)
    choice = backends.choose(args.kernel, doctor.needs(("aes-gcm-256",)), lambda: report, options)
    if args.json:
        print(json.dumps({**report.to_json(), "choice": choice.name, "choice_reason": choice.reason}, indent=2))
        return 0 if choice.backend else 1
    from rich.table import Table

    title = backends.current().title
    table = Table(title=f"IPsec Testbed doctor: {title} {report.kernel_release}", title_justify="left")
    for col in ("area", "capability", "", "detail"):
        table.add_column(col)
    last = None
    for c in report.checks:
        table.add_row(c.group if c.group != last else "", c.name,
                      "[green]yes[/]" if c.ok else "[red]NO[/]", c.detail, end_section=False)
        last = c.group
    out = console()
    out.print(table)
    colour = "green" if choice.backend else "red"
    out.print(f"[bold {colour}]backend: {choice.name or 'none'}[/] ({choice.reason})")
    return 0 if choice.backend else 1


def cmd_uml(args: argparse.Namespace) -> int:
    _need_root("uml")
    from experiments import doctor

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise SystemExit("ipsec-testbed uml: give a command after --, e.g. `ipsec-testbed uml -- ipsec-testbed doctor`")
    guest = backends.get("uml", backend_options(args))
    if guest.inside():
        raise SystemExit("ipsec-testbed uml: already inside a UML guest; run the command directly")
    try:
        return guest.run(command, timeout_s=args.timeout, interactive=args.interactive,
                         modules=doctor.kernel_modules())
    except (backends.BackendError, ValueError) as e:
        print(f"ipsec-testbed uml: {e}", file=sys.stderr)
        return 125


def cmd_clean(args: argparse.Namespace) -> int:
    _need_root("clean")
    from testbed.clean import clean

    done = clean(dry_run=args.dry_run)
    if done.empty():
        print("nothing to clean: no testbed guest, namespace or interface")
        return 0
    verb = "would be removed" if args.dry_run else "removed"
    for kind, items in done.removed.items():
        print(f"{_plural(kind)} {verb} ({len(items)}): {', '.join(items)}")
    return 0


def _plural(noun: str) -> str:
    if noun.endswith("y"):
        return noun[:-1] + "ies"
    return noun + ("es" if noun.endswith("s") else "s")


def cmd_profiles(args: argparse.Namespace) -> int:
    from ipsec.profiles import GRAMMAR, catalog, parse_profile

    rows = catalog()
    if args.names:
        try:
            rows = tuple((parse_profile(n), "(not in the catalog)") for n in args.names)
        except ValueError as e:
            print(f"ipsec-testbed profiles: {e}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps([{"name": p.name, "protocols": list(p.protocols), "description": p.describe(),
                           "source": src} for p, src in rows], indent=2))
        return 0
    from rich.table import Table

    table = Table(title="IPsec profiles (use with --profiles)", title_justify="left")
    for col in ("profile", "transforms, innermost first", "where the seeds use it"):
        table.add_column(col)
    for p, src in rows:
        table.add_row(p.name, p.describe(), src)
    out = console()
    out.print(table)
    out.print(f"Any name of this form works: {GRAMMAR}.", highlight=False)
    return 0


def cmd_overhead(args: argparse.Namespace) -> int:
    from ipsec.overhead import overhead_table, render_rows
    from ipsec.profiles import CATALOG

    profiles = args.profiles or [n.name for n in CATALOG if n.name != "none"]
    try:
        rows = overhead_table(profiles, modes=args.mode, ip_versions=args.ip, link_mtu=args.mtu)
    except ValueError as e:
        print(f"ipsec-testbed overhead: {e}", file=sys.stderr)
        return 2
    columns, cells = render_rows(rows)
    if args.json:
        print(json.dumps([dict(zip(columns, c, strict=True)) for c in cells], indent=2))
        return 0
    from rich.table import Table

    table = Table(title=f"IPsec bytes per packet on a {args.mtu}-byte MTU link (kernel's xfrm_state_mtu rounding)",
                  title_justify="left")
    for col in columns:
        table.add_column(col, justify="left" if col in ("profile", "mode", "IP") else "right")
    for c in cells:
        table.add_row(*c)
    console().print(table)
    print("max MSS: what TCP_MAXSEG reports with timestamps off; payload/segment: with them on (Linux default).\n"
          "bytes added: over all inner packet sizes (padding steps); IPComp counted as incompressible.")
    return 0


def cmd_regress(args: argparse.Namespace) -> int:
    import datetime
    import subprocess

    from analysis import regress
    from experiments.suites import gate_defaults, suite_args, sweep_command
    from testbed.rundir import ResultsError, load_meta, load_results

    prog = "ipsec-testbed regress"
    defaults = gate_defaults(None if args.run else args.suite)
    if args.max_drop is None:
        args.max_drop = defaults["arms_max_drop" if args.inject_slowdown is not None else "max_drop"]
    if args.metrics is None:
        args.metrics = defaults["metrics"]
    if args.inject_slowdown is not None:
        if args.ab or args.run or args.baseline or args.save_baseline:
            print(f"{prog}: --inject-slowdown compares two arms of one run it makes itself: no --ab, --run, "
                  "--baseline or --save-baseline with it", file=sys.stderr)
            return 2
        return _regress_injected(args, prog)
    if args.ab:
        if args.run or args.baseline or args.save_baseline:
            print(f"{prog}: --ab measures both kernels itself: no --run, --baseline or --save-baseline with it",
                  file=sys.stderr)
            return 2
        return _regress_ab(args, prog)
    if not (args.baseline or args.save_baseline):
        print(f"{prog}: give --baseline FILE to compare with, or --save-baseline FILE to record one "
              "(or --ab A B to compare two kernels)", file=sys.stderr)
        return 2
    try:
        run_dir = args.run
        if run_dir is None:
            sweep_args = suite_args(args.suite)
            run_dir = args.out or os.path.join(REPO, "runs", datetime.datetime.now().strftime(
                "regress-%Y%m%d-%H%M%S") + f"-{args.suite}")
            print(f"regress: suite {args.suite} into {run_dir}", file=sys.stderr, flush=True)
            rc = subprocess.call(sweep_command(sweep_args, run_dir, _kernel_options(args)))
            if rc != 0:
                print(f"{prog}: the suite's sweep failed (exit {rc}); nothing compared", file=sys.stderr)
                return 2
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


def _kernel_options(args: argparse.Namespace) -> list[str]:
    """The sweep's options for the kernel the regress options select."""
    return ["--kernel", args.kernel, "--uml-mem", args.uml_mem,
            *(["--uml-kernel", args.uml_kernel] if args.uml_kernel else []),
            *(["--uml-modules", args.uml_modules] if args.uml_modules else []),
            *(["--no-speed-probe"] if args.no_speed_probe else [])]


def _regress_injected(args: argparse.Namespace, prog: str) -> int:
    """``--inject-slowdown``: the suite with arms a (as is) and b (the ESP path slowed), and the gate's
    verdicts on b against a, next to the slowdown as measured."""
    import datetime
    import subprocess

    from analysis import regress
    from experiments import injection
    from experiments.suites import suite_args, sweep_command
    from testbed.rundir import ResultsError, load_meta, load_results

    def say(m: str) -> None:
        print(f"regress: {m}", file=sys.stderr, flush=True)

    pct = args.inject_slowdown
    try:
        sweep_args = suite_args(args.suite)
        out = args.out or os.path.join(REPO, "runs", datetime.datetime.now().strftime("inject-%Y%m%d-%H%M%S")
                                       + f"-{args.suite}-{pct:g}pct")
        cal = injection.calibrated(
            args.suite, sweep_args, injection.kernel_identity(args.kernel, args.uml_kernel),
            lambda run_dir, *extra: subprocess.call(sweep_command(sweep_args, run_dir, _kernel_options(args), *extra)),
            out, say, args.recalibrate)
        n = cal.instructions_for(pct)
        run_dir = os.path.join(out, "ab")
        say(f"suite {args.suite} with arms a (nothing added) and b (a {pct:g} % slowdown: {n} extra instructions "
            f"per ESP packet), interleaved, into {run_dir}")
        rc = subprocess.call(sweep_command(sweep_args, run_dir, _kernel_options(args), "--arms", f"0,{n}"))
        if rc != 0:
            print(f"{prog}: the suite's sweep failed (exit {rc}); nothing compared", file=sys.stderr)
            return 2
        records, meta = load_results(run_dir), load_meta(run_dir)
        verdicts = regress.compare_arms(records, meta, "a", "b", args.max_drop / 100, args.confidence / 100,
                                        args.metrics)
        e = injection.effect(records, "b")
    except (regress.RegressError, injection.InjectionError, ResultsError, ValueError, RuntimeError, OSError) as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 2
    measured = (f"injected slowdown: {pct:g} % requested ({n} extra instructions per ESP packet), "
                f"{e.pct:+.1f} % measured (CPU per packet at {cal.point}, arm b / arm a = {e.ratio:.3f} pair by pair, "
                f"95 % CI {e.low:.3f}..{e.high:.3f}, {e.n_base} and {e.n_arm} repetitions)")
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


def _write_json(path: str, verdicts, args: argparse.Namespace, extra: dict | None = None) -> None:
    """The verdicts as JSON (one object per point and metric), for scripts."""
    with open(path, "w") as f:
        json.dump({"max_drop": args.max_drop / 100, "confidence": args.confidence / 100,
                   "regressed": any(v.regressed for v in verdicts),
                   "verdicts": [{"point": v.point, "metric": v.metric, "ratio": v.ratio, "bound": v.bound,
                                 "low": v.low2, "high": v.high2, "regressed": v.regressed,
                                 "baseline_n": v.baseline.n, "current_n": v.current.n} for v in verdicts],
                   **(extra or {})}, f, indent=1)
        f.write("\n")


#: --metrics names -> record fields (analysis.regress.METRICS)
REGRESS_METRICS = {"goodput": "goodput_mbps", "cpu-per-gb": "cpu_s_per_gb", "cpu-per-packet": "cpu_us_per_packet"}


def regress_metrics(text: str) -> tuple[str, ...]:
    """``--metrics``: comma-separated names of :data:`REGRESS_METRICS`."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in REGRESS_METRICS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown metric {bad[0] if bad else '(none)'!r}; metrics: "
                                         f"{', '.join(REGRESS_METRICS)}")
    return tuple(dict.fromkeys(REGRESS_METRICS[n] for n in names))


def _regress_ab(args: argparse.Namespace, prog: str) -> int:
    import datetime

    from analysis import regress
    from experiments.ab import run_ab
    from experiments.suites import suite_args
    from testbed.rundir import ResultsError, load_meta, load_results

    try:
        sweep_args = suite_args(args.suite)
        reps = args.repetitions or int(sweep_args[sweep_args.index("--repetitions") + 1])
        out = args.out or os.path.join(REPO, "runs", datetime.datetime.now().strftime("ab-%Y%m%d-%H%M%S")
                                       + f"-{args.suite}")
        dir_a, dir_b = run_ab(sweep_args, tuple(args.ab), reps, out,
                              say=lambda m: print(f"regress: {m}", file=sys.stderr, flush=True),
                              rounds=args.rounds or min(reps, 4))
        baseline = regress.make_baseline(load_results(dir_a), load_meta(dir_a), source=dir_a)
        verdicts = regress.compare(baseline, load_results(dir_b), args.max_drop / 100, args.confidence / 100,
                                   args.metrics)
    except (regress.RegressError, ResultsError, ValueError, RuntimeError, OSError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    warnings = [f"kernel A is {args.ab[0]}, kernel B is {args.ab[1]}; run directories {dir_a} and {dir_b}"]
    return _report_verdicts(args, verdicts, warnings, ("A", "B"))


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


def cmd_demo(args: argparse.Namespace) -> int:
    _need_root("demo")
    from ipsec.profiles import parse_profile
    from topologies import build_spec

    parse_profile(args.profile)  # bad input fails here, before a boot
    build_spec(args.topology, clients=args.clients)
    if not sys.stdin.isatty():
        raise SystemExit("ipsec-testbed demo: needs a terminal (it opens Mininet's command line)")
    argv = ["demo", args.topology, "--profile", args.profile, "--mode", args.mode, "--rate", f"{args.rate:g}",
            "--clients", str(args.clients), *(["--pcap", os.path.abspath(args.pcap)] if args.pcap else [])]
    from experiments import doctor, runner

    rc = runner.follow("ipsec-testbed demo", __file__, argv, args, doctor.needs((args.profile,)), interactive=True)
    if rc is not None:
        return rc
    from cli.demo import run_demo

    return run_demo(args.topology, args.profile, args.mode, args.rate, args.clients, args.pcap)


def cmd_test(args: argparse.Namespace) -> int:
    from cli.selftest import run_suite

    return run_suite(args)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="ipsec-testbed", description="IPsec Testbed: reproduce IPsec performance experiments "
        "in network namespaces, on the host kernel or in User-Mode Linux.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv: debug)")
    add_debug_option(parser)
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    p = sub.add_parser("doctor", help="probe what this kernel can do and which backend will run",
                       description="Probe the running kernel for real, in a throwaway namespace: add and "
                       "remove an SA for every algorithm, put tbf/htb/netem on a veth, look for iperf3, "
                       "mnexec and User-Mode Linux; then say which kernel the testbed will use and why. "
                       "Exit status 1 when no kernel can run the testbed.")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--kernel", choices=(backends.AUTO, *backends.names()), default=backends.AUTO,
                   help="the choice to explain (default: %(default)s)")
    add_uml_options(p.add_argument_group("User-Mode Linux"))
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("profiles", help="list the IPsec profiles (transform sets) experiments can use",
                       description="List the cataloged IPsec profiles, or check and explain the names given.")
    p.add_argument("names", nargs="*", metavar="PROFILE", help="profile names to check, e.g. 3des-cbc-sha1+ah-md5")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_profiles)

    p = sub.add_parser("overhead", help="bytes IPsec adds per packet, inner MTU and largest TCP MSS",
                       description="The overhead model: for each profile, mode and IP version, the inner MTU "
                       "the kernel leaves on a link, the largest TCP MSS, and the bytes added per packet. "
                       "No root needed.",
                       epilog="example: ipsec-testbed overhead aes-gcm-256 aes-cbc-128-sha1 --mtu 1500")
    p.add_argument("profiles", nargs="*", metavar="PROFILE", help="profiles (default: the catalog)")
    p.add_argument("--mtu", type=int, default=1500, help="link MTU (default: %(default)s)")
    p.add_argument("--mode", nargs="+", choices=("transport", "tunnel"), default=["transport", "tunnel"])
    p.add_argument("--ip", nargs="+", type=int, choices=(4, 6), default=[4, 6])
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_overhead)

    p = sub.add_parser("report", help="write report.html for run directories and print their table",
                       description="Read run directories (results.jsonl, meta.json) and write RUN_DIR/report.html; "
                       "several run directories are compared side by side. Reads files only; no root needed.",
                       add_help=False)  # main() hands `report ...` to analysis.cli before parsing

    p = sub.add_parser("uml", help="run a command as root inside User-Mode Linux",
                       description="Boot a User-Mode Linux kernel with the host filesystem as its root, load "
                       "the IPsec and tc modules, run COMMAND as root in the current directory, stream its "
                       "output live and exit with its status (124: time limit, 125: the guest could not run).",
                       epilog="example: sudo ipsec-testbed uml --timeout 600 -- "
                              ".venv/bin/python -m pytest tests/integration",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_uml_options(p)
    p.add_argument("--timeout", type=positive_seconds, metavar="SECONDS", help="kill the guest after this long")
    p.add_argument("-i", "--interactive", action="store_true",
                   help="give the command this terminal (a shell: `ipsec-testbed uml -i -- bash`)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND...", help="what to run in the guest")
    p.set_defaults(func=cmd_uml)

    p = sub.add_parser("clean", help="remove every namespace, interface and guest the testbed left",
                       description="Remove what the testbed created and nothing else: UML guests it booted, "
                       "network namespaces named itb-*, root-namespace interfaces named itb<run>*, and the "
                       "processes inside those namespaces. Safe to run any time; a no-op when nothing is left. "
                       "It also ends runs in progress.")
    p.add_argument("--dry-run", action="store_true", help="only list what would be removed")
    p.set_defaults(func=cmd_clean)

    from experiments.suites import SUITES

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
        "comparing across different ones is done, with a loud warning.",
        epilog="suites:\n" + "\n".join(f"  {n:8s} {d}" for n, (d, _) in SUITES.items()) + "\n\nexamples:\n"
        "  sudo ipsec-testbed regress --suite smoke --save-baseline baseline.json   # on the reference kernel\n"
        "  sudo ipsec-testbed regress --suite smoke --baseline baseline.json --junit regress.xml\n"
        "  ipsec-testbed regress --run runs/x --baseline baseline.json --max-drop 3   # no new measurement\n"
        "  sudo ipsec-testbed regress --ab uml ~/linux-next/linux --suite ciphers   # two kernels, interleaved\n"
        "  (a GitHub Actions workflow to copy: examples/github-actions/ipsec-regress.yml)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--suite", choices=tuple(SUITES), default="smoke", help="suite to run (default: %(default)s)")
    what.add_argument("--run", metavar="RUN_DIR", help="compare this run directory instead of running a suite")
    p.add_argument("--ab", nargs=2, metavar=("KERNEL_A", "KERNEL_B"),
                   help="A/B: run the suite on two kernels (host; uml: the UML kernel chosen by default; debian: "
                        "Debian's linux.uml; recipe: the project's, from scripts/build-uml-kernel.sh; or the path "
                        "of a UML kernel built with `make ARCH=um`), repetitions interleaved ABBA, and compare B "
                        "with A")
    p.add_argument("--repetitions", type=int, metavar="N", help="with --ab: repetitions per kernel "
                   "(default: the suite's)")
    p.add_argument("--rounds", type=int, metavar="N", help="with --ab: boots of each kernel, ABBA, each "
                   "measuring its share of the repetitions (default: one per repetition, at most 4)")
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
    p.add_argument("--json", metavar="FILE", help="with --inject-slowdown: write the verdicts and the measured "
                   "slowdown as JSON")
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
    add_kernel_options(p)
    add_speed_probe_option(p)
    p.set_defaults(func=cmd_regress)

    from topologies import TOPOLOGIES

    p = sub.add_parser(
        "demo", help="a network with IPsec up and Mininet's CLI, with a guide (for classrooms)",
        description="Build a network, shape its bottleneck, switch IPsec on and open Mininet's command line\n"
        "with a short guide and the testbed's own commands: capture (only ESP on the untrusted link),\n"
        "decrypt (the same packets, decrypted with the run's keys), sa (SAs and counters), speed\n"
        "(iperf3), ipsec on|off. Runs in User-Mode Linux when the host kernel has no ESP. Exit\n"
        "tears everything down.",
        epilog="examples:\n  sudo ipsec-testbed demo vpn_gateway\n"
        "  sudo ipsec-testbed demo host_to_host --profile 3des-cbc-sha1 --mode transport --rate 10\n"
        "  sudo ipsec-testbed demo road_warrior --clients 3 --pcap ~/ipsec-lab   # captures + Wireshark keys",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("topology", choices=tuple(TOPOLOGIES), help="the network")
    p.add_argument("--profile", default="aes-gcm-256", help="IPsec profile (default: %(default)s)")
    p.add_argument("--mode", choices=("tunnel", "transport"), default="tunnel", help="(default: %(default)s)")
    p.add_argument("--rate", type=float, default=10.0, metavar="MBIT", help="the shaped link (default: %(default)g)")
    p.add_argument("--clients", type=int, default=2, metavar="N", help="road warriors / clients (default: %(default)s)")
    p.add_argument("--pcap", metavar="DIR", help="also write each capture there, with a Wireshark configuration "
                   "holding the keys (files 0600, directory 0700)")
    add_kernel_options(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("test", help="run the test suite: unit tests, then integration tests with ESP",
                       description="Run tests/unit on the host, then tests/integration on a kernel with ESP: "
                       "the host kernel when it passes the probe, otherwise inside User-Mode Linux in one boot. "
                       "Fails, never skips, when no ESP-capable kernel can be had.")
    add_kernel_options(p)
    p.add_argument("--unit-only", action="store_true", help="run only tests/unit (needs no root)")
    p.add_argument("pytest_args", nargs="*", metavar="PYTEST_ARG", help="passed to pytest (e.g. -k esp -x)")
    p.set_defaults(func=cmd_test)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Behave like a Unix tool when the reader goes away (`ipsec-testbed profiles | head`).
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["report"]:  # its own parser, --help included
        from analysis.cli import main as report_main
        return report_main(argv)
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)],
                        format="%(levelname)s %(name)s: %(message)s")
    return run_main("ipsec-testbed", lambda: args.func(args), args.debug)


if __name__ == "__main__":
    sys.exit(main())

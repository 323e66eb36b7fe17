"""The ``ipsec-testbed`` command: the one front door to every job.

    ipsec-testbed sweep             throughput versus packet size, plain and through IPsec (the main job)
    ipsec-testbed reproduce SEED    a seed's published experiment, measured and judged
    ipsec-testbed regress           a run against a baseline: the CI regression gate
    ipsec-testbed bench NAME        a benchmark: the project's speed and accuracy figures
    ipsec-testbed demo TOPOLOGY     a network with IPsec and Mininet's CLI, for classrooms
    ipsec-testbed report RUN_DIR    report.html and the table of a run
    ipsec-testbed doctor            what this kernel can do, probed for real
    ipsec-testbed profiles          the IPsec profiles experiments can use
    ipsec-testbed overhead          bytes per packet, inner MTU and MSS per profile
    ipsec-testbed uml -- CMD...     run CMD as root inside User-Mode Linux
    ipsec-testbed test              unit tests, then the ESP integration tests
    ipsec-testbed clean             remove every testbed namespace, interface, guest

``sweep``, ``reproduce``, ``bench`` and ``report`` have parsers of their own (their modules'
``main(argv)``); :func:`main` hands them the words after their name.  Each makes a
:class:`~experiments.job.Job` and runs it through :mod:`experiments.runner`: in this process, or, where
the work needs a kernel with ESP the host lacks, in a User-Mode Linux guest that is handed the job.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence

from cli import history as history_command
from cli import kernel as kernel_command
from cli import regress as regress_command
from cli.options import (
    Parser,
    add_concurrent_option,
    add_debug_option,
    add_kernel_options,
    add_uml_options,
    backend_options,
    kernel_choice,
    positive_seconds,
)
from cli.output import console
from ipsec import wireguard
from ipsec.ike import KEYING_HELP, KEYINGS, child_proposals, is_ike
from ipsec.ike import available as ike_available
from ipsec.overhead import overhead_table, render_rows
from ipsec.profiles import CATALOG, GRAMMAR, catalog, parse_profile
from testbed import backends, historyplace
from testbed.errors import run_main
from topologies import TOPOLOGIES, build_spec

log = logging.getLogger("ipsec-testbed")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

EPILOG = """\
examples:
  sudo ipsec-testbed sweep                      # the main job on its defaults, ~5 min
  sudo ipsec-testbed sweep --help               # what it measures and every option
  sudo ipsec-testbed reproduce 003              # seed 003's experiment and its claims judged
  sudo ipsec-testbed doctor                     # can this kernel do ESP? which backend?
  sudo ipsec-testbed uml -- ipsec-testbed doctor   # the same, asked of the UML kernel
  sudo ipsec-testbed uml --mem 1G -- sh -c 'ip netns add x; ip -n x xfrm state'
  sudo ipsec-testbed test -- -k esp             # the test suite, passing -k esp to pytest
  sudo ipsec-testbed clean                      # after a crash or a SIGKILL

Most commands need root: they create network namespaces and talk to the kernel.
"""


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise SystemExit(f"ipsec-testbed {what}: needs root (network namespaces, xfrm); run it with sudo")


def cmd_doctor(args: argparse.Namespace) -> int:
    _need_root("doctor")
    from experiments import doctor

    options = backend_options(args)
    report = doctor.probe(options=options)
    choice = backends.choose(args.kernel, doctor.needs(("aes-gcm-256",)), lambda: report, options)
    history = historyplace.location(None)
    if args.json:
        print(json.dumps({**report.to_json(), "choice": choice.name, "choice_reason": choice.reason,
                          "history": history}, indent=2))
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
    out.print(f"history: {history_line(history)}")
    return 0 if choice.backend else 1


def history_line(where: str | None) -> str:
    """Where runs add their figures, and how many are there (doctor's last line)."""
    if where is None:
        return f"off (${historyplace.ENV} is {historyplace.OFF}): runs add their figures to none"
    from analysis import store

    if not historyplace.is_url(where) and not os.path.exists(where):
        return f"{where} (none yet: every sweep, regress run and reproduction adds its figures to it)"
    try:
        with store.open_store(where, create=False) as s:
            rows = s.rows()
    except store.StoreError as e:
        return f"{historyplace.describe(where)}: [red]{e}[/]"
    return (f"{historyplace.describe(where)}: {len(rows)} figures of {len({r.run_id for r in rows})} runs on "
            f"{len({r.kernel for r in rows})} kernels (`ipsec-testbed history` shows them)")


def cmd_uml(args: argparse.Namespace) -> int:
    _need_root("uml")
    from experiments import doctor

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise SystemExit("ipsec-testbed uml: give a command after --, e.g. `ipsec-testbed uml -- ipsec-testbed doctor`")
    guest = backends.get(args.kernel, backend_options(args))
    if guest.inside():
        raise SystemExit(f"ipsec-testbed uml: already inside a {guest.title} guest; run the command directly")
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

    wg = any(parse_profile(p).wireguard for p in profiles)
    rules = "kernel's xfrm_state_mtu rounding" + ("; WireGuard: wg-quick's MTU, padding to 16" if wg else "")
    table = Table(title=f"{'Tunnel' if wg else 'IPsec'} bytes per packet on a {args.mtu}-byte MTU link ({rules})",
                  title_justify="left")
    for col in columns:
        table.add_column(col, justify="left" if col in ("profile", "mode", "IP") else "right")
    for c in cells:
        table.add_row(*c)
    console().print(table)
    print("max MSS: what TCP_MAXSEG reports with timestamps off; payload/segment: with them on (Linux default).\n"
          "bytes added: over all inner packet sizes (padding steps); IPComp counted as incompressible.")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    _need_root("demo")
    # bad input fails here, before a boot
    if parse_profile(args.profile).wireguard and (why := wireguard.refusal(args.mode, args.keying)):
        raise SystemExit(f"ipsec-testbed demo: {why}")
    build_spec(args.topology, clients=args.clients)
    if args.web and not 0 <= args.port <= 65535:
        raise SystemExit(f"ipsec-testbed demo: --port {args.port} is not a TCP port (0: any free one)")
    if args.web and args.pcap:
        raise SystemExit("ipsec-testbed demo: --pcap is for the terminal; the page downloads each capture "
                         "with its keys (its 'download pcap + keys' button)")
    if not args.web and not sys.stdin.isatty():
        raise SystemExit("ipsec-testbed demo: needs a terminal (it opens Mininet's command line; "
                         "--web serves a page instead)")
    if is_ike(args.keying):
        child_proposals(parse_profile(args.profile))  # Unsupported: refused here, before a boot
        if ike_available():
            raise SystemExit(f"ipsec-testbed demo: {ike_available()}")
    from experiments import runner
    from experiments.job import DemoWork, Job

    job = Job(DemoWork(args.topology, profile=args.profile, mode=args.mode, keying=args.keying, rate_mbit=args.rate,
                       clients=args.clients, pcap=os.path.abspath(args.pcap) if args.pcap else None, web=args.web),
              kernel=kernel_choice(args).with_(speed_probe=False),  # nothing here accounts CPU per window
              command=("ipsec-testbed", "demo", *sys.argv[2:]), verbose=args.verbose,
              allow_concurrent=args.allow_concurrent)
    if args.web:
        from cli.webdemo import run_web

        return run_web(job, args.port)
    from cli.job import demo_work

    return runner.run(job, "ipsec-testbed demo", demo_work, interactive=True)


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
    # main() hands these to their own parsers before this one parses: here they are listed
    for name, text in (("sweep", "the main job: throughput versus packet size, plain and through IPsec, "
                                 "over shaped links (see `ipsec-testbed sweep --help`)"),
                       ("reproduce", "measure a seed's experiment and judge its claims (`reproduce SEED`; "
                                     "`ipsec-testbed reproduce --help` lists the seeds)"),
                       ("bench", "run a benchmark: the project's speed and accuracy figures "
                                 "(`ipsec-testbed bench --help` lists them)")):
        sub.add_parser(name, help=text, add_help=False)
    regress_command.add_parser(sub)
    kernel_command.add_parser(sub)
    history_command.add_parser(sub)

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
                       add_help=False)  # main() hands `report ...` to cli.report before parsing

    p = sub.add_parser("uml", help="run a command as root inside User-Mode Linux (or the counted guest)",
                       description="Boot a User-Mode Linux kernel (--kernel qemu: the counted backend's x86-64 "
                       "kernel in QEMU) with the host filesystem as its root, load "
                       "the IPsec and tc modules, run COMMAND as root in the current directory, stream its "
                       "output live and exit with its status (124: time limit, 125: the guest could not run).",
                       epilog="example: sudo ipsec-testbed uml --timeout 600 -- "
                              ".venv/bin/python -m pytest tests/integration",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernel", choices=[n for n in backends.names() if not backends.get(n).runs_here], default="uml",
                   help="the guest: uml (User-Mode Linux), or qemu (the counted backend: an x86-64 kernel in QEMU's "
                        "emulator, whose clock counts instructions) (default: %(default)s)")
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

    p = sub.add_parser(
        "demo", help="a network with IPsec up and Mininet's CLI, with a guide (for classrooms)",
        description="Build a network, shape its bottleneck, switch IPsec on and open Mininet's command line\n"
        "with a short guide and the testbed's own commands: capture (only ESP on the untrusted link),\n"
        "decrypt (the same packets, decrypted with the run's keys), sa (SAs and counters), speed\n"
        "(iperf3), ipsec on|off. Runs in User-Mode Linux when the host kernel has no ESP. Exit\n"
        "tears everything down. With --web, the same demo is one page in a browser instead: the network\n"
        "drawn, goodput charted live, IPsec/profile/rate/size switched, packets and SAs shown.",
        epilog="examples:\n  sudo ipsec-testbed demo vpn_gateway\n"
        "  sudo ipsec-testbed demo host_to_host --profile 3des-cbc-sha1 --mode transport --rate 10\n"
        "  sudo ipsec-testbed demo road_warrior --clients 3 --pcap ~/ipsec-lab   # captures + Wireshark keys\n"
        "  sudo ipsec-testbed demo vpn_gateway --web        # prints http://127.0.0.1:PORT/?token=...",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("topology", choices=tuple(TOPOLOGIES), help="the network")
    p.add_argument("--profile", default="aes-gcm-256", help="IPsec profile (default: %(default)s)")
    p.add_argument("--mode", choices=("tunnel", "transport"), default="tunnel", help="(default: %(default)s)")
    p.add_argument("--keying", choices=KEYINGS, default="static",
                   help=f"how the SAs are made: {KEYING_HELP} (default: %(default)s)")
    p.add_argument("--rate", type=float, default=10.0, metavar="MBIT", help="the shaped link (default: %(default)g)")
    p.add_argument("--clients", type=int, default=2, metavar="N", help="road warriors / clients (default: %(default)s)")
    p.add_argument("--pcap", metavar="DIR", help="also write each capture there, with a Wireshark configuration "
                   "holding the keys (files 0600, directory 0700)")
    p.add_argument("--web", action="store_true",
                   help="serve the demo as a page on 127.0.0.1 (the address printed, with its token) instead "
                   "of a command line; Ctrl-C ends it")
    p.add_argument("--port", type=int, default=0, help="the page's port with --web (default: any free port)")
    add_concurrent_option(p)
    add_kernel_options(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("test", help="run the test suite: unit tests, then integration tests with ESP",
                       description="Run tests/unit and (as root) tests/host on the host, and tests/integration on a "
                       "kernel with ESP: the host kernel when it passes the probe, otherwise inside User-Mode Linux, "
                       "in two guests on a machine with two CPUs, beside the unit and host tests once the host "
                       "tests that need the machine alone are done (docs/testing.md). Fails, never skips, when no "
                       "ESP-capable kernel can be had.")
    add_kernel_options(p)
    p.add_argument("--unit-only", action="store_true", help="run only tests/unit (needs no root)")
    p.add_argument("pytest_args", nargs="*", metavar="PYTEST_ARG", help="passed to pytest (e.g. -k esp -x)")
    p.set_defaults(func=cmd_test)
    return parser


def _sweep(argv: list[str]) -> int:
    from cli.sweep import main as sweep_main

    return sweep_main(argv[1:])


def _reproduce(argv: list[str]) -> int:
    from cli.reproduce import main as reproduce_main

    return reproduce_main(argv[1:])


def _bench(argv: list[str]) -> int:
    from cli.bench import main as bench_main

    return bench_main(argv[1:])


def _report(argv: list[str]) -> int:
    from cli.report import main as report_main

    return report_main(argv)  # from the word "report" on


#: The options of ``ipsec-testbed`` itself, which a job with a parser of its own takes too.
GLOBAL_FLAGS = ("-v", "-vv", "--verbose", "--debug")
#: Commands with parsers of their own, handed the command line (their name first) before parsing.
OWN_PARSERS = {"sweep": _sweep, "reproduce": _reproduce, "bench": _bench, "report": _report}


def main(argv: Sequence[str] | None = None) -> int:
    # Behave like a Unix tool when the reader goes away (`ipsec-testbed profiles | head`).
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    argv = list(sys.argv[1:] if argv is None else argv)
    # jobs with parsers of their own, --help included; `ipsec-testbed -v sweep` is `ipsec-testbed sweep -v`
    leading = next((i for i, word in enumerate(argv) if word not in GLOBAL_FLAGS), len(argv))
    if leading < len(argv) and argv[leading] in OWN_PARSERS:
        return OWN_PARSERS[argv[leading]]([*argv[leading:], *argv[:leading]])
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)],
                        format="%(levelname)s %(name)s: %(message)s")
    return run_main("ipsec-testbed", lambda: args.func(args), args.debug)


if __name__ == "__main__":
    sys.exit(main())

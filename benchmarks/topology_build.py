"""Build, IPsec-apply and teardown times of every topology, on every kernel backend.

    sudo ipsec-testbed bench topology_build              # the host kernel, then User-Mode Linux
    sudo ipsec-testbed bench topology_build --where uml --clients 50

Each row is one network built from scratch with Mininet (namespaces, veths,
dual-stack addresses, routes), then ESP tunnel AES-GCM-256 applied to every IPsec
pair for IPv4 and IPv6, then torn down.  On a kernel without ESP the IPsec column
says so instead of a figure.  Times are wall-clock seconds on the host clock of the
kernel that ran them (inside UML: the guest's, which follows the host's).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from cli.options import add_uml_options, backend_options
from experiments import doctor
from testbed import backends

MULTI_CLIENT = ("road_warrior", "multi_host_to_host")


def run_here(clients: int, repeat: int, profile: str) -> None:
    from topologies import TOPOLOGIES, build_spec
    from topologies.network import Network

    probe = doctor.probe(tools=False)
    esp = probe.ok("esp") and probe.ok("esp6")
    where = f"{backends.current().label()} ({os.uname().release})"
    print(f"\n{where}; {repeat} build(s) per topology; IPsec: {profile} tunnel, IPv4+IPv6"
          + ("" if esp else " (not measured: this kernel has no ESP)"))
    print(f"{'topology':32s} {'nodes':>5s} {'build s':>9s} {'IPsec on s':>11s} {'IPsec off s':>12s} "
          f"{'teardown s':>11s}")
    cases = [(name, 1 if name not in MULTI_CLIENT else clients) for name in TOPOLOGIES]
    cases.insert(2, ("road_warrior", 1))
    for name, n in cases:
        build, on, off, down = [], [], [], []
        for _ in range(repeat):
            spec = build_spec(name, clients=n)
            net = Network(spec)
            t0 = time.monotonic()
            net.__enter__()
            try:
                build.append(time.monotonic() - t0)
                if esp:
                    t1 = time.monotonic()
                    net.apply_ipsec(profile, "tunnel")
                    on.append(time.monotonic() - t1)
                    t2 = time.monotonic()
                    net.remove_ipsec()
                    off.append(time.monotonic() - t2)
            finally:
                t3 = time.monotonic()
                net.close()
                down.append(time.monotonic() - t3)
        label = f"{name}" + (f" ({n} clients)" if name in MULTI_CLIENT else "")
        print(f"{label:32s} {len(spec.nodes):5d} {_median(build):>9s} {_median(on):>11s} {_median(off):>12s} "
              f"{_median(down):>11s}", flush=True)
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    print("namespaces left behind:", [n for n in left if n.startswith("itb-")] or "none")


def _median(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f}" if xs else "n/a"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--where", choices=("all", *backends.names()), default="all",
                    help="which kernel backend(s) to measure on (default: %(default)s)")
    ap.add_argument("--clients", type=int, default=50, help="clients of the multi-client topologies (default: 50)")
    ap.add_argument("--repeat", type=int, default=1, help="builds per topology (default: 1)")
    ap.add_argument("--profile", default="aes-gcm-256", help="IPsec profile applied (default: %(default)s)")
    add_uml_options(ap.add_argument_group("guest"))
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("topology_build: needs root; run with sudo")
    rc = 0
    for name in backends.names() if args.where == "all" else (args.where,):
        backend = backends.get(name, backend_options(args))
        if backend.runs_here or backend.inside():
            run_here(args.clients, args.repeat, args.profile)
            continue
        why = backend.unavailable()
        if why:
            print(f"\n{backend.title}: not measured ({why})")
            continue
        t0 = time.monotonic()
        rc = rc or backend.run([sys.executable, os.path.abspath(__file__), "--where", name, "--clients",
                                str(args.clients), "--repeat", str(args.repeat), "--profile", args.profile],
                               timeout_s=3000, modules=doctor.kernel_modules())
        print(f"({backend.title} run, boot included: {time.monotonic() - t0:.0f} s)")
    return rc


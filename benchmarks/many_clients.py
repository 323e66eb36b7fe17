"""Many clients through IPsec: does every point measure, when are all clients connected, how long it takes.

    sudo ipsec-testbed bench many_clients                          # 1, 10, 50, 100, 200 clients: about 40 min in UML
    sudo ipsec-testbed bench many_clients --clients 1,10,50 --out runs/many

For each N, one ``ipsec-testbed sweep --topology road_warrior --clients N --profiles aes-gcm-256
--rates 10,100 --sizes 1460 --repetitions 2`` as a user runs it (a process of its own, its output
in ``--out``/START/clientsN.log, START the run's start), the default warm-up.  Printed per N and
per point (plain and AES-GCM-256 at 10 and 100 Mbit/s): whether every repetition measured, what bounded them, the
time from the clients' go to every one of them connected (the record's ``clients_sending_s``, the
most of the repetitions; none with one client), and the sweep's wall time with its boot and the
network's build.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from benchmarks import _common
from cli.options import csv
from experiments import runner
from experiments.engine.plan import default_sweep
from testbed.rundir import load_existing
from topologies.spec import MAX_CLIENTS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RATES = (10.0, 100.0)


def sweep(n: int, out: str) -> tuple[int, float, str]:
    """The sweep for ``n`` clients into ``out/clientsN``: its exit status, wall time and run directory."""
    run_dir = os.path.join(out, f"clients{n}")
    spec = default_sweep(topology="road_warrior", clients=n, profiles=("aes-gcm-256",), rates_mbit=RATES,
                         sizes=(1460,), repetitions=2, max_repetitions=2)
    t0 = time.monotonic()
    rc = runner.sweep_apart(spec, run_dir, log=run_dir + ".log", command=_common.sweep_command(spec))
    return rc, time.monotonic() - t0, run_dir


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=csv(int), default=(1, 10, 50, 100, 200), metavar="N,...",
                   help=f"road warriors per sweep, 1..{MAX_CLIENTS} (default: 1,10,50,100,200)")
    p.add_argument("--out", default=os.path.join(REPO, "runs", "many-clients"),
                   help="where the sweeps go, in a directory per run named by its start (default: %(default)s)")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("many_clients: needs root (namespaces, xfrm, tc); run it with sudo", file=sys.stderr)
        return 1
    bad = [n for n in args.clients if not 1 <= n <= MAX_CLIENTS]
    if bad:
        p.error(f"--clients must be in 1..{MAX_CLIENTS}, not {bad}")
    # a directory of this run's own: a sweep resumes a run directory it finds, and figures of an
    # earlier run (of other code) must not come back as this one's
    out = os.path.join(args.out, time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out)
    print(f"{'clients':>7s} {'profile':>12s} {'Mbit/s':>6s} {'measured':>8s} {'bound':>14s} {'connect s':>9s} "
          f"{'goodput':>8s}  sweep")
    everything = True
    for n in args.clients:
        print(f"{n} clients ...", file=sys.stderr, flush=True)
        rc, seconds, run_dir = sweep(n, out)
        records = load_existing(run_dir)
        first = True
        for profile in ("none", "aes-gcm-256"):
            for rate in RATES:
                reps = [r for r in records if r.profile == profile and float(r.rate_mbit) == rate]
                ok = [r for r in reps if not r.failed]
                bounds = ",".join(sorted({str(r.bound) for r in ok})) or "–"
                sending = [r.clients_sending_s for r in ok if r.clients_sending_s is not None]
                goodput = sum(r.goodput_mbps for r in ok) / len(ok) if ok else None
                everything &= len(ok) == 2
                tail = f"exit {rc}, {seconds:.0f} s" if first else ""
                first = False
                print(f"{n:>7d} {profile:>12s} {rate:>6g} {len(ok):>4d} of 2 {bounds:>14s} "
                      f"{(f'{max(sending):.2f}' if sending else '–'):>9s} "
                      f"{(f'{goodput:.2f}' if goodput is not None else '–'):>8s}  {tail}", flush=True)
    print("measured: repetitions measured of 2; connect: the most seconds any repetition took from the clients' go "
          "to every client's data connection up; goodput: Mbit/s, all clients together, mean of the repetitions; "
          "sweep: its exit "
          f"status and wall time (boot and network build included); logs in {out}")
    return 0 if everything else 1


"""Many clients through IPsec: does every point measure, when are all clients connected, how long it takes.

    sudo ipsec-testbed bench many_clients                          # 1, 10, 50, 100, 200 clients: about 40 min in UML
    sudo ipsec-testbed bench many_clients --clients 1,10,50 --out runs/many

For each N, the sweep ``ipsec-testbed sweep --topology road_warrior --clients N --profiles aes-gcm-256
--rates 10,100 --sizes 1460 --repetitions 2`` runs (a process of its own, its output
in ``--out``/START/clientsN.log, START the run's start), the default warm-up.  Printed per N and
per point (plain and AES-GCM-256 at 10 and 100 Mbit/s): whether every repetition measured, what bounded them, the
time from the clients' go to every one of them connected (the record's ``clients_sending_s``, the
most of the repetitions; none with one client), and the sweep's wall time with its boot and the
network's build.  Exit status 1 when a repetition did not measure.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Sequence

from experiments import runner
from experiments.benchmark import Benchmark, option
from experiments.engine.plan import SweepSpec, default_sweep
from testbed.record import Record
from testbed.rundir import load_existing
from topologies.spec import MAX_CLIENTS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RATES = (10.0, 100.0)
PROFILES = ("none", "aes-gcm-256")
REPETITIONS = 2
#: What each sweep's job says it was started by (meta.json, the history).
COMMAND = ("ipsec-testbed", "bench", "many_clients")


@dataclasses.dataclass(frozen=True)
class Options:
    """How many clients, and where the sweeps go; checked on construction."""

    clients: tuple[int, ...] = option((1, 10, 50, 100, 200), f"road warriors per sweep, 1..{MAX_CLIENTS}",
                                      metavar="N,...")
    out: str = option(os.path.join(REPO, "runs", "many-clients"), "where the sweeps go, in a directory per run named "
                      "by its start (default: runs/many-clients in the checkout)", show_default=False)

    def __post_init__(self) -> None:
        bad = [n for n in self.clients if not 1 <= n <= MAX_CLIENTS]
        if bad or not self.clients:
            raise ValueError(f"--clients must be in 1..{MAX_CLIENTS}, not {bad or list(self.clients)}")


def sweep(clients: int) -> SweepSpec:
    """The sweep for ``clients`` road warriors: plain and AES-GCM-256 at 10 and 100 Mbit/s, MSS 1460, twice."""
    return default_sweep(topology="road_warrior", clients=clients, profiles=("aes-gcm-256",), rates_mbit=RATES,
                         sizes=(1460,), repetitions=REPETITIONS, max_repetitions=REPETITIONS)


@dataclasses.dataclass(frozen=True)
class Row:
    """One point of one N: its repetitions measured, what bounded them, the longest connect, the mean goodput."""

    profile: str
    rate_mbit: float
    measured: int
    bounds: str  # the classes seen, comma-separated
    connect_s: float | None  # the most seconds to every client connected (None: not timed, one client)
    goodput_mbps: float | None  # all clients together, mean of the repetitions


@dataclasses.dataclass(frozen=True)
class Sweep:
    """The sweep of one N: its exit status, wall time, run directory and points."""

    clients: int
    status: int
    seconds: float
    run_dir: str
    rows: tuple[Row, ...]


@dataclasses.dataclass(frozen=True)
class Result:
    """Every N's sweep, and the directory of this run's."""

    out: str
    sweeps: tuple[Sweep, ...]

    @property
    def everything(self) -> bool:
        """Whether every repetition of every point measured."""
        return all(r.measured == REPETITIONS for s in self.sweeps for r in s.rows)


def rows_of(records: Sequence[Record]) -> tuple[Row, ...]:
    """Each point's row from the sweep's records."""
    rows = []
    for profile in PROFILES:
        for rate in RATES:
            ok = [r for r in records if r.profile == profile and float(r.rate_mbit) == rate and not r.failed]
            sending = [r.clients_sending_s for r in ok if r.clients_sending_s is not None]
            rows.append(Row(profile, rate, len(ok), ",".join(sorted({str(r.bound) for r in ok})) or "–",
                            max(sending) if sending else None,
                            sum(r.goodput_mbps for r in ok) / len(ok) if ok else None))
    return tuple(rows)


HEAD = (f"{'clients':>7s} {'profile':>12s} {'Mbit/s':>6s} {'measured':>8s} {'bound':>14s} {'connect s':>9s} "
        f"{'goodput':>8s}  sweep")


def lines_of(s: Sweep) -> list[str]:
    """One N's lines of the table (its sweep's exit status and time on the first)."""
    lines = []
    for i, r in enumerate(s.rows):
        tail = f"exit {s.status}, {s.seconds:.0f} s" if i == 0 else ""
        lines.append(f"{s.clients:>7d} {r.profile:>12s} {r.rate_mbit:>6g} {r.measured:>4d} of {REPETITIONS} "
                     f"{r.bounds:>14s} {(f'{r.connect_s:.2f}' if r.connect_s is not None else '–'):>9s} "
                     f"{(f'{r.goodput_mbps:.2f}' if r.goodput_mbps is not None else '–'):>8s}  {tail}")
    return lines


def run(args: Options) -> Result:
    """Each N's sweep in turn, its lines to stderr as it ends."""
    # a directory of this run's own: a sweep resumes a run directory it finds, and figures of an
    # earlier run (of other code) must not come back as this one's
    out = os.path.join(args.out, time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out)
    print(HEAD, file=sys.stderr, flush=True)
    sweeps = []
    for n in args.clients:
        print(f"{n} clients ...", file=sys.stderr, flush=True)
        run_dir = os.path.join(out, f"clients{n}")
        t0 = time.monotonic()
        rc = runner.sweep_apart(sweep(n), run_dir, log=run_dir + ".log", command=COMMAND)
        sweeps.append(Sweep(n, rc, time.monotonic() - t0, run_dir, rows_of(load_existing(run_dir))))
        print("\n".join(lines_of(sweeps[-1])), file=sys.stderr, flush=True)
    return Result(out, tuple(sweeps))


def page(args: Options, result: Result) -> str:
    """The table: every N's points, then what its columns mean."""
    lines = [HEAD]
    for s in result.sweeps:
        lines += lines_of(s)
    lines.append(f"measured: repetitions measured of {REPETITIONS}; connect: the most seconds any repetition took "
                 "from the clients' go to every client's data connection up; goodput: Mbit/s, all clients together, "
                 "mean of the repetitions; sweep: its exit status and wall time (boot and network build included); "
                 f"logs in {result.out}")
    return "\n".join(lines)


BENCHMARK = Benchmark("many_clients", Options, run, page, root="namespaces, xfrm, tc",
                      status=lambda result: 0 if result.everything else 1)

"""Build, IPsec-apply and teardown times of every topology, on every kernel backend.

    sudo ipsec-testbed bench topology_build              # the host kernel, then User-Mode Linux
    sudo ipsec-testbed bench topology_build --where uml --clients 50

Each row is one network built from scratch with Mininet (namespaces, veths,
dual-stack addresses, routes), then ESP tunnel AES-GCM-256 applied to every IPsec
pair for IPv4 and IPv6, then torn down.  On a kernel without ESP the IPsec column
says so instead of a figure.  Times are wall-clock seconds on the host clock of the
kernel that ran them (inside UML: the guest's, which follows the host's).

Each backend other than the host's runs the benchmark in a guest of its own, which prints
that backend's table as it ends; a backend that cannot run here is named, with why, and
skipped.  Exit status: the first guest's that failed, else 0.
"""
from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import sys
import time

from experiments import benchmark, doctor, runner
from experiments.benchmark import Benchmark, check_profiles, guest_options, option
from experiments.job import KernelChoice
from testbed import backends
from topologies.spec import MAX_CLIENTS

MULTI_CLIENT = ("road_warrior", "multi_host_to_host")
#: ``--where``'s value for every backend, one after another.
ALL = "all"


@dataclasses.dataclass(frozen=True)
class Options:
    """What to measure, and where; checked on construction."""

    where: str = option(ALL, "which kernel backend(s) to measure on", choices=(ALL, *backends.names()))
    clients: int = option(50, "clients of the multi-client topologies")
    repeat: int = option(1, "builds per topology")
    profile: str = option("aes-gcm-256", "IPsec profile applied")
    kernel: KernelChoice = guest_options()

    def __post_init__(self) -> None:
        if self.where not in (ALL, *backends.names()):
            raise ValueError(f"--where must be {ALL} or one of {', '.join(backends.names())}, not {self.where!r}")
        if not 1 <= self.clients <= MAX_CLIENTS:
            raise ValueError(f"--clients must be in 1..{MAX_CLIENTS}, not {self.clients}")
        if self.repeat < 1:
            raise ValueError(f"--repeat must be at least 1, not {self.repeat}")
        check_profiles((self.profile,), "--profile")


@dataclasses.dataclass(frozen=True)
class Row:
    """One topology's builds: each build's seconds to build, apply IPsec, remove it and tear down."""

    label: str
    nodes: int
    build_s: tuple[float, ...]
    on_s: tuple[float, ...]  # none where the kernel has no ESP
    off_s: tuple[float, ...]
    down_s: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class Measured:
    """One kernel's table, measured in this process."""

    where: str
    esp: bool  # the kernel has ESP: IPsec was applied and removed
    rows: tuple[Row, ...]
    left: tuple[str, ...]  # the testbed's namespaces left after the last teardown


@dataclasses.dataclass(frozen=True)
class Elsewhere:
    """A backend measured in a guest of its own (which printed its table), or, with ``why``, not measured."""

    title: str
    status: int = 0
    seconds: float = 0.0  # the guest's run, boot included
    why: str = ""


@dataclasses.dataclass(frozen=True)
class Result:
    """Each backend's part, in the order measured."""

    kernels: tuple[Measured | Elsewhere, ...]

    @property
    def status(self) -> int:
        """The first guest's exit status that is not 0, else 0."""
        return next((k.status for k in self.kernels if isinstance(k, Elsewhere) and k.status), 0)


def run_here(clients: int, repeat: int, profile: str) -> Measured:
    """Every topology built ``repeat`` times on the kernel this process runs on."""
    from topologies import TOPOLOGIES, build_spec
    from topologies.network import Network

    probe = doctor.probe(tools=False)
    esp = probe.ok("esp") and probe.ok("esp6")
    cases = [(name, 1 if name not in MULTI_CLIENT else clients) for name in TOPOLOGIES]
    cases.insert(2, ("road_warrior", 1))
    rows = []
    for name, n in cases:
        label = f"{name}" + (f" ({n} clients)" if name in MULTI_CLIENT else "")
        print(f"  {label} ...", file=sys.stderr, flush=True)
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
        rows.append(Row(label, len(spec.nodes), tuple(build), tuple(on), tuple(off), tuple(down)))
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    return Measured(f"{backends.current().label()} ({os.uname().release})", esp, tuple(rows),
                    tuple(n for n in left if n.startswith("itb-")))


def in_its_guest(args: Options, name: str) -> Elsewhere:
    """This benchmark for backend ``name`` alone, in that backend's guest (the job crosses as data)."""
    crypto = args.kernel.qemu_crypto if name == backends.QemuBackend.name else None  # the counted guest's alone
    one = dataclasses.replace(args, where=name, kernel=args.kernel.with_(kernel=name, speed_probe=False,
                                                                         qemu_crypto=crypto))
    job = BENCHMARK.job(one, ("ipsec-testbed", "bench", "topology_build", "--where", name))
    title = backends.get(name, one.kernel.options()).title
    t0 = time.monotonic()
    status = runner.run(job, f"ipsec-testbed bench topology_build --where {name}", benchmark.in_guest)
    return Elsewhere(title, status, time.monotonic() - t0)


def run(args: Options) -> Result:
    """Each backend ``--where`` names: here when this process runs on its kernel, else in its guest."""
    kernels: list[Measured | Elsewhere] = []
    for name in backends.names() if args.where == ALL else (args.where,):
        backend = backends.get(name, args.kernel.options())
        if backend.runs_here or backend.inside():
            kernels.append(run_here(args.clients, args.repeat, args.profile))
            continue
        why = backend.unavailable()
        kernels.append(Elsewhere(backend.title, why=why) if why else in_its_guest(args, name))
    return Result(tuple(kernels))


def _median(xs: tuple[float, ...]) -> str:
    return f"{statistics.median(xs):.2f}" if xs else "n/a"


def page(args: Options, result: Result) -> str:
    """Each kernel measured here as a table; a guest's run (its table printed by the guest) or why none, a line."""
    lines = []
    for k in result.kernels:
        if isinstance(k, Elsewhere):
            lines += [f"\n{k.title}: not measured ({k.why})"] if k.why else \
                [f"({k.title} run, boot included: {k.seconds:.0f} s)"]
            continue
        lines += [f"\n{k.where}; {args.repeat} build(s) per topology; IPsec: {args.profile} tunnel, IPv4+IPv6"
                  + ("" if k.esp else " (not measured: this kernel has no ESP)"),
                  f"{'topology':32s} {'nodes':>5s} {'build s':>9s} {'IPsec on s':>11s} {'IPsec off s':>12s} "
                  f"{'teardown s':>11s}"]
        lines += [f"{r.label:32s} {r.nodes:5d} {_median(r.build_s):>9s} {_median(r.on_s):>11s} "
                  f"{_median(r.off_s):>12s} {_median(r.down_s):>11s}" for r in k.rows]
        lines.append(f"namespaces left behind: {list(k.left) or 'none'}")
    return "\n".join(lines)


BENCHMARK = Benchmark("topology_build", Options, run, page, root="network namespaces, xfrm",
                      status=lambda result: result.status)

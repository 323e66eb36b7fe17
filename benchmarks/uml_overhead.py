"""What User-Mode Linux costs: boot-to-command time and a trivial command's wall time.

    sudo ipsec-testbed bench uml_overhead [--repeat 5]

Each figure is measured on the host clock around testbed.backends.uml.run(): "boot to
command" is the time until the guest command's first output byte reaches the host,
"total" until run() returns (boot, module loading, the command, power-off).
"""
from __future__ import annotations

import dataclasses
import math
import os
import statistics
import sys
import time

from experiments.benchmark import Benchmark, option
from experiments.doctor import kernel_modules
from testbed.backends import uml
from testbed.errors import Refused


class FirstByte:
    """A stdout stand-in that notes when the first byte arrives."""

    def __init__(self) -> None:
        self.at: float | None = None
        self.data = b""

    def write(self, chunk: bytes) -> int:
        if self.at is None:
            self.at = time.monotonic()
        self.data += chunk
        return len(chunk)

    def flush(self) -> None:
        pass


def once(command: list[str], mem: str) -> tuple[float, float, int]:
    spec = uml.build_spec(command, mem=mem, boot_modules=kernel_modules())
    out = FirstByte()
    t0 = time.monotonic()
    rc = uml.run(spec, stdout=out, stderr=FirstByte())
    total = time.monotonic() - t0
    return ((out.at or float("nan")) - t0, total, rc)


def _spread(xs: tuple[float, ...]) -> str:
    return f"{min(xs):6.2f} {statistics.median(xs):6.2f} {max(xs):6.2f}"


@dataclasses.dataclass(frozen=True)
class Options:
    """How many boots and how much memory; checked on construction."""

    repeat: int = option(5, "boots per case")
    mem: str = option("2G", "guest memory")

    def __post_init__(self) -> None:
        if self.repeat < 1:
            raise ValueError(f"--repeat must be at least 1, not {self.repeat}")
        if not uml.MEM_PATTERN.match(self.mem):
            raise ValueError(f"--mem must be a size like 512M or 2G, not {self.mem!r}")


@dataclasses.dataclass(frozen=True)
class Case:
    """One guest command's boots: the seconds to its first output byte (NaN: it printed none) and in all."""

    label: str
    firsts: tuple[float, ...]
    totals: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class Result:
    """The host and the UML kernel, each case's boots, and `true` run on the host for comparison."""

    release: str
    cpus: int | None
    kernel: str
    cases: tuple[Case, ...]
    host_true_s: float


def cases() -> list[tuple[str, list[str]]]:
    """The guest commands timed: (label, argv)."""
    py = sys.executable
    return [
        ("echo (boot to command)", ["echo", "ready"]),
        ("true (trivial command)", ["true"]),
        ("python3 start", [py, "-c", "print('ready')"]),
        ("python: import pyroute2 + testbed",
         [py, "-c", "import pyroute2, ipsec.xfrm, experiments.doctor; print('ready')"]),
    ]


def run(args: Options) -> Result:
    """Boot a guest ``--repeat`` times for each case, each case's line on stderr as it is done; a guest command
    that fails is refused in one line."""
    release, cpus, kernel = os.uname().release, os.cpu_count(), uml.find_kernel()
    print(f"{heading(args, release, cpus, kernel)}\n{HEADER}", file=sys.stderr, flush=True)
    done = []
    for label, cmd in cases():
        firsts, totals = [], []
        for _ in range(args.repeat):
            first, total, rc = once(cmd, args.mem)
            if rc != 0:
                raise Refused(f"{label}: the guest command exited {rc}")
            firsts.append(first)
            totals.append(total)
        done.append(Case(label, tuple(firsts), tuple(totals)))
        print(case_line(done[-1]), file=sys.stderr, flush=True)
    t0 = time.monotonic()
    os.spawnvp(os.P_WAIT, "true", ["true"])
    host_true_s = time.monotonic() - t0
    return Result(release, cpus, kernel, tuple(done), host_true_s)


def heading(args: Options, release: str, cpus: int | None, kernel: str) -> str:
    """The line that says what it boots, where."""
    return f"UML overhead on {release} host, {cpus} CPUs, kernel {kernel}, mem={args.mem}, {args.repeat} boots per case"


HEADER = f"{'case':38s} {'first output s (min/median/max)':>32s} {'total s (min/median/max)':>28s}"


def case_line(case: Case) -> str:
    """A case's line of the table (pure)."""
    first_col = _spread(case.firsts) if not any(math.isnan(f) for f in case.firsts) else "(no output)"
    return f"{case.label:38s} {first_col:>32s} {_spread(case.totals):>28s}"


def page(args: Options, result: Result) -> str:
    """The table: each case's seconds to first output and in all (min/median/max), and `true` on the host."""
    return "\n".join([heading(args, result.release, result.cpus, result.kernel), HEADER,
                      *(case_line(c) for c in result.cases),
                      f"for comparison, `true` on the host: {result.host_true_s:.4f} s"])


BENCHMARK = Benchmark("uml_overhead", Options, run, page, root="boots User-Mode Linux guests")

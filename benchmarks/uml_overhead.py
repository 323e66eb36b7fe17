"""What User-Mode Linux costs: boot-to-command time and a trivial command's wall time.

    sudo ipsec-testbed bench uml_overhead [--repeat 5]

Each figure is measured on the host clock around testbed.backends.uml.run(): "boot to
command" is the time until the guest command's first output byte reaches the host,
"total" until run() returns (boot, module loading, the command, power-off).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from experiments.doctor import kernel_modules
from testbed.backends import uml


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


def _spread(xs: list[float]) -> str:
    return f"{min(xs):6.2f} {statistics.median(xs):6.2f} {max(xs):6.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="boots per case (default: %(default)s)")
    ap.add_argument("--mem", default="2G", help="guest memory (default: %(default)s)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("uml_overhead: needs root; run with sudo")
    py = sys.executable
    cases = [
        ("echo (boot to command)", ["echo", "ready"]),
        ("true (trivial command)", ["true"]),
        ("python3 start", [py, "-c", "print('ready')"]),
        ("python: import pyroute2 + testbed",
         [py, "-c", "import pyroute2, ipsec.xfrm, experiments.doctor; print('ready')"]),
    ]
    print(f"UML overhead on {os.uname().release} host, {os.cpu_count()} CPUs, kernel {uml.find_kernel()}, "
          f"mem={args.mem}, {args.repeat} boots per case")
    print(f"{'case':38s} {'first output s (min/median/max)':>32s} {'total s (min/median/max)':>28s}")
    for label, cmd in cases:
        firsts, totals = [], []
        for _ in range(args.repeat):
            first, total, rc = once(cmd, args.mem)
            if rc != 0:
                sys.exit(f"{label}: the guest command exited {rc}")
            firsts.append(first)
            totals.append(total)
        first_col = _spread(firsts) if not any(f != f for f in firsts) else "(no output)"
        print(f"{label:38s} {first_col:>32s} {_spread(totals):>28s}", flush=True)
    t0 = time.monotonic()
    os.spawnvp(os.P_WAIT, "true", ["true"])
    print(f"for comparison, `true` on the host: {time.monotonic() - t0:.4f} s")
    return 0


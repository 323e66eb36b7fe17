#!/usr/bin/env python3
"""Throughput versus TCP payload size, plain and through ESP: a quick real measurement.

This first version measures host-to-host (two namespaces, one veth) with iperf3,
plain and with ESP transport AES-GCM, for a few MSS values, and prints a table.
The full sweep (topologies, shaped rates, repetitions, resumable run directories,
report.html) replaces it; the command line stays.

Runs on the host kernel when it can do ESP and inside User-Mode Linux otherwise.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time

# Run as a script from a checkout: make the project's packages importable.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from testbed import kernel  # noqa: E402
from testbed.cli import add_kernel_options  # noqa: E402

log = logging.getLogger("packet_size_sweep")

DEFAULT_SIZES = (500, 1000, 1400)


def csv_ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, not {text!r}") from None
    if not values or min(values) < 88 or max(values) > 9000:
        raise argparse.ArgumentTypeError(f"sizes must be TCP MSS values in 88..9000, not {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Measure TCP goodput versus payload size (the MSS) with and without ESP, "
                    "between two network namespaces, with iperf3.",
        epilog="example: sudo .venv/bin/python experiments/packet_size_sweep.py --sizes 200,700,1400 --duration 3",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--sizes", type=csv_ints, default=DEFAULT_SIZES, metavar="BYTES,...",
                   help="TCP MSS values to measure (iperf3 -M)")
    p.add_argument("--duration", type=float, default=2.0, metavar="SECONDS",
                   help="measured seconds per point, after a 0.5 s warm-up iperf3 leaves out")
    p.add_argument("--profile", default="aes-gcm-256", metavar="PROFILE",
                   help="IPsec profile for the IPsec points, in transport mode (`ipsec-testbed profiles` lists them)")
    p.add_argument("-v", "--verbose", action="store_true", help="log what is being done")
    add_kernel_options(p)
    return p


def measure(args: argparse.Namespace) -> list[dict]:
    from experiments import iperf
    from ipsec.plan import AssociationSpec, Endpoint, apply_association, plan_association
    from topologies.veth_pair import veth_pair

    iperf.check()
    rows = []
    with veth_pair() as p:
        for esp in (False, True):
            if esp:
                apply_association(plan_association(AssociationSpec(
                    args.profile, "transport", Endpoint(p.a, p.v4a), Endpoint(p.b, p.v4b))))
            for size in args.sizes:
                label = args.profile if esp else "none"
                print(f"  measuring {label:>18}, MSS {size:5d} B ...", file=sys.stderr, flush=True)
                r = iperf.measure(p.b, p.a, p.v4b, duration_s=args.duration, omit_s=0.5, mss=size)
                rows.append({"profile": label, "size_bytes": size, "goodput_mbps": r.goodput_mbps,
                             "retransmits": r.retransmits, "cpu_sender_pct": r.cpu_sender_pct})
    return rows


def print_table(rows: list[dict], where: str) -> None:
    from rich.console import Console
    from rich.table import Table

    plain = {r["size_bytes"]: r["goodput_mbps"] for r in rows if r["profile"] == "none"}
    t = Table(title=f"TCP goodput, host-to-host over veth, no shaping, ESP transport mode ({where})",
              title_justify="left")
    for col in ("profile", "MSS (B)", "goodput (Mbit/s)", "IPsec/plain", "retransmits", "sender CPU %"):
        t.add_column(col, justify="left" if col == "profile" else "right")
    for r in rows:
        ratio = r["goodput_mbps"] / plain[r["size_bytes"]] if r["profile"] != "none" and plain.get(r["size_bytes"]) else None
        t.add_row(r["profile"], str(r["size_bytes"]), f"{r['goodput_mbps']:.1f}",
                  f"{ratio:.2f}" if ratio is not None else "", str(r["retransmits"]),
                  f"{r['cpu_sender_pct']:.0f}" if r["cpu_sender_pct"] is not None else "")
    Console().print(t)
    print("Unshaped veth: goodput here is limited by the CPU (one CPU inside UML), not by a link.")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if os.geteuid() != 0:
        print("packet_size_sweep: needs root (network namespaces, xfrm); run it with sudo", file=sys.stderr)
        return 1
    backend = kernel.choose_backend(args.kernel)
    print(f"kernel: {backend.name or 'none'} ({backend.reason})", file=sys.stderr)
    if backend.name is None:
        return 1
    if backend.name == "uml" and not kernel.in_uml():
        t0 = time.monotonic()
        argv = [os.path.abspath(__file__), *(argv if argv is not None else sys.argv[1:])]
        rc = kernel.reexec_in_uml(argv, mem=args.uml_mem, kernel=args.uml_kernel, modules=args.uml_modules)
        print(f"(User-Mode Linux run took {time.monotonic() - t0:.0f} s in all)", file=sys.stderr)
        return rc
    where = f"{'User-Mode Linux' if kernel.in_uml() else 'host'} kernel {os.uname().release}"
    rows = measure(args)
    print_table(rows, where)
    return 0


if __name__ == "__main__":
    sys.exit(main())

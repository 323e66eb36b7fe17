"""Do two UML kernels give the same sweep?  The default sweep on each, point by point.

    sudo ipsec-testbed bench kernel_sweeps [--kernels debian recipe] [--out DIR] [SWEEP ARGS...]
    sudo ipsec-testbed bench kernel_sweeps --reuse DIR_A DIR_B

Runs ``ipsec-testbed sweep`` (its defaults, or the SWEEP ARGS given) once on each
kernel (``--uml-kernel`` words or paths: Debian's, the project's), one after the other, into
DIR/a and DIR/b; or reads two run directories.  Then, for every point: what bounded it on each
kernel (the class most of its repetitions had), its anomalies, and its goodput's mean with 95 %
interval on each; the two agree when each mean lies within the other's interval.  The last
lines count the points whose class differs, the anomalies, and the points whose means disagree.
For the paired, interleaved comparison of two kernels use `ipsec-testbed regress --ab`.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time

from analysis.stats import aggregate
from benchmarks import _common
from testbed import rundir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sweep(kernel: str, out_dir: str, args: list[str]) -> float:
    """The sweep with the user's options ``args`` on ``kernel`` into ``out_dir``, run as the user would (the
    front door: the options are theirs to give, and the sweep's own parser reads them); its wall time."""
    words = ["sweep", "--kernel", "uml", "--uml-kernel", kernel, *args, "--out", out_dir, "--no-report"]
    print(f"$ ipsec-testbed {' '.join(words)}", flush=True)
    started = time.monotonic()
    rc = subprocess.run([*_common.front_door(), *words], stdin=subprocess.DEVNULL).returncode
    if rc != 0:
        raise SystemExit(f"the sweep on {kernel} failed (exit {rc})")
    return time.monotonic() - started


def _label(a) -> str:
    return f"{a.profile:12s} {a.rate_mbit:6g} Mbit/s  {a.size_bytes:5d} B"


def compare(dir_a: str, dir_b: str, names: tuple[str, str]) -> int:
    """Print the point-by-point comparison; returns the number of points that disagree (class or mean)."""
    points = [{(a.profile, a.rate_mbit, a.size_bytes): a for a in aggregate(rundir.load_existing(d))}
              for d in (dir_a, dir_b)]
    for name, d in zip(names, (dir_a, dir_b), strict=True):
        meta = rundir.read_meta(d)
        kernel = {"kernel_origin": meta.kernel_origin, "kernel_version": meta.kernel_version,
                  "kernel_path": meta.kernel_path}
        print(f"{name}: {d} {kernel}")
    print(f"\n{'point':34s} {'class A':>8s} {'class B':>8s} {'anom':>5s}  {'goodput A (Mbit/s)':>22s}  "
          f"{'goodput B (Mbit/s)':>22s}  B/A     agree")
    differ = anomalies = disagree = 0
    for key in sorted(set(points[0]) | set(points[1]), key=lambda k: (k[1], k[2], k[0])):
        a, b = points[0].get(key), points[1].get(key)
        if a is None or b is None:
            print(f"{key}: only in {'B' if a is None else 'A'}")
            disagree += 1
            continue
        n_anom = a.n_anomaly + b.n_anomaly
        anomalies += n_anom
        ga, gb = a.goodput, b.goodput
        within = (ga.ci95 is not None and gb.ci95 is not None and abs(ga.mean - gb.mean) <= ga.ci95
                  and abs(ga.mean - gb.mean) <= gb.ci95)
        overlap = ga.ci95 is not None and gb.ci95 is not None and abs(ga.mean - gb.mean) <= ga.ci95 + gb.ci95
        agree = "yes" if within else "overlap" if overlap else "NO"
        differ += a.bound != b.bound
        disagree += agree == "NO"
        ci = lambda s: f"{s.mean:8.3f} ± {s.ci95:6.3f} (n={s.n:2d})" if s.ci95 is not None else f"{s.mean:8.3f}"  # noqa: E731
        print(f"{_label(a):34s} {a.bound or '-':>8s} {b.bound or '-':>8s} {n_anom:5d}  {ci(ga):>22s}  {ci(gb):>22s}  "
              f"{gb.mean / ga.mean:6.4f}  {agree}")
    total = len(set(points[0]) | set(points[1]))
    print(f"\n{total} points: {differ} with a different bound class, {anomalies} anomalous repetitions; "
          f"goodput intervals apart at {disagree} (each mean within the other's interval, or the intervals "
          "overlapping, at the others)")
    return differ + disagree


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 2)[2],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernels", nargs=2, default=("debian", "recipe"), metavar=("A", "B"),
                   help="the two kernels, as --uml-kernel takes them (default: debian recipe)")
    p.add_argument("--out", help="where DIR/a and DIR/b go (default: a new temporary directory)")
    p.add_argument("--reuse", nargs=2, metavar=("DIR_A", "DIR_B"), help="compare two run directories, run nothing")
    args, sweep_args = p.parse_known_args(argv)
    if args.reuse:
        compare(*args.reuse, ("A", "B"))
        return 0
    out = args.out or tempfile.mkdtemp(prefix="itb-kernel-sweeps-")
    times = [sweep(k, os.path.join(out, label), sweep_args) for k, label in zip(args.kernels, "ab", strict=True)]
    print(f"\nA = {args.kernels[0]} ({times[0]:.0f} s), B = {args.kernels[1]} ({times[1]:.0f} s), "
          f"run directories {out}")
    compare(os.path.join(out, "a"), os.path.join(out, "b"), ("A", "B"))
    return 0


"""The counted backend's determinism and power: the same point in several boots, beside a CPU hog, A/A and +1 %.

    sudo ipsec-testbed bench counted                     # about 30 min: every part
    sudo ipsec-testbed bench counted --parts twice,aa     # some of them
    sudo ipsec-testbed bench counted --transport tcp      # the detect suite's kind of point instead

One point of the counted backend (``--kernel qemu``: an x86-64 kernel in QEMU's emulator, whose clock counts
instructions), by default the gate's counted kind: VPN gateways, ESP tunnel AES-GCM-256, UDP datagrams of 1400
bytes offered at 100 Mbit/s on an unshaped link (paced: every datagram takes the same path, none waits for an
ACK), windows of 1 s.  Its parts, each a sweep of its own (a boot of its own):

    twice   the point --repetitions times, in two boots: goodput and instructions per packet, repetition by
            repetition (the n-th window of one boot against the n-th of the other) and their means
    hog     a third boot with a busy loop on every host CPU: its windows against the first boot's, and the wall
            time a window took, quiet and beside the hog (the counts should not move; the wall time does)
    aa      arms a and b, identical, side by side in one boot (the sweep's --arms 0,0, ABBA), --pairs each:
            b against a pair by pair, the ratio of instructions per packet and its 95 % interval
    power   --trials boots, each with arms a (nothing added), b (+1 % of a's instructions per packet: extra BPF
            instructions on every ESP packet's way out, ipsec.slowdown) and c (a again), --power-pairs each; the
            gate's rule (paired, 95 %, 0.5 % tolerance) on b against a (a flag: the change seen) and c against a
            (a flag: a false alarm), and the comparison's wall time

Every sweep's run directory is kept under --out; the figures are printed at the end of each part.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import time

from experiments import runner
from experiments.engine.plan import SweepSpec
from experiments.job import Job, KernelChoice, SweepWork

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTS = ("twice", "hog", "aa", "power")
#: The gate's tolerance for arms of one counted run, and the change the power part plants.
MAX_DROP = 0.005
PLANTED = 0.01


def point(transport: str, repetitions: int, duration_s: float) -> SweepSpec:
    """The benchmark's point (see the module docstring)."""
    if transport == "udp":
        return SweepSpec(topology="vpn_gateway", profiles=("aes-gcm-256",), plain=False, rates_mbit=(1000.0,),
                         sizes=(1400,), transports=("udp",), udp_bitrate="100M", repetitions=repetitions,
                         duration_s=duration_s, warmup_s=0.5, latency_probe=False)
    return SweepSpec(topology="vpn_gateway", profiles=("aes-gcm-256",), plain=False, rates_mbit=(1000.0,),
                     sizes=(1460,), repetitions=repetitions, duration_s=duration_s, warmup_s=0.5,
                     latency_probe=False)


def measure(spec: SweepSpec, run_dir: str) -> list:
    """``spec`` swept on the counted backend into ``run_dir`` (a process and a boot of its own); its records."""
    from testbed.rundir import load_results

    job = Job(SweepWork(spec), out_dir=os.path.abspath(run_dir), report=False, kernel=KernelChoice(kernel="qemu"))
    rc = runner.run_apart(job, os.path.join(run_dir + ".log"))
    if rc != 0:
        sys.exit(f"counted: the sweep into {run_dir} failed (exit {rc}); its output: {run_dir}.log")
    return [r for r in load_results(run_dir) if not r.failed]


def by_arm(records, arm: str = "") -> list:
    return sorted((r for r in records if (r.arm or "") == arm), key=lambda r: r.repetition)


def pct(a: float, b: float) -> float:
    return (b - a) / a * 100


def spread(values) -> float:
    """(max - min) / min, percent."""
    return (max(values) - min(values)) / min(values) * 100


def twice(args, spec: SweepSpec, say) -> list:
    runs = [by_arm(measure(spec, os.path.join(args.out, f"twice-{n}"))) for n in (1, 2)]
    say("twice: the point in two boots, window by window (goodput Mbit/s; instructions per packet)")
    print(f"  {'rep':>3} {'goodput 1':>11} {'goodput 2':>11} {'diff %':>8} {'insn/pkt 1':>11} {'insn/pkt 2':>11} "
          f"{'diff %':>8}")
    for r1, r2 in zip(*runs, strict=False):
        ipp1, ipp2 = r1.instructions_per_packet, r2.instructions_per_packet
        print(f"  {r1.repetition:>3} {r1.goodput_mbps:>11.4f} {r2.goodput_mbps:>11.4f} "
              f"{pct(r1.goodput_mbps, r2.goodput_mbps):>+8.3f} {ipp1:>11.1f} {ipp2:>11.1f} {pct(ipp1, ipp2):>+8.3f}")
    for what in ("goodput_mbps", "instructions_per_packet"):
        means = [statistics.fmean(getattr(r, what) for r in run) for run in runs]
        within = [spread([getattr(r, what) for r in run]) for run in runs]
        print(f"  {what}: means {means[0]:.4f} and {means[1]:.4f} ({pct(*means):+.3f} %); spread within a boot "
              f"{within[0]:.3f} % and {within[1]:.3f} %")
    return runs[0]


def hog(args, spec: SweepSpec, quiet: list, say) -> None:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        busy = by_arm(measure(spec, os.path.join(args.out, "hog")))
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    say(f"hog: the point beside {len(hogs)} busy loops (one per host CPU), against the first quiet boot")
    diffs = [pct(q.instructions_per_packet, b.instructions_per_packet) for q, b in zip(quiet, busy, strict=False)]
    goodput = [pct(q.goodput_mbps, b.goodput_mbps) for q, b in zip(quiet, busy, strict=False)]
    means = [statistics.fmean(r.instructions_per_packet for r in run) for run in (quiet, busy)]
    print(f"  instructions per packet, window by window: {', '.join(f'{d:+.3f}' for d in diffs)} %; "
          f"means {pct(*means):+.3f} %")
    print(f"  goodput, window by window: {', '.join(f'{d:+.4f}' for d in goodput)} %")
    print(f"  wall time of a window: quiet {statistics.median(r.wall_s for r in quiet):.2f} s, beside the hog "
          f"{statistics.median(r.wall_s for r in busy):.2f} s (median)")


def paired(records, base: str, other: str):
    """The gate's verdict on arm ``other`` against ``base`` (instructions per packet, paired)."""
    from analysis import regress
    from testbed.record import FIELD

    (verdict,) = regress.compare_arms(records, {}, base, other, MAX_DROP, 0.95, (FIELD.instructions_per_packet,))
    return verdict


def aa(args, spec: SweepSpec, say) -> None:
    t0 = time.monotonic()
    records = measure(dataclasses.replace(spec, arms=(0, 0), repetitions=args.pairs),
                      os.path.join(args.out, "aa"))
    v = paired(records, "a", "b")
    say(f"aa: identical arms side by side in one boot, {args.pairs} pairs "
        f"({time.monotonic() - t0:.0f} s with the boot)")
    print(f"  b/a of instructions per packet {v.ratio:.5f}, 95 % interval {v.low2:.5f}..{v.high2:.5f} "
          f"(±{(v.high2 - v.low2) / 2 * 100:.3f} %); flagged by the gate: {v.regressed}")


def power(args, spec: SweepSpec, say) -> None:
    from experiments import injection

    # what one extra BPF instruction on the ESP path adds to the instructions per packet, measured (cached)
    cal = injection.calibrated("bench-counted", spec, injection.kernel_identity("qemu"),
                               lambda s, run_dir: 0 if measure(s, run_dir) else 1, args.out, say,
                               instructions=injection.COUNTED_CALIBRATION_INSTRUCTIONS)
    n = cal.instructions_for(PLANTED * 100)
    say(f"power: +1 % = {n} extra BPF instructions per ESP packet ({cal.describe()}); {args.trials} trials of arms "
        f"a (0), b ({n}), c (0), {args.power_pairs} pairs each")
    seen = alarms = 0
    walls, effects = [], []
    for trial in range(args.trials):
        t0 = time.monotonic()
        records = measure(dataclasses.replace(spec, arms=(0, n, 0), repetitions=args.power_pairs),
                          os.path.join(args.out, f"power-{trial}"))
        b, c = paired(records, "a", "b"), paired(records, "a", "c")
        walls.append(time.monotonic() - t0)
        effects.append((b.ratio - 1) * 100)
        seen += b.regressed
        alarms += c.regressed
        print(f"  trial {trial}: b/a {b.ratio:.5f} ({b.low2:.5f}..{b.high2:.5f}) "
              f"{'FLAGGED' if b.regressed else 'missed'}; c/a {c.ratio:.5f} ({c.low2:.5f}..{c.high2:.5f}) "
              f"{'FALSE ALARM' if c.regressed else 'quiet'}; "
              f"{walls[-1]:.0f} s", flush=True)
    print(f"  +1 % flagged {seen} of {args.trials}; identical arms flagged {alarms} of {args.trials}; the change "
          f"as measured {statistics.fmean(effects):+.2f} % (mean); a trial (three arms, a boot) took "
          f"{statistics.median(walls):.0f} s (median), one comparison two thirds of it")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ipsec-testbed bench counted", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default=",".join(PARTS), help=f"which parts, of {','.join(PARTS)} (default: all)")
    ap.add_argument("--transport", choices=("udp", "tcp"), default="udp",
                    help="udp: the paced point (default); tcp: TCP unshaped, the CPU the bound (the detect suite's)")
    ap.add_argument("--repetitions", type=int, default=6, help="windows per boot in twice and hog (default: 6)")
    ap.add_argument("--duration", type=float, default=1.0, help="a window, s (default: 1)")
    ap.add_argument("--pairs", type=int, default=10, help="pairs in aa (default: 10)")
    ap.add_argument("--trials", type=int, default=20, help="trials in power (default: 20)")
    ap.add_argument("--power-pairs", type=int, default=4, help="pairs per trial in power (default: 4)")
    ap.add_argument("--out", default=os.path.join(REPO, "runs", "bench-counted"), help="run directories")
    args = ap.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if bad := [p for p in parts if p not in PARTS]:
        ap.error(f"unknown part {bad[0]!r}; parts: {', '.join(PARTS)}")
    if os.geteuid() != 0:
        sys.exit("counted: needs root; run with sudo")
    from testbed.backends import qemu

    if why := qemu.QemuBackend().unavailable():
        sys.exit(f"counted: the counted backend cannot run here: {why}")
    os.makedirs(args.out, exist_ok=True)
    spec = point(args.transport, args.repetitions, args.duration)

    def say(message: str) -> None:
        print(f"counted: {message}", flush=True)

    say(f"{qemu.QemuBackend().describe_kernel()}; the point: {args.transport}, {args.duration:g}-s windows; "
        f"{os.cpu_count()} host CPUs")
    quiet = None
    if "twice" in parts or "hog" in parts:
        quiet = twice(args, spec, say) if "twice" in parts else by_arm(measure(spec, os.path.join(args.out, "twice-1")))
    if "hog" in parts:
        hog(args, spec, quiet, say)
    if "aa" in parts:
        aa(args, spec, say)
    if "power" in parts:
        power(args, spec, say)
    return 0

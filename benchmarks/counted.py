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

Every sweep's run directory is kept under --out; the figures are printed at the end, part by part.
"""
from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence

from analysis import regress
from experiments import injection, runner
from experiments.benchmark import Benchmark, option
from experiments.engine.plan import SweepSpec
from experiments.job import Job, KernelChoice, SweepWork
from testbed.backends import qemu
from testbed.errors import Refused
from testbed.record import FIELD, Record
from testbed.rundir import load_results

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTS = ("twice", "hog", "aa", "power")
#: The gate's tolerance for arms of one counted run, and the change the power part plants.
MAX_DROP = 0.005
PLANTED = 0.01


@dataclasses.dataclass(frozen=True)
class Options:
    """Which parts, on which point, how many windows, pairs and trials; checked on construction."""

    parts: tuple[str, ...] = option(PARTS, f"which parts, of {','.join(PARTS)} (default: all)", show_default=False)
    transport: str = option("udp", "udp: the paced point (default); tcp: TCP unshaped, the CPU the bound (the "
                            "detect suite's)", choices=("udp", "tcp"), show_default=False)
    repetitions: int = option(6, "windows per boot in twice and hog")
    duration: float = option(1.0, "a window, s")
    pairs: int = option(10, "pairs in aa")
    trials: int = option(20, "trials in power")
    power_pairs: int = option(4, "pairs per trial in power")
    out: str = option(os.path.join(REPO, "runs", "bench-counted"), "run directories", show_default=False)

    def __post_init__(self) -> None:
        if bad := [p for p in self.parts if p not in PARTS]:
            raise ValueError(f"--parts must be some of {', '.join(PARTS)}, not {bad[0]!r}")
        for flag, value in (("--repetitions", self.repetitions), ("--pairs", self.pairs), ("--trials", self.trials),
                            ("--power-pairs", self.power_pairs)):
            if value < 1:
                raise ValueError(f"{flag} must be at least 1, not {value}")
        if self.duration <= 0:
            raise ValueError(f"--duration must be a positive number of seconds, not {self.duration:g}")


@dataclasses.dataclass(frozen=True)
class Twice:
    """The point in two boots: each boot's windows."""

    first: tuple[Record, ...]
    second: tuple[Record, ...]


@dataclasses.dataclass(frozen=True)
class Hog:
    """The point beside ``hogs`` busy loops (``busy``), against a quiet boot's windows (``quiet``)."""

    hogs: int
    quiet: tuple[Record, ...]
    busy: tuple[Record, ...]


@dataclasses.dataclass(frozen=True)
class Identical:
    """Identical arms side by side in one boot: b against a, and the seconds it took with the boot."""

    verdict: regress.Verdict
    seconds: float


@dataclasses.dataclass(frozen=True)
class PowerTrial:
    """One boot of arms a, b (+1 %) and c (a again): b against a, c against a, and its wall time."""

    b: regress.Verdict
    c: regress.Verdict
    seconds: float


@dataclasses.dataclass(frozen=True)
class Power:
    """The extra BPF instructions that make +1 %, the calibration they come from, and every trial."""

    instructions: int
    calibration: str
    trials: tuple[PowerTrial, ...]


@dataclasses.dataclass(frozen=True)
class Result:
    """The counted backend's kernel, the host's CPUs, and each part that ran (None: not asked for)."""

    kernel: str
    cpus: int
    twice: Twice | None = None
    hog: Hog | None = None
    aa: Identical | None = None
    power: Power | None = None


def point(transport: str, repetitions: int, duration_s: float) -> SweepSpec:
    """The benchmark's point (see the module docstring)."""
    if transport == "udp":
        return SweepSpec(topology="vpn_gateway", profiles=("aes-gcm-256",), plain=False, rates_mbit=(1000.0,),
                         sizes=(1400,), transports=("udp",), udp_bitrate="100M", repetitions=repetitions,
                         duration_s=duration_s, warmup_s=0.5, latency_probe=False)
    return SweepSpec(topology="vpn_gateway", profiles=("aes-gcm-256",), plain=False, rates_mbit=(1000.0,),
                     sizes=(1460,), repetitions=repetitions, duration_s=duration_s, warmup_s=0.5,
                     latency_probe=False)


def measure(spec: SweepSpec, run_dir: str) -> list[Record]:
    """``spec`` swept on the counted backend into ``run_dir`` (a process and a boot of its own); its records."""
    job = Job(SweepWork(spec), out_dir=os.path.abspath(run_dir), report=False, kernel=KernelChoice(kernel="qemu"))
    rc = runner.run_apart(job, os.path.join(run_dir + ".log"))
    if rc != 0:
        sys.exit(f"counted: the sweep into {run_dir} failed (exit {rc}); its output: {run_dir}.log")
    return [r for r in load_results(run_dir) if not r.failed]


def by_arm(records: Iterable[Record], arm: str = "") -> tuple[Record, ...]:
    return tuple(sorted((r for r in records if (r.arm or "") == arm), key=lambda r: r.repetition))


def pct(a: float, b: float) -> float:
    return (b - a) / a * 100


def spread(values: Sequence[float]) -> float:
    """(max - min) / min, percent."""
    return (max(values) - min(values)) / min(values) * 100


def say(message: str) -> None:
    """A line of progress, on stderr: the figures come at the end."""
    print(f"counted: {message}", file=sys.stderr, flush=True)


def twice(args: Options, spec: SweepSpec) -> Twice:
    say("twice: the point in two boots ...")
    return Twice(*(by_arm(measure(spec, os.path.join(args.out, f"twice-{n}"))) for n in (1, 2)))


def hog(args: Options, spec: SweepSpec, quiet: tuple[Record, ...]) -> Hog:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    say(f"hog: the point beside {len(hogs)} busy loops ...")
    try:
        busy = by_arm(measure(spec, os.path.join(args.out, "hog")))
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    return Hog(len(hogs), quiet, busy)


def paired(records: Sequence[Record], base: str, other: str) -> regress.Verdict:
    """The gate's verdict on arm ``other`` against ``base`` (instructions per packet, paired)."""
    (verdict,) = regress.compare_arms(records, {}, base, other, MAX_DROP, 0.95, (FIELD.instructions_per_packet,))
    return verdict


def aa(args: Options, spec: SweepSpec) -> Identical:
    say(f"aa: identical arms side by side in one boot, {args.pairs} pairs ...")
    t0 = time.monotonic()
    records = measure(dataclasses.replace(spec, arms=(0, 0), repetitions=args.pairs), os.path.join(args.out, "aa"))
    return Identical(paired(records, "a", "b"), time.monotonic() - t0)


def power(args: Options, spec: SweepSpec) -> Power:
    # what one extra BPF instruction on the ESP path adds to the instructions per packet, measured (cached)
    cal = injection.calibrated("bench-counted", spec, injection.kernel_identity("qemu"),
                               lambda s, run_dir: 0 if measure(s, run_dir) else 1, args.out, say,
                               instructions=injection.COUNTED_CALIBRATION_INSTRUCTIONS)
    n = cal.instructions_for(PLANTED * 100)
    say(f"power: +1 % = {n} extra BPF instructions per ESP packet; {args.trials} trials ...")
    trials = []
    for trial in range(args.trials):
        t0 = time.monotonic()
        records = measure(dataclasses.replace(spec, arms=(0, n, 0), repetitions=args.power_pairs),
                          os.path.join(args.out, f"power-{trial}"))
        trials.append(PowerTrial(paired(records, "a", "b"), paired(records, "a", "c"), time.monotonic() - t0))
        say(f"  trial {trial}: {power_trial_line(trials[-1])}")
    return Power(n, cal.describe(), tuple(trials))


def run(args: Options) -> Result:
    """The parts asked for, in order, each a sweep (a boot) of its own or more, on the counted backend."""
    backend = qemu.QemuBackend()
    if why := backend.unavailable():
        raise Refused(f"the counted backend cannot run here: {why}")
    spec = point(args.transport, args.repetitions, args.duration)
    result = Result(backend.describe_kernel(), os.cpu_count() or 1)
    say(header(args, result))
    if "twice" in args.parts:
        result = dataclasses.replace(result, twice=twice(args, spec))
    if "hog" in args.parts:
        quiet = result.twice.first if result.twice else by_arm(measure(spec, os.path.join(args.out, "twice-1")))
        result = dataclasses.replace(result, hog=hog(args, spec, quiet))
    if "aa" in args.parts:
        result = dataclasses.replace(result, aa=aa(args, spec))
    if "power" in args.parts:
        result = dataclasses.replace(result, power=power(args, spec))
    return result


def header(args: Options, result: Result) -> str:
    return (f"{result.kernel}; the point: {args.transport}, {args.duration:g}-s windows; "
            f"{result.cpus} host CPUs")


def twice_lines(t: Twice) -> list[str]:
    lines = ["counted: twice: the point in two boots, window by window (goodput Mbit/s; instructions per packet)",
             f"  {'rep':>3} {'goodput 1':>11} {'goodput 2':>11} {'diff %':>8} {'insn/pkt 1':>11} "
             f"{'insn/pkt 2':>11} {'diff %':>8}"]
    for r1, r2 in zip(t.first, t.second, strict=False):
        ipp1, ipp2 = r1.instructions_per_packet, r2.instructions_per_packet
        lines.append(f"  {r1.repetition:>3} {r1.goodput_mbps:>11.4f} {r2.goodput_mbps:>11.4f} "
                     f"{pct(r1.goodput_mbps, r2.goodput_mbps):>+8.3f} {ipp1:>11.1f} {ipp2:>11.1f} "
                     f"{pct(ipp1, ipp2):>+8.3f}")
    for what in ("goodput_mbps", "instructions_per_packet"):
        means = [statistics.fmean(getattr(r, what) for r in run) for run in (t.first, t.second)]
        within = [spread([getattr(r, what) for r in run]) for run in (t.first, t.second)]
        lines.append(f"  {what}: means {means[0]:.4f} and {means[1]:.4f} ({pct(*means):+.3f} %); spread within a "
                     f"boot {within[0]:.3f} % and {within[1]:.3f} %")
    return lines


def hog_lines(h: Hog) -> list[str]:
    quiet, busy = h.quiet, h.busy
    diffs = [pct(q.instructions_per_packet, b.instructions_per_packet) for q, b in zip(quiet, busy, strict=False)]
    goodput = [pct(q.goodput_mbps, b.goodput_mbps) for q, b in zip(quiet, busy, strict=False)]
    means = [statistics.fmean(r.instructions_per_packet for r in run) for run in (quiet, busy)]
    return [f"counted: hog: the point beside {h.hogs} busy loops (one per host CPU), against the first quiet boot",
            f"  instructions per packet, window by window: {', '.join(f'{d:+.3f}' for d in diffs)} %; "
            f"means {pct(*means):+.3f} %",
            f"  goodput, window by window: {', '.join(f'{d:+.4f}' for d in goodput)} %",
            f"  wall time of a window: quiet {statistics.median(r.wall_s for r in quiet):.2f} s, beside the hog "
            f"{statistics.median(r.wall_s for r in busy):.2f} s (median)"]


def aa_lines(args: Options, a: Identical) -> list[str]:
    v = a.verdict
    return [f"counted: aa: identical arms side by side in one boot, {args.pairs} pairs "
            f"({a.seconds:.0f} s with the boot)",
            f"  b/a of instructions per packet {v.ratio:.5f}, 95 % interval {v.low2:.5f}..{v.high2:.5f} "
            f"(±{(v.high2 - v.low2) / 2 * 100:.3f} %); flagged by the gate: {v.regressed}"]


def power_trial_line(t: PowerTrial) -> str:
    b, c = t.b, t.c
    return (f"b/a {b.ratio:.5f} ({b.low2:.5f}..{b.high2:.5f}) {'FLAGGED' if b.regressed else 'missed'}; "
            f"c/a {c.ratio:.5f} ({c.low2:.5f}..{c.high2:.5f}) {'FALSE ALARM' if c.regressed else 'quiet'}; "
            f"{t.seconds:.0f} s")


def power_lines(args: Options, p: Power) -> list[str]:
    trials = p.trials
    lines = [f"counted: power: +1 % = {p.instructions} extra BPF instructions per ESP packet ({p.calibration}); "
             f"{args.trials} trials of arms a (0), b ({p.instructions}), c (0), {args.power_pairs} pairs each"]
    lines += [f"  trial {n}: {power_trial_line(t)}" for n, t in enumerate(trials)]
    lines.append(f"  +1 % flagged {sum(t.b.regressed for t in trials)} of {args.trials}; identical arms flagged "
                 f"{sum(t.c.regressed for t in trials)} of {args.trials}; the change as measured "
                 f"{statistics.fmean((t.b.ratio - 1) * 100 for t in trials):+.2f} % (mean); a trial (three arms, a "
                 f"boot) took {statistics.median(t.seconds for t in trials):.0f} s (median), one comparison two "
                 "thirds of it")
    return lines


def page(args: Options, result: Result) -> str:
    """Each part's figures, in the order they ran."""
    lines = [f"counted: {header(args, result)}"]
    if result.twice:
        lines += twice_lines(result.twice)
    if result.hog:
        lines += hog_lines(result.hog)
    if result.aa:
        lines += aa_lines(args, result.aa)
    if result.power:
        lines += power_lines(args, result.power)
    return "\n".join(lines)


BENCHMARK = Benchmark("counted", Options, run, page, root="the counted backend's guests, namespaces")

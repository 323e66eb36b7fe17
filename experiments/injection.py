"""A slowdown of kernel IPsec by a chosen percentage, to check what the regression gate detects.

::

    calibration (once per kernel and suite; cached)
        the suite's CPU-bound IPsec point, arms 0 and CALIBRATION_INSTRUCTIONS extra BPF
        instructions per ESP packet (ipsec.slowdown), interleaved
        -> c0: its CPU cost per packet (µs)    k: what one extra instruction adds to it (µs)

    regress --inject-slowdown P
        N = P/100 * c0 / k instructions
        the suite with arms a (nothing added) and b (N), interleaved, in one guest
        -> the gate's verdicts on arm b against arm a, and the slowdown as measured:
           arm b / arm a of the CPU cost per packet at the CPU-bound point, with its interval

What "a slowdown of P %" means here: the IPsec profile's CPU cost per packet at the suite's
CPU-bound point (its highest rate, where the emulator's CPU sets the throughput) grows by
P %, as it would if the kernel's ESP path got slower by that much of the whole per-packet
work; its throughput there falls by about P/(100+P).  The measured effect is printed next to
the requested one, so the injection is checked by a measurement that does not depend on
the gate's verdicts.
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import os
import platform
from collections.abc import Callable, Sequence

from analysis.regress import arm_records, by_repetition, judge_paired, on_clock, pairs_of
from experiments.engine.plan import SweepSpec
from ipsec.slowdown import MAX_INSTRUCTIONS
from testbed import names, umlkernel
from testbed.backends.base import INSTRUCTIONS
from testbed.record import FIELD, Group, Record
from testbed.rundir import atomic_write, load_results

#: Bumped when what a calibration measures changes (2: every arm carries the same chain of filters, arm a
#: with nothing to burn in them, so that the arms differ in the extra instructions alone).
REVISION = 2
#: Extra instructions of the calibration's slowed arm: enough for a change far above the noise.
CALIBRATION_INSTRUCTIONS = 6000
#: ... on a counted backend, whose noise is far smaller: near the slowdowns it plants, since an extra BPF
#: instruction's cost is not the same at every size of the program (counted: 2.65 instructions of the guest each
#: at 445 and 594 of them, 1.33 at 6000; bench counted, 2026-11-28).
COUNTED_CALIBRATION_INSTRUCTIONS = 500
CALIBRATION_REPETITIONS = 4
#: The metric the slowdown is defined on, and where.
METRIC = FIELD.cpu_us_per_packet


class InjectionError(RuntimeError):
    """A calibration that could not measure the injected cost, or a slowdown it cannot make."""


def cache_path() -> str:
    return os.path.join(names.cache_dir(), "injection.json")


def kernel_identity(kernel: str, uml_kernel: str | None = None, crypto: str | None = None) -> str:
    """What a calibration depends on of the kernel: the backend chosen, the host's release and the
    UML image that would boot (path, size, date), whichever of them the backend uses, and the crypto drivers a
    counted guest runs (``--qemu-crypto``: the generic code costs other instructions a packet)."""
    try:
        image = umlkernel.select(uml_kernel).path
    except umlkernel.KernelUnavailableError:
        image = uml_kernel or "linux.uml"
    try:
        st = os.stat(image)
        stamp = f"{os.path.abspath(image)}:{st.st_size}:{int(st.st_mtime)}"
    except OSError:
        stamp = image
    from testbed.backends.qemu import crypto_tag

    tag = crypto_tag(crypto)
    return f"{kernel}:{platform.release()}:{stamp}" + (f":{tag}" if tag else "")


@dataclasses.dataclass(frozen=True)
class Calibration:
    """What one extra instruction per ESP packet costs at a suite's CPU-bound point."""

    kernel: str
    suite: str
    point: str                 # the point, in words
    us_per_packet: float       # c0: the CPU cost per packet with nothing added (in ``unit``)
    us_per_instruction: float  # k (in the same unit)
    instructions: int          # the calibration's slowed arm
    repetitions: int
    measured: str              # when (UTC, ISO 8601)
    unit: str = "µs"           # of the costs: µs of CPU, or instructions (the counted backend's)

    def describe(self) -> str:
        """What one extra instruction costs against a packet's cost, in words."""
        if self.unit == "µs":
            return (f"{self.us_per_instruction * 1e3:.2f} ns per extra instruction against {self.us_per_packet:.1f} µs "
                    f"per packet at {self.point}")
        return (f"{self.us_per_instruction:.2f} instructions of the guest per extra BPF instruction against "
                f"{self.us_per_packet:.0f} per packet at {self.point}")

    def instructions_for(self, pct: float) -> int:
        """The extra instructions for a slowdown of ``pct`` percent (see the module docstring)."""
        if not 0 <= pct <= 100:
            raise InjectionError(f"a slowdown must be 0..100 %, not {pct!r}")
        n = round(pct / 100 * self.us_per_packet / self.us_per_instruction)
        if n > MAX_INSTRUCTIONS:
            raise InjectionError(f"a {pct:g} % slowdown needs {n} extra instructions per ESP packet; at most "
                                 f"{MAX_INSTRUCTIONS} can be added")
        return n


def ipsec_cpu_bound(records: Sequence[Record]) -> list[Record]:
    """The records of the IPsec point at the highest rate (the suite's CPU-bound point)."""
    ipsec = [r for r in records if r.profile != "none" and not r.failed]
    if not ipsec:
        raise InjectionError("the run has no IPsec point")
    top = max(float(r.rate_mbit) for r in ipsec)
    at_top = [r for r in ipsec if float(r.rate_mbit) == top]
    sizes = {r.size_bytes for r in at_top}
    profiles = {r.profile for r in at_top}
    if len(sizes) > 1 or len(profiles) > 1:
        raise InjectionError(f"the suite has several IPsec points at its highest rate ({top:g} Mbit/s): "
                             "the slowdown is defined on one")
    return at_top


def describe(record: Record) -> str:
    return (f"{record.profile} {record.mode} IPv{record.ip_version} "
            f"{float(record.rate_mbit):g} Mbit/s {record.size_mode} {record.size_bytes} B")


@dataclasses.dataclass(frozen=True)
class Effect:
    """Arm ``arm`` against arm a at the CPU-bound point: the measured slowdown."""

    arm: str
    instructions: int
    ratio: float
    low: float
    high: float
    n_base: int
    n_arm: int

    @property
    def pct(self) -> float:
        return (self.ratio - 1) * 100


def effect(records: Sequence[Record], arm: str, base: str = "a", confidence: float = 0.95) -> Effect:
    """The CPU cost per packet of arm ``arm`` over arm ``base`` at the CPU-bound point, with its
    two-sided interval: the geometric mean of the repetitions' ratios, pair by pair (the arms'
    repetitions of one number are measured side by side; :func:`analysis.regress.judge_paired`)."""
    top = ipsec_cpu_bound(records)
    metric = metric_of(top)
    then, now = arm_records(top, base), arm_records(top, arm)
    point = Group.of(then[0] if then else top[0])
    pairs = pairs_of(then, now, point, metric)
    if len(pairs) < 2:
        raise InjectionError(f"the CPU-bound point has {len(pairs)} pairs of measured repetitions in arms "
                             f"{base} and {arm}: at least 2 are needed")
    ratio, _bound, _df, _regressed, low, high = judge_paired(pairs, 0.5, confidence, -1)
    insns = {r.injected_instructions or 0 for r in now}
    return Effect(arm, max(insns), ratio, low, high, len(by_repetition(then, point, metric)),
                  len(by_repetition(now, point, metric)))


def metric_of(records: Sequence[Record]) -> str:
    """The cost per packet the slowdown is defined on, as the records have it: CPU time, or instructions (the
    counted backend's)."""
    return on_clock((METRIC,), records)[0]


def calibrate_from(records: Sequence[Record], kernel: str, suite: str) -> Calibration:
    """The calibration a run with arms a (0) and b (:data:`CALIBRATION_INSTRUCTIONS`) gives."""
    top = ipsec_cpu_bound(records)
    e = effect(records, "b")
    base = arm_records(top, "a")
    a = list(by_repetition(base, Group.of(base[0]), metric_of(top)).values())
    c0 = math.fsum(a) / len(a)
    if e.low <= 1.0 or e.instructions <= 0:
        raise InjectionError(f"the calibration could not measure the added cost: {e.instructions} instructions "
                             f"changed the CPU cost per packet by {e.pct:+.1f} % ({e.low:.3f}..{e.high:.3f}); "
                             "is the machine busy with something else?")
    return Calibration(kernel=kernel, suite=suite, point=describe(top[0]), us_per_packet=c0,
                       us_per_instruction=(e.ratio - 1) * c0 / e.instructions, instructions=e.instructions,
                       repetitions=min(e.n_base, e.n_arm),
                       measured=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                       unit="µs" if metric_of(top) == METRIC else "instructions")


def load_calibration(kernel: str, suite: str, path: str | None = None) -> Calibration | None:
    try:
        with open(path or cache_path()) as f:
            entry = json.load(f).get(f"{kernel}|{suite}")
        return Calibration(**entry) if entry else None
    except (OSError, ValueError, TypeError):
        return None


def save_calibration(cal: Calibration, path: str | None = None) -> None:
    path = path or cache_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        data = {}
    data[f"{cal.kernel}|{cal.suite}"] = dataclasses.asdict(cal)
    atomic_write(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def calibration_instructions(clock: str) -> int:
    """The calibration's slowed arm for a backend whose meter counts on ``clock``."""
    return COUNTED_CALIBRATION_INSTRUCTIONS if clock == INSTRUCTIONS else CALIBRATION_INSTRUCTIONS


def calibrated(suite: str, spec: SweepSpec, kernel: str, measure: Callable[[SweepSpec, str], int], base_dir: str,
               say: Callable[[str], None] = lambda m: None, recalibrate: bool = False,
               instructions: int = CALIBRATION_INSTRUCTIONS) -> Calibration:
    """The calibration of ``suite`` (its sweep ``spec``) on ``kernel`` (see :func:`kernel_identity`):
    cached, or measured now with ``measure(spec, run_dir)`` (a sweep; returns its exit status) and cached."""
    # the suite's name and what it measures: a changed suite is calibrated again
    what = json.dumps(spec.to_json(), sort_keys=True) + (f"+{instructions}" if instructions != CALIBRATION_INSTRUCTIONS
                                                         else "") + f"/{REVISION}"
    suite = f"{suite}:{hashlib.sha256(what.encode()).hexdigest()[:10]}"
    cal = None if recalibrate else load_calibration(kernel, suite)
    if cal is not None:
        say(f"calibration of {cal.measured}: {cal.describe()} ({cache_path()})")
        return cal
    top = spec.rates_mbit[-1]
    # a noisy machine can hide the added cost in a few repetitions: once more with twice as many
    for attempt, repetitions in enumerate((CALIBRATION_REPETITIONS, 2 * CALIBRATION_REPETITIONS), 1):
        run_dir = os.path.join(base_dir, "calibration" if attempt == 1 else f"calibration{attempt}")
        say(f"calibrating the slowdown on the suite's CPU-bound point ({top:g} Mbit/s): arms of 0 and "
            f"{instructions} extra instructions per ESP packet, {repetitions} repetitions "
            "each; cached for this kernel")
        rc = measure(dataclasses.replace(spec, rates_mbit=(top,), arms=(0, instructions),
                                         repetitions=repetitions, max_repetitions=None), run_dir)
        if rc != 0:
            raise InjectionError(f"the calibration's sweep failed (exit {rc}); its run directory is {run_dir}")
        try:
            cal = calibrate_from(load_results(run_dir), kernel, suite)
            break
        except InjectionError as e:
            if attempt == 2:
                raise
            say(f"{e}; measuring again with {2 * repetitions} repetitions")
    save_calibration(cal)
    say(f"calibrated: {cal.describe()}")
    return cal

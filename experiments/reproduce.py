"""The reproduction engine: one seed's experiment as named parts, measured into one run directory.

A seed's module (:mod:`experiments.catalogue`) describes its experiment as
:class:`Part` objects: each is a :class:`~experiments.engine.sweep.SweepSpec` (or a series of
request/response transactions) with a name the seed's reference file
(``analysis/reference/seed00N.json``) uses in its ``where.part``.  This module runs
them::

    RUN/meta.json                the seed, every part's spec, the machine
    RUN/<part>/results.jsonl     one line per measured point, as the sweep writes it
    RUN/<part>/meta.json
    RUN/comparison.json          published numbers next to ours, claims judged (host, after)
    RUN/report.html

All parts run in one process (one User-Mode Linux boot when the host kernel has no
ESP); running the script again on the same directory measures only what is missing.

When every part is measured, claims whose values' 95 % intervals straddle a bound of their
range (``undecided``, :mod:`analysis.reproduction`) get more repetitions of the points they rest on,
one round at a time, while the job's time budget (``--budget``, 10 minutes from the command's start
by default) allows what each would take; what it would take where the budget ran out is printed,
and the report says it per claim.

``--scale`` divides every link rate of the seed by a factor (given, or ``auto``: found by a
short calibration of this machine's capacity for the seed's heaviest point,
:mod:`experiments.calibrate`), so that the shaped link, not the emulator's CPU, bounds the
points. meta.json records the factor and how it was found; the report says what a scaled run
can show (bytes on the wire, protocol behaviour) and what it cannot (the seed's CPU costs).

With ``auto`` (the default) each part is planned in the regime its claims need
(:func:`plan_regimes`): the parts of claims whose seed's points were bound by its link at the
calibrated rates; the parts of claims whose seed's points were bound by its own CPU unshaped
(``<part>_cpu``, :data:`CPU_REGIME_MBIT`), so that this machine's CPU bounds them as the seed's
did; a part serving both kinds in both.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import platform
import sys
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from analysis.reproduction import (
    NORMALIZED,
    STRADDLES,
    TRANSACTION_MODE,
    UNDECIDED,
    ClaimVerdict,
    MeasuredValue,
    evaluate,
    load_reference,
)
from experiments.calibrate import scale_for, scaled_rates
from experiments.engine.plan import MAX_REPETITIONS, Point, needs_focus, unmeasured
from experiments.engine.sweep import by_point, run_sweep
from experiments.engine.sweep import note_interrupted as note_part
from experiments.job import INCOMPLETE, Job, Part
from experiments.machine import machine_meta
from experiments.progress import progress_bar, progress_callback
from ipsec import ike
from testbed import backends, counting, rundir
from testbed.record import FIELD, PLAIN_PROFILE, Record, TransactionRecord
from topologies import build_spec
from topologies.shaping import ShapingSpec

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SeedOption:
    """An option of one seed's experiment (``ipsec-testbed reproduce SEED --NAME``), as data: the
    command line makes it an option, the seed's ``parts`` reads its value as an attribute.

    ``flag``: ``--bulk-seconds`` (read as ``bulk_seconds``); ``kind``: int, float or str; a tuple
    ``default`` makes it comma-separated values of ``kind``; ``choices``: the values allowed.
    ``help`` may say ``%(default)s``.
    """

    flag: str
    default: Any
    help: str
    kind: type = str
    metavar: str | None = None
    choices: tuple = ()

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def many(self) -> bool:
        return isinstance(self.default, tuple)


@dataclasses.dataclass(frozen=True)
class Reproduction:
    """A seed's experiment: its parts as a function of its options (``ipsec-testbed reproduce SEED``).

    ``name`` is also the name of the script that runs it (``experiments/<name>.py``).
    """

    seed: str
    name: str
    doc: str
    parts: Callable[[SimpleNamespace], list[Part]]
    options: tuple[SeedOption, ...] = ()
    epilog: str = ""
    #: The fastest link the seed had, and what says so (None: the seed does not say): no option may put a
    #: part's rates above it, where none of the seed's points was measured.
    fastest_link_mbit: float | None = None
    fastest_link: str = ""

    @property
    def prog(self) -> str:
        return f"ipsec-testbed reproduce {self.seed}"

    def defaults(self) -> dict[str, Any]:
        """Every option of the seed at its default, by ``dest``."""
        return {o.dest: o.default for o in self.options}

    def select(self, values: Mapping[str, Any] | None = None, parts: Sequence[str] = (),
               **overrides: Any) -> list[Part]:
        """The parts for the seed's option ``values`` (the rest at their defaults), only those named in
        ``parts`` (all when empty), every spec with ``overrides`` (``repetitions``, ``duration_s``,
        ``udp_bitrate``, ``keying``: None leaves a part's own; a part whose keying is fixed keeps it)."""
        chosen = self.parts(SimpleNamespace(**{**self.defaults(), **(values or {})}))
        given = {k: v for k, v in overrides.items() if v is not None}
        if given:
            chosen = [dataclasses.replace(p, spec=dataclasses.replace(
                p.spec, **{k: v for k, v in given.items() if not (k == "keying" and p.keying_fixed)}))
                for p in chosen]
        if parts:
            names = {p.name for p in chosen}
            unknown = sorted(set(parts) - names)
            derived = [n for n in unknown if n.endswith("_cpu") and n.removesuffix("_cpu") in names]
            if derived:
                raise ValueError(f"--parts: {derived[0]} is how --scale auto measures "
                                 f"{derived[0].removesuffix('_cpu')} unshaped, where its claims need it: name "
                                 f"{derived[0].removesuffix('_cpu')}")
            if unknown:
                raise ValueError(f"--parts: unknown part {', '.join(unknown)}; parts: "
                                 f"{', '.join(p.name for p in chosen)}")
            chosen = [p for p in chosen if p.name in parts]
        if self.fastest_link_mbit:
            for p in chosen:
                fastest = max(p.spec.rates_mbit)
                if fastest > self.fastest_link_mbit:
                    raise ValueError(f"{p.name}: {fastest:g} Mbit/s is above the seed's fastest link, "
                                     f"{self.fastest_link_mbit:g} Mbit/s ({self.fastest_link}): none of its points "
                                     "was measured there; for this machine's CPU as the limit, --scale auto "
                                     "measures the parts whose claims need it unshaped")
        return chosen

    def refusal(self, parts: Sequence[Part], named: Sequence[str], scale: str | float) -> str | None:
        """Why ``parts`` (``named`` by ``--parts``) at ``scale`` would judge none of their claims, or None:
        a named part whose claims all rest on the seed's own CPU, at rates divided by a factor that
        makes its links the limit here."""
        if scale == "auto" or float(scale) == 1.0 or not named:
            return None
        reference = load_reference(self.seed)
        kinds = claim_kinds(parts, reference)
        for p in parts:
            if kinds[p.name] == {"cpu"}:
                ids = [c["id"] for c in reference.get("claims", []) if _rests_on(c, p)]
                return (f"--parts {p.name} with --scale {float(scale):g}: its claims ({', '.join(ids)}) rest on "
                        f"the seed's own CPU, and at rates divided by {float(scale):g} its links bound its points: "
                        f"none could be judged; --scale auto measures it unshaped, --scale 1 at the seed's rates")
        return None


# -- measuring ----------------------------------------------------------------------------

def network_of(part: Part) -> tuple:
    """What a transactions part's network is made of: parts with the same are measured in one network,
    their arms interleaved (:func:`run_transactions`)."""
    spec = part.spec
    return (spec.topology, spec.clients, spec.mtu, spec.pmtu, float(spec.rates_mbit[0]), spec.ip_versions[0])


def transaction_groups(parts: Sequence[Part]) -> list[list[Part]]:
    """The transactions parts of ``parts`` by network, in their order (pure)."""
    groups: dict[tuple, list[Part]] = {}
    for part in parts:
        if part.transactions:
            groups.setdefault(network_of(part), []).append(part)
    return list(groups.values())


def plan_transactions(parts: Sequence[Part]) -> list[tuple[Part, Point]]:
    """The arms of ``parts`` (each part's profiles, keyed as the part says), repetition by repetition:
    every arm of a repetition one after the other, the order reversed every other repetition (ABBA, as
    the sweep), so that arms compared with each other are measured side by side in time (pure)."""
    arms = [(part, profile) for part in parts for profile in part.spec.profiles]
    out = []
    for rep in range(max(p.spec.repetitions for p in parts)):
        for part, profile in (arms if rep % 2 == 0 else arms[::-1]):
            if rep < part.spec.repetitions:
                spec = part.spec
                out.append((part, Point(spec.topology, profile, spec.mode, spec.ip_versions[0], "tcp",
                                        float(spec.rates_mbit[0]), part.transactions, TRANSACTION_MODE,
                                        spec.clients, "", rep)))
    return out


#: A repetition's transactions per arm are made in this many blocks, the arms taking turns block by block (the
#: order reversed every other block), so that a second or two of a slower machine falls on every arm alike.
TRANSACTION_BLOCKS = 5
#: Transactions made, and not counted, after each switch of arm: the first connections after the SAs change
#: pay for the new state (neighbours, the policy lookup's caches).
TRANSACTION_WARMUP = 20


@dataclasses.dataclass
class _ArmTotals:
    """One arm's blocks of one repetition, added up: its transactions' durations, their wall time, the CPU
    meter's busy and clock nanoseconds, the kernel's CPU shares weighted by each block's time, its SAs."""

    times: list[float] = dataclasses.field(default_factory=list)
    elapsed_s: float = 0.0
    cpu_ns: int = 0
    clock_ns: int = 0
    weighted: tuple[float, float, float] = (0.0, 0.0, 0.0)  # busy, system, softirq percent x seconds
    ike_sas: list[str] | None = None  # as the last block found them (none with static keying, or IPsec off)

    def add(self, times: list[float], elapsed_s: float, cpu_ns: int, clock_ns: int,
            shares: tuple[float, float, float], ike_sas: list[str] | None) -> None:
        self.times += times
        self.elapsed_s += elapsed_s
        self.cpu_ns += cpu_ns
        self.clock_ns += clock_ns
        self.weighted = tuple(w + share * elapsed_s for w, share in zip(self.weighted, shares, strict=True))
        self.ike_sas = ike_sas

    def shares(self) -> dict[str, float]:
        """The kernel's CPU shares over the repetition, as a record's fields."""
        total = self.elapsed_s or 1.0
        busy, system, softirq = (w / total for w in self.weighted)
        return {"cpu_kernel_busy_pct": busy, "cpu_system_pct": system, "cpu_softirq_pct": softirq}


def _blocks(count: int) -> list[int]:
    """``count`` transactions as :data:`TRANSACTION_BLOCKS` blocks, as even as they go (pure)."""
    n = max(1, min(TRANSACTION_BLOCKS, count))
    return [count // n + (1 if i < count % n else 0) for i in range(n)]


def run_transactions(parts: Sequence[Part], out_dir: str, progress=None) -> dict:
    """Measure the transactions parts ``parts`` (one network: :func:`network_of`) into each part's
    ``out_dir/<part>/results.jsonl``, their arms interleaved: repetition by repetition
    (:func:`plan_transactions`), and within a repetition block by block (:data:`TRANSACTION_BLOCKS`), each
    arm's record the whole repetition's transactions.  What a part has already is not measured again.
    Returns counts."""
    from experiments import transactions
    from experiments.engine.counters import proc_stat_shares
    from experiments.engine.measure import switch_ipsec
    from topologies.network import Network

    if len({network_of(p) for p in parts}) != 1:
        raise ValueError(f"parts {', '.join(p.name for p in parts)}: not one network")
    planned = plan_transactions(parts)
    done = {(part.name, r.profile, r.repetition) for part in parts
            for r in rundir.load_existing(os.path.join(out_dir, part.name), required=(), kind=TransactionRecord)
            if not r.failed}
    todo = [(part, point) for part, point in planned if (part.name, point.profile, point.repetition) not in done]
    meter = backends.current().cpu_meter()
    for part in parts:
        rundir.start_run(os.path.join(out_dir, part.name), machine_meta(), sweep=part.spec.to_json(),
                         transactions=part.transactions, cpu_accounting=meter.method)
    measured = collections.Counter()
    try:
        if todo:
            spec = parts[0].spec
            family = spec.ip_versions[0]
            topo = build_spec(spec.topology, clients=spec.clients, mtu=spec.mtu, pmtu=spec.pmtu)
            client, server = topo.flows[0]
            with Network(topo, shaping=ShapingSpec(rate_mbit=spec.rates_mbit[0])) as net, \
                    contextlib.ExitStack() as files:
                out = {p.name: files.enter_context(rundir.open_results(os.path.join(out_dir, p.name))) for p in parts}
                # one answering end for every arm and block (they differ only in the SAs between the two)
                srv = files.enter_context(transactions.Server(net.ns(server), family))
                cns, addr = net.ns(client), net.addr(server, family)
                current: tuple = ("none", None, None)

                def switch(part: Part, point: Point) -> None:
                    nonlocal current
                    arm = (point.profile, part.spec.keying, part.spec.mode)
                    if arm != current and (arm[0] != PLAIN_PROFILE or current[0] != PLAIN_PROFILE):
                        # another profile, keying or mode: what is up comes down first
                        switch_ipsec(net, "", point.profile, part.spec.mode, (point.ip_version,), part.spec.keying)
                    current = arm

                for rep in sorted({point.repetition for _, point in todo}):
                    arms = [(part, point) for part, point in todo if point.repetition == rep]
                    if progress:
                        progress(arms[0][1], None, len(planned) - len(todo) + sum(measured.values()), len(planned))
                    totals = [_ArmTotals() for _ in arms]
                    for b, count in enumerate(_blocks(arms[0][0].transactions)):
                        for i in (range(len(arms)) if b % 2 == 0 else reversed(range(len(arms)))):
                            part, point = arms[i]
                            switch(part, point)
                            transactions.durations(cns, addr, family, TRANSACTION_WARMUP)
                            c0, s0 = meter.sample(), proc_stat_shares()
                            got, took = transactions.durations(cns, addr, family, count)
                            c1, s1 = meter.sample(), proc_stat_shares()
                            transactions.check_server(srv)
                            totals[i].add(got, took, c1.cpu_ns - c0.cpu_ns, c1.clock_ns - c0.clock_ns,
                                          s0.until(s1), net.negotiated_sas() or None)
                    for (part, point), t in zip(arms, totals, strict=True):
                        record = TransactionRecord(
                            **point.fields(), **dataclasses.asdict(transactions.summarize(t.times, t.elapsed_s)),
                            cpu_busy_pct=100.0 * t.cpu_ns / (t.clock_ns * meter.cpus),
                            **t.shares(), keying=part.spec.keying, ike_sas=t.ike_sas,
                            backend=backends.current().name, kernel_release=platform.release(),
                            time=rundir.now_iso())
                        rundir.append(out[part.name], record.to_json())
                        measured[part.name] += 1
                        if progress:
                            progress(point, record, len(planned) - len(todo) + sum(measured.values()), len(planned))
    finally:
        meter.close()
        for part in parts:
            left = sum(1 for p, _ in todo if p is part)
            rundir.finish_run(os.path.join(out_dir, part.name), points_measured=measured[part.name],
                              complete=measured[part.name] == left)
    return {"planned": len(planned), "already": len(planned) - len(todo), "measured": sum(measured.values()),
            "failed": 0}


#: The link rate of a part in the cpu regime: above what an emulated host here carries, so that the CPU,
#: not the link, bounds its points (the bound monitor says whether it did, point by point).
CPU_REGIME_MBIT = 10000.0


def _rests_on(claim: Mapping[str, Any], part: Part) -> bool:
    """Whether ``claim`` rests on ``part``: it names the part (or what the part answers), or names none."""
    check = claim["check"]
    named: set[str] = set()
    for key in ("select", "num", "den"):
        value = check.get(key, {}).get("part")
        if value is not None:
            named |= set(value if isinstance(value, list) else [value])
    return not named or part.name in named or part.reference in named


def claim_kinds(parts: Sequence[Part], reference: Mapping[str, Any]) -> dict[str, set[str]]:
    """For each part, what bounded the seed's own points in the claims that rest on it (pure): "link",
    "cpu", or "" for a claim that names neither.  A claim that names no part rests on every part."""
    kinds: dict[str, set[str]] = {p.name: set() for p in parts}
    for claim in reference.get("claims", []):
        for p in parts:
            if _rests_on(claim, p):
                kinds[p.name].add(claim.get("seed_bound") or "")
    return kinds


def plan_regimes(parts: Sequence[Part], factor: float, reference: Mapping[str, Any]) -> list[Part]:
    """``parts`` planned in the regimes their claims need (pure): a sweep part whose claims rest on the
    seed's CPU is measured unshaped as ``<name>_cpu`` (its rates collapse into one, standing for the
    seed's fastest), and at the rates divided by ``factor`` too when other claims, or none, rest on it;
    a transactions part at the divided rates."""
    kinds = claim_kinds(parts, reference)
    out = []
    for part in parts:
        if _stays_shaped(part, kinds[part.name]):
            out.append(dataclasses.replace(part, regime="link", spec=dataclasses.replace(
                part.spec, rates_mbit=scaled_rates(part.spec.rates_mbit, factor))))
        if part.transactions or "cpu" not in kinds[part.name]:
            continue
        out.append(dataclasses.replace(part, name=f"{part.name}_cpu", regime="cpu",
                                       seed_rate_mbit=max(part.spec.rates_mbit),
                                       title=f"{part.title} (unshaped: this machine's CPU the limit)",
                                       spec=dataclasses.replace(part.spec, rates_mbit=(CPU_REGIME_MBIT,))))
    return out


def shaped_parts(parts: Sequence[Part], reference: Mapping[str, Any]) -> list[Part]:
    """The parts :func:`plan_regimes` measures at shaped rates (what the calibration must keep link-bound)."""
    kinds = claim_kinds(parts, reference)
    return [p for p in parts if _stays_shaped(p, kinds[p.name])]


def _stays_shaped(part: Part, kinds: set[str]) -> bool:
    """Whether a part with claims of ``kinds`` is measured at shaped rates: a transactions part, or one that
    some claim other than the seed's CPU's rests on, or none does."""
    return bool(part.transactions or "cpu" not in kinds or kinds - {"cpu"})


def scale_parts(parts: Sequence[Part], factor: float) -> list[Part]:
    """``parts`` with every link rate divided by ``factor``."""
    if factor == 1.0:
        return list(parts)
    return [dataclasses.replace(p, spec=dataclasses.replace(p.spec, rates_mbit=scaled_rates(p.spec.rates_mbit, factor)))
            for p in parts]


def choose_scale(requested: str | float | None, parts: Sequence[Part], out_dir: str) -> tuple[float, dict | None]:
    """The factor this run divides the seed's rates by, and its meta.json entry (None: the seed's rates).

    A run directory that was measured at a factor keeps it (a resumed ``auto`` run is not
    calibrated again); asking for another factor there is an error.
    """
    recorded = None
    if os.path.exists(os.path.join(out_dir, rundir.META_FILE)):
        recorded = rundir.load_meta(out_dir).scale
    if requested is None:
        if recorded and recorded.divisor != 1.0:
            raise ValueError(f"{out_dir} was measured with its rates divided by {recorded.factor:g}; "
                             f"add --scale {recorded.factor:g} (or auto) to resume it, or use another --out")
        return 1.0, None
    if recorded:
        factor = recorded.divisor
        if requested != "auto" and float(requested) != factor:
            raise ValueError(f"{out_dir} was measured with its rates divided by {factor:g}, not {requested:g}; "
                             "use that factor to resume it, or another --out")
        print(f"rates divided by {factor:g}, as when this run directory was started", file=sys.stderr)
        return factor, recorded
    if requested == "auto":
        print("calibrating: how fast this machine emulates the seed's heaviest point ...", file=sys.stderr,
              flush=True)
        factor, entry = scale_for(parts, say=lambda m: print(m, file=sys.stderr, flush=True))
        print(f"rates divided by {factor:g}: {entry['how']}", file=sys.stderr, flush=True)
        return factor, entry
    return float(requested), {"factor": float(requested), "how": f"given: --scale {float(requested):g}"}


def measure_parts(job: Job) -> int:
    """Measure every part of ``job``'s reproduction (what is missing of it) into its run directory;
    the lock is the caller's.  Returns :data:`~experiments.job.INCOMPLETE` when a part's points could
    not all be measured (0 with ``allow_failures``)."""
    work, out_dir = job.work, job.out_dir
    if work.scale == "auto":
        reference = load_reference(work.seed)
        factor, scale_entry = choose_scale(work.scale, shaped_parts(work.parts, reference), out_dir)
        parts = plan_regimes(work.parts, factor, reference)
    else:
        factor, scale_entry = choose_scale(work.scale, work.parts, out_dir)
        parts = scale_parts(work.parts, factor)
    command_line = list(job.command) or sys.argv
    rundir.start_run(out_dir, machine_meta(), seed=work.seed, script=f"ipsec-testbed reproduce {work.seed}",
                     command_line=command_line, parts=[p.to_json() for p in parts], scale=scale_entry)
    failed = 0
    groups = {p.name: group for group in transaction_groups(parts) for p in group}
    with progress_bar() as bar:
        for i, part in enumerate(parts, 1):
            group = groups.get(part.name, [part])
            if part is not group[0]:
                continue  # measured with the first of its group, interleaved
            name = "+".join(p.name for p in group)
            task = bar.add_task(name, total=sum(p.points() for p in group))
            progress = progress_callback(bar, task, prefix=f"[{i}/{len(parts)} {name}] ")
            if part.transactions:
                counts = run_transactions(group, out_dir, progress)
            else:
                counts = run_sweep(part.spec, os.path.join(out_dir, part.name), progress, command_line=command_line,
                                   lock=False)
            failed += counts["failed"]
            note = f", {counts['failed']} FAILED" if counts["failed"] else ""
            bar.update(task, completed=counts["planned"],
                       description=f"{name}: {counts['measured']} measured{note}")
    if work.budget_s:
        decide(parts, out_dir, job.started_unix or counting.user_time(), work.budget_s, command_line)
    missing = {part.name: len(unmeasured(part.spec, by_point(rundir.load_existing(os.path.join(out_dir, part.name)))))
               for part in parts if not part.transactions}
    missing = {name: n for name, n in missing.items() if n}
    rundir.finish_run(out_dir, points_missing=missing, attempts_failed=failed)
    if missing:
        print(missing_line(out_dir), file=sys.stderr)
        return 0 if job.allow_failures else INCOMPLETE
    return 0


# -- deciding the undecided claims ---------------------------------------------------------

#: Seconds a point's repetition costs beyond its window and warm-up (switching IPsec, iperf3's start).
POINT_OVERHEAD_S = 1.5
#: Repetitions from which the spread that "what deciding would take" rests on is taken as known: below
#: them an undecided claim gets its round while the budget allows one, whatever the estimate says
#: (the spread of two or three values is itself a guess).
SPREAD_KNOWN = 5


def decide(parts: Sequence[Part], out_dir: str, started_unix: float, budget_s: float,
           command_line: Sequence[str] = ()) -> dict[str, int]:
    """Add repetitions to the points of undecided claims, a round at a time (one more of each point a
    claim that can be decided within the budget rests on), until none is left undecided, none can be
    decided within ``budget_s`` from ``started_unix``, or the points have their most repetitions.
    Prints a line a round and, at the end, what each claim still undecided would take; returns counts."""
    rounds = measured = 0
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    while True:
        undecided = [c for c in evaluate(out_dir).claims if c.verdict == UNDECIDED]
        if not undecided:
            if rounds:
                say(f"deciding: every claim decided after {rounds} round{'s' if rounds != 1 else ''} "
                    f"({measured} repetitions)")
            break
        left = budget_s - (counting.user_time() - started_unix)
        plans = {c.id: plan_round_for(c, parts, out_dir) for c in undecided}
        pursued = [c for c in undecided if plans[c.id] and (cost_to_decide(c, plans[c.id], parts) <= left
                                                            or fewest_repetitions(c) < SPREAD_KNOWN)]
        focus = merge_plans([plans[c.id] for c in pursued])
        round_s = round_seconds(focus, parts)
        if not pursued or round_s > left:
            for c in undecided:
                say(f"undecided: {c.id}: {what_it_would_take(c, plans[c.id], parts, left)}")
            break
        rounds += 1
        say(f"deciding round {rounds}: {len(pursued)} undecided claim{'s' if len(pursued) != 1 else ''} "
            f"({', '.join(c.id for c in pursued)}): one more repetition of {sum(map(len, focus.values()))} points, "
            f"~{round_s:.0f} s of {left:.0f} s left")
        done = measure_focus(focus, parts, out_dir, command_line)
        if not done:  # every attempt failed: the points' own failure, not chance's (their records say why)
            say(f"deciding round {rounds} measured nothing: the points' attempts failed; stopping")
            break
        measured += done
    return {"rounds": rounds, "measured": measured}


def plan_round_for(claim: ClaimVerdict, parts: Sequence[Part], out_dir: str) -> dict[str, dict[tuple, int]]:
    """The points of ``claim``'s straddling values, by part: point key -> one usable repetition more than
    it has (its plain baseline too for an IPsec/plain claim); empty when they have their most."""
    plan: dict[str, dict[tuple, int]] = {}
    for part in parts:
        wanted = [d for d in claim.deciding if d.get("part") == part.name]
        if not wanted:
            continue
        part_dir = os.path.join(out_dir, part.name)
        if part.transactions:  # a transactions part is repeated whole: its profiles side by side
            done = collections.Counter(r.profile for r in rundir.load_existing(
                part_dir, required=(), kind=TransactionRecord) if not r.failed)
            most = max(done.values(), default=0)
            if most < MAX_REPETITIONS:
                plan[part.name] = {(part.name,): most + 1}
            continue
        for key, records in by_point(rundir.load_existing(part_dir)).items():
            first = records[0]
            if any(_same_point(first, d) or (claim.metric == NORMALIZED and _plain_twin(first, d)) for d in wanted):
                want = sum(1 for r in records if not r.failed) + 1
                if needs_focus(records, want):
                    plan.setdefault(part.name, {})[key] = want
    return plan


def _same_point(record: Record, where: Mapping[str, Any]) -> bool:
    """Whether ``record`` is of the point ``where`` (a claim's ``deciding`` entry) names, at the rate
    measured here."""
    rate = where.get("emulated_rate_mbit", where.get(FIELD.rate_mbit))
    fields = (FIELD.topology, FIELD.profile, FIELD.mode, FIELD.ip_version, FIELD.transport, FIELD.size_bytes,
              FIELD.size_mode, FIELD.clients)
    return all(getattr(record, f, None) == where[f] for f in fields if f in where) \
        and rate is not None and abs(float(record.rate_mbit) - float(rate)) < 1e-6


def _plain_twin(record: Record, where: Mapping[str, Any]) -> bool:
    """Whether ``record`` is the plain baseline of the IPsec point ``where`` names."""
    return record.profile == PLAIN_PROFILE and where.get(FIELD.profile) != PLAIN_PROFILE and \
        _same_point(record, {k: v for k, v in where.items() if k not in (FIELD.profile, FIELD.mode)})


def merge_plans(plans: Sequence[Mapping[str, Mapping[tuple, int]]]) -> dict[str, dict[tuple, int]]:
    out: dict[str, dict[tuple, int]] = {}
    for plan in plans:
        for part, points in plan.items():
            for key, n in points.items():
                out.setdefault(part, {})[key] = max(n, out.get(part, {}).get(key, 0))
    return out


def _part(parts: Sequence[Part], name: str) -> Part:
    return next(p for p in parts if p.name == name)


def point_seconds(part: Part) -> float:
    """About what one repetition of one of ``part``'s points costs."""
    if part.transactions:
        return part.estimate_seconds() / max(1, part.points())
    return part.spec.duration_s + part.spec.warmup_s + POINT_OVERHEAD_S


def round_seconds(focus: Mapping[str, Mapping[tuple, int]], parts: Sequence[Part]) -> float:
    """About what one round of ``focus`` costs: its points' repetitions, and a network per part."""
    total = 0.0
    for name, points in focus.items():
        part = _part(parts, name)
        total += (len(part.spec.profiles) if part.transactions else len(points)) * point_seconds(part) + 5.0
    return total


def _straddling(claim: ClaimVerdict) -> list[MeasuredValue]:
    """``claim``'s values whose interval straddles a bound, of those judged."""
    return [m for m in claim.measured if m.position == STRADDLES and (m.judged or not claim.left_out)]


def fewest_repetitions(claim: ClaimVerdict) -> int:
    """The fewest repetitions behind any of ``claim``'s straddling values."""
    straddling = _straddling(claim)
    return min((m.repetitions or 1) for m in straddling) if straddling else 1


def cost_to_decide(claim: ClaimVerdict, plan: Mapping[str, Mapping[tuple, int]], parts: Sequence[Part]) -> float:
    """About the seconds of rounds that would decide ``claim`` (:attr:`ClaimVerdict.decide_repetitions`;
    one round for a value with no interval yet; infinite when it cannot be said)."""
    if claim.decide_repetitions is not None:
        rounds = claim.decide_repetitions - fewest_repetitions(claim)
    elif any(m.ci95 is None for m in _straddling(claim)):
        rounds = 1
    else:
        return float("inf")
    return max(1, rounds) * round_seconds(plan, parts)


def what_it_would_take(claim: ClaimVerdict, plan: Mapping[str, Mapping[tuple, int]], parts: Sequence[Part],
                       left_s: float) -> str:
    """One line on what deciding ``claim`` would take, for the budget that ran out."""
    if not plan:
        return "its points have their most repetitions"
    cost = cost_to_decide(claim, plan, parts)
    if cost == float("inf"):
        return "a value on the bound itself: no number of repetitions can be said to decide it"
    return (f"about {claim.decide_repetitions or '?'} repetitions per point, ~{cost / 60:.1f} min more; "
            f"{max(0.0, left_s) / 60:.1f} min of the time budget left (--budget)")


def measure_focus(focus: Mapping[str, Mapping[tuple, int]], parts: Sequence[Part], out_dir: str,
                  command_line: Sequence[str]) -> int:
    """One round of ``focus``: each part's points to the repetitions asked; returns how many were measured."""
    measured = 0
    for name, points in focus.items():
        part = _part(parts, name)
        if not part.transactions:
            counts = run_sweep(part.spec, os.path.join(out_dir, name), command_line=list(command_line), lock=False,
                               focus=points)
            measured += counts["measured"]
    for group in transaction_groups(parts):
        wanted = max((n for p in group for n in focus.get(p.name, {}).values()), default=0)
        if wanted:  # the whole group to as many repetitions, so that its arms stay side by side
            more = [dataclasses.replace(p, spec=dataclasses.replace(p.spec,
                                                                    repetitions=max(wanted, p.spec.repetitions)))
                    for p in group]
            measured += run_transactions(more, out_dir)["measured"]
    return measured


def missing_line(out_dir: str) -> str | None:
    """One line on the points of each part the last run could not measure (None: it measured them all)."""
    last = rundir.load_meta(out_dir).last_run
    missing, failed = last.points_missing, last.attempts_failed or 0
    if not missing:
        return None
    return (f"INCOMPLETE: {sum(missing.values())} points could not be measured "
            f"({', '.join(f'{n} of {name}' for name, n in missing.items())}; {failed} attempts failed, their "
            "errors are in each part's results.jsonl); the same command measures them again "
            "(--allow-failures exits 0)")


def note_interrupted(out_dir: str, parts: Sequence[Part], why: str) -> None:
    """Mark the run directory (and the part that was being measured) as ended by ``why``."""
    for part in parts:
        if os.path.exists(os.path.join(out_dir, part.name, rundir.META_FILE)):
            note_part(os.path.join(out_dir, part.name), why)
    if os.path.exists(os.path.join(out_dir, rundir.META_FILE)):
        rundir.finish_run(out_dir, interrupted=why)


def dry_run(parts: Sequence[Part], out_dir: str, scale: str | float | None = None, budget_s: float = 0.0,
            seed: str | None = None) -> int:
    if scale == "auto":
        if seed is not None:
            parts = plan_regimes(parts, 1.0, load_reference(seed))
        print("rates: each part in the regime its claims need: the seed's rates divided by the factor a "
              "calibration finds at the start of the run (a few seconds per IPsec profile; shown here "
              f"unscaled) where the seed's link bound its points, unshaped ({CPU_REGIME_MBIT:g} Mbit/s, parts "
              "named *_cpu) where its own CPU did")
    elif scale is not None:
        parts = scale_parts(parts, float(scale))
        print(f"rates: the seed's divided by {float(scale):g}")
    total = 0.0
    for part in parts:
        s = part.spec
        if part.transactions:
            what = f"{part.transactions} request/response transactions"
        else:
            mode = "datagram" if s.transports == ("udp",) else s.size_mode
            what = (f"{'/'.join(s.transports)}, {mode} {','.join(map(str, s.sizes))} B, "
                    f"{','.join(f'{r:g}' for r in s.rates_mbit)} Mbit/s")
        seconds = part.estimate_seconds()
        total += seconds
        clients = f", {s.clients} clients" if s.clients > 1 else ""
        versions = ",".join(map(str, s.ip_versions))
        keyed = f", {ike.describe_keying(s.keying)}" if ike.is_ike(s.keying) else ""
        print(f"{part.name}: {part.title}\n    {s.topology}{clients}, {s.mode}{keyed}, IPv{versions}, "
              f"{what}, MTU {s.mtu}; {', '.join(s.profiles)}; {s.repetitions} x {s.duration_s} s: "
              f"{part.points()} points, ~{seconds / 60:.1f} min")
    sys.stdout.flush()
    print(f"{len(parts)} part{'s' if len(parts) != 1 else ''} into {out_dir}; estimated {total / 60:.1f} min "
          "plus a guest's boot where the work runs in one (the host kernel has no ESP, or --kernel asks for "
          "one); on the counted backend (--kernel qemu) a busy window takes several times its length", file=sys.stderr)
    if budget_s:
        print(f"then more repetitions for claims left undecided, until {budget_s / 60:g} min from the start "
              "(--budget)", file=sys.stderr)
    return 0

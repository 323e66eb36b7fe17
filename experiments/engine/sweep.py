"""The sweep engine: topology x profiles x IP versions x transports x rates x sizes, repeated
until precise.

::

    SweepSpec (data) --plan_round--> [Point, ...] --measure_with_retry--> run_dir/results.jsonl
                                                                          run_dir/meta.json

The network is built once per sweep: the shaped link is re-shaped for each rate and IPsec
is switched on and off in place.  Within a rate the points are measured in rounds (one
repetition of every point that still needs one, see :mod:`experiments.engine.plan`): first each
rate's rounds up to the minimum repetitions, then the rounds of the imprecise points go
round the rates until they are precise, have their most repetitions, or the time budget
is spent.  Each point's window, counters and verdict come from :mod:`experiments.engine.measure`.

Every point is appended to ``results.jsonl`` and flushed to disk as soon as it is measured;
running again on the same directory measures only what is missing, so a sweep killed at
any moment loses at most the point in flight.

A point whose iperf3 test fails (the server died, the test hung) is tried once more with
fresh servers; if that fails too it is recorded with ``"failed": true`` and the reason, and
the sweep goes on.  A failed point counts as missing: the next round (or the next run on
the directory) measures it again, and the analysis ignores the failed record.  A point the
monitor calls an ``anomaly`` counts as a repetition but is left out of means and precision.

One sweep at a time writes to a run directory: it holds the directory's lock
(:func:`testbed.rundir.locked`) while it runs, and a second sweep is refused.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import logging
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from experiments.engine import iperf, phases, probe
from experiments.engine.plan import (
    EXTRA_ROUNDS,
    Point,
    SweepSpec,
    at_common_speed_by_point,
    needs_focus,
    needs_minimum,
    needs_more,
    plan_points,
    plan_round,
    unusable_profiles,
    within_budget,
)
from experiments.engine.turns import Turns
from experiments.machine import machine_meta
from testbed import backends, counting, netns, rundir
from testbed.errors import Refused
from testbed.record import Record, point_key, usable
from topologies import build_spec
from topologies.shaping import ShapingSpec

log = logging.getLogger(__name__)

Progress = Callable[[Point, Record | None, int, int], None]


def by_point(records: Iterable[Record]) -> dict[tuple, list[Record]]:
    """Records grouped by their point (repetitions together)."""
    groups: dict[tuple, list[Record]] = collections.defaultdict(list)
    for r in records:
        groups[point_key(r)].append(r)
    return groups


def _next_round(spec: SweepSpec, rate: float, groups: Mapping[tuple, list[Record]],
                extras: bool = True, focus: Mapping[tuple, int] | None = None) -> list[Point]:
    """The points at ``rate`` that need another repetition (without ``extras``: to reach their
    minimum), each with its next repetition number, in measuring order.  With ``focus`` (point key ->
    usable repetitions wanted) only those points, until they have that many."""
    groups = at_common_speed_by_point(groups)
    given_up = unusable_profiles(spec, groups)
    rounds = collections.Counter()
    for p in plan_round(spec, rate, 0, lambda p: p.profile not in given_up):
        records = groups.get(p.point_key(), [])
        if focus is None:
            wanted = needs_more(spec, records, extras)
        else:
            wanted = p.point_key() in focus and needs_focus(records, focus[p.point_key()])
        if wanted:
            rounds[p.point_key()] = sum(1 for r in records if not r.failed)
    if not rounds:
        return []
    rep = min(rounds.values())
    return [Point(*p.point_key(), rounds[p.point_key()])
            for p in plan_round(spec, rate, rep, lambda p: p.point_key() in rounds)]


def minimum_left(spec: SweepSpec, rates: Sequence[float], groups: Mapping[tuple, list[Record]]) -> int:
    """Repetitions the points at ``rates`` still need to reach their minimum (none for a profile
    given up: :func:`~experiments.engine.plan.unusable_profiles`)."""
    given_up = unusable_profiles(spec, groups)
    return sum(max(0, spec.repetitions - sum(1 for r in groups.get(p.point_key(), []) if usable(r)))
               for rate in rates for p in plan_round(spec, rate, 0, lambda p: p.profile not in given_up))


class _Budget:
    """The spec's time budget for repetitions beyond a point's minimum (:func:`plan.within_budget`),
    counted from ``started_unix`` (the command's start, a guest's boot included) or else from its
    construction; once it is reached no such repetition is started."""

    def __init__(self, spec: SweepSpec, started_unix: float | None = None) -> None:
        self.spec = spec
        self.started = counting.user_time()  # the user's clock, in a counted guest too
        # what the command spent before the sweep began (a guest's boot) counts too
        self.before = max(0.0, self.started - started_unix) if started_unix is not None else 0.0
        self.over = False

    def allows(self, records: Sequence[Record], measured: int, rates: Sequence[float],
               groups: Mapping[tuple, list[Record]]) -> bool:
        """Whether the point with ``records`` may be measured now, ``measured`` points into the
        sweep, with ``rates`` (the current one first) still to go."""
        if needs_minimum(self.spec, records):
            return True
        if not self.over:
            elapsed = counting.user_time() - self.started
            each = elapsed / measured if measured else self.spec.duration_s + self.spec.warmup_s
            self.over = not within_budget(self.spec, self.before + elapsed, each,
                                          minimum_left(self.spec, rates, groups))
            if self.over:
                log.info("time budget of %g s reached after %.0f s: no more repetitions beyond the minimum",
                         self.spec.budget_s, self.before + elapsed)
        return not self.over


def is_complete(run_dir: str, spec: SweepSpec, extras: bool = True) -> bool:
    """Whether every point of ``spec`` has had all the repetitions it needs in ``run_dir``
    (without ``extras``: its minimum, as after the time budget stopped the others)."""
    groups = at_common_speed_by_point(by_point(rundir.load_existing(run_dir)))
    given_up = unusable_profiles(spec, groups)
    return not any(needs_more(spec, groups.get(p.point_key(), []), extras)
                   for p in plan_points(spec, 1) if p.profile not in given_up)


def note_interrupted(run_dir: str, why: str) -> None:
    """Mark the last run in ``meta.json`` as ended by ``why`` (its process could not).

    For a sweep that ran inside a guest: on SIGINT or SIGTERM the host kills the guest, whose
    own bookkeeping then never runs.
    """
    meta = rundir.read_meta(run_dir)
    if not meta.runs:
        return
    complete = None
    if meta.sweep:
        with contextlib.suppress(TypeError, ValueError):  # a sweep this version cannot read
            complete = is_complete(run_dir, SweepSpec.from_meta(meta.sweep))
    rundir.finish_run(run_dir, interrupted=why, **({} if complete is None else {"complete": complete}))


def run_sweep(spec: SweepSpec, run_dir: str, progress: Progress | None = None,
              command_line: list[str] | None = None, lock: bool = True, started_unix: float | None = None,
              turns: Turns | None = None, concurrent_with: str | None = None,
              focus: Mapping[tuple, int] | None = None) -> dict:
    """Measure every point of ``spec`` that ``run_dir`` still needs; returns counts.

    ``progress(point, record, done, total)`` is called before (record None) and after each
    point; ``total`` grows when points need more repetitions.  Needs root and, for IPsec
    profiles, a kernel with ESP.  With ``lock`` the run directory is locked for the sweep;
    pass False when the caller holds the lock already.  The spec's time budget counts from
    ``started_unix`` (Unix time: the command's start, before a guest booted) or from now.
    With ``turns`` every measurement window waits for its turn (:mod:`experiments.engine.turns`);
    ``concurrent_with`` names another testbed run measuring beside this one, in every record.
    With ``focus`` (point key -> usable repetitions wanted) only those points are measured, until
    they have that many (a reproduction deciding its undecided claims); the spec's minimum and
    precision rule are not applied then.
    """
    with rundir.locked(run_dir, "sweep") if lock else contextlib.nullcontext():
        return _run_sweep(spec, run_dir, progress, command_line, started_unix, turns, concurrent_with, focus)


def _run_sweep(spec: SweepSpec, run_dir: str, progress: Progress | None, command_line,
               started_unix: float | None = None, turns: Turns | None = None,
               concurrent_with: str | None = None, focus: Mapping[tuple, int] | None = None) -> dict:
    from experiments.engine.clients import Ahead
    from experiments.engine.measure import monitor_for
    from topologies.network import Network

    records = rundir.load_existing(run_dir)
    other = sorted({r.keying for r in records} - {spec.keying})
    if other:  # the keying is the run's, not a point's: its repetitions would be counted together
        raise Refused(f"{run_dir} holds points keyed {' and '.join(other)}; measure keyed {spec.keying} "
                      f"into another run directory (--out)")
    groups = by_point(records)
    rates = [r for r in spec.rates_mbit if _next_round(spec, r, groups, focus=focus)]
    already = len(records)
    # the plan's minimum, grown by what the precision asks for as the rounds go
    total = already + sum(len(_next_round(spec, r, groups, focus=focus)) for r in rates)
    if focus is None:
        total = max(total, len(plan_points(spec)))
    meter = backends.current().cpu_meter()
    rundir.start_run(run_dir, machine_meta(), command_line=command_line or sys.argv, sweep=spec.to_json(),
                     cpu_accounting=meter.method, speed_probe=meter.speed_probe or None)
    budget = _Budget(spec, started_unix)
    rounds = _Rounds(spec, groups, budget, rates, progress, already, total, turns=turns,
                     concurrent_with=concurrent_with)
    try:
        if rates:
            topo = build_spec(spec.topology, clients=spec.clients, mtu=spec.mtu, pmtu=spec.pmtu)
            netns.ensure_open_files(netns.open_files_for(len(topo.nodes)))
            with Network(topo, shaping=ShapingSpec(rate_mbit=rates[0])) as net, \
                    iperf.Servers(_flows(net, spec.ip_versions[0])) as servers, \
                    monitor_for(net, servers, meter) as monitor, rundir.open_results(run_dir) as out, \
                    (probe.Servers([net.ns(net.spec.flows[0][1])])
                     if spec.latency_probe and spec.probe_tool == probe.IRTT else contextlib.nullcontext()):
                rounds.net, rounds.servers, rounds.monitor, rounds.out = net, servers, monitor, out
                rounds.ahead = Ahead(net, spec, servers)
                gc.freeze()  # what exists now lives as long as the sweep: later collections skip it
                try:
                    # every rate's minimum repetitions first, then the extra rounds go round the
                    # rates, so that a time budget cuts every rate's extras alike
                    for rate in rates:
                        for _round in range(spec.repetitions + EXTRA_ROUNDS):
                            todo = _next_round(spec, rate, groups, extras=False, focus=focus)
                            if not todo:
                                break
                            rounds.measure(rate, todo)
                    for _round in range(spec.most_repetitions + EXTRA_ROUNDS):
                        todos = [(rate, _next_round(spec, rate, groups, extras=not budget.over, focus=focus))
                                 for rate in rates]
                        if not any(todo for _, todo in todos):
                            break
                        for rate, todo in todos:
                            if todo:
                                rounds.measure(rate, todo)
                finally:
                    rounds.ahead.close()
                    gc.unfreeze()  # a sweep run in a longer process (regress) leaves nothing pinned
                if rounds.ahead.killed:
                    log.info("%d time(s) the next point's clients were not ready within a warm-up",
                             rounds.ahead.killed)
    finally:
        rundir.finish_run(run_dir, points_measured=rounds.measured, points_failed=rounds.failed,
                          complete=is_complete(run_dir, spec, extras=not budget.over))
        meter.close()
    return {"planned": rounds.total, "already": already, "measured": rounds.measured, "failed": rounds.failed,
            "over_budget": budget.over}


@dataclasses.dataclass
class _Rounds:
    """Measures rounds of points on the sweep's network (set once it is built), keeping count."""

    spec: SweepSpec
    groups: dict[tuple, list[Record]]
    budget: _Budget
    rates: Sequence[float]
    progress: Progress | None
    already: int
    total: int  # the progress bar's end: grows with the rounds, shrinks when the budget stops them
    measured: int = 0
    failed: int = 0
    current: str = "none"  # the IPsec profile in place
    net: object = None
    servers: object = None
    monitor: object = None
    ahead: object = None
    out: object = None
    turns: Turns | None = None  # each window waits for its turn (regress --ab, paired)
    concurrent_with: str | None = None  # another run measuring beside this one (--allow-concurrent)
    since: float | None = None  # when the last point's record was built (monotonic s): the next one's phases start

    def measure(self, rate: float, todo: list[Point]) -> None:
        """One repetition of each point of ``todo`` at ``rate``, as far as the time budget allows."""
        from experiments.engine.measure import measure_with_retry, switch_ipsec

        spec, net = self.spec, self.net
        if net.shaping.rate_mbit != rate:
            net.reshape(ShapingSpec(rate_mbit=rate))
        coming = todo if not self.budget.over else \
            [p for p in todo if needs_minimum(spec, self.groups[p.point_key()])]
        self.total = max(self.total, self.already + self.measured + len(coming))
        for i, point in enumerate(todo):
            records = self.groups[point.point_key()]
            if not self.budget.allows(records, self.measured, self.rates, self.groups):
                # the repetitions still owed, these points' included (the rest are not measured)
                self.total = self.already + self.measured + minimum_left(spec, self.rates, self.groups)
                continue
            # the time since the last point's record was built, this point's own until its record is
            ledger = phases.Phases(self.since)
            if self.progress:
                self.progress(point, None, self.already + self.measured, self.total)
            ledger.lap(phases.BETWEEN)
            self.current = switch_ipsec(net, self.current, point.profile, spec.mode, spec.ip_versions, spec.keying)
            if point.arm:
                # every arm carries the same chain of filters: the arms differ in the extra instructions alone
                net.slow_esp(spec.arm_instructions(point.arm), spec.arm_chain)
            ledger.lap(phases.IPSEC)
            following = todo[i + 1] if i + 1 < len(todo) else None
            if self.turns:
                self.turns.wait()
                ledger.lap(phases.TURN)
            # the unloaded reference once a point: the path without the point's flows is the same for every
            # repetition (taken again only where no repetition has one, a failed probe's say)
            reference = not any(r.idle_rtt_ms is not None for r in records)
            record = measure_with_retry(net, point, spec, self.servers, self.monitor, self.ahead, following, ledger,
                                        reference)
            self.since = time.monotonic()
            record = dataclasses.replace(record, backend=backends.current().name,
                                         concurrent_with=self.concurrent_with, phases_s=ledger.seconds())
            if self.turns:
                self.turns.done()
            rundir.append(self.out, record.to_json())
            records.append(record)
            self.measured += 1
            self.failed += record.failed
            self.total = max(self.total, self.already + self.measured)  # a bar never counts past its end
            if self.progress:
                self.progress(point, record, self.already + self.measured, self.total)


def _flows(net, ip_version: int) -> list:
    from experiments.engine.clients import flows_of

    return flows_of(net, ip_version)


def summary(run_dir: str) -> dict:
    """Counts of a run directory's points by what bounded them (failed ones apart)."""
    counts = collections.Counter(r.bound or ("failed" if r.failed else "unclassified")
                                 for r in rundir.load_existing(run_dir))
    return dict(counts)

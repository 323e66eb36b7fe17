"""Check the sweep's point classes against tools that do not share its code: tc and the host.

    sudo ipsec-testbed bench bound_crosscheck                       # AES-GCM-256 at 100 Mbit/s
    sudo ipsec-testbed bench bound_crosscheck --rate 10 --sizes 100,1460

Runs a small packet-size sweep (the default sweep's, one repetition of 6 s per
point, the plain baseline and --profile) and, while it runs, keeps two accounts of its own:

- inside the kernel that runs the sweep, ``tc -s -j qdisc show`` in every testbed namespace
  once a second (the iproute2 binary, not the monitor's netlink code): the bytes each tbf sent
  and its backlog;
- on the host, the guest's CPU time from its cpuacct cgroup file every 0.2 s (or the whole
  machine's, when the sweep runs on the host kernel), with the host's clock.

Each point is measured for 6 s; the samples of both accounts that fall in its window (the
record's ``window_start_unix`` and ``window_s``, on the wall clock the guest shares with the
host) give the link's utilization (the busiest tbf's bytes between its first and last sample
there, with the uncertainty of when tc read them: a saturated guest takes a while to run tc),
how often a queue stood in front of it, and the CPU busy share, and the point is classed by
hand (where the utilization's uncertainty straddles a threshold, both classes are allowed): ``link`` when the shaper
sent at least 97 % of its rate with a queue in at least half of the samples, ``cpu`` when the
CPU was at least 90 % busy, ``other`` when neither. It prints that next to the sweep's own class
and evidence, and how many agree. The tc polling runs beside the sweep, so it adds some load
of its own; the figures are a cross-check, not a replacement.

The sweep boots User-Mode Linux when the host kernel has no ESP, as ``ipsec-testbed sweep`` does; the tc
poller runs beside it in the same kernel (a job this benchmark hands there), the CPU account on the host.
Exit status 1 when no point had samples enough to judge.
"""
from __future__ import annotations

import dataclasses
import glob
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence

from experiments import benchmark, doctor, runner
from experiments.benchmark import Benchmark, check_profiles_and_rate, option
from experiments.engine.plan import SweepSpec, default_sweep
from experiments.job import Job
from testbed.errors import Refused
from testbed.record import Bound, Record
from testbed.rundir import load_results

CPUACCT = "/sys/fs/cgroup/cpuacct"
#: tc is a process to start, which costs the guest's one CPU: once a second keeps the load small
TC_EVERY_S = 1.0
CPU_EVERY_S = 0.2
#: The same thresholds as the monitor's classes (README, "What bounded each point").
LINK_UTILIZATION = 0.97
QUEUE_BUSY = 0.5
CPU_BUSY = 0.90
#: What its jobs (the part in the sweep's kernel, the sweep) say they were started by.
COMMAND = ("ipsec-testbed", "bench", "bound_crosscheck")


@dataclasses.dataclass(frozen=True)
class Options:
    """The sweep's link, profile and sizes; checked on construction."""

    rate: float = option(100.0, "the shaped link's rate, Mbit/s")
    profile: str = option("aes-gcm-256", "the IPsec profile beside the plain baseline")
    sizes: tuple[int, ...] = option((100, 250, 500, 1000, 1460), "TCP MSS values, comma-separated")
    #: Not an option: where the sweep and tc's samples go, set on the host for the part that runs in the
    #: sweep's kernel (:func:`beside_the_sweep`); the job carries it there.
    files: str = dataclasses.field(default="", metadata={"internal": "the job's, set on the host"})

    def __post_init__(self) -> None:
        check_profiles_and_rate((self.profile,), self.rate, "--profile")
        if not self.sizes or not 88 <= min(self.sizes) <= max(self.sizes) <= 1460:
            raise ValueError(f"--sizes must be TCP MSS values in 88..1460 (IPv4 at MTU 1500), not "
                             f"{','.join(map(str, self.sizes))}")
        self.sweep()  # what the sweep itself refuses, before anything runs

    def sweep(self) -> SweepSpec:
        """One repetition of 6 s per point, plain and --profile, at --rate."""
        return default_sweep(rates_mbit=(self.rate,), profiles=(self.profile,), sizes=self.sizes, repetitions=1,
                             max_repetitions=1, duration_s=6.0)


def poll_tc(out_path: str, stop_path: str) -> None:
    """Inside the sweep's kernel: every testbed namespace's qdiscs, as tc prints them, until stop_path exists."""
    with open(out_path, "w") as out:
        while not os.path.exists(stop_path):
            for ns in sorted(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else ():
                if not ns.startswith("itb-"):
                    continue
                before = time.time()
                r = subprocess.run(["tc", "-n", ns, "-s", "-j", "qdisc", "show"], capture_output=True, text=True)
                after = time.time()
                t = (before + after) / 2  # tc read the counters somewhere in between
                if r.returncode:
                    continue
                for q in json.loads(r.stdout or "[]"):
                    if q.get("kind") == "tbf":
                        out.write(json.dumps({"t": t, "half": (after - before) / 2, "ns": ns, "dev": q.get("dev"),
                                              "sent_bytes": q.get("bytes"),  # tc's JSON names it "bytes"
                                              "backlog": q.get("backlog"), "drops": q.get("drops")}) + "\n")
            out.flush()
            time.sleep(TC_EVERY_S)


def beside_the_sweep(args: Options) -> int:
    """The part that runs in the sweep's kernel: the tc poller beside the sweep; the sweep's exit status."""
    stop = os.path.join(args.files, "stop")
    poller = threading.Thread(target=poll_tc, args=(os.path.join(args.files, "tc.jsonl"), stop), daemon=True)
    poller.start()
    rc = runner.sweep_apart(args.sweep(), os.path.join(args.files, "sweep"), command=COMMAND)
    open(stop, "w").close()
    poller.join()
    return rc


def its_job(args: Options) -> Job:
    """:func:`beside_the_sweep` as a job for the kernel the sweep runs on: one with the profile's IPsec."""
    job = BENCHMARK.job(args, COMMAND)
    return job.with_(out_dir=args.files,
                     work=dataclasses.replace(job.work, needs=doctor.needs((args.profile,)).capabilities))


class HostCpu(threading.Thread):
    """The guest's (or the machine's) CPU nanoseconds, read on the host with the host's clock."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, int]] = []
        self.path: str | None = None
        self.done = threading.Event()

    def run(self) -> None:
        before = set(glob.glob(f"{CPUACCT}/itb-*/cpuacct.usage"))
        started = time.monotonic()
        while not self.done.wait(CPU_EVERY_S):
            if self.path is None:
                new = set(glob.glob(f"{CPUACCT}/itb-*/cpuacct.usage")) - before
                if new:
                    self.path = new.pop()
                elif time.monotonic() - started > 20 and os.path.exists(f"{CPUACCT}/cpuacct.usage"):
                    self.path = f"{CPUACCT}/cpuacct.usage"  # no guest: the sweep runs on this kernel
                continue
            try:
                with open(self.path) as f:
                    self.samples.append((time.time(), int(f.read())))
            except OSError:
                pass

    @property
    def cpus(self) -> int:
        """What 100 % busy means: the guest runs on one host CPU; the machine has them all."""
        return (os.cpu_count() or 1) if self.path == f"{CPUACCT}/cpuacct.usage" else 1


def between(series: list, t0: float, t1: float) -> list:
    return [s for s in series if t0 <= s[0] <= t1]


def busiest_shaper(tc: list[dict]) -> list[dict]:
    """The samples of the tbf that sent the most bytes (the data's direction)."""
    by_q: dict[tuple, list[dict]] = {}
    for s in tc:
        by_q.setdefault((s["ns"], s["dev"]), []).append(s)
    return max(by_q.values(), key=lambda ss: ss[-1]["sent_bytes"] - ss[0]["sent_bytes"]) if by_q else []


def hand_class(util: float, queue: float, cpu: float) -> str:
    if util >= LINK_UTILIZATION and queue >= QUEUE_BUSY:
        return "link"
    return "cpu" if cpu >= CPU_BUSY else "other"


def hand_classes(util: float, unc: float, queue: float, cpu: float) -> set[str]:
    """The classes the hand check allows, given the utilization's uncertainty (tc's own run time)."""
    return {hand_class(u, queue, cpu) for u in (util - unc, util, util + unc)}


@dataclasses.dataclass(frozen=True)
class ByHand:
    """A point's own account from the samples in its window: the busiest tbf's utilization (with the uncertainty
    of when tc read it), the share of samples with a queue, the CPU busy share, and the classes they allow."""

    utilization: float
    uncertainty: float
    queue_busy: float
    cpu_busy_pct: float
    classes: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Checked:
    """One point: the sweep's class and evidence, the samples in its window, and the hand check (None: too few
    samples)."""

    profile: str
    size_bytes: int
    bound: Bound | None
    link_utilization: float | None
    queue_busy: float | None
    cpu_busy_pct: float | None
    tc_samples: int
    cpu_samples: int
    by_hand: ByHand | None

    @property
    def agree(self) -> bool:
        return self.by_hand is not None and self.bound in self.by_hand.classes


@dataclasses.dataclass(frozen=True)
class Judged:
    """Every point of the sweep against the hand check, with the accounts' sizes and where the files are."""

    files: str
    cpu_account: str | None
    cpus: int
    tc_samples: int
    cpu_samples: int
    points: tuple[Checked, ...]

    @property
    def judged(self) -> int:
        return sum(p.by_hand is not None for p in self.points)

    @property
    def status(self) -> int:
        """1 when no point could be judged."""
        return 0 if self.judged else 1


@dataclasses.dataclass(frozen=True)
class Swept:
    """The part in the sweep's kernel done (tc's samples and the sweep's records are in the files)."""

    status: int  # the sweep's


def check(records: Sequence[Record], tc: list[dict], cpu: list[tuple[float, int]], cpus: int,
          rate_mbit: float) -> tuple[Checked, ...]:
    """Each measured record against the busiest tbf's tc samples and the host's CPU samples (wall time, ns) in its
    window; ``cpus``: what 100 % busy means."""
    queue_series = busiest_shaper(tc)
    points = []
    for rec in records:
        t0 = rec.window_start_unix
        t1 = t0 + rec.window_s
        q = between([(s["t"], s) for s in queue_series], t0, t1)
        c = between(cpu, t0, t1)
        by_hand = None
        if len(q) >= 2 and len(c) >= 3:  # tc may run slowly when the guest's CPU is saturated
            span = q[-1][0] - q[0][0]
            util = (q[-1][1]["sent_bytes"] - q[0][1]["sent_bytes"]) * 8 / span / (rate_mbit * 1e6)
            unc = util * (q[0][1]["half"] + q[-1][1]["half"]) / span
            queue = sum(1 for _, s in q if s["backlog"]) / len(q)
            busy = 100 * (c[-1][1] - c[0][1]) / 1e9 / (c[-1][0] - c[0][0]) / cpus
            by_hand = ByHand(util, unc, queue, busy, tuple(sorted(hand_classes(util, unc, queue, busy / 100))))
        points.append(Checked(rec.profile, rec.size_bytes, rec.bound, rec.link_utilization, rec.queue_busy,
                              rec.cpu_busy_pct, len(q), len(c), by_hand))
    return tuple(points)


def judge(files: str, rate_mbit: float, cpu: HostCpu) -> Judged:
    """The sweep's points in ``files`` against tc's samples there and the host's CPU account."""
    with open(os.path.join(files, "tc.jsonl")) as f:
        tc = [json.loads(line) for line in f]
    records = [r for r in load_results(os.path.join(files, "sweep")) if not r.failed]
    return Judged(files, cpu.path, cpu.cpus, len(tc), len(cpu.samples),
                  check(records, tc, cpu.samples, cpu.cpus, rate_mbit))


def run(args: Options) -> Judged | Swept:
    """On the host: the CPU account beside the job that runs the tc poller and the sweep where the profile's
    IPsec runs (this process, or a guest), then the judgement.  In that job: :func:`beside_the_sweep`."""
    if args.files:
        return Swept(beside_the_sweep(args))
    files = tempfile.mkdtemp(prefix="itb-bench-crosscheck-")
    print(f"files in {files}", file=sys.stderr, flush=True)
    cpu = HostCpu()
    cpu.start()
    try:
        rc = runner.run(its_job(dataclasses.replace(args, files=files)), "ipsec-testbed bench bound_crosscheck",
                        benchmark.in_guest)
    finally:
        cpu.done.set()
        cpu.join()
    if rc:
        raise Refused(f"the sweep failed (exit {rc}); its files: {files}")
    return judge(files, args.rate, cpu)


def page(args: Options, result: Judged | Swept) -> str:
    """Each point's class next to the hand check, and how many agree (nothing for the part in the sweep's kernel:
    the host prints the page)."""
    if isinstance(result, Swept):
        return ""
    cpus = result.cpus
    lines = [f"files in {result.files}",
             f"host CPU account: {result.cpu_account} ({cpus} CPU{'s' if cpus > 1 else ''} = 100 %); "
             f"{result.tc_samples} tc samples, {result.cpu_samples} CPU samples, {len(result.points)} points",
             f"{'profile':<13}{'size':>5} | {'sweep: class':<12}{'util':>6}{'queue':>6}{'CPU %':>6}"
             f" | {'by hand: util':>13}{'queue':>6}{'CPU %':>6}  class     agree"]
    for p in result.points:
        hand = p.by_hand
        if hand is None:
            lines.append(f"{p.profile:<13}{p.size_bytes:>5} | too few samples in the window "
                         f"({p.tc_samples} tc, {p.cpu_samples} CPU)")
            continue
        lines.append(f"{p.profile:<13}{p.size_bytes:>5} | {p.bound:<12}{p.link_utilization:>6.3f}"
                     f"{p.queue_busy:>6.2f}{p.cpu_busy_pct:>6.0f} | {hand.utilization:>7.3f}±{hand.uncertainty:.3f}"
                     f"{hand.queue_busy:>6.2f}{hand.cpu_busy_pct:>6.0f}  {'/'.join(hand.classes):<9} "
                     f"{'yes' if p.agree else 'NO'}")
    lines.append(f"agree: {sum(p.agree for p in result.points)} of {result.judged} points")
    return "\n".join(lines)


BENCHMARK = Benchmark("bound_crosscheck", Options, run, page, root="namespaces, tc, the host's cgroup files",
                      status=lambda result: result.status)

"""Check the sweep's point classes against tools that do not share its code: tc and the host.

    sudo ipsec-testbed bench bound_crosscheck                       # AES-GCM-256 at 100 Mbit/s
    sudo ipsec-testbed bench bound_crosscheck --rate 10 --sizes 100,1460

Runs a small packet-size sweep (``ipsec-testbed sweep``, one repetition of 4 s per
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
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

from benchmarks import _common
from cli.options import csv
from experiments import runner
from experiments.engine.plan import default_sweep
from experiments.job import KernelChoice

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPUACCT = "/sys/fs/cgroup/cpuacct"
#: tc is a process to start, which costs the guest's one CPU: once a second keeps the load small
TC_EVERY_S = 1.0
CPU_EVERY_S = 0.2
#: The same thresholds as the monitor's classes (README, "What bounded each point").
LINK_UTILIZATION = 0.97
QUEUE_BUSY = 0.5
CPU_BUSY = 0.90


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


def inner(args: argparse.Namespace) -> int:
    """The part that runs in the sweep's kernel: the tc poller beside the sweep."""
    stop = os.path.join(args.out, "stop")
    poller = threading.Thread(target=poll_tc, args=(os.path.join(args.out, "tc.jsonl"), stop), daemon=True)
    poller.start()
    spec = default_sweep(rates_mbit=(args.rate,), profiles=(args.profile,), sizes=args.sizes, repetitions=1,
                         max_repetitions=1, duration_s=6.0)
    rc = runner.sweep_apart(spec, os.path.join(args.out, "sweep"), command=_common.sweep_command(spec))
    open(stop, "w").close()
    poller.join()
    return rc


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


def judge(out: str, rate_mbit: float, cpu: HostCpu) -> int:
    from testbed.rundir import load_results

    with open(os.path.join(out, "tc.jsonl")) as f:
        tc = [json.loads(line) for line in f]
    queue_series = busiest_shaper(tc)
    records = [r for r in load_results(os.path.join(out, "sweep")) if not r.failed]
    print(f"host CPU account: {cpu.path} ({cpu.cpus} CPU{'s' if cpu.cpus > 1 else ''} = 100 %); "
          f"{len(tc)} tc samples, {len(cpu.samples)} CPU samples, {len(records)} points")
    print(f"{'profile':<13}{'size':>5} | {'sweep: class':<12}{'util':>6}{'queue':>6}{'CPU %':>6}"
          f" | {'by hand: util':>13}{'queue':>6}{'CPU %':>6}  class     agree")
    agree = judged = 0
    for rec in records:
        t0 = rec.window_start_unix
        t1 = t0 + rec.window_s
        q = between([(s["t"], s) for s in queue_series], t0, t1)
        c = between(cpu.samples, t0, t1)
        if len(q) < 2 or len(c) < 3:  # tc may run slowly when the guest's CPU is saturated
            print(f"{rec.profile:<13}{rec.size_bytes:>5} | too few samples in the window "
                  f"({len(q)} tc, {len(c)} CPU)")
            continue
        span = q[-1][0] - q[0][0]
        util = (q[-1][1]["sent_bytes"] - q[0][1]["sent_bytes"]) * 8 / span / (rate_mbit * 1e6)
        unc = util * (q[0][1]["half"] + q[-1][1]["half"]) / span
        queue = sum(1 for _, s in q if s["backlog"]) / len(q)
        busy = 100 * (c[-1][1] - c[0][1]) / 1e9 / (c[-1][0] - c[0][0]) / cpu.cpus
        allowed = hand_classes(util, unc, queue, busy / 100)
        ok = rec.bound in allowed
        agree += ok
        judged += 1
        print(f"{rec.profile:<13}{rec.size_bytes:>5} | {rec.bound:<12}{rec.link_utilization:>6.3f}"
              f"{rec.queue_busy:>6.2f}{rec.cpu_busy_pct:>6.0f} | {util:>7.3f}±{unc:.3f}{queue:>6.2f}{busy:>6.0f}"
              f"  {'/'.join(sorted(allowed)):<9} {'yes' if ok else 'NO'}")
    print(f"agree: {agree} of {judged} points")
    return 0 if judged else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="The sweep boots User-Mode Linux when the host kernel has no ESP, as "
                                        "`./run sweep` does; the tc poller runs beside it in the same kernel.",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--rate", type=float, default=100.0, help="the shaped link's rate, Mbit/s")
    ap.add_argument("--profile", default="aes-gcm-256", help="the IPsec profile beside the plain baseline")
    ap.add_argument("--sizes", type=csv(int), default="100,250,500,1000,1460", help="TCP MSS values, comma-separated")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("bound_crosscheck: needs root (namespaces, tc, the host's cgroup files): run it with sudo")
    from experiments import doctor

    args.out = tempfile.mkdtemp(prefix="itb-bench-crosscheck-")
    cpu = HostCpu()
    cpu.start()
    print(f"files in {args.out}", flush=True)
    job = _common.bench_job("bound_crosscheck", args, KernelChoice(), doctor.needs((args.profile,)))
    rc = runner.run(job, "ipsec-testbed bench bound_crosscheck", in_guest)
    cpu.done.set()
    cpu.join()
    if rc:
        sys.exit(f"bound_crosscheck: the sweep failed (exit {rc}); its files: {args.out}")
    return judge(args.out, args.rate, cpu)


def in_guest(job) -> int:
    """The tc poller and the sweep, on the kernel that runs the sweep (:mod:`cli.job`)."""
    return inner(_common.options_of(job))


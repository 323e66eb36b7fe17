"""The host's foreign load: /proc/stat's busy time less the testbed's own, over a window."""
import json
import os
import subprocess
import sys

import pytest

from analysis.page import foreign_load_text
from experiments.engine.counters import Reading
from experiments.engine.verdict import evidence
from testbed import hostload, measuring, names
from testbed.backends import umlmeter
from testbed.backends.base import CpuSample
from testbed.record import Record

TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def test_busy_time_is_every_state_but_idle_and_iowait():
    line = "cpu  100 5 50 1000 20 3 7 2 0 0"
    assert hostload.busy_ns(line) == (100 + 5 + 50 + 3 + 7 + 2) * TICK_NS
    with pytest.raises(ValueError):
        hostload.busy_ns("intr 1 2 3")
    a = hostload.busy_ns()
    assert a > 0 and hostload.busy_ns() >= a


def test_foreign_load_is_the_busy_time_the_testbed_did_not_use_as_a_share_of_one_cpu():
    # 2 s window: 3 CPU-s busy on the host, 1.2 of them the testbed's -> 1.8 CPU-s, 90 % of a CPU
    assert hostload.foreign_pct(0, 3_000_000_000, 0, 1_200_000_000, 2_000_000_000) == pytest.approx(90.0)
    assert hostload.foreign_pct(0, 100, 0, 200, 1_000) == 0.0  # a tick ahead: never negative
    assert hostload.foreign_pct(0, 100, 0, 0, 0) == 0.0


def test_a_process_tree_is_counted_with_its_children():
    # the child spins until it has had 0.3 s of CPU (however busy the machine), says so, and stays
    hog = subprocess.Popen([sys.executable, "-c", "import os, sys, time\nif os.fork() == 0:\n"
                            "    while time.process_time() < 0.3: pass\n    print('spun', flush=True)\n"
                            "    time.sleep(3)\n    os._exit(0)\n"
                            "time.sleep(5)"], stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout.readline().strip() == "spun"
        mine = hostload.process_ns(hog.pid)
        assert hostload.children(hog.pid)  # the busy child
        assert hostload.processes_ns([hog.pid]) >= mine + 0.2e9
    finally:
        hog.kill()
        hog.wait()
    assert hostload.process_ns(hog.pid) == 0  # gone


def test_the_other_guests_of_one_measuring_run_are_the_testbeds_own(tmp_path, monkeypatch):
    """A paired A/B's two sides carry their parent's pid (measuring.ENV): each counts the other side's
    guest, serving process and speed probe as its own, and nothing of another run's guest."""
    monkeypatch.setenv(measuring.ENV, "4242")

    def guest(name, usage_ns, group="4242", pid=0):
        workdir, cgroup = tmp_path / f"{names.PREFIX}-{name}-uml-x", tmp_path / f"cg-{name}"
        workdir.mkdir()
        cgroup.mkdir()
        (cgroup / "cpuacct.usage").write_text(f"{usage_ns}\n")
        monkeypatch.setenv(measuring.ENV, group)
        umlmeter.write_account(str(workdir), str(cgroup), [])
        monkeypatch.setenv(measuring.ENV, "4242")
        if pid:  # the account of a side served by another process
            account = json.loads((workdir / umlmeter.ACCOUNT).read_text())
            (workdir / umlmeter.ACCOUNT).write_text(json.dumps({**account, "pid": pid}))
        return workdir

    me = guest("a", 7_000_000_000)
    # 0.3 s of CPU however busy the machine, then asleep
    sleeper = subprocess.Popen([sys.executable, "-c", "import time\nwhile time.process_time() < 0.3: pass\n"
                                "print('spun', flush=True)\ntime.sleep(5)"], stdout=subprocess.PIPE, text=True)
    try:
        assert sleeper.stdout.readline().strip() == "spun"
        guest("b", 3_000_000_000, pid=sleeper.pid)  # the other side: its guest's 3 s and its process's
        guest("c", 5_000_000_000, group="99")  # another run's guest: foreign
        (tmp_path / f"{names.PREFIX}-d-uml-x").mkdir()
        (tmp_path / f"{names.PREFIX}-d-uml-x" / umlmeter.ACCOUNT).write_text("{half")  # being written
        siblings = umlmeter.Siblings(str(me))
        assert [a["cgroup"] for a in siblings.accounts()] == [str(tmp_path / "cg-b")]
        assert siblings.ns() >= 3_000_000_000 + 0.2e9
        assert siblings.ns() < 3_000_000_000 + 2e9
    finally:
        sleeper.kill()
        sleeper.wait()
    assert siblings.ns() == 3_000_000_000  # its process gone: its guest's account stays counted
    monkeypatch.delenv(measuring.ENV)
    assert umlmeter.Siblings(str(me)).accounts() == []  # a run of its own: no sibling shares its group


def _reading(cpu: CpuSample) -> Reading:
    from experiments.engine.counters import FlowCounters, QdiscCounters, Timed, parse_proc_stat

    at = cpu.local_ns[0]
    return Reading(Timed(QdiscCounters(0, 0, 0, 0, 0, 0), at, at + 1), Timed(FlowCounters(0), at, at + 1), cpu,
                   parse_proc_stat("cpu  0 0 0 100 0 0 0 0\n"))


def test_the_evidence_of_a_window_carries_its_foreign_load():
    a = CpuSample(0, 0, (0, 1), host=(0, 0))
    b = CpuSample(10**9, 2 * 10**9, (2 * 10**9, 2 * 10**9 + 1), host=(3 * 10**9, 1_200_000_000))
    assert evidence(_reading(a), _reading(b), [], 10.0, 1.0, None).foreign_cpu_pct == pytest.approx(90.0)
    plain = CpuSample(10**9, 2 * 10**9, (2 * 10**9, 2 * 10**9 + 1))
    assert evidence(_reading(CpuSample(0, 0, (0, 1))), _reading(plain), [], 10.0, 1.0, None).foreign_cpu_pct is None


def test_the_report_says_how_many_windows_ran_beside_other_work():
    def rec(x):
        return Record(topology="t", profile="none", mode="tunnel", ip_version=4, transport="tcp", rate_mbit=10.0,
                      size_bytes=1000, size_mode="mss", clients=1, repetition=0, goodput_mbps=9.0, foreign_cpu_pct=x)

    assert foreign_load_text([rec(0.4), rec(None), rec(4.9)]) == ""
    text = foreign_load_text([rec(0.4), rec(83.6), rec(12.0)])
    assert text.startswith("2 of 3 windows ran while the host's CPUs did other work") and "at most 84 %" in text

"""One measuring run at a time (testbed.measuring), with real flocks in a private state directory."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from testbed import measuring, names
from testbed.errors import Refused

HOLD = """
import sys, time
from testbed import measuring
with measuring.exclusive(["ipsec-testbed", "sweep", "--rates", "10"], "/runs/x"):
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setattr(names, "STATE_DIR", str(tmp_path))
    monkeypatch.delenv(measuring.ENV, raising=False)
    monkeypatch.delenv(measuring.BESIDE_ENV, raising=False)
    if os.geteuid() != 0:
        monkeypatch.setattr(os, "geteuid", lambda: 0)
    return tmp_path


def holding(tmp_path):
    """Another process holding the machine until its stdin closes."""
    env = {**os.environ, "IPSEC_TESTBED_STATE_DIR": str(tmp_path)}
    env.pop(measuring.ENV, None)
    env.pop(measuring.BESIDE_ENV, None)
    proc = subprocess.Popen([sys.executable, "-c", HOLD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=env, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_run_is_refused_naming_the_first_and_may_measure_beside_it_marked(state):
    assert measuring.holder() is None
    other = holding(state)
    try:
        who = measuring.holder()
        assert (who.pid, who.command, who.run_dir) == (other.pid, "ipsec-testbed sweep --rates 10", "/runs/x")
        refused = rf"measuring on this machine: `ipsec-testbed sweep --rates 10` \(pid {other.pid}, run directory " \
                  rf"/runs/x, since .*--allow-concurrent"
        with pytest.raises(Refused, match=refused), measuring.exclusive(["ipsec-testbed", "sweep"]):
            pass
        with measuring.exclusive(["ipsec-testbed", "bench", "cpu_noise"], allow_concurrent=True) as hold:
            assert hold.concurrent.pid == other.pid
            # the sweeps this run starts in processes of their own measure beside the same run, marked so
            env = {**os.environ, "IPSEC_TESTBED_STATE_DIR": str(state)}
            child = subprocess.run([sys.executable, "-c", "from testbed import measuring\n"
                                    "with measuring.exclusive(['sweep']) as h: print(h.concurrent.pid)"],
                                   capture_output=True, text=True, env=env,
                                   cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
            assert child.returncode == 0 and child.stdout.strip() == str(other.pid), child.stderr
        assert measuring.ENV not in os.environ and measuring.BESIDE_ENV not in os.environ
    finally:
        other.stdin.close()
        other.wait(timeout=10)
    assert measuring.holder() is None  # the kernel dropped the lock with its holder


def test_the_holder_and_the_processes_it_starts_measure_under_one_hold(state):
    with measuring.exclusive(["ipsec-testbed", "regress", "--ab", "6.1", "6.12"]) as hold:
        assert hold.concurrent is None and os.environ[measuring.ENV] == str(os.getpid())
        assert measuring.holder().pid == os.getpid()
        # a paired A/B's side, started by this run: not refused
        env = {**os.environ, "IPSEC_TESTBED_STATE_DIR": str(state)}
        child = subprocess.run([sys.executable, "-c", "from testbed import measuring\n"
                                "with measuring.exclusive(['side']) as h: print(h.concurrent)"],
                               capture_output=True, text=True, env=env,
                               cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
        assert child.returncode == 0 and child.stdout.strip() == "None", child.stderr
    assert measuring.ENV not in os.environ and measuring.holder() is None

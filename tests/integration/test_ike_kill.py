"""A sweep keyed by IKE, killed with SIGKILL at each stage of its keying, then `ipsec-testbed clean`:
no daemon, control socket, pid file or credential is left, and no namespace.

This runs where the kernel does ESP itself (inside the guest when the suite is in User-Mode
Linux): there a killed run's daemons outlive it in its namespaces, as on a host kernel with
ESP, and only `clean` (or the namespaces' end) stops them.  Killing the guest itself ends
everything in it at once; tests/host/test_sweep_resume.py covers that.
"""
from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys

import pytest

from ipsec import ike
from ipsec.xfrm import XfrmSocket
from testbed import names, netns, waiting
from testbed.record import Record

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def strongswan():
    missing = ike.available()
    if missing:
        pytest.fail(f"IKE tests need strongSwan: {missing}", pytrace=False)


def charons() -> list[int]:
    """Every charon process (inside a guest, all of them are the testbed's)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "charon":
                    found.append(int(pid))
        except OSError:
            continue
    return found


def ike_files() -> list[str]:
    """The IKE directories and what is in them: configuration, keys, sockets, pid files."""
    return [path for d in names.ike_dirs() for path in [d, *glob.glob(os.path.join(d, "**"), recursive=True)]]


def holds_esp(namespaces) -> bool:
    for ns in namespaces:
        try:
            with XfrmSocket(ns) as x:
                if any(sa.proto == "esp" for sa in x.dump_sa()):
                    return True
        except Exception:  # noqa: BLE001 (a namespace going away as the run builds or ends)
            continue
    return False


def keyed_point(results: str) -> bool:
    if not os.path.exists(results):
        return False
    with open(results) as f:
        return any(Record.from_json(json.loads(line)).profile != "none" for line in f if line.endswith("\n"))


#: The stages of keying by IKE, each a test of whether the run has reached it.
STAGES = {
    "network built, no daemon yet": lambda ns, out: bool(ns) and not names.ike_dirs(),
    "daemons starting": lambda ns, out: bool(names.ike_dirs()) and not glob.glob(
        os.path.join(names.ike_dirs()[0], "*", "charon.vici")),
    "daemons listening": lambda ns, out: bool(charons()) and not holds_esp(ns),
    "tunnels up": lambda ns, out: holds_esp(ns) and not keyed_point(out),
    "measuring through them": lambda ns, out: keyed_point(out),
}


@pytest.mark.parametrize("stage", list(STAGES))
def test_a_run_killed_at_each_stage_of_its_keying_leaves_nothing_after_clean(stage, tmp_path):
    assert not (netns.list_ours() or charons() or names.ike_dirs()), "leftovers from before this test"
    out = str(tmp_path / "run")
    results = os.path.join(out, "results.jsonl")
    run = subprocess.Popen([sys.executable, "-m", "cli", "sweep", "--keying", "ike", "--rates", "50", "--sizes",
                            "1400", "--repetitions", "1", "--max-repetitions", "1", "--duration", "2", "--no-report",
                            "--out", out], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    reached = STAGES[stage]

    def there() -> bool:
        assert run.poll() is None, f"the sweep ended before {stage}: {run.stderr.read()[-2000:]}"
        return reached(netns.list_ours(), results)

    try:
        waiting.until(there, 240, f"the sweep to reach: {stage}", interval_s=0.005)
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        run.stderr.close()
    left = netns.list_ours() + names.ike_dirs()
    assert left, "the killed run left nothing: the test would prove nothing"
    if stage != "network built, no daemon yet":
        assert names.ike_dirs(), f"killed at '{stage}', the run had no IKE directory"

    done = subprocess.run([sys.executable, "-m", "cli", "clean"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    waiting.until(lambda: not charons(), 10, "every charon to end", state=lambda: f"pids {charons()}")
    assert netns.list_ours() == [] and ike_files() == [], (netns.list_ours(), ike_files())
    assert not glob.glob("/run/charon.*"), "a daemon wrote into the guest's /run"

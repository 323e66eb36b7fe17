"""A sweep killed with SIGKILL mid-run, then run again on the same directory, completes
with no duplicate and no missing point; the second run removes by itself what the killed
one left (its User-Mode Linux work directory), and `clean` finds nothing left after it.

Runs the real script (in User-Mode Linux when the host kernel has no ESP)."""
import json
import os
import signal
import subprocess
import sys

from conftest import run_cli

from experiments import doctor
from testbed import clean, names, waiting
from testbed.record import Record

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "packet_size_sweep.py")
ARGS = ["--sizes", "500,1000,1400", "--rates", "20", "--repetitions", "2", "--max-repetitions", "2", "--duration", "1",
        "--warmup", "0.2", "--no-report"]


def keys(path):
    """The point and repetition of each complete record in ``path``."""
    with open(path) as f:
        records = [Record.from_json(json.loads(line)) for line in f if line.endswith("\n")]
    return [(r.profile, r.size_bytes, r.repetition, r.rate_mbit) for r in records]


def holders(path):
    """The host processes that have ``path`` open."""
    path = os.path.realpath(path)
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == path for fd in os.listdir(f"/proc/{pid}/fd")):
                pids.append(int(pid))
        except OSError:  # gone, or not ours to look at
            continue
    return pids


def leftovers():
    """What `clean` would remove now, one entry per line."""
    out = run_cli("clean", "--dry-run").stdout
    if out.startswith("nothing to clean"):
        return set()
    items = set()
    for line in out.splitlines():
        label, _, rest = line.partition(": ")
        items |= {(label.split(" (")[0], item) for item in rest.split(", ")}
    return items


def test_sigkill_then_resume_has_every_point_once(tmp_path):
    # Other testbed runs on this machine are not ours to judge; the suite itself
    # (CI, a fresh machine) has none.
    backend = doctor.choose("auto").name
    before = leftovers()
    out = str(tmp_path / "run")
    results = os.path.join(out, "results.jsonl")
    first = subprocess.Popen([sys.executable, SCRIPT, *ARGS, "--out", out],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    def three_recorded():
        assert first.poll() is None, "the sweep ended before it could be killed"
        return os.path.exists(results) and len(keys(results)) >= 3

    waiting.until(three_recorded, 240, "the sweep to record 3 points", interval_s=0.2)
    first.send_signal(signal.SIGKILL)
    first.wait()
    measured_before = len(keys(results))
    # an orphaned guest would keep the file open (through hostfs) and go on writing: wait until nothing holds it
    waiting.until(lambda: not holders(results), 30, f"every process to let go of {results}",
                  state=lambda: f"held by pids {holders(results)}")
    assert len(keys(results)) == measured_before, "points were written after the sweep was killed"
    assert leftovers() - before, "the killed run left nothing: the test would prove nothing"

    second = subprocess.run([sys.executable, SCRIPT, *ARGS, "--out", out], capture_output=True, text=True,
                            timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    got = keys(results)
    assert len(got) == len(set(got)) == 2 * 3 * 2  # profiles x sizes x repetitions
    assert f"{measured_before} were already there" in second.stderr
    if backend == "uml":  # a dead guest's work directory: provably dead, removed by the next run
        assert "left by a killed run" in second.stderr, second.stderr[-2000:]
    else:  # namespaces: a live run might own them, so the next run names the command
        assert "`sudo ipsec-testbed clean` removes them" in second.stderr, second.stderr[-2000:]
        assert run_cli("clean").returncode == 0
    with open(os.path.join(out, "meta.json")) as f:
        meta = json.load(f)
    assert meta["complete"] is True and len(meta["runs"]) == 2
    assert leftovers() <= before, leftovers() - before


def test_a_run_keyed_by_ike_killed_leaves_no_key_and_no_daemon(tmp_path):
    """SIGKILL while IKE daemons hold the tunnels: inside User-Mode Linux their directory (keys
    included) was in the guest's own /run and went with it; on a host kernel `clean` removes it."""
    backend = doctor.choose("auto").name
    before, dirs_before = leftovers(), set(names.ike_dirs())
    out = str(tmp_path / "run")
    results = os.path.join(out, "results.jsonl")
    run = subprocess.Popen([sys.executable, SCRIPT, "--keying", "ike", "--rates", "50", "--sizes", "700,1400",
                            "--repetitions", "1", "--duration", "1", "--no-report", "--out", out],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)

    def keyed_point_recorded():
        assert run.poll() is None, f"the sweep ended before it could be killed: {run.stderr.read()[-2000:]}"
        return os.path.exists(results) and any(k[0] != "none" for k in keys(results))

    waiting.until(keyed_point_recorded, 240, "the sweep to record a point keyed by IKE", interval_s=0.1)
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    waiting.until(lambda: not holders(results), 30, f"every process to let go of {results}",
                  state=lambda: f"held by pids {holders(results)}")
    left = set(names.ike_dirs()) - dirs_before
    if backend == "uml":
        assert not left, f"a killed guest left IKE keys on the host: {left}"
        clean.remove_dead_leftovers()  # the dead guest's work directory and cgroup, as the next run does
    else:  # (not in UML: `clean` ends every guest, the test suite's own too)
        assert run_cli("clean").returncode == 0
        assert not set(names.ike_dirs()) - dirs_before
    assert leftovers() <= before, leftovers() - before

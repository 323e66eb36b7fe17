"""After a run is killed with SIGKILL, `ipsec-testbed clean` leaves nothing behind."""
import glob
import os
import signal
import subprocess
import sys
import time

from conftest import CLI, root_namespace_state, run_cli
from testbed import names


def wait_for(cond, timeout_s=60.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def ours_netns():
    return [l.split()[0] for l in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                  text=True).stdout.splitlines()
            if names.is_ours(l.split()[0])]


def test_clean_after_sigkill_of_a_host_run(tmp_path):
    before = root_namespace_state()
    rid = names.new_run_id()
    ns = names.netns_name(rid, "h1")
    # A run that made a namespace with a process in it, then is killed without cleanup.
    script = (f"from testbed import netns; import subprocess, time\n"
              f"netns.create({ns!r})\n"
              f"subprocess.Popen(['ip', 'netns', 'exec', {ns!r}, 'sleep', '600'])\n"
              f"open({str(tmp_path / 'ready')!r}, 'w').close(); time.sleep(600)\n")
    run = subprocess.Popen([sys.executable, "-c", script])
    wait_for(lambda: (tmp_path / "ready").exists(), what="the run to set up")
    sleeper = [int(p) for p in subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                              text=True).stdout.split()]
    assert sleeper, "the run's process is not in its namespace"
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert ns in ours_netns()

    out = run_cli("clean")
    assert out.returncode == 0, out.stderr
    assert ns in out.stdout
    assert ns not in ours_netns()
    wait_for(lambda: not os.path.exists(f"/proc/{sleeper[0]}"), 10, "the process to die")
    assert root_namespace_state() == before
    again = run_cli("clean")
    assert again.returncode == 0 and again.stdout.startswith("nothing to clean")


def test_clean_after_sigkill_of_a_uml_run(needs_uml):
    before = root_namespace_state()
    run = subprocess.Popen([*CLI, "uml", "--mem", "512M", "--", "sh", "-c",
                            "ip netns add itb-0000aa-x; echo up; sleep 600"],
                           stdout=subprocess.PIPE, text=True)
    assert run.stdout.readline() == "up\n"
    guests = glob.glob(f"{names.STATE_DIR}/uml/{names.PREFIX}-*/pid")
    assert guests, "the guest wrote no pid file"
    pids = [int(open(g).read()) for g in guests]
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert all(os.path.exists(f"/proc/{p}") for p in pids), "the guest should outlive its killed parent"

    out = run_cli("clean")
    assert out.returncode == 0, out.stderr
    assert "UML guests killed" in out.stdout
    wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in pids), 20, "the guest to die")
    assert not glob.glob(f"{names.STATE_DIR}/uml/{names.PREFIX}-*")
    assert not glob.glob(f"/tmp/{names.PREFIX}-*-uml-*")
    assert root_namespace_state() == before

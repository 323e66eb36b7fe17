"""After a run is killed with SIGKILL, `ipsec-testbed clean` leaves nothing behind."""
import glob
import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import CLI, run_cli

from testbed import names, waiting
from testbed.isolation import root_namespace_snapshot


def wait_for(cond, timeout_s=60.0, what="condition"):
    waiting.until(cond, timeout_s, what, interval_s=0.1)


def ours_netns():
    return [line.split()[0] for line in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                  text=True).stdout.splitlines()
            if names.is_ours(line.split()[0])]


def test_clean_after_sigkill_of_a_host_run(tmp_path):
    before = root_namespace_snapshot()
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
    assert root_namespace_snapshot() == before
    again = run_cli("clean")
    assert again.returncode == 0 and again.stdout.startswith("nothing to clean")


def guest_processes(uml_id):
    token = f"umid={uml_id}".encode()
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if token in f.read().split(b"\0"):
                    out.append(int(pid))
        except OSError:
            pass
    return out


def test_clean_after_sigkill_of_a_uml_run(needs_uml):
    before = root_namespace_snapshot()
    known = set(glob.glob(f"{names.STATE_DIR}/uml/{names.PREFIX}-*"))
    run = subprocess.Popen([*CLI, "uml", "--mem", "512M", "--", "sh", "-c",
                            "ip netns add itb-0000aa-x; echo up; sleep 600"],
                           stdout=subprocess.PIPE, text=True)
    assert run.stdout.readline() == "up\n"
    def ppid(pid):
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().split(") ")[1].split()[1])
    # other guests may be running: ours is the one whose first process (unshare, which holds the kernel's PID
    # namespace) is a child of `run`
    mine = [d for d in set(glob.glob(f"{names.STATE_DIR}/uml/{names.PREFIX}-*")) - known
            if any(ppid(p) == run.pid for p in guest_processes(os.path.basename(d)))]
    assert len(mine) == 1, "the guest has no state directory"
    uml_id = os.path.basename(mine[0])
    main_pid = next(p for p in guest_processes(uml_id) if ppid(p) == run.pid)
    assert guest_processes(uml_id)
    run.send_signal(signal.SIGKILL)
    run.wait()
    # the guest's kernel dies with the process that booted it: it cannot go on writing
    wait_for(lambda: not os.path.exists(f"/proc/{main_pid}") or
             Path(f"/proc/{main_pid}/stat").read_text().split(") ")[1][0] == "Z", 10, "the guest kernel to die")

    out = run_cli("clean")
    assert out.returncode == 0, out.stderr
    wait_for(lambda: not guest_processes(uml_id), 20, "the guest's processes to die")
    assert not os.path.exists(f"{names.STATE_DIR}/uml/{uml_id}")
    assert not glob.glob(f"/tmp/{names.PREFIX}-{uml_id[4:]}-uml-*")
    assert root_namespace_snapshot() == before

"""`ipsec-testbed uml`: exit statuses, live output, clear errors (boots real UML)."""
import contextlib
import os
import signal
import subprocess
import time

import pytest
from conftest import CLI, run_cli

from testbed import netns, umlkernel


@pytest.mark.parametrize("command,status", [(["false"], 1), (["true"], 0), (["sh", "-c", "exit 7"], 7),
                                            (["no-such-command-itb"], 127)])
def test_guest_exit_status_is_returned(needs_uml, command, status):
    assert run_cli("uml", "--mem", "512M", "--", *command).returncode == status


def test_output_streams_live_and_stays_in_order(needs_uml):
    proc = subprocess.Popen([*CLI, "uml", "--mem", "512M", "--", "sh", "-c",
                             "echo first; sleep 3; echo second; echo to-stderr >&2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    t_first = time.monotonic()
    second = proc.stdout.readline()
    t_second = time.monotonic()
    assert (first, second) == ("first\n", "second\n")
    # the first line arrived while the guest was still sleeping, not at the end
    assert t_second - t_first > 2
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read().strip().endswith("to-stderr")


def test_guest_runs_in_the_callers_directory_with_esp_modules(needs_uml, tmp_path):
    # ESP is there: loaded as a module from Debian's package, or built into the project's kernel,
    # where an ESP SA is accepted although no esp4 module is listed
    esp_sa = ("ip netns add itb-esp && ip -n itb-esp xfrm state add src 192.0.2.1 dst 192.0.2.2 proto esp "
              "spi 0x100 mode transport enc 'cbc(aes)' 0x00112233445566778899aabbccddeeff")
    out = run_cli("uml", "--", "sh", "-c", f"pwd; if grep -q '^esp4 ' /proc/modules; then echo module; "
                  f"elif {esp_sa}; then echo built-in; else echo none; fi; echo $IPSEC_TESTBED_BACKEND",
                  cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    where, esp, backend = out.stdout.split()
    assert (where, backend) == (str(tmp_path), "uml")
    assert esp == ("module" if umlkernel.select().origin == "debian" else "built-in")


def test_time_limit_kills_the_guest(needs_uml):
    t0 = time.monotonic()
    out = run_cli("uml", "--timeout", "10", "--", "sleep", "120")
    assert out.returncode == 124
    assert time.monotonic() - t0 < 40
    assert "time limit" in out.stderr


def test_missing_kernel_is_one_clear_line(tmp_path):
    # refused as bad input while parsing (2), before any boot; 125 is for a guest that fails
    out = run_cli("uml", "--uml-kernel", str(tmp_path / "linux"), "--", "true")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert "does not exist" in out.stderr


def test_a_kernel_that_does_not_boot_is_reported(tmp_path):
    fake = tmp_path / "linux"
    fake.write_text("#!/bin/sh\necho 'Kernel panic - not syncing: no root' >&3\nexit 1\n")
    fake.chmod(0o755)
    out = run_cli("uml", "--uml-kernel", str(fake), "--", "true")
    assert out.returncode == 125
    assert "failed to boot" in out.stderr


def test_doctor_on_the_host_picks_the_backend_its_probe_supports():
    import json
    out = run_cli("doctor", "--json")
    report = json.loads(out.stdout)
    checks = {c["name"]: c["ok"] for c in report["checks"]}
    assert report["backend"] == "host"  # the kernel probed: the one doctor runs on
    expected = "host" if (checks["esp"] and checks["veth"] and checks["qdisc tbf"]) else "uml"
    assert report["choice"] == expected, report["choice_reason"]



#: What starts a UML kernel on the host (its arguments on their command lines too); the kernel is the last.
_STARTERS = {b"sh", b"taskset", b"setpriv", b"unshare"}


def _kernel_processes(ancestor: int) -> list[tuple[int, int]]:
    """(pid, parent pid) of the UML kernel processes below ``ancestor`` (its guest's, not another test's)."""
    parents: dict[int, int] = {}
    kernels: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if any(a.startswith(b"umid=") for a in args) and os.path.basename(args[0]) not in _STARTERS:
            kernels.add(int(entry))

    def below(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == ancestor:
                return True
        return False

    return [(pid, parents[pid]) for pid in kernels if below(pid)]


def test_a_kernel_that_dies_alone_takes_its_guests_processes_with_it(needs_uml, tmp_path):
    # A UML kernel runs each guest process as a host process it ptraces; were the kernel to die alone (killed, a
    # panic), the host would resume them untraced, as root, their system calls the host's.  Here the guest writes
    # its host name (a system call) to a file as fast as it can; the kernel's main process is then killed alone.
    # Afterwards the file stops changing and never held any name but the guest's: nothing ran on after the kernel.
    beat = tmp_path / "beat"
    pids: set[int] = set()
    proc = subprocess.Popen([*CLI, "uml", "--mem", "512M", "--", "sh", "-c",
                             f"while :; do hostname > {beat}.new; mv {beat}.new {beat}; done"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not beat.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert beat.read_text().strip() == "itb-uml"
        ours = _kernel_processes(proc.pid)
        pids = {pid for pid, _ in ours}
        main = [pid for pid, parent in ours if parent not in pids]  # the kernel's first process: no kernel parent
        assert len(main) == 1, ours
        os.kill(main[0], signal.SIGKILL)
        assert proc.wait(timeout=30) != 0
        time.sleep(1)
        seen = beat.read_text()
        time.sleep(1)
        assert beat.read_text() == seen and seen.strip() == "itb-uml"
        assert not [pid for pid in pids if netns.is_alive(pid)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in pids:  # what ran on, when this test fails
            if netns.is_alive(pid):
                with contextlib.suppress(OSError):
                    os.killpg(os.getpgid(pid), signal.SIGKILL)


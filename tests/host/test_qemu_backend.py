"""The counted backend (`--kernel qemu`): a real x86-64 kernel in QEMU's emulator, its exit statuses and output,
its instruction counts, a sweep's records on it, and what a killed run leaves (boots real QEMU guests; runs beside
the suite's integration guest: it never calls `clean`)."""
import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest
from conftest import CLI, REPO, run_cli

from testbed import qemukernel
from testbed.backends import qemu
from testbed.clean import remove_dead_leftovers
from testbed.waiting import Deadline


@pytest.fixture
def needs_qemu():
    why = qemu.QemuBackend().unavailable()
    if why:
        pytest.fail(f"the counted backend cannot run here: {why}", pytrace=False)


#: What a guest says of itself, a line each: its working directory, kernel release, backend, CPU model, whether the
#: CPU has AES-NI, and the driver the kernel picked for an ESP SA's AES-GCM; then a line to stderr
CHECKS = ("pwd; uname -r; echo $IPSEC_TESTBED_BACKEND; grep -m1 'model name' /proc/cpuinfo | cut -d: -f2; "
          "grep -cw aes /proc/cpuinfo; ip netns add itb-esp && ip -n itb-esp xfrm state add src 192.0.2.1 "
          "dst 192.0.2.2 proto esp spi 0x100 mode transport aead 'rfc4106(gcm(aes))' 0x" + "11" * 36 + " 128 && "
          "grep -A2 '^name *: rfc4106(gcm(aes))' /proc/crypto | grep -m1 '^driver' | cut -d: -f2; "
          "echo to-stderr >&2")
#: ... the lines of stdout they take, before what a boot runs after them
CHECK_LINES = 6


@pytest.mark.parametrize("crypto, driver", [
    (None, "aesni"),  # the x86 driver (AES-NI, which the emulator runs), not the generic C code UML has
    ("generic", "gcm_base(ctr(aes-generic),ghash-generic)"),  # the C code, as in UML: no AES-NI, no PCLMULQDQ
])
def test_the_guest_is_debians_x86_kernel_on_the_fixed_cpu_with_esp_and_its_exit_status_and_outputs_come_back(
        needs_qemu, tmp_path, request, crypto, driver):
    """One boot per crypto (a boot in the emulator takes about 18 s): the default's is the quiet boot the workload
    tests share; what runs, and what comes back."""
    if crypto is None:
        out, where = request.getfixturevalue("quiet_boot").out, QUIET_CWD
    else:
        out, where = _boot(crypto=crypto, cwd=str(tmp_path)).out, str(tmp_path)
    assert out.returncode == 7, out.stderr
    assert out.stderr.strip().endswith("to-stderr") and "to-stderr" not in out.stdout
    lines = out.stdout.split("\n")
    assert lines[:3] == [where, qemukernel.select().release, "qemu"]  # Debian's, as fetched: not the host's kernel
    assert "Westmere" in lines[3] and lines[4] == ("0" if crypto == "generic" else "1"), out.stdout
    assert driver in lines[5], out.stdout


WORKLOAD = """
import hashlib, sys
from testbed.backends import current
meter = current().cpu_meter()
counts = []
for _ in range(3):
    a = meter.sample()
    hashlib.sha256(bytes(8 << 20)).digest()
    b = meter.sample()
    counts.append(b.cpu_ns - a.cpu_ns)
print(*counts)
"""

#: ... and, in the quiet boot, the clocks after it (one boot in the emulator takes about 18 s: three tests share it)
USER_CLOCK = """
import time
from testbed import counting
user, guest = counting.user_time(), time.time()
time.sleep(120)  # idle: the guest's clock skips two minutes ahead in a moment of the host's
print(user, counting.user_time() - user, time.time() - guest)
"""


#: Where the counted boots start their command (CHECKS says it back: the host's directory, through 9p)
QUIET_CWD = "/tmp"


@dataclasses.dataclass
class Boot:
    """A counted guest's run: the command's outcome, and the host's time before and after it."""

    out: subprocess.CompletedProcess
    before: float
    after: float

    def lines(self, first: int = 0) -> list[str]:
        return self.out.stdout.splitlines()[first:]


def _boot(script: str | None = None, crypto: str | None = None, cwd: str = QUIET_CWD) -> Boot:
    """:data:`CHECKS`, then ``script`` in Python if given, then exit 7, in a counted guest with ``crypto``'s drivers
    (the same commands before the script in every boot, so that each boot's kernel is in the same state when it
    starts)."""
    python = f"{shlex.join([sys.executable, '-P', '-c', script])} && " if script else ""
    before = time.time()
    out = run_cli("uml", "--kernel", "qemu", *(["--qemu-crypto", crypto] if crypto else []), "--", "sh", "-c",
                  f"{CHECKS}; {python}exit 7", cwd=cwd, timeout=300)
    return Boot(out, before, time.time())


@pytest.fixture(scope="module")
def quiet_boot():
    """One guest on a host doing nothing else of the test's: what it says of itself (:data:`CHECKS`),
    the workload's counts, then the clocks; it ends with exit 7."""
    why = qemu.QemuBackend().unavailable()
    if why:
        pytest.fail(f"the counted backend cannot run here: {why}", pytrace=False)
    return _boot(WORKLOAD + USER_CLOCK)


#: A busy loop at the lowest priority: it takes every CPU cycle nothing else wants, and slows nothing down (the
#: suite's integration guest runs beside the host tests; `bench counted` loads the host at full priority).
IDLE_HOG = "import os\nos.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\nwhile True: pass"


def test_a_fixed_workload_costs_the_same_instructions_in_every_boot_however_busy_the_host(quiet_boot):
    assert quiet_boot.out.returncode == 7, quiet_boot.out.stderr
    quiet = [int(x) for x in quiet_boot.lines(CHECK_LINES)[0].split()]
    hogs = [subprocess.Popen([sys.executable, "-c", IDLE_HOG]) for _ in range(os.cpu_count() or 1)]
    try:
        busy_boot = _boot(WORKLOAD)
        assert busy_boot.out.returncode == 7, busy_boot.out.stderr
        busy = [int(x) for x in busy_boot.lines(CHECK_LINES)[0].split()]
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    # hashing 8 MB is some hundred million instructions: counted, not timed, the n-th time costs the same in
    # both boots however busy the host (the n-th, not every: a process's memory is not the same the first
    # time and the third, in any kernel)
    assert len(quiet) == len(busy) == 3 and min(quiet) > 50_000_000
    for q, b in zip(quiet, busy, strict=True):
        assert abs(q - b) / q < 0.001, (quiet, busy)


def test_a_guest_reads_the_users_clock_not_its_own_which_skips_ahead_when_it_idles(quiet_boot):
    assert quiet_boot.out.returncode == 7, quiet_boot.out.stderr
    lines, before, after = quiet_boot.lines(CHECK_LINES + 1), quiet_boot.before, quiet_boot.after
    user, user_slept, guest_slept = (float(x) for x in lines[0].split())
    assert guest_slept >= 120 and after - before < 110, (lines, after - before)
    # the host's time, where a budget, a progress line and a run's dates read it: not the guest's two minutes
    assert before <= user <= after and 0 <= user_slept <= after - before, (lines, before, after)


def test_a_sweeps_records_carry_instructions_not_cpu_seconds(needs_qemu, tmp_path):
    out_dir = tmp_path / "run"
    # the counted suite's point: UDP paced at 100 Mbit/s through an AES-GCM-256 tunnel (a TCP point's instructions
    # per packet move by about 2 % from window to window with TCP's own state, docs/kernel.md)
    done = subprocess.run([*CLI, "sweep", "--kernel", "qemu", "--out", str(out_dir), "--rates", "1000",
                           "--sizes", "1400", "--transport", "udp", "--udp-bitrate", "100M", "--profiles",
                           "aes-gcm-256", "--no-plain", "--repetitions", "2", "--duration", "1", "--no-latency-probe",
                           "--no-report", "--history", str(tmp_path / "h.sqlite")],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "figures added to the history" in done.stderr
    records = [json.loads(line) for line in (out_dir / "results.jsonl").read_text().splitlines()]
    assert len(records) == 2
    for r in records:
        assert r["backend"] == "qemu" and r["clock"] == "instructions"
        assert r.get("cpu_s") is r.get("cpu_s_per_gb") is r.get("cpu_us_per_packet") is None
        assert r["instructions"] > 0 and r["wall_s"] > 0
        assert r["instructions_per_packet"] == pytest.approx(r["instructions"] / r["link_packets"])
        assert r["instructions_per_byte"] == pytest.approx(r["instructions"] / r["bytes"])
    # the same packets at the same pace: as many instructions for each in both windows
    a, b = (r["instructions_per_packet"] for r in records)
    assert abs(a - b) / a < 0.01, records
    meta = json.loads((out_dir / "meta.json").read_text())
    assert meta["clock"] == "instructions" and meta["backend"] == "qemu"
    # the history has the run's counted figures, on the counted clock, named by Debian's kernel
    from analysis.store import open_store

    with open_store(str(tmp_path / "h.sqlite"), create=False) as history:
        rows = {r.metric: r for r in history.rows()}
    assert set(rows) == {"goodput_mbps", "instructions_per_packet", "instructions_per_byte"}
    assert {r.clock for r in rows.values()} == {"instructions"} and rows["goodput_mbps"].kind == "sweep"
    assert rows["instructions_per_packet"].value == pytest.approx((a + b) / 2)
    assert rows["instructions_per_packet"].kernel == "debian" and rows["goodput_mbps"].backend == "qemu"


def test_a_killed_run_takes_its_guest_with_it_and_clean_removes_what_is_left(needs_qemu):
    proc = subprocess.Popen([*CLI, "uml", "--kernel", "qemu", "--", "sleep", "600"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    guests = []
    for _ in Deadline(60, 0.2).polls():  # its work directory comes first, then the emulator's process
        guests = [g for g in qemu.QemuBackend().leftovers() if g.kind == "QEMU guest"]
        if guests:
            break
    assert guests and all(g.live for g in guests)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    for _ in Deadline(30, 0.2).polls():
        if not any(g.kind == "QEMU guest" for g in qemu.QemuBackend().leftovers()):
            break
    assert not any(g.kind == "QEMU guest" for g in qemu.QemuBackend().leftovers())
    # its work directory is a dead run's: any run's start removes it (not `clean`, which would end the guests the
    # suite runs beside the host tests)
    assert any(w.kind == "work directory" and not w.live for w in qemu.QemuBackend().leftovers())
    remove_dead_leftovers()
    assert not qemu.QemuBackend().leftovers()

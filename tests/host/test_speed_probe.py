"""The speed probe beside a real UML guest: its totals reach the guest with every CPU reading.

Runs alone, before the suite's guests boot (cli.selftest.HOST_ALONE): it needs a CPU beside
the guest's, and the suite's guests take both of this machine's.
"""
import io
import json
import os
import pathlib
import subprocess
import sys

import pytest

from analysis.stats import at_common_speed
from testbed import hostload
from testbed.backends import uml
from testbed.rundir import load_results

REPO = pathlib.Path(__file__).resolve().parents[2]

GUEST_READS_THE_METER = """
import time
from testbed.backends.uml import UmlBackend
meter = UmlBackend().cpu_meter()
a = meter.sample()
time.sleep(1.5)
b = meter.sample()
print(meter.speed_probe or "-")
print(*(a.probe or (0, 0)), *(b.probe or (0, 0)))
"""


def test_a_speed_probe_beside_the_guest_times_every_window_of_its_meter(needs_uml):
    spare = len(os.sched_getaffinity(0)) > 1
    out, err = io.BytesIO(), io.BytesIO()
    spec = uml.build_spec([sys.executable, "-c", GUEST_READS_THE_METER], mem="512M",
                          cwd=str(REPO), speed_probe=True)
    assert uml.run(spec, stdout=out, stderr=err) == 0, err.getvalue().decode()
    method, totals = out.getvalue().decode().strip().splitlines()[-2:]
    ops_a, ns_a, ops_b, ns_b = map(int, totals.split())
    if not spare:  # one CPU: nowhere to run a probe beside the guest, and the guest is told so
        assert method == "-" and ops_b == 0
        return
    assert method.startswith(f"host CPU {uml.spare_cpu(spec.host_cpu)}:")
    # 1.5 s of 8 ms in every 40 ms: ~0.3 s of the probe's work between the guest's two readings
    assert ops_b > ops_a > 0 and 0.15e9 < ns_b - ns_a < 0.6e9


@pytest.mark.parametrize("probe", [True, False], ids=["with the probe", "--no-speed-probe"])
def test_every_record_of_a_sweep_in_uml_says_how_fast_the_machine_ran(needs_uml, tmp_path, probe):
    out = tmp_path / "run"
    cmd = [sys.executable, str(REPO / "experiments" / "packet_size_sweep.py"), "--kernel", "uml", "--rates", "10",
           "--sizes", "1000", "--repetitions", "2", "--max-repetitions", "2", "--duration", "1", "--no-report",
           "--out", str(out), *([] if probe else ["--no-speed-probe"])]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    records = load_results(str(out))
    meta = json.loads((out / "meta.json").read_text())
    assert len(records) == 4
    if probe and len(os.sched_getaffinity(0)) > 1:
        assert all(r.speed_probe_ns > 0 for r in records)
        assert meta["speed_probe"].startswith("host CPU ")
        assert all(r.cpu_s_per_gb_measured is not None for r in at_common_speed(records))
    else:
        assert all(r.speed_probe_ns is None for r in records)
        assert meta.get("speed_probe") is None
        assert at_common_speed(records) == records


GUEST_TIMES_TWO_WINDOWS = """
import os, sys, time
from testbed.backends.uml import UmlBackend
meter = UmlBackend().cpu_meter()
q0 = meter.sample(); time.sleep(1.5); q1 = meter.sample()
with open(sys.argv[1], "w") as f:
    f.write("go")
time.sleep(0.5)
a = meter.sample(); time.sleep(1.5); b = meter.sample()
for s in (q0, q1, a, b):
    print(s.clock_ns, *s.host)
"""


def test_the_meter_tells_a_window_beside_other_work_from_a_quiet_one(needs_uml, tmp_path):
    """A busy loop on the host, not the testbed's, during the guest's second window: that window's
    foreign load is about a CPU, the first's near nothing (testbed.hostload)."""
    import threading

    from testbed.hostload import FOREIGN_PCT, foreign_pct

    flag = tmp_path / "go"

    def hog() -> None:
        for _ in range(600):  # until the guest says go (its boot takes seconds)
            if flag.exists():
                break
            threading.Event().wait(0.1)
        subprocess.run([sys.executable, "-c", "import time\nt = time.time() + 2.5\nwhile time.time() < t: pass"],
                       check=True)

    helper = threading.Thread(target=hog)
    helper.start()
    out, err = io.BytesIO(), io.BytesIO()
    spec = uml.build_spec([sys.executable, "-c", GUEST_TIMES_TWO_WINDOWS, str(flag)], mem="512M", cwd=str(REPO))
    try:
        assert uml.run(spec, stdout=out, stderr=err) == 0, err.getvalue().decode()
    finally:
        flag.touch()
        helper.join(30)
    q0, q1, a, b = [tuple(map(int, line.split())) for line in out.getvalue().decode().strip().splitlines()[-4:]]
    quiet = foreign_pct(q0[1], q1[1], q0[2], q1[2], q1[0] - q0[0])
    loaded = foreign_pct(a[1], b[1], a[2], b[2], b[0] - a[0])
    assert quiet < FOREIGN_PCT < 60 < loaded, (quiet, loaded)


GUEST_SLEEPS_BETWEEN_TWO_READINGS = """
import time
from experiments.machine import machine_meta
from testbed.backends.uml import UmlBackend
print(machine_meta().get("keep_awake", "-"))
meter = UmlBackend().cpu_meter()
a = meter.sample(); time.sleep(1.5); b = meter.sample()
print(b.cpu_ns - a.cpu_ns, b.host[1] - a.host[1], b.clock_ns - a.clock_ns)
"""


def _spinners_of_mine() -> list[int]:
    """This process's children that are the keep-awake spinner (read from /proc, nothing signalled)."""
    found = []
    for pid in hostload.children(os.getpid()):
        try:
            argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"testbed/awake.py") for a in argv):
            found.append(pid)
    return found


@pytest.mark.parametrize("awake", [True, False], ids=["--uml-keep-awake", "left to idle"])
def test_a_kept_awake_guests_cpu_spins_while_the_guest_sleeps_and_counts_as_the_testbeds_own(needs_uml, awake):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: the guest is not pinned, and there is no CPU of its own to keep awake")
    out, err = io.BytesIO(), io.BytesIO()
    spec = uml.build_spec([sys.executable, "-c", GUEST_SLEEPS_BETWEEN_TWO_READINGS], mem="512M",
                          cwd=str(REPO), keep_awake=awake)
    assert spec.keep_awake is awake and spec.host_cpu is not None
    assert uml.run(spec, stdout=out, stderr=err) == 0, err.getvalue().decode()
    recorded, figures = out.getvalue().decode().strip().splitlines()[-2:]
    guest_ns, own_ns, clock_ns = map(int, figures.split())
    # every run's meta.json says what kept the CPU awake (machine_meta), or nothing
    assert recorded == (f"a SCHED_IDLE spinner on host CPU {spec.host_cpu}" if awake else "-")
    beside = own_ns - guest_ns  # the testbed's own CPU beyond the guest's: the meter's server and the spinner
    if awake:  # the sleeping guest left its CPU to the spinner, and the meter counts it as the testbed's
        assert beside > 0.5 * clock_ns, (beside, clock_ns)
    else:
        assert beside < 0.2 * clock_ns, (beside, clock_ns)
    assert _spinners_of_mine() == []  # ended with the guest

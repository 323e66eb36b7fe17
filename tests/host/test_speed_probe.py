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

"""The speed probe beside a real UML guest: its totals reach the guest with every CPU reading.

Runs alone, before the suite's guests boot (cli.selftest.HOST_ALONE): it needs a CPU beside
the guest's, and the suite's guests take both of this machine's.
"""
import io
import os
import sys

from testbed.backends import uml

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
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))), speed_probe=True)
    assert uml.run(spec, stdout=out, stderr=err) == 0, err.getvalue().decode()
    method, totals = out.getvalue().decode().strip().splitlines()[-2:]
    ops_a, ns_a, ops_b, ns_b = map(int, totals.split())
    if not spare:  # one CPU: nowhere to run a probe beside the guest, and the guest is told so
        assert method == "-" and ops_b == 0
        return
    assert method.startswith(f"host CPU {uml.spare_cpu(spec.host_cpu)}:")
    # 1.5 s of 8 ms in every 40 ms: ~0.3 s of the probe's work between the guest's two readings
    assert ops_b > ops_a > 0 and 0.15e9 < ns_b - ns_a < 0.6e9

"""The speed probe (testbed.speedprobe): a real process on a spare CPU, and the meter channel carrying its totals."""
import os
import threading
import time
import tty

import pytest

from testbed import speedprobe
from testbed.backends.uml import GuestMeter


def test_spare_cpu_is_one_the_guest_is_not_pinned_to():
    allowed = sorted(os.sched_getaffinity(0))
    assert speedprobe.spare_cpu(None) is None  # an unpinned guest may run anywhere: nothing is spare
    if len(allowed) < 2:
        assert speedprobe.spare_cpu(allowed[0]) is None
    else:
        assert speedprobe.spare_cpu(allowed[-1]) == allowed[0]


def test_the_probe_runs_pinned_counts_operations_and_leaves_nothing_behind():
    cpu = sorted(os.sched_getaffinity(0))[0]
    with speedprobe.SpeedProbe(cpu) as probe:
        deadline = time.monotonic() + 10
        while probe.read() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        first = probe.read()
        assert first is not None, "the probe gave no totals within 10 s"
        assert os.sched_getaffinity(probe._proc.pid) == {cpu}
        time.sleep(0.3)
        later = probe.read()
        ops, ns = later[0] - first[0], later[1] - first[1]
        # ~8 ms of work every 40 ms: several periods' worth in 0.3 s, each operation taking some µs
        assert ops > 0 and 0.02e9 < ns < 0.3e9
        assert 1_000 < ns / ops < 10_000_000
        assert "host CPU" in probe.method()
        pid, path = probe._proc.pid, probe.path
    assert not os.path.exists(path)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.parametrize("reply,probe", [(b"5000 7000\n", None), (b"5000 7000 40 9000000\n", (40, 9000000))])
def test_the_guests_meter_reads_the_probes_totals_when_the_host_sends_them(reply, probe):
    host, guest = os.openpty()
    tty.setraw(guest)

    def answer():
        assert os.read(host, 16) == b"?\n"
        os.write(host, reply)

    t = threading.Thread(target=answer)
    t.start()
    meter = GuestMeter(os.ttyname(guest), "host CPU 0: ...")
    try:
        sample = meter.sample()
    finally:
        meter.close()
        t.join(5)
        os.close(host)
        os.close(guest)
    assert (sample.cpu_ns, sample.clock_ns, sample.probe) == (5000, 7000, probe)

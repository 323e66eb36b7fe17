"""The speed probe (testbed.speedprobe): a real process on a spare CPU, and the meter channel carrying its totals."""
import os
import threading
import tty

import pytest

from testbed import speedprobe, waiting
from testbed.backends.umlmeter import GuestMeter


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
        first = waiting.until(probe.read, 10, "the probe's first totals", interval_s=0.02)
        assert os.sched_getaffinity(probe._proc.pid) == {cpu}
        # five periods' worth of its work, however long the machine takes to give it
        later = waiting.until(lambda: (t := probe.read()) and t[1] - first[1] >= 5 * speedprobe.WORK_S * 1e9 and t,
                              30, "five periods of the probe's work", interval_s=0.02)
        ops, ns = later[0] - first[0], later[1] - first[1]
        # operations counted over that work, each some µs (16 pipe round trips and 16 page faults)
        assert ops > 0 and 1_000 < ns / ops < 10_000_000
        assert "host CPU" in probe.method()
        pid, path = probe._proc.pid, probe.path
    assert not os.path.exists(path)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.parametrize("reply,probe", [(b"5000 7000 80000 60000\n", None),
                                         (b"5000 7000 80000 60000 40 9000000\n", (40, 9000000))])
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
    assert (sample.cpu_ns, sample.clock_ns, sample.probe, sample.host) == (5000, 7000, probe, (80000, 60000))

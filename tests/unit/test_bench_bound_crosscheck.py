"""bench bound_crosscheck: its command line, the job it hands the sweep's kernel, and its hand check of synthetic
samples."""
from __future__ import annotations

from benchmarks import bound_crosscheck as bc
from experiments.benchmark import in_guest
from experiments.job import Job
from testbed.record import Bound, Record


def test_its_command_line_gives_the_old_parsers_options_and_refuses_a_bad_value_in_one_line(bench_cli):
    assert bench_cli.options("bound_crosscheck") == bc.Options(100.0, "aes-gcm-256", (100, 250, 500, 1000, 1460))
    assert bench_cli.options("bound_crosscheck", "--rate", "10", "--sizes", "100,1460", "--profile",
                             "aes-cbc-128-sha1") == bc.Options(10.0, "aes-cbc-128-sha1", (100, 1460))
    for words in (["--rate", "0"], ["--sizes", "50,100"], ["--profile", "aes-gcm-7"], ["--files", "/tmp"]):
        bench_cli.refuses("bound_crosscheck", *words)


def test_the_part_in_the_sweeps_kernel_is_a_job_that_needs_the_profiles_ipsec_and_knows_where_the_files_go(
        monkeypatch):
    job = Job.loads(bc.its_job(bc.Options(rate=10.0, sizes=(1460,), files="/tmp/itb-x")).dumps())
    assert job.work.name == "bound_crosscheck" and "esp" in job.work.needs and job.out_dir == "/tmp/itb-x"
    assert job.command == bc.COMMAND
    ran = []
    monkeypatch.setattr(bc, "beside_the_sweep", lambda args: ran.append(args) or 3)
    assert in_guest(job) == 3  # the sweep's exit status, and no page: the host prints it
    assert ran == [bc.Options(10.0, "aes-gcm-256", (1460,), "/tmp/itb-x")]
    spec = ran[0].sweep()
    assert (spec.repetitions, spec.most_repetitions, spec.duration_s, spec.profiles) == \
        (1, 1, 6.0, ("none", "aes-gcm-256"))


def record(size: int, start: float, bound: Bound) -> Record:
    return Record(topology="vpn_gateway", profile="none", mode="tunnel", ip_version=4, transport="tcp",
                  rate_mbit=10.0, size_bytes=size, size_mode="mss", clients=1, repetition=0, goodput_mbps=9.5,
                  bound=bound, window_start_unix=start, window_s=6.0, link_utilization=0.99, queue_busy=0.9,
                  cpu_busy_pct=40.0)


def tc(t: float, sent: int, backlog: int, dev: str = "eth0") -> dict:
    return {"t": t, "half": 0.001, "ns": "itb-a", "dev": dev, "sent_bytes": sent, "backlog": backlog, "drops": 0}


def test_a_link_bound_point_agrees_with_a_full_queued_shaper_and_a_point_without_samples_is_not_judged():
    # 10 Mbit/s is 1.25 MB/s: the busiest tbf sent at 99 % of it with a queue in every sample
    samples = [tc(100.0 + k, int(k * 1.2375e6), 3000) for k in range(7)] + [tc(100.0 + k, 10 * k, 0, "eth1")
                                                                              for k in range(7)]
    cpu = [(100.0 + k / 5, int(k / 5 * 0.4e9)) for k in range(31)]  # 40 % of one CPU
    points = bc.check([record(1460, 100.0, Bound.LINK), record(100, 500.0, Bound.CPU)], samples, cpu, 1, 10.0)
    link, lost = points
    assert link.by_hand.classes == ("link",) and link.agree
    assert abs(link.by_hand.utilization - 0.99) < 1e-6 and link.by_hand.queue_busy == 1.0
    assert abs(link.by_hand.cpu_busy_pct - 40.0) < 1e-6
    assert lost.by_hand is None and not lost.agree and (lost.tc_samples, lost.cpu_samples) == (0, 0)
    result = bc.Judged("/tmp/x", "/sys/fs/cgroup/cpuacct/itb-1/cpuacct.usage", 1, len(samples), len(cpu), points)
    lines = bc.page(bc.Options(), result).splitlines()
    assert lines[0] == "files in /tmp/x" and "(1 CPU = 100 %); 14 tc samples, 31 CPU samples, 2 points" in lines[1]
    assert lines[3].split()[-2:] == ["link", "yes"]
    assert lines[4] == "none           100 | too few samples in the window (0 tc, 0 CPU)"
    assert lines[-1] == "agree: 1 of 1 points" and bc.BENCHMARK.status(result) == 0
    assert bc.BENCHMARK.status(bc.Judged("/tmp/x", None, 1, 0, 0, points[1:])) == 1
    assert bc.page(bc.Options(), bc.Swept(0)) == "" and bc.BENCHMARK.status(bc.Swept(2)) == 2

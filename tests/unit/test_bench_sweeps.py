"""The benchmarks' sweeps: typed specs run apart, and what each is, said as its changes from the default sweep."""
from __future__ import annotations

import dataclasses
import os

import pytest

from experiments import runner
from experiments.engine.plan import SweepSpec, changes, default_sweep, describe_changes
from experiments.job import Job, SweepWork

SPECS = [
    default_sweep(),
    default_sweep(repetitions=3, max_repetitions=3),                                  # sweep_precision's fixed
    default_sweep(rates_mbit=(10.0,), sizes=(1000,), profiles=("chacha20-poly1305",), repetitions=15,
                  max_repetitions=15),                                                # cpu_noise's
    default_sweep(topology="road_warrior", clients=5, profiles=("aes-gcm-256",), rates_mbit=(10.0, 100.0),
                  sizes=(1460,), repetitions=2, max_repetitions=2),                   # many_clients'
    dataclasses.replace(default_sweep(rates_mbit=(0.5,), sizes=(1460,)), latency_probe=False),
    default_sweep(rates_mbit=(100.0,), duration_s=6.0, repetitions=1, max_repetitions=4, probe_tool="irtt",
                  probe_per_s=20.0, budget_s=None, warmup_s=0.25),
    SweepSpec(),                                                                      # the library's defaults
    SweepSpec(topology="host_to_host", mode="transport", plain=False, profiles=("aes-cbc-128-md5",),
              ip_versions=(4, 6), transports=("tcp", "udp"), size_mode="write", sizes=(1024, 8192), mtu=9000,
              socket_buffer=65535, arms=(0, 3000), precision_pct=1.5, budget_s=120.5, udp_bitrate="50M"),
    default_sweep(keying="ike", pmtu="fragment", cpu_precision_pct=5.0),
]


@pytest.mark.parametrize("spec", SPECS)
def test_a_sweeps_changes_from_the_default_sweep_make_that_sweep_again(spec):
    assert default_sweep(**changes(spec)) == spec
    base = SweepSpec()
    assert dataclasses.replace(base, **changes(spec, base)) == spec


def test_the_changes_name_only_what_differs_from_the_default_sweep():
    assert changes(default_sweep()) == {} and describe_changes(default_sweep()) == "the default sweep"
    spec = default_sweep(rates_mbit=(10.0,), sizes=(1000,), repetitions=15, max_repetitions=15)
    assert changes(spec) == {"rates_mbit": (10.0,), "sizes": (1000,), "repetitions": 15, "max_repetitions": 15}
    assert describe_changes(spec) == \
        "the default sweep with rates_mbit=10, sizes=1000, repetitions=15, max_repetitions=15"
    # the probe's rate fitted to a slow link is the default sweep's there, not a change; another rate is one
    slow = default_sweep(rates_mbit=(0.5,))
    assert slow.probe_per_s < default_sweep().probe_per_s and changes(slow) == {"rates_mbit": (0.5,)}
    assert changes(dataclasses.replace(slow, probe_per_s=1.0)) == {"rates_mbit": (0.5,), "probe_per_s": 1.0}
    assert describe_changes(dataclasses.replace(default_sweep(), latency_probe=False, budget_s=None)) == \
        "the default sweep with budget_s=None, latency_probe=False"


def test_a_sweep_apart_is_its_spec_into_its_directory_without_a_report(monkeypatch, tmp_path):
    jobs = []
    monkeypatch.setattr(runner, "run_apart", lambda job, log=None: jobs.append((job, log)) or 7)
    monkeypatch.chdir(tmp_path)
    spec = default_sweep(rates_mbit=(10.0,))
    assert runner.sweep_apart(spec, "out", log="out.log", command=("ipsec-testbed", "bench", "cpu_noise")) == 7
    (job, log), = jobs
    assert isinstance(job, Job) and job.work == SweepWork(spec) and log == "out.log"
    assert job.out_dir == os.path.join(tmp_path, "out") and not job.report and job.started_unix is not None
    assert job.command == ("ipsec-testbed", "bench", "cpu_noise") and Job.loads(job.dumps()) == job

"""The benchmarks' sweeps: typed specs run apart, and what each is said as, against the default sweep."""
from __future__ import annotations

import os

from experiments import runner
from experiments.engine.plan import SweepSpec, changes, default_sweep, describe_changes
from experiments.job import Job, SweepWork


def test_a_sweep_is_said_by_the_fields_that_differ_from_the_default_sweep():
    assert changes(default_sweep()) == {} and describe_changes(default_sweep()) == "the default sweep"
    fixed = default_sweep(repetitions=3, max_repetitions=3)  # sweep_precision's
    assert changes(fixed) == {"repetitions": 3, "max_repetitions": 3}
    assert describe_changes(fixed) == "the default sweep with repetitions=3, max_repetitions=3"
    # a slower link gets a slower probe by default: that is no change of the probe's rate ...
    slow = default_sweep(rates_mbit=(0.5,), sizes=(1460,))
    assert slow.probe_per_s < default_sweep().probe_per_s
    assert changes(slow) == {"rates_mbit": (0.5,), "sizes": (1460,)}
    # ... and a rate given is one, said as the sweep's values are (numbers as short as they are, lists with commas)
    assert describe_changes(default_sweep(rates_mbit=(100.0, 2.5), probe_per_s=20.0, budget_s=None)) == \
        "the default sweep with rates_mbit=100,2.5, budget_s=None, probe_per_s=20"


def test_a_sweep_is_said_against_another_base_when_given():
    assert changes(SweepSpec()) == {"repetitions": 3, "max_repetitions": None, "budget_s": None,
                                    "latency_probe": False}
    assert changes(SweepSpec(mtu=9000, sizes=(1460,)), SweepSpec()) == {"mtu": 9000, "sizes": (1460,)}
    assert changes(default_sweep(keying="ike"), default_sweep(keying="ike")) == {}


def test_a_sweep_apart_is_its_spec_into_its_directory_without_a_report(monkeypatch, tmp_path):
    jobs = []
    monkeypatch.setattr(runner, "run_apart", lambda job, log=None: jobs.append((job, log)) or 7)
    monkeypatch.chdir(tmp_path)
    spec = default_sweep(rates_mbit=(10.0,))
    assert runner.sweep_apart(spec, "out", log="out.log", command=("ipsec-testbed", "bench", "probe_queue")) == 7
    (job, log), = jobs
    assert isinstance(job, Job) and job.work == SweepWork(spec) and log == "out.log"
    assert job.out_dir == os.path.join(tmp_path, "out") and not job.report and job.started_unix is not None
    assert job.command == ("ipsec-testbed", "bench", "probe_queue") and Job.loads(job.dumps()) == job

"""The benchmarks' sweeps: typed specs run apart, and the sweep command each stands for, read back by the
command's own parser."""
from __future__ import annotations

import dataclasses
import os

import pytest

from benchmarks import _common
from cli.sweep import build_parser, spec_from
from experiments import runner
from experiments.engine.plan import SweepSpec, default_sweep
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
def test_the_command_a_benchmarks_sweep_stands_for_makes_that_sweep(spec):
    words = _common.sweep_command(spec)
    assert words[:2] == ("ipsec-testbed", "sweep")
    parsed = spec_from(build_parser().parse_args(list(words[2:])))
    # (a count of repetitions given alone is exactly that many: the spec's None says the same)
    assert parsed == dataclasses.replace(spec, max_repetitions=spec.most_repetitions)


def test_every_field_of_a_sweep_is_said_by_an_option_or_refused():
    options = {o for a in build_parser()._actions for o in a.option_strings}
    assert set(_common.SWEEP_OPTIONS.values()) <= options
    assert set(_common.SWEEP_OPTIONS) | _common._SAID_APART | {"arm_filters"} \
        == {f.name for f in dataclasses.fields(SweepSpec)}


def test_the_command_names_only_what_differs_from_the_default_sweep():
    assert _common.sweep_command(default_sweep()) == ("ipsec-testbed", "sweep")
    assert _common.sweep_command(default_sweep(rates_mbit=(10.0,), repetitions=15, max_repetitions=15)) == (
        "ipsec-testbed", "sweep", "--rates", "10", "--repetitions", "15")
    with pytest.raises(ValueError, match="no option of ipsec-testbed sweep sets arm_filters"):
        _common.sweep_command(default_sweep(arms=(0, 100), arm_filters=2))


def test_a_sweep_apart_is_its_spec_into_its_directory_without_a_report(monkeypatch, tmp_path):
    jobs = []
    monkeypatch.setattr(runner, "run_apart", lambda job, log=None: jobs.append((job, log)) or 7)
    monkeypatch.chdir(tmp_path)
    spec = default_sweep(rates_mbit=(10.0,))
    assert runner.sweep_apart(spec, "out", log="out.log", command=("ipsec-testbed", "sweep", "--rates", "10")) == 7
    (job, log), = jobs
    assert isinstance(job, Job) and job.work == SweepWork(spec) and log == "out.log"
    assert job.out_dir == os.path.join(tmp_path, "out") and not job.report and job.started_unix is not None
    assert job.command == ("ipsec-testbed", "sweep", "--rates", "10") and Job.loads(job.dumps()) == job

"""Every benchmark is one object of one type: its name, its options as a frozen dataclass whose every field the
command line offers, a run and a page; its --help comes from that alone."""
from __future__ import annotations

import dataclasses
import typing

import pytest

from cli import bench
from experiments import benchmark
from experiments.job import KernelChoice


@pytest.mark.parametrize("name", benchmark.names())
def test_each_benchmark_is_a_benchmark_whose_options_the_command_line_offers(name, capsys):
    b = benchmark.load(name)
    assert isinstance(b, benchmark.Benchmark) and b.name == name and b.summary
    assert dataclasses.is_dataclass(b.options) and b.options.__dataclass_params__.frozen
    hints = typing.get_type_hints(b.options)
    for f in dataclasses.fields(b.options):
        # every field is an option, the kernel's, or one the benchmark hands itself through its job (said so)
        assert "option" in f.metadata or hints[f.name] is KernelChoice or "internal" in f.metadata, \
            f"{name}: {f.name} has no option()"
    assert callable(b.run) and callable(b.page) and (b.needs is None or callable(b.needs))
    b.options()  # the defaults are options that check out
    with pytest.raises(SystemExit) as e:
        bench.main([name, "--help"])
    assert e.value.code == 0
    help_text = capsys.readouterr().out
    assert help_text.startswith(f"usage: ipsec-testbed bench {name}")
    for f in dataclasses.fields(b.options):
        meta = f.metadata.get("option")
        if meta and not meta["positional"] and not meta["rest"]:
            flags = meta["flag"] or "--" + f.name.replace("_", "-")
            assert all(flag in help_text for flag in ([flags] if isinstance(flags, str) else flags)), (name, f.name)


def test_a_job_carries_the_options_to_a_guest_and_back():
    b = benchmark.load("shaping_accuracy")
    options = b.options(rates=(10.0, 34.0), qdisc="htb", kernel=KernelChoice(kernel="uml"))
    job = b.job(options, ("ipsec-testbed", "bench", "shaping_accuracy"))
    assert job.kernel.kernel == "uml" and "kernel" not in job.work.options
    back = type(job).loads(job.dumps())
    assert b.options_of(back.work.options) == dataclasses.replace(options, kernel=KernelChoice())


def test_an_unknown_benchmark_is_refused_in_one_line(capsys):
    assert bench.main(["no_such_bench"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown benchmark 'no_such_bench'" in err


def test_a_benchmark_that_chooses_its_kernels_gives_the_crypto_to_the_counted_guest_alone(bench_cli):
    options = bench_cli.options("topology_build", "--where", "qemu", "--qemu-crypto", "generic")
    assert (options.kernel.kernel, options.kernel.qemu_crypto) == ("qemu", "generic")
    assert bench_cli.options("topology_build").kernel.qemu_crypto is None


def test_an_out_that_cannot_be_a_directory_is_refused_in_one_line(bench_cli, tmp_path):
    (tmp_path / "file").write_text("")
    bench_cli.refuses("xfrm_scale", "--out", str(tmp_path / "file"))


def test_a_benchmark_told_to_measure_beside_another_run_hands_that_to_its_job():
    b = benchmark.load("xfrm_scale")
    command = ("ipsec-testbed", "bench", "xfrm_scale")
    assert b.job(b.options(), command, allow_concurrent=True).allow_concurrent
    assert not b.job(b.options(), command).allow_concurrent
    # a field named kernel that is no kernel choice travels as an option (bisect's --kernel uml|qemu)
    bisect = benchmark.load("bisect")
    job = bisect.job(bisect.options(kernel="qemu"), ("ipsec-testbed", "bench", "bisect"))
    assert job.work.options["kernel"] == "qemu"

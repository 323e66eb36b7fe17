"""bench counted: its command line, and its parts run on stand-ins for the counted backend's sweeps."""
from __future__ import annotations

import dataclasses
import subprocess

import pytest

from benchmarks import counted
from experiments import injection
from testbed.errors import Refused
from testbed.record import Record

#: A counted window's instructions per packet, the +1 % arm's, and a little noise window by window.
IPP, NOISE = 59_000.0, (0.0, 40.0, -15.0, 25.0, -30.0, 10.0)


def test_its_command_line_gives_the_old_parsers_options_and_refuses_a_bad_value_in_one_line(tmp_path, bench_cli):
    assert bench_cli.options("counted") == counted.Options(("twice", "hog", "aa", "power"), "udp", 6, 1.0, 10, 20, 4,
                                                           f"{counted.REPO}/runs/bench-counted")
    assert bench_cli.options("counted", "--parts", "twice,aa", "--transport", "tcp", "--duration", "2",
                             "--power-pairs", "6", "--out", str(tmp_path)) == counted.Options(
        ("twice", "aa"), "tcp", duration=2.0, power_pairs=6, out=str(tmp_path))
    for words in (["--parts", "twice,thrice"], ["--pairs", "0"], ["--transport", "sctp"]):
        bench_cli.refuses("counted", *words)


class Backend:
    def __init__(self, why=None):
        self.why = why

    def unavailable(self):
        return self.why

    def describe_kernel(self):
        return "Debian's 6.1 in qemu-system-x86_64"


class Hog:
    def __init__(self, argv):
        self.killed = False

    def kill(self):
        self.killed = True

    def wait(self):
        return -9


def sweep(spec, run_dir):
    """A counted sweep's records: each arm its extra instructions (1 % of a window's at 590), no noise between boots."""
    arms = spec.arms or (0,)
    return [Record(topology="vpn_gateway", profile="aes-gcm-256", mode="tunnel", ip_version=4, transport="udp",
                   rate_mbit=1000.0, size_bytes=1400, size_mode="datagram", clients=1, repetition=i,
                   arm="abc"[k] if spec.arms else None, clock="instructions", goodput_mbps=100.0, wall_s=2.5,
                   instructions_per_packet=IPP * (1 + extra / 59_000) + NOISE[i % len(NOISE)],
                   instructions=int(IPP * 1000), link_packets=1000)
            for i in range(spec.repetitions) for k, extra in enumerate(arms)]


def test_every_part_runs_and_its_figures_are_on_the_page(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(counted.qemu, "QemuBackend", Backend)
    monkeypatch.setattr(counted, "measure", sweep)
    monkeypatch.setattr(subprocess, "Popen", Hog)
    cal = injection.Calibration("qemu", "bench-counted", "the point", IPP, 1.0, 590, 4, "now", unit="instructions")
    monkeypatch.setattr(injection, "calibrated", lambda *a, **k: cal)
    args = counted.Options(repetitions=4, pairs=6, trials=2, power_pairs=6, out=str(tmp_path))
    result = counted.run(args)
    assert [r.repetition for r in result.twice.first] == [0, 1, 2, 3] and result.hog.quiet == result.twice.first
    assert not result.aa.verdict.regressed
    assert result.power.instructions == 590
    assert all(t.b.regressed and not t.c.regressed for t in result.power.trials)
    text = counted.page(args, result)
    assert text.startswith("counted: Debian's 6.1 in qemu-system-x86_64; the point: udp, 1-s windows;")
    assert "  instructions_per_packet: means 59012.5000 and 59012.5000 (+0.000 %)" in text
    assert "  +1 % flagged 2 of 2; identical arms flagged 0 of 2; the change as measured +1.00 % (mean)" in text
    assert "counted: power:" in capsys.readouterr().err  # progress as it goes
    only = counted.run(dataclasses.replace(args, parts=("hog",)))
    assert only.twice is None and len(only.hog.quiet) == 4  # a quiet boot of its own
    assert counted.page(args, only).count("\n") == 4  # the heading and the hog's four lines


def test_it_refuses_where_the_counted_backend_cannot_run(monkeypatch):
    monkeypatch.setattr(counted.qemu, "QemuBackend", lambda: Backend("qemu-system-x86_64 is not installed"))
    with pytest.raises(Refused, match="cannot run here: qemu-system-x86_64 is not installed"):
        counted.run(counted.Options())

"""A UML kernel whose FPU buffer is smaller than this CPU's XSAVE area, for real.

Debian's kernel cannot boot on a CPU with AMX for this reason (testbed/xsave.py).  The recipe
builds a tiny kernel with an 832-byte buffer, smaller than the XSAVE area of any CPU with
AVX-512 or AMX, so the same failure happens here on any such x86-64 host: ``doctor`` and the
sweep must say so before any boot, and a boot must end in one line that names the cause.
"""
import os
import subprocess
import sys

import pytest
from conftest import REPO, run_cli

from testbed import kernelbuild, kernelsource, xsave
from testbed.backends import uml

SMALL_FP_BYTES = 832


@pytest.fixture(scope="module")
def small_kernel() -> str:
    host = xsave.host_bytes()
    if host is None or host <= SMALL_FP_BYTES:
        pytest.skip(f"this CPU's XSAVE area ({host} bytes) fits an {SMALL_FP_BYTES}-byte buffer: "
                    "no kernel can be built too small for it")
    # built once per machine (about 4 minutes on 2 CPUs), then taken from the cache
    return kernelbuild.build(kernelsource.RECIPE, variant="tiny", fp_bytes=SMALL_FP_BYTES).path


def test_doctor_says_before_any_boot_that_it_cannot_boot_here(small_kernel):
    out = run_cli("doctor", "--uml-kernel", small_kernel)
    text = " ".join((out.stdout + out.stderr).split())  # the table wraps long cells
    assert f"{SMALL_FP_BYTES}-byte FPU buffer, smaller than this CPU's {xsave.host_bytes()}-byte XSAVE area" in text
    assert "sudo ./run install" in text


def test_the_sweep_ends_in_one_line_naming_the_xsave_cause(small_kernel, tmp_path):
    out = subprocess.run([sys.executable, "experiments/packet_size_sweep.py", "--uml-kernel", small_kernel,
                          "--out", str(tmp_path / "run")], cwd=REPO, capture_output=True, text=True, timeout=300,
                         stdin=subprocess.DEVNULL)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert f"{SMALL_FP_BYTES}-byte FPU buffer" in last and "XSAVE area" in last and "./run install" in last, \
        out.stderr[-2000:]
    assert not os.path.exists(tmp_path / "run" / "results.jsonl")


def test_a_boot_shows_the_telling_console_lines_and_the_cause(small_kernel):
    spec = uml.build_spec(["true"], kernel=small_kernel, mem="256M", timeout_s=120, cpu_meter=False)
    with pytest.raises(uml.UmlError) as e:
        uml.run(spec)
    lines = str(e.value).splitlines()
    assert lines[0].startswith("the UML guest failed to boot (the project's UML kernel"), lines
    assert any("ptrace set fp regs failed, errno = 14" in line for line in lines), lines
    assert lines[-1].startswith(f"cause: the kernel's FPU buffer ({SMALL_FP_BYTES} bytes) is smaller than this "
                                f"CPU's XSAVE area ({xsave.host_bytes()} bytes)"), lines
    assert len(lines) <= 12  # the lines that say why, not a stack trace's tail

"""Which UML kernel boots here, and why a guest that did not boot died (no root, no guest).

The XSAVE size is asked of the real host; the choice between kernels is checked with
stand-in kernel images (executable files with a recipe's build.json beside them) and the
host's size given, so that an AMX host's case is checked on any machine.
"""
from __future__ import annotations

import json
import os
import platform

import pytest

from testbed import umlkernel, xsave
from testbed.backends import uml

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
AMX_XSAVE = 11008  # Sapphire Rapids' user XSAVE area (AMX tiles included)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the XSAVE area is x86-64's")
def test_the_host_reports_its_xsave_area_through_ptrace():
    size = xsave.host_bytes()
    # legacy FXSAVE area (512) + XSAVE header (64) at the least, in 8-byte units
    assert size is not None and size >= 576 and size % 8 == 0
    assert str(size) in xsave.describe()


def test_a_buffer_fits_the_host_only_when_it_holds_the_whole_area():
    assert xsave.fits(xsave.DEBIAN_FP_BYTES, host=2440)
    assert xsave.fits(xsave.DEBIAN_FP_BYTES, host=2696)
    assert not xsave.fits(xsave.DEBIAN_FP_BYTES, host=AMX_XSAVE)
    assert xsave.fits(12288, host=AMX_XSAVE)
    assert "cannot boot here" in xsave.describe(AMX_XSAVE) and "fits" in xsave.describe(2440)


@pytest.fixture
def host(monkeypatch):
    """A setter of the host's XSAVE size, as testbed.xsave reports it."""
    def set_size(size):
        monkeypatch.setattr(xsave, "host_bytes", lambda: size)
    return set_size


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    """Debian's kernel as a stand-in executable and an empty kernel cache; returns a maker of recipe builds."""
    fake_debian = tmp_path / "linux.uml"
    fake_debian.write_text("#!/bin/sh\n")
    fake_debian.chmod(0o755)
    monkeypatch.setattr(umlkernel, "debian", lambda: umlkernel.UmlKernel(
        str(fake_debian), "debian", "", version="6.1.176", fp_bytes=xsave.DEBIAN_FP_BYTES))
    monkeypatch.setenv("IPSEC_TESTBED_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(umlkernel.KERNEL_ENV, raising=False)
    monkeypatch.setattr(umlkernel, "recipe_key", lambda: "0123456789ab")

    def build(fp_bytes=12288, key="0123456789ab"):
        d = tmp_path / "cache" / "kernels" / f"linux-6.1.192-um-{key}"
        d.mkdir(parents=True)
        (d / "linux").write_text("#!/bin/sh\n")
        (d / "linux").chmod(0o755)
        (d / "build.json").write_text(json.dumps({"origin": "recipe", "key": key, "version": "6.1.192",
                                                  "fp_bytes": fp_bytes}))
        return str(d / "linux")
    return build


def test_debians_kernel_where_this_cpus_area_fits_it(host, kernels):
    host(2440)
    kernels()
    chosen = umlkernel.select()
    assert chosen.origin == "debian" and "2440" in chosen.reason and chosen.cannot_boot() is None
    assert not umlkernel.needs_build()


def test_on_an_amx_host_the_projects_kernel_and_the_reason(host, kernels):
    host(AMX_XSAVE)
    with pytest.raises(umlkernel.KernelUnavailableError, match=r"cannot boot on this CPU.*11008.*sudo ./run install"):
        umlkernel.select()
    assert umlkernel.needs_build()
    path = kernels()
    chosen = umlkernel.select()
    assert (chosen.path, chosen.origin, chosen.version, chosen.fp_bytes) == (path, "recipe", "6.1.192", 12288)
    assert "11008" in chosen.reason and "ipsec-testbed kernel build" in chosen.reason
    assert not umlkernel.needs_build()
    meta = chosen.metadata()
    assert meta["kernel_origin"] == "recipe" and meta["kernel_recipe_key"] == "0123456789ab"
    assert meta["host_xsave_bytes"] == AMX_XSAVE


def test_a_build_of_an_older_recipe_is_not_taken(host, kernels):
    host(AMX_XSAVE)
    kernels(key="ffffffffffff")  # e.g. built with ESP offload in, before the recipe changed
    with pytest.raises(umlkernel.KernelUnavailableError):
        umlkernel.select()


def test_a_kernel_whose_buffer_is_too_small_is_known_before_it_boots(host, kernels, monkeypatch):
    host(2440)
    small = kernels(fp_bytes=1024, key="small0000000")
    chosen = umlkernel.select(small)
    assert chosen.origin == "recipe" and chosen.fits_host is False
    why = chosen.cannot_boot()
    assert "1024-byte FPU buffer" in why and "2440-byte XSAVE area" in why and "./run install" in why
    # the backend says so, so that choosing a backend (doctor, the sweep) says it before any boot
    backend = uml.UmlBackend(uml.Options(kernel=small))
    assert backend.unavailable() == why


def test_words_and_the_environment_name_a_kernel(host, kernels, monkeypatch):
    host(2440)
    path = kernels()
    assert umlkernel.select("recipe").path == path
    assert umlkernel.select("debian").origin == "debian"
    monkeypatch.setenv(umlkernel.KERNEL_ENV, "recipe")
    chosen = umlkernel.select()
    assert chosen.path == path and umlkernel.KERNEL_ENV in chosen.reason
    assert umlkernel.select("debian").origin == "debian"  # --uml-kernel wins over the environment
    with pytest.raises(umlkernel.KernelUnavailableError, match="does not exist"):
        umlkernel.select("/nonexistent/linux")
    with pytest.raises(umlkernel.KernelUnavailableError, match=r"6\.12\), but that kernel is not built yet: "
                                                                 r"`sudo ipsec-testbed kernel build 6\.12`"):
        umlkernel.select("6.12")


def test_a_user_kernel_is_taken_at_its_word(host, kernels, tmp_path):
    host(AMX_XSAVE)
    mine = tmp_path / "linux"
    mine.write_text("#!/bin/sh\n")
    mine.chmod(0o755)
    chosen = umlkernel.select(str(mine))
    assert chosen.origin == "user" and chosen.fp_bytes is None and chosen.cannot_boot() is None


def _console(name: str) -> str:
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


def test_a_failed_boot_names_the_xsave_cause_in_one_line(host):
    host(2440)
    kernel = umlkernel.UmlKernel("/k/linux", "recipe", "", fp_bytes=1024)
    cause, lines = umlkernel.boot_failure(_console("uml-xsave-panic.txt"), kernel)
    assert cause.startswith("the kernel's FPU buffer (1024 bytes) is smaller than this CPU's XSAVE area "
                            "(2440 bytes)")
    assert "./run install" in cause
    # the console of a real boot (the tests' tiny kernel, 832 bytes, on a 2440-byte host): 128 lines of
    # complaints about consoles it was built without, then the two lines that say why
    assert lines == ["userspace - ptrace set fp regs failed, errno = 14",
                     "Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b"]
    message = uml._death(_console("uml-xsave-panic.txt"), _spec(kernel), -6, 1.1, booted=False)
    assert message.splitlines()[0].startswith("the UML guest failed to boot (the project's UML kernel")
    assert message.splitlines()[-1].startswith("cause: the kernel's FPU buffer (1024 bytes) is smaller")
    assert len(message.splitlines()) == 5


@pytest.mark.parametrize("line,words", [
    ("check_ptrace : child exited with exitcode 1, while expecting 0", "ptrace is not allowed"),
    ("Checking PROT_EXEC mmap in /dev/shm...Operation not permitted", "/dev/shm"),
    ("Checking for something new...Permission denied", None),
    ("/dev/shm must be not mounted noexec", "/dev/shm"),
    ("Couldn't allocate shadow memory: Cannot allocate memory", "could not get its memory"),
])
def test_other_known_causes(line, words):
    cause, lines = umlkernel.boot_failure(f"Core dump limits :\n{line}\nsomething else\n")
    if words is None:
        assert cause is None and lines == [line]  # not a known cause, but the telling line is shown
    else:
        assert words in cause and line in lines


def test_an_unknown_death_shows_the_telling_lines_or_the_tail():
    cause, lines = umlkernel.boot_failure("a\nb\nc\n")
    assert cause is None and lines == ["a", "b", "c"]


def _spec(kernel):
    return uml.UmlSpec(command=("true",), kernel=kernel.path, modules_dir=None, cwd="/", kernel_info=kernel)


def test_the_line_every_boot_prints_is_no_cause():
    # Debian's linux.uml prints it at every boot: a guest killed from outside did not lack memory
    cause, lines = umlkernel.boot_failure("Core dump limits :\nmmapper_init - find_iomem failed\n")
    assert cause is None and not any("mmapper" in line for line in lines)

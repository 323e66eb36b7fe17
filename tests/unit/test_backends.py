"""A third way of getting a kernel is one class: a test backend registered beside host and uml.

``ContainerBackend`` stands for a backend that runs the work elsewhere (a VM, a container, a
remote host): here it runs the command in a child process with the guest marker set, which is
all the interface asks of it. Registered, it is offered by ``--kernel``, chosen by
``choose()``, runs a command through :meth:`KernelBackend.run`, and inside its "guest" the
process knows where it runs; nothing else in the testbed changes.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import BinaryIO

import pytest

from cli.options import add_kernel_options
from testbed import backends
from testbed.backends import GUEST_ENV, KernelBackend, Leftover
from testbed.capabilities import BASE_NEEDS, ESP_NEEDS, Check, Needs, Probe


class ContainerBackend(KernelBackend):
    name = "container"
    title = "a test container"
    auto = False  # only when asked for by name
    note = "a test backend"
    ran: list[list[str]] = []  # noqa: RUF012 (the commands it ran, for the test)

    def unavailable(self) -> str | None:
        return None

    def lacks(self, needs: Needs, probe_host: Callable[[], Probe]) -> list[str]:
        return []  # its kernel has everything

    def run(self, argv: Sequence[str], *, cwd: str | None = None, timeout_s: float | None = None,
            interactive: bool = False, modules: Sequence[str] = (), output: BinaryIO | None = None,
            cpu: int | None = None) -> int:
        self.ran.append(list(argv))
        env = {**os.environ, GUEST_ENV: self.name}
        try:
            return subprocess.run(list(argv), cwd=cwd, env=env, timeout=timeout_s, stdout=output,
                                  stderr=subprocess.STDOUT if output is not None else None).returncode
        except subprocess.TimeoutExpired:
            return 124

    def leftovers(self) -> list[Leftover]:
        return []


@pytest.fixture
def container():
    backends.register(ContainerBackend)
    ContainerBackend.ran.clear()
    yield
    backends.unregister(ContainerBackend.name)


def test_a_registered_backend_is_offered_chosen_and_runs_a_command(container, tmp_path):
    assert backends.names()[-1] == "container"
    parser = argparse.ArgumentParser()
    add_kernel_options(parser)
    assert parser.parse_args(["--kernel", "container"]).kernel == "container"

    choice = backends.choose("container", ESP_NEEDS)
    assert isinstance(choice.backend, ContainerBackend) and choice.reason == "--kernel container was requested"
    # auto never picks a backend that asks not to be
    plain = backends.choose(backends.AUTO, Needs(BASE_NEEDS), probe_host=_probe_ok)
    assert plain.backend is not None and not isinstance(plain.backend, ContainerBackend)

    out = tmp_path / "out"
    # the command a guest runs: the testbed, with this backend registered as its package would be
    script = (f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
              "from testbed import backends; from test_backends import ContainerBackend; "
              "backends.register(ContainerBackend); b = backends.current(); "
              "print(b.name, b.runs_here, b.title); sys.exit(3)")
    with open(out, "wb") as f:
        rc = choice.backend.run([sys.executable, "-c", script], cwd=os.getcwd(), output=f)
    assert rc == 3
    # inside, the process knows it runs on the container's kernel
    assert out.read_text().split() == ["container", "False", "a", "test", "container"]
    assert ContainerBackend.ran and ContainerBackend.ran[0][0] == sys.executable
    assert choice.backend.metadata()["backend"] == "container"


def test_an_unregistered_backend_is_refused_by_name(container):
    backends.unregister("container")
    with pytest.raises(ValueError, match="'container' is not one of auto, host, uml"):
        backends.get("container")


def _probe_ok() -> Probe:
    """A host kernel with veth and tbf (what a plain sweep needs)."""
    return Probe("6.1-test", "host", tuple(Check("kernel", n, True, "") for n in BASE_NEEDS))


def test_a_guest_reports_no_uml_leftovers_it_cannot_judge(tmp_path, monkeypatch):
    """Inside a guest the host's /tmp shows (hostfs) but not the host's processes: every work
    directory would look dead, its own guest's too, and `clean` there must not remove them."""
    from testbed.backends import umlclean

    workdir = tmp_path / "itb-abc123-uml-x"
    workdir.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setattr(umlclean, "CPUACCT_ROOT", str(tmp_path / "no-cgroups"))
    monkeypatch.setattr("testbed.names.STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv(GUEST_ENV, raising=False)
    assert [item.name for item in umlclean.leftovers()] == [str(workdir)]  # on the host: seen
    monkeypatch.setenv(GUEST_ENV, "uml")
    assert umlclean.leftovers() == []
    monkeypatch.setenv(GUEST_ENV, "qemu")  # a counted guest sees the host's /tmp through 9p, as blind
    assert umlclean.leftovers() == []
    monkeypatch.setenv(GUEST_ENV, "host")  # the host backend's processes run on the host: they can judge
    assert [item.name for item in umlclean.leftovers()] == [str(workdir)]


def test_a_guest_is_known_by_its_kernel_where_its_environment_does_not_say(tmp_path, monkeypatch):
    from testbed import names

    for words, booted in (("BOOT_IMAGE=/vmlinuz root=/dev/vda ro quiet", False),
                          ("mem=2G root=/dev/root rootfstype=hostfs init=/tmp/itb-0a1b2c-uml-x7/init.sh", True),
                          ("root=/dev/sda init=/sbin/init", False),
                          ("console=ttyS0 quiet panic=-1 itb.init=/tmp/w/init.sh", True),
                          ("umid=someone-else", False)):
        (tmp_path / "cmdline").write_text(words + "\n")
        assert names.booted_by_the_testbed(str(tmp_path / "cmdline")) is booted, words
    assert not names.booted_by_the_testbed(str(tmp_path / "absent"))
    # `sudo` in a guest drops the variable, and the host backend inside a guest names itself: the kernel tells
    monkeypatch.setattr(names, "booted_by_the_testbed", lambda cmdline="/proc/cmdline": True)
    for value in (None, "host"):
        if value is None:
            monkeypatch.delenv(GUEST_ENV, raising=False)
        else:
            monkeypatch.setenv(GUEST_ENV, value)
        assert names.in_a_guest()
    monkeypatch.setattr(names, "booted_by_the_testbed", lambda cmdline="/proc/cmdline": False)
    assert not names.in_a_guest()
    monkeypatch.setenv(GUEST_ENV, "qemu")
    assert names.in_a_guest()


def test_a_guest_reports_no_qemu_leftovers_it_cannot_judge(tmp_path, monkeypatch):
    """A UML guest (the suite's integration guests) sees a counted guest's work directory through hostfs and not
    its owner: taken for a dead run's and removed at the guest's next run's start, the counted guest lost its init
    script mid-boot and its kernel panicked."""
    from testbed.backends import qemu

    workdir = tmp_path / "itb-abc123-qemu-x"
    workdir.mkdir()
    (workdir / "owner").write_text("999999999\n")  # no such process: dead, as seen from anywhere
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.delenv(GUEST_ENV, raising=False)
    # (what this test owns: a counted guest measuring elsewhere on the machine is another's, listed or not)
    assert [item.name for item in qemu.QemuBackend().leftovers() if item.kind == "work directory"] == [str(workdir)]
    for inside in ("uml", "qemu"):
        monkeypatch.setenv(GUEST_ENV, inside)
        assert qemu.QemuBackend().leftovers() == []


def test_a_new_guests_empty_cgroup_is_not_taken_for_a_dead_ones(tmp_path, monkeypatch):
    """Two runs starting at once (a paired A/B): one's cgroup exists before its guest joins it, and the
    other's start, removing dead runs' leftovers, must leave it alone while its run is alive."""
    from testbed.backends import umlclean

    cgroups = tmp_path / "cpuacct"
    (cgroups / "itb-abc123").mkdir(parents=True)
    (cgroups / "itb-abc123" / "cgroup.procs").write_text("")  # no process has joined yet
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setattr(umlclean, "CPUACCT_ROOT", str(cgroups))
    monkeypatch.setattr("testbed.names.STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv(GUEST_ENV, raising=False)

    def cgroup():
        return next(item for item in umlclean.leftovers() if item.kind == "cgroup")

    assert not cgroup().live  # nobody's: removable
    workdir = tmp_path / "itb-abc123-uml-x1"
    workdir.mkdir()
    (workdir / "owner").write_text(f"{os.getpid()}\n")  # its run, alive
    assert cgroup().live


def test_a_process_being_reaped_is_not_alive(monkeypatch):
    # /proc/PID/stat opened while the task lives and read after it is reaped answers ESRCH: `clean`, killing a
    # namespace's processes as they exit (an IKE daemon on SIGTERM), took that for an error and stopped
    import builtins

    from testbed import netns
    from testbed.backends import umlclean

    real_open = builtins.open

    def reaped(path, *args, **kwargs):
        if str(path).startswith("/proc/424242/"):
            raise ProcessLookupError(3, "No such process")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", reaped)
    assert netns.is_alive(424242) is False and umlclean._live_parent(424242) is None  # clean's two readers
    assert netns.is_alive(os.getpid()) is True

"""Host tests: root on the host kernel, no ESP needed.

They exercise what lives outside any guest: booting User-Mode Linux, exit statuses,
live output, and cleaning up after a run killed with SIGKILL.
"""
import os
import shutil
import subprocess
import sys

import pytest

from testbed import kernel

CLI = [sys.executable, "-m", "testbed.cli"]


@pytest.fixture(scope="session", autouse=True)
def host_root():
    if os.geteuid() != 0:
        pytest.fail("host tests need root: run `sudo ipsec-testbed test`", pytrace=False)
    if kernel.in_uml():
        pytest.fail("host tests run on the host, not inside UML", pytrace=False)


@pytest.fixture
def needs_uml():
    if not shutil.which("linux.uml"):
        pytest.fail("linux.uml missing: scripts/install.sh installs user-mode-linux", pytrace=False)


def run_cli(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, **kw)


def root_namespace_state() -> dict:
    """What the host's root namespace holds that the testbed must never change."""
    def run(*a):
        return subprocess.run(a, capture_output=True, text=True).stdout
    return {"links": sorted(l.split()[0] for l in run("ip", "-br", "link").splitlines()),
            "xfrm_state": run("ip", "xfrm", "state"), "xfrm_policy": run("ip", "xfrm", "policy"),
            "routes": run("ip", "route"), "routes6": run("ip", "-6", "route"), "qdiscs": run("tc", "qdisc")}

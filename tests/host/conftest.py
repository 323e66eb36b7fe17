"""Host tests: root on the host kernel, no ESP needed.

They exercise what lives outside any guest: booting User-Mode Linux, exit statuses,
live output, and cleaning up after a run killed with SIGKILL.
"""
import os
import shutil
import subprocess
import sys

import pytest

from testbed import backends
from testbed.isolation import root_namespace_unchanged

CLI = [sys.executable, "-m", "cli.main"]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session", autouse=True)
def host_root():
    if os.geteuid() != 0:
        pytest.fail("host tests need root: run `sudo ipsec-testbed test`", pytrace=False)
    if not backends.current().runs_here:
        pytest.fail("host tests run on the host, not inside UML", pytrace=False)


@pytest.fixture
def needs_uml():
    if not shutil.which("linux.uml"):
        pytest.fail("linux.uml missing: scripts/install.sh installs user-mode-linux", pytrace=False)


def run_cli(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, **kw)


@pytest.fixture(autouse=True)
def root_namespace_untouched():
    """Every test leaves the root network namespace as it found it (links, addresses,
    routes, xfrm, qdiscs, sysctls); a difference fails the test, naming what changed."""
    with root_namespace_unchanged():
        yield

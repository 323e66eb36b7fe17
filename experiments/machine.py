"""What measurements depend on, for meta.json: kernel, backend, CPU, tool versions.

Found on the host before a guest boots and handed to it (:mod:`testbed.handoff`): the same
files are seen through hostfs, and starting the processes that report versions costs a
fraction there of what it does in the guest.
"""
from __future__ import annotations

import os
import platform
import subprocess

from testbed import backends, handoff

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tool_versions() -> dict:
    """Versions of iperf3, pyroute2, mininet, scapy and the testbed (git) as meta.json records them."""
    from importlib.metadata import PackageNotFoundError, version  # slow: see tests/unit/test_imports.py

    versions: dict = {}
    for name in ("pyroute2", "mininet", "scapy"):
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    try:
        out = subprocess.run(["iperf3", "--version"], capture_output=True, text=True, timeout=10).stdout
        versions["iperf3"] = out.split()[1] if out else None
    except (OSError, subprocess.TimeoutExpired, IndexError):
        versions["iperf3"] = None
    try:
        versions["testbed"] = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"],
                                             capture_output=True, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        versions["testbed"] = None
    return versions


def cpu_model() -> str:
    """This kernel's CPU model name ("UML" inside User-Mode Linux), or ""."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return ""


def hand_to_guest() -> None:
    """Hand a guest what :func:`machine_meta` needs from the host (found once per process)."""
    if not handoff.outgoing().versions:
        # a UML guest's cpuinfo says "UML": the host's CPU model is the one that matters
        handoff.hand(versions=tool_versions(), host_cpu_model=cpu_model())


def machine_meta() -> dict:
    """What the results depend on: kernel, backend, CPU, tool versions, and how CPU was accounted."""
    backend = backends.current()
    handed = handoff.current()
    return {"kernel_release": platform.release(), **backend.metadata(), "cpu_model": cpu_model(),
            "cpu_count": os.cpu_count(), "python": platform.python_version(),
            **({"host_cpu_model": handed.host_cpu_model} if handed.host_cpu_model else {}),
            **({"keep_awake": handed.keep_awake} if handed.keep_awake else {}),
            "versions": dict(handed.versions) or tool_versions()}

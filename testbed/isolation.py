"""A snapshot of what the testbed must never change: the root network namespace.

:func:`root_namespace_snapshot` reads links, addresses, IPv4 and IPv6 routes, xfrm states
and policies, qdiscs and the sysctls the testbed (or Mininet) could touch, with iproute2
and /proc/sys: an independent reader, not the testbed's own netlink code.  Two snapshots
taken around any piece of work must be equal; :func:`differences` says where they are not.
The test suites take one before and after every test.

The ``ip`` commands go through ``ip -batch``: one process instead of seven, because each
process start costs a tenth of a second inside User-Mode Linux.
"""
from __future__ import annotations

import contextlib
import re
import subprocess
from collections.abc import Iterator

#: Sysctls of the root namespace that network experiments (and Mininet's set-up) change.
SYSCTLS = (
    "net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding", "net/ipv6/conf/default/forwarding",
    "net/ipv6/conf/all/accept_dad", "net/ipv6/conf/default/accept_dad", "net/ipv4/ip_no_pmtu_disc",
    "net/ipv4/tcp_congestion_control", "net/ipv4/tcp_no_metrics_save", "net/ipv4/tcp_rmem",
    "net/ipv4/tcp_wmem", "net/core/rmem_max", "net/core/wmem_max", "net/core/netdev_max_backlog",
    "net/ipv4/neigh/default/gc_thresh1", "net/ipv4/neigh/default/gc_thresh2",
    "net/ipv4/neigh/default/gc_thresh3", "net/ipv6/neigh/default/gc_thresh1",
    "net/ipv6/neigh/default/gc_thresh2", "net/ipv6/neigh/default/gc_thresh3", "net/ipv4/route/max_size",
    "net/ipv6/route/max_size", "fs/file-max", "kernel/pty/max",
)

# What changes by itself: address lifetimes count down.
_VOLATILE = re.compile(r"\s*(valid_lft|preferred_lft) \S+")


def _run(argv: list[str], stdin: str = "") -> str:
    out = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60)
    if out.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {out.stderr.strip()}")
    return out.stdout


def root_namespace_snapshot() -> dict[str, str]:
    """The root namespace's state as text per area (call it from the root namespace)."""
    ip4 = _run(["ip", "-batch", "-"], "link show\naddr show\nroute show\nxfrm state\nxfrm policy\n")
    snap = {
        "links, addresses, IPv4 routes, xfrm states and policies": _VOLATILE.sub("", ip4),
        "IPv6 routes": _run(["ip", "-6", "-batch", "-"], "route show\n"),
        "qdiscs": _run(["tc", "-batch", "-"], "qdisc show\n"),
    }
    values = []
    for name in SYSCTLS:
        try:
            with open(f"/proc/sys/{name}") as f:
                values.append(f"{name.replace('/', '.')} = {f.read().strip()}")
        except OSError:
            continue  # not in this kernel
    snap["sysctls"] = "\n".join(values)
    return snap


def differences(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """One line per changed line, naming the area: ``qdiscs: + qdisc tbf 1: dev eth0 ...``."""
    out = []
    for area in before.keys() | after.keys():
        old = before.get(area, "").splitlines()
        new = after.get(area, "").splitlines()
        out += [f"{area}: - {line}" for line in old if line not in new]
        out += [f"{area}: + {line}" for line in new if line not in old]
    return sorted(out)


@contextlib.contextmanager
def root_namespace_unchanged() -> Iterator[None]:
    """Fail (AssertionError naming each change) if the block changed the root namespace."""
    before = root_namespace_snapshot()
    yield
    changed = differences(before, root_namespace_snapshot())
    assert not changed, "the root network namespace changed:\n" + "\n".join(changed)

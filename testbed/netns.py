"""Named network namespaces that the testbed owns: create, find, empty, delete.

The one place that creates or deletes a namespace.  Namespaces are bind mounts
under ``/run/netns`` (as ``ip netns add`` makes them), so iproute2 sees them too:
``ip -n itb-1a2b3c-doctor xfrm state``.
"""
from __future__ import annotations

import contextlib
import logging
import os
import resource
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from pyroute2 import netns as _netns

from testbed import _pyroute2, names, waiting

T = TypeVar("T")

_pyroute2.preload_libc()

log = logging.getLogger(__name__)

NETNS_DIR = "/run/netns"


def list_ours() -> list[str]:
    """Names of the testbed's namespaces that exist now."""
    try:
        entries = os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return []
    return sorted(n for n in entries if names.is_ours(n))


def pids_in(name: str) -> list[int]:
    """Processes whose network namespace is ``name`` (what ``ip netns pids`` does)."""
    try:
        target = os.stat(os.path.join(NETNS_DIR, name))
    except FileNotFoundError:
        return []
    return pids_in_inode(target.st_dev, target.st_ino)


def pids_in_inode(dev: int, ino: int) -> list[int]:
    """Processes whose network namespace file has this (device, inode)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (dev, ino):
            found.append(int(entry))
    return found


def kill_pids(pids: list[int], grace_s: float = 1.0) -> list[int]:
    """SIGTERM, then SIGKILL whatever still runs after ``grace_s``; returns the pids signalled."""
    signalled = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            signalled.append(pid)
    for _ in waiting.Deadline(grace_s, interval_s=0.05).polls():
        if not any(is_alive(p) for p in signalled):
            break
    for pid in signalled:
        if is_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return signalled


def is_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):  # gone, or going: a task being reaped answers ESRCH
        return False


def run_in(name: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` inside namespace ``name`` (or a path to a namespace file); return its result.

    setns(2) moves only the calling thread, so a throw-away thread enters the
    namespace and runs ``fn``; no thread of the caller changes namespace and no
    process is forked (pyroute2's own ``netns=`` forks a child per socket, which costs
    seconds inside User-Mode Linux).  Sockets made by ``fn`` stay bound to ``name``.
    """
    from pyroute2 import netns as pr_netns

    path = name if "/" in name else os.path.join(NETNS_DIR, name)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            pr_netns.setns(fd, flags=0)
            result["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 (handed to the caller's thread, which raises it)
            result["error"] = exc

    try:
        thread = threading.Thread(target=target, name=f"setns-{os.path.basename(path)}")
        thread.start()
        thread.join()
    finally:
        os.close(fd)
    if "error" in result:
        raise result["error"]
    return result["value"]


def socket_in(name: str, proto: int, family: int = socket.AF_NETLINK,
              type_: int = socket.SOCK_DGRAM) -> socket.socket:
    """A socket created inside namespace ``name`` (see :func:`run_in`)."""
    return run_in(name, lambda: socket.socket(family, type_, proto))


def iproute(name: str, ext_ack: bool = False):
    """A pyroute2 ``IPRoute`` working inside namespace ``name`` (a context manager).

    Use this, not pyroute2's ``IPRoute(netns=...)``: that one forks a Python child per
    socket (seconds inside User-Mode Linux) and stops it with SIGTERM, and a forked copy
    of a multi-threaded program (a progress bar's thread, Mininet's) can deadlock.
    ``ext_ack`` asks the kernel for its extended error messages.
    """
    from pyroute2.iproute.linux import IPRoute
    from pyroute2.netlink import NETLINK_ROUTE

    return IPRoute(use_socket=socket_in(name, NETLINK_ROUTE), ext_ack=ext_ack)


def write_sysctls(name: str, values: dict[str, str]) -> None:
    """Set sysctls inside namespace ``name``: ``{"net.ipv4.ip_forward": "1"}``.

    /proc/sys/net shows the namespace of the thread that opens a file, so a thread in
    ``name`` (see :func:`run_in`) writes them: no ``sysctl`` process per node.  Raises
    OSError naming the sysctl the kernel refused.
    """
    def write() -> None:
        for key, value in values.items():
            path = "/proc/sys/" + key.replace(".", "/")
            try:
                with open(path, "w") as f:
                    f.write(str(value))
            except OSError as e:
                raise OSError(e.errno, f"sysctl {key}={value} in {name}: {e.strerror}") from None
    run_in(name, write)


def create(name: str) -> None:
    """Create the namespace ``name`` (must carry the testbed's prefix) with lo up."""
    if not names.is_ours(name):
        raise ValueError(f"namespace {name!r} does not carry the testbed prefix {names.PREFIX!r}")
    if os.path.exists(os.path.join(NETNS_DIR, name)):
        raise FileExistsError(f"network namespace {name} exists already")
    _netns.create(name)
    with iproute(name) as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")


def delete(name: str) -> list[int]:
    """Kill the processes inside ``name`` and delete it; returns the pids killed."""
    if not names.is_ours(name):
        raise ValueError(f"refusing to delete namespace {name!r}: not the testbed's")
    killed = kill_pids(pids_in(name))
    with contextlib.suppress(FileNotFoundError):
        _netns.remove(name)
    return killed


@contextlib.contextmanager
def namespace(name: str) -> Iterator[str]:
    """A namespace that exists for the ``with`` block and is deleted after it, whatever happens."""
    create(name)
    try:
        yield name
    finally:
        delete(name)


#: Descriptors a process gets by default, and what a network's node costs a sweep beyond them
#: (its shell's pipes, an iperf3 client's and server's, a sock_diag socket in its namespace).
DEFAULT_OPEN_FILES = 1024
OPEN_FILES_PER_NODE = 24


def open_files_for(nodes: int) -> int:
    """The open-file limit a sweep over a network of ``nodes`` wants (200 road warriors: about 5,900)."""
    return DEFAULT_OPEN_FILES + OPEN_FILES_PER_NODE * nodes


def ensure_open_files(needed: int) -> int:
    """Raise this process's soft limit on open files to ``needed`` where it is lower (up to the hard
    limit); returns the soft limit now.  Only as far as needed: children inherit it, and mnexec closes
    every descriptor up to it when it starts a node."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        return want
    return soft

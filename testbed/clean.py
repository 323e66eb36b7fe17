"""``ipsec-testbed clean``: remove what the testbed left behind, and only that.

After a run killed with SIGKILL, three kinds of leftovers are possible, all named
with the testbed's prefix (see :mod:`testbed.names`):

- User-Mode Linux guests (their pid files are under ``/run/ipsec-testbed/uml``):
  killing the guest removes every namespace, SA and process inside it at once;
- network namespaces ``itb-*`` in ``/run/netns``, with the processes inside them;
- interfaces ``itb<run id>*`` in the root namespace (a veth end not yet moved).

Nothing else is touched: no global xfrm flush, no process matched by name.
"""
from __future__ import annotations

import contextlib
import dataclasses
import glob
import logging
import os
import shutil
import signal
import time

from testbed import names, netns

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Cleaned:
    """What :func:`clean` removed, for the report."""

    uml_guests: list[str] = dataclasses.field(default_factory=list)
    namespaces: list[str] = dataclasses.field(default_factory=list)
    processes: list[int] = dataclasses.field(default_factory=list)
    interfaces: list[str] = dataclasses.field(default_factory=list)
    files: list[str] = dataclasses.field(default_factory=list)

    def empty(self) -> bool:
        return not any(dataclasses.astuple(self))


def _uml_guests() -> list[tuple[str, int]]:
    """(umid, pid) of running guests that we booted, checked against their command line."""
    found = []
    for piddir in sorted(glob.glob(os.path.join(names.STATE_DIR, "uml", f"{names.PREFIX}-*"))):
        uml_id = os.path.basename(piddir)
        try:
            with open(os.path.join(piddir, "pid")) as f:
                pid = int(f.read().strip())
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
        except (OSError, ValueError):
            found.append((uml_id, 0))  # a stale directory: the guest is gone
            continue
        # A recycled pid belongs to someone else: only kill a linux.uml with our umid.
        found.append((uml_id, pid if f"umid={uml_id}".encode() in cmdline else 0))
    return found


def _guest_processes(uml_id: str) -> list[int]:
    """Every host process of guest ``uml_id``: those with ``umid=<uml_id>`` among their arguments.

    A guest whose main process died (killed with its parent) can leave the host
    processes that ran its user space; they carry the same command line.
    """
    token = f"umid={uml_id}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if token in f.read().split(b"\0"):
                        found.append(int(entry))
    return found


def clean(dry_run: bool = False) -> Cleaned:
    """Remove every testbed guest, namespace and root-namespace interface; see the module doc.

    With ``dry_run`` nothing is touched and the result lists what would be removed.
    """
    done = Cleaned()
    killed = []
    for uml_id, pid in _uml_guests():
        procs = _guest_processes(uml_id)
        if procs:
            done.uml_guests.append(f"{uml_id} (pid {pid or procs[0]})")
        if dry_run:
            continue
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        killed += procs
        shutil.rmtree(os.path.join(names.STATE_DIR, "uml", uml_id), ignore_errors=True)
    # A killed guest's files are only free once it is gone (bounded wait).
    deadline = time.monotonic() + 10
    while any(netns.is_alive(p) for p in killed) and time.monotonic() < deadline:
        time.sleep(0.05)
    for workdir in _unused_workdirs():
        if not dry_run:
            shutil.rmtree(workdir, ignore_errors=True)
        done.files.append(workdir)
    for name in netns.list_ours():
        done.processes += netns.pids_in(name) if dry_run else netns.delete(name)
        done.namespaces.append(name)
    done.interfaces += _root_interfaces(remove=not dry_run)
    return done


def remove_dead_leftovers() -> list[str]:
    """Remove what killed runs left that no live run can be using; returns what was removed.

    That is: what is left of UML guests whose kernel process is gone (host processes
    that ran their user space, pid directories), and UML work directories that no live
    run owns.  Namespaces and interfaces are left alone (a run in progress
    may own them); :func:`clean` removes those.  Cheap enough to call when any run starts.
    """
    removed = []
    killed = []
    for uml_id, pid in _uml_guests():
        if pid:
            continue  # its kernel runs: a live guest
        # The kernel process is gone, so the guest is; the host processes that ran its
        # user space can outlive it (they carry the same umid= argument).
        for p in _guest_processes(uml_id):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
                killed.append(p)
                removed.append(f"process {p} of dead guest {uml_id}")
        shutil.rmtree(os.path.join(names.STATE_DIR, "uml", uml_id), ignore_errors=True)
        removed.append(os.path.join(names.STATE_DIR, "uml", uml_id))
    deadline = time.monotonic() + 10  # their files are free once they are gone
    while any(netns.is_alive(p) for p in killed) and time.monotonic() < deadline:
        time.sleep(0.05)
    for workdir in _unused_workdirs():
        shutil.rmtree(workdir, ignore_errors=True)
        removed.append(workdir)
    return removed


def _unused_workdirs() -> list[str]:
    """UML work directories that no live run owns and no live guest boots from."""
    return [d for d in glob.glob(os.path.join("/tmp", f"{names.PREFIX}-*-uml-*"))
            if os.path.isdir(d) and not _workdir_in_use(d)]


def _workdir_in_use(workdir: str) -> bool:
    """Whether a live run owns this work directory or a live linux.uml boots from it.

    A directory without an ``owner`` file that is only seconds old counts as in use: its
    owner has just made it and is about to write that file.
    """
    try:
        with open(os.path.join(workdir, "owner")) as f:
            if netns.is_alive(int(f.read().strip())):
                return True
    except FileNotFoundError:
        with contextlib.suppress(OSError):
            if time.time() - os.stat(workdir).st_mtime < 10:
                return True
    except (OSError, ValueError):
        pass
    needle = f"init={workdir}/init.sh".encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        return True
    return False


def _root_interfaces(remove: bool) -> list[str]:
    from pyroute2.iproute.linux import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    removed = []
    with IPRoute() as ipr:
        for link in ipr.get_links():
            name = link.get_attr("IFLA_IFNAME")
            if name and name.startswith(names.PREFIX) and names.is_ours(name):
                if not remove:
                    removed.append(name)
                    continue
                with contextlib.suppress(NetlinkError):
                    ipr.link("del", index=link["index"])
                    removed.append(name)
    return removed

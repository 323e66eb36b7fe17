"""What User-Mode Linux runs leave behind, found and removed: guests, work directories, cgroups.

``ipsec-testbed clean`` and every run's start (:mod:`testbed.clean`) ask the UML backend for
its :func:`leftovers`; each says whether something still uses it (a live owner) and how to
remove it.  Only names with the testbed's prefix are considered.
"""
from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import tempfile
import time

from testbed import names, netns, waiting
from testbed.backends.base import Leftover, in_a_guest
from testbed.backends.umlmeter import CPUACCT_ROOT, cgroup_tasks, remove_cgroup


def _guests() -> list[tuple[str, int]]:
    """(umid, pid) of guests we booted, by their state directories; pid: the live host process at the root of the
    guest's processes (the ``unshare`` that holds its kernel's PID namespace: each carries the guest's ``umid=``
    argument), 0 when none lives.

    Not the directory's pid file: the kernel writes it from inside its own PID namespace.
    """
    found = []
    for piddir in sorted(glob.glob(os.path.join(names.STATE_DIR, "uml", f"{names.PREFIX}-*"))):
        uml_id = os.path.basename(piddir)
        live = {p: parent for p in _processes_with(f"umid={uml_id}".encode())
                if (parent := _live_parent(p)) is not None}
        roots = sorted(p for p, parent in live.items() if parent not in live)
        found.append((uml_id, roots[0] if roots else 0))
    return found


def _live_parent(pid: int) -> int | None:
    """The parent of ``pid`` while it runs (None: gone, going, or a zombie), from one read of its stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state, parent = f.read().rsplit(")", 1)[1].split()[:2]
    except (OSError, ValueError):
        return None
    return None if state == "Z" else int(parent)


def _processes_with(argument: bytes) -> list[int]:
    """Host processes with ``argument`` among their command-line arguments."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/cmdline", "rb") as f:
                if argument in f.read().split(b"\0"):
                    found.append(int(entry))
    return found


def _kill_all(pids: list[int], timeout_s: float = 10.0) -> None:
    """SIGKILL ``pids`` and wait (bounded) until they are gone: their files are free then."""
    for p in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    for _ in waiting.Deadline(timeout_s, interval_s=0.05).polls():
        if not any(netns.is_alive(p) for p in pids):
            break


def _remove_guest(uml_id: str) -> None:
    """Kill every host process of guest ``uml_id`` and remove its state directory.

    Its processes all carry the same ``umid=`` argument; killing the first of its PID namespace takes the rest
    (:data:`testbed.backends.uml.CONTAINED`).
    """
    _kill_all(_processes_with(f"umid={uml_id}".encode()))
    shutil.rmtree(os.path.join(names.STATE_DIR, "uml", uml_id), ignore_errors=True)


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
    return bool(_processes_with(f"init={workdir}/init.sh".encode()))


def _cgroup_in_use(path: str) -> bool:
    """Whether a guest's CPU-accounting cgroup belongs to a live run: it holds processes, or its run's
    work directory is in use (the cgroup is made before the guest's processes join it: a run that
    starts beside another must not take the other's new, still empty, cgroup for a dead one's)."""
    if cgroup_tasks(path):
        return True
    workdirs = glob.glob(os.path.join(tempfile.gettempdir(), f"{os.path.basename(path)}-uml-*"))
    return any(_workdir_in_use(w) for w in workdirs)


def _remove_cgroup_now(path: str) -> None:
    _kill_all(cgroup_tasks(path))
    remove_cgroup(path)


def leftovers() -> list[Leftover]:
    """Guests, work directories and cgroups of User-Mode Linux runs; see :class:`Leftover`.

    None from inside a guest (UML's or QEMU's): it sees the host's files (hostfs, 9p) but not the host's
    processes, so every guest, its own included, would look dead to it.
    """
    if in_a_guest():
        return []
    found = []
    for uml_id, pid in _guests():
        procs = _processes_with(f"umid={uml_id}".encode())
        label = f"{uml_id} (pid {pid or (procs[0] if procs else '-')})"
        found.append(Leftover("UML guest", label, live=bool(pid), remove=lambda u=uml_id: _remove_guest(u)))
    for workdir in sorted(glob.glob(os.path.join(tempfile.gettempdir(), f"{names.PREFIX}-*-uml-*"))):
        if os.path.isdir(workdir):
            found.append(Leftover("work directory", workdir, live=_workdir_in_use(workdir),
                                  remove=lambda d=workdir: shutil.rmtree(d, ignore_errors=True)))
    for path in sorted(glob.glob(os.path.join(CPUACCT_ROOT, f"{names.PREFIX}-*"))):
        if os.path.isdir(path) and names.is_ours(os.path.basename(path)):
            found.append(Leftover("cgroup", path, live=_cgroup_in_use(path),
                                  remove=lambda p=path: _remove_cgroup_now(p)))
    return found

"""One measuring run at a time on this machine, by default.

Two runs measuring at once each measure the other: at CPU-bound points their guests share the host's
CPUs, and a paired A/B's turns assume the CPU is theirs.  A run that measures (a sweep, a reproduction,
a regression, a benchmark, the demo) holds :data:`LOCK` (an advisory ``flock`` the kernel drops when
the holder dies, even by SIGKILL) for as long as it measures; its file says who holds it.  A second
run finds it held and is refused in one line naming the first (its command, pid, run directory and
since when), before any boot; ``--allow-concurrent`` runs it anyway, and its records and summary say so.

The processes a measuring run starts itself (a paired A/B's two sides, a benchmark's sweeps) carry
:data:`ENV` and measure under their parent's hold, marked as beside another run when it is
(:data:`BESIDE_ENV`).  ``clean`` and ``report`` take nothing.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import json
import os
from collections.abc import Iterator, Sequence

from testbed import names
from testbed.errors import Refused
from testbed.rundir import try_lock

#: The processes a measuring run starts carry this (the holder's pid): they measure under its hold.
ENV = "IPSEC_TESTBED_MEASURING"
#: ... and, when that run measures beside another (--allow-concurrent), this: the other run's :class:`Holder` as
#: JSON, so that what they measure (a benchmark's sweeps) is marked as their parent's is.
BESIDE_ENV = "IPSEC_TESTBED_MEASURING_BESIDE"


def lock_path() -> str:
    return os.path.join(names.STATE_DIR, "measuring.lock")


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds the machine: what people need to find it."""

    pid: int
    command: str
    run_dir: str
    since: str

    def describe(self) -> str:
        where = f", run directory {self.run_dir}" if self.run_dir else ""
        return f"`{self.command}` (pid {self.pid}{where}, since {self.since})"


@dataclasses.dataclass(frozen=True)
class Hold:
    """This run's standing: ``concurrent`` holds the other run it measures beside (with --allow-concurrent),
    None when the machine is its own."""

    concurrent: Holder | None = None


def holder() -> Holder | None:
    """The run measuring now, if any (None: the machine is free, or its holder is gone)."""
    try:
        fd = os.open(lock_path(), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        if not try_lock(fd, shared=True):
            return _read(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _beside() -> Holder | None:
    """The run that the run holding this process's hold measures beside (:data:`BESIDE_ENV`), if any."""
    text = os.environ.get(BESIDE_ENV)
    return _holder(text) if text else None


def _read(fd: int) -> Holder:
    return _holder(os.pread(fd, 4096, 0).decode(errors="replace") or "{}")


def _holder(text: str) -> Holder:
    """A :class:`Holder` from its JSON (the lock file's, or :data:`BESIDE_ENV`'s); what is missing, unknown."""
    try:
        data = json.loads(text)
        return Holder(int(data.get("pid", 0)), str(data.get("command", "?")), str(data.get("run_dir", "")),
                      str(data.get("since", "?")))
    except (ValueError, TypeError):
        return Holder(0, "?", "", "?")


@contextlib.contextmanager
def exclusive(command: Sequence[str], run_dir: str | None = None, allow_concurrent: bool = False) -> Iterator[Hold]:
    """Hold the machine for the block (see the module docstring); yields this run's :class:`Hold`.

    Refused (:class:`~testbed.errors.Refused`, one line) when another run holds it and
    ``allow_concurrent`` is not given.  Within a run that holds it already (:data:`ENV`), a no-op."""
    if os.environ.get(ENV):  # held by the run that started this one: measured as it is, beside what it is
        yield Hold(concurrent=_beside())
        return
    if os.geteuid() != 0:  # no root: the work refuses for want of it
        yield Hold()
        return
    os.makedirs(names.STATE_DIR, exist_ok=True)
    fd = os.open(lock_path(), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        if not try_lock(fd):
            other = _read(fd)
            if not allow_concurrent:
                raise Refused(f"another testbed run is measuring on this machine: {other.describe()}; its figures and "
                              "this run's would each include the other's load: wait for it to end (or stop it), or "
                              "give --allow-concurrent to measure anyway, marked so") from None
            os.environ.update({ENV: str(os.getpid()), BESIDE_ENV: json.dumps(dataclasses.asdict(other))})
            try:
                yield Hold(concurrent=other)
            finally:
                os.environ.pop(ENV, None)
                os.environ.pop(BESIDE_ENV, None)
            return
        me = {"pid": os.getpid(), "command": " ".join(command), "run_dir": run_dir or "",
              "since": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        os.environ[ENV] = str(os.getpid())
        try:
            yield Hold()
        finally:
            os.environ.pop(ENV, None)
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)

"""A counted guest's side of the emulator's counting plugin (``testbed/backends/qemucount.c``): its page.

The plugin counts every instruction the guest executes; when the guest executes the marker instruction (a NOP
no compiler emits) it notes the count, the host's monotonic clock and the host's real-time clock in a page that
QEMU also maps into the guest as an ivshmem device's memory (:data:`GUEST_COUNTS`, linked by the guest's init);
at the clock marker, the clocks only.  :class:`Marking` executes them and reads what the plugin noted with a
load: the counted backend's CPU meter (:class:`testbed.backends.qemu.CountingMeter`) and the user's clock in a
guest (:func:`user_time`).  A module of its own, with nothing of the testbed's below it, because the run
directories' dates (:mod:`testbed.rundir`) read the user's clock too.
"""
from __future__ import annotations

import ctypes
import functools
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable

#: Where a counted guest finds the plugin's page, QEMU's ivshmem device's memory (its init links the PCI
#: resource here); nowhere else does this path exist.
GUEST_COUNTS = "/dev/itb.counts"
#: The marker instruction, ``nopl 0x4942544d(%rax,%rax,1)`` ("MTBI"), where the plugin notes its count and the
#: host's clocks, and the clock marker, ``nopl 0x49425443(%rax,%rax,1)`` ("CTBI"), where it notes the clocks only.
MARKER = bytes.fromhex("0f1f84004d544249")
CLOCK_MARKER = bytes.fromhex("0f1f840043544249")
#: The page: instructions so far, the count at the last marker, markers so far, the host's monotonic and
#: real-time clocks at the last marker (ns), u64 each.
PAGE = struct.Struct("=QQQQQ")


@functools.cache
def _code(instruction: bytes) -> tuple[mmap.mmap, Callable[[], None]]:
    # the instruction and a return, in a page of its own: a call executes it where the reading is taken
    code = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    code.write(instruction + b"\xc3")
    return code, ctypes.CFUNCTYPE(None)(ctypes.addressof(ctypes.c_char.from_buffer(code)))


def marker() -> None:
    """Execute the marker instruction (a NOP anywhere but in a counted guest, whose plugin notes it)."""
    _code(MARKER)[1]()


class Marks:
    """The markers one process has seen: :meth:`others` says how many another process executed between two of its
    own readings (a reading after such a marker holds the other's count, not this process's)."""

    def __init__(self) -> None:
        self.last: int | None = None

    def others(self, marks: int) -> int:
        """Markers executed by others since this process's last reading, given the plugin's ``marks`` now."""
        others = 0 if self.last is None else marks - self.last - 1
        self.last = marks
        return others


class Marking:
    """This process's readings of the plugin's page at ``counts``; one per process (:func:`marking`), shared by
    its meters, so that each reading can tell whether another process's marker fell in since this process's
    last (that reading's count would be the other's)."""

    def __init__(self, counts: str) -> None:
        with open(counts, "r+b") as f:
            self._page = mmap.mmap(f.fileno(), mmap.PAGESIZE, prot=mmap.PROT_READ)
        self._marks = Marks()
        self._lock = threading.Lock()

    def clock(self) -> int:
        """Execute the clock marker and read the host's Unix time, in ns, the plugin noted there (no count is
        noted: a meter's readings around it are undisturbed)."""
        with self._lock:
            _code(CLOCK_MARKER)[1]()
            return PAGE.unpack(self._page[:PAGE.size])[4]

    def mark(self) -> tuple[int, int, int, int]:
        """Execute the marker and read the page: (instructions at the marker, markers other processes executed
        since this process's last, the host's monotonic ns, the host's Unix time in ns) at the marker."""
        with self._lock:
            marker()
            _count, count, marks, host_ns, unix_ns = PAGE.unpack(self._page[:PAGE.size])
            return count, self._marks.others(marks), host_ns, unix_ns


@functools.cache
def marking(counts: str = GUEST_COUNTS) -> Marking | None:
    """This process's :class:`Marking` of the page at ``counts`` (None where there is none: the host, a guest
    of another backend, a counted kernel with no PCI)."""
    return Marking(counts) if os.path.exists(counts) else None


def user_time() -> float:
    """The host's Unix time now, in seconds: in a counted guest as the plugin reads it at a marker, elsewhere
    this kernel's own clock (UML's follows the host's).  A counted guest's own clock is a count of its
    instructions that skips ahead whenever the guest idles (waiting on the host's files, say): minutes ahead of
    the host's within one sweep.  A time budget the user gave, a progress line's elapsed time and a run's dates
    are the user's."""
    page = marking()
    return page.clock() / 1e9 if page is not None else time.time()

"""How large this CPU's user XSAVE area is, and whether a UML kernel's FP buffer holds it.

A User-Mode Linux kernel saves and restores its processes' FPU state through the host's
``ptrace(PTRACE_GETREGSET/PTRACE_SETREGSET, NT_X86_XSTATE)`` with a buffer of a size fixed when
it was built (``HOST_FP_SIZE`` in ``arch/x86/um/user-offsets.c``: 2,696 bytes in Debian's 6.1
and 6.12).  The host accepts a SETREGSET only for its whole user XSAVE area: a larger buffer is
clamped to it, a smaller one fails with EFAULT (``xstateregs_set`` in the host's
``arch/x86/kernel/fpu/regset.c``).  On a CPU whose area is larger than the kernel's buffer
(11,008 bytes with AMX, Intel's servers since Sapphire Rapids) the guest's first user process
dies at its first FP restore and the kernel panics: ``ptrace set fp regs failed, errno = 14``.

:func:`host_bytes` asks the host: a GETREGSET with a large buffer on a stopped child returns
the area's size in ``iov_len``; the recipe (:mod:`testbed.kernelbuild`) sizes its buffer from it, and
``ipsec-testbed doctor`` and ``kernel build`` say it.  Standard library only.
"""
from __future__ import annotations

import ctypes
import functools
import os
import platform
import signal
import sys

#: ``HOST_FP_SIZE`` of Debian's ``user-mode-linux`` kernels (6.1, and 6.12 in ``linux-source-6.12``)
DEBIAN_FP_BYTES = 2696

_PTRACE_TRACEME = 0
_PTRACE_GETREGSET = 0x4204
_NT_X86_XSTATE = 0x202
_LARGE = 1 << 16  # far above any XSAVE area defined so far (AMX: 11,008 bytes)


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


@functools.cache
def host_bytes() -> int | None:
    """This CPU's user XSAVE area in bytes, as the host's ptrace sees it; None where it cannot be
    asked (not x86-64 Linux, ptrace forbidden, a CPU without XSAVE)."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    libc.ptrace.restype = ctypes.c_long
    pid = os.fork()
    if pid == 0:  # the child: be traced, stop, and never run Python's cleanup
        try:
            libc.ptrace(_PTRACE_TRACEME, 0, None, None)
            os.kill(os.getpid(), signal.SIGSTOP)
        finally:
            os._exit(0)
    try:
        _, status = os.waitpid(pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            return None
        buf = ctypes.create_string_buffer(_LARGE)
        iov = _Iovec(ctypes.cast(buf, ctypes.c_void_p), _LARGE)
        if libc.ptrace(_PTRACE_GETREGSET, pid, ctypes.c_void_p(_NT_X86_XSTATE), ctypes.byref(iov)) != 0:
            return None
        return int(iov.len)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def fits(kernel_fp_bytes: int, host: int | None = None) -> bool:
    """Whether a UML kernel built with an FP buffer of ``kernel_fp_bytes`` can run its processes
    on this host (on a host that cannot be asked, assume it can: the boot will tell)."""
    host = host_bytes() if host is None else host
    return host is None or kernel_fp_bytes >= host


def describe(host: int | None = None) -> str:
    """One line for people: the area's size and what it means for Debian's kernel."""
    host = host_bytes() if host is None else host
    if host is None:
        return "this CPU's XSAVE area could not be measured (not x86-64, or ptrace is not allowed)"
    verdict = ("fits Debian's UML kernel" if fits(DEBIAN_FP_BYTES, host) else
               f"larger than the {DEBIAN_FP_BYTES} bytes Debian's UML kernel was built for: it cannot boot here")
    return f"this CPU's user XSAVE area is {host} bytes ({verdict})"

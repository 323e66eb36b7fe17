"""What the kernel's refusals mean: :class:`XfrmError`, naming the missing module where one is."""
from __future__ import annotations

import errno
import os
from collections.abc import Sequence

from ipsec.algorithms import PROTOCOL_MODULES, Algorithm
from ipsec.sa import (
    SASpec,
)
from ipsec.xfrm.plans import XfrmRequest


class XfrmError(RuntimeError):
    """An xfrm operation failed (or was refused).

    Attributes:
        operation: ``"add_sa"``, ``"del_policy"``, ``"flush_sa"``, ``"open"``...
        subject: the SA/policy/namespace concerned.
        errno: the kernel's error number, or None when the testbed refused by itself.
        kernel_message: the kernel's extended-ack text, if it sent one.
        missing_modules: kernel modules that would provide a missing algorithm or
            protocol (empty when that is not the problem).
    """

    def __init__(self, operation: str, subject: str, reason: str,
                 errno_: int | None = None, kernel_message: str | None = None,
                 missing_modules: Sequence[str] = ()) -> None:
        super().__init__(f"{operation} {subject}: {reason}")
        self.operation = operation
        self.subject = subject
        self.errno = errno_
        self.kernel_message = kernel_message
        self.missing_modules = tuple(missing_modules)


# Extended-ack texts of xfrm_user.c's attach_* functions, e.g. "Requested AUTH_TRUNC
# algorithm not found" for XFRMA_ALG_AUTH_TRUNC (seen on 6.1).
_EXTACK_KINDS = {"AEAD": "aead", "CRYPT": "crypt", "AUTH_TRUNC": "auth", "AUTH": "auth",
                 "COMP": "comp"}


def _missing_algorithms(spec: SASpec, extack: str | None) -> list[Algorithm]:
    for word, kind in _EXTACK_KINDS.items():
        if extack and f"Requested {word} algorithm" in extack:
            alg = getattr(spec, kind)
            return [alg] if alg is not None else []
    return list(spec.algorithms)


def error_for(request: XfrmRequest, code: int, extack: str | None = None) -> XfrmError:
    """The XfrmError for ``request`` failing with kernel errno ``code`` (pure).

    Names the operation and its SA/policy; for a missing algorithm (ENOSYS, or ENOENT
    when the crypto transform cannot be built) the algorithm and its kernel modules;
    for a missing protocol (EPROTONOSUPPORT) the protocol and its module.
    """
    name = errno.errorcode.get(code, str(code))
    reason = f"[{name}] {os.strerror(code)}"
    if extack:
        reason += f"; kernel says: {extack}"
    modules: list[str] = []
    spec = request.spec
    if isinstance(spec, SASpec) and code in (errno.ENOSYS, errno.ENOENT):
        algs = _missing_algorithms(spec, extack)
        for alg in algs:
            modules.extend(m for m in alg.modules if m not in modules)
        what = ", ".join(f"{alg.name} ({alg.kernel_name})" for alg in algs)
        verb = "lacks algorithm" if code == errno.ENOSYS else "could not instantiate"
        reason += (f"; this kernel {verb} {what}, provided by kernel module(s) "
                   f"{', '.join(modules)}")
    elif isinstance(spec, SASpec) and code == errno.EPROTONOSUPPORT:
        modules = list(PROTOCOL_MODULES[spec.proto][spec.family])
        if spec.proto == "comp" and spec.mode == "transport":
            modules = modules[:2]
        reason += (f"; this kernel lacks IPsec protocol {spec.proto} for IPv{spec.family} "
                   f"(mode {spec.mode}), provided by kernel module(s) {', '.join(modules)}")
    elif code == errno.ESRCH or (code == errno.ENOENT and request.operation == "del_policy"):
        reason += "; no such SA or policy"
    elif code == errno.EEXIST:
        reason += "; it is already installed"
    elif code == errno.EPERM:
        reason += "; needs CAP_NET_ADMIN (root)"
    return XfrmError(request.operation, request.subject, reason, code, extack, modules)

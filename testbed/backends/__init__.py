"""Kernel backends: the ways the testbed gets a Linux kernel that can run its work.

The testbed needs a kernel with ESP, veth and tbf.  Where the running kernel has them,
the work runs here (:class:`~testbed.backends.host.HostBackend`); where it does not,
in a kernel the testbed boots itself (:class:`~testbed.backends.uml.UmlBackend`, User-Mode
Linux).  Every backend is one class implementing :class:`KernelBackend`::

    name, title, auto, runs_here, shaper_burst_s   what it is; --kernel NAME picks it
    inside()                   is this process running on its kernel (in its guest)?
    unavailable()              why it cannot be used on this machine at all
    lacks(needs, probe_host)   what of the work's needs its kernel does not have
    run(argv, ...)             a command as root on its kernel, host files at the same
                               paths, output live, exit status back; the guest dies
                               with the caller however the caller dies
    leftovers()                what killed runs left (for `ipsec-testbed clean`)
    metadata()                 what results depend on, for meta.json
    cpu_meter()                its kernel's CPU time, as finely as it can be had

and registered with :func:`register`; ``--kernel`` reads the registry.  A guest knows it
is one by :data:`GUEST_ENV` in its environment, which :func:`current` reads.  Adding a
backend (a QEMU/KVM guest, a remote host) is writing one such class.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from testbed.backends.base import (
    DEFAULT_OPTIONS,
    GUEST_ENV,
    BackendError,
    CpuMeter,
    CpuSample,
    KernelBackend,
    Leftover,
    Options,
)
from testbed.backends.host import HostBackend
from testbed.backends.qemu import QemuBackend
from testbed.backends.uml import UmlBackend
from testbed.capabilities import ESP_NEEDS, Needs, Probe

__all__ = [
    "DEFAULT_OPTIONS",
    "GUEST_ENV",
    "AUTO",
    "BackendError",
    "Choice",
    "CpuMeter",
    "CpuSample",
    "KernelBackend",
    "Leftover",
    "Options",
    "HostBackend",
    "QemuBackend",
    "UmlBackend",
    "register",
    "unregister",
    "names",
    "get",
    "booting",
    "current",
    "choose",
]

AUTO = "auto"
_REGISTRY: dict[str, type[KernelBackend]] = {}


def register(cls: type[KernelBackend]) -> type[KernelBackend]:
    """Make ``cls`` available to ``--kernel`` under its name (usable as a class decorator)."""
    if not getattr(cls, "name", None):
        raise ValueError(f"{cls.__name__} has no name")
    _REGISTRY[cls.name] = cls
    return cls


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


register(HostBackend)
register(UmlBackend)
register(QemuBackend)


def names() -> tuple[str, ...]:
    """Every backend's name, in the order ``--kernel auto`` tries them."""
    return tuple(_REGISTRY)


def get(name: str, options: Options = DEFAULT_OPTIONS) -> KernelBackend:
    """The backend called ``name``; ValueError naming the choices otherwise."""
    try:
        return _REGISTRY[name](options)
    except KeyError:
        raise ValueError(f"kernel: {name!r} is not one of {', '.join((AUTO, *names()))}") from None


def booting(image: str) -> type[KernelBackend]:
    """The backend that boots the kernel image at ``image`` (e.g. ``make ARCH=um``'s ``./linux``)."""
    reasons = []
    for cls in _REGISTRY.values():
        why = cls.image_error(image)
        if why is None:
            return cls
        reasons.append(why)
    raise ValueError(f"kernel {image!r} is not one of {', '.join(names())} nor a kernel image a backend can boot "
                     f"({'; '.join(reasons)})")


def current(options: Options = DEFAULT_OPTIONS) -> KernelBackend:
    """The backend whose kernel this process runs on: the guest's, or the host's."""
    for cls in _REGISTRY.values():
        if not cls.runs_here and cls.inside():
            return cls(options)
    return HostBackend(options)


@dataclasses.dataclass(frozen=True)
class Choice:
    """The decision for ``--kernel``: a backend (None: none can run the work), and why."""

    backend: KernelBackend | None
    reason: str

    @property
    def name(self) -> str | None:
        return self.backend.name if self.backend else None


def choose(requested: str = AUTO, needs: Needs = ESP_NEEDS, probe_host: Callable[[], Probe] | None = None,
           options: Options = DEFAULT_OPTIONS) -> Choice:
    """The backend to run work needing ``needs`` on, for ``--kernel requested``.

    Inside a guest the answer is that guest's backend.  ``probe_host`` probes the running
    kernel (``experiments.doctor.probe``); it is called at most once, and only when a
    backend that is the running kernel is considered.
    """
    here = current(options)
    if not here.runs_here:
        return Choice(here, f"running inside the {here.title} guest")
    if requested != AUTO:
        backend = get(requested, options)
    probe = functools.lru_cache(maxsize=None)(probe_host or _no_probe)
    candidates = [backend] if requested != AUTO else [c(options) for c in _REGISTRY.values() if c.auto]
    reasons = []
    for b in candidates:
        why = b.unavailable()
        if why is None:
            missing = b.lacks(needs, probe)
            if not missing:
                if requested != AUTO:
                    return Choice(b, f"--kernel {b.name} was requested")
                if b.runs_here:
                    return Choice(b, f"{_kernel_of(b, probe)} passes the probe ({needs.describe()})")
                return Choice(b, "; ".join(reasons + [f"using {b.title}"]))
            why = f"{_kernel_of(b, probe)} lacks {', '.join(missing)}"
        reasons.append(why)
    if requested != AUTO:
        return Choice(None, f"--kernel {requested}, but {reasons[0]}")
    return Choice(None, ", and ".join(reasons))


def _kernel_of(backend: KernelBackend, probe: Callable[[], Probe]) -> str:
    if backend.runs_here:
        return f"host kernel {probe().kernel_release}"
    return backend.title


def _no_probe() -> Probe:
    raise BackendError("choosing the host kernel needs a probe of it (experiments.doctor.probe)")

"""The interface every kernel backend implements; see :mod:`testbed.backends`."""
from __future__ import annotations

import abc
import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from typing import BinaryIO, ClassVar

from testbed import names
from testbed.capabilities import Needs, Probe

#: Set in the environment of every command a backend runs in a guest: the backend's name.
#: Code in the guest reads it (:func:`testbed.backends.current`) so that a script re-run
#: there measures instead of booting another guest.
GUEST_ENV = names.GUEST_ENV
HOST_BACKEND = names.HOST_BACKEND
in_a_guest = names.in_a_guest


class BackendError(RuntimeError):
    """A backend could not run a command (its guest did not boot, died, or is missing)."""


@dataclasses.dataclass(frozen=True)
class Options:
    """How a guest kernel is chosen and sized: the ``--uml-*`` command-line options."""

    kernel: str | None = None   # a kernel image to boot instead of the backend's default
    modules: str | None = None  # its module directory
    mem: str = "2G"
    crypto: str | None = None   # the counted guest's crypto drivers (``--qemu-crypto``), None for its default


#: The options of a guest booted with every default.
DEFAULT_OPTIONS = Options()


@dataclasses.dataclass(frozen=True)
class Leftover:
    """Something a run of this backend created and a killed run may have left behind.

    ``live`` is True while a running run may still be using it: only ``ipsec-testbed
    clean`` removes those; everything else is removed whenever a run starts.
    """

    kind: str
    name: str
    live: bool
    remove: Callable[[], None] = dataclasses.field(compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class CpuSample:
    """A reading of a :class:`CpuMeter`.

    ``cpu_ns``: CPU time used so far by what the meter accounts; ``clock_ns``: when, on the
    meter's own clock (the host's monotonic clock for a guest); ``local_ns``: this process's
    monotonic clock just before and just after the reading, which bound when it was taken;
    ``probe``: a speed probe's (operations, ns) so far, where one runs beside the kernel
    (:mod:`testbed.speedprobe`); ``host``: the host's CPUs' busy ns and the testbed's own CPU ns so
    far (:mod:`testbed.hostload`), where the meter reads them; ``wall_ns``: the host's monotonic clock at the
    reading, where the meter's own clock is not the host's (a counted guest's).
    """

    cpu_ns: int
    clock_ns: int
    local_ns: tuple[int, int]
    probe: tuple[int, int] | None = None
    host: tuple[int, int] | None = None
    wall_ns: int | None = None

    def probe_ns_until(self, later: CpuSample) -> float | None:
        """The speed probe's ns per operation from this sample to ``later`` (how slow the machine ran);
        None without a probe, or when it did no operation in between."""
        if self.probe is None or later.probe is None or later.probe[0] <= self.probe[0]:
            return None
        return (later.probe[1] - self.probe[1]) / (later.probe[0] - self.probe[0])


#: The clocks a :class:`CpuMeter` can count on (its ``clock``; a record's and meta.json's ``clock``).
TIME = "time"
INSTRUCTIONS = "instructions"


class CpuMeter(abc.ABC):
    """The CPU time of the kernel an experiment runs on, as finely as the backend can account it."""

    #: How the CPU is accounted, for meta.json (e.g. "cgroup v1 cpuacct.usage of the guest").
    method: ClassVar[str] = ""
    #: How many CPUs the accounted work can use: the busy share is CPU time / (clock time * cpus).
    cpus: float = 1.0
    #: What the speed probe beside the kernel times, for meta.json ("": no probe).
    speed_probe: str = ""
    #: What ``cpu_ns`` counts: :data:`TIME` (CPU time on this machine) or :data:`INSTRUCTIONS` (a counted guest's
    #: instructions, one per ns of its clock: the same work gives the same count on every machine).
    clock: ClassVar[str] = TIME

    @abc.abstractmethod
    def read(self) -> tuple[int, int]:
        """(cpu_ns, clock_ns) now."""

    def sample(self) -> CpuSample:
        before = time.monotonic_ns()
        cpu_ns, clock_ns = self.read()
        return CpuSample(cpu_ns, clock_ns, (before, time.monotonic_ns()))

    def close(self) -> None:  # noqa: B027 (a meter that holds nothing needs no close)
        """Release what the meter holds (idempotent)."""


class KernelBackend(abc.ABC):
    """A way of getting a Linux kernel for the testbed's work; one subclass per way.

    A backend either *is* the kernel this process runs on (``runs_here``: the work runs in
    this process) or boots one and runs a command in it with the host's filesystem at the
    same paths (:meth:`run`).  Nothing outside :mod:`testbed.backends` compares a
    backend's name: code asks the backend for what it needs.
    """

    #: What ``--kernel`` calls it.
    name: ClassVar[str]
    #: For people: "the host kernel", "User-Mode Linux".
    title: ClassVar[str]
    #: Whether ``--kernel auto`` may pick it (in registration order).
    auto: ClassVar[bool] = True
    #: Whether work for this backend runs in this very process (the host kernel) rather
    #: than in a guest that :meth:`run` boots.
    runs_here: ClassVar[bool] = False
    #: How long a shaper's token bucket must last on this kernel: how late its timers may fire.
    shaper_burst_s: ClassVar[float] = 0.004
    #: What its CPU meter counts (:attr:`CpuMeter.clock`): time, or instructions (a counted guest's).
    clock: ClassVar[str] = TIME

    def __init__(self, options: Options = DEFAULT_OPTIONS) -> None:
        self.options = options

    @classmethod
    def inside(cls) -> bool:
        """Whether this process runs on this backend's kernel (in one of its guests)."""
        return os.environ.get(GUEST_ENV) == cls.name

    @classmethod
    def image_error(cls, path: str) -> str | None:
        """Why this backend cannot boot the kernel image at ``path`` (None: it can)."""
        return f"{cls.title} boots no kernel images"

    # -- choosing ------------------------------------------------------------------------
    @abc.abstractmethod
    def unavailable(self) -> str | None:
        """Why this backend cannot be used on this machine at all, or None."""

    @abc.abstractmethod
    def lacks(self, needs: Needs, probe_host: Callable[[], Probe]) -> list[str]:
        """The capabilities of ``needs`` its kernel does not have (``probe_host`` probes the
        running kernel, for a backend that is that kernel)."""

    # -- running -------------------------------------------------------------------------
    @abc.abstractmethod
    def run(self, argv: Sequence[str], *, cwd: str | None = None, timeout_s: float | None = None,
            interactive: bool = False, modules: Sequence[str] = (), output: BinaryIO | None = None,
            cpu: int | None = None, speed_probe: bool = False, channel_fds: tuple[int, int] | None = None,
            keep_awake: bool = False) -> int:
        """Run ``argv`` as root on this backend's kernel, with the host's files at the same paths,
        output streamed live; return its exit status (124: ``timeout_s`` ran out).

        ``interactive`` gives the command this terminal; ``modules`` are kernel modules the
        work needs loaded; ``output`` takes the command's output (both streams) instead of this
        process's; ``cpu`` is the host CPU to run it on where the backend can choose (two
        guests on two CPUs do not slow each other); ``speed_probe`` times a small workload on a
        spare host CPU beside a guest, for its CPU meter (:mod:`testbed.speedprobe`; ignored
        where there is no guest or no spare CPU); ``channel_fds`` are the job's end of a
        :class:`testbed.channel.Channel`, which the command finds in ``$IPSEC_TESTBED_CHANNEL``
        (the caller closes its own copies after the call); ``keep_awake`` keeps a guest's host CPU from
        idling while it runs (:mod:`testbed.awake`; ignored where there is no guest).  Whatever way the
        caller ends (even SIGKILL), a guest and every process in it end with it: the lifeline.  Raises
        :class:`BackendError` when the command could not be run at all.
        """

    def label(self) -> str:
        """For people: the kernel this backend gives, with its release where known."""
        return self.title

    # -- housekeeping --------------------------------------------------------------------
    def leftovers(self) -> list[Leftover]:
        """What runs of this backend left on the host (see :class:`Leftover`)."""
        return []

    #: What measuring on this backend means for the figures, in a sentence for reports.
    note: ClassVar[str] = ""

    def metadata(self) -> dict:
        """What results measured on this backend depend on, for meta.json."""
        return {"backend": self.name, "backend_label": self.label(), "backend_note": self.note}

    def cpu_meter(self) -> CpuMeter:
        """The meter of the kernel this process runs on (call on the backend :func:`current` returns)."""
        raise NotImplementedError(f"{self.title} has no CPU meter")

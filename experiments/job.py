"""A job: the unit of work every layer passes, from the command line to a guest and back.

::

    cli (argv) --> Job --runner.run--> here (a host kernel with ESP)        --> the run directory
                                   \\-> a guest (the Job in the hand-off) --/

A :class:`Job` says what to run (:class:`SweepWork`, :class:`ReproductionWork`, :class:`DemoWork`,
:class:`BenchWork`), into which run directory, on which kernel (:class:`KernelChoice`), and how the
run ends (failures allowed, a report).  It is frozen and JSON-serialisable: the host hands it to a
User-Mode Linux guest inside :mod:`testbed.handoff`, or to a process of its own as a file, and the
other side runs exactly that job.  Nothing is turned back into command-line words.

Pure data: checked on construction (the specs inside check themselves), no kernel, no files.
"""
from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any, ClassVar

from experiments.engine.plan import SweepSpec, estimate_seconds, plan_points
from testbed import backends, kernelsource
from testbed.record import Keying

#: The exit status of a job that ended but could not measure every point (without ``allow_failures``).
INCOMPLETE = 3


@dataclasses.dataclass(frozen=True)
class KernelChoice:
    """Where the work runs: ``--kernel`` and the guest's options.

    ``kernel``: a backend's name or ``auto``; ``uml_kernel``: a UML kernel image (a path, or a
    name of :data:`testbed.umlkernel.NAMED`), None for the default; ``uml_modules``, ``uml_mem``: the
    guest's module directory and memory; ``speed_probe``: time a fixed workload on a spare host CPU
    beside a guest; ``host_cpu``: pin the guest to this host CPU (a paired A/B puts both guests on one);
    ``keep_awake``: keep the guest's host CPU from idling (:mod:`testbed.awake`); ``qemu_crypto``: the crypto
    drivers a counted guest runs (:data:`testbed.backends.qemu.CRYPTO_CPU`), None for its default.
    """

    kernel: str = backends.AUTO
    uml_kernel: str | None = None
    uml_modules: str | None = None
    uml_mem: str = "2G"
    speed_probe: bool = True
    host_cpu: int | None = None
    keep_awake: bool = False
    qemu_crypto: str | None = None

    def __post_init__(self) -> None:
        if self.kernel != backends.AUTO and self.kernel not in backends.names():
            raise ValueError(f"kernel must be {backends.AUTO} or one of {', '.join(backends.names())}, "
                             f"not {self.kernel!r}")
        if self.qemu_crypto is not None and self.kernel != backends.QemuBackend.name:
            raise ValueError(f"--qemu-crypto chooses the crypto drivers of the counted guest (--kernel qemu), not of "
                             f"--kernel {self.kernel}, which runs the kernel's generic C code in User-Mode Linux or "
                             "whatever the host kernel has")

    def with_(self, **changes: Any) -> KernelChoice:
        return dataclasses.replace(self, **changes)

    @property
    def counted(self) -> bool:
        """Whether its backend's meter counts instructions (the counted backend's): its figures do not depend on
        what else the machine does, and a kernel name means that backend's kernel."""
        return self.kernel in backends.names() and backends.get(self.kernel).clock == backends.base.INSTRUCTIONS

    def options(self) -> backends.Options:
        """The backend options this choice boots a guest with."""
        return backends.Options(kernel=self.uml_kernel, modules=self.uml_modules, mem=self.uml_mem,
                                crypto=self.qemu_crypto)

    def naming(self, kernel: str) -> KernelChoice:
        """This choice with ``kernel`` named as :meth:`named` takes it (an A/B's side, a bisect's step), on the
        counted backend when this choice is, keeping its memory, modules, speed probe and counted crypto (not
        ``--uml-keep-awake``, which a paired A/B does not use)."""
        return self.named(kernel, self.counted, uml_mem=self.uml_mem, uml_modules=self.uml_modules,
                          speed_probe=self.speed_probe, qemu_crypto=self.qemu_crypto)

    @classmethod
    def named(cls, kernel: str, counted: bool = False, **options: Any) -> KernelChoice:
        """The choice of a kernel named as ``regress --ab`` takes it: a backend's name (``host``, ``uml``),
        or a kernel name of :mod:`testbed.kernelsource` (``debian``, ``recipe``, ``6.12``, a tarball,
        ``PATH@REF``, an image; a path of a kernel image another backend boots goes to that backend).  A name
        with ``counted`` is the counted backend's: Debian's x86-64 kernel, or the recipe's x86-64 build."""
        if kernel in backends.names():
            return cls(kernel=kernel, **options)
        name = kernelsource.parse(kernel)
        if name.kind == "image":
            return cls(kernel=backends.booting(name.base).name, uml_kernel=name.base, **options)
        if counted:
            return cls(kernel=backends.QemuBackend.name, uml_kernel=name.canonical, **options)
        return cls(kernel=backends.UmlBackend.name, uml_kernel=name.canonical, **options)


#: The regimes a part is planned in: "" (the seed's rates, or as --scale divided them), "link" (rates this
#: machine carries, so that the shaped link bounds the points), "cpu" (unshaped, so that its CPU does).
REGIMES = ("", "link", "cpu")


@dataclasses.dataclass(frozen=True)
class Part:
    """One measured part of a seed's experiment.

    ``spec`` says what to measure; ``reference`` is the ``where.part`` of the seed's
    published values this part answers (default: its name; two parts may answer one,
    e.g. a TCP and a UDP part of one table).  With ``transactions`` > 0 the part is not an iperf3
    sweep but ``transactions`` request/response transactions from the first flow's
    client to its server, per profile and repetition, on the spec's network (its first
    rate and IP version).  A part with ``keying_fixed`` keeps its spec's keying whatever
    ``--keying`` says (it is there to compare the keyings).  ``regime`` names the regime a part
    was planned in for the claims it serves (:data:`REGIMES`; "" as the seed's rates, or as scaled):
    a ``cpu`` part runs its spec's points unshaped so that this machine's CPU bounds them, and
    stands for the seed's ``seed_rate_mbit``.
    """

    name: str
    title: str
    spec: SweepSpec
    transactions: int = 0
    reference: str = ""
    keying_fixed: bool = False
    regime: str = ""
    seed_rate_mbit: float | None = None

    def __post_init__(self) -> None:
        if not self.reference:
            object.__setattr__(self, "reference", self.name)
        if not self.name.replace("_", "").isalnum():
            raise ValueError(f"part name {self.name!r}: letters, digits and _ only (it is a directory)")
        if self.regime not in REGIMES:
            raise ValueError(f"part {self.name}: regime must be one of {', '.join(map(repr, REGIMES))}, "
                             f"not {self.regime!r}")

    def points(self) -> int:
        if self.transactions:
            return len(self.spec.profiles) * self.spec.repetitions
        return len(plan_points(self.spec))

    def estimate_seconds(self) -> float:
        if self.transactions:
            # about 0.6 ms a transaction inside UML, switching IPsec (an IKE exchange) between arms, a network
            return self.points() * (self.transactions * 0.0006 + 0.3) + 6.0
        return estimate_seconds(self.spec, self.points())

    def to_json(self) -> dict:
        """As meta.json records a part (``keying_fixed`` only when set: older runs lack it)."""
        out = {"name": self.name, "title": self.title, "spec": self.spec.to_json(),
               "transactions": self.transactions, "reference": self.reference}
        if self.keying_fixed:
            out["keying_fixed"] = True
        if self.regime:
            out |= {"regime": self.regime, "seed_rate_mbit": self.seed_rate_mbit}
        return out

    @classmethod
    def from_json(cls, data: Mapping) -> Part:
        return cls(name=data["name"], title=data["title"], spec=SweepSpec.from_json(data["spec"]),
                   transactions=int(data.get("transactions") or 0), reference=data.get("reference") or "",
                   keying_fixed=bool(data.get("keying_fixed")), regime=data.get("regime") or "",
                   seed_rate_mbit=data.get("seed_rate_mbit"))


@dataclasses.dataclass(frozen=True)
class SweepWork:
    """A packet-size sweep (``ipsec-testbed sweep``) into the run directory itself.

    ``turns``: the directory and label of a paired A/B's turns (:mod:`experiments.engine.turns`),
    each window waiting for its turn; None for a sweep alone.
    """

    kind: ClassVar[str] = "sweep"
    spec: SweepSpec
    turns: str | None = None

    def to_json(self) -> dict:
        return {"spec": self.spec.to_json(), "turns": self.turns}

    @classmethod
    def from_json(cls, data: Mapping) -> SweepWork:
        return cls(spec=SweepSpec.from_json(data["spec"]), turns=data.get("turns"))


#: A reproduction's time budget by default, from the command's start: each seed within 10 minutes.
REPRODUCTION_BUDGET_S = 600.0


@dataclasses.dataclass(frozen=True)
class ReproductionWork:
    """A seed's experiment (``ipsec-testbed reproduce SEED``): its parts, each into a directory of
    the run directory named after it.  ``scale``: the seed's rates as they are (None), divided by a
    factor, or by the factor a calibration finds (``"auto"``).  ``budget_s``: seconds from the
    command's start within which undecided claims get more repetitions (0: none)."""

    kind: ClassVar[str] = "reproduce"
    seed: str
    parts: tuple[Part, ...]
    scale: float | str | None = None
    budget_s: float = REPRODUCTION_BUDGET_S

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", tuple(self.parts))
        if not self.parts:
            raise ValueError("a reproduction needs at least one part")
        if isinstance(self.budget_s, bool) or not isinstance(self.budget_s, (int, float)) \
                or not 0 <= self.budget_s <= 7 * 86400:
            raise ValueError(f"the time budget must be seconds in 0..{7 * 86400}, not {self.budget_s!r}")
        if not (self.scale is None or self.scale == "auto" or isinstance(self.scale, (int, float))
                and not isinstance(self.scale, bool) and 1.0 <= self.scale <= 1000.0):
            raise ValueError(f"scale must be auto or a factor in 1..1000, not {self.scale!r}")

    def to_json(self) -> dict:
        return {"seed": self.seed, "parts": [p.to_json() for p in self.parts], "scale": self.scale,
                "budget_s": self.budget_s}

    @classmethod
    def from_json(cls, data: Mapping) -> ReproductionWork:
        return cls(seed=data["seed"], parts=tuple(Part.from_json(p) for p in data["parts"]), scale=data.get("scale"),
                   budget_s=data.get("budget_s", REPRODUCTION_BUDGET_S))


@dataclasses.dataclass(frozen=True)
class DemoWork:
    """The classroom demo (``ipsec-testbed demo TOPOLOGY``): a network with IPsec up, in a terminal
    (Mininet's command line) or, with ``web``, behind a page the host serves."""

    kind: ClassVar[str] = "demo"
    topology: str
    profile: str = "aes-gcm-256"
    mode: str = "tunnel"
    keying: Keying = Keying.STATIC
    rate_mbit: float = 10.0
    clients: int = 2
    pcap: str | None = None
    web: bool = False

    @property
    def profiles(self) -> tuple[str, ...]:
        return (self.profile,)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping) -> DemoWork:
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class BenchWork:
    """The part of a benchmark that runs on the kernel under test: ``benchmarks/NAME.py``'s
    ``in_guest(job)``, with the benchmark's own settings in ``options`` (JSON values) and what it
    ``needs`` of a kernel (capability names, :class:`testbed.capabilities.Needs`)."""

    kind: ClassVar[str] = "bench"
    name: str
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    needs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", dict(self.options))
        object.__setattr__(self, "needs", tuple(self.needs))
        json.dumps(self.options)  # a TypeError here: options that could not reach a guest

    def to_json(self) -> dict:
        return {"name": self.name, "options": dict(self.options), "needs": list(self.needs)}

    @classmethod
    def from_json(cls, data: Mapping) -> BenchWork:
        return cls(name=data["name"], options=data.get("options") or {}, needs=tuple(data.get("needs") or ()))


Work = SweepWork | ReproductionWork | DemoWork | BenchWork
#: kind -> the work's class
WORKS: dict[str, type] = {w.kind: w for w in (SweepWork, ReproductionWork, DemoWork, BenchWork)}


@dataclasses.dataclass(frozen=True)
class Job:
    """What to run, where its results go, on which kernel, and how the run ends.

    ``out_dir``: the run directory (absolute; None for work that keeps none, the demo);
    ``allow_failures``: a run that could not measure every point still exits 0; ``report``: render
    report.html and the tables after measuring (a suite's sweep inside ``regress`` does not);
    ``command``: the command line as the person typed it and ``started_unix``: when, for meta.json and
    the time budget (a guest's boot counts); ``verbose``: the log level (0 warnings, 1 info, 2 debug);
    ``allow_concurrent``: measure even while another testbed run measures on this machine, which
    ``beside`` then names in every record (:mod:`testbed.measuring`); ``history``: the results store its
    figures are added to (a path, a ``postgresql://`` URL, ``off``; None: :func:`testbed.historyplace.location`'s).
    """

    work: Work
    out_dir: str | None = None
    kernel: KernelChoice = KernelChoice()
    allow_failures: bool = False
    report: bool = True
    command: tuple[str, ...] = ()
    started_unix: float | None = None
    verbose: int = 0
    allow_concurrent: bool = False
    beside: str | None = None
    history: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "command", tuple(self.command))
        if self.out_dir is not None and not os.path.isabs(self.out_dir):
            raise ValueError(f"a job's run directory is an absolute path, not {self.out_dir!r}")

    @property
    def kind(self) -> str:
        return self.work.kind

    def with_(self, **changes: Any) -> Job:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict:
        return {"kind": self.kind, "work": self.work.to_json(), "out_dir": self.out_dir,
                "kernel": dataclasses.asdict(self.kernel), "allow_failures": self.allow_failures,
                "report": self.report, "command": list(self.command), "started_unix": self.started_unix,
                "verbose": self.verbose, "allow_concurrent": self.allow_concurrent,
                "beside": self.beside, "history": self.history}

    @classmethod
    def from_json(cls, data: Mapping) -> Job:
        """The job :meth:`to_json` wrote; ValueError when it is not one (another version's)."""
        try:
            work = WORKS[data["kind"]].from_json(data["work"])
            return cls(work=work, out_dir=data.get("out_dir"), kernel=KernelChoice(**data.get("kernel") or {}),
                       allow_failures=bool(data.get("allow_failures")), report=bool(data.get("report", True)),
                       command=tuple(data.get("command") or ()), started_unix=data.get("started_unix"),
                       verbose=int(data.get("verbose") or 0), allow_concurrent=bool(data.get("allow_concurrent")),
                       beside=data.get("beside"), history=data.get("history"))
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a job this version reads: {e!r}") from None

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def loads(cls, text: str) -> Job:
        try:
            return cls.from_json(json.loads(text))
        except json.JSONDecodeError as e:
            raise ValueError(f"not a job: {e}") from None

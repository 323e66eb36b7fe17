"""A benchmark as an object: its name, what it measures, its options, where it runs, its result and its page.

Every module of ``benchmarks/`` defines one :class:`Benchmark` as ``BENCHMARK``.  Its options are a frozen
dataclass whose fields carry :func:`option` metadata (the help a person reads) and which checks itself on
construction (a ``ValueError`` names the bad value); ``run(options)`` measures and returns a typed result;
``page(options, result)`` is the text a person reads at the end.  ``ipsec-testbed bench NAME`` (:mod:`cli.bench`)
makes the command line from the options, refuses a missing root in one line, and hands the work to the kernel
under test: in this process, or in a guest that runs :func:`execute` there (:mod:`cli.job`).  Nothing here
parses a command line; a benchmark that runs another part of the project builds that part's object (a
:class:`~experiments.engine.plan.SweepSpec`, a :class:`~experiments.job.Job`), never its words.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from experiments.job import BenchWork, Job, KernelChoice
from ipsec.profiles import parse_profile
from testbed import backends
from testbed.capabilities import Needs

Opts = TypeVar("Opts")
Res = TypeVar("Res")

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")


def option(default: Any = dataclasses.MISSING, help: str = "", *, flag: str | tuple[str, ...] | None = None,
           metavar: str | tuple[str, ...] | None = None, choices: tuple | None = None, nargs: int | str | None = None,
           repeat: bool = False, positional: bool = False, show_default: bool = True, rest: bool = False) -> Any:
    """A field of a benchmark's options with what its command-line option needs: ``help`` (the default is
    added to it unless ``show_default`` is false), ``flag`` (default: ``--`` and the field's name with dashes; a
    tuple gives it several spellings, as ``("-v", "--verbose")``),
    ``metavar``, ``choices``, ``nargs`` (for a tuple: a count, ``"+"`` or ``"*"``, else the values are given
    comma-separated), ``repeat`` (a tuple given by repeating the option) or ``positional``; ``rest``: a tuple of
    the words no other option takes, as given, for a benchmark that passes them on (the user's sweep options)."""
    meta = {"help": help, "flag": flag, "metavar": metavar, "choices": choices, "nargs": nargs, "repeat": repeat,
            "positional": positional, "show_default": show_default, "rest": rest}
    return dataclasses.field(default=default, metadata={"option": meta})


def out_option(name: str) -> Any:
    """The ``out: str | None`` field of benchmark ``name`` that writes its run directory (:mod:`analysis.benchpage`),
    given as ``--out DIR``; ``ipsec-testbed bench`` resolves its default."""
    return option(None, f"where results.json and report.html (the plots) go (default: runs/<date>-bench-{name} in "
                  "the checkout)", metavar="DIR")


def guest_options(default: KernelChoice | None = None) -> Any:
    """A ``kernel: KernelChoice`` field given by the guest's options alone (``--uml-*``, ``--qemu-crypto``,
    ``--uml-keep-awake``): for a benchmark that chooses its kernels itself, so has no ``--kernel``."""
    return dataclasses.field(default=default or KernelChoice(), metadata={"guest_only": True})


@dataclasses.dataclass(frozen=True)
class Benchmark(Generic[Opts, Res]):
    """One benchmark.  ``options``: its options' dataclass (a field ``kernel: KernelChoice`` gives it the kernel
    options, a field ``out`` a run directory); ``run``: the measurement, on the kernel it runs on; ``page``: its
    result as text; ``root``: why it needs root ("" none); ``needs``: what the kernel under test must have (None:
    it runs in the command's own process, on the host); ``status``: the exit status a result means.  ``root`` may
    be a function of the options instead, for a benchmark that needs root for some of them only (one that reads
    a run directory already measured needs none)."""

    name: str
    options: type[Opts]
    run: Callable[[Opts], Res]
    page: Callable[[Opts, Res], str]
    root: str | Callable[[Opts], str] = ""
    needs: Callable[[Opts], Needs] | None = None
    status: Callable[[Res], int] = lambda result: 0

    @property
    def summary(self) -> str:
        """What it measures: the first line of its module's docstring."""
        return summary(self.name)

    def root_for(self, options: Opts) -> str:
        """Why the benchmark needs root with ``options`` ("" none)."""
        return self.root(options) if callable(self.root) else self.root

    def options_of(self, values: Mapping[str, Any]) -> Opts:
        """Its options from plain values (JSON's lists become the fields' tuples); a ValueError names a bad one."""
        kwargs = {}
        for f in dataclasses.fields(self.options):
            if f.name in values:
                value = values[f.name]
                kwargs[f.name] = tuple(value) if isinstance(value, list) else value
        return self.options(**kwargs)

    def job(self, options: Opts, command: tuple[str, ...], allow_concurrent: bool = False) -> Job:
        """The :class:`~experiments.job.Job` that runs it on the kernel its options choose: every option but the
        kernel choice travels as a JSON value (``verbose`` also as the job's log level, which a guest sets up before
        the benchmark runs); ``allow_concurrent``: measured beside another run, as the command was told."""
        kernel = next((v for f in dataclasses.fields(options)
                       if isinstance(v := getattr(options, f.name), KernelChoice)), KernelChoice())
        values = {f.name: _plain(getattr(options, f.name)) for f in dataclasses.fields(options)
                  if not isinstance(getattr(options, f.name), KernelChoice)}
        needs = self.needs(options) if self.needs else Needs(())
        out = values.get("out")
        return Job(BenchWork(self.name, values, needs.capabilities),
                   out_dir=out if isinstance(out, str) and os.path.isabs(out) else None,
                   kernel=kernel, command=command, started_unix=time.time(),
                   verbose=int(bool(getattr(options, "verbose", False))), allow_concurrent=allow_concurrent)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def execute(bench: Benchmark, options: Any) -> int:
    """Run ``bench`` here and print its page; the exit status its result means."""
    if getattr(options, "verbose", False):
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    result = bench.run(options)
    text = bench.page(options, result)
    if text:
        print(text, flush=True)
    return bench.status(result)


def running_on() -> str:
    """The kernel a benchmark's work runs on, for its page: the backend, the release and the CPUs it may use."""
    return f"{backends.current().label()} ({os.uname().release}, {len(os.sched_getaffinity(0))} CPU(s))"


def in_guest(job: Job) -> int:
    """A benchmark's work where the kernel under test is: its options rebuilt from the job, then :func:`execute`."""
    bench = load(job.work.name)
    return execute(bench, bench.options_of(job.work.options))


def names() -> list[str]:
    """Every benchmark's name: the modules of ``benchmarks/`` without a leading underscore."""
    return sorted(f[:-3] for f in os.listdir(HERE) if f.endswith(".py") and not f.startswith("_"))


def summary(name: str) -> str:
    """The first line of a benchmark's docstring, read without importing it."""
    with open(os.path.join(HERE, f"{name}.py")) as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    return doc.splitlines()[0] if doc else ""


def load(name: str) -> Benchmark:
    """The benchmark ``name`` (a ValueError for a name that is none)."""
    if name not in names():
        raise ValueError(f"unknown benchmark {name!r}; benchmarks: {', '.join(names())}")
    return importlib.import_module(f"benchmarks.{name}").BENCHMARK


def doc(name: str) -> str:
    """A benchmark's module docstring: its ``--help``'s description."""
    return sys.modules[f"benchmarks.{name}"].__doc__ or ""


def front_door() -> list[str]:
    """``ipsec-testbed`` as a person runs it (this Python's), for a benchmark that measures a whole command as a
    user types it (an A/B, a bisect, the history): the words are the user's, run in a process of their own."""
    beside = os.path.join(os.path.dirname(sys.executable), "ipsec-testbed")
    return [beside] if os.access(beside, os.X_OK) else [shutil.which("ipsec-testbed") or "ipsec-testbed"]


def check_profiles(profiles: Sequence[str], flag: str = "--profiles") -> None:
    """A ValueError, in one line naming ``flag``, where one of ``profiles`` is no IPsec profile."""
    try:
        for name in profiles:
            parse_profile(name)
    except ValueError as e:
        raise ValueError(f"{flag}: {e}") from None


def check_profiles_and_rate(profiles: Sequence[str], rate_mbit: float, flag: str = "--profiles") -> None:
    """A ValueError, in one line, where ``profiles`` (given as ``flag``) or ``rate_mbit`` (a shaped link's, as
    ``--rate``) cannot run."""
    from topologies.shaping import MAX_RATE_MBIT

    check_profiles(profiles, flag)
    if not 0 < rate_mbit <= MAX_RATE_MBIT:
        raise ValueError(f"--rate must be Mbit/s in (0, {MAX_RATE_MBIT:g}], not {rate_mbit:g}")

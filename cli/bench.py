"""``ipsec-testbed bench NAME``: the project's benchmarks, the scripts that print its speed and accuracy figures.

Each benchmark is a :class:`~experiments.benchmark.Benchmark` (``benchmarks/NAME.py``'s ``BENCHMARK``): this
command lists them, makes a benchmark's command line from its options' dataclass, refuses a missing root in
one line, and runs it on the kernel its options choose (a guest runs it through :mod:`cli.job`).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import types
import typing
from collections.abc import Sequence
from typing import Any

from cli.options import Parser, add_kernel_options, add_speed_probe_option, add_uml_options, csv, kernel_choice
from experiments import benchmark, runner
from experiments.benchmark import Benchmark, execute, names, summary
from experiments.engine.plan import value_text
from experiments.job import KernelChoice
from testbed import measuring
from testbed.backends import QemuBackend
from testbed.errors import Refused, fail

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def usage() -> str:
    lines = ["usage: ipsec-testbed bench NAME [OPTIONS]", "",
             "Run one of the project's benchmarks: each prints figures (speed, accuracy, noise) with what they",
             "were measured on. `ipsec-testbed bench NAME --help` says what NAME measures and how long it takes.",
             "Most need root. Current figures: docs/figures.md; every dated run: docs/log/measurements.md.", "",
             "benchmarks:"]
    lines += [f"  {n:22s} {summary(n)}" for n in names()]
    lines += ["", "Every benchmark also takes --allow-concurrent: measure even while another testbed run measures on",
              "this machine (refused otherwise, naming it).", "",
              "examples:", "  sudo ipsec-testbed bench shaping_accuracy --kernel uml",
              "  sudo ipsec-testbed bench sweep_precision"]
    return "\n".join(lines) + "\n"


def _base(hint: Any) -> Any:
    """A field's type without ``| None``."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


class _Passing(Parser):
    """A benchmark's parser that keeps the words none of its options takes, in order, in the field ``rest`` (an
    option with ``rest=True``): they are the user's, for a command the benchmark runs."""

    def __init__(self, rest: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rest = rest

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> argparse.Namespace:
        known, words = self.parse_known_args(args, namespace)
        setattr(known, self.rest, words)
        return known


def build_parser(bench: Benchmark) -> argparse.ArgumentParser:
    """``bench``'s command line, made from its options' fields (see :func:`experiments.benchmark.option`)."""
    kwargs = dict(prog=f"ipsec-testbed bench {bench.name}", description=benchmark.doc(bench.name),
                  formatter_class=argparse.RawDescriptionHelpFormatter)
    rest = next((f for f in dataclasses.fields(bench.options) if f.metadata.get("option", {}).get("rest")), None)
    p = Parser(**kwargs) if rest is None else _Passing(rest.name, **kwargs)
    hints = typing.get_type_hints(bench.options)
    for f in dataclasses.fields(bench.options):
        hint = _base(hints[f.name])
        if hint is KernelChoice:
            if f.metadata.get("guest_only"):  # experiments.benchmark.guest_options
                add_uml_options(p.add_argument_group("guest"))
            else:
                add_kernel_options(p)
                add_speed_probe_option(p)
            p.set_defaults(uml_keep_awake=f.default.keep_awake, kernel=f.default.kernel)
            continue
        meta = f.metadata.get("option")
        if meta is None or meta.get("rest"):
            continue  # not given on the command line, or the words left (_Passing)
        default = f.default if f.default is not dataclasses.MISSING else None
        helptext = meta["help"]
        if meta["show_default"] and not (default is None or default is False or default == ()):
            helptext += f" (default: {value_text(default)})"
        helptext = helptext.replace("%", "%%")
        kw: dict[str, Any] = {"help": helptext, "default": default}
        if meta["metavar"]:
            kw["metavar"] = meta["metavar"]
        if meta["choices"]:
            kw["choices"] = meta["choices"]
        if typing.get_origin(hint) is tuple:
            kind = typing.get_args(hint)[0]
            if meta["repeat"]:
                kw.update(action="append", type=kind, default=None)
            elif meta["nargs"] is not None:
                kw.update(nargs=meta["nargs"], type=kind)
            else:
                kw["type"] = csv(kind)
        elif hint is bool:
            kw["action"] = argparse.BooleanOptionalAction if default else "store_true"
        else:
            kw["type"] = hint
            if meta["nargs"] is not None:
                kw["nargs"] = meta["nargs"]
        if meta["positional"]:
            p.add_argument(f.name, nargs=meta["nargs"] or "?", **{k: v for k, v in kw.items() if k != "nargs"})
        else:
            flags = meta["flag"] or "--" + f.name.replace("_", "-")
            p.add_argument(*((flags,) if isinstance(flags, str) else flags), dest=f.name, **kw)
    if rest is not None:  # the words left: said after the options
        words = rest.metadata["option"]["metavar"] or "WORDS"
        p.usage = p.format_usage().removeprefix("usage: ").rstrip() + f" [{words} ...]"
        p.epilog = f"{words} ...: {rest.metadata['option']['help']}"
    return p


def options_from(bench: Benchmark, args: argparse.Namespace) -> Any:
    """``bench``'s options from its parsed command line; a ValueError names a bad value."""
    hints = typing.get_type_hints(bench.options)
    values = {}
    for f in dataclasses.fields(bench.options):
        if _base(hints[f.name]) is KernelChoice:
            if f.metadata.get("guest_only") and getattr(args, "qemu_crypto", None):
                args.kernel = QemuBackend.name  # the crypto is the counted guest's: the benchmark gives it to that one
            values[f.name] = kernel_choice(args)
        elif getattr(args, f.name, None) is not None:
            value = getattr(args, f.name)
            values[f.name] = tuple(value) if isinstance(value, list) else value
    if "out" in hints:  # a benchmark that writes a run directory: runs/<date>-bench-NAME unless given
        values["out"] = runner.out_dir_of(values.get("out"), REPO, f"bench-{bench.name}")
    return bench.options(**values)


def run(bench: Benchmark, options: Any, command: tuple[str, ...], allow_concurrent: bool = False) -> int:
    """``bench`` on the kernel its options choose: here when it needs none, else where :mod:`experiments.runner`
    finds one (this process or a guest, which runs :func:`experiments.benchmark.in_guest`)."""
    if getattr(options, "dry_run", False):
        return execute(bench, options)  # a plan: nothing measured, no kernel, no root
    why = bench.root_for(options)
    if why and os.geteuid() != 0:
        print(f"ipsec-testbed bench {bench.name}: needs root ({why}); run it with sudo", file=sys.stderr)
        return 1
    if getattr(options, "out", None):
        os.makedirs(options.out, exist_ok=True)
    if bench.needs is None:
        return execute(bench, options)
    return runner.run(bench.job(options, command, allow_concurrent), f"ipsec-testbed bench {bench.name}",
                      lambda job: execute(bench, options))


def main(argv: Sequence[str]) -> int:
    """``argv``: NAME, then that benchmark's options."""
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), end="", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    name = argv[0]
    if name not in names():
        return fail("ipsec-testbed bench", f"error: unknown benchmark {name!r}; benchmarks: {', '.join(names())}", 2)
    rest = argv[1:]
    concurrent = "--allow-concurrent" in rest  # every benchmark takes it: measured beside another run
    rest = [a for a in rest if a != "--allow-concurrent"]
    bench = benchmark.load(name)
    parser = build_parser(bench)
    args = parser.parse_args(rest)
    try:
        options = options_from(bench, args)
    except (ValueError, OSError) as e:  # a bad value, or an --out that cannot be a directory
        parser.error(str(e))
    try:
        with measuring.exclusive(("ipsec-testbed", "bench", *argv), None, concurrent):
            return run(bench, options, ("ipsec-testbed", "bench", *argv), concurrent)
    except Refused as e:
        return fail(f"ipsec-testbed bench {name}", str(e), 1)


"""How long a UML kernel takes to build from scratch by the recipe, and what it differs in from Debian's.

    sudo ipsec-testbed bench kernel_build [NAME] [--tiny] [--fp-bytes N] [--keep DIR]

Builds NAME (default: recipe, Debian's linux-source-6.1; any kernel name, e.g. 6.12) with an empty
cache of its own (a temporary directory, so the user's cached kernels and kept trees are neither
used nor replaced), and prints the wall time of each stage as the recipe reports it (unpacking,
configuring, building), the total, the machine's CPUs and the kernel's size.  Then the configuration's
differences from Debian's UML kernel's
(/usr/share/doc/user-mode-linux/config.gz), counted and listed by kind: options built in that
Debian has as modules, options off that Debian has (as modules or built in), and the rest.
"""
from __future__ import annotations

import dataclasses
import gzip
import os
import re
import shutil
import sys
import tempfile
import time

from experiments.benchmark import Benchmark, option
from testbed import kernelbuild, kernelsource
from testbed.errors import Refused

DEBIAN_CONFIG = "/usr/share/doc/user-mode-linux/config.gz"
_OPTION = re.compile(r"^(CONFIG_[A-Z0-9_]+)=(.*)$|^# (CONFIG_[A-Z0-9_]+) is not set$")


def read_config(text: str) -> dict[str, str]:
    """A kernel configuration as {option: value}, with "n" for an option that is not set."""
    out = {}
    for line in text.splitlines():
        m = _OPTION.match(line)
        if m:
            out[m.group(1) or m.group(3)] = m.group(2) if m.group(1) else "n"
    return out


def differences(debian: dict[str, str], ours: dict[str, str]) -> dict[str, list[str]]:
    """What our configuration changes of Debian's, by kind (options only one side knows are left out:
    they are symbols that exist only because of another option)."""
    kinds: dict[str, list[str]] = {"built in (a module in Debian's)": [], "off (a module in Debian's)": [],
                                   "off (built into Debian's)": [], "other": []}
    for name in sorted(set(debian) & set(ours)):
        a, b = debian[name], ours[name]
        if a == b:
            continue
        if a == "m" and b == "y":
            kinds["built in (a module in Debian's)"].append(name)
        elif a == "m" and b == "n":
            kinds["off (a module in Debian's)"].append(name)
        elif a == "y" and b == "n":
            kinds["off (built into Debian's)"].append(name)
        else:
            kinds["other"].append(f"{name}: {a} -> {b}")
    return kinds


@dataclasses.dataclass(frozen=True)
class Options:
    """What to build and how much to list; the name checked on construction (files exist, a version is in the
    archive), the build's own steps when it runs."""

    name: str = option(kernelsource.RECIPE, "the kernel to build", metavar="NAME", positional=True)
    tiny: bool = option(False, "the tests' tiny kernel instead of the project's")
    fp_bytes: int | None = option(None, "the FPU buffer (default: the recipe's)")
    keep: str | None = option(None, "keep the build under DIR instead of a temporary directory", metavar="DIR")
    list_all: bool = option(False, "list every option that differs, not only the counts", flag="--list")

    def __post_init__(self) -> None:
        try:
            kernelsource.parse(self.name)
        except kernelsource.KernelNameError as e:
            raise ValueError(f"NAME: {e}") from None


@dataclasses.dataclass(frozen=True)
class Result:
    """The build's stages and total (wall seconds), the machine, the kernel built, and its configuration's
    differences from Debian's by kind (None: the tiny kernel, or no Debian configuration to compare with)."""

    cache: str
    cpus: int | None
    release: str
    stages: tuple[tuple[str, float], ...]  # each stage's name and its start, seconds since the build began
    total_s: float
    image_mb: float
    version: str | None
    key: str | None
    differences: tuple[tuple[str, tuple[str, ...]], ...] | None


def run(args: Options) -> Result:
    """Build the kernel with a cache of its own, the recipe's lines on stderr with the seconds since the start;
    a build that fails is refused in one line."""
    cache = args.keep or tempfile.mkdtemp(prefix="itb-kernel-build-")
    saved = os.environ.get("IPSEC_TESTBED_CACHE")
    os.environ["IPSEC_TESTBED_CACHE"] = cache
    print(heading(args, cache, os.cpu_count(), os.uname().release), file=sys.stderr, flush=True)
    started = time.monotonic()
    stages: list[tuple[str, float]] = []

    def say(line: str) -> None:
        print(f"  {time.monotonic() - started:6.1f} s  {line}", file=sys.stderr, flush=True)
        for stage in ("unpacking", "cloning", "configuring", "building", "built"):
            if line.startswith(stage):
                stages.append((stage, time.monotonic() - started))

    try:
        try:
            built = kernelbuild.build(args.name, variant="tiny" if args.tiny else "testbed", fp_bytes=args.fp_bytes,
                                      say=say)
        except (kernelbuild.BuildError, kernelsource.KernelNameError) as e:
            raise Refused(str(e)) from None
        total = time.monotonic() - started
        image = built.path
        found = None
        if not args.tiny and os.path.exists(DEBIAN_CONFIG):
            with gzip.open(DEBIAN_CONFIG, "rt") as f:
                debian = read_config(f.read())
            with open(os.path.join(os.path.dirname(image), "config")) as f:
                ours = read_config(f.read())
            found = tuple((kind, tuple(options)) for kind, options in differences(debian, ours).items())
        return Result(cache, os.cpu_count(), os.uname().release, tuple(stages), total, os.path.getsize(image) / 1e6,
                      built.info.get("version"), built.info.get("key"), found)
    finally:
        if saved is None:
            os.environ.pop("IPSEC_TESTBED_CACHE", None)
        else:
            os.environ["IPSEC_TESTBED_CACHE"] = saved
        if not args.keep:
            shutil.rmtree(cache, ignore_errors=True)


def heading(args: Options, cache: str, cpus: int | None, release: str) -> str:
    """The line that says what is built, where."""
    return (f"building {'the tiny test kernel' if args.tiny else args.name} on {cpus} CPUs ({release} host), "
            f"cache {cache}")


def page(args: Options, result: Result) -> str:
    """Each stage's wall time, the total, and the configuration against Debian's UML kernel's."""
    total = result.total_s
    lines = [heading(args, result.cache, result.cpus, result.release), ""]
    ends = [t for _, t in result.stages[1:]] + [total]
    for (stage, t0), t1 in zip(result.stages, ends, strict=False):
        if stage != "built":
            lines.append(f"{stage:12s} {t1 - t0:6.1f} s")
    lines.append(f"{'total':12s} {total:6.1f} s  ({total / 60:.1f} min on {result.cpus} CPUs); "
                 f"kernel {result.image_mb:.1f} MB, linux {result.version}, key {result.key}")
    if result.differences is not None:
        lines.append("\nthe configuration against Debian's UML kernel's:")
        for kind, options in result.differences:
            listed = ": " + " ".join(o.removeprefix("CONFIG_") for o in options) if args.list_all or \
                kind != "off (a module in Debian's)" else " (every module the testbed does not load)"
            lines.append(f"  {len(options):4d} {kind}{listed}")
    return "\n".join(lines)


BENCHMARK = Benchmark("kernel_build", Options, run, page)

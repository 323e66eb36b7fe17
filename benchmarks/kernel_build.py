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

import argparse
import gzip
import os
import re
import shutil
import sys
import tempfile
import time

from testbed import kernelbuild, kernelsource

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
    for option in sorted(set(debian) & set(ours)):
        a, b = debian[option], ours[option]
        if a == b:
            continue
        if a == "m" and b == "y":
            kinds["built in (a module in Debian's)"].append(option)
        elif a == "m" and b == "n":
            kinds["off (a module in Debian's)"].append(option)
        elif a == "y" and b == "n":
            kinds["off (built into Debian's)"].append(option)
        else:
            kinds["other"].append(f"{option}: {a} -> {b}")
    return kinds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 2)[2],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", default=kernelsource.RECIPE, metavar="NAME",
                   help="the kernel to build (default: recipe)")
    p.add_argument("--tiny", action="store_true", help="the tests' tiny kernel instead of the project's")
    p.add_argument("--fp-bytes", type=int, help="the FPU buffer (default: the recipe's)")
    p.add_argument("--keep", metavar="DIR", help="keep the build under DIR instead of a temporary directory")
    p.add_argument("--list", action="store_true", help="list every option that differs, not only the counts")
    args = p.parse_args(argv)

    cache = args.keep or tempfile.mkdtemp(prefix="itb-kernel-build-")
    saved = os.environ.get("IPSEC_TESTBED_CACHE")
    os.environ["IPSEC_TESTBED_CACHE"] = cache
    print(f"building {'the tiny test kernel' if args.tiny else args.name} on {os.cpu_count()} CPUs "
          f"({os.uname().release} host), cache {cache}", flush=True)
    started = time.monotonic()
    stages: list[tuple[str, float]] = []

    def say(line: str) -> None:
        print(f"  {time.monotonic() - started:6.1f} s  {line}", flush=True)
        for stage in ("unpacking", "cloning", "configuring", "building", "built"):
            if line.startswith(stage):
                stages.append((stage, time.monotonic() - started))

    try:
        try:
            built = kernelbuild.build(args.name, variant="tiny" if args.tiny else "testbed", fp_bytes=args.fp_bytes,
                                      say=say)
        except (kernelbuild.BuildError, kernelsource.KernelNameError) as e:
            print(f"kernel_build: {e}", file=sys.stderr)
            return 1
        total = time.monotonic() - started
        image = built.path
        print()
        ends = [t for _, t in stages[1:]] + [total]
        for (stage, t0), t1 in zip(stages, ends, strict=False):
            if stage != "built":
                print(f"{stage:12s} {t1 - t0:6.1f} s")
        print(f"{'total':12s} {total:6.1f} s  ({total / 60:.1f} min on {os.cpu_count()} CPUs); "
              f"kernel {os.path.getsize(image) / 1e6:.1f} MB, linux {built.info.get('version')}, "
              f"key {built.info.get('key')}")
        if not args.tiny and os.path.exists(DEBIAN_CONFIG):
            with gzip.open(DEBIAN_CONFIG, "rt") as f:
                debian = read_config(f.read())
            with open(os.path.join(os.path.dirname(image), "config")) as f:
                ours = read_config(f.read())
            print("\nthe configuration against Debian's UML kernel's:")
            for kind, options in differences(debian, ours).items():
                listed = ": " + " ".join(o.removeprefix("CONFIG_") for o in options) if args.list or \
                    kind != "off (a module in Debian's)" else " (every module the testbed does not load)"
                print(f"  {len(options):4d} {kind}{listed}")
        return 0
    finally:
        if saved is None:
            os.environ.pop("IPSEC_TESTBED_CACHE", None)
        else:
            os.environ["IPSEC_TESTBED_CACHE"] = saved
        if not args.keep:
            shutil.rmtree(cache, ignore_errors=True)

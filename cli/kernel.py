"""``ipsec-testbed kernel``: the User-Mode Linux kernels the testbed builds, boots and compares.

    ipsec-testbed kernel build [NAME]     build NAME by the recipe (or find it cached); no NAME: the kernel this
                                          machine needs, if any (the project's where Debian's cannot boot);
                                          --x86: the same source for the counted backend (QEMU) instead
    ipsec-testbed kernel list             every kernel built: name, version, source, key, size, build time, last used
    ipsec-testbed kernel show NAME        how NAME was built and where its configuration differs from Debian's
    ipsec-testbed kernel remove NAME...   remove built kernels (by name, key or directory)
    ipsec-testbed kernel fetch            Debian's x86-64 kernel for the counted backend (--kernel qemu), and its
                                          counting plugin built

NAME is what ``--uml-kernel`` and ``regress --ab`` take (:mod:`testbed.kernelsource`).
"""
from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys

from cli.output import console
from testbed import kernelbuild, kernelsource, umlkernel, xsave
from testbed.kernelbuild import BuildError
from testbed.kernelsource import KernelNameError

NAMES_HELP = ("debian; recipe (= 6.1); a Debian source version: 6.1, 6.12; a source tarball PATH.tar.xz; a git "
              "tree PATH@REF (PATH alone: HEAD); a built image PATH; each source with +patch:FILE and "
              "+config:FRAGMENT suffixes, in order")
EPILOG = f"""\
kernel names: {NAMES_HELP}.

examples:
  sudo ipsec-testbed kernel build 6.12                      # Debian's linux-source-6.12 by the recipe
  sudo ipsec-testbed kernel build ~/linux@v6.8+config:my.config
  sudo ipsec-testbed kernel build --x86 6.1                 # the same source for the counted backend (QEMU)
  ipsec-testbed kernel list
  ipsec-testbed kernel show 6.12                            # its configuration against Debian's
  sudo ipsec-testbed regress --ab 6.1 6.12 --suite detect   # the two versions, paired
  sudo ipsec-testbed regress --bisect v6.7 v6.8 --tree ~/linux   # which commit made ESP costlier

Every kernel is built the same way: Debian's UML configuration with the modules a guest loads built in, ESP
offload out, and an FPU buffer that every x86-64 CPU's XSAVE area fits (so it boots on AMX CPUs too); a step
that does not apply to a version stops the build with one line. Built kernels are cached under
~/.cache/ipsec-testbed/kernels by a key over everything that went into them; a second build of a nearby commit
of the same tree rebuilds only what changed.
"""


def add_parser(sub) -> None:
    p = sub.add_parser("kernel", help="build, list, show and remove the UML kernels the testbed boots",
                       description="The UML kernels the testbed builds from any source, boots and compares.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    b = verbs.add_parser("build", help="build a kernel by the recipe (or find it cached) and print its path",
                         description="Build NAME by the recipe, or find it in the cache; print the image's path. "
                         "Without NAME: the kernel this machine needs (the project's where Debian's linux.uml "
                         "cannot boot on this CPU), or nothing. Ctrl-C stops a build and caches nothing.",
                         epilog=f"kernel names: {NAMES_HELP}.")
    b.add_argument("name", nargs="?", metavar="NAME", help="the kernel (default: what this machine needs)")
    b.add_argument("--jobs", type=int, default=None, metavar="N", help="make -jN (default: the CPUs)")
    b.add_argument("--x86", action="store_true",
                   help="build it for the counted backend instead (--kernel qemu): an x86-64 bzImage of the same "
                   "source, x86_64's defconfig with the testbed's network and IPsec built in "
                   "(scripts/uml-kernel/x86.config); --kernel qemu --uml-kernel NAME builds it on first use")
    b.set_defaults(func=cmd_build)
    v = verbs.add_parser("list", help="every kernel built, with what it was built from")
    v.set_defaults(func=cmd_list)
    s = verbs.add_parser("show", help="how a kernel was built and its configuration against Debian's",
                         description="How NAME was built (source, key, patches, fragments) and every option where "
                         "its configuration differs from Debian's UML configuration.")
    s.add_argument("name", metavar="NAME")
    s.add_argument("--all", action="store_true", help="every difference, not only the data path's "
                   "(net, crypto, xfrm, the scheduler and timers, the stack)")
    s.set_defaults(func=cmd_show)
    f = verbs.add_parser("fetch", help="fetch Debian's x86-64 kernel for the counted backend (--kernel qemu)",
                         description="Download Debian's current linux-image-amd64 and busybox-static with apt-get "
                         "download and unpack them into the cache (nothing is installed on this machine), then "
                         "build the emulator plugin that counts the guest's instructions; print the kernel's path. "
                         "At once when they are there already.")
    f.set_defaults(func=cmd_fetch)
    r = verbs.add_parser("remove", help="remove built kernels from the cache")
    r.add_argument("names", nargs="+", metavar="NAME", help="a kernel name, a key or a build directory")
    r.set_defaults(func=cmd_remove)


def cmd_build(args: argparse.Namespace) -> int:
    if args.name is None and args.x86:
        args.name = kernelsource.RECIPE
    if args.name is None:
        if not umlkernel.needs_build():
            chosen = umlkernel.automatic()
            print(f"kernel: nothing to build: a guest boots {chosen.describe()} here", file=sys.stderr)
            print(chosen.path)
            return 0
        print(f"kernel: {xsave.describe(xsave.host_bytes())}", file=sys.stderr)
        args.name = kernelsource.RECIPE
    try:
        built = kernelbuild.build(args.name, jobs=args.jobs, variant=kernelbuild.variant_for(args.x86))
    except (BuildError, KernelNameError) as e:
        print(f"ipsec-testbed kernel build: {e}", file=sys.stderr)
        return 2 if isinstance(e, KernelNameError) else 1
    except KeyboardInterrupt:
        print("\nipsec-testbed kernel build: interrupted; nothing cached", file=sys.stderr)
        return 130
    print(built.path)
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    from testbed import qemukernel
    from testbed.backends import qemu

    def say(message: str) -> None:
        print(f"kernel: {message}", file=sys.stderr)

    try:
        kernel = qemukernel.fetch(say)
        qemu.build_plugin(say)
    except (qemukernel.KernelUnavailableError, qemu.QemuError, OSError) as e:
        print(f"ipsec-testbed kernel fetch: {e}", file=sys.stderr)
        return 1
    print(kernel.path)
    return 0


def _when(iso: str | None) -> str:
    if not iso:
        return "never"
    try:
        t = datetime.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return iso
    return t.strftime("%Y-%m-%d %H:%M")


def cmd_list(args: argparse.Namespace) -> int:
    from rich.table import Table

    built = kernelbuild.builds()
    table = Table(title=f"kernels built ({kernelbuild.kernels_dir()})", title_justify="left")
    for col in ("name", "for", "version", "source", "key", "size", "build", "built", "last used"):
        table.add_column(col, justify="right" if col in ("size", "build") else "left")
    debian = umlkernel.debian()
    if debian:
        boots = debian.fits_host
        table.add_row("debian", "uml", debian.version or "?", "Debian's user-mode-linux package", "-",
                      f"{os.path.getsize(debian.path) / 2**20:.0f} MB", "-", "-",
                      "cannot boot on this CPU" if boots is False else "-")
    for b in built:
        info = b.info
        table.add_row(info.get("name") or info.get("variant", "?"), "qemu" if b.counted else "uml",
                      info.get("version", "?"),
                      info.get("source") or f"Debian's linux-source {info.get('package_version', '?')}",
                      info.get("key", "?"), f"{kernelbuild.size_bytes(b) / 2**20:.0f} MB",
                      f"{info.get('build_s', '?')} s", _when(info.get("built")), _when(kernelbuild.last_used(b)))
    console().print(table)
    if not built:
        print("no kernel built yet: `sudo ipsec-testbed kernel build 6.12` builds one", file=sys.stderr)
    return 0


def _find(name: str) -> list[kernelbuild.Built]:
    """The builds ``name`` means: a key, a directory, or a kernel name (its plan's key)."""
    every = kernelbuild.builds()
    found = [b for b in every if name in (b.info.get("key"), b.directory, b.path, b.info.get("name"),
                                          os.path.basename(b.directory))]
    if found:
        return found
    try:
        parsed = kernelsource.parse(name)
        if parsed.built:
            key = kernelbuild.plan(parsed).key
            return [b for b in every if b.info.get("key") == key]
    except (KernelNameError, BuildError):
        pass
    return []


DATA_PATH = ("CONFIG_NET", "CONFIG_INET", "CONFIG_IPV6", "CONFIG_XFRM", "CONFIG_CRYPTO", "CONFIG_NETFILTER",
             "CONFIG_HZ", "CONFIG_NO_HZ", "CONFIG_PREEMPT", "CONFIG_SCHED", "CONFIG_KERNEL_STACK", "CONFIG_SLAB",
             "CONFIG_SLUB", "CONFIG_HIGH_RES", "CONFIG_VETH", "CONFIG_BRIDGE", "CONFIG_TCP", "CONFIG_DEFAULT",
             "CONFIG_RANDOMIZE", "CONFIG_STACKPROTECTOR", "CONFIG_INIT_ON", "CONFIG_HARDENED", "CONFIG_RETPOLINE",
             "CONFIG_MODULES", "CONFIG_SECURITY", "CONFIG_BPF", "CONFIG_JIT")


def cmd_show(args: argparse.Namespace) -> int:
    found = _find(args.name)
    if not found:
        print(f"ipsec-testbed kernel show: no built kernel is {args.name!r} (`ipsec-testbed kernel list`)",
              file=sys.stderr)
        return 2
    b = found[0]
    for k in ("name", "source", "version", "release", "key", "patches", "configs", "fp_bytes", "kernel_stack_order",
              "build_s", "jobs", "built"):
        if b.info.get(k) not in (None, [], ""):
            print(f"{k:>19s}: {b.info[k]}")
    config = os.path.join(b.directory, "config")
    against, what, fix = kernelbuild.DEBIAN_CONFIG, "Debian's UML configuration", "install user-mode-linux"
    if b.counted:  # an x86-64 kernel: against the x86-64 kernel Debian ships, which the counted backend boots
        from testbed import qemukernel

        debian = qemukernel.debian()
        against = debian.config if debian and debian.config else ""
        what = f"Debian's x86-64 kernel {debian.version}" if debian else "Debian's x86-64 kernel"
        fix = f"sudo {qemukernel.FETCH_COMMAND}"
    if not os.path.isfile(against):
        print(f"(no {what} to compare with: {fix})")
        return 0
    diffs = kernelbuild.config_differences(config, against)
    shown = diffs if args.all else [d for d in diffs if d[0].startswith(DATA_PATH)]
    print(f"\nits configuration against {what}: {len(diffs)} options differ"
          f"{'' if args.all else f', {len(shown)} of them on the data path (--all: every one)'}")
    print(f"  {'option':44s} {'Debian':>10s}  this kernel")
    for option, debian, mine in shown:
        print(f"  {option:44s} {debian:>10s}  {mine}")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    status = 0
    for name in args.names:
        found = _find(name)
        if not found:
            print(f"ipsec-testbed kernel remove: no built kernel is {name!r}", file=sys.stderr)
            status = 2
        for b in found:
            shutil.rmtree(b.directory)
            print(f"removed {b.directory}")
    return status

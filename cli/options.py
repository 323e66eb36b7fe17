"""Command-line options and argument types shared by every command (``ipsec-testbed``, its jobs, and the
benchmarks' command lines, which :mod:`cli.bench` makes from their options): with :mod:`cli.bench`, the one
place argparse is used, and where options become the parts of a :class:`~experiments.job.Job`.

Every parser is a :class:`Parser`: a bad option or value is one line that names it (see
:mod:`testbed.errors` for the rest of how a command fails).
"""
from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from typing import NoReturn

from experiments.job import INCOMPLETE, KernelChoice
from testbed import backends, kernelsource, umlkernel
from testbed.backends import qemu, uml
from testbed.historyplace import ENV, OFF, default_path


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line that names the problem."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def add_debug_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", help="on an error, show the Python traceback")


def csv(kind: Callable) -> Callable[[str], tuple]:
    """An argparse type: comma-separated ``kind`` values."""
    def parse(text: str) -> tuple:
        try:
            values = tuple(kind(v) for v in text.split(",") if v.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {kind.__name__} values, not {text!r}") from None
        if not values:
            raise argparse.ArgumentTypeError("give at least one value")
        return values
    return parse


def percent(low: float, high: float, low_included: bool = False) -> Callable[[str], float]:
    """An argparse type: a number strictly between ``low`` and ``high`` (or ``low`` itself, with
    ``low_included``)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (low <= value if low_included else low < value) or not value < high:
            raise argparse.ArgumentTypeError(f"{text!r} is not a percentage in {'[' if low_included else '('}"
                                             f"{low:g}, {high:g})")
        return value
    return parse


def positive_seconds(text: str) -> float:
    """An argparse type: a positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _uml_kernel(text: str) -> str:
    """``--uml-kernel``: a kernel name (:mod:`testbed.kernelsource`), checked now, built (if it must be)
    when the job runs; every path in it made absolute."""
    if os.environ.get(backends.GUEST_ENV):  # a guest runs on the kernel the host chose and checked
        return text
    try:
        return kernelsource.parse(text).canonical
    except kernelsource.KernelNameError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _uml_modules(path: str) -> str:
    if not os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{path!r} is not a directory")
    return path


def parse_size(size: str) -> int:
    """Bytes in a size like ``512M`` or ``2G`` (``--uml-mem``)."""
    if not uml.MEM_PATTERN.match(size):
        raise ValueError(f"{size!r} is not a size like 512M or 2G")
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(size[:-1]) * units[size[-1].upper()] if size[-1].upper() in units else int(size)


def _uml_mem(size: str) -> str:
    if not uml.MEM_PATTERN.match(size):
        raise argparse.ArgumentTypeError(f"{size!r} is not a size like 512M or 2G")
    return size


def add_kernel_options(p: argparse.ArgumentParser) -> None:
    """--kernel and the guest's options, as every command that may boot a guest has them."""
    g = p.add_argument_group("kernel")
    g.add_argument("--kernel", choices=(backends.AUTO, *backends.names()), default=backends.AUTO,
                   help="where the work runs: the host kernel, User-Mode Linux, or auto = the host "
                        "kernel when it has what the work needs (ESP for IPsec profiles), UML otherwise "
                        "(default: %(default)s)")
    add_uml_options(g)


def add_speed_probe_option(p: argparse.ArgumentParser) -> None:
    """--no-speed-probe, for the commands that measure CPU costs in a guest."""
    p.add_argument("--no-speed-probe", action="store_true",
                   help="run no speed probe on a spare host CPU beside a UML guest; CPU costs are then "
                        "as measured, not set to the run's common machine speed (see testbed/speedprobe.py)")


def add_uml_options(g) -> None:
    g.add_argument("--uml-kernel", metavar="NAME", type=_uml_kernel,
                   help="UML kernel to boot: debian (Debian's linux.uml), recipe (the project's build of Debian's "
                        "linux-source-6.1), a version (6.12: Debian's linux-source-6.12), a source tarball, a git "
                        "tree PATH@REF, each with +patch:FILE and +config:FRAGMENT, built by the recipe on first "
                        "use (`ipsec-testbed kernel --help`); or a UML kernel image PATH; "
                        f"default: ${umlkernel.KERNEL_ENV} if set, else Debian's where it can boot on this CPU, "
                        "else the project's (`ipsec-testbed doctor` says which and why)")
    g.add_argument("--uml-modules", metavar="DIR", type=_uml_modules,
                   help="module directory for --uml-kernel (a release dir with modules.dep, or "
                        "the lib/modules of `make ARCH=um modules_install`); omit for a kernel "
                        "with everything built in")
    g.add_argument("--uml-mem", "--mem", dest="uml_mem", default="2G", metavar="SIZE", type=_uml_mem,
                   help="guest memory, e.g. 1G or 512M (default: %(default)s)")
    g.add_argument("--qemu-crypto", choices=tuple(qemu.CRYPTO_CPU), default=None,
                   help="the crypto drivers a counted guest (--kernel qemu) runs: x86 (AES-NI and PCLMULQDQ: "
                        "rfc4106-gcm-aesni, as on an x86 server) or generic (the CPU model without them: the "
                        "kernel's C code, gcm_base(ctr(aes-generic),ghash-generic), as UML always runs; where a "
                        f"change to the crypto API shows); default: {qemu.DEFAULT_CRYPTO}")
    g.add_argument("--uml-keep-awake", action=argparse.BooleanOptionalAction, default=False,
                   help="keep the guest's host CPU from idling while it runs: a process of the lowest priority "
                        "(SCHED_IDLE) spins on it and yields the moment the guest wakes, so lone packets find the "
                        "emulator at full speed, not waking from a halted CPU (testbed/awake.py; costs a host "
                        "CPU's power; default: %(default)s)")


def kernel_choice(args: argparse.Namespace) -> KernelChoice:
    """The :class:`~experiments.job.KernelChoice` of parsed ``--kernel``, ``--uml-*`` (``--uml-keep-awake``
    among them) and ``--no-speed-probe`` options (each at its default where the command has no such option)."""
    return KernelChoice(kernel=getattr(args, "kernel", backends.AUTO), uml_kernel=getattr(args, "uml_kernel", None),
                        uml_modules=getattr(args, "uml_modules", None), uml_mem=getattr(args, "uml_mem", "2G"),
                        speed_probe=not getattr(args, "no_speed_probe", False),
                        keep_awake=bool(getattr(args, "uml_keep_awake", False)),
                        qemu_crypto=getattr(args, "qemu_crypto", None))


def backend_options(args: argparse.Namespace) -> backends.Options:
    """The :class:`~testbed.backends.Options` of parsed ``--uml-*`` options."""
    return kernel_choice(args).options()


def add_output_options(p: argparse.ArgumentParser, default_out: str, dry_run_help: str) -> None:
    """--out, --dry-run, --no-report, --allow-failures, -v, --debug and the kernel options, as every
    experiment has them."""
    o = p.add_argument_group("output")
    o.add_argument("--out", metavar="DIR", help=f"run directory; an existing one is resumed (default: {default_out})")
    o.add_argument("--dry-run", action="store_true", help=dry_run_help)
    o.add_argument("--allow-failures", action="store_true",
                   help=f"exit 0 when some points could not be measured (every attempt failed); without it such "
                        f"a run exits {INCOMPLETE}, its last line saying how many and why")
    o.add_argument("--no-report", action="store_true", help="do not write the report or print the tables")
    add_concurrent_option(o)
    add_history_option(o)
    o.add_argument("-v", "--verbose", action="count", default=0, help="log what is being done (-vv: debug)")
    add_debug_option(o)
    add_kernel_options(p)
    add_speed_probe_option(p)


def add_concurrent_option(p) -> None:
    """--allow-concurrent, for every command that measures (testbed/measuring.py)."""
    p.add_argument("--allow-concurrent", action="store_true",
                   help="measure even while another testbed run measures on this machine (refused otherwise, "
                        "naming it): its load is then in every figure, and every record and the summary say so")


def add_history_option(p) -> None:
    """--history, for every command that measures (analysis/store.py)."""
    p.add_argument("--history", metavar="PATH|URL", default=None,
                   help=f"the results history this run's figures are added to (see `ipsec-testbed history`): an "
                        f"SQLite file, a postgresql://USER@HOST/DB URL for a team's, or {OFF} (default: "
                        f"${ENV}, else {default_path()})")

"""Which User-Mode Linux kernel a guest boots, where it came from, and why it was chosen.

Three kinds of kernel can boot a guest:

``debian``
    ``linux.uml`` from Debian's ``user-mode-linux`` package, with its modules under
    ``/usr/lib/uml/modules``.  The default wherever it can boot.
``recipe``
    built by the project's recipe (:mod:`testbed.kernelbuild`) from any source: Debian's
    ``linux-source-6.1`` by default (the name ``recipe``), another version (``6.12``), a tarball,
    a git tree at a ref, with patches and configuration on top (:mod:`testbed.kernelsource`), with
    Debian's configuration and an FPU buffer large enough for every x86-64 CPU (:mod:`testbed.xsave`
    says why Debian's is not).  Cached under ``~/.cache/ipsec-testbed/kernels/`` with a
    ``build.json`` that records how it was built.
``user``
    any other image given with ``--uml-kernel PATH`` (``make ARCH=um``'s ``./linux``).

:func:`select` decides.  ``--uml-kernel`` wins (any kernel name); then :data:`KERNEL_ENV` in the
environment, read the same way; then the automatic rule: Debian's kernel where this CPU's XSAVE area
fits its buffer, else the project's kernel, which ``./run install`` builds on such a host.  :func:`boot_failure`
turns a dead guest's console into the one line that says why and how to fix it.
"""
from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import os
import re
import shutil

from testbed import kernelbuild, kernelsource, xsave

#: How a person builds the project's kernel.
RECIPE_COMMAND = "ipsec-testbed kernel build"
#: A default for ``--uml-kernel`` (a path, ``debian`` or ``recipe``): how a whole test suite or CI
#: job runs on one kernel without passing the option to every command.
KERNEL_ENV = "IPSEC_TESTBED_UML_KERNEL"
DEBIAN_KERNEL = "/usr/bin/linux.uml"
DEBIAN_MODULES_ROOT = "/usr/lib/uml/modules"
ORIGINS = ("debian", "recipe", "user")
#: Names of kernels that need no source: Debian's, and the recipe's default build.
NAMED = (kernelsource.DEBIAN, kernelsource.RECIPE)
#: Capabilities (probe check names) a UML kernel has only when its configuration says so, and the option
#: that says it: Debian's kernel has every module the testbed's IPsec uses, but no WireGuard.
CONFIGURED = {"wireguard": "CONFIG_WIREGUARD"}


class KernelUnavailableError(RuntimeError):
    """No UML kernel that can boot here: the message says which and how to get one."""


@dataclasses.dataclass(frozen=True)
class UmlKernel:
    """A UML kernel image and what is known of it."""

    path: str
    origin: str                      # one of ORIGINS
    reason: str                      # why this one, for people and meta.json
    version: str | None = None       # "6.1.176", "6.1.192"
    fp_bytes: int | None = None      # the FPU buffer it hands the host (None: not known)
    key: str | None = None           # the recipe's cache key (recipe kernels)
    name: str | None = None          # the name it was built under (recipe kernels: 6.12, PATH@REF ...)
    source: str | None = None        # what it was built from, for people

    @property
    def fits_host(self) -> bool | None:
        """Whether its FPU buffer holds this CPU's XSAVE area (None: either size is unknown)."""
        if self.fp_bytes is None or xsave.host_bytes() is None:
            return None
        return xsave.fits(self.fp_bytes)

    def cannot_boot(self) -> str | None:
        """Why it cannot boot on this host, known without booting it; None when nothing says so."""
        if self.fits_host is False:
            return (f"{self.describe()} hands the host a {self.fp_bytes}-byte FPU buffer, smaller than this CPU's "
                    f"{xsave.host_bytes()}-byte XSAVE area: it cannot boot here. {_FIX}")
        return None

    def configured(self, option: str) -> bool | None:
        """Whether the kernel was built with ``option`` (``CONFIG_WIREGUARD``) built in or as a module, from
        the configuration beside it (Debian's package's, a recipe build's ``config``, a tree's ``.config``);
        None when there is none to read."""
        here = os.path.dirname(self.path)
        candidates = {"debian": [kernelbuild.DEBIAN_CONFIG], "recipe": [os.path.join(here, "config")],
                      "user": [os.path.join(here, ".config"), os.path.join(here, "config")]}[self.origin]
        for path in candidates:
            try:
                opener = gzip.open if path.endswith(".gz") else open
                with opener(path, "rt") as f:
                    text = f.read()
            except OSError:
                continue
            return re.search(rf"^{re.escape(option)}=[ym]$", text, re.MULTILINE) is not None
        return None

    def has(self, capability: str) -> bool | None:
        """Whether the kernel has ``capability`` (one of :data:`CONFIGURED`) as its configuration says; None
        when it has no configuration to read."""
        return self.configured(CONFIGURED[capability])

    def describe(self) -> str:
        what = {"debian": "Debian's linux.uml", "recipe": "the project's UML kernel",
                "user": "the UML kernel"}[self.origin]
        if self.origin == "recipe" and self.name and self.name != kernelsource.RECIPE:
            what = f"the UML kernel built from {self.source or self.name}"
        version = f" {self.version}" if self.version else ""
        return f"{what}{version} ({self.path})"

    def metadata(self) -> dict:
        """For meta.json: which kernel ran, where it came from and why it was chosen."""
        return {"kernel_path": self.path, "kernel_origin": self.origin, "kernel_version": self.version,
                "kernel_fp_bytes": self.fp_bytes, "kernel_recipe_key": self.key, "kernel_reason": self.reason,
                "kernel_name": self.name, "kernel_source": self.source, "host_xsave_bytes": xsave.host_bytes()}


_FIX = ("Use the project's kernel, which boots on every x86-64 CPU: `sudo ./run install` (or `sudo "
        f"{RECIPE_COMMAND}`) builds it, 4 to 6 minutes on 2 CPUs, then it is chosen by itself.")


def debian() -> UmlKernel | None:
    """Debian's kernel, where its package is installed."""
    found = shutil.which("linux.uml") or (DEBIAN_KERNEL if os.access(DEBIAN_KERNEL, os.X_OK) else None)
    if not found:
        return None
    version = None
    if os.path.isdir(DEBIAN_MODULES_ROOT):
        releases = sorted(d for d in os.listdir(DEBIAN_MODULES_ROOT)
                          if os.path.exists(os.path.join(DEBIAN_MODULES_ROOT, d, "modules.dep")))
        version = releases[-1] if releases else None
    return UmlKernel(found, "debian", "", version=version, fp_bytes=xsave.DEBIAN_FP_BYTES)


@functools.cache
def recipe_key() -> str | None:
    """The cache key of the kernel the recipe builds now by default (None: it cannot be planned here)."""
    try:
        return kernelbuild.plan(kernelsource.parse(kernelsource.RECIPE)).key
    except (kernelbuild.BuildError, kernelsource.KernelNameError, OSError):
        return None


def from_image(path: str, reason: str) -> UmlKernel:
    """What is known of the kernel image at ``path``: a recipe build says how it was built."""
    path = os.path.abspath(path)
    if os.path.realpath(path) == os.path.realpath(DEBIAN_KERNEL):
        found = debian()
        if found:
            return dataclasses.replace(found, reason=reason)
    build = _build_info(path)
    if build:
        return UmlKernel(path, "recipe", reason, version=build.get("version"), fp_bytes=build.get("fp_bytes"),
                         key=build.get("key"), name=build.get("name") or kernelsource.RECIPE,
                         source=build.get("source"))
    return UmlKernel(path, "user", reason)


def _build_info(path: str) -> dict | None:
    try:
        with open(os.path.join(os.path.dirname(path), "build.json")) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and info.get("origin") == "recipe" else None


def recipe(reason: str = "") -> UmlKernel | None:
    """The project's kernel for the recipe as it is now, if it has been built."""
    return built(kernelsource.RECIPE, reason)


def built(word: str, reason: str = "") -> UmlKernel | None:
    """The kernel the recipe builds for the name ``word``, if it is in the cache (None: not built yet)."""
    try:
        key = recipe_key() if word == kernelsource.RECIPE else kernelbuild.plan(kernelsource.parse(word)).key
    except (kernelbuild.BuildError, kernelsource.KernelNameError, OSError):
        return None
    found = kernelbuild.find(key) if key else None
    return from_image(found.path, reason) if found else None


def select(requested: str | None = None) -> UmlKernel:
    """The kernel a guest boots: ``requested`` (``--uml-kernel``: a path, ``debian`` or ``recipe``), else
    :data:`KERNEL_ENV`, else the automatic rule.  Raises :class:`KernelUnavailableError` with the fix."""
    if requested:
        return _named(requested, "--uml-kernel was given")
    if os.environ.get(KERNEL_ENV):
        return _named(os.environ[KERNEL_ENV], f"{KERNEL_ENV} was set")
    return automatic()


def _named(word: str, why: str) -> UmlKernel:
    try:
        name = kernelsource.parse(word)
    except kernelsource.KernelNameError as e:
        raise KernelUnavailableError(f"{why}: {e}") from None
    if name.kind == "debian":
        found = debian()
        if not found:
            raise KernelUnavailableError(f"{why} (debian), but Debian's linux.uml is not installed: "
                                         "apt-get install user-mode-linux, or scripts/install.sh")
        return dataclasses.replace(found, reason=f"{why} (debian)")
    if name.kind == "image":
        return from_image(name.base, why)
    found = built(word, f"{why} ({word})")
    if not found:
        raise KernelUnavailableError(f"{why} ({word}), but that kernel is not built yet: `sudo {RECIPE_COMMAND} "
                                     f"{word}` builds it (a sweep builds it on first use)")
    return found


def automatic() -> UmlKernel:
    """Debian's kernel where it can boot on this CPU, else the project's."""
    found = debian()
    host = xsave.host_bytes()
    if found and found.fits_host is not False:
        size = f" ({host} bytes)" if host is not None else ""
        return dataclasses.replace(found, reason=f"Debian's kernel; this CPU's XSAVE area{size} fits its "
                                                 f"{found.fp_bytes}-byte FPU buffer")
    if found:
        why = (f"Debian's linux.uml cannot boot on this CPU (its XSAVE area is {host} bytes, Debian's kernel "
               f"was built for {xsave.DEBIAN_FP_BYTES})")
    else:
        why = "Debian's linux.uml is not installed"
    own = recipe(f"{why}: the project's kernel, built by the recipe (ipsec-testbed kernel build)")
    if own and own.fits_host is not False:
        return own
    if found:
        raise KernelUnavailableError(f"{why}, and the project's kernel is not built yet. {_FIX}")
    raise KernelUnavailableError(f"{why}: apt-get install user-mode-linux (or scripts/install.sh), "
                                 "or pass --uml-kernel PATH")


def needs_build() -> bool:
    """Whether this host needs the project's kernel built: Debian's cannot boot here, and it is not built."""
    try:
        automatic()
    except KernelUnavailableError:
        return debian() is not None
    return False


# -- why a guest did not boot -----------------------------------------------------------------

#: Console lines that say why a guest died (the rest is a stack trace's noise).
_TELLING = re.compile(r"panic|fail|errno|error|cannot|can't|couldn't|not on tmpfs|noexec|out of memory|killed|"
                      r"not permitted|denied", re.IGNORECASE)

#: Known causes: a console pattern, and the one line that names the cause and the fix.
_CAUSES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"ptrace set fp regs failed, errno = 14"),
     "the kernel's FPU buffer{kernel} is smaller than this CPU's XSAVE area{host}: its first process died at its "
     f"first FPU restore (Debian's UML kernel has {xsave.DEBIAN_FP_BYTES} bytes; a CPU with AMX needs 11008). "
     + _FIX),
    (re.compile(r"check_ptrace|check_sysemu|PTRACE_TRACEME|ptrace.*(Operation not permitted|errno = 1\b)"),
     "ptrace is not allowed here (a container's seccomp profile, or kernel.yama.ptrace_scope=3), and User-Mode "
     "Linux runs its processes through it: allow ptrace for this process (e.g. docker run --cap-add SYS_PTRACE "
     "--security-opt seccomp=unconfined)"),
    (re.compile(r"must be not mounted noexec|Failed to choose tempdir|cannot create .*(uml|vm_file)|"
                r"Checking PROT_EXEC mmap.*(denied|not permitted)", re.IGNORECASE),
     "User-Mode Linux keeps its memory in a file under /dev/shm (or TMPDIR), which must exist, be writable and "
     "not be mounted noexec: mount -o remount,exec /dev/shm, or set TMPDIR to such a directory"),
    (re.compile(r"Couldn't allocate|Out of memory|Cannot allocate memory|mmap.*failed", re.IGNORECASE),
     "the guest could not get its memory: give it less (--uml-mem 1G) or free some on the host"),
)


#: Console lines every boot of Debian's linux.uml prints, which tell nothing of a death (no iomem region for the
#: mmapper device: none was asked for).
_HARMLESS = re.compile(r"mmapper_init - find_iomem failed")


def boot_failure(console: str, kernel: UmlKernel | None = None) -> tuple[str | None, list[str]]:
    """A dead guest's console read for people: the known cause in one line (None: not known), and the lines
    that say why (panics, failures, errno values), not the stack trace's tail."""
    lines = [line.rstrip() for line in console.splitlines() if line.strip() and not _HARMLESS.search(line)]
    telling = [line for line in lines if _TELLING.search(line) or any(p.search(line) for p, _ in _CAUSES)]
    host = xsave.host_bytes()
    sizes = {"host": f" ({host} bytes)" if host is not None else "",
             "kernel": f" ({kernel.fp_bytes} bytes)" if kernel and kernel.fp_bytes else ""}
    for pattern, message in _CAUSES:
        if any(pattern.search(line) for line in lines):
            # the cause's own lines and the panic it led to, not the other complaints of a dying guest
            why = [line for line in telling if pattern.search(line) or "panic" in line.lower()]
            return message.format(**sizes), why[-8:]
    return None, telling[-8:] or lines[-15:]

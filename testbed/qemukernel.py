"""The x86-64 kernel the counted backend boots under QEMU, and the small initramfs that reaches the host's files.

The counted backend (:mod:`testbed.backends.qemu`) boots a real x86-64 kernel in QEMU's emulator (TCG).  Two
kinds of kernel can boot there:

``debian``
    Debian's own ``linux-image-amd64``, exactly as Debian ships it: :func:`fetch` downloads the package and
    ``busybox-static`` with ``apt-get download`` and unpacks them under ``<cache>/qemu/debian-<version>/``
    (nothing is installed on the host: no /boot, no initramfs-tools, no bootloader), then indexes its modules
    with ``depmod``.  ``./run install`` fetches it; the default wherever it has been fetched.
``user``
    any other x86-64 kernel image (``make bzImage``'s ``arch/x86/boot/bzImage``) given with ``--uml-kernel
    PATH``: its modules beside it in ``--uml-modules``, or built in.

Either boots with an initramfs made per boot (:func:`initramfs`, a few megabytes, milliseconds to write): busybox,
the modules that reach the host's files where they are modules (virtio PCI, 9p over virtio, the virtio console,
in their dependency order from ``modules.dep``), and an ``/init`` that mounts the host's root over 9p and
hands over to the guest's init script on it (:func:`plan_initramfs_init`).
"""
from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Sequence

from testbed import kernelbuild, kernelsource, names
from testbed.rundir import publish_directory, write_json

#: Debian's package that names the current x86-64 kernel (it depends on ``linux-image-<release>``).
DEBIAN_META = "linux-image-amd64"
#: Debian's statically linked busybox: the initramfs's shell, mount, insmod and switch_root.
BUSYBOX_PACKAGE = "busybox-static"
#: How a person fetches Debian's kernel for the counted backend.
FETCH_COMMAND = "ipsec-testbed kernel fetch"
#: The modules (by name) that must be in before the host's files can be mounted and the consoles used.
ROOT_MODULES = ("virtio_pci", "9pnet_virtio", "9p", "virtio_console")
#: The 9p tag under which QEMU exports the host's root (``-virtfs ...,mount_tag=``).
ROOT_TAG = "itbroot"
#: The kernel command line's word for the guest's init script on the host's files.
INIT_PARAM = names.QEMU_INIT_PARAM
#: How the guest mounts the host's files: 9p2000.L with large messages, page cache kept (``loose``: a file the
#: guest reads twice, an import or a binary, is read from the host once; what the guest writes reaches the host
#: when the guest syncs, as its init does before it powers off).
MOUNT_OPTIONS = "trans=virtio,version=9p2000.L,msize=512000,cache=loose,access=any"
ORIGINS = ("debian", "recipe", "user")


class KernelUnavailableError(RuntimeError):
    """No x86-64 kernel the counted backend can boot: the message says which and how to get one."""


@dataclasses.dataclass(frozen=True)
class QemuKernel:
    """An x86-64 kernel image for QEMU and what is known of it."""

    path: str
    origin: str                      # one of ORIGINS
    reason: str                      # why this one, for people and meta.json
    modules_dir: str | None = None   # its release's module directory (holds modules.dep), None: built in
    version: str | None = None       # "6.1.192-2" (Debian's package), "6.1.192"
    release: str | None = None       # "6.1.0-56-amd64": uname -r
    config: str | None = None        # its configuration, where known
    busybox: str | None = None       # the busybox the initramfs is made with

    def describe(self) -> str:
        what = {"debian": f"Debian's x86-64 kernel {self.version}",
                "recipe": f"the project's x86-64 kernel {self.version}", "user": "the x86-64 kernel"}[self.origin]
        return f"{what} ({self.path})"

    def configured(self, option: str) -> bool | None:
        """Whether the kernel was built with ``option`` (y or m), from its configuration; None without one."""
        if not self.config:
            return None
        try:
            with open(self.config) as f:
                text = f.read()
        except OSError:
            return None
        return re.search(rf"^{re.escape(option)}=[ym]$", text, re.MULTILINE) is not None

    def metadata(self) -> dict:
        """For meta.json: which kernel ran, where it came from and why it was chosen."""
        return {"kernel_path": self.path, "kernel_origin": self.origin, "kernel_version": self.version,
                "kernel_reason": self.reason, "kernel_release_dir": self.modules_dir}


def qemu_dir() -> str:
    """Where fetched kernels live: ``<cache>/qemu``."""
    return os.path.join(names.cache_dir(), "qemu")


def is_bzimage(path: str) -> bool:
    """Whether ``path`` is an x86 kernel image QEMU can boot with ``-kernel`` (Linux's boot protocol header)."""
    return kernelsource.x86_image(path)


def image_error(path: str) -> str | None:
    """Why ``path`` is not an x86-64 kernel image (None: it is one)."""
    if not os.path.isfile(path):
        return f"{path}: no such file"
    if not is_bzimage(path):
        return f"{path} is not an x86 kernel image (no boot header: give make bzImage's arch/x86/boot/bzImage)"
    return None


# -- Debian's kernel ----------------------------------------------------------------------------

def fetched() -> list[QemuKernel]:
    """Debian's kernels fetched so far, oldest version first."""
    found = []
    for info_path in sorted(glob.glob(os.path.join(qemu_dir(), "debian-*", "kernel.json"))):
        try:
            with open(info_path) as f:
                info = json.load(f)
        except (OSError, ValueError):
            continue
        here = os.path.dirname(info_path)
        found.append(QemuKernel(os.path.join(here, info["image"]), "debian", "", modules_dir=os.path.join(
            here, "lib", "modules", info["release"]), version=info["version"], release=info["release"],
            config=os.path.join(here, info["config"]), busybox=os.path.join(here, info["busybox"])))
    return sorted(found, key=lambda k: _version_key(k.version or ""))


def _version_key(version: str) -> tuple:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"[.\-+~]", version))


def debian() -> QemuKernel | None:
    """The newest of Debian's kernels fetched (None: none yet)."""
    found = fetched()
    return found[-1] if found else None


def _apt(*args: str, cwd: str | None = None) -> str:
    done = subprocess.run(["apt-get", "-q", "-o", "APT::Sandbox::User=root", *args], cwd=cwd,
                          capture_output=True, text=True)
    if done.returncode:
        tail = (done.stderr or done.stdout).strip().splitlines()
        raise KernelUnavailableError(f"apt-get {' '.join(args)} failed: {tail[-1] if tail else done.returncode} "
                                     "(apt-get update first, or check the machine reaches Debian's archive)")
    return done.stdout


def current_package() -> tuple[str, str]:
    """(package, version) of the x86-64 kernel Debian's archive offers now: what ``linux-image-amd64`` depends on."""
    out = subprocess.run(["apt-cache", "depends", DEBIAN_META], capture_output=True, text=True)
    m = re.search(r"Depends:\s*(linux-image-\S+)", out.stdout)
    if out.returncode or not m:
        raise KernelUnavailableError(f"Debian's archive here has no {DEBIAN_META} (apt-get update, or run on "
                                     "Debian/Ubuntu for x86-64)")
    package = m.group(1)
    policy = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True).stdout
    v = re.search(r"Candidate:\s*(\S+)", policy)
    if not v or v.group(1) == "(none)":
        raise KernelUnavailableError(f"Debian's archive here has no candidate for {package} (apt-get update)")
    return package, v.group(1)


Say = Callable[[str], None]


def fetch(say: Say = lambda _message: None) -> QemuKernel:
    """Debian's current x86-64 kernel, fetched and unpacked once (see the module docstring); at once when it is
    there already.  :class:`KernelUnavailableError` (one line) when it cannot be had."""
    package, version = current_package()
    for kernel in fetched():
        if kernel.version == version:
            return kernel
    target = os.path.join(qemu_dir(), f"debian-{version}")
    os.makedirs(qemu_dir(), exist_ok=True)
    say(f"fetching Debian's {package} {version} and {BUSYBOX_PACKAGE} for the counted backend (nothing is "
        "installed on this machine)")
    staging = tempfile.mkdtemp(prefix=".fetch-", dir=qemu_dir())
    try:
        debs = os.path.join(staging, "debs")
        os.mkdir(debs)
        _apt("download", f"{package}={version}", BUSYBOX_PACKAGE, cwd=debs)
        for deb in sorted(glob.glob(os.path.join(debs, "*.deb"))):
            subprocess.run(["dpkg-deb", "-x", deb, staging], check=True)
        shutil.rmtree(debs)
        release = package.removeprefix("linux-image-")
        if not os.path.isdir(os.path.join(staging, "lib", "modules", release)):
            raise KernelUnavailableError(f"{package} {version} holds no lib/modules/{release}: not a kernel package")
        subprocess.run(["depmod", "-b", staging, release], check=True)
        info = {"package": package, "version": version, "release": release, "image": f"boot/vmlinuz-{release}",
                "config": f"boot/config-{release}", "busybox": "bin/busybox"}
        for key in ("image", "config", "busybox"):
            if not os.path.isfile(os.path.join(staging, info[key])):
                raise KernelUnavailableError(f"{package} or {BUSYBOX_PACKAGE} has no {info[key]}")
        write_json(os.path.join(staging, "kernel.json"), info)
        publish_directory(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    found = debian()
    assert found is not None
    return found


def select(requested: str | None = None) -> QemuKernel:
    """The kernel a counted guest boots: ``requested`` (a path to an x86-64 kernel image, ``debian``, or a name the
    recipe builds, built for x86-64: :func:`recipe`), else Debian's fetched kernel.  :class:`KernelUnavailableError`
    with the fix in one line."""
    if requested and requested != "debian" and not os.path.exists(requested) and _built_name(requested):
        return recipe(requested)
    if requested and requested != "debian":
        why = image_error(requested)
        if why:
            raise KernelUnavailableError(f"--uml-kernel {why}")
        path = os.path.abspath(requested)
        for known in fetched():  # Debian's, named by its path: its modules are beside it
            if os.path.realpath(known.path) == os.path.realpath(path):
                return dataclasses.replace(known, reason="--uml-kernel was given")
        config = next((c for c in (os.path.join(os.path.dirname(path), "..", "..", "..", ".config"),
                                   os.path.join(os.path.dirname(path), "config")) if os.path.isfile(c)), None)
        own = debian()  # its busybox makes the initramfs of any kernel
        return QemuKernel(path, "user", "--uml-kernel was given", config=config, busybox=own.busybox if own else None)
    found = debian()
    if found is None:
        raise KernelUnavailableError(f"Debian's x86-64 kernel for the counted backend is not fetched yet: "
                                     f"`sudo ./run install` (or `sudo {FETCH_COMMAND}`) fetches it, about 70 MB")
    return dataclasses.replace(found, reason="Debian's x86-64 kernel, as Debian ships it")


def _built_name(text: str) -> bool:
    try:
        return kernelsource.parse(text).built
    except kernelsource.KernelNameError:
        return False


def recipe(text: str) -> QemuKernel:
    """The recipe's x86-64 build of the kernel ``text`` names (:mod:`testbed.kernelbuild`, variant x86), from the
    cache; :class:`KernelUnavailableError` naming the command that builds it when it is not built yet."""
    try:
        built = kernelbuild.cached(kernelbuild.plan(kernelsource.parse(text), kernelbuild.X86))
    except (kernelbuild.BuildError, kernelsource.KernelNameError) as e:
        raise KernelUnavailableError(f"--uml-kernel {text}: {e}") from None
    if built is None:
        raise KernelUnavailableError(f"--uml-kernel {text} is not built for the counted backend yet: `sudo "
                                     f"ipsec-testbed kernel build --x86 {text}` builds it")
    own = debian()  # its busybox makes the initramfs of any kernel
    return QemuKernel(built.path, "recipe", f"--uml-kernel {text} (the recipe's x86-64 build)",
                      version=built.info.get("version"), release=built.info.get("release"),
                      config=os.path.join(built.directory, "config"), busybox=own.busybox if own else None)


# -- the initramfs --------------------------------------------------------------------------------

def modules_in_order(modules_dir: str, wanted: Iterable[str]) -> list[str]:
    """The module files (relative to ``modules_dir``) to load for ``wanted``, each after those it needs, none
    twice; modules built into the kernel (``modules.builtin``) are left out (pure but for reading the index)."""
    deps: dict[str, list[str]] = {}
    with open(os.path.join(modules_dir, "modules.dep")) as f:
        for line in f:
            module, _, needs = line.partition(":")
            deps[_module_name(module)] = [module.strip(), *needs.split()]
    builtin = set()
    if os.path.exists(os.path.join(modules_dir, "modules.builtin")):
        with open(os.path.join(modules_dir, "modules.builtin")) as f:
            builtin = {_module_name(line) for line in f if line.strip()}
    order: list[str] = []
    for name in wanted:
        name = name.replace("-", "_")
        if name in builtin:
            continue
        if name not in deps:
            raise KernelUnavailableError(f"the kernel's modules ({modules_dir}) have no {name}, which the counted "
                                         "backend needs to reach the host's files: build it in, or as a module")
        own, *needed = deps[name]
        for path in [*reversed(needed), own]:  # modules.dep lists a module's needs last-loaded-first
            if path not in order:
                order.append(path)
    return order


def _module_name(path: str) -> str:
    base = os.path.basename(path.strip())
    return re.sub(r"\.ko(\.(xz|gz|zst))?$", "", base).replace("-", "_")


def plan_initramfs_init(modules: Sequence[str]) -> str:
    """The initramfs's ``/init``: load ``modules`` (file names under /modules, in order), mount the host's root
    over 9p and hand over to the init script the kernel command line names (pure)."""
    b = "/bin/busybox"
    lines = [
        f"#!{b} sh",
        "# IPsec Testbed: the counted backend's initramfs (generated by testbed/qemukernel.py)",
        f"{b} mount -t proc proc /proc",
        f"{b} mount -t devtmpfs dev /dev",
        *(f"{b} insmod /modules/{os.path.basename(m)} || echo 'itb-initramfs: module {os.path.basename(m)} not "
          "loaded'" for m in modules),
        f"{b} mount -t 9p -o {MOUNT_OPTIONS} {ROOT_TAG} /root || {{",
        "  echo 'itb-initramfs: the host files (9p) could not be mounted'",
        f"  echo o > /proc/sysrq-trigger; {b} sleep 60",
        "}",
        f"init=$({b} sed -n 's/.*{INIT_PARAM}=\\([^ ]*\\).*/\\1/p' /proc/cmdline)",
        f"{b} umount /dev",
        f"{b} umount /proc",
        f'exec {b} switch_root /root "$init"',
    ]
    return "\n".join(lines) + "\n"


def initramfs(kernel: QemuKernel, path: str) -> None:
    """Write the initramfs for ``kernel`` to ``path`` (see the module docstring)."""
    if not kernel.busybox or not os.path.isfile(kernel.busybox):
        raise KernelUnavailableError(f"no static busybox for the initramfs: `sudo {FETCH_COMMAND}` fetches "
                                     f"Debian's {BUSYBOX_PACKAGE}")
    modules = modules_in_order(kernel.modules_dir, ROOT_MODULES) if kernel.modules_dir else []
    files: list[tuple[str, int, bytes]] = [("bin", stat.S_IFDIR | 0o755, b""), ("dev", stat.S_IFDIR | 0o755, b""),
                                           ("proc", stat.S_IFDIR | 0o755, b""), ("root", stat.S_IFDIR | 0o755, b""),
                                           ("modules", stat.S_IFDIR | 0o755, b"")]
    with open(kernel.busybox, "rb") as f:
        files.append(("bin/busybox", stat.S_IFREG | 0o755, f.read()))
    for module in modules:
        with open(os.path.join(kernel.modules_dir, module), "rb") as f:
            files.append((f"modules/{os.path.basename(module)}", stat.S_IFREG | 0o644, f.read()))
    files.append(("init", stat.S_IFREG | 0o755, plan_initramfs_init(modules).encode()))
    with open(path, "wb") as out:
        out.write(plan_cpio(files))


def plan_cpio(files: Sequence[tuple[str, int, bytes]]) -> bytes:
    """A cpio archive in the kernel's "newc" format of ``files`` ((name, mode, data), directories before what they
    hold), owned by root, dated 0 (pure: the same files give the same bytes)."""
    out = bytearray()

    def entry(name: str, mode: int, data: bytes, ino: int) -> None:
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name) + 1, 0)
        out.extend(b"070701" + b"".join(b"%08x" % f for f in fields) + name.encode() + b"\0")
        out.extend(b"\0" * (-len(out) % 4))
        out.extend(data)
        out.extend(b"\0" * (-len(out) % 4))

    for ino, (name, mode, data) in enumerate(files, start=1):
        entry(name, mode, data, ino)
    entry("TRAILER!!!", 0, b"", 0)
    return bytes(out)

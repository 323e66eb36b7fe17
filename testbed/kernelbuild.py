"""The recipe: a User-Mode Linux kernel built from any source the same way, cached by what goes into it.

::

    step       what                                                     fails (one line) when
    source     Debian's linux-source-X.Y (apt installs it), a tarball,  no such package here; a ref that
               or a git tree at a commit                                 is not in the tree
    fp buffer  scripts/uml-kernel/0001-x86-um-xsave-buffer-...patch:     the version has no fixed buffer
               an FPU buffer every x86-64 CPU's XSAVE area fits          to enlarge (its UML changed)
    patches    the name's +patch files, in order                          one does not apply
    config     Debian's UML configuration, the modules a guest loads     an option of the recipe does not
               built in, every other module left out, ESP offload out     survive olddefconfig in this
               (scripts/uml-kernel/testbed.config), +config on top        version
    build      make ARCH=um linux, in a tree kept per source and objects the compiler fails (the log's tail)
               kept per configuration: a nearby commit rebuilds only
               what changed
    cache      linux, config, build.json, build.log in                    (an interrupted build caches
               <cache>/kernels/<name>-<version>-um-<key>/                 nothing)

The key hashes everything that decides the kernel: the recipe's version and variant, the FPU
buffer and stack order, the source's identity (the package's version, the tarball's SHA-256, the
commit), every patch and fragment, and Debian's configuration.  Two runs on "the same" kernel name
built from different commits or patches get different keys, and meta.json names the key.

The tests' tiny kernel (``variant="tiny"``) is tinyconfig plus scripts/uml-kernel/tiny.config: no
network, a fraction of the time, for checking that a too-small FPU buffer is refused.

The counted backend's kernel (``variant="x86"``) is the same source built for x86-64 instead: x86_64's
defconfig, every module of it left out, testbed.config's network, IPsec and algorithms built in, and
scripts/uml-kernel/x86.config on top (the initramfs, virtio, 9p, the x86 crypto drivers; the drivers a QEMU
guest never has left out); ``make ARCH=x86_64 bzImage``, cached as ``bzImage`` beside its ``config`` under
``<name>-<version>-x86-<key>/``.  The same tree serves both (the FPU buffer patch touches UML's files only).
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

from testbed import kernelsource, names, xsave
from testbed.kernelsource import KernelName, KernelNameError
from testbed.rundir import atomic_write, publish_directory

#: Bumped when the recipe's steps change what they build (the key changes with it).
RECIPE_REVISION = 5
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHECKOUT = os.path.join(_HERE, "scripts", "uml-kernel")
_INSTALLED = os.path.join(sysconfig.get_path("data"), "share", "ipsec-testbed", "scripts", "uml-kernel")
#: The recipe's files: the FPU buffer patch and the configuration fragments.
RECIPE_DIR = _CHECKOUT if os.path.isdir(_CHECKOUT) else _INSTALLED
FP_PATCH = "0001-x86-um-xsave-buffer-for-every-host.patch"
FRAGMENTS = {"testbed": ("testbed.config",), "tiny": ("tiny.config",), "x86": ("testbed.config", "x86.config")}
#: The variant the counted backend boots (QEMU, x86-64); the others are User-Mode Linux kernels.
X86 = "x86"
DEBIAN_CONFIG = "/usr/share/doc/user-mode-linux/config.gz"
#: 12,288 bytes hold every XSAVE area known (AMX's is 11,008); a larger host gets its own size.
DEFAULT_FP_BYTES = 12288
#: What a from-scratch build needs on disk: a source tree and its objects (measured: about 1.4 GB
#: and 0.6 GB for 6.1), with room to spare.
BUILD_BYTES = 4 << 30
#: The build tools besides the source package.
TOOLS = ("bc", "flex", "bison", "gcc", "libc6-dev", "make", "xz-utils", "patch", "git")
#: What an x86-64 build needs besides: objtool reads ELF (libelf), the certificate tools link OpenSSL.
X86_TOOLS = ("libelf-dev", "libssl-dev")
#: build.json's origin for every kernel this module builds (umlkernel reads it).
ORIGIN = "recipe"


class BuildError(RuntimeError):
    """A step of the recipe that cannot be done: one line naming the step, the version and what to do."""


@dataclasses.dataclass(frozen=True)
class Built:
    """A kernel the recipe built: its image and what build.json says of it."""

    path: str
    info: dict

    @property
    def directory(self) -> str:
        return os.path.dirname(self.path)

    @property
    def counted(self) -> bool:
        """Whether it is the counted backend's x86-64 kernel (QEMU), not a UML kernel."""
        return self.info.get("variant") == X86


def kernels_dir() -> str:
    return os.path.join(names.cache_dir(), "kernels")


def trees_dir() -> str:
    return os.path.join(kernels_dir(), "trees")


def recipe_file(name: str) -> str:
    path = os.path.join(RECIPE_DIR, name)
    if not os.path.isfile(path):
        raise BuildError(f"the recipe's {name} is not in {RECIPE_DIR}: a broken install (pip install . again)")
    return path


def fp_bytes_for_host() -> int:
    host = xsave.host_bytes()
    if host is not None and host > DEFAULT_FP_BYTES:
        return (host + 4095) // 4096 * 4096
    return DEFAULT_FP_BYTES


def stack_order_for(fp_bytes: int) -> int:
    """The buffer lives in every thread_info, at the bottom of the kernel stack: keep at least Debian's
    16 KiB of stack above it."""
    order = 2
    while (4096 << order) < fp_bytes + 16384:
        order += 1
    return order


# -- what is built, and its key ---------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything that decides a kernel, resolved (pure data once made): the key is its digest."""

    name: KernelName
    variant: str             # testbed | tiny | x86
    fp_bytes: int            # UML's FPU buffer (0 for x86)
    stack_order: int         # UML's kernel stack order (0 for x86)
    source_kind: str         # package | tarball | git
    source_id: str           # the package's version, the tarball's SHA-256, the commit
    version: str             # the upstream version, "6.12.117" (a tree's Makefile for git)
    patches: tuple[tuple[str, str], ...]    # (path, sha256), the recipe's first
    fragments: tuple[tuple[str, str], ...]  # (path, sha256), the recipe's first
    debian_config: str       # its SHA-256 ("" for tiny)

    @property
    def key(self) -> str:
        text = json.dumps({"recipe": RECIPE_REVISION, "variant": self.variant, "fp": self.fp_bytes,
                           "stack": self.stack_order, "source": [self.source_kind, self.source_id],
                           "patches": [d for _, d in self.patches], "fragments": [d for _, d in self.fragments],
                           "debian_config": self.debian_config}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def arch(self) -> str:
        """``make``'s ARCH: x86_64 for the counted backend's kernel, um for the others."""
        return "x86_64" if self.variant == X86 else "um"

    @property
    def image(self) -> str:
        """The image's file name in the cache: UML's executable, or the x86 boot image."""
        return "bzImage" if self.variant == X86 else "linux"

    @property
    def directory(self) -> str:
        prefix = "tiny-" if self.variant == "tiny" else ""
        arch = "x86" if self.variant == X86 else "um"
        return os.path.join(kernels_dir(), f"{prefix}{self.name.slug()}-{self.version}-{arch}-{self.key}")

    def describe_source(self) -> str:
        if self.source_kind == "package":
            return f"Debian's {self.name.package} {self.source_id}"
        if self.source_kind == "tarball":
            return f"{self.name.base} (sha256 {self.source_id[:12]})"
        return f"{self.name.base}@{self.name.ref} (commit {self.source_id[:12]})"


def package_version(package: str, installed_only: bool = False) -> str | None:
    """The version of a Debian package installed (else the archive's candidate, unless ``installed_only``)."""
    out = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Status} ${Version}", package],
                         capture_output=True, text=True)
    status, _, version = out.stdout.partition(" ")
    if out.returncode == 0 and status == "installed":
        return version
    if installed_only:
        return None
    out = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True)
    m = re.search(r"Candidate:\s*(\S+)", out.stdout)
    return m.group(1) if m and m.group(1) != "(none)" else None


def plan(name: KernelName, variant: str = "testbed", fp_bytes: int | None = None) -> Plan:
    """What building ``name`` means, resolved without building; :class:`BuildError` or
    :class:`~testbed.kernelsource.KernelNameError` (one line) when it cannot be built."""
    if not name.built:
        raise BuildError(f"kernel {name.text!r} is not built by the recipe ({name.kind})")
    if variant not in FRAGMENTS:
        raise BuildError(f"no recipe variant {variant!r}: one of {', '.join(FRAGMENTS)}")
    fp_bytes = 0 if variant == X86 else fp_bytes or fp_bytes_for_host()
    if variant != X86 and (fp_bytes < 832 or fp_bytes % 8):
        raise BuildError(f"FPU buffer {fp_bytes}: a multiple of 8, at least 832 (the x86-64 signal frame's FP state)")
    if name.kind == "package":
        version = package_version(name.package)
        if version is None:
            raise KernelNameError(f"kernel {name.text!r}: Debian's archive here has no {name.package} (apt-get "
                                  "update, or name a version it has: apt-cache search linux-source)")
        source_id, upstream = version, version.split("-")[0].split("~")[0].split("+")[0]
    elif name.kind == "tarball":
        source_id = kernelsource.file_digest(name.base)
        upstream = _tarball_version(name.base)
    else:
        source_id = kernelsource.resolve_ref(name.base, name.ref or "HEAD", name.text)
        upstream = _tree_version(name.base, source_id)
    debian = ""
    if variant == "testbed":
        if not os.path.isfile(DEBIAN_CONFIG):
            raise BuildError(f"{DEBIAN_CONFIG} is missing: install user-mode-linux first (scripts/install.sh); the "
                             "recipe starts from Debian's UML configuration")
        debian = kernelsource.file_digest(DEBIAN_CONFIG)
    patches = tuple((p, kernelsource.file_digest(p)) for p in (recipe_file(FP_PATCH), *name.patches))
    recipe_fragments = [recipe_file(f) for f in FRAGMENTS[variant]]
    if variant != "tiny" and (overlay := version_overlay(upstream)):
        recipe_fragments.append(overlay)
    fragments = tuple((p, kernelsource.file_digest(p)) for p in (*recipe_fragments, *name.configs))
    return Plan(name, variant, fp_bytes, stack_order_for(fp_bytes) if fp_bytes else 0, name.kind, source_id, upstream,
                patches, fragments, debian)


def _tarball_version(path: str) -> str:
    m = re.search(r"(\d+\.\d+(\.\d+)?)", os.path.basename(path))
    return m.group(1) if m else "unknown"


def _tree_version(tree: str, sha: str) -> str:
    """VERSION.PATCHLEVEL.SUBLEVEL of the tree's Makefile at ``sha``."""
    out = subprocess.run(["git", "-C", tree, "show", f"{sha}:Makefile"], capture_output=True, text=True)
    fields = dict(re.findall(r"^(VERSION|PATCHLEVEL|SUBLEVEL) = (\d+)", out.stdout, re.M))
    if "VERSION" not in fields:
        raise KernelNameError(f"{tree} at {sha[:12]} has no kernel Makefile: not a Linux kernel tree at that commit")
    return ".".join(fields[k] for k in ("VERSION", "PATCHLEVEL", "SUBLEVEL") if k in fields)


# -- the cache ---------------------------------------------------------------------------------------

def cached(p: Plan) -> Built | None:
    """The kernel ``p`` builds, if it is in the cache (whole: its build.json is written last)."""
    return find(p.key)


def find(key: str) -> Built | None:
    """The kernel in the cache built under ``key``, if any."""
    return next((b for b in builds() if b.info.get("key") == key), None)


def builds() -> list[Built]:
    """Every kernel in the cache, newest first."""
    root = kernels_dir()
    found = []
    for d in sorted(os.listdir(root)) if os.path.isdir(root) else ():
        linux, bzimage = os.path.join(root, d, "linux"), os.path.join(root, d, "bzImage")
        # UML's executable, or the counted backend's boot image (no executable)
        image = linux if os.access(linux, os.X_OK) else bzimage if os.path.isfile(bzimage) else None
        info = os.path.join(root, d, "build.json")
        if image and os.path.isfile(info):
            with contextlib.suppress(OSError, ValueError), open(info) as f:
                found.append(Built(image, json.load(f)))
    return sorted(found, key=lambda b: b.info.get("built", ""), reverse=True)


def touch_used(image: str) -> None:
    """Note that the kernel at ``image`` was booted now (``kernel list``'s last used)."""
    with contextlib.suppress(OSError):
        marker = os.path.join(os.path.dirname(image), "last_used")
        with open(marker, "w") as f:
            f.write(datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds") + "\n")


def last_used(b: Built) -> str | None:
    with contextlib.suppress(OSError), open(os.path.join(b.directory, "last_used")) as f:
        return f.read().strip()
    return None


def size_bytes(b: Built) -> int:
    return sum(os.path.getsize(os.path.join(b.directory, f)) for f in os.listdir(b.directory)
               if os.path.isfile(os.path.join(b.directory, f)))


# -- building ----------------------------------------------------------------------------------------

Say = Callable[[str], None]


def _say_stderr(message: str) -> None:
    print(f"kernel: {message}", file=sys.stderr, flush=True)


def build(name: KernelName | str, *, variant: str = "testbed", fp_bytes: int | None = None,
          jobs: int | None = None, say: Say = _say_stderr) -> Built:
    """The kernel ``name`` names, built by the recipe (or found in the cache); see the module docstring.

    Raises :class:`BuildError` or :class:`~testbed.kernelsource.KernelNameError` with one line; an
    interrupted build (KeyboardInterrupt, SIGTERM) leaves nothing in the cache."""
    if isinstance(name, str):
        name = kernelsource.parse(name)
    p = plan(name, variant, fp_bytes)
    found = cached(p)
    if found:
        return found
    say(f"{name.text} is not built yet: building it now (once; cached afterwards)")
    _check_space()
    jobs = jobs or os.cpu_count() or 1
    _install(p)
    tree = _tree(p, say)
    started = time.monotonic()
    partial = p.directory + ".partial"
    log = p.directory + ".log"  # beside the cache while it builds; kept there when the build fails
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    try:
        objects = _configure(p, tree, say)
        say(f"building {p.describe_source()} (linux {p.version}) with {jobs} jobs; log: {log}")
        _make(tree, objects, jobs, log, say, started, p)
        shutil.move(log, os.path.join(partial, "build.log"))
        if p.variant == X86:
            shutil.copy(os.path.join(objects, "arch", "x86", "boot", "bzImage"), os.path.join(partial, p.image))
        else:
            _check_fp_buffer(objects, p)
            subprocess.run(["strip", "-o", os.path.join(partial, p.image), os.path.join(objects, "linux")],
                           check=True)
        shutil.copy(os.path.join(objects, ".config"), os.path.join(partial, "config"))
        release = subprocess.run(["make", "-s", "-C", tree, f"O={objects}", f"ARCH={p.arch}", "kernelrelease"],
                                 capture_output=True, text=True).stdout.strip()
        info = {"origin": ORIGIN, "name": name.text, "variant": p.variant, "key": p.key, "recipe": RECIPE_REVISION,
                "version": p.version, "source": p.describe_source(), "source_kind": p.source_kind,
                "source_id": p.source_id, "package_version": p.source_id if p.source_kind == "package" else None,
                "patches": [os.path.basename(x) for x in name.patches],
                "configs": [os.path.basename(x) for x in name.configs], "release": release,
                "fp_bytes": p.fp_bytes, "kernel_stack_order": p.stack_order,
                "build_s": round(time.monotonic() - started), "jobs": jobs,
                "built": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
        atomic_write(os.path.join(partial, "build.json"), json.dumps(info, indent=1, sort_keys=True) + "\n")
        publish_directory(partial, p.directory)  # last: a directory under its key holds a whole kernel
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)  # the log of a failed build stays beside the cache, never in it
        raise
    say(f"built {p.directory}/{p.image} in {info['build_s']} s")
    return Built(os.path.join(p.directory, p.image), info)


def variant_for(counted: bool) -> str:
    """The variant a kernel name is built as: the counted backend's (x86-64), or UML's."""
    return X86 if counted else "testbed"


def ensure(text: str, say: Say = _say_stderr, variant: str = "testbed") -> Built | None:
    """The kernel ``text`` names, built first when the recipe builds it and it is not in the cache; None for a
    kernel the recipe does not build (Debian's, an image).  One line on a bad name or a failed step."""
    name = kernelsource.parse(text)
    return build(name, variant=variant, say=say) if name.built else None


def _check_space() -> None:
    root = kernels_dir()
    os.makedirs(root, exist_ok=True)
    free = shutil.disk_usage(root).free
    if free < BUILD_BYTES:
        raise BuildError(f"no space for a kernel build: {free / 2**30:.1f} GiB free under {root}, a build needs about "
                         f"{BUILD_BYTES / 2**30:.0f} GiB (`ipsec-testbed kernel remove` frees built kernels; "
                         "$IPSEC_TESTBED_CACHE moves the cache)")


def _install(p: Plan) -> None:
    """The source package and the build tools, installed with apt when missing."""
    wanted = [*TOOLS, *(X86_TOOLS if p.variant == X86 else ()),
              *([p.name.package] if p.source_kind == "package" else [])]
    missing = [pkg for pkg in wanted if package_version(pkg, installed_only=True) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        raise BuildError(f"building linux {p.version} needs {' '.join(missing)}: install them (apt-get install "
                         f"{' '.join(missing)}) or run as root")
    _say_stderr(f"installing {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], env=env, check=False)
    done = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env,
                          capture_output=True, text=True)
    if done.returncode:
        raise BuildError(f"apt-get could not install {' '.join(missing)}: "
                         f"{(done.stderr.strip().splitlines() or ['?'])[-1]}")
    if p.source_kind == "package" and package_version(p.name.package, installed_only=True) != p.source_id:
        raise BuildError(f"{p.name.package} {package_version(p.name.package, installed_only=True)} was installed, not "
                         f"{p.source_id} as planned: run the command again")


# -- the kept source trees ---------------------------------------------------------------------------

def _tree(p: Plan, say: Say) -> str:
    """A source tree at ``p``'s source with ``p``'s patches applied, kept between builds."""
    if p.source_kind == "git":
        return _git_tree(p, say)
    return _unpacked_tree(p, say)


def _patch_digest(p: Plan) -> str:
    return hashlib.sha256("".join(d for _, d in p.patches).encode()).hexdigest()[:12]


def _unpacked_tree(p: Plan, say: Say) -> str:
    """A package's or tarball's tree, unpacked and patched once per source and patch set."""
    tag = f"pkg-{p.source_id}" if p.source_kind == "package" else f"tar-{p.source_id[:16]}"
    root = os.path.join(trees_dir(), re.sub(r"[^A-Za-z0-9._+-]", "_", tag) + f"-p{_patch_digest(p)}")
    src = os.path.join(root, "src")
    if os.path.isfile(os.path.join(root, "ready")):
        return src
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(src)
    tarball = (f"/usr/src/{p.name.package}.tar.xz" if p.source_kind == "package" else p.name.base)
    say(f"unpacking {os.path.basename(tarball)}")
    try:
        done = subprocess.run(["tar", "-xf", tarball, "-C", src, "--strip-components=1"], capture_output=True,
                              text=True)
        if done.returncode:
            raise BuildError(f"step source: cannot unpack {tarball}: {done.stderr.strip()[:200]}")
        if not os.path.isdir(os.path.join(src, "arch", "um")):
            raise BuildError(f"step source: {tarball} is not a Linux kernel source (no arch/um)")
        for patch, _ in p.patches:
            _apply(src, patch, p)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    with open(os.path.join(root, "ready"), "w") as f:
        f.write(p.source_id + "\n")
    return src


def _apply(src: str, patch: str, p: Plan) -> None:
    check = subprocess.run(["patch", "-p1", "--dry-run", "-s", "-f", "-d", src, "-i", patch], capture_output=True,
                           text=True)
    if check.returncode:
        raise _patch_error(patch, p, check.stdout + check.stderr)
    subprocess.run(["patch", "-p1", "-s", "-f", "-d", src, "-i", patch], check=True, capture_output=True)


def _patch_error(patch: str, p: Plan, output: str) -> BuildError:
    first = next((line for line in output.splitlines() if line.strip()), "").strip()
    if os.path.basename(patch) == FP_PATCH:
        return BuildError(f"step fp buffer: the recipe's FPU buffer patch does not apply to linux {p.version} "
                          f"({p.describe_source()}): its arch/x86/um/user-offsets.c has changed ({first[:120]}); "
                          "this version needs the recipe extended, not a kernel built without the fix")
    return BuildError(f"step patches: {patch} does not apply to linux {p.version} ({p.describe_source()}): "
                      f"{first[:160]}")


def _git_tree(p: Plan, say: Say) -> str:
    """The user's tree, cloned once (``--shared``: its objects are borrowed, nothing is written into it) and
    checked out at ``p``'s commit with the patches applied as a commit of its own: moving to a nearby
    commit rewrites only the files that differ, so the kept objects of everything else stay valid."""
    repo = os.path.realpath(p.name.base)
    root = os.path.join(trees_dir(), f"git-{hashlib.sha256(repo.encode()).hexdigest()[:12]}")
    src = os.path.join(root, "src")
    env = {**os.environ, "GIT_AUTHOR_NAME": "ipsec-testbed", "GIT_AUTHOR_EMAIL": "ipsec-testbed@localhost",
           "GIT_COMMITTER_NAME": "ipsec-testbed", "GIT_COMMITTER_EMAIL": "ipsec-testbed@localhost"}
    if not os.path.isdir(os.path.join(src, ".git")):
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
        say(f"cloning {repo} (sharing its objects) into {src}")
        subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", repo, src], check=True, env=env)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        index = {**env, "GIT_INDEX_FILE": os.path.join(tmp, "index")}
        subprocess.run(["git", "-C", src, "read-tree", p.source_id], check=True, env=index)
        for patch, _ in p.patches:
            applied = subprocess.run(["git", "-C", src, "apply", "--cached", patch], capture_output=True, text=True,
                                     env=index)
            if applied.returncode:
                raise _patch_error(patch, p, applied.stderr)
        tree = subprocess.run(["git", "-C", src, "write-tree"], check=True, capture_output=True, text=True,
                              env=index).stdout.strip()
    commit = subprocess.run(["git", "-C", src, "commit-tree", tree, "-p", p.source_id, "-m",
                             f"ipsec-testbed: the recipe's patches on {p.source_id[:12]}"],
                            check=True, capture_output=True, text=True, env=env).stdout.strip()
    subprocess.run(["git", "-C", src, "checkout", "-q", "-f", "--detach", commit], check=True, env=env)
    return src


# -- configuring and making -------------------------------------------------------------------------

_OPTION = re.compile(r"^(?:(CONFIG_[A-Za-z0-9_]+)=(.*)|# (CONFIG_[A-Za-z0-9_]+) is not set)$")


#: A line of a fragment that takes an option of the fragments before it away, for a version where it is gone:
#: ``#gone CONFIG_X: why`` (say what stands for it).
_GONE = re.compile(r"^#gone (CONFIG_[A-Za-z0-9_]+):")
#: The recipe's overlay for a version and those after it: ``testbed+6.12.config``.
_OVERLAY = re.compile(r"^testbed\+(\d+)\.(\d+)\.config$")


def version_overlay(version: str) -> str | None:
    """The recipe's fragment for ``version`` beside testbed.config: the overlay of the highest version at
    most ``version`` (none for 6.1: testbed.config is written for it).  An option the kernel renamed is
    taken away there (``#gone``) and its new name given, each with the version it was checked on."""
    m = re.match(r"^(\d+)\.(\d+)", version)
    if not m or not os.path.isdir(RECIPE_DIR):
        return None
    mine = (int(m.group(1)), int(m.group(2)))
    found = [((int(o.group(1)), int(o.group(2))), f) for f in os.listdir(RECIPE_DIR) if (o := _OVERLAY.match(f))]
    found = [(v, f) for v, f in found if v <= mine]
    return os.path.join(RECIPE_DIR, max(found)[1]) if found else None


def fragment_lines(path: str) -> list[str]:
    """The configuration lines of one fragment, and its ``#gone`` lines, in order."""
    with open(path) as f:
        return [line.strip() for line in f if _OPTION.match(line.strip()) or _GONE.match(line.strip())]


def merged_lines(paths) -> list[str]:
    """The fragments' lines laid over each other in order: for each option its last line counts, and a
    ``#gone`` line takes it away."""
    lines: dict[str, str] = {}
    for path in paths:
        for line in fragment_lines(path):
            gone = _GONE.match(line)
            if gone:
                lines.pop(gone.group(1), None)
                continue
            m = _OPTION.match(line)
            option = m.group(1) or m.group(3)
            lines.pop(option, None)
            lines[option] = line
    return list(lines.values())


def _configure(p: Plan, src: str, say: Say) -> str:
    """The object directory for ``p``'s configuration (kept: a second build with it rebuilds what changed),
    with its .config written; :class:`BuildError` when an option of the recipe did not survive."""
    conf_key = hashlib.sha256(json.dumps([p.variant, p.fp_bytes, p.stack_order, [d for _, d in p.fragments],
                                          p.debian_config]).encode()).hexdigest()[:12]
    objects = os.path.join(os.path.dirname(src), f"obj-{conf_key}")
    os.makedirs(objects, exist_ok=True)
    wanted = merged_lines(path for path, _ in p.fragments)
    if p.variant == X86:
        # made beside the kept objects, not in them: their .config is the recipe's, which make must not see change
        with tempfile.TemporaryDirectory(dir=os.path.dirname(objects)) as scratch:
            subprocess.run(["make", "-s", "-C", src, f"O={scratch}", f"ARCH={p.arch}", "defconfig"], check=True,
                           capture_output=True)
            with open(os.path.join(scratch, ".config")) as f:
                defconfig = f.read().splitlines()
        # its modules off: the recipe builds in what it needs
        base = [re.sub(r"^(CONFIG_[A-Za-z0-9_]+)=m$", r"# \1 is not set", line) for line in defconfig]
        say("configuring: x86_64's defconfig without its modules, the testbed's network and IPsec built in, "
            "x86.config for QEMU")
    elif p.variant == "tiny":
        subprocess.run(["make", "-s", "-C", src, f"O={objects}", "ARCH=um", "tinyconfig"], check=True,
                       capture_output=True)
        with open(os.path.join(objects, ".config")) as f:
            base = f.read().splitlines()
        say(f"configuring: tinyconfig and tiny.config, FP buffer {p.fp_bytes} bytes")
    else:
        with gzip.open(DEBIAN_CONFIG, "rt") as f:  # Debian's modules off: the recipe builds in what it needs
            base = [re.sub(r"^(CONFIG_[A-Za-z0-9_]+)=m$", r"# \1 is not set", line.rstrip("\n")) for line in f]
        say(f"configuring: Debian's UML configuration, the testbed's modules built in, no other module, FP buffer "
            f"{p.fp_bytes} bytes")
    stack = [f"CONFIG_KERNEL_STACK_ORDER={p.stack_order}"] if p.stack_order else []
    lines = [*base, *wanted, *stack, 'CONFIG_LOCALVERSION="-itb"', 'CONFIG_SYSTEM_TRUSTED_KEYS=""',
             'CONFIG_SYSTEM_REVOCATION_KEYS=""']
    config = os.path.join(objects, ".config")
    new = "\n".join(lines) + "\n"
    # the same configuration as the kept objects were built with: leave .config alone (its date matters to make)
    previous = os.path.join(objects, ".config.itb")
    if not _same_text(previous, new):
        with open(config, "w") as f:
            f.write(new)
        done = subprocess.run(["make", "-s", "-C", src, f"O={objects}", f"ARCH={p.arch}", "olddefconfig"],
                              capture_output=True, text=True)
        if done.returncode:
            raise BuildError(f"step config: olddefconfig failed for linux {p.version}: "
                             f"{(done.stderr.strip().splitlines() or ['?'])[-1]}")
        with open(previous, "w") as f:
            f.write(new)
    with open(config) as f:
        final = {m.group(1) or m.group(3): m.group(2) for m in map(_OPTION.match, (x.strip() for x in f)) if m}
    lost = []
    for line in wanted:
        m = _OPTION.match(line)
        option, value = m.group(1) or m.group(3), m.group(2)
        if value is None and final.get(option) not in (None,):
            lost.append(f"{option} off")
        elif value is not None and final.get(option) != value:
            lost.append(f"{option}={value}")
    if lost:
        with contextlib.suppress(OSError):
            os.remove(previous)
        raise BuildError(f"step config: linux {p.version} ({p.describe_source()}) does not take the recipe's "
                         f"{', '.join(lost[:4])}{' ...' if len(lost) > 4 else ''} (olddefconfig undid it: the option "
                         "is gone or depends on another); not building a different kernel")
    return objects


def _same_text(path: str, text: str) -> bool:
    try:
        with open(path) as f:
            return f.read() == text
    except OSError:
        return False


def _make(src: str, objects: str, jobs: int, log_path: str, say: Say, started: float, p: Plan) -> None:
    stop = threading.Event()

    def ticker() -> None:
        while not stop.wait(30):
            count = sum(1 for _ in _objects(objects))
            say(f"... {time.monotonic() - started:.0f} s, {count} objects")

    thread = threading.Thread(target=ticker, daemon=True)
    thread.start()
    try:
        with open(log_path, "w") as log:
            # a session of its own: an interrupted build ends make and every compiler it started, not make alone
            # the FPU buffer's size reaches arch/x86/um/user-offsets.c as the patch's UML_HOST_FP_BYTES
            target = ["bzImage"] if p.variant == X86 else [f"KCFLAGS=-DUML_HOST_FP_BYTES={p.fp_bytes}", "linux"]
            proc = subprocess.Popen(["make", "-C", src, f"O={objects}", f"ARCH={p.arch}", f"-j{jobs}", *target],
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            try:
                returncode = proc.wait()
            except BaseException:
                _end_group(proc)
                raise
    finally:
        stop.set()
        thread.join()
    if returncode:
        with open(log_path, errors="replace") as f:
            tail = [line.rstrip() for line in f.readlines()[-200:]]
        error = next((line for line in reversed(tail) if re.search("error", line, re.I)), tail[-1] if tail else "?")
        raise BuildError(f"step build: make failed ({error.strip()[:160]}); the log: {log_path}")


def _check_fp_buffer(objects: str, p: Plan) -> None:
    """The built kernel hands the host the FPU buffer the plan asked for (``HOST_FP_SIZE``, in longs, in the
    constants the build generated): a kernel with another buffer is a different kernel, never cached."""
    path = os.path.join(objects, "include", "generated", "user_constants.h")
    try:
        with open(path) as f:
            m = re.search(r"#define HOST_FP_SIZE (\d+)", f.read())
    except OSError:
        m = None
    built = int(m.group(1)) * 8 if m else None
    if built != p.fp_bytes:
        raise BuildError(f"step fp buffer: linux {p.version} ({p.describe_source()}) was built with an FPU buffer of "
                         f"{built if built is not None else 'unknown'} bytes, not {p.fp_bytes}: the recipe's patch did "
                         "not reach arch/x86/um/user-offsets.c; not caching a different kernel")


def _end_group(proc: subprocess.Popen) -> None:
    """End ``proc``'s process group (make and its compilers): SIGTERM, then SIGKILL after a few seconds."""
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _objects(root: str) -> Iterator[str]:
    for _dirpath, _dirs, files in os.walk(root):
        for f in files:
            if f.endswith(".o"):
                yield f


# -- what the configuration changed ------------------------------------------------------------------

def config_of(path: str) -> dict[str, str]:
    """A kernel configuration as option -> value ("n" for ``is not set``); gzip or plain."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        out = {}
        for line in f:
            m = _OPTION.match(line.strip())
            if m:
                out[m.group(1) or m.group(3)] = m.group(2) if m.group(1) else "n"
        return out


def config_differences(config: str, against: str | None = None) -> list[tuple[str, str, str]]:
    """(option, against's value, config's value) where they differ ("-": absent), sorted by option;
    ``against`` Debian's UML configuration by default."""
    a, b = config_of(against or DEBIAN_CONFIG), config_of(config)
    return [(k, a.get(k, "-"), b.get(k, "-")) for k in sorted(set(a) | set(b))
            if a.get(k, "n") != b.get(k, "n")]

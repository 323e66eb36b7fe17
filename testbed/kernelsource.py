"""Kernels as named inputs: what ``--uml-kernel``, ``regress --ab A B`` and ``$IPSEC_TESTBED_UML_KERNEL`` take.

::

    debian                   Debian's linux.uml, as installed (no build)
    recipe                   the project's kernel: Debian's linux-source-6.1 built by the recipe (= 6.1)
    6.1, 6.12                Debian's linux-source-6.1, linux-source-6.12 (installed with apt when missing),
                             built by the recipe
    PATH.tar.xz              a kernel source tarball (.tar, .tar.gz, .tar.xz, .tar.bz2), built by the recipe
    PATH@REF                 a git work tree at a tag, branch or commit (PATH alone: its HEAD), built by the recipe
    PATH                     a UML kernel image already built (``make ARCH=um``'s ./linux): booted as it is

    ... +patch:FILE          a patch on top (``patch -p1``), as many as wanted, in order
    ... +config:FRAGMENT     configuration lines on top of the recipe's (``CONFIG_X=y``, ``# CONFIG_X is not set``)

Every kernel the recipe builds is cached under a key over everything that goes into it
(:mod:`testbed.kernelbuild`); this module only reads names and finds what they point at, so that a
bad name is refused in one line before any long work starts.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import subprocess

#: Names of kernels that exist without a build, and the project's default build.
DEBIAN = "debian"
RECIPE = "recipe"
#: The Debian source package the recipe builds by default (``recipe``).
RECIPE_VERSION = "6.1"
#: A Debian source package's version as a name: ``6.1``, ``6.12``.
PACKAGE = re.compile(r"^[0-9]+\.[0-9]+$")
TARBALL = re.compile(r"\.tar(\.(gz|xz|bz2|zst))?$|\.tgz$")
#: What ``+KIND:FILE`` suffixes there are.
SUFFIXES = ("patch", "config")


class KernelNameError(ValueError):
    """A kernel name that names nothing usable: one line naming the input and what to do."""


@dataclasses.dataclass(frozen=True)
class KernelName:
    """A kernel as a person names it, parsed (see the module docstring).

    ``base``: ``debian``, a package version (``recipe`` is :data:`RECIPE_VERSION`), or an absolute
    path; ``ref``: a git ref for a tree (None: HEAD); ``patches`` and ``configs``: absolute paths, in order.
    """

    text: str
    base: str
    kind: str  # debian | package | tarball | git | image
    ref: str | None = None
    patches: tuple[str, ...] = ()
    configs: tuple[str, ...] = ()

    @property
    def built(self) -> bool:
        """Whether the recipe builds it (every kind but Debian's kernel and a ready image)."""
        return self.kind in ("package", "tarball", "git")

    @property
    def package(self) -> str:
        """The Debian package of a ``package`` kind: ``linux-source-6.12``."""
        return f"linux-source-{self.base}"

    @property
    def canonical(self) -> str:
        """The name with every path absolute: the same kernel from any directory (a job's other process)."""
        if self.kind in ("debian", "image"):
            return self.base
        head = RECIPE if self.text.split("+")[0] == RECIPE else self.base
        if self.kind == "git" and self.ref:
            head += f"@{self.ref}"
        return head + "".join(f"+patch:{p}" for p in self.patches) + "".join(f"+config:{c}" for c in self.configs)

    def with_ref(self, ref: str) -> KernelName:
        """The same tree, patches and configuration at another ``ref`` (a bisect's step)."""
        if self.kind != "git":
            raise KernelNameError(f"{self.text}: only a git work tree has refs")
        suffix = "".join(f"+patch:{p}" for p in self.patches) + "".join(f"+config:{c}" for c in self.configs)
        return dataclasses.replace(self, ref=ref, text=f"{self.base}@{ref}{suffix}")

    def slug(self) -> str:
        """A short name for directories: ``6.12``, ``recipe``, ``linux-v6.8``, ``net-next``."""
        if self.kind == "package":
            head = self.base
        else:
            head = os.path.basename(self.base.rstrip("/")) or "tree"
            head = TARBALL.sub("", head)
        head = re.sub(r"[^A-Za-z0-9._-]+", "-", head)[:40]
        extra = "+".join(os.path.basename(p).split(".")[0] for p in (*self.patches, *self.configs))
        return head + (f"+{re.sub(r'[^A-Za-z0-9._-]+', '-', extra)[:40]}" if extra else "")


def parse(text: str, cwd: str | None = None) -> KernelName:
    """``text`` as a :class:`KernelName`; :class:`KernelNameError` (one line) when it names nothing usable.

    Checks what can be checked at once: files exist, a tree is a kernel tree with git, a ref exists,
    a version has a Debian package in this machine's archive.  Whether a patch applies is the build's
    first step (:mod:`testbed.kernelbuild`), before it compiles anything."""
    cwd = cwd or os.getcwd()
    if not text or not text.strip():
        raise KernelNameError("an empty kernel name: give debian, recipe, a version (6.1, 6.12), a tarball, "
                              "PATH@REF of a git tree, or a UML kernel image")
    head, *suffixes = text.split("+")
    patches: list[str] = []
    configs: list[str] = []
    for suffix in suffixes:
        kind, _, path = suffix.partition(":")
        if kind not in SUFFIXES or not path:
            raise KernelNameError(f"kernel {text!r}: {'+' + suffix!r} is not +patch:FILE or +config:FRAGMENT")
        path = os.path.abspath(os.path.join(cwd, os.path.expanduser(path)))
        if not os.path.isfile(path):
            raise KernelNameError(f"kernel {text!r}: {kind} file {path} does not exist")
        (patches if kind == "patch" else configs).append(path)
    if configs:
        for path in configs:
            _check_fragment(text, path)
    if head in (DEBIAN,):
        if patches or configs:
            raise KernelNameError(f"kernel {text!r}: Debian's linux.uml is a built kernel; a patch or a configuration "
                                  f"goes with a source: use {RECIPE_VERSION}+... (the recipe's build of Debian's "
                                  f"linux-source-{RECIPE_VERSION})")
        return KernelName(text, DEBIAN, "debian")
    if head == RECIPE:
        head = RECIPE_VERSION
    if PACKAGE.match(head):
        return KernelName(text, head, "package", patches=tuple(patches), configs=tuple(configs))
    path, at, ref = head.partition("@")
    path = os.path.abspath(os.path.join(cwd, os.path.expanduser(path)))
    if not os.path.exists(path):
        raise KernelNameError(f"kernel {text!r}: {path} does not exist (a name is debian, recipe, a version such as "
                              "6.12, a source tarball, PATH@REF of a git tree, or a UML kernel image)")
    if os.path.isdir(path):
        if not (os.path.isfile(os.path.join(path, "Makefile")) and os.path.isdir(os.path.join(path, "arch", "um"))):
            raise KernelNameError(f"kernel {text!r}: {path} is not a Linux kernel tree (no Makefile and arch/um)")
        if _git(path, "rev-parse", "--is-inside-work-tree") != "true":
            raise KernelNameError(f"kernel {text!r}: {path} is a kernel tree without git: give a tarball of it, or "
                                  "`git init` it and name a commit")
        ref = ref or "HEAD"
        resolve_ref(path, ref, text)
        return KernelName(text, path, "git", ref=ref, patches=tuple(patches), configs=tuple(configs))
    if at:
        raise KernelNameError(f"kernel {text!r}: @REF goes with a git work tree, and {path} is a file")
    if TARBALL.search(path):
        return KernelName(text, path, "tarball", patches=tuple(patches), configs=tuple(configs))
    if os.access(path, os.X_OK) or x86_image(path):
        if patches or configs:
            raise KernelNameError(f"kernel {text!r}: {path} is a built kernel image; a patch or a configuration goes "
                                  "with its source (a tarball or PATH@REF)")
        return KernelName(text, path, "image")
    raise KernelNameError(f"kernel {text!r}: {path} is neither an executable UML kernel image, an x86 bzImage (the "
                          "counted backend's), a source tarball (.tar, .tar.gz, .tar.xz, .tar.bz2) nor a git tree")


def x86_image(path: str) -> bool:
    """Whether ``path`` is an x86 kernel image (Linux's boot protocol header: "HdrS" at 0x202), which the counted
    backend boots."""
    try:
        with open(path, "rb") as f:
            f.seek(0x202)
            return f.read(4) == b"HdrS"
    except OSError:
        return False


def _check_fragment(text: str, path: str) -> None:
    """A configuration fragment holds only ``CONFIG_X=...`` and ``# CONFIG_X is not set`` lines (and comments)."""
    with open(path, errors="replace") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or re.match(r"^(CONFIG_[A-Za-z0-9_]+=.*|# CONFIG_[A-Za-z0-9_]+ is not set)$", line) \
                    or line.startswith("#"):
                continue
            raise KernelNameError(f"kernel {text!r}: {path}:{n} is not a configuration line "
                                  f"(CONFIG_X=y or # CONFIG_X is not set): {line[:60]!r}")


def _git(tree: str, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", tree, *args], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _commit(tree: str, ref: str) -> str | None:
    """The commit ``ref`` names in the git tree ``tree``, or None."""
    return _git(tree, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")


def commit_and_place(tree: str, ref: str) -> tuple[str, int]:
    """The commit ``ref`` names in ``tree`` and its number of ancestors (its place in a linear history); ("", -1)
    when it names none, and -1 for the place in a shallow clone (which counts only what it fetched)."""
    sha = _commit(tree, ref)
    if not sha:
        return "", -1
    if _git(tree, "rev-parse", "--is-shallow-repository") == "true":
        return sha, -1
    count = _git(tree, "rev-list", "--count", sha)
    return sha, int(count) if count and count.isdigit() else -1


def resolve_ref(tree: str, ref: str, text: str | None = None) -> str:
    """The commit ``ref`` names in the git tree ``tree``; :class:`KernelNameError` when it names none."""
    sha = _commit(tree, ref)
    if not sha:
        raise KernelNameError(f"kernel {text or f'{tree}@{ref}'!r}: {ref!r} is not a tag, branch or commit of {tree}")
    return sha


def file_digest(path: str) -> str:
    """SHA-256 of a file's bytes (a tarball's identity, a patch's, a fragment's)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()

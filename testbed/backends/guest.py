"""What every backend that boots a guest kernel shares: the guest's environment and init script, and the host
processes around it (its output pumped, its lifeline, its end).

A guest backend (:mod:`testbed.backends.uml`, :mod:`testbed.backends.qemu`) boots a kernel whose root is the
host's own files, with an init script (PID 1) written into a work directory on the host::

    mounts      proc, sys, a tmpfs on /run (the guest's own netns and pid files), /dev/shm, devpts, cgroup
    modules     the kernel's modules by modprobe -d (the host has no /lib/modules for the guest's release)
    command     the job, its stdout and stderr on the guest's lines to the host, then its exit status
                into <workdir>/status, a sync, and power off

:func:`plan_base_lines`, :func:`plan_module_lines` and :func:`plan_command_lines` are those three parts (pure);
each backend adds what is its own (its consoles, its mounts).  On the host: :func:`pump` copies a guest's line
to a file as it arrives, :func:`watch` kills a guest's process group when the process that booted it dies however
it dies, :func:`kill` ends it.
"""
from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import termios
import threading
import tty
from collections.abc import Callable, Mapping, Sequence
from typing import BinaryIO

from testbed.backends.base import GUEST_ENV, BackendError

#: Environment variables not handed to the guest: they describe the host session.
_ENV_SKIP = re.compile(r"^(SSH_|DISPLAY$|XAUTHORITY$|DBUS_|XDG_RUNTIME_DIR$|SUDO_|TMUX|WAYLAND_|OLDPWD$|PWD$"
                       r"|SHLVL$|_$)")
#: Open files a guest's command may raise its limit to (its init raises the hard limit; the soft stays 1024).
NOFILE = 65536
#: Where the guest's init links the module directory for ``modprobe -d``.
MODULE_TREE = "/run/itb-modules"
#: A guest's memory, as ``--uml-mem`` takes it.
MEM_PATTERN = re.compile(r"^[1-9][0-9]*[KMG]$")


def check_spec(command: Sequence[str], mem: str, timeout_s: float | None, cwd: str) -> None:
    """What every guest's spec must be: a command, a memory size, a positive time limit, an absolute directory;
    ValueError naming the field otherwise."""
    if not command:
        raise ValueError("command: give the command to run in the guest, e.g. `uml -- ipsec-testbed doctor`")
    if not MEM_PATTERN.match(mem):
        raise ValueError(f"mem: {mem!r} is not a size like 512M or 2G")
    if timeout_s is not None and timeout_s <= 0:
        raise ValueError(f"timeout_s: must be positive, not {timeout_s}")
    if not os.path.isabs(cwd):
        raise ValueError(f"cwd: must be an absolute path, not {cwd!r}")


class HostLine:
    """Inside a guest: its line to the host's CPU meter (a console or serial port at ``path``), on which one
    question (a line) gets one line of integers back.  Thread-safe."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        self._lock = threading.Lock()
        self._buffer = b""

    def ask(self, first: Callable[[], None] | None = None) -> tuple[int, ...]:
        """The host's answer; ``first`` runs just before the question, under the line's lock."""
        with self._lock:
            if first is not None:
                first()
            os.write(self._fd, b"?\n")
            while b"\n" not in self._buffer:
                chunk = os.read(self._fd, 256)
                if not chunk:
                    raise BackendError("the host's CPU meter closed its line")
                self._buffer += chunk
            line, self._buffer = self._buffer.split(b"\n", 1)
        return tuple(int(field) for field in line.split())

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def guest_env(host_env: Mapping[str, str], backend: str) -> tuple[tuple[str, str], ...]:
    """The host environment as the guest command gets it, plus :data:`~testbed.backends.base.GUEST_ENV` naming
    ``backend``."""
    env = {k: v for k, v in host_env.items()
           if re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k) and not _ENV_SKIP.match(k)}
    env[GUEST_ENV] = backend
    path = env.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    # The testbed's own commands (.venv/bin) first, even when sudo reset PATH.
    venv_bin = os.path.dirname(os.path.abspath(sys.executable))
    if venv_bin not in path.split(":"):
        path = f"{venv_bin}:{path}"
    env["PATH"] = path
    env.setdefault("HOME", "/root")
    # Mininet imports distutils.version.  Where the standard library still has distutils
    # (Python 3.11), the guest takes it rather than setuptools' stand-in, which imports
    # all of setuptools first: a second of every Python start inside the guest.
    if os.path.exists(os.path.join(sysconfig.get_paths()["stdlib"], "distutils", "version.py")):
        env.setdefault("SETUPTOOLS_USE_DISTUTILS", "stdlib")
    if sys.stdout.isatty():
        # The guest's console has no size; programs that lay out for a terminal need one.
        size = shutil.get_terminal_size()
        env.setdefault("COLUMNS", str(size.columns))
        env.setdefault("LINES", str(size.lines))
    return tuple(sorted(env.items()))


# -- the init script's parts (pure) ----------------------------------------------------------------

def plan_base_lines(what: str, hostname: str) -> list[str]:
    """The init script's start: its shebang and the guest's own mounts (``what``: the guest, for its comment)."""
    return [
        "#!/bin/sh",
        f"# IPsec Testbed: init for one {what} guest (generated; see testbed/backends/)",
        "mount -t proc proc /proc",
        "mount -t sysfs sysfs /sys",
        # A tmpfs on /run hides the host's /run/netns and pid files: the guest keeps its own.
        "mount -t tmpfs -o mode=755 tmpfs /run",
        "mkdir -p /run/netns /run/ipsec-testbed",
        # /dev is the guest's own devtmpfs (mounted by its kernel), which lacks these.
        "mkdir -p /dev/shm /dev/pts",
        "mount -t tmpfs tmpfs /dev/shm",
        "mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts",
        "mount --bind /dev/pts/ptmx /dev/ptmx 2>/dev/null",
        "mount -t tmpfs tmpfs /sys/fs/cgroup 2>/dev/null",
        f"hostname {hostname}",
        "ip link set lo up",
        # 200 road warriors hold a few thousand descriptors (their shells, iperf3's pipes, a
        # sock_diag socket per namespace): the hard limit allows it, and a sweep of many clients
        # raises its own soft limit (testbed.netns.ensure_open_files).  Not the soft limit for
        # everything: mnexec closes every descriptor up to it when it starts a node, 65,536 slow
        # system calls in UML for each node of every network.
        f"ulimit -Hn {NOFILE}",
    ]


def plan_module_lines(modules_dir: str | None, boot_modules: Sequence[str], workdir: str,
                      on_demand: bool) -> list[str]:
    """The lines that load ``boot_modules`` from ``modules_dir`` (none for a kernel with everything built in) and
    keep the kernel's on-demand loads (through the wrapper in ``workdir``) only when ``on_demand``."""
    if not modules_dir:
        return []
    q = shlex.quote
    modules = " ".join(boot_modules)
    # the kernel's names, as /sys/module has them (ghash-generic is ghash_generic)
    names = " ".join(m.replace("-", "_") for m in boot_modules)
    lines = [
        f"mkdir -p {MODULE_TREE}/lib/modules",
        f'ln -s {q(modules_dir)} "{MODULE_TREE}/lib/modules/$(uname -r)"',
        f"echo {q(workdir + '/modprobe')} > /proc/sys/kernel/modprobe",
        # Boot modules are best effort: a module built into a custom kernel is not an error, and `doctor` reports
        # what is really usable.  One process loads them all (each process start is slow in a guest, 0.35 s of
        # instructions for a modprobe in QEMU); only those that are not loaded then are tried one by one, to say
        # which is missing.  (Trying all again whenever one failed, as jitterentropy_rng does in every counted
        # guest, where it finds no jitter in a clock that counts instructions, took 60 modprobes and 4 s a boot.)
        f"/sbin/modprobe -q -a -d {MODULE_TREE} {modules} 2>/dev/null",
        "missing=",
        f'for m in {names}; do [ -d "/sys/module/$m" ] || missing="$missing $m"; done',
        "for m in $missing; do",
        f"  /sbin/modprobe -d {MODULE_TREE} $m 2>/dev/null || echo \"itb-init: module $m not loaded\" >/dev/console",
        "done",
    ]
    if not on_demand:
        # Everything the testbed uses is loaded now.  Without a helper the kernel builds the
        # crypto instances it looks up (rfc4106(gcm(aes)), authenc(hmac(sha1),cbc(aes)), ...)
        # from the loaded templates at once, instead of first starting the wrapper twice per
        # name (14 processes and 1.2 s for the first AES-GCM SA in UML).
        lines.append("echo > /proc/sys/kernel/modprobe")
    return lines


def plan_modprobe_wrapper(modules_dir: str | None) -> str:
    """The script the guest kernel calls for on-demand module loads."""
    if not modules_dir:
        return "#!/bin/sh\nexit 1\n"
    return f'#!/bin/sh\nexec /sbin/modprobe -d {MODULE_TREE} "$@"\n'


def plan_command_lines(command: Sequence[str], cwd: str, workdir: str, outputs: Sequence[tuple[str, bool]],
                       terminal: str | None = None) -> list[str]:
    """The lines that run ``command`` in ``cwd`` and hand its exit status to the host through ``workdir``.

    ``outputs``: (the guest's line for stdout, whether the host's stdout is a terminal), the same for stderr;
    where the host's is not a terminal the command writes through a pipe (no colours or progress redraws in a CI
    log).  ``terminal``: the guest's line that is the host's terminal, for an interactive command (its
    controlling terminal, stdin and both outputs)."""
    q = shlex.quote
    lines = [
        f"cd {q(cwd)} || {{ echo 126 > {q(workdir + '/status')}; echo o > /proc/sysrq-trigger; }}",
        f"echo started > {q(workdir + '/started')}",
    ]
    if terminal:  # the host's terminal as the controlling terminal of a new session
        run = f"setsid -w -c {shlex.join(command)} <{terminal} >{terminal} 2>&1"
    else:
        redirect = []
        for fd, (line, is_tty) in enumerate(outputs, start=1):
            if is_tty:
                redirect.append(f"{fd}>{line}")
            else:
                lines += [f"mkfifo /run/itb-fd{fd}", f"cat /run/itb-fd{fd} >{line} &"]
                redirect.append(f"{fd}>/run/itb-fd{fd}")
        run = f"{shlex.join(command)} </dev/null {' '.join(redirect)}"
    return lines + [
        run,
        "rc=$?",
        "wait",  # the pipes' readers: all output is out before the status is
        f"echo $rc > {q(workdir + '/status.tmp')}",
        f"mv {q(workdir + '/status.tmp')} {q(workdir + '/status')}",
        "sync",
        "echo o > /proc/sysrq-trigger",
        "sleep 60",
    ]


def write_guest_files(workdir: str, init_script: str, modules_dir: str | None, env: Sequence[tuple[str, str]]) -> None:
    """The guest's init script, its modprobe wrapper and its links to the commands on ``env``'s PATH
    (:func:`link_commands`), in ``workdir``."""
    for name, text in (("init.sh", init_script), ("modprobe", plan_modprobe_wrapper(modules_dir))):
        with open(f"{workdir}/{name}", "w") as f:
            f.write(text)
        os.chmod(f"{workdir}/{name}", 0o755)
    link_commands(dict(env).get("PATH", ""), os.path.join(workdir, COMMANDS))


#: The directory of a guest's work directory that links to its commands; first on the guest's PATH.
COMMANDS = "commands"


def plan_env_lines(env: Sequence[tuple[str, str]], workdir: str) -> list[str]:
    """The command's environment, its PATH behind the links to its commands (:func:`link_commands`)."""
    q = shlex.quote
    return [f"export {k}={q(v)}" for k, v in env] + [f'export PATH={q(os.path.join(workdir, COMMANDS))}:"$PATH"']


def link_commands(path: str, into: str) -> int:
    """Link, in the new directory ``into``, each command that ``path`` (a PATH) finds to where it finds it first;
    how many commands there are.

    The guest's PATH starts with ``into``, so that each command is found at its first try.  In User-Mode Linux
    every directory of PATH where a command is not costs the program that starts it an execve that fails:
    6.5 ms each from a Python of the test suite's size, and with the 13 directories before /usr/bin of this
    project's machine, ``subprocess.run(["true"])`` took 152 ms inside UML against 27 ms for /usr/bin/true.
    What the links leave alone, PATH still finds as before, after them: the commands of a Python venv's bin
    (its python finds its venv from the directory it is run from), and everything after a relative entry of
    PATH, which may name another directory wherever the command runs."""
    os.makedirs(into)
    seen: set[str] = set()
    for where in path.split(":"):
        if not os.path.isabs(where):
            break
        try:
            names = sorted(os.listdir(where))
        except OSError:
            continue
        venv = os.path.exists(os.path.join(where, os.pardir, "pyvenv.cfg"))
        for name in names:
            command = os.path.join(where, name)
            if name in seen or not (os.path.isfile(command) and os.access(command, os.X_OK)):
                continue
            seen.add(name)
            if not venv:
                os.symlink(command, os.path.join(into, name))
    return len(seen)


def read_status(workdir: str) -> int | None:
    """The exit status the guest's command left in ``workdir``; None when it left none (the guest died)."""
    status_file = f"{workdir}/status"
    if not os.path.exists(status_file):
        return None
    with open(status_file) as f:
        return int(f.read().strip() or 1)


# -- the host's side ----------------------------------------------------------------------------------

#: How much of a guest's console :func:`pump` keeps: a panic's message, its stack and the lines before it.
KEPT_BYTES = 64 * 1024


def keep_tail(keep: list, chunk: bytes, limit: int = KEPT_BYTES) -> None:
    """Add ``chunk`` to the tail ``keep`` holds (one buffer of at most ``limit`` bytes, the newest).  A serial
    console arrives a few bytes at a time: a count of chunks would keep a line's end and nothing before it."""
    if not keep:
        keep.append(bytearray())
    buf = keep[0]
    buf += chunk
    if len(buf) > limit:
        del buf[:len(buf) - limit]


def pump(src: int, dst: BinaryIO | None, keep: list[bytes] | None = None) -> None:
    """Copy a pipe or socket to ``dst`` as it arrives (and keep the last :data:`KEPT_BYTES` when asked)."""
    with os.fdopen(src, "rb", buffering=0) as f:
        while True:
            try:
                chunk = f.read(65536)
            except ConnectionResetError:
                return
            if not chunk:
                return
            if keep is not None:
                keep_tail(keep, chunk)
            if dst is not None:
                try:
                    dst.write(chunk)
                    dst.flush()
                except BrokenPipeError:
                    dst = None  # the reader went away (`| head`); keep draining the guest


@contextlib.contextmanager
def raw_terminal(error: type[BackendError] = BackendError):
    """Standard input's terminal in raw mode (keystrokes go to the guest's line as typed, Ctrl-C included),
    restored after; ``error`` when standard input is no terminal."""
    if not os.isatty(0):
        raise error("an interactive guest needs a terminal on standard input")
    saved = termios.tcgetattr(0)
    tty.setraw(0)
    try:
        yield
    finally:
        with contextlib.suppress(termios.error, OSError):  # the terminal may be gone (SIGHUP)
            termios.tcsetattr(0, termios.TCSADRAIN, saved)


def kill_if_running(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        kill(proc)


def stop_watcher(watcher: subprocess.Popen, lifeline: int) -> None:
    watcher.kill()
    watcher.wait()
    os.close(lifeline)


def close_all(fds) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def watch(pgid: int) -> tuple[subprocess.Popen, int]:
    """A watcher that kills the guest's process group when this process dies, however it dies.

    ``setpriv --pdeathsig`` reaches only the guest's main process; a UML kernel's helpers and
    the guest's user processes (ptraced by it) are re-parented and can run on.  The
    watcher blocks reading a pipe whose write end only this process holds (returned, to
    be closed after the guest is gone): SIGKILL, a closed terminal or a crash close it,
    and the watcher kills the whole group.
    """
    r, w = os.pipe()  # not inherited by other children (O_CLOEXEC)
    try:
        watcher = subprocess.Popen(
            [sys.executable, "-S", "-c", f"import os, sys\nsys.stdin.buffer.read()\n"
                                          f"try: os.killpg({pgid}, 9)\nexcept OSError: pass\n"],
            stdin=r, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    finally:
        os.close(r)
    return watcher, w


def kill(proc: subprocess.Popen) -> None:
    """Kill the whole guest: its process group (linux.uml forks helper processes into its session)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()

"""Run a command inside User-Mode Linux: a real IPsec kernel when the host has none.

Debian's ``user-mode-linux`` package ships a Linux kernel that runs as an ordinary
process (``linux.uml``, no KVM needed) with ESP, AH, IPComp, the xfrm tunnels, veth
and the tc qdiscs as modules.  :func:`run` boots it with the host's filesystem as
its root (hostfs, read-write), so the guest sees this repository, its ``.venv``,
iperf3, iproute2 and mnexec exactly where the host has them, and runs one command
as root inside it::

    host                                   guest (linux.uml, 1 CPU)
    ----                                   -----
    run(spec) --- writes init.sh --------> /<workdir>/init.sh is PID 1:
                                             mount proc, sys, tmpfs /run, devpts
                                             modprobe -d <tmpfs> esp4 esp6 ...
                                             cd <cwd>; COMMAND >tty1 2>tty2
              <-- tty1 (pipe) ------------ command's stdout, streamed live
              <-- tty2 (pipe) ------------ command's stderr, streamed live
              <-- con0 (pipe) ------------ kernel console (shown only on failure)
              <-- <workdir>/status ------- exit status, then sysrq power-off

The guest cannot return an exit status itself, so it writes it to a file on hostfs
before powering off; no status file means the guest failed to boot or died.

Kernel quirks handled here (see the project's kernel notes):
- the guest's ``modprobe`` looks in ``/lib/modules/<release>``, which the host does
  not have; a tmpfs directory with ``lib/modules -> <module dir>`` and
  ``modprobe -d`` fixes it, and a wrapper in ``/proc/sys/kernel/modprobe`` makes the
  kernel's own on-demand loads (``rfc4106(gcm(aes))`` and other crypto templates)
  use it too;
- the tty line discipline turns ``\\n`` into ``\\r\\n``; ``stty -onlcr`` undoes it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import termios
import threading
import time
import tty
from typing import BinaryIO, Mapping, Optional, Sequence

from testbed import names

log = logging.getLogger(__name__)

#: Environment variable set inside the guest; code that picks a kernel reads it so
#: that a command re-run inside UML never tries to boot UML again.
IN_UML_ENV = "IPSEC_TESTBED_IN_UML"

DEFAULT_KERNEL = "linux.uml"
DEFAULT_MODULES_ROOT = "/usr/lib/uml/modules"

#: Modules loaded at boot, with one modprobe process.  The crypto modules behind the
#: testbed's algorithms are among them: left to the kernel's on-demand loading, every
#: name it looks up for a transform (``rfc4106(gcm(aes))``, ``gcm(aes)``, ``ctr(aes)``,
#: ``ghash``...) starts the modprobe wrapper, a few seconds in all for the first SA.
#: After they are loaded the guest's on-demand loading is switched off (unless
#: ``UmlSpec.on_demand_modules``): a module the testbed needs must be in this list.
BOOT_MODULES: tuple[str, ...] = (
    "ipv6", "veth", "bridge", "dummy", "ifb",
    "sch_tbf", "sch_htb", "sch_netem", "sch_ingress", "cls_u32", "act_mirred",
    "xfrm_user", "xfrm_algo", "xfrm_ipcomp", "esp4", "esp6", "ah4", "ah6", "ipcomp", "ipcomp6",
    "tunnel4", "tunnel6", "xfrm4_tunnel", "xfrm6_tunnel",
    "gcm", "ghash-generic", "ctr", "seqiv", "echainiv", "authenc", "authencesn", "cbc", "hmac",
    "des_generic", "sha512_generic", "deflate", "drbg", "jitterentropy_rng", "ansi_cprng",
)

#: Environment variables not handed to the guest: they describe the host session.
_ENV_SKIP = re.compile(r"^(SSH_|DISPLAY$|XAUTHORITY$|DBUS_|XDG_RUNTIME_DIR$|SUDO_|TMUX|WAYLAND_|OLDPWD$|PWD$|SHLVL$|_$)")
MEM_PATTERN = re.compile(r"^[1-9][0-9]*[KMG]$")


class UmlError(RuntimeError):
    """User-Mode Linux could not be found, booted, or did not report the command's status."""


@dataclasses.dataclass(frozen=True)
class UmlSpec:
    """What to run in the guest and with which kernel.

    ``modules_dir`` is either a release directory (holding ``modules.dep``, e.g.
    ``/usr/lib/uml/modules/6.1.176``) or ``None`` for a kernel with everything
    built in (a developer's ``make ARCH=um`` kernel).
    """

    command: tuple[str, ...]
    kernel: str
    modules_dir: Optional[str]
    cwd: str
    mem: str = "2G"
    timeout_s: Optional[float] = None
    env: tuple[tuple[str, str], ...] = ()
    boot_modules: tuple[str, ...] = BOOT_MODULES
    #: keep the kernel's on-demand module loading (through the wrapper) after boot; off, the
    #: boot modules are all there is (see BOOT_MODULES)
    on_demand_modules: bool = False
    #: Whether the host's stdout/stderr are terminals.  The guest's are consoles (ttys);
    #: where the host's are not, the guest command writes through a pipe instead, so
    #: it behaves as it would on the host (no colours or progress redraws in a CI log).
    stdout_tty: bool = False
    stderr_tty: bool = False
    #: The command gets the host's terminal: the guest's tty1 reads the host's standard
    #: input and writes its standard output, and is the command's controlling terminal
    #: (line editing, Ctrl-C), while the host terminal is in raw mode.  For shells and
    #: the demo's Mininet CLI.
    interactive: bool = False

    def __post_init__(self) -> None:
        if not self.command:
            raise ValueError("command: give the command to run inside UML, e.g. `uml -- ipsec-testbed doctor`")
        if not MEM_PATTERN.match(self.mem):
            raise ValueError(f"mem: {self.mem!r} is not a size like 512M or 2G")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ValueError(f"timeout_s: must be positive, not {self.timeout_s}")
        if not os.path.isabs(self.cwd):
            raise ValueError(f"cwd: must be an absolute path, not {self.cwd!r}")


def find_kernel(path: Optional[str] = None) -> str:
    """The UML kernel to boot: ``path`` if given, else ``linux.uml`` on PATH.

    Raises :class:`UmlError` with the fix in one line when there is none.
    """
    if path:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise UmlError(f"UML kernel {path!r} is not an executable file")
        return os.path.abspath(path)
    found = shutil.which(DEFAULT_KERNEL) or (
        "/usr/bin/linux.uml" if os.access("/usr/bin/linux.uml", os.X_OK) else None)
    if not found:
        raise UmlError("linux.uml not found: install Debian's user-mode-linux package "
                       "(apt-get install user-mode-linux, or scripts/install.sh) or pass --uml-kernel PATH")
    return found


def find_modules_dir(kernel: str, path: Optional[str] = None) -> Optional[str]:
    """The module directory for ``kernel``.

    An explicit ``path`` may be a release directory or a directory holding exactly
    one release directory (``lib/modules`` of ``make modules_install``).  Without
    one, Debian's kernel uses its packaged modules and any other kernel is assumed
    to have what it needs built in.
    """
    if path:
        return _release_dir(path)
    if os.path.realpath(kernel) == os.path.realpath("/usr/bin/linux.uml") and os.path.isdir(DEFAULT_MODULES_ROOT):
        return _release_dir(DEFAULT_MODULES_ROOT)
    return None


def _release_dir(path: str) -> str:
    path = os.path.abspath(path)
    if os.path.exists(os.path.join(path, "modules.dep")):
        return path
    if os.path.isdir(path):
        releases = [d for d in sorted(os.listdir(path))
                    if os.path.exists(os.path.join(path, d, "modules.dep"))]
        if len(releases) == 1:
            return os.path.join(path, releases[0])
        if len(releases) > 1:
            raise UmlError(f"{path} holds modules for several kernels ({', '.join(releases)}): "
                           "pass the one matching the kernel with --uml-modules")
    raise UmlError(f"no kernel modules (modules.dep) found under {path}")


def guest_env(host_env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The host environment as the guest command gets it, plus :data:`IN_UML_ENV`."""
    env = {k: v for k, v in host_env.items()
           if re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k) and not _ENV_SKIP.match(k)}
    env[IN_UML_ENV] = "1"
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


def plan_init_script(spec: UmlSpec, workdir: str) -> str:
    """The guest's init (PID 1) as shell text.  Pure: the tests read it."""
    q = shlex.quote
    modtree = "/run/itb-modules"
    lines = [
        "#!/bin/sh",
        "# IPsec Testbed: init for one User-Mode Linux guest (generated; see testbed/uml.py)",
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
        "hostname itb-uml",
        "ip link set lo up",
    ]
    if spec.modules_dir:
        lines += [
            f"mkdir -p {modtree}/lib/modules",
            f'ln -s {q(spec.modules_dir)} "{modtree}/lib/modules/$(uname -r)"',
            f"echo {q(workdir + '/modprobe')} > /proc/sys/kernel/modprobe",
            # Boot modules are best effort: a module built into a custom kernel is not
            # an error, and `doctor` reports what is really usable.  One process loads them
            # all (each process start is slow in UML); only if that fails are they tried
            # one by one, to say which is missing.
            f"/sbin/modprobe -q -a -d {modtree} {' '.join(spec.boot_modules)} 2>/dev/null || "
            f"for m in {' '.join(spec.boot_modules)}; do",
            f"  /sbin/modprobe -d {modtree} $m 2>/dev/null || echo \"itb-init: module $m not loaded\" >/dev/console",
            "done",
        ]
        if not spec.on_demand_modules:
            # Everything the testbed uses is loaded now.  Without a helper the kernel builds the
            # crypto instances it looks up (rfc4106(gcm(aes)), authenc(hmac(sha1),cbc(aes)), ...)
            # from the loaded templates at once, instead of first starting the wrapper twice per
            # name (14 processes and 1.2 s for the first AES-GCM SA).
            lines.append("echo > /proc/sys/kernel/modprobe")
    if spec.interactive:
        env = dict(spec.env)
        size = f" rows {env['LINES']} cols {env['COLUMNS']}" if "LINES" in env and "COLUMNS" in env else ""
        lines += [f"stty -F /dev/tty1 sane{size}", "stty -F /dev/tty2 raw -echo"]
    else:
        lines += ["stty -F /dev/tty1 raw -echo", "stty -F /dev/tty2 raw -echo"]
    lines += [f"export {k}={q(v)}" for k, v in spec.env]
    lines += [
        f"cd {q(spec.cwd)} || {{ echo 126 > {q(workdir + '/status')}; echo o > /proc/sysrq-trigger; }}",
        f"echo started > {q(workdir + '/started')}",
    ]
    if spec.interactive:  # tty1 as the controlling terminal of a new session
        run = f"setsid -w -c {shlex.join(spec.command)} </dev/tty1 >/dev/tty1 2>&1"
    else:
        redirect = []
        for fd, tty, is_tty in ((1, "/dev/tty1", spec.stdout_tty), (2, "/dev/tty2", spec.stderr_tty)):
            if is_tty:
                redirect.append(f"{fd}>{tty}")
            else:
                lines += [f"mkfifo /run/itb-fd{fd}", f"cat /run/itb-fd{fd} >{tty} &"]
                redirect.append(f"{fd}>/run/itb-fd{fd}")
        run = f"{shlex.join(spec.command)} </dev/null {' '.join(redirect)}"
    lines += [
        run,
        "rc=$?",
        "wait",  # the pipes' readers: all output is out before the status is
        f"echo $rc > {q(workdir + '/status.tmp')}",
        f"mv {q(workdir + '/status.tmp')} {q(workdir + '/status')}",
        "sync",
        "echo o > /proc/sysrq-trigger",
        "sleep 60",
    ]
    return "\n".join(lines) + "\n"


def plan_modprobe_wrapper(modules_dir: Optional[str]) -> str:
    """The script the guest kernel calls for on-demand module loads."""
    if not modules_dir:
        return "#!/bin/sh\nexit 1\n"
    return '#!/bin/sh\nexec /sbin/modprobe -d /run/itb-modules "$@"\n'


def plan_command_line(spec: UmlSpec, workdir: str, uml_id: str,
                      console_fds: tuple[int, int, int] = (3, 4, 5)) -> list[str]:
    """The host command line that boots the guest.

    Consoles: con0 (kernel console), tty1 and tty2 write to the three host file
    descriptors in ``console_fds`` (pipes the host reads); nothing reads the host's
    standard input, so the guest runs the same with stdin closed (CI) as in a terminal.
    """
    con0, tty1, tty2 = console_fds
    tty1_channel = "fd:0,fd:1" if spec.interactive else f"null,fd:{tty1}"
    return [
        # If the process that booted the guest dies (even by SIGKILL), the kernel kills
        # the guest too, so an orphaned guest never goes on writing results.
        "setpriv", "--pdeathsig", "KILL", "--",
        spec.kernel,
        f"mem={spec.mem}",
        "root=/dev/root", "rootfstype=hostfs", "rootflags=/", "rw",
        "quiet", "loglevel=4",
        f"init={workdir}/init.sh",
        "con=null", f"con0=null,fd:{con0}", f"con1={tty1_channel}", f"con2=null,fd:{tty2}",
        f"umid={uml_id}", f"uml_dir={names.STATE_DIR}/uml/",
    ]


def _pump(src: int, dst: Optional[BinaryIO], keep: Optional[list[bytes]] = None) -> None:
    """Copy a pipe to ``dst`` as it arrives (and keep the tail when asked)."""
    with os.fdopen(src, "rb", buffering=0) as f:
        while True:
            chunk = f.read(65536)
            if not chunk:
                return
            if keep is not None:
                keep.append(chunk)
                del keep[:-64]
            if dst is not None:
                try:
                    dst.write(chunk)
                    dst.flush()
                except BrokenPipeError:
                    dst = None  # the reader went away (`| head`); keep draining the guest



def run(spec: UmlSpec, stdout: Optional[BinaryIO] = None, stderr: Optional[BinaryIO] = None,
        run_id: Optional[str] = None) -> int:
    """Boot UML, run ``spec.command`` in it, stream its output, return its exit status.

    Returns 124 (as timeout(1) does) when ``spec.timeout_s`` runs out.  The guest is
    killed on any exception, including KeyboardInterrupt, so nothing survives us
    but what SIGKILL leaves for ``ipsec-testbed clean``.
    """
    stdout = stdout or sys.stdout.buffer
    stderr = stderr or sys.stderr.buffer
    run_id = run_id or names.new_run_id()
    uml_id = names.umid(run_id)
    os.makedirs(f"{names.STATE_DIR}/uml", exist_ok=True)
    # The work directory must be on a filesystem the guest sees through hostfs:
    # the guest mounts its own tmpfs on /run and /dev/shm, so use /tmp (or TMPDIR).
    workdir = tempfile.mkdtemp(prefix=f"{names.PREFIX}-{run_id}-uml-")
    with open(f"{workdir}/owner", "w") as f:  # `clean` leaves a live owner's work directory alone
        f.write(f"{os.getpid()}\n")
    console: list[bytes] = []
    proc: Optional[subprocess.Popen] = None
    watcher: Optional[subprocess.Popen] = None
    lifeline = -1
    terminal: Optional[list] = None
    started = time.monotonic()
    try:
        with open(f"{workdir}/init.sh", "w") as f:
            f.write(plan_init_script(spec, workdir))
        with open(f"{workdir}/modprobe", "w") as f:
            f.write(plan_modprobe_wrapper(spec.modules_dir))
        os.chmod(f"{workdir}/init.sh", 0o755)
        os.chmod(f"{workdir}/modprobe", 0o755)

        pipes = [os.pipe() for _ in range(3)]
        write_fds = (pipes[0][1], pipes[1][1], pipes[2][1])
        cmd = plan_command_line(spec, workdir, uml_id, write_fds)
        log.debug("booting UML: %s", shlex.join(cmd))
        if spec.interactive:
            if not os.isatty(0):
                raise UmlError("an interactive guest needs a terminal on standard input")
            terminal = termios.tcgetattr(0)
            tty.setraw(0)  # keystrokes go to the guest's tty as they are typed (Ctrl-C included)
        proc = subprocess.Popen(
            cmd, stdin=None if spec.interactive else subprocess.DEVNULL,
            stdout=None if spec.interactive else subprocess.DEVNULL, stderr=subprocess.STDOUT,
            pass_fds=write_fds, start_new_session=True)
        for _, w in pipes:
            os.close(w)
        watcher, lifeline = _watch(proc.pid)
        pumps = [threading.Thread(target=_pump, args=(pipes[0][0], None, console), daemon=True),
                 threading.Thread(target=_pump, args=(pipes[1][0], stdout), daemon=True),
                 threading.Thread(target=_pump, args=(pipes[2][0], stderr), daemon=True)]
        for t in pumps:
            t.start()
        try:
            proc.wait(timeout=spec.timeout_s)
        except subprocess.TimeoutExpired:
            _kill(proc)
            stderr.write(f"ipsec-testbed uml: time limit of {spec.timeout_s:g} s reached; guest killed\n".encode())
            stderr.flush()
            return 124
        for t in pumps:
            t.join(timeout=5)
        status_file = f"{workdir}/status"
        if os.path.exists(status_file):
            with open(status_file) as f:
                return int(f.read().strip() or 1)
        tail = b"".join(console).decode(errors="replace").strip().splitlines()[-15:]
        booted = os.path.exists(f"{workdir}/started")
        what = "the command's guest died before it finished" if booted else "the UML guest failed to boot"
        raise UmlError(f"{what} (linux.uml exited {proc.returncode} after "
                       f"{time.monotonic() - started:.1f} s); last console lines:\n  " + "\n  ".join(tail))
    finally:
        if proc is not None and proc.poll() is None:
            _kill(proc)
        if watcher is not None:
            watcher.kill()  # before the lifeline closes: the group is gone, its id may be reused
            watcher.wait()
            os.close(lifeline)
        if terminal is not None:
            with contextlib.suppress(termios.error, OSError):  # the terminal may be gone (SIGHUP)
                termios.tcsetattr(0, termios.TCSADRAIN, terminal)
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(f"{names.STATE_DIR}/uml/{uml_id}", ignore_errors=True)


def _watch(pgid: int) -> tuple[subprocess.Popen, int]:
    """A watcher that kills the guest's process group when this process dies, however it dies.

    ``setpriv --pdeathsig`` reaches only the guest kernel's main process; its helpers and
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


def _kill(proc: subprocess.Popen) -> None:
    """Kill the whole guest: linux.uml forks helper processes into its session."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def build_spec(command: Sequence[str], kernel: Optional[str] = None, modules: Optional[str] = None,
               mem: str = "2G", timeout_s: Optional[float] = None, cwd: Optional[str] = None,
               interactive: bool = False) -> UmlSpec:
    """A :class:`UmlSpec` from command-line style options, finding kernel and modules."""
    kernel_path = find_kernel(kernel)
    return UmlSpec(command=tuple(command), kernel=kernel_path,
                   modules_dir=find_modules_dir(kernel_path, modules),
                   cwd=os.path.abspath(cwd or os.getcwd()), mem=mem, timeout_s=timeout_s,
                   env=guest_env(os.environ), stdout_tty=sys.stdout.isatty(), stderr_tty=sys.stderr.isatty(),
                   interactive=interactive)

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
              <-> tty3 (two pipes) ------- the CPU meter: the guest asks, the host answers
                                           with the guest's CPU time (its cgroup's
                                           cpuacct.usage, ns) and the host's clock
              <-> tty4 (two pipes) ------- a job's channel to the host, when asked for
                                           (testbed.channel: the web demo's page)
              <-- <workdir>/status ------- exit status, then sysrq power-off

The guest cannot return an exit status itself, so it writes it to a file on hostfs
before powering off; no status file means the guest failed to boot or died.

The guest is a set of host processes (its kernel and, through ptrace, its user space),
all started inside a cgroup of the host's ``cpuacct`` controller (``itb-<run>``), so the
host accounts the guest's CPU time exactly, in nanoseconds, including the work the guest
itself cannot see (its system calls and page faults, served by the host).
:class:`GuestMeter` reads that account from inside the guest over tty3.

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
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import BinaryIO

from testbed import channel, handoff, kernelbuild, kernelsource, names, umlkernel
from testbed.awake import Spinner
from testbed.backends import guest
from testbed.backends.base import (
    DEFAULT_OPTIONS,
    BackendError,
    CpuMeter,
    KernelBackend,
    Leftover,
    Options,
)
from testbed.backends.host import ProcStatMeter
from testbed.backends.umlclean import leftovers
from testbed.backends.umlmeter import (
    METER_TTY,
    GuestMeter,
    Siblings,
    make_cgroup,
    remove_cgroup,
    serve_meter,
    write_account,
)
from testbed.capabilities import Needs, Probe
from testbed.speedprobe import SpeedProbe, spare_cpu

log = logging.getLogger(__name__)


DEFAULT_MODULES_ROOT = umlkernel.DEBIAN_MODULES_ROOT

MEM_PATTERN = guest.MEM_PATTERN


class UmlError(BackendError):
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
    modules_dir: str | None
    cwd: str
    mem: str = "2G"
    timeout_s: float | None = None
    env: tuple[tuple[str, str], ...] = ()
    #: Modules loaded at boot, with one modprobe process.  The crypto modules behind the
    #: algorithms are among them: left to the kernel's on-demand loading, every name it
    #: looks up for a transform (``rfc4106(gcm(aes))``, ``gcm(aes)``, ``ctr(aes)``...)
    #: starts the modprobe wrapper, a few seconds in all for the first SA.
    boot_modules: tuple[str, ...] = ()
    #: keep the kernel's on-demand module loading (through the wrapper) after boot; off, the
    #: boot modules are all there is
    on_demand_modules: bool = False
    #: offer the guest the host's account of its CPU time on tty3 (see the module docstring)
    cpu_meter: bool = False
    #: the host CPU the whole guest runs on (None: wherever the host's scheduler puts it).  UML
    #: is uniprocessor, so one host CPU is all it can use; kept on one, its throughput at
    #: saturation and its CPU cost per byte vary less from run to run (measured: AES-GCM-256
    #: at 100 Mbit/s MSS 100, goodput's coefficient of variation 3.8 % unpinned, 1.6 % pinned)
    host_cpu: int | None = None
    #: with the CPU meter, time a workload like the guest's on a host CPU other than
    #: ``host_cpu`` and give its totals with every reading (:mod:`testbed.speedprobe`): how
    #: fast the machine ran over each window
    speed_probe: bool = False
    #: keep ``host_cpu`` from idling while the guest runs (:class:`testbed.awake.Spinner`): lone packets then
    #: find the emulator at full speed
    keep_awake: bool = False
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
    #: what is known of ``kernel`` (where it came from, its FPU buffer), to explain a failed boot
    kernel_info: umlkernel.UmlKernel | None = None
    #: give the command a channel to the host on tty4 (:mod:`testbed.channel`; :func:`run`'s ``channel_fds``)
    channel: bool = False

    def __post_init__(self) -> None:
        guest.check_spec(self.command, self.mem, self.timeout_s, self.cwd)


def find_kernel(path: str | None = None) -> str:
    """The UML kernel image to boot: ``path`` (a path, ``debian`` or ``recipe``) if given, else the one
    :func:`~testbed.umlkernel.select` chooses.  Raises :class:`UmlError` with the fix in one line."""
    return choose_kernel(path).path


def choose_kernel(path: str | None = None) -> umlkernel.UmlKernel:
    """:func:`testbed.umlkernel.select`, its failure as a :class:`UmlError`."""
    try:
        return umlkernel.select(path)
    except umlkernel.KernelUnavailableError as e:
        raise UmlError(str(e)) from None


def find_modules_dir(kernel: str, path: str | None = None) -> str | None:
    """The module directory for ``kernel``.

    An explicit ``path`` may be a release directory or a directory holding exactly
    one release directory (``lib/modules`` of ``make modules_install``).  Without
    one, Debian's kernel uses its packaged modules and any other kernel is assumed
    to have what it needs built in.
    """
    if path:
        return _release_dir(path)
    if os.path.realpath(kernel) == os.path.realpath(umlkernel.DEBIAN_KERNEL) and os.path.isdir(DEFAULT_MODULES_ROOT):
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


def handing(spec: UmlSpec, **fields) -> UmlSpec:
    """``spec`` with ``fields`` added to the hand-off its guest gets (:mod:`testbed.handoff`)."""
    env = dict(spec.env)
    handed = handoff.Handoff.from_env(env[handoff.ENV]) if handoff.ENV in env else handoff.outgoing()
    env[handoff.ENV] = handed.with_(**fields).to_env()
    return dataclasses.replace(spec, env=tuple(sorted(env.items())))


def guest_env(host_env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The host environment as the guest command gets it (:func:`testbed.backends.guest.guest_env`)."""
    return guest.guest_env(host_env, UmlBackend.name)


NOFILE = guest.NOFILE
plan_modprobe_wrapper = guest.plan_modprobe_wrapper


def plan_init_script(spec: UmlSpec, workdir: str) -> str:
    """The guest's init (PID 1) as shell text.  Pure: the tests read it."""
    lines = guest.plan_base_lines("User-Mode Linux", "itb-uml")
    lines += guest.plan_module_lines(spec.modules_dir, spec.boot_modules, workdir, spec.on_demand_modules)
    if spec.interactive:
        env = dict(spec.env)
        size = f" rows {env['LINES']} cols {env['COLUMNS']}" if "LINES" in env and "COLUMNS" in env else ""
        lines += [f"stty -F /dev/tty1 sane{size}", "stty -F /dev/tty2 raw -echo"]
    else:
        lines += ["stty -F /dev/tty1 raw -echo", "stty -F /dev/tty2 raw -echo"]
    lines += guest.plan_env_lines(spec.env, workdir)
    if spec.cpu_meter:
        lines += [f"stty -F {METER_TTY} raw -echo"]
    if spec.channel:
        lines += [f"stty -F {channel.GUEST_TTY} raw -echo"]
    lines += guest.plan_command_lines(spec.command, spec.cwd, workdir,
                                      (("/dev/tty1", spec.stdout_tty), ("/dev/tty2", spec.stderr_tty)),
                                      terminal="/dev/tty1" if spec.interactive else None)
    return "\n".join(lines) + "\n"


#: The namespaces a UML kernel runs in.  A UML kernel runs each guest process as a host process it ptraces, and
#: the host resumes a ptraced process untraced when its tracer dies: a UML kernel that died on its own (killed,
#: its parent gone, a panic) would leave its guest's processes running natively, as root, on the host, their
#: system calls (``hostname``, ``mount``, ``ip``) the host's.  In a PID namespace of its own they die with it:
#: its first process (a shell that waits for the kernel, not the kernel, which must stay able to signal itself,
#: as its panic does) ends when the kernel ends, and the host kills the rest of a namespace then; in mount, UTS,
#: IPC and network namespaces of their own nothing they do before that reaches the host.  ``--kill-child``:
#: unshare's own death (``setpriv --pdeathsig``) kills the shell, and with it the namespace.
CONTAINED = ("unshare", "--pid", "--fork", "--kill-child", "--mount", "--uts", "--ipc", "--net", "--",
             "sh", "-c", '"$@"; exit $?', "sh")


def kernel_status(returncode: int) -> int:
    """The kernel's own exit status from the contained command's: the waiting shell exits 128 + N when the kernel
    died of signal N, reported as -N (as :class:`subprocess.Popen` reports a signal)."""
    return -(returncode - 128) if 128 < returncode < 160 else returncode


def plan_command_line(spec: UmlSpec, workdir: str, uml_id: str,
                      console_fds: tuple[int, int, int] = (3, 4, 5),
                      meter_fds: tuple[int, int] | None = None, cgroup: str | None = None,
                      channel_fds: tuple[int, int] | None = None) -> list[str]:
    """The host command line that boots the guest.

    Consoles: con0 (kernel console), tty1 and tty2 write to the three host file
    descriptors in ``console_fds`` (pipes the host reads); nothing reads the host's
    standard input, so the guest runs the same with stdin closed (CI) as in a terminal.
    ``meter_fds`` (the guest's input, the guest's output) make tty3 the CPU meter's
    channel; with ``cgroup`` (a cpuacct group directory) the guest starts inside it.  ``channel_fds``
    (the guest's input, the guest's output) make tty4 the job's channel to the host.
    """
    con0, tty1, tty2 = console_fds
    tty1_channel = "fd:0,fd:1" if spec.interactive else f"null,fd:{tty1}"
    meter = [f"con3=fd:{meter_fds[0]},fd:{meter_fds[1]}"] if meter_fds else []
    if channel_fds:
        meter.append(f"con4=fd:{channel_fds[0]},fd:{channel_fds[1]}")
    into_cgroup = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', os.path.join(cgroup, "cgroup.procs")] if cgroup else []
    pinned = ["taskset", "-c", str(spec.host_cpu)] if spec.host_cpu is not None else []
    return [
        *into_cgroup,
        *pinned,
        # If the process that booted the guest dies (even by SIGKILL), the kernel kills
        # the guest too, so an orphaned guest never goes on writing results.
        "setpriv", "--pdeathsig", "KILL", "--",
        *CONTAINED,
        spec.kernel,
        f"mem={spec.mem}",
        "root=/dev/root", "rootfstype=hostfs", "rootflags=/", "rw",
        "quiet", "loglevel=4",
        f"init={workdir}/init.sh",
        "con=null", f"con0=null,fd:{con0}", f"con1={tty1_channel}", f"con2=null,fd:{tty2}", *meter,
        f"umid={uml_id}", f"uml_dir={names.STATE_DIR}/uml/",
    ]


def run(spec: UmlSpec, stdout: BinaryIO | None = None, stderr: BinaryIO | None = None,
        run_id: str | None = None, channel_fds: tuple[int, int] | None = None) -> int:
    """Boot UML, run ``spec.command`` in it, stream its output, return its exit status.

    ``channel_fds`` (read by the guest, written by the guest: :attr:`testbed.channel.Channel.job_fds`)
    become the guest's tty4 when ``spec.channel``.

    Returns 124 (as timeout(1) does) when ``spec.timeout_s`` runs out.  The guest is
    killed on any exception, including KeyboardInterrupt, so nothing survives us
    but what SIGKILL leaves for ``ipsec-testbed clean``.
    """
    if spec.channel != (channel_fds is not None):
        raise ValueError("a guest with a channel needs its descriptors (channel_fds), and only it")
    stdout = stdout or sys.stdout.buffer
    stderr = stderr or sys.stderr.buffer
    run_id = run_id or names.new_run_id()
    uml_id = names.umid(run_id)
    os.makedirs(f"{names.STATE_DIR}/uml", exist_ok=True)
    # The work directory must be on a filesystem the guest sees through hostfs:
    # the guest mounts its own tmpfs on /run and /dev/shm, so use /tmp (or TMPDIR).
    console: list[bytes] = []
    started = time.monotonic()
    # Each resource is released, in the reverse order of its taking, however the run ends: an error,
    # a time limit, KeyboardInterrupt or SIGTERM (nothing survives us but what SIGKILL leaves for
    # `ipsec-testbed clean`).
    with contextlib.ExitStack() as held:
        workdir = tempfile.mkdtemp(prefix=f"{names.PREFIX}-{run_id}-uml-")
        held.callback(shutil.rmtree, workdir, ignore_errors=True)
        held.callback(shutil.rmtree, f"{names.STATE_DIR}/uml/{uml_id}", ignore_errors=True)
        with open(f"{workdir}/owner", "w") as f:  # `clean` leaves a live owner's work directory alone
            f.write(f"{os.getpid()}\n")
        cgroup = make_cgroup(uml_id) if spec.cpu_meter else None
        if cgroup is not None:
            held.callback(remove_cgroup, cgroup)  # last: after the guest's processes have left it
        probe = None
        if spec.speed_probe and cgroup is not None and (probe_cpu := spare_cpu(spec.host_cpu)) is not None:
            probe = SpeedProbe(probe_cpu, workdir)
            held.callback(probe.close)
            spec = handing(spec, speed_probe=probe.method())
        spinner = None
        if spec.keep_awake and spec.host_cpu is not None:
            spinner = Spinner(spec.host_cpu)
            held.callback(spinner.close)
            spec = handing(spec, keep_awake=spinner.method())
        guest.write_guest_files(workdir, plan_init_script(spec, workdir), spec.modules_dir, spec.env)

        pipes = [os.pipe() for _ in range(3)]
        write_fds = (pipes[0][1], pipes[1][1], pipes[2][1])
        guest_meter: tuple[int, int] | None = None
        meter_fds: list[int] = []
        if cgroup is not None:
            to_guest, from_guest = os.pipe(), os.pipe()
            meter_fds = [to_guest[1], from_guest[0]]  # ours: closed, the meter's thread reads end-of-file
            held.callback(guest.close_all, meter_fds)
            guest_meter = (to_guest[0], from_guest[1])
        cmd = plan_command_line(spec, workdir, uml_id, write_fds, guest_meter, cgroup, channel_fds)
        log.debug("booting UML: %s", shlex.join(cmd))
        if spec.interactive:
            held.enter_context(guest.raw_terminal(UmlError))
        proc = subprocess.Popen(
            cmd, stdin=None if spec.interactive else subprocess.DEVNULL,
            stdout=None if spec.interactive else subprocess.DEVNULL, stderr=subprocess.STDOUT,
            pass_fds=write_fds + (guest_meter or ()) + (channel_fds or ()), start_new_session=True)
        held.callback(guest.kill_if_running, proc)
        for _, w in pipes:
            os.close(w)
        if guest_meter is not None:
            guest.close_all(guest_meter)
            own = [p.pid for p in (probe, spinner) if p is not None and p.pid]  # the testbed's, not foreign load
            write_account(workdir, cgroup, own)
            threading.Thread(target=serve_meter, args=(meter_fds[1], meter_fds[0], cgroup, probe, Siblings(workdir),
                                                       own), daemon=True).start()
        watcher, lifeline = guest.watch(proc.pid)
        held.callback(guest.stop_watcher, watcher, lifeline)
        held.callback(guest.kill_if_running, proc)  # before the watcher goes: the group is gone, its id may be reused
        pumps = [threading.Thread(target=guest.pump, args=(pipes[0][0], None, console), daemon=True),
                 threading.Thread(target=guest.pump, args=(pipes[1][0], stdout), daemon=True),
                 threading.Thread(target=guest.pump, args=(pipes[2][0], stderr), daemon=True)]
        for t in pumps:
            t.start()
        try:
            proc.wait(timeout=spec.timeout_s)
        except subprocess.TimeoutExpired:
            guest.kill(proc)
            stderr.write(f"ipsec-testbed uml: time limit of {spec.timeout_s:g} s reached; guest killed\n".encode())
            stderr.flush()
            return 124
        for t in pumps:
            t.join(timeout=5)
        status = guest.read_status(workdir)
        if status is not None:
            return status
        raise UmlError(_death(b"".join(console).decode(errors="replace"), spec, kernel_status(proc.returncode),
                              time.monotonic() - started, booted=os.path.exists(f"{workdir}/started")))


def _death(console: str, spec: UmlSpec, returncode: int, seconds: float, booted: bool) -> str:
    """Why a guest ended without a status, for people: the console lines that say why, then the cause
    and its fix in one line where the cause is known."""
    cause, telling = umlkernel.boot_failure(console, spec.kernel_info)
    what = "the command's guest died before it finished" if booted else "the UML guest failed to boot"
    kernel = spec.kernel_info.describe() if spec.kernel_info else spec.kernel
    lines = [f"{what} ({kernel} exited {returncode} after {seconds:.1f} s)"]
    if telling:
        lines += ["its console said:", *(f"  {line}" for line in telling)]
    if cause:
        lines.append(f"cause: {cause}")
    return "\n".join(lines)


def guest_cpu() -> int | None:
    """The host CPU a guest is pinned to: the last this process may use, when it may use several."""
    allowed = sorted(os.sched_getaffinity(0))
    return allowed[-1] if len(allowed) > 1 else None


def build_spec(command: Sequence[str], kernel: str | None = None, modules: str | None = None,
               mem: str = "2G", timeout_s: float | None = None, cwd: str | None = None,
               interactive: bool = False, boot_modules: Sequence[str] = (), cpu_meter: bool = True,
               host_cpu: int | None = None, speed_probe: bool = False, with_channel: bool = False,
               keep_awake: bool = False) -> UmlSpec:
    """A :class:`UmlSpec` from command-line style options, finding kernel and modules; the guest
    is pinned to ``host_cpu`` (default :func:`guest_cpu`), kept from idling with ``keep_awake``."""
    chosen = choose_kernel(kernel)
    if chosen.origin == "recipe":  # a kernel of the cache: `ipsec-testbed kernel list` says when it last booted
        kernelbuild.touch_used(chosen.path)
    handed = handoff.outgoing().with_(kernel=chosen.metadata(), cpu_meter_tty=METER_TTY if cpu_meter else "")
    env = {**dict(guest_env(os.environ)), handoff.ENV: handed.to_env()}  # this job's, never one inherited
    env.pop(channel.ENV, None)
    if with_channel:
        env[channel.ENV] = channel.GUEST_TTY
    return UmlSpec(command=tuple(command), kernel=chosen.path, kernel_info=chosen,
                   modules_dir=find_modules_dir(chosen.path, modules),
                   cwd=os.path.abspath(cwd or os.getcwd()), mem=mem, timeout_s=timeout_s,
                   env=tuple(sorted(env.items())), stdout_tty=sys.stdout.isatty(), stderr_tty=sys.stderr.isatty(),
                   interactive=interactive, boot_modules=tuple(boot_modules), cpu_meter=cpu_meter,
                   host_cpu=guest_cpu() if host_cpu is None else host_cpu, speed_probe=speed_probe,
                   channel=with_channel, keep_awake=keep_awake)


class UmlBackend(KernelBackend):
    """Debian's User-Mode Linux kernel (or one built with ``make ARCH=um``), booted per command."""

    name = "uml"
    title = "User-Mode Linux"
    note = "every emulated host shares the guest's one CPU, and crypto is the kernel's generic C code (no AES-NI)"
    #: A tick of its HZ=100: its timers fire late when its CPU is busy (see topologies.shaping).
    shaper_burst_s = 0.01

    def __init__(self, options: Options = DEFAULT_OPTIONS) -> None:
        super().__init__(options)

    @classmethod
    def image_error(cls, path: str) -> str | None:
        if kernelsource.x86_image(path):
            return f"{path} is an x86 bzImage, not a UML kernel (the counted backend boots it: --kernel qemu)"
        try:
            find_kernel(path)
        except UmlError as e:
            return str(e)
        return None

    def unavailable(self) -> str | None:
        try:
            kernel = choose_kernel(self.options.kernel)
            find_modules_dir(kernel.path, self.options.modules)
        except UmlError as e:
            return str(e)
        return kernel.cannot_boot()

    def lacks(self, needs: Needs, probe_host: Callable[[], Probe]) -> list[str]:
        # Debian's kernel has every module the testbed's IPsec uses; what a kernel's configuration says it
        # was built without (WireGuard, in Debian's) it lacks; a developer's own kernel without a
        # configuration beside it is taken at its word (`ipsec-testbed uml -- ipsec-testbed doctor` probes it).
        try:
            kernel = choose_kernel(self.options.kernel)
        except UmlError:
            return []
        return [cap for cap in umlkernel.CONFIGURED if cap in needs.capabilities and kernel.has(cap) is False]

    def run(self, argv: Sequence[str], *, cwd: str | None = None, timeout_s: float | None = None,
            interactive: bool = False, modules: Sequence[str] = (), output: BinaryIO | None = None,
            cpu: int | None = None, speed_probe: bool = False, channel_fds: tuple[int, int] | None = None,
            keep_awake: bool = False) -> int:
        spec = build_spec(argv, kernel=self.options.kernel, modules=self.options.modules, mem=self.options.mem,
                          timeout_s=timeout_s, cwd=cwd, interactive=interactive, boot_modules=modules, host_cpu=cpu,
                          speed_probe=speed_probe, with_channel=channel_fds is not None, keep_awake=keep_awake)
        if output is not None:
            spec = dataclasses.replace(spec, stdout_tty=False, stderr_tty=False)
        return run(spec, stdout=output, stderr=output, channel_fds=channel_fds)

    def leftovers(self) -> list[Leftover]:
        return leftovers()

    def _kernel(self) -> dict:
        """The kernel: inside a guest, the host's choice it was handed; on the host, the choice now."""
        handed = handoff.received() if self.inside() else None
        if handed is not None and handed.kernel:
            return dict(handed.kernel)
        try:
            return choose_kernel(self.options.kernel).metadata()
        except UmlError:
            return {}

    def metadata(self) -> dict:
        return {**super().metadata(), **self._kernel(), "kernel_release": platform.release()}

    def label(self) -> str:
        kernel = self._kernel()
        if not kernel:
            return self.title
        origin = {"debian": "", "recipe": ", the project's kernel", "user": ", --uml-kernel"}.get(
            kernel.get("kernel_origin"), "")
        version = kernel.get("kernel_version") or (platform.release() if self.inside() else "")
        return f"{self.title} {version}{origin}".replace("  ", " ").rstrip()

    def describe_kernel(self) -> str:
        """The kernel and modules a guest boots, and why, for people (raises UmlError when there is none)."""
        kernel = choose_kernel(self.options.kernel)
        modules = find_modules_dir(kernel.path, self.options.modules) or "built in"
        return f"{kernel.describe()}, modules {modules}: {kernel.reason}"

    def cpu_meter(self) -> CpuMeter:
        handed = handoff.received()
        if handed is not None and handed.cpu_meter_tty:
            try:
                return GuestMeter(handed.cpu_meter_tty, handed.speed_probe)
            except OSError as e:
                log.warning("the host's CPU meter is not reachable (%s): the guest's own /proc/stat is used", e)
        meter = ProcStatMeter()
        meter.method = "the guest's /proc/stat (10 ms ticks; misses the host's work for the guest)"
        return meter

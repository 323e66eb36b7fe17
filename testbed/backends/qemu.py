"""The counted backend: an x86-64 kernel in QEMU's emulator (TCG), whose clock counts instructions.

On a cloud VM or a CI runner the CPU's speed moves by a third within seconds and there are no hardware
counters: every cost timed there is the machine's as much as the kernel's.  Here the kernel under test runs in
QEMU's TCG with ``-icount shift=0,sleep=off``: the guest's clock advances one nanosecond per instruction it
executes, and skips ahead to its next timer when it idles.  Everything the guest times (tbf's tokens, TCP's
timers, iperf3's windows) is then a count of instructions, the same on every host, however busy or slow, for the
same kernel, programs and ``-cpu`` model.  A plugin of the emulator (``qemucount.c``) counts the instructions
themselves and notes the count at a marker instruction the guest's CPU meter executes; the host hands the noted
count back: a window's cost is the instructions between its two markers, exactly::

    host                                       guest (x86-64 kernel, 1 vCPU, -cpu Westmere, TCG icount)
    ----                                       -----
    run(spec) --- initrd.cpio -----------> /init: insmod virtio, 9p; mount the host's / (9p, cache=loose)
              --- workdir/init.sh -------> init.sh is PID 1 (testbed.backends.guest's parts):
                                             mount proc, sys, devtmpfs, tmpfs /run; modprobe -d ...
                                             cd <cwd>; COMMAND >/dev/hvc1 2>/dev/hvc2
              <-- ttyS0 (socket) --------- kernel console (shown only on failure)
              <-- hvc1, hvc2 (sockets) --- the command's stdout and stderr, live (ttys: raw)
              === <workdir>/counts ======= the plugin's page, also the guest's ivshmem device: the CPU meter
                                           executes the marker, where the plugin notes its count and the
                                           host's clock, then reads them with a load (/dev/itb.counts)
              <-> itb.meter (socket) ----- the same reading asked of the host, where there is no such device
              <-> itb.channel (socket) --- a job's channel to the host, when asked for (testbed.channel)
              <-- <workdir>/status ------- exit status, then sysrq power-off (QEMU exits)

Why these choices (measured; docs/kernel.md, "The counted backend"):

- ``-cpu Westmere``: a fixed model TCG emulates whole (no "TCG doesn't support" warnings; ``max`` changes with
  QEMU's version), with AES-NI, PCLMULQDQ and SSSE3, so the kernel runs its x86 crypto drivers
  (``rfc4106-gcm-aesni``) as on real x86 machines.  Each emulated instruction counts one, however complex.
- ``cache=loose`` and the guest's own TMPDIR: the guest keeps what it read from the host's files (an import, a
  binary), so 9p round trips, which the guest waits out idle while its clock skips ahead, are few.  What the
  guest writes reaches the host when it syncs, before it powers off; files the host writes while a guest runs
  are not seen by it (a paired A/B does not take turns here: its counts need no shared machine state).
- No KVM: the guest's speed is QEMU's, about a sixth of the host's on these machines, and the wall time a
  record keeps (``wall_s``) says so; the counts do not move with it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import mmap
import os
import platform
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import BinaryIO

from testbed import channel, counting, handoff, names, qemukernel
from testbed.backends import guest
from testbed.backends.base import (
    INSTRUCTIONS,
    BackendError,
    CpuMeter,
    CpuSample,
    KernelBackend,
    Leftover,
    in_a_guest,
)
from testbed.backends.host import ProcStatMeter
from testbed.capabilities import Needs, Probe
from testbed.rundir import publish_directory

log = logging.getLogger(__name__)

QEMU = "qemu-system-x86_64"
QEMU_PACKAGE = "qemu-system-x86"
#: The CPU model the guest sees: fixed, so that the same kernel runs the same instructions on every host.
CPU_MODEL = "Westmere"
#: The crypto drivers a counted guest runs (``--qemu-crypto``), chosen by the CPU features its model keeps: ``x86``
#: keeps AES-NI and PCLMULQDQ, so the kernel runs its x86 AES and GHASH drivers (``rfc4106-gcm-aesni``), as on a
#: real x86 server; ``generic`` takes them away, so AES and GHASH run in the kernel's C code, as UML always does
#: (``gcm_base(ctr(aes-generic),ghash-generic)``).  SSSE3 stays in both (the host's programs the guest runs need it:
#: without it init dies of an illegal instruction), so SHA and ChaCha20 keep their SSSE3 drivers, and 3DES and
#: Poly1305 their x86-64 assembly.
CRYPTO_CPU = {"x86": CPU_MODEL, "generic": f"{CPU_MODEL},-aes,-pclmulqdq"}
DEFAULT_CRYPTO = "x86"
#: One instruction is one ns of the guest's clock; idle time skips to the next timer, at once.
ICOUNT = "shift=0,sleep=off"
#: Modules the testbed needs of an x86-64 kernel beyond a UML kernel's (which has them built in): the socket
#: diagnostics the monitor reads connections with, and WireGuard; then the x86 drivers of the ciphers the
#: profiles use, loaded beside the generic ones so that the kernel picks them (TCG emulates the instructions they
#: need; a module this ``-cpu`` cannot run fails to load and the generic code stays).
EXTRA_MODULES = ("inet_diag", "tcp_diag", "udp_diag", "raw_diag", "wireguard",
                 "aesni_intel", "ghash_clmulni_intel", "sha1_ssse3", "sha256_ssse3", "sha512_ssse3",
                 "chacha20_x86_64", "poly1305_x86_64", "des3_ede_x86_64")
#: The kernel's command line besides the init script's path.
BOOT_ARGS = ("console=ttyS0", "quiet", "loglevel=4", "panic=-1", "tsc=reliable")
#: The guest's lines to the host: (name, QEMU's device); consoles (ttys) first, in the order of their hvc numbers.
LINES = (("terminal", "virtconsole"), ("stdout", "virtserialport"), ("stderr", "virtserialport"),
         ("meter", "virtserialport"), ("channel", "virtserialport"))
#: Where the guest finds a named line (its init links /dev/itb.NAME to it).
GUEST_LINE = "/dev/itb.{}"
METER_LINE = GUEST_LINE.format("meter")
#: The ivshmem device's PCI identity (Red Hat's virtio vendor, ivshmem) and the memory's BAR.
IVSHMEM = ("0x1af4", "0x1110", "resource2")
CHANNEL_LINE = GUEST_LINE.format("channel")
#: The plugin's source, beside this module (the marker instructions it watches for: testbed/counting.py).
PLUGIN_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "qemucount.c")
#: The guest's own temporary directory (a tmpfs: iperf3 keeps unlinked files open there, which 9p does not hold).
GUEST_TMP = "/run/itb-tmp"


class QemuError(BackendError):
    """QEMU could not be found, booted its kernel, or did not report the command's status."""


@dataclasses.dataclass(frozen=True)
class QemuSpec:
    """What to run in the counted guest and with which kernel (as :class:`testbed.backends.uml.UmlSpec`)."""

    command: tuple[str, ...]
    kernel: qemukernel.QemuKernel
    cwd: str
    mem: str = "2G"
    timeout_s: float | None = None
    env: tuple[tuple[str, str], ...] = ()
    boot_modules: tuple[str, ...] = ()
    on_demand_modules: bool = False
    #: the guest asks the host for its instruction count (:class:`CountingMeter`)
    cpu_meter: bool = True
    #: the host CPU QEMU runs on (None: wherever the host's scheduler puts it; the counts do not depend on it)
    host_cpu: int | None = None
    stdout_tty: bool = False
    stderr_tty: bool = False
    interactive: bool = False
    channel: bool = False
    cpu_model: str = CPU_MODEL

    def __post_init__(self) -> None:
        guest.check_spec(self.command, self.mem, self.timeout_s, self.cwd)

    def lines(self) -> list[tuple[str, str]]:
        """The guest's lines to the host this run has, in their order on the bus."""
        wanted = {"terminal": self.interactive, "stdout": not self.interactive, "stderr": not self.interactive,
                  "meter": self.cpu_meter, "channel": self.channel}
        return [(name, device) for name, device in LINES if wanted[name]]


def plan_init_script(spec: QemuSpec, workdir: str) -> str:
    """The guest's init (PID 1) as shell text.  Pure: the tests read it."""
    lines = guest.plan_base_lines("QEMU (counted)", "itb-qemu")
    # the host's /dev is a directory of the host's files here: the guest mounts its own first
    lines.insert(lines.index("mount -t sysfs sysfs /sys") + 1, "mount -t devtmpfs dev /dev")
    lines += [
        # no periodic writeback: what the guest writes goes to the host when it syncs (a record's fsync, the end),
        # never in the middle of a measured window
        "echo 0 > /proc/sys/vm/dirty_writeback_centisecs",
        "echo 8640000 > /proc/sys/vm/dirty_expire_centisecs",
        # and none of the memory manager's background work, whose timers fall into some windows and not others:
        # huge pages collapsed behind a process's back, proactive compaction, per-CPU statistics folded each second
        "echo never > /sys/kernel/mm/transparent_hugepage/enabled",
        "echo never > /sys/kernel/mm/transparent_hugepage/defrag",
        "echo 0 > /proc/sys/vm/compaction_proactiveness",
        "echo 120 > /proc/sys/vm/stat_interval",
        f"mkdir -p {GUEST_TMP}",
        # each line to the host by its name, /dev/itb.meter ...: a serial port by the name it carries; a console
        # (a tty, hvcN) by its place among the consoles, which the kernel numbers in the order of the bus
        "for p in /sys/class/virtio-ports/*; do",
        '  [ -e "$p/name" ] && ln -sf "/dev/${p##*/}" "/dev/$(cat "$p/name")"',
        "done",
    ]
    consoles = [name for name, device in spec.lines() if device == "virtconsole"]
    lines += [f"ln -sf /dev/hvc{n} {GUEST_LINE.format(name)}" for n, name in enumerate(consoles)]
    if spec.cpu_meter:
        vendor, device, bar = IVSHMEM
        lines += [  # the plugin's page, which the meter reads with a load: its memory decoding on, then linked
            "for d in /sys/bus/pci/devices/*; do",
            f'  if [ "$(cat "$d/vendor")" = {vendor} ] && [ "$(cat "$d/device")" = {device} ]; then',
            f'    echo 1 > "$d/enable"; ln -sf "$d/{bar}" {counting.GUEST_COUNTS}',
            "  fi",
            "done",
        ]
    lines += guest.plan_module_lines(spec.kernel.modules_dir, spec.boot_modules, workdir, spec.on_demand_modules)
    ttys = [GUEST_LINE.format(name) for name, device in spec.lines() if device == "virtconsole"]
    lines += [f"stty -F {line} raw -echo -onlcr" for line in ttys if not line.endswith("terminal")]
    if spec.interactive:
        env = dict(spec.env)
        size = f" rows {env['LINES']} cols {env['COLUMNS']}" if "LINES" in env and "COLUMNS" in env else ""
        lines.append(f"stty -F {GUEST_LINE.format('terminal')} sane{size}")
    lines += guest.plan_env_lines(spec.env, workdir)
    lines.append(f"export TMPDIR={GUEST_TMP}")
    lines += guest.plan_command_lines(spec.command, spec.cwd, workdir,
                                      ((GUEST_LINE.format("stdout"), spec.stdout_tty),
                                       (GUEST_LINE.format("stderr"), spec.stderr_tty)),
                                      terminal=GUEST_LINE.format("terminal") if spec.interactive else None)
    return "\n".join(lines) + "\n"


def plan_command_line(spec: QemuSpec, workdir: str, name: str, fds: dict[str, int], plugin: str) -> list[str]:
    """The host command line that boots the guest: ``fds`` are the host's sockets QEMU takes over (``console``
    and one per line of :meth:`QemuSpec.lines`, the interactive terminal aside, which is this process's standard
    input and output); ``plugin`` counts the instructions into ``<workdir>/counts``; ``name`` marks the process
    for ``clean``."""
    append = " ".join((*BOOT_ARGS, f"{qemukernel.INIT_PARAM}={workdir}/init.sh"))
    pinned = ["taskset", "-c", str(spec.host_cpu)] if spec.host_cpu is not None else []
    cmd = [
        *pinned,
        # if the process that booted the guest dies (even by SIGKILL), the kernel kills QEMU too
        "setpriv", "--pdeathsig", "KILL", "--",
        QEMU, "-name", name,
        "-accel", "tcg,thread=single", "-icount", ICOUNT, "-cpu", spec.cpu_model, "-smp", "1", "-m", spec.mem,
        "-machine", "pc", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-kernel", spec.kernel.path, "-initrd", f"{workdir}/initrd.cpio", "-append", append,
        "-virtfs", f"local,path=/,mount_tag={qemukernel.ROOT_TAG},security_model=passthrough,multidevs=remap,"
                   f"id={qemukernel.ROOT_TAG}",
        "-chardev", f"socket,id=console,fd={fds['console']}", "-serial", "chardev:console",
        "-plugin", f"{plugin},counts={workdir}/counts",
        # the same page in the guest: ivshmem's memory is the file the plugin writes
        "-object", f"memory-backend-file,id=itbcounts,mem-path={workdir}/counts,size={mmap.PAGESIZE},share=on",
        "-device", "ivshmem-plain,memdev=itbcounts",
        "-device", "virtio-serial-pci,id=lines",
    ]
    for nr, (line, device) in enumerate(spec.lines()):
        chardev = "stdio,signal=off" if line == "terminal" else f"socket,fd={fds[line]}"
        cmd += ["-chardev", f"{chardev},id={line}",
                "-device", f"{device},bus=lines.0,nr={nr + 1},chardev={line},name=itb.{line}"]
    return cmd


def build_plugin(say: Callable[[str], None] = lambda _message: None) -> str:
    """The counting plugin, compiled with the host's gcc once per source and QEMU version (cached); its path.
    :class:`QemuError` (one line) when it cannot be built."""
    with open(PLUGIN_SOURCE, "rb") as f:
        source = f.read()
    key = hashlib.sha256(source + (qemu_version() or "").encode()).hexdigest()[:12]
    target = os.path.join(qemukernel.qemu_dir(), f"plugin-{key}", "itb-count.so")
    if os.path.exists(target):
        return target
    if not shutil.which("gcc"):
        raise QemuError("the counted backend's plugin needs gcc to be built: apt-get install gcc libc6-dev "
                        "(or sudo ./run install)")
    say(f"building the counted backend's plugin ({target})")
    os.makedirs(qemukernel.qemu_dir(), exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".plugin-", dir=qemukernel.qemu_dir())
    try:
        done = subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-Wall", "-Werror", "-o",
                               os.path.join(staging, os.path.basename(target)), PLUGIN_SOURCE],
                              capture_output=True, text=True)
        if done.returncode:
            raise QemuError(f"gcc could not build {PLUGIN_SOURCE}: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
        publish_directory(staging, os.path.dirname(target))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def serve_counts(line: socket.socket, counts_path: str) -> None:
    """The host's end of the counted meter: each line the guest sends is answered at once with ``<instructions
    at its last marker> <markers so far> <host monotonic ns>``, read from the plugin's page.  Ends when the
    guest's end closes."""
    with open(counts_path, "rb") as f:
        page = mmap.mmap(f.fileno(), counting.PAGE.size, prot=mmap.PROT_READ)
    buffer = b""
    try:
        while True:
            chunk = line.recv(4096)
            if not chunk:
                return
            buffer += chunk
            while b"\n" in buffer:
                _, buffer = buffer.split(b"\n", 1)
                _count, marked, marks, _at, _unix = counting.PAGE.unpack(page[:counting.PAGE.size])
                line.sendall(f"{marked} {marks} {time.monotonic_ns()}\n".encode())
    except OSError:
        return
    finally:
        page.close()


class CountingMeter(CpuMeter):
    """Inside a counted guest: the instructions it has executed, noted by the emulator's plugin at a marker.

    :meth:`sample` executes the marker instruction, where the plugin notes its count and the host's clock in its
    page, then reads the page where QEMU maps it into the guest (:class:`testbed.counting.Marking`): exact, at
    that instruction of the guest, and with no wait on the host in between, so nothing of the host's latency
    falls into a window (a wait would be idle time over which the guest's clock skips ahead to its next timers,
    a busier host's wait more of them).  Complete: the kernel, its softirqs, every process.  At ``-icount shift=0`` an
    instruction is a nanosecond of the guest's clock, so the meter's ``cpu_ns`` are instructions and its clock
    is the guest's own (the busy share is instructions over the guest's time).  The host's clock at the marker
    comes with each reading (``wall_ns``): what the window cost in wall time.  Without the device (a kernel with
    no PCI), the meter asks the host over its line instead.
    """

    method = ("instructions the counted guest executed, all of its work, counted by the emulator's plugin and read "
              "at a marker instruction the meter executes")
    clock = INSTRUCTIONS

    def __init__(self, path: str, counts: str = counting.GUEST_COUNTS) -> None:
        self.cpus = 1.0  # one vCPU
        self._marking = counting.marking(counts)
        self._line = None if self._marking is not None else guest.HostLine(path)
        self._marks = counting.Marks()  # the line's readings (the page's count their own)

    def read(self) -> tuple[int, int]:
        sample = self.sample()
        return sample.cpu_ns, sample.clock_ns

    def sample(self) -> CpuSample:
        at = time.monotonic_ns()
        if self._marking is not None:
            count, others, host_ns, _unix_ns = self._marking.mark()
        else:
            count, marks, host_ns = self._line.ask(first=counting.marker)
            others = self._marks.others(marks)
        if others:
            raise BackendError(f"the emulator's counting plugin saw {others + 1} markers for one reading")
        # the count is the marker's; the clock's reading just before it stands for when (the guest's clock counts
        # the same instructions)
        return CpuSample(count, at, (at, at), wall_ns=host_ns)

    def close(self) -> None:
        if self._line is not None:
            self._line.close()


def qemu_version() -> str | None:
    """QEMU's version (``7.2.22``), None when it is not installed."""
    if not shutil.which(QEMU):
        return None
    out = subprocess.run([QEMU, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"version (\S+)", out)
    return m.group(1) if m else None


def _bridge(sock: socket.socket, fds: tuple[int, int]) -> list[threading.Thread]:
    """Threads that join ``sock`` to a channel's two pipe ends (read by the guest, written by the guest)."""
    to_guest, from_guest = os.dup(fds[0]), os.dup(fds[1])  # the caller closes its own copies after the run

    def inward() -> None:
        with contextlib.suppress(OSError):
            while chunk := os.read(to_guest, 65536):
                sock.sendall(chunk)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)

    def outward() -> None:
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                os.write(from_guest, chunk)
        with contextlib.suppress(OSError):
            os.close(from_guest)

    return [threading.Thread(target=inward, daemon=True), threading.Thread(target=outward, daemon=True)]


def run(spec: QemuSpec, stdout: BinaryIO | None = None, stderr: BinaryIO | None = None,
        run_id: str | None = None, channel_fds: tuple[int, int] | None = None) -> int:
    """Boot the counted guest, run ``spec.command`` in it, stream its output, return its exit status (124 when
    ``spec.timeout_s`` runs out).  The guest is killed on any exception, KeyboardInterrupt included."""
    if spec.channel != (channel_fds is not None):
        raise ValueError("a guest with a channel needs its descriptors (channel_fds), and only it")
    stdout = stdout or sys.stdout.buffer
    stderr = stderr or sys.stderr.buffer
    run_id = run_id or names.new_run_id()
    console: list[bytes] = []
    started = time.monotonic()
    with contextlib.ExitStack() as held:
        workdir = tempfile.mkdtemp(prefix=f"{names.PREFIX}-{run_id}-qemu-")
        held.callback(shutil.rmtree, workdir, ignore_errors=True)
        with open(f"{workdir}/owner", "w") as f:  # `clean` leaves a live owner's work directory alone
            f.write(f"{os.getpid()}\n")
        try:
            qemukernel.initramfs(spec.kernel, f"{workdir}/initrd.cpio")
        except (qemukernel.KernelUnavailableError, OSError) as e:
            raise QemuError(str(e)) from None
        guest.write_guest_files(workdir, plan_init_script(spec, workdir), spec.kernel.modules_dir, spec.env)
        counts = f"{workdir}/counts"
        with open(counts, "wb") as f:
            f.write(bytes(mmap.PAGESIZE))
        ours: dict[str, socket.socket] = {}
        theirs: dict[str, socket.socket] = {}
        for line in ("console", *(n for n, _ in spec.lines() if n != "terminal")):
            ours[line], theirs[line] = socket.socketpair()
            held.callback(ours[line].close)
        cmd = plan_command_line(spec, workdir, f"{names.PREFIX}-{run_id}-qemu",
                                {line: s.fileno() for line, s in theirs.items()}, build_plugin())
        log.debug("booting QEMU: %s", shlex.join(cmd))
        if spec.interactive:
            held.enter_context(guest.raw_terminal(QemuError))
        try:
            proc = subprocess.Popen(cmd, stdin=None if spec.interactive else subprocess.DEVNULL,
                                    stdout=None if spec.interactive else subprocess.PIPE,
                                    stderr=subprocess.PIPE if spec.interactive else subprocess.STDOUT,
                                    pass_fds=[s.fileno() for s in theirs.values()], start_new_session=True)
        except FileNotFoundError:
            raise QemuError(f"{QEMU} not found: install Debian's {QEMU_PACKAGE} (sudo ./run install)") from None
        held.callback(guest.kill_if_running, proc)
        for s in theirs.values():
            s.close()
        watcher, lifeline = guest.watch(proc.pid)
        held.callback(guest.stop_watcher, watcher, lifeline)
        held.callback(guest.kill_if_running, proc)  # before the watcher goes: the group is gone, its id may be reused
        own_output = proc.stderr if spec.interactive else proc.stdout

        def pumping(fd: int, dst: BinaryIO | None, keep: list[bytes] | None = None) -> threading.Thread:
            return threading.Thread(target=guest.pump, args=(os.dup(fd), dst, keep), daemon=True)

        threads = [pumping(own_output.fileno(), None, console), pumping(ours["console"].fileno(), None, console)]
        own_output.close()
        if not spec.interactive:
            threads += [pumping(ours["stdout"].fileno(), stdout), pumping(ours["stderr"].fileno(), stderr)]
        if spec.cpu_meter:
            threading.Thread(target=serve_counts, args=(ours["meter"], counts), daemon=True).start()
        if spec.channel:
            threads += _bridge(ours["channel"], channel_fds)
        for t in threads:
            t.start()
        try:
            proc.wait(timeout=spec.timeout_s)
        except subprocess.TimeoutExpired:
            guest.kill(proc)
            log.info("the guest's console before the time limit:\n%s", b"".join(console).decode(errors="replace"))
            stderr.write(f"ipsec-testbed: time limit of {spec.timeout_s:g} s reached; guest killed\n".encode())
            stderr.flush()
            return 124
        for t in threads[:4]:
            t.join(timeout=5)
        status = guest.read_status(workdir)
        if status is not None:
            return status
        raise QemuError(_death(b"".join(console).decode(errors="replace"), spec, proc.returncode,
                               time.monotonic() - started, booted=os.path.exists(f"{workdir}/started")))


#: Console lines that say why a guest died, and the cause in one line.
_CAUSES = (
    (re.compile(r"^qemu: |qemu-system-x86_64: .*(kernel|initrd)", re.I | re.M),
     "QEMU could not load the kernel image (above): give an x86-64 bzImage (make bzImage's arch/x86/boot/bzImage)"),
    (re.compile(r"qemu-system-x86_64: .*(CPU model|unable to find CPU|invalid|not supported|could not)", re.I),
     "QEMU refused its command line (above): check --uml-kernel and the CPU model"),
    (re.compile(r"VFS: Unable to mount root|No working init found|itb-initramfs: the host files"),
     "the kernel could not mount the host's files: it needs 9p over virtio (CONFIG_9P_FS, CONFIG_NET_9P_VIRTIO, "
     "CONFIG_VIRTIO_PCI) built in or as modules beside it"),
    (re.compile(r"Kernel panic"), "the kernel panicked (its console above says where)"),
)


def _death(console: str, spec: QemuSpec, returncode: int, seconds: float, booted: bool) -> str:
    """Why a guest ended without a status, for people: the console lines that say why, then the cause."""
    lines = [line for line in console.splitlines() if line.strip() and "\x1b" not in line]
    telling = [line for line in lines if re.search(r"panic|error|fail|unable|refused|qemu-system|itb-", line, re.I)]
    head = "the command's guest died before it finished" if booted else "the counted guest failed to boot"
    out = [f"{head} ({spec.kernel.describe()} in {QEMU} exited {returncode} after {seconds:.1f} s)"]
    shown = (telling or lines)[-12:]
    if shown:
        out += ["its console said:", *(f"  {line}" for line in shown)]
    cause = next((why for pattern, why in _CAUSES if pattern.search(console)), None)
    if cause:
        out.append(f"cause: {cause}")
    return "\n".join(out)


def choose_kernel(path: str | None = None) -> qemukernel.QemuKernel:
    """:func:`testbed.qemukernel.select`, its failure as a :class:`QemuError`."""
    try:
        return qemukernel.select(path)
    except qemukernel.KernelUnavailableError as e:
        raise QemuError(str(e)) from None


def cpu_model(crypto: str | None) -> str:
    """The ``-cpu`` model of a guest that runs the ``crypto`` drivers (:data:`CRYPTO_CPU`; None: the default)."""
    try:
        return CRYPTO_CPU[crypto or DEFAULT_CRYPTO]
    except KeyError:
        raise QemuError(f"no such crypto for a counted guest: {crypto!r} (one of {', '.join(CRYPTO_CPU)})") from None


def crypto_tag(crypto: str | None) -> str:
    """``crypto`` where it is not the default (what sets a run's figures or a calibration apart), else ""."""
    return "" if (crypto or DEFAULT_CRYPTO) == DEFAULT_CRYPTO else crypto


def guest_meta(crypto: str | None) -> dict:
    """How a counted guest runs, for its records' metadata: QEMU's version, ``-cpu``, the crypto and icount."""
    return {"qemu_version": qemu_version(), "qemu_cpu": cpu_model(crypto), "qemu_crypto": crypto or DEFAULT_CRYPTO,
            "qemu_icount": ICOUNT}


def build_spec(command: Sequence[str], kernel: str | None = None, modules: str | None = None, mem: str = "2G",
               timeout_s: float | None = None, cwd: str | None = None, interactive: bool = False,
               boot_modules: Sequence[str] = (), host_cpu: int | None = None, with_channel: bool = False,
               crypto: str | None = None) -> QemuSpec:
    """A :class:`QemuSpec` from command-line style options, finding the kernel."""
    chosen = choose_kernel(kernel)
    if modules:
        chosen = dataclasses.replace(chosen, modules_dir=os.path.abspath(modules))
    handed = handoff.outgoing().with_(kernel={**chosen.metadata(), **guest_meta(crypto)}, cpu_meter_tty=METER_LINE)
    env = {**dict(guest.guest_env(os.environ, QemuBackend.name)), handoff.ENV: handed.to_env()}
    env.pop(channel.ENV, None)
    if with_channel:
        env[channel.ENV] = CHANNEL_LINE
    return QemuSpec(command=tuple(command), kernel=chosen, cwd=os.path.abspath(cwd or os.getcwd()), mem=mem,
                    timeout_s=timeout_s, env=tuple(sorted(env.items())),
                    boot_modules=tuple(dict.fromkeys((*boot_modules, *EXTRA_MODULES))),
                    host_cpu=host_cpu, stdout_tty=sys.stdout.isatty(), stderr_tty=sys.stderr.isatty(),
                    interactive=interactive, channel=with_channel, cpu_model=cpu_model(crypto))


def _processes_named(name_prefix: str) -> list[tuple[int, str]]:
    """(pid, name) of QEMU processes whose ``-name`` starts with ``name_prefix``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            if args and os.path.basename(args[0]) == QEMU.encode() and b"-name" in args:
                value = args[args.index(b"-name") + 1].decode(errors="replace")
                if value.startswith(name_prefix) and value.endswith("-qemu"):
                    found.append((int(entry), value))
    return found


def _workdir_owner_alive(workdir: str) -> bool:
    try:
        with open(os.path.join(workdir, "owner")) as f:
            pid = int(f.read().strip())
    except FileNotFoundError:
        return time.time() - os.stat(workdir).st_mtime < 10  # just made: its owner is about to write the file
    except (OSError, ValueError):
        return False
    return os.path.exists(f"/proc/{pid}")


class QemuBackend(KernelBackend):
    """An x86-64 kernel in QEMU's TCG with an instruction-counting clock: costs a noisy machine cannot move."""

    name = "qemu"
    title = "QEMU (counted)"
    auto = False  # chosen by name: its figures are instructions, not time
    clock = INSTRUCTIONS
    note = ("the kernel runs in QEMU's emulator at one instruction per ns of its own clock: CPU costs are instructions "
            "(the same on every machine), throughput is what a 1-GIPS x86-64 CPU carries; cache misses and lock "
            "contention cost nothing here")
    #: tbf's timers are hrtimers on an x86-64 kernel, and the guest's clock never runs late
    shaper_burst_s = 0.004

    @classmethod
    def image_error(cls, path: str) -> str | None:
        return qemukernel.image_error(path)

    def unavailable(self) -> str | None:
        if not shutil.which(QEMU):
            return f"{QEMU} is not installed: apt-get install {QEMU_PACKAGE} (or sudo ./run install)"
        try:
            choose_kernel(self.options.kernel)
        except QemuError as e:
            return str(e)
        return None

    def lacks(self, needs: Needs, probe_host: Callable[[], Probe]) -> list[str]:
        try:
            kernel = choose_kernel(self.options.kernel)
        except QemuError:
            return []
        return ["wireguard"] if "wireguard" in needs.capabilities and kernel.configured("CONFIG_WIREGUARD") is False \
            else []

    def run(self, argv: Sequence[str], *, cwd: str | None = None, timeout_s: float | None = None,
            interactive: bool = False, modules: Sequence[str] = (), output: BinaryIO | None = None,
            cpu: int | None = None, speed_probe: bool = False, channel_fds: tuple[int, int] | None = None,
            keep_awake: bool = False) -> int:
        # speed_probe and keep_awake are for timed guests: a counted guest's figures do not move with the host
        spec = build_spec(argv, kernel=self.options.kernel, modules=self.options.modules, mem=self.options.mem,
                          timeout_s=timeout_s, cwd=cwd, interactive=interactive, boot_modules=modules, host_cpu=cpu,
                          with_channel=channel_fds is not None, crypto=self.options.crypto)
        if output is not None:
            spec = dataclasses.replace(spec, stdout_tty=False, stderr_tty=False)
        return run(spec, stdout=output, stderr=output, channel_fds=channel_fds)

    def leftovers(self) -> list[Leftover]:
        if in_a_guest():
            return []  # a guest (this backend's or UML's) sees the host's files but not its processes
        found = []
        for pid, name in _processes_named(f"{names.PREFIX}-"):
            run_id = name.removeprefix(f"{names.PREFIX}-").removesuffix("-qemu")
            workdirs = [w for w in os.listdir(tempfile.gettempdir()) if w.startswith(f"{names.PREFIX}-{run_id}-qemu-")]
            live = any(_workdir_owner_alive(os.path.join(tempfile.gettempdir(), w)) for w in workdirs)
            found.append(Leftover("QEMU guest", f"{name} (pid {pid})", live=live,
                                  remove=lambda p=pid: _kill_pid(p)))
        for workdir in sorted(os.listdir(tempfile.gettempdir())):
            path = os.path.join(tempfile.gettempdir(), workdir)
            if re.match(rf"^{names.PREFIX}-[0-9a-f]+-qemu-", workdir) and os.path.isdir(path):
                found.append(Leftover("work directory", path, live=_workdir_owner_alive(path),
                                      remove=lambda d=path: shutil.rmtree(d, ignore_errors=True)))
        return found

    def _kernel(self) -> dict:
        handed = handoff.received() if self.inside() else None
        if handed is not None and handed.kernel:
            return dict(handed.kernel)
        try:
            return {**choose_kernel(self.options.kernel).metadata(), **guest_meta(self.options.crypto)}
        except QemuError:
            return {}

    def metadata(self) -> dict:
        return {**super().metadata(), **self._kernel(), "kernel_release": platform.release(), "clock": INSTRUCTIONS}

    def label(self) -> str:
        kernel = self._kernel()
        version = kernel.get("kernel_version") or (platform.release() if self.inside() else "")
        return f"{self.title} {version}".rstrip()

    def describe_kernel(self) -> str:
        """The kernel a counted guest boots and how, for people (raises QemuError when there is none)."""
        kernel = choose_kernel(self.options.kernel)
        return (f"{kernel.describe()} in {QEMU} {qemu_version() or '(not installed)'}, TCG -icount {ICOUNT}, "
                f"-cpu {cpu_model(self.options.crypto)} ({self.options.crypto or DEFAULT_CRYPTO} crypto drivers): "
                f"{kernel.reason}")

    def cpu_meter(self) -> CpuMeter:
        handed = handoff.received()
        if handed is not None and handed.cpu_meter_tty:
            try:
                return CountingMeter(handed.cpu_meter_tty)
            except OSError as e:
                log.warning("the host's instruction meter is not reachable (%s): the guest's own /proc/stat is used", e)
        meter = ProcStatMeter()
        meter.method = "the guest's /proc/stat (ticks of its clock, which counts instructions)"
        return meter


def _kill_pid(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 9)

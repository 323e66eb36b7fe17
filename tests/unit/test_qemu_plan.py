"""The counted backend's plans (no root, no QEMU): its kernel's initramfs, the guest's init script, QEMU's command
line, the meter's protocol."""
import mmap
import os
import socket
import stat
import threading

import pytest

from testbed import backends, counting, qemukernel
from testbed.backends import guest, qemu

KERNEL = qemukernel.QemuKernel("/k/vmlinuz", "debian", "test", modules_dir="/k/lib/modules/6.1.0-1-amd64",
                               version="6.1.1-1", release="6.1.0-1-amd64", busybox="/k/bin/busybox")


def spec(**changes) -> qemu.QemuSpec:
    return qemu.QemuSpec(**{"command": ("python3", "-m", "cli.job"), "kernel": KERNEL, "cwd": "/work",
                            "env": (("A", "1"),), "boot_modules": ("esp4", "veth"), **changes})


def read_cpio(data: bytes) -> list[tuple[str, int, bytes]]:
    """An independent reader of the "newc" format, as the kernel's initramfs unpacker reads it."""
    out, at = [], 0
    while True:
        assert data[at:at + 6] == b"070701"
        fields = [int(data[at + 6 + 8 * i:at + 14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = fields[1], fields[6], fields[11]
        name = data[at + 110:at + 110 + namesize - 1].decode()
        at = (at + 110 + namesize + 3) & ~3
        body = data[at:at + size]
        at = (at + size + 3) & ~3
        if name == "TRAILER!!!":
            assert at == len(data)
            return out
        out.append((name, mode, body))


def test_the_initramfs_archive_holds_every_file_whole_and_is_the_same_each_time():
    files = [("bin", stat.S_IFDIR | 0o755, b""), ("bin/busybox", stat.S_IFREG | 0o755, b"\x7fELF" + bytes(1001)),
             ("init", stat.S_IFREG | 0o755, b"#!/bin/busybox sh\n")]
    data = qemukernel.plan_cpio(files)
    assert read_cpio(data) == files
    assert data == qemukernel.plan_cpio(files) and len(data) % 4 == 0


def test_the_modules_that_reach_the_host_load_after_what_they_need(tmp_path):
    (tmp_path / "modules.dep").write_text(
        "kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko kernel/fs/fscache/fscache.ko kernel/fs/netfs/netfs.ko\n"
        "kernel/net/9p/9pnet.ko:\nkernel/fs/fscache/fscache.ko: kernel/fs/netfs/netfs.ko\nkernel/fs/netfs/netfs.ko:\n"
        "kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko kernel/drivers/virtio/virtio_ring.ko\n"
        "kernel/drivers/virtio/virtio_ring.ko:\n")
    (tmp_path / "modules.builtin").write_text("kernel/drivers/virtio/virtio_pci.ko\n")
    order = qemukernel.modules_in_order(str(tmp_path), ["virtio_pci", "9pnet_virtio", "9p"])
    names = [os.path.basename(m) for m in order]
    assert names == ["virtio_ring.ko", "9pnet.ko", "9pnet_virtio.ko", "netfs.ko", "fscache.ko", "9p.ko"]
    with pytest.raises(qemukernel.KernelUnavailableError, match="virtio_console"):
        qemukernel.modules_in_order(str(tmp_path), ["virtio_console"])


def test_the_initramfs_init_mounts_the_host_files_and_hands_over():
    text = qemukernel.plan_initramfs_init(["kernel/a/virtio_ring.ko", "kernel/b/9p.ko"])
    lines = text.splitlines()
    assert lines[0] == "#!/bin/busybox sh"
    insmods = [line for line in lines if "insmod" in line]
    assert ["virtio_ring.ko" in insmods[0], "9p.ko" in insmods[1]] == [True, True]
    mount = next(line for line in lines if "mount -t 9p" in line)
    assert "cache=loose" in mount and qemukernel.ROOT_TAG in mount and lines.index(mount) > lines.index(insmods[-1])
    assert lines[-1] == 'exec /bin/busybox switch_root /root "$init"'


def test_an_x86_image_is_told_from_anything_else(tmp_path):
    image = tmp_path / "bzImage"
    image.write_bytes(bytes(0x202) + b"HdrS" + bytes(100))
    other = tmp_path / "linux"
    other.write_bytes(b"\x7fELF" + bytes(1000))
    assert qemukernel.image_error(str(image)) is None
    assert "not an x86 kernel image" in qemukernel.image_error(str(other))
    assert "no such file" in qemukernel.image_error(str(tmp_path / "none"))
    assert backends.booting(str(image)) is qemu.QemuBackend


def test_the_guest_init_mounts_its_own_dev_keeps_its_writes_and_names_its_lines():
    text = qemu.plan_init_script(spec(), "/tmp/itb-abc-qemu-x")
    lines = text.splitlines()
    dev = lines.index("mount -t devtmpfs dev /dev")
    assert dev < lines.index("mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts")
    assert "echo 0 > /proc/sys/vm/dirty_writeback_centisecs" in lines  # no writeback in a window
    assert "echo never > /sys/kernel/mm/transparent_hugepage/enabled" in lines
    assert f"export TMPDIR={qemu.GUEST_TMP}" in lines and "export A=1" in lines
    # stdout and stderr are serial ports (a console would spin on the host's every write), found by name
    assert not any(line.startswith("ln -sf /dev/hvc") for line in lines)
    assert "modprobe" in text and "esp4 veth" in text
    run = next(line for line in lines if line.startswith("python3 -m cli.job"))
    assert run == "python3 -m cli.job </dev/null 1>/run/itb-fd1 2>/run/itb-fd2"
    assert "cat /run/itb-fd1 >/dev/itb.stdout &" in lines
    assert lines[-3:] == ["sync", "echo o > /proc/sysrq-trigger", "sleep 60"]
    interactive = qemu.plan_init_script(spec(interactive=True), "/w").splitlines()
    assert "ln -sf /dev/hvc0 /dev/itb.terminal" in interactive
    assert any(line.startswith("setsid -w -c python3 -m cli.job </dev/itb.terminal") for line in interactive)


def test_qemu_counts_on_one_fixed_cpu_with_no_kvm_and_the_plugin():
    cmd = qemu.plan_command_line(spec(channel=True), "/w", "itb-abc123-qemu",
                                 {"console": 3, "stdout": 4, "stderr": 5, "meter": 6, "channel": 7}, "/p/count.so")
    joined = " ".join(cmd)
    assert cmd[cmd.index("-icount") + 1] == "shift=0,sleep=off"
    assert cmd[cmd.index("-cpu") + 1] == "Westmere" and cmd[cmd.index("-smp") + 1] == "1"
    assert cmd[cmd.index("-accel") + 1].startswith("tcg") and "kvm" not in joined
    assert cmd[cmd.index("-plugin") + 1] == "/p/count.so,counts=/w/counts"
    assert cmd[cmd.index("-name") + 1] == "itb-abc123-qemu"
    assert "-nodefaults" in cmd and "-no-reboot" in cmd
    assert "itb.init=/w/init.sh" in cmd[cmd.index("-append") + 1]
    devices = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-device"]
    assert [d.split(",")[0] for d in devices] == ["ivshmem-plain", "virtio-serial-pci"] + ["virtserialport"] * 4
    assert [d.split("name=")[1] for d in devices[2:]] == ["itb.stdout", "itb.stderr", "itb.meter", "itb.channel"]
    # the plugin's page is also the guest's ivshmem memory: the same file, shared
    backing = cmd[cmd.index("-object") + 1]
    assert backing.startswith("memory-backend-file,") and "mem-path=/w/counts" in backing and "share=on" in backing
    assert devices[0] == f"ivshmem-plain,memdev={backing.split('id=')[1].split(',')[0]}"
    assert "socket,fd=6,id=meter" in cmd and "socket,id=console,fd=3" in cmd
    assert cmd[:4] == ["setpriv", "--pdeathsig", "KILL", "--"]  # it dies with the process that booted it


def test_the_meter_reads_the_count_the_plugin_noted_at_the_marker(tmp_path):
    page = tmp_path / "counts"
    page.write_bytes(bytes(mmap.PAGESIZE))
    host, guest = socket.socketpair()
    threading.Thread(target=qemu.serve_counts, args=(host, str(page)), daemon=True).start()
    with open(page, "r+b") as f:
        shared = mmap.mmap(f.fileno(), counting.PAGE.size)
        shared[:counting.PAGE.size] = counting.PAGE.pack(1_000_500, 1_000_000, 7, 0, 0)
    guest.sendall(b"?\n")
    count, marks, host_ns = (int(x) for x in guest.makefile().readline().split())
    assert (count, marks) == (1_000_000, 7) and host_ns > 0  # the marker's count, not the running one
    guest.close()


def test_the_meter_reads_the_plugins_page_with_no_host_round_trip(tmp_path):
    # in the guest the page is the ivshmem device's memory; here the file itself, which no plugin updates
    page = tmp_path / "counts"
    page.write_bytes(counting.PAGE.pack(1_000_500, 1_000_000, 7, 123_456_789, 0).ljust(mmap.PAGESIZE, b"\0"))
    meter = qemu.CountingMeter(str(tmp_path / "no-line"), counts=str(page))
    try:
        sample = meter.sample()  # the marker is a NOP on the host
        assert (sample.cpu_ns, sample.wall_ns) == (1_000_000, 123_456_789)
        page.write_bytes(counting.PAGE.pack(2_000_900, 2_000_000, 8, 223_456_789, 0).ljust(mmap.PAGESIZE, b"\0"))
        assert meter.sample().cpu_ns == 2_000_000
        # a reading whose marker the plugin did not see (no plugin here) is refused, never taken for a count
        with pytest.raises(backends.BackendError, match="saw 0 markers"):
            meter.sample()
    finally:
        meter.close()


def test_a_guests_clock_is_the_hosts_time_the_plugin_noted_at_the_clock_marker(tmp_path):
    page = tmp_path / "counts"
    page.write_bytes(counting.PAGE.pack(1_000_500, 1_000_000, 7, 123, 1_800_000_000_250_000_000)
                     .ljust(mmap.PAGESIZE, b"\0"))
    marking = counting.Marking(str(page))
    assert marking.clock() == 1_800_000_000_250_000_000  # the clock marker is a NOP on the host
    # a clock reading notes no count: the meter's next reading sees no marker of another's in between
    assert marking.mark()[:2] == (1_000_000, 0)
    assert counting.MARKER != counting.CLOCK_MARKER and len(counting.MARKER) == len(counting.CLOCK_MARKER)
    assert counting.marking(str(tmp_path / "none")) is None  # no page (the host): the kernel's own clock


def test_the_guest_links_the_plugins_page_only_where_it_meters():
    text = qemu.plan_init_script(spec(), "/w")
    assert f'echo 1 > "$d/enable"; ln -sf "$d/resource2" {counting.GUEST_COUNTS}' in text
    assert '= 0x1af4 ] && [ "$(cat "$d/device")" = 0x1110 ]' in text
    assert counting.GUEST_COUNTS not in qemu.plan_init_script(spec(cpu_meter=False), "/w")


def test_the_marker_is_a_nop_the_plugin_knows():
    with open(qemu.PLUGIN_SOURCE) as f:
        source = f.read()
    assert "{0x0f, 0x1f, 0x84, 0x00, 'M', 'T', 'B', 'I'}" in source
    assert bytes([0x0F, 0x1F, 0x84, 0x00]) + b"MTBI" == counting.MARKER
    assert "{0x0f, 0x1f, 0x84, 0x00, 'C', 'T', 'B', 'I'}" in source  # the clock marker: the host's clocks only
    assert bytes([0x0F, 0x1F, 0x84, 0x00]) + b"CTBI" == counting.CLOCK_MARKER


def test_the_counted_backend_is_chosen_by_name_only():
    assert "qemu" in backends.names() and not qemu.QemuBackend.auto
    assert qemu.CountingMeter.clock == backends.base.INSTRUCTIONS != backends.HostBackend().cpu_meter().clock


def test_an_x86_image_goes_to_the_counted_backend_and_a_failed_boot_says_why(tmp_path):
    from experiments.job import KernelChoice
    from testbed import kernelsource

    image = tmp_path / "bzImage"
    image.write_bytes(bytes(0x202) + b"HdrS" + bytes(100))  # not executable: a bzImage need not be
    assert kernelsource.parse(str(image)).kind == "image"
    assert KernelChoice.named(str(image)).kernel == "qemu"
    # a name is UML's kernel, or with counted (regress --ab A B --kernel qemu) the counted backend's x86-64 one
    assert KernelChoice.named("6.12").kernel == "uml"
    assert (KernelChoice.named("6.12", True).kernel, KernelChoice.named("6.12", True).uml_kernel) == ("qemu", "6.12")
    assert KernelChoice.named("debian", True).kernel == "qemu" and KernelChoice.named("uml", True).kernel == "uml"
    assert "not a UML kernel" in backends.UmlBackend.image_error(str(image))
    why = qemu._death("qemu: linux kernel too old to load a ram disk\n", spec(), 1, 0.1, booted=False)
    assert why.splitlines()[0].startswith("the counted guest failed to boot")
    assert "linux kernel too old" in why and why.splitlines()[-1].startswith("cause: QEMU could not load the kernel")


def test_a_panic_that_arrives_a_byte_at_a_time_is_told_whole():
    # A serial console reaches the host a few bytes at a time: what is kept is the console's last bytes, so the
    # panic's own line and its cause survive the stack trace and the kernel-offset line after them.
    console = ("[    9.1] Run /init as init process\n"
               "[    9.2] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100\n"
               + "".join(f"[    9.2]  ? frame_{n}+0x10/0x20\n" for n in range(40))
               + "[    9.3] Kernel Offset: 0x1c000000 from 0xffffffff81000000 (relocation range: "
                 "0xffffffff80000000-0xffffffffbfffffff)\n")
    kept: list = []
    for byte in console.encode():
        guest.keep_tail(kept, bytes([byte]))
    assert b"".join(kept).decode() == console
    why = qemu._death(b"".join(kept).decode(), spec(), 0, 9.3, booted=False)
    assert "Attempted to kill init" in why
    assert why.splitlines()[-1] == "cause: the kernel panicked (its console above says where)"
    small: list = []
    for byte in console.encode():
        guest.keep_tail(small, bytes([byte]), limit=100)
    assert b"".join(small) == console.encode()[-100:]


def test_the_generic_crypto_guest_runs_the_same_cpu_model_without_the_features_the_x86_drivers_need(monkeypatch):
    from experiments.job import KernelChoice

    monkeypatch.setattr(qemu, "choose_kernel", lambda name: KERNEL)
    monkeypatch.setattr(qemu, "qemu_version", lambda: "7.2.22")
    x86 = qemu.build_spec(["true"], cwd="/")
    generic = qemu.build_spec(["true"], cwd="/", crypto="generic")
    assert x86.cpu_model == "Westmere" and generic.cpu_model == "Westmere,-aes,-pclmulqdq"
    cmd = qemu.plan_command_line(generic, "/w", "itb-abc123-qemu",
                                 {"console": 3, "stdout": 4, "stderr": 5, "meter": 6}, "/p/count.so")
    assert cmd[cmd.index("-cpu") + 1] == "Westmere,-aes,-pclmulqdq"
    # the records' metadata says which, and a default guest says x86
    assert qemu.guest_meta("generic")["qemu_crypto"] == "generic" and qemu.guest_meta(None)["qemu_cpu"] == "Westmere"
    with pytest.raises(qemu.QemuError, match="one of x86, generic"):
        qemu.cpu_model("arm")
    # the default is no mark: a run's history series and an injected slowdown's calibration are those of before
    from experiments.injection import kernel_identity

    assert (qemu.crypto_tag(None), qemu.crypto_tag("x86"), qemu.crypto_tag("generic")) == ("", "", "generic")
    assert kernel_identity("qemu") == kernel_identity("qemu", crypto="x86") != kernel_identity("qemu", crypto="generic")
    # an A/B's sides and a bisect's steps keep the choice
    choice = KernelChoice(kernel="qemu", qemu_crypto="generic")
    assert choice.options().crypto == "generic"
    side = choice.naming("6.12")
    assert (side.kernel, side.uml_kernel, side.qemu_crypto) == ("qemu", "6.12", "generic")


@pytest.mark.parametrize("kernel", ["uml", "host", "auto"])
def test_a_crypto_choice_for_a_kernel_that_is_not_the_counted_guests_is_refused_in_one_line(kernel):
    from experiments.job import KernelChoice

    # UML always runs the kernel's generic C code and the host kernel its own drivers: the choice would be ignored
    with pytest.raises(ValueError, match=f"^--qemu-crypto .* not of --kernel {kernel}, "):
        KernelChoice(kernel=kernel, qemu_crypto="generic")
    assert KernelChoice(kernel=kernel).qemu_crypto is None

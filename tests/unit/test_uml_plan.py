"""The UML guest's init script and command line, planned without booting anything."""

import os
import subprocess

import pytest

from experiments.doctor import kernel_modules
from testbed import names, umlkernel
from testbed.backends import GUEST_ENV, guest, uml


def spec(**kw):
    base = dict(command=("python3", "-c", "print('a b')"), kernel="/usr/bin/linux.uml",
                modules_dir="/usr/lib/uml/modules/6.1.176", cwd="/work/repo",
                env=(("FOO", "x y"), (GUEST_ENV, "uml")), boot_modules=kernel_modules())
    base.update(kw)
    return uml.UmlSpec(**base)


def test_init_runs_the_command_quoted_in_its_directory_and_reports_status():
    text = uml.plan_init_script(spec(), "/tmp/wd")
    lines = text.splitlines()
    assert lines[0] == "#!/bin/sh"
    assert "cd /work/repo ||" in text
    run = [line for line in lines if line.startswith("python3 ")]
    assert run == ["python3 -c 'print('\"'\"'a b'\"'\"')' </dev/null 1>/run/itb-fd1 2>/run/itb-fd2"]
    # status is written after the command and its output, atomically, then the guest powers off
    i = lines.index(run[0])
    assert lines[i + 1:i + 5] == ["rc=$?", "wait", "echo $rc > /tmp/wd/status.tmp",
                                  "mv /tmp/wd/status.tmp /tmp/wd/status"]
    assert "echo o > /proc/sysrq-trigger" in lines[i + 5:]
    assert "export FOO='x y'" in lines
    assert f"ulimit -Hn {uml.NOFILE}" in lines and uml.NOFILE >= 8192  # 200 road warriors' descriptors
    assert not any(line.startswith("ulimit -n") for line in lines)  # the soft limit stays (mnexec closes up to it)


def test_terminal_output_goes_straight_to_the_consoles_pipes_through_a_fifo():
    tty = uml.plan_init_script(spec(stdout_tty=True, stderr_tty=True), "/tmp/wd")
    assert "</dev/null 1>/dev/tty1 2>/dev/tty2" in tty and "mkfifo" not in tty
    piped = uml.plan_init_script(spec(stdout_tty=True), "/tmp/wd")
    assert "</dev/null 1>/dev/tty1 2>/run/itb-fd2" in piped
    assert "cat /run/itb-fd2 >/dev/tty2 &" in piped and "itb-fd1" not in piped


def test_modules_are_found_through_a_tmpfs_tree_and_the_kernel_uses_the_wrapper():
    text = uml.plan_init_script(spec(), "/tmp/wd")
    assert 'ln -s /usr/lib/uml/modules/6.1.176 "/run/itb-modules/lib/modules/$(uname -r)"' in text
    assert "echo /tmp/wd/modprobe > /proc/sys/kernel/modprobe" in text
    assert "esp4" in text and "esp6" in text and "xfrm_user" in text
    assert "-d /run/itb-modules" in uml.plan_modprobe_wrapper("/x")
    # the tmpfs on /run comes before anything is put under it
    assert text.index("tmpfs /run") < text.index("mkdir -p /run/itb-modules")


def test_builtin_kernel_loads_no_modules():
    text = uml.plan_init_script(spec(modules_dir=None), "/tmp/wd")
    assert "modprobe" not in text
    assert uml.plan_modprobe_wrapper(None).endswith("exit 1\n")


def test_command_line_uses_hostfs_root_and_the_given_console_fds():
    cmd = uml.plan_command_line(spec(mem="1G"), "/tmp/wd", "itb-abcdef", (7, 8, 9))
    assert cmd[:4] == ["setpriv", "--pdeathsig", "KILL", "--"]
    # the kernel is the first process of its own PID namespace, in its own mount, UTS, IPC and network ones
    contained = cmd[4:cmd.index("/usr/bin/linux.uml")]
    assert contained[0] == "unshare"
    assert {"--pid", "--fork", "--kill-child", "--mount", "--uts", "--ipc", "--net"} <= set(contained)
    # the namespace's first process is a shell that waits for the kernel (which must be able to signal itself,
    # as its panic does: a namespace's first process cannot), not one that execs it
    assert contained[contained.index("--") + 1:] == ["sh", "-c", '"$@"; exit $?', "sh"]
    assert (uml.kernel_status(134), uml.kernel_status(137), uml.kernel_status(0), uml.kernel_status(1)) == \
        (-6, -9, 0, 1)
    assert {"mem=1G", "rootfstype=hostfs", "rootflags=/", "rw", "init=/tmp/wd/init.sh",
            "con0=null,fd:7", "con1=null,fd:8", "con2=null,fd:9", "umid=itb-abcdef"} <= set(cmd)
    assert f"uml_dir={names.STATE_DIR}/uml/" in cmd
    assert not any(a.startswith("con3=") for a in cmd)


def test_the_cpu_meter_is_tty3_on_two_pipes_and_the_guest_starts_in_its_cgroup():
    cmd = uml.plan_command_line(spec(cpu_meter=True), "/tmp/wd", "itb-abcdef", (7, 8, 9), (10, 11),
                                "/sys/fs/cgroup/cpuacct/itb-abcdef")
    assert "con3=fd:10,fd:11" in cmd
    # the shell moves itself into the cgroup, then becomes the guest: every process of it is inside
    assert cmd[:4] == ["sh", "-c", 'echo $$ > "$0" && exec "$@"', "/sys/fs/cgroup/cpuacct/itb-abcdef/cgroup.procs"]
    assert cmd[4:9] == ["setpriv", "--pdeathsig", "KILL", "--", "unshare"]
    pinned = uml.plan_command_line(spec(host_cpu=1), "/tmp/wd", "itb-abcdef", (7, 8, 9))
    assert pinned[:5] == ["taskset", "-c", "1", "setpriv", "--pdeathsig"]
    text = uml.plan_init_script(spec(cpu_meter=True), "/tmp/wd")
    assert "stty -F /dev/tty3 raw -echo" in text
    assert "/dev/tty3" not in uml.plan_init_script(spec(), "/tmp/wd")


def test_the_guest_gets_one_hand_off_with_the_kernel_the_meter_and_the_probe(monkeypatch, tmp_path):
    from testbed import handoff

    job = {"kind": "sweep", "command": ["ipsec-testbed", "sweep"], "started_unix": 5.0}
    monkeypatch.setattr(handoff, "_outgoing", handoff.Handoff(job=job))
    monkeypatch.setenv(handoff.ENV, handoff.Handoff(job={"kind": "stale"}).to_env())  # inherited: never passed on
    kernel = tmp_path / "linux"
    kernel.write_text("")
    kernel.chmod(0o755)
    chosen = umlkernel.UmlKernel(str(kernel), "user", "--uml-kernel", "6.1.1")
    monkeypatch.setattr(uml, "choose_kernel", lambda k: chosen)
    monkeypatch.setattr(uml, "find_modules_dir", lambda kernel, modules: None)
    built = uml.build_spec(["true"], cpu_meter=True)
    env = dict(built.env)
    assert [k for k, _ in built.env].count(handoff.ENV) == 1
    handed = handoff.Handoff.from_env(env[handoff.ENV])
    assert handed.job == job
    assert handed.kernel["kernel_path"] == str(kernel) and handed.cpu_meter_tty == "/dev/tty3"
    probed = handoff.Handoff.from_env(dict(uml.handing(built, speed_probe="probe").env)[handoff.ENV])
    assert probed == handed.with_(speed_probe="probe")
    with pytest.raises(ValueError, match=handoff.ENV):
        handoff.Handoff.from_env('{"no_such_field": 1}')


@pytest.mark.parametrize("field,kw,match", [
    ("command", dict(command=()), "command"),
    ("mem", dict(mem="lots"), "mem"),
    ("timeout", dict(timeout_s=0), "timeout_s"),
    ("cwd", dict(cwd="relative"), "cwd"),
])
def test_bad_specs_name_the_field(field, kw, match):
    with pytest.raises(ValueError, match=match):
        spec(**kw)


def test_guest_env_marks_the_guest_and_drops_host_session_variables():
    env = dict(uml.guest_env({"PATH": "/usr/bin", "SSH_AUTH_SOCK": "/s", "LANG": "C.UTF-8",
                              "BAD-NAME": "x", "SUDO_USER": "me"}))
    assert env[GUEST_ENV] == "uml"
    assert env["LANG"] == "C.UTF-8"
    assert "SSH_AUTH_SOCK" not in env and "BAD-NAME" not in env and "SUDO_USER" not in env
    assert env["PATH"].endswith(":/usr/bin") and env["PATH"].split(":")[0].endswith("bin")


def test_missing_kernel_is_a_one_line_error(tmp_path):
    with pytest.raises(uml.UmlError, match="does not exist"):
        uml.find_kernel(str(tmp_path / "linux"))


def test_modules_dir_accepts_a_release_dir_or_its_parent(tmp_path):
    rel = tmp_path / "lib" / "modules" / "6.9.0"
    rel.mkdir(parents=True)
    (rel / "modules.dep").write_text("")
    assert uml.find_modules_dir("/k", str(rel)) == str(rel)
    assert uml.find_modules_dir("/k", str(tmp_path / "lib" / "modules")) == str(rel)
    (tmp_path / "lib" / "modules" / "6.10.0").mkdir()
    (tmp_path / "lib" / "modules" / "6.10.0" / "modules.dep").write_text("")
    with pytest.raises(uml.UmlError, match="several kernels"):
        uml.find_modules_dir("/k", str(tmp_path / "lib" / "modules"))
    with pytest.raises(uml.UmlError, match="no kernel modules"):
        uml.find_modules_dir("/k", str(tmp_path))


def test_a_channel_is_tty4_on_two_pipes_raw_and_named_in_the_guests_environment(monkeypatch, tmp_path):
    from testbed import channel

    cmd = uml.plan_command_line(spec(channel=True), "/tmp/wd", "itb-abcdef", (7, 8, 9), channel_fds=(12, 13))
    assert "con4=fd:12,fd:13" in cmd
    assert not any(a.startswith("con4=") for a in uml.plan_command_line(spec(), "/tmp/wd", "itb-abcdef", (7, 8, 9)))
    assert "stty -F /dev/tty4 raw -echo" in uml.plan_init_script(spec(channel=True), "/tmp/wd")
    assert "/dev/tty4" not in uml.plan_init_script(spec(), "/tmp/wd")
    kernel = tmp_path / "linux"
    kernel.write_text("")
    kernel.chmod(0o755)
    monkeypatch.setattr(uml, "choose_kernel", lambda k: umlkernel.UmlKernel(str(kernel), "user", "--uml-kernel", "6.1"))
    monkeypatch.setattr(uml, "find_modules_dir", lambda kernel, modules: None)
    monkeypatch.setenv(channel.ENV, "fd:3,4")  # the host's own, inherited: never passed on
    assert channel.ENV not in dict(uml.build_spec(["true"]).env)
    with_channel = uml.build_spec(["true"], with_channel=True)
    assert with_channel.channel and dict(with_channel.env)[channel.ENV] == "/dev/tty4"
    # the descriptors and the spec go together: one without the other is a mistake, caught before a boot
    with pytest.raises(ValueError, match="channel"):
        uml.run(with_channel, channel_fds=None)


def test_booting_a_kernel_of_the_cache_notes_when_it_was_last_used(monkeypatch, tmp_path):
    from testbed import kernelbuild

    for origin in ("recipe", "user"):
        d = tmp_path / origin
        d.mkdir()
        (d / "linux").write_text("")
        chosen = umlkernel.UmlKernel(str(d / "linux"), origin, "")
        monkeypatch.setattr(uml, "choose_kernel", lambda k, chosen=chosen: chosen)
        monkeypatch.setattr(uml, "find_modules_dir", lambda kernel, modules: None)
        uml.build_spec(["true"], cpu_meter=False)
        built = kernelbuild.Built(str(d / "linux"), {})
        assert (kernelbuild.last_used(built) is not None) == (origin == "recipe")  # an image of the user's: untouched


def test_the_guests_path_starts_with_links_to_the_commands_where_path_finds_them_first(tmp_path):
    def command(where, name, mode=0o755):
        os.makedirs(where, exist_ok=True)
        path = os.path.join(where, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(path, mode)
        return path

    first, second, venv_bin, later = (str(tmp_path / d) for d in ("first", "second", "venv/bin", "later"))
    ip = command(first, "ip")
    command(second, "ip")                      # shadowed by first's, as on PATH
    tc = command(second, "tc")
    command(first, "notes", 0o644)             # not executable: PATH passes it by
    notes = command(second, "notes")
    command(venv_bin, "python")                # a venv's: run from its own bin, not through a link
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    os.makedirs(os.path.join(first, "subdir"))
    command(later, "late")                     # after a relative entry: left to PATH
    links = str(tmp_path / "wd" / "commands")
    path = ":".join([str(tmp_path / "missing"), first, venv_bin, second, ".", later])
    assert guest.link_commands(path, links) == 4
    assert {n: os.readlink(os.path.join(links, n)) for n in os.listdir(links)} == {"ip": ip, "tc": tc, "notes": notes}

    text = uml.plan_init_script(spec(env=(("PATH", "/usr/bin:/bin"), (GUEST_ENV, "uml"))), "/tmp/wd").splitlines()
    exports = [line for line in text if line.startswith("export PATH=")]
    assert exports == ["export PATH=/usr/bin:/bin", 'export PATH=/tmp/wd/commands:"$PATH"']


def test_a_module_that_fails_to_load_is_tried_again_alone_not_every_module_with_it(tmp_path):
    """One modprobe loads every boot module; then only those /sys/module lacks are tried one by one and named
    (in a counted guest jitterentropy_rng always fails: it used to send all 60 through modprobe again)."""
    sysmod, log, console = tmp_path / "sys-module", tmp_path / "modprobe.log", tmp_path / "console"
    sysmod.mkdir()
    fake = tmp_path / "modprobe"  # loads what it is given (as /sys/module shows it) but jitterentropy_rng
    fake.write_text(f'#!/bin/sh\necho "$*" >> {log}\nst=0\nfor a; do case "$a" in -*|{tmp_path}*) ;; '
                    f'jitterentropy_rng) st=1;; *) mkdir -p {sysmod}/$(echo $a | tr - _);; esac; done\nexit $st\n')
    fake.chmod(0o755)
    lines = guest.plan_module_lines("/mods", ["esp4", "ghash-generic", "jitterentropy_rng", "veth"], "/tmp/wd",
                                    on_demand=False)
    loading = [line for line in lines if "ln -s" not in line and "/proc/sys" not in line and "mkdir" not in line]
    script = "\n".join(loading).replace("/sys/module", str(sysmod)).replace("/sbin/modprobe", str(fake)) \
        .replace("/run/itb-modules", str(tmp_path)).replace("/dev/console", str(console))
    subprocess.run(["sh", "-c", script], check=True)
    calls = log.read_text().splitlines()
    assert calls == [f"-q -a -d {tmp_path} esp4 ghash-generic jitterentropy_rng veth",
                     f"-d {tmp_path} jitterentropy_rng"]
    assert console.read_text() == "itb-init: module jitterentropy_rng not loaded\n"
    assert sorted(p.name for p in sysmod.iterdir()) == ["esp4", "ghash_generic", "veth"]

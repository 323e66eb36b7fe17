"""``ipsec-testbed test``: the whole test suite, with the ESP tests on a kernel that has ESP.

1. ``tests/unit`` on the host (no root needed; beside the guests when there are guests);
2. ``tests/host`` on the host, as root: booting UML, exit statuses, ``clean`` after SIGKILL;
   :data:`HOST_ALONE` first, before any guest boots (``clean`` removes every guest);
3. ``tests/integration`` on the host kernel when it passes the ESP and WireGuard probes, otherwise
   inside User-Mode Linux (the project's kernel where Debian's, which has no WireGuard, would be chosen:
   built on first use): on a host with two CPUs or more, in two guests, each pinned to
   a CPU of its own, both started once :data:`HOST_ALONE` is done: the first shares its CPU with the other
   host tests, which run beside it (most of what each of them does is waiting), :data:`HOST_ANY_CPU` last and on
   either CPU; the second (the modules not in :data:`FIRST_GUEST`) shares its CPU with the unit tests, which end
   long before its modules that measure begin.  The unit tests' and the guests' output is shown when they are
   done.  If no kernel with ESP can be had the suite fails: a run that could not exercise ESP never passes.

The last line is the combined count, ``tests: N passed, N failed``.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence

from cli.options import backend_options
from testbed import backends, historyplace
from testbed.capabilities import ESP_NEEDS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: A generous bound for the integration suite in a guest (CI allows 90 minutes in all).
GUEST_TIMEOUT_S = 50 * 60
#: The integration modules of the first of two guests, which runs on one CPU beside the host tests: the ESP
#: data path profile by profile, the point classes, the path MTUs, the latency probe, the topologies and WireGuard;
#: the second guest, on the other CPU beside the unit tests, takes the rest: the ESP path end to end, shaping, the
#: sweep's faults, the reproductions, the regression gate and keying by IKE.  Balanced on seconds per module from
#: fresh clones on this project's two-CPU machine (the suite prints them; docs/testing.md, "Where the time goes"):
#: at b14169d the host tests beside the first guest took 584 s, the first guest 519 s, the second 496 s, with
#: test_shaping and test_esp_path (36 s) still in the first.
FIRST_GUEST = ("test_profiles.py", "test_bad_input.py", "test_bounds.py", "test_overhead_mtu.py",
               "test_latency_probe.py", "test_topologies.py", "test_wireguard.py")
#: Host test modules (or single tests, ``module::test``) that run alone, before any guest boots:
#: ``ipsec-testbed clean`` removes every guest, a running test suite's too, the speed probe needs a CPU beside its
#: guest's, the paired A/B needs the machine to itself, as `regress --ab` does when it refuses --allow-concurrent
#: (beside a guest of the suite on the other CPU, CI at 94ce95e measured an injected 20 % slowdown as
#: +9 %, 95 % CI 0.96..1.24, and the gate missed it), the XSAVE test builds a kernel (both CPUs, about 4 minutes,
#: once per machine), and the test that kills a UML kernel alone reads a race that load widens: the guest's
#: processes, resumed untraced when their tracer dies, run until the PID namespace's first process has seen the
#: kernel end; with the unit tests and a guest on its CPU one loop of the guest's shell ran (b8b8da6's fresh clone).
HOST_ALONE = ("test_clean.py", "test_speed_probe.py", "test_regress_ab.py", "test_xsave_boot.py",
              "test_uml_backend.py::test_a_kernel_that_dies_alone_takes_its_guests_processes_with_it")
#: How the banner of :data:`HOST_ALONE` says where they run.
ALONE = "alone, before any guest boots"
#: Host test modules that run last among the host tests beside the guests, on any CPU: the counted backend's,
#: whose emulator wants a whole CPU.  Pinned to the first guest's, they took 193 s (at 80672a7), against 98 s with
#: the machine to themselves; unpinned, the emulator also takes what the second guest leaves idle.  They come
#: after the others (never beside them: a test there reads what other runs leave on the host).
HOST_ANY_CPU = ("test_qemu_backend.py",)
#: What the integration suite needs of a kernel: ESP and WireGuard, which it tests beside IPsec.
SUITE_NEEDS = ESP_NEEDS.plus("wireguard")
#: How often a line says the guests are still at work.
HEARTBEAT_S = 60


@dataclasses.dataclass
class Counts:
    """Outcome counts of one pytest run, read from its JUnit XML."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.skipped

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.passed + other.passed, self.failed + other.failed, self.skipped + other.skipped)


def parse_junit(path: str) -> Counts:
    """Counts from a pytest ``--junitxml`` file; an absent file counts as nothing run."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return Counts()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    c = Counts()
    for s in suites:
        tests, fail = int(s.get("tests", 0)), int(s.get("failures", 0)) + int(s.get("errors", 0))
        skip = int(s.get("skipped", 0))
        c += Counts(tests - fail - skip, fail, skip)
    return c


def _cases(path: str) -> Iterator[tuple[str, str, float]]:
    """Each test case of a pytest ``--junitxml`` file (none where it is absent or broken): its module, its name
    and its seconds, setup and teardown included."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return
    for case in root.iter("testcase"):
        module = case.get("classname", "").split(".")
        yield (next((m for m in module if m.startswith("test_")), ".".join(module)), case.get("name", "?"),
               float(case.get("time", 0) or 0))


def module_seconds(path: str) -> dict[str, float]:
    """Seconds per test module in a pytest ``--junitxml`` file (what balancing the guests needs)."""
    out: dict[str, float] = {}
    for module, _, seconds in _cases(path):
        out[module] = out.get(module, 0.0) + seconds
    return out


def slowest(paths: Sequence[str], n: int) -> list[tuple[float, str]]:
    """The ``n`` slowest test cases in pytest ``--junitxml`` files: seconds and ``module::name``, slowest first."""
    cases = [(seconds, f"{module}::{name}") for path in paths for module, name, seconds in _cases(path)]
    return sorted(cases, key=lambda c: -c[0])[:n]


def print_slowest(out: str, n: int = 15) -> None:
    """The slowest tests of every stage run so far (docs/testing.md keeps a run's list)."""
    cases = slowest(sorted(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".xml")), n)
    if cases:
        print(f"the {len(cases)} slowest tests: " + ", ".join(f"{name} {t:.0f} s" for t, name in cases), flush=True)


def _banner(text: str) -> None:
    line = "=" * 78
    print(f"\n{line}\n{text}\n{line}", flush=True)


def _pytest_cmd(where: str | list[str], junit: str, extra: list[str]) -> list[str]:
    paths = [where] if isinstance(where, str) else list(where)
    return [sys.executable, "-m", "pytest", *paths, "-ra", "--junitxml", junit, *extra]


def run_suite(args: argparse.Namespace) -> int:
    """Run the suite as described in the module docstring; returns the exit status."""
    out = tempfile.mkdtemp(prefix="itb-test-")  # the stages' JUnit files
    # the suite's runs keep their figures in a history of the suite's own, never in the user's
    os.environ[historyplace.ENV] = os.path.join(out, "history.sqlite")
    try:
        return _run_stages(args, out)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _run_stages(args: argparse.Namespace, out: str) -> int:
    extra = list(args.pytest_args)
    if args.unit_only or os.geteuid() != 0:
        unit, unit_rc = _UnitTests(extra, out).run()
        if args.unit_only:
            return _summary(unit, unit_rc, None, 0, "not run (--unit-only)")
        print("ipsec-testbed test: the host and integration tests need root; run with sudo "
              "(or --unit-only)", file=sys.stderr)
        return _summary(unit, unit_rc, Counts(), 1, "NOT RUN: not root")
    from experiments import doctor

    host = _HostTests(extra, out) if backends.current().runs_here else None
    options = _with_wireguard(args, backend_options(args))
    choice = doctor.choose(args.kernel, SUITE_NEEDS, options=options)
    backend = choice.backend
    if backend is None or backend.runs_here:
        unit, unit_rc = _UnitTests(extra, out).run()
        host_rc = (host.run(HOST_ALONE, where=ALONE), host.run()) if host else (0,)
        host_rc = next((rc for rc in host_rc if rc), 0)
        unit, unit_rc = unit + (host.counts() if host else Counts()), unit_rc or host_rc
        if backend is None:
            _banner(f"ESP TESTS CANNOT RUN: no kernel with ESP and WireGuard is available.\n{choice.reason}\n"
                    "`sudo ./run install` installs Debian's user-mode-linux package, and builds the project's "
                    "UML kernel where Debian's cannot boot; or use a host kernel with CONFIG_INET_ESP/INET6_ESP "
                    "and CONFIG_WIREGUARD.")
            return _summary(unit, unit_rc, Counts(), 1, "NOT RUN: no ESP-capable kernel")
        _banner(f"integration tests with ESP on {backend.label()}\n({choice.reason})")
        integ_rc = subprocess.call(_pytest_cmd("tests/integration", f"{out}/integration.xml", extra), cwd=REPO)
        print_slowest(out)
        return _summary(unit, unit_rc, parse_junit(f"{out}/integration.xml"), integ_rc, backend.label())

    # Integration tests in guests.  The host tests that must have the machine to themselves run first,
    # alone; then everything else at once: with two CPUs the other host tests and the first guest side by
    # side on one of them (much of what they do is waiting: for a shaped link's window, a time limit, a
    # boot), and the unit tests, then the second guest's modules that measure, on the other.
    cpus = guest_cpus()
    groups = integration_groups(cpus)
    guests = Guests(backend, groups, cpus, out, extra)
    host_rc = host.run(HOST_ALONE, where=ALONE) if host else 0
    _banner(f"integration tests with ESP on {backend.label()}, in {len(groups)} "
            f"guest{'s' if len(groups) > 1 else ''}, beside the unit{' and host' if host else ''} tests"
            f"\n({choice.reason})")
    units = _UnitTests(extra, out)
    units.start(cpu=cpus[-1] if cpus else None)
    for i in range(len(groups)):
        guests.start(i)
    if host:
        host_rc = host.run(cpu=cpus[0] if cpus else None, exclude=HOST_ANY_CPU) or host_rc
        host_rc = host.run(HOST_ANY_CPU, where="after them, on any CPU") or host_rc
    unit, unit_rc = units.wait()
    rcs = guests.wait()
    unit, unit_rc = unit + (host.counts() if host else Counts()), unit_rc or host_rc
    integ = sum((parse_junit(f"{out}/integration{i}.xml") for i in range(len(groups))), Counts())
    integ_rc = next((rc for rc in rcs if rc not in (0, 5)), 0)
    print_slowest(out)
    return _summary(unit, unit_rc, integ, integ_rc, backend.label())


class _UnitTests:
    """``tests/unit`` on the host: in the foreground (:meth:`run`), or beside the other stages with its output
    kept until it is done (:meth:`start`, :meth:`wait`)."""

    def __init__(self, extra: list[str], out: str) -> None:
        self.junit, self.log = os.path.join(out, "unit.xml"), os.path.join(out, "unit.log")
        self.cmd = _pytest_cmd("tests/unit", self.junit, extra)
        self.proc: subprocess.Popen | None = None

    def run(self) -> tuple[Counts, int]:
        _banner("unit tests (tests/unit, host)")
        rc = subprocess.call(self.cmd, cwd=REPO)
        return parse_junit(self.junit), rc

    def start(self, cpu: int | None = None) -> None:
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(["taskset", "-c", str(cpu), *self.cmd] if cpu is not None else self.cmd,
                                         cwd=REPO, stdout=log, stderr=subprocess.STDOUT)

    def wait(self) -> tuple[Counts, int]:
        assert self.proc is not None
        rc = self.proc.wait()
        _banner("unit tests (tests/unit, host), beside the guests")
        with open(self.log, "rb") as f:
            sys.stdout.buffer.write(f.read())
        sys.stdout.flush()
        return parse_junit(self.junit), rc


def _with_wireguard(args: argparse.Namespace, options: backends.Options) -> backends.Options:
    """The guests' options with a kernel that has WireGuard (tests/integration/test_wireguard.py) where none is
    named and the automatic one (Debian's) has none: the project's, built here on first use as a sweep does."""
    from experiments import runner
    from testbed import kernelbuild, umlkernel

    if options.kernel or os.environ.get(umlkernel.KERNEL_ENV) or args.kernel == backends.HostBackend.name:
        return options
    name = runner.kernel_for_wireguard()
    if name is None:
        return options
    print("ipsec-testbed test: Debian's linux.uml has no WireGuard: the integration tests run on the project's "
          "kernel (--uml-kernel recipe), which has it", flush=True)
    try:
        kernelbuild.ensure(name)
    except kernelbuild.BuildError as e:
        print(f"ipsec-testbed test: {e}", file=sys.stderr)
        return options
    return dataclasses.replace(options, kernel=name)


class _HostTests:
    """``tests/host`` on the host, in parts: :data:`HOST_ALONE` and the others."""

    def __init__(self, extra: list[str], out: str) -> None:
        self.extra, self.out, self.parts = extra, out, 0

    def run(self, modules: Sequence[str] = (), cpu: int | None = None, exclude: Sequence[str] = (),
            where: str | None = None) -> int:
        """Run ``modules`` of tests/host (modules or ``module::test``), or with none all but :data:`HOST_ALONE` and
        ``exclude``; on host CPU ``cpu`` if given; the banner says they run ``where`` (by default, on that CPU).
        Their exit status (a ``-k`` that selects none of them is no failure)."""
        if modules:
            paths = [f"tests/host/{m}" for m in modules]
        else:
            paths = ["tests/host", *(f"--{'deselect' if '::' in m else 'ignore'}=tests/host/{m}"
                                     for m in (*HOST_ALONE, *exclude))]
        where = where or (f"on host CPU {cpu}" if cpu is not None else "the others")
        _banner(f"host tests (tests/host, root on the host kernel), {where}")
        cmd = _pytest_cmd(paths, f"{self.out}/host{self.parts}.xml", self.extra)
        self.parts += 1
        rc = subprocess.call(["taskset", "-c", str(cpu), *cmd] if cpu is not None else cmd, cwd=REPO)
        return 0 if rc == 5 and self.extra else rc

    def counts(self) -> Counts:
        return sum((parse_junit(f"{self.out}/host{i}.xml") for i in range(self.parts)), Counts())


def guest_cpus() -> list[int]:
    """The host CPUs the guests run on: the last two this process may use, or none to choose."""
    allowed = sorted(os.sched_getaffinity(0))
    return allowed[-2:] if len(allowed) >= 2 else []


def integration_groups(cpus: list[int]) -> list[list[str]]:
    """The integration modules per guest: all in one without two CPUs, else :data:`FIRST_GUEST` and the rest."""
    modules = sorted(m for m in os.listdir(os.path.join(REPO, "tests", "integration"))
                     if m.startswith("test_") and m.endswith(".py"))
    if len(cpus) < 2:
        return [["tests/integration"]]
    first = [f"tests/integration/{m}" for m in modules if m in FIRST_GUEST]
    second = [f"tests/integration/{m}" for m in modules if m not in FIRST_GUEST]
    return [g for g in (first, second) if g]


class Guests:
    """Each group's pytest in a guest of its own, each on a host CPU of its own when there are
    two; their output is kept and shown when all are done (a line a minute until then)."""

    def __init__(self, backend, groups: list[list[str]], cpus: list[int], out: str, extra: list[str]) -> None:
        self.backend, self.groups, self.out, self.extra = backend, groups, out, extra
        self.cpus = cpus if len(groups) > 1 else []
        self.rcs = [125] * len(groups)
        self.logs = [os.path.join(out, f"guest{i}.log") for i in range(len(groups))]
        self.threads: list[threading.Thread] = []
        self.started = time.monotonic()

    def start(self, i: int) -> None:
        thread = threading.Thread(target=self._one, args=(i,), daemon=True, name=f"guest{i + 1}")
        self.threads.append(thread)
        thread.start()

    def _one(self, i: int) -> None:
        from experiments import doctor

        cmd = _pytest_cmd(self.groups[i], f"{self.out}/integration{i}.xml", self.extra)
        begun = time.monotonic()
        with open(self.logs[i], "wb") as log:
            try:
                self.rcs[i] = self.backend.run(cmd, cwd=REPO, timeout_s=GUEST_TIMEOUT_S,
                                               modules=doctor.kernel_modules(),
                                               output=log if len(self.groups) > 1 else None,
                                               cpu=self.cpus[i] if self.cpus else None)
            except backends.BackendError as e:
                log.write(f"ipsec-testbed test: {e}\n".encode())
            log.write(f"guest {i + 1}: {time.monotonic() - begun:.0f} s\n".encode())

    def wait(self) -> list[int]:
        """Wait for every guest started; print their output; their exit statuses."""
        while any(t.is_alive() for t in self.threads):
            for t in self.threads:
                t.join(HEARTBEAT_S / len(self.threads))
            busy = [t.name[5:] for t in self.threads if t.is_alive()]
            if len(self.groups) > 1 and busy:
                print(f"  ... {time.monotonic() - self.started:.0f} s: guest{'s' if len(busy) > 1 else ''} "
                      f"{', '.join(busy)} still at work", flush=True)
        if len(self.groups) > 1:
            for i, group in enumerate(self.groups):
                cpu = f" (host CPU {self.cpus[i]})" if self.cpus else ""
                _banner(f"guest {i + 1} of {len(self.groups)}{cpu}: {' '.join(os.path.basename(m) for m in group)}")
                with open(self.logs[i], "rb") as f:
                    sys.stdout.buffer.write(f.read())
                sys.stdout.flush()
        for i in range(len(self.groups)):
            times = sorted(module_seconds(f"{self.out}/integration{i}.xml").items(), key=lambda kv: -kv[1])
            if times:
                print(f"guest {i + 1}, seconds per module: " + ", ".join(f"{m} {t:.0f}" for m, t in times))
        return self.rcs


def _summary(unit: Counts, unit_rc: int, integ: Counts | None, integ_rc: int, where: str) -> int:
    _banner("summary")
    print(f"unit + host tests: {unit.passed} passed, {unit.failed} failed, {unit.skipped} skipped"
          f" (exit {unit_rc})")
    ok = unit_rc == 0 and unit.total > 0
    total = unit
    if integ is not None:
        print(f"integration tests: {integ.passed} passed, {integ.failed} failed, {integ.skipped} skipped"
              f" (exit {integ_rc}); ESP tests ran on: {where}")
        ran_esp = integ.passed > 0
        if not ran_esp:
            print("ESP WAS NOT EXERCISED: no integration test passed on an ESP-capable kernel", file=sys.stderr)
        ok = ok and integ_rc == 0 and ran_esp
        total = total + integ
        # Tests that never ran still count against the suite.
        if integ.total == 0 and integ_rc != 0:
            total = total + Counts(failed=1)
    else:
        print(f"integration tests: {where}")
    skipped = f", {total.skipped} skipped" if total.skipped else ""
    print(f"tests: {total.passed} passed, {total.failed} failed{skipped}")
    return 0 if ok else 1

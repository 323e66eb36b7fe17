"""``ipsec-testbed test``: the whole test suite, with the ESP tests on a kernel that has ESP.

1. ``tests/unit`` on the host (no root needed);
2. ``tests/host`` on the host, as root: booting UML, exit statuses, ``clean`` after SIGKILL;
3. ``tests/integration`` on the host kernel when it passes the ESP probe, otherwise
   inside User-Mode Linux: on a host with two CPUs or more, in two guests at once, each
   pinned to a CPU of its own (:data:`FIRST_GUEST` in one, the other modules in the other),
   their output shown when both are done.  If no kernel with ESP can be had the suite
   fails: a run that could not exercise ESP never passes.

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
import xml.etree.ElementTree as ET

from testbed import backends
from testbed.options import backend_options

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: A generous bound for the integration suite in a guest (CI allows 90 minutes in all).
GUEST_TIMEOUT_S = 50 * 60
#: The integration modules of the first of two guests: the ESP data path profile by profile
#: (about half of the integration time); the sweeps, reproductions and topologies go to the
#: second.
FIRST_GUEST = ("test_profiles.py", "test_overhead_mtu.py", "test_esp_path.py", "test_bad_input.py")
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


def _banner(text: str) -> None:
    line = "=" * 78
    print(f"\n{line}\n{text}\n{line}", flush=True)


def _pytest_cmd(where: str | list[str], junit: str, extra: list[str]) -> list[str]:
    paths = [where] if isinstance(where, str) else list(where)
    return [sys.executable, "-m", "pytest", *paths, "-ra", "--junitxml", junit, *extra]


def run_suite(args: argparse.Namespace) -> int:
    """Run the suite as described in the module docstring; returns the exit status."""
    out = tempfile.mkdtemp(prefix="itb-test-")  # the stages' JUnit files
    try:
        return _run_stages(args, out)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _run_stages(args: argparse.Namespace, out: str) -> int:
    extra = list(args.pytest_args)
    _banner("unit tests (tests/unit, host)")
    unit_rc = subprocess.call(_pytest_cmd("tests/unit", f"{out}/unit.xml", extra), cwd=REPO)
    unit = parse_junit(f"{out}/unit.xml")
    if args.unit_only:
        return _summary(unit, unit_rc, None, 0, "not run (--unit-only)")

    if os.geteuid() != 0:
        print("ipsec-testbed test: the host and integration tests need root; run with sudo "
              "(or --unit-only)", file=sys.stderr)
        return _summary(unit, unit_rc, Counts(), 1, "NOT RUN: not root")
    if not backends.current().runs_here:
        host_rc = 0
    else:
        _banner("host tests (tests/host, root on the host kernel: guest boots, clean)")
        host_rc = subprocess.call(_pytest_cmd("tests/host", f"{out}/host.xml", extra), cwd=REPO)
        if host_rc == 5 and extra:  # a -k filter that selects no host test is not a failure
            host_rc = 0
    unit = unit + parse_junit(f"{out}/host.xml")
    unit_rc = unit_rc or host_rc
    from experiments import doctor

    choice = doctor.choose(args.kernel, options=backend_options(args))
    if choice.backend is None:
        _banner(f"ESP TESTS CANNOT RUN: no kernel with ESP is available.\n{choice.reason}\n"
                "Install Debian's user-mode-linux package (scripts/install.sh does) or use a kernel "
                "with CONFIG_INET_ESP/CONFIG_INET6_ESP.")
        return _summary(unit, unit_rc, Counts(), 1, "NOT RUN: no ESP-capable kernel")

    backend = choice.backend
    where = backend.label()
    if backend.runs_here:
        _banner(f"integration tests with ESP on {where}\n({choice.reason})")
        integ_rc = subprocess.call(_pytest_cmd("tests/integration", f"{out}/integration.xml", extra), cwd=REPO)
        return _summary(unit, unit_rc, parse_junit(f"{out}/integration.xml"), integ_rc, where)
    groups = integration_groups(guest_cpus())
    _banner(f"integration tests with ESP on {where}, in {len(groups)} guest{'s' if len(groups) > 1 else ''}"
            f"\n({choice.reason})")
    rcs = run_guests(backend, groups, out, extra)
    integ = sum((parse_junit(f"{out}/integration{i}.xml") for i in range(len(groups))), Counts())
    integ_rc = next((rc for rc in rcs if rc not in (0, 5)), 0)
    return _summary(unit, unit_rc, integ, integ_rc, where)


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


def run_guests(backend, groups: list[list[str]], out: str, extra: list[str]) -> list[int]:
    """Run each group's pytest in a guest of its own, at once, each on a CPU of its own; print
    each guest's output when all are done (a line a minute until then); their exit statuses."""
    import threading
    import time

    from experiments import doctor

    cpus = guest_cpus() if len(groups) > 1 else []
    rcs = [125] * len(groups)
    logs = [os.path.join(out, f"guest{i}.log") for i in range(len(groups))]

    def one(i: int) -> None:
        cmd = _pytest_cmd(groups[i], f"{out}/integration{i}.xml", extra)
        with open(logs[i], "wb") as log:
            try:
                rcs[i] = backend.run(cmd, cwd=REPO, timeout_s=GUEST_TIMEOUT_S, modules=doctor.kernel_modules(),
                                     output=log if len(groups) > 1 else None, cpu=cpus[i] if cpus else None)
            except backends.BackendError as e:
                log.write(f"ipsec-testbed test: {e}\n".encode())

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(groups))]
    started = time.monotonic()
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(HEARTBEAT_S / len(threads))
        if len(groups) > 1 and any(t.is_alive() for t in threads):
            busy = [str(i + 1) for i, t in enumerate(threads) if t.is_alive()]
            print(f"  ... {time.monotonic() - started:.0f} s: guest{'s' if len(busy) > 1 else ''} "
                  f"{', '.join(busy)} still at work", flush=True)
    if len(groups) > 1:
        for i, group in enumerate(groups):
            cpu = f" (host CPU {cpus[i]})" if cpus else ""
            _banner(f"guest {i + 1} of {len(groups)}{cpu}: {' '.join(os.path.basename(m) for m in group)}")
            with open(logs[i], "rb") as f:
                sys.stdout.buffer.write(f.read())
            sys.stdout.flush()
    return rcs


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

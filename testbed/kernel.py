"""What the running kernel can do, found by trying it, and which kernel the testbed uses.

:func:`probe` works in a throwaway namespace ``itb-<run>-doctor``: it adds and
removes one SA for every algorithm the testbed offers, puts each qdisc on a veth,
and looks for the tools the testbed runs.  Nothing is read from kernel config
files: a kernel built without ``CONFIG_INET_ESP`` fails the ESP probe however its
config is packaged.

:func:`choose_backend` turns a probe into a decision: the host kernel when it can
run the ESP data path, User-Mode Linux otherwise.  :func:`reexec_in_uml` is how a
script follows that decision without the user doing anything.
"""
from __future__ import annotations

import dataclasses
import errno
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
from typing import Optional, Sequence

from testbed import names, netns, uml

log = logging.getLogger(__name__)

KERNEL_CHOICES = ("auto", "host", "uml")
QDISCS = ("tbf", "htb", "netem")
#: What the testbed needs from a kernel to run its experiments at all.  Missing
#: single algorithms only rule out the profiles that use them.
REQUIRED = ("esp", "veth", "qdisc tbf")


@dataclasses.dataclass(frozen=True)
class Check:
    """One probed capability: ``group`` is kernel, ipsec, algorithm, qdisc, tool or uml."""

    group: str
    name: str
    ok: bool
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class Probe:
    """All checks of one kernel, and where they ran."""

    kernel_release: str
    in_uml: bool
    checks: tuple[Check, ...]

    def ok(self, name: str) -> bool:
        """Whether the check called ``name`` passed (False when it was not run)."""
        return any(c.ok for c in self.checks if c.name == name)

    def missing_required(self) -> list[str]:
        return [n for n in REQUIRED if not self.ok(n)]

    def to_json(self) -> dict:
        return {"kernel_release": self.kernel_release, "in_uml": self.in_uml,
                "checks": [dataclasses.asdict(c) for c in self.checks]}


@dataclasses.dataclass(frozen=True)
class Backend:
    """The decision: run on ``"host"`` or ``"uml"`` (None: neither is possible), and why."""

    name: Optional[str]
    reason: str


def in_uml() -> bool:
    """True inside a guest booted by :mod:`testbed.uml`."""
    return os.environ.get(uml.IN_UML_ENV) == "1"


def probe(run_id: Optional[str] = None, tools: bool = True) -> Probe:
    """Probe the running kernel for real (needs root); see the module docstring."""
    run_id = run_id or names.new_run_id()
    checks: list[Check] = []
    name = names.netns_name(run_id, "doctor")
    try:
        netns.create(name)
    except OSError as e:
        checks.append(Check("kernel", "netns", False, f"cannot create a network namespace: {e}"))
        return Probe(platform.release(), in_uml(), tuple(checks + (_tool_checks() if tools else [])))
    try:
        checks.append(Check("kernel", "netns", True, "network namespaces"))
        checks.append(Check("kernel", "ipv6", os.path.isdir("/proc/sys/net/ipv6"),
                            "IPv6 stack" if os.path.isdir("/proc/sys/net/ipv6") else "no IPv6 in this kernel"))
        checks += _ipsec_checks(name)
        checks += _link_checks(name, run_id)
    finally:
        netns.delete(name)
    if tools:
        checks += _tool_checks()
    return Probe(platform.release(), in_uml(), tuple(checks))


#: One representative algorithm per protocol, probed for IPv4 and IPv6 (esp4 and
#: esp6 are separate modules, and so are ah4/ah6 and ipcomp/ipcomp6).
#: ESP is probed with null+HMAC-SHA1: the kernel looks up the algorithms before the
#: protocol, so an AES-GCM probe on a kernel without GCM would hide a missing esp4.
PROTOCOL_PROBES = (("esp", "ESP", "hmac-sha1-96"), ("ah", "AH", "hmac-sha1-96"),
                   ("comp", "IPComp", "deflate"))


def _ipsec_checks(ns: str) -> list[Check]:
    from ipsec.algorithms import ALGORITHMS
    from ipsec.sa import probe_spec
    from ipsec.xfrm import XfrmError, XfrmSocket

    try:
        xs = XfrmSocket(netns=ns)
    except OSError as e:
        return [Check("ipsec", "xfrm_user", False, f"no NETLINK_XFRM socket: {e} (CONFIG_XFRM_USER)")]

    def attempt(spec) -> tuple[bool, str]:
        try:
            xs.add_sa(spec)
            xs.del_sa(spec.dst, spec.spi, spec.proto)
            return True, ""
        except XfrmError as e:
            why = e.kernel_message or (os.strerror(e.errno) if e.errno else str(e))
            return False, why + (f" (needs {', '.join(e.missing_modules)})" if e.missing_modules else "")

    protocols: list[Check] = []
    algorithms: list[Check] = []
    with xs:
        for proto, label, alg in PROTOCOL_PROBES:
            for family, name in ((4, proto), (6, f"{proto}6")):
                ok, why = attempt(probe_spec(alg, family=family, proto=proto))
                protocols.append(Check("ipsec", name, ok, f"{label} over IPv{family} ({alg})" if ok else why))
        for alg in ALGORITHMS:
            spec = probe_spec(alg.name)
            if not any(c.ok for c in protocols if c.name == spec.proto):
                algorithms.append(Check("algorithm", alg.name, False, f"untested: no {spec.proto} in this kernel"))
                continue
            ok, why = attempt(spec)
            algorithms.append(Check("algorithm", alg.name, ok, f"{spec.proto} {alg.kernel_name}" if ok else why))
    return [Check("ipsec", "xfrm_user", True, "xfrm netlink (NETLINK_XFRM)")] + protocols + algorithms


def _link_checks(ns: str, run_id: str) -> list[Check]:
    from pyroute2.netlink.exceptions import NetlinkError

    checks = []
    a, b = names.ifname(run_id, "a"), names.ifname(run_id, "b")
    with netns.iproute(ns) as ipr:
        try:
            ipr.link("add", ifname=a, kind="veth", peer=b)
            checks.append(Check("kernel", "veth", True, "veth pairs"))
        except NetlinkError as e:
            return [Check("kernel", "veth", False, f"cannot create veth: {e} (CONFIG_VETH)")]
        idx = ipr.link_lookup(ifname=a)[0]
        ipr.link("set", index=idx, state="up")
        qdiscs = {
            "tbf": dict(rate="10mbit", burst=15000, latency="50ms"),
            "htb": dict(default=0x10),
            "netem": dict(delay=1000, loss=0),
        }
        for kind, args in qdiscs.items():
            try:
                ipr.tc("add", kind, index=idx, handle=0x10000, **args)
                ipr.tc("del", index=idx, handle=0x10000, root=True)
                checks.append(Check("qdisc", f"qdisc {kind}", True, f"sch_{kind}"))
            except NetlinkError as e:
                why = "not in this kernel" if e.code == errno.ENOENT else os.strerror(e.code)
                checks.append(Check("qdisc", f"qdisc {kind}", False,
                                    f"sch_{kind}: {why} (CONFIG_NET_SCH_{kind.upper()})"))
    return checks


def _version(cmd: Sequence[str], pattern: str) -> Optional[str]:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(pattern, out.stdout + out.stderr)
    return m.group(1) if m else "unknown version"


def _tool_checks() -> list[Check]:
    checks = []
    for tool, cmd, pattern, why in (
        ("iperf3", ["iperf3", "--version"], r"iperf (\S+)", "measurements (apt: iperf3)"),
        ("mnexec", None, None, "Mininet hosts (apt: mininet)"),
        ("ip", ["ip", "-V"], r"iproute2-([\w.]+)", "independent checks in tests (apt: iproute2)"),
        ("tcpdump", ["tcpdump", "--version"], r"tcpdump version (\S+)", "capture filters (apt: tcpdump)"),
    ):
        if not shutil.which(tool):
            checks.append(Check("tool", tool, False, f"not found; needed for {why}"))
        else:
            version = _version(cmd, pattern) if cmd else None
            checks.append(Check("tool", tool, True, f"{version} ({shutil.which(tool)})" if version
                                else shutil.which(tool)))
    if in_uml():
        checks.append(Check("uml", "linux.uml", True, "this is the UML guest"))
        return checks
    try:
        kernel = uml.find_kernel()
        mods = uml.find_modules_dir(kernel)
        checks.append(Check("uml", "linux.uml", True, f"{kernel}, modules {mods or 'built in'}"))
    except uml.UmlError as e:
        checks.append(Check("uml", "linux.uml", False, str(e)))
    return checks


def choose_backend(requested: str, host: Optional[Probe] = None) -> Backend:
    """Pick the kernel for ``--kernel requested`` (auto, host or uml).

    ``host`` is a probe of the running kernel; it is taken when ``requested`` needs it
    and not given.  Inside a UML guest the answer is always the guest itself.
    """
    if requested not in KERNEL_CHOICES:
        raise ValueError(f"kernel: {requested!r} is not one of {', '.join(KERNEL_CHOICES)}")
    if in_uml():
        return Backend("uml", "running inside the User-Mode Linux guest")
    if requested == "uml":
        try:
            uml.find_kernel()
        except uml.UmlError as e:
            return Backend(None, str(e))
        return Backend("uml", "--kernel uml was requested")
    host = host or probe(tools=False)
    missing = host.missing_required()
    if not missing:
        return Backend("host", f"host kernel {host.kernel_release} passes the probe (ESP, veth, tbf)")
    lacks = f"host kernel {host.kernel_release} lacks {', '.join(missing)}"
    if requested == "host":
        return Backend(None, f"--kernel host, but {lacks}")
    try:
        uml.find_kernel()
    except uml.UmlError as e:
        return Backend(None, f"{lacks}, and {e}")
    return Backend("uml", f"{lacks}; using User-Mode Linux")


def follow_backend(requested: str, script: str, argv: Sequence[str], mem: str = "2G",
                   uml_kernel: Optional[str] = None, uml_modules: Optional[str] = None,
                   host: Optional[Probe] = None, interactive: bool = False) -> Optional[int]:
    """Where a script should run, acted on: the way every experiment honours ``--kernel``.

    Prints the decision.  Returns None when the script should go on here (the host
    kernel, or already inside UML); otherwise runs ``script argv...`` inside UML and
    returns its exit status (1 when no kernel can run it).
    """
    if in_uml():
        return None
    backend = choose_backend(requested, host)
    print(f"kernel: {backend.name or 'none'} ({backend.reason})", file=sys.stderr)
    if backend.name is None:
        return 1
    if backend.name == "host":
        return None
    import time
    t0 = time.monotonic()
    try:
        rc = reexec_in_uml([os.path.abspath(script), *argv], mem=mem, kernel=uml_kernel, modules=uml_modules,
                           interactive=interactive)
    except uml.UmlError as e:
        print(f"{os.path.basename(script)}: {e}", file=sys.stderr)
        return 125
    print(f"(User-Mode Linux run: {time.monotonic() - t0:.0f} s, boot included)", file=sys.stderr)
    return rc


def reexec_in_uml(argv: Sequence[str], mem: str = "2G", timeout_s: Optional[float] = None,
                  kernel: Optional[str] = None, modules: Optional[str] = None, interactive: bool = False) -> int:
    """Run this Python program again, with ``argv``, inside UML; returns its exit status.

    ``interactive`` hands the command this terminal (see :class:`testbed.uml.UmlSpec`)."""
    spec = uml.build_spec([sys.executable, *argv], kernel=kernel, modules=modules, mem=mem, timeout_s=timeout_s,
                          interactive=interactive)
    return uml.run(spec)


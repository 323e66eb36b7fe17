"""What the running kernel can do, found by trying it; and what the testbed needs of a kernel.

:func:`probe` works in a throwaway namespace ``itb-<run>-doctor``: it adds and
removes one SA for every algorithm the testbed offers, puts each qdisc on a veth,
and looks for the tools the testbed runs.  Nothing is read from kernel config
files: a kernel built without ``CONFIG_INET_ESP`` fails the ESP probe however its
config is packaged.  :func:`needs` says what some work needs of a kernel, and
:func:`kernel_modules` which modules provide it (a guest loads them at boot); the
backends (:mod:`testbed.backends`) decide where the work runs from the two.
"""
from __future__ import annotations

import errno
import logging
import os
import platform
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterable, Sequence

from ipsec.algorithms import ALGORITHMS
from ipsec.algorithms import kernel_modules as ipsec_modules
from ipsec.profiles import parse_profile
from ipsec.sa import probe_spec
from testbed import backends, kernelbuild, names, netns, xsave
from testbed.capabilities import BASE_NEEDS, ESP_NEEDS, Check, Needs, Probe
from topologies import KERNEL_MODULES

log = logging.getLogger(__name__)

QDISCS = ("tbf", "htb", "netem")


def probe(run_id: str | None = None, tools: bool = True,
          options: backends.Options = backends.DEFAULT_OPTIONS) -> Probe:
    """Probe the running kernel for real (needs root); see the module docstring.  ``options``: the
    guest's (``--uml-kernel``...), for the line on each backend."""
    run_id = run_id or names.new_run_id()
    checks: list[Check] = []
    name = names.netns_name(run_id, "doctor")
    try:
        netns.create(name)
    except OSError as e:
        checks.append(Check("kernel", "netns", False, f"cannot create a network namespace: {e}"))
        return Probe(platform.release(), backends.current().name,
                     tuple(checks + (_tool_checks(options) if tools else [])))
    try:
        checks.append(Check("kernel", "netns", True, "network namespaces"))
        checks.append(Check("kernel", "ipv6", os.path.isdir("/proc/sys/net/ipv6"),
                            "IPv6 stack" if os.path.isdir("/proc/sys/net/ipv6") else "no IPv6 in this kernel"))
        checks += _ipsec_checks(name)
        checks += _link_checks(name, run_id)
        checks.append(_wireguard_check(name, run_id))
    finally:
        netns.delete(name)
    if tools:
        checks += _tool_checks(options)
    return Probe(platform.release(), backends.current().name, tuple(checks))


#: One representative algorithm per protocol, probed for IPv4 and IPv6 (esp4 and
#: esp6 are separate modules, and so are ah4/ah6 and ipcomp/ipcomp6).
#: ESP is probed with null+HMAC-SHA1: the kernel looks up the algorithms before the
#: protocol, so an AES-GCM probe on a kernel without GCM would hide a missing esp4.
PROTOCOL_PROBES = (("esp", "ESP", "hmac-sha1-96"), ("ah", "AH", "hmac-sha1-96"),
                   ("comp", "IPComp", "deflate"))


def _ipsec_checks(ns: str) -> list[Check]:
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


def _wireguard_check(ns: str, run_id: str) -> Check:
    """A WireGuard device made, keyed over generic netlink and its public key read back, then deleted."""
    from ipsec import wireguard

    dev = wireguard.DevicePlan(ns, wireguard.device_name(run_id, 4), 4, wireguard.LISTEN_PORTS[4],
                               1500 - wireguard.MTU_RESERVE, secrets.token_bytes(32), ())
    try:
        wireguard.apply([dev])
        wireguard.remove([dev])
    except wireguard.WireGuardError as e:
        return Check("tunnel", "wireguard", False, str(e))
    return Check("tunnel", "wireguard", True, "WireGuard devices, keyed over generic netlink")


def _version(cmd: Sequence[str], pattern: str) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(pattern, out.stdout + out.stderr)
    return m.group(1) if m else "unknown version"


def _tool_checks(options: backends.Options = backends.DEFAULT_OPTIONS) -> list[Check]:
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
    here = backends.current()
    if here.runs_here and xsave.host_bytes() is not None:
        # what decides whether Debian's UML kernel can boot on this CPU (testbed/xsave.py)
        checks.append(Check("backend", "xsave", True, xsave.describe()))
    for name in backends.names():
        backend = backends.get(name, options)
        if backend.runs_here:
            continue
        if here.name == name:
            checks.append(Check("backend", name, True, f"this is the {backend.title} guest"))
            continue
        why = backend.unavailable()
        detail = getattr(backend, "describe_kernel", backend.label)() if why is None else why
        checks.append(Check("backend", name, why is None, detail))
    if here.runs_here:
        built = kernelbuild.builds()
        names = ", ".join(f"{b.info.get('name') or b.info.get('variant', '?')} ({b.info.get('version', '?')}, key "
                          f"{b.info.get('key', '?')})" for b in built)
        checks.append(Check("backend", "kernels built", True,
                            f"{len(built)}: {names}" if built else "none yet (`ipsec-testbed kernel build NAME`)"))
    return checks


def needs(profiles: Iterable[str] = ()) -> Needs:
    """What work with IPsec ``profiles`` needs of a kernel: veth and tbf, plus each profile's
    protocols over IPv4 (``esp``, ``ah``, ``comp``); plain work (``none``) needs no IPsec."""
    protocols = [proto for p in profiles for proto in parse_profile(p).protocols]
    return Needs(BASE_NEEDS + tuple(dict.fromkeys(protocols)))


def kernel_modules() -> tuple[str, ...]:
    """Every kernel module the testbed's work may use (a guest loads them at boot)."""
    return tuple(dict.fromkeys(KERNEL_MODULES + ipsec_modules()))


def choose(requested: str = backends.AUTO, work_needs: Needs | None = None,
           options: backends.Options = backends.DEFAULT_OPTIONS) -> backends.Choice:
    """:func:`testbed.backends.choose` with this module's probe of the running kernel."""
    return backends.choose(requested, work_needs or ESP_NEEDS, lambda: probe(tools=False), options)

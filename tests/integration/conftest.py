"""Integration tests: root and a kernel with ESP, the host's or User-Mode Linux's.

They never skip for want of ESP: `ipsec-testbed test` runs them where ESP exists,
and if they are started on a kernel without it every test errors, loudly.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import select
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from experiments import doctor
from testbed import backends, waiting
from testbed.capabilities import Probe
from testbed.isolation import root_namespace_unchanged
from topologies.veth_pair import VethPair, veth_pair


def pytest_report_header(config):
    return f"ESP integration tests on the {backends.current().label()} ({os.uname().release})"


@pytest.fixture(scope="session", autouse=True)
def esp_kernel() -> Probe:
    """Fail every test at once, with the reason, unless this kernel can do ESP."""
    if os.geteuid() != 0:
        pytest.fail("integration tests need root: run `sudo ipsec-testbed test`", pytrace=False)
    report = doctor.probe(tools=False)
    missing = report.missing()
    if missing:
        detail = "; ".join(f"{c.name}: {c.detail}" for c in report.checks if c.name in missing)
        pytest.fail(f"NO ESP: kernel {report.kernel_release} lacks {', '.join(missing)} ({detail}). "
                    "Run the suite with `ipsec-testbed test`, which uses User-Mode Linux here.",
                    pytrace=False)
    return report


@pytest.fixture(autouse=True)
def root_namespace_untouched():
    """Every test leaves the root network namespace as it found it (links, addresses,
    routes, xfrm, qdiscs, sysctls); a difference fails the test, naming what changed."""
    with root_namespace_unchanged():
        yield


def ip(*args: str) -> str:
    """iproute2, the independent checker: never the testbed's own netlink code."""
    out = subprocess.run(["ip", *args], capture_output=True, text=True)
    if out.returncode:
        raise AssertionError(f"ip {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def losses(namespaces) -> str:
    """Where packets went missing in ``namespaces``: each one's non-zero kernel drop and error counters
    (nstat, /proc/net/xfrm_stat), its links' drop counts and its bridge ports' states, for the message
    of a test that lost a packet."""
    out = []
    for ns in namespaces:
        def run(*cmd, ns=ns):
            return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True).stdout
        counters = [line for line in run("nstat", "-as").splitlines()
                    if re.search(r"Drop|Discard|Err|Fail|NoRoute|Miss|Overflow|Prune", line)]
        counters += [line for line in run("cat", "/proc/net/xfrm_stat").splitlines() if line.split()[-1:] != ["0"]]
        links = [f"{link['ifname']} {link.get('operstate')} rx {link['stats64']['rx']['packets']} "
                 f"(dropped {link['stats64']['rx']['dropped']}) tx {link['stats64']['tx']['packets']} "
                 f"(dropped {link['stats64']['tx']['dropped']})" for link in json.loads(run("ip", "-s", "-j", "link"))]
        out.append(f"{ns}: {' | '.join(counters) or 'no drop counted'}\n  links: {'; '.join(links)}"
                   f"\n  bridge ports: {run('bridge', 'link').strip() or '-'}")
    return "\n".join(out)


@pytest.fixture
def pair() -> Iterator[VethPair]:
    """Two fresh namespaces and a veth between them; all removed afterwards."""
    with veth_pair() as p:
        yield p


@contextlib.contextmanager
def capture(ns: str, dev: str, path: str, direction: str = "inout", ipsec_packets: int | None = None) -> Iterator[str]:
    """tcpdump on ``dev`` inside ``ns`` for the block; the pcap is complete after it.

    ``direction="out"`` keeps only what the interface sent: what really crossed the
    wire.  On the receiving side of a tunnel-mode SA the kernel hands the decrypted
    inner packet to packet taps on the same interface again, so an "in" capture shows
    plaintext that never was on the link.  With ``ipsec_packets`` the capture is complete
    once it holds that many ESP, AH or IPComp packets (:func:`ipsec_count`), else once it has
    stopped growing (:func:`settle`).
    """
    proc = subprocess.Popen(["ip", "netns", "exec", ns, "tcpdump", "--immediate-mode", "-U", "-n", "-Q", direction,
                             "-i", dev, "-w", path],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # tcpdump says "listening on DEV" once the capture socket is live
        deadline = time.monotonic() + 20
        seen = ""
        while "listening on" not in seen:
            ready, _, _ = select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))
            line = proc.stderr.readline() if ready else ""
            if not line:
                raise AssertionError(f"tcpdump did not start capturing: {seen}")
            seen += line
        yield path
        if ipsec_packets is None:
            settle(path)
        else:
            waiting.until(lambda: ipsec_count(path) >= ipsec_packets, 3.0,
                          f"{ipsec_packets} ESP, AH or IPComp packets in the capture {path}",
                          state=lambda: f"{ipsec_count(path)} there", interval_s=0.01)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def settle(path: str, quiet_s: float = 0.3, timeout_s: float = 3.0) -> None:
    """Bounded wait until the capture file stops growing: the last packets of the block may
    still be in the kernel's capture buffer when the block ends, and stopping tcpdump then
    drops them (seen inside UML: the fifth of five ESP replies missing).  A file still growing
    after ``timeout_s`` fails the test: something else is writing to the capture."""
    size = lambda: os.path.getsize(path) if os.path.exists(path) else 0  # noqa: E731
    seen = {"size": -1, "since": time.monotonic()}

    def quiet() -> bool:
        now = size()
        if now != seen["size"]:
            seen.update(size=now, since=time.monotonic())
        return time.monotonic() - seen["since"] >= quiet_s

    waiting.until(quiet, timeout_s, f"the capture {path} to stop growing for {quiet_s:g} s",
                  state=lambda: f"{size()} bytes")


#: IP protocol numbers of ESP, AH and IPComp.
IPSEC_PROTOCOLS = (50, 51, 108)


def ipsec_count(path: str) -> int:
    """The Ethernet frames in a pcap file whose IP packet is ESP, AH or IPComp (read from the
    file's records directly: cheap enough to poll while tcpdump writes)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return 0
    if len(data) < 24:
        return 0
    order = "<" if data[:4] == b"\xd4\xc3\xb2\xa1" or data[:4] == b"\x4d\x3c\xb2\xa1" else ">"
    count, at = 0, 24
    while at + 16 <= len(data):
        (caplen,) = struct.unpack_from(order + "I", data, at + 8)
        if at + 16 + caplen > len(data):
            break  # a record still being written
        frame = data[at + 16:at + 16 + caplen]
        ethertype = frame[12:14]
        proto = frame[23] if ethertype == b"\x08\x00" and len(frame) > 23 else \
            frame[20] if ethertype == b"\x86\xdd" and len(frame) > 20 else None
        count += proto in IPSEC_PROTOCOLS
        at += 16 + caplen
    return count


def iproute_states(ns: str) -> dict[tuple[str, int], dict]:
    """{(proto, spi): {algs: {kind: (name, key hex, bits)}, bytes, packets, mode}} from `ip -s xfrm state`."""
    text = ip("-s", "-n", ns, "xfrm", "state")
    out = {}
    for block in re.split(r"\n(?=src )", text.strip()):
        if not block:
            continue
        head = re.search(r"proto (\S+) spi 0x([0-9a-f]+)\S* reqid (\d+)\S* mode (\S+)", block)
        if head.group(1) == "4" or head.group(1) == "41":
            continue  # the IP-in-IP SA the kernel adds by itself for an IPComp tunnel
        algs = {}
        for kind, name, key, bits in re.findall(
                r"^\t(aead|enc|auth-trunc|auth|comp) (\S+)(?: (0x[0-9a-f]*))?(?: \(\d+ bits\))?(?: (\d+))? *$",
                block, re.M):
            algs[kind] = (name, key[2:] if key else "", int(bits) if bits else None)
        life = re.search(r"(\d+)\(bytes\), (\d+)\(packets\)", block)
        out[(head.group(1), int(head.group(2), 16))] = dict(
            algs=algs, mode=head.group(4), reqid=int(head.group(3)),
            bytes=int(life.group(1)), packets=int(life.group(2)))
    return out

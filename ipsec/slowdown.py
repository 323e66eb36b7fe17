"""A known, adjustable extra cost on the ESP path: the regression the gate is calibrated against.

::

    ESP endpoint's interface, egress (tc clsact)
      filter 1: classic BPF   ethertype IPv4? protocol 50?  \\  anything else: return 0 at once
      filter 2: ...           ethertype IPv6? next hdr 50?  /   ESP: run N extra instructions,
                                                                 then return 0 (no match)

A classic BPF program on the way out of every interface of the IPsec endpoints returns at
once for anything but ESP and runs ``N`` extra ALU instructions for every ESP packet, then
declines to classify it: the packet goes on unchanged, and the kernel has spent ``N``
instructions more on it, in the same transmit path (softirq or the sender's context) where
ESP output runs.  So the CPU cost per packet of an IPsec profile grows as a slower ESP
implementation would make it grow, by an amount set with ``N``, reproducibly, and only
inside the testbed's own namespaces.  Plain traffic pays the header test (seven
instructions per filter), nothing more.

A tc filter message holds at most about 2000 classic BPF instructions (iproute2's 16 KiB
netlink buffer), so ``N`` is spread over a chain of filters of at most
:data:`CHUNK` instructions each; every one is tried in turn, since none matches.

How many instructions make a 5 % slowdown depends on the machine and the point; the gate
finds out by measuring (``ipsec-testbed regress --inject-slowdown``, see
:mod:`experiments.injection`).  This module only builds and installs the programs.
"""
from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterable, Sequence

log = logging.getLogger(__name__)

#: Burn instructions per filter (the program adds 9 of its own; a tc message holds ~2040).
CHUNK = 1900
#: The most extra instructions per ESP packet per interface (a chain of this many filters at most).
MAX_INSTRUCTIONS = 64 * CHUNK
#: IP protocol number of ESP (RFC 4303)
ESP = 50

# classic BPF opcodes (linux/filter.h)
_LDH_ABS, _LDB_ABS = 0x28, 0x30
_JEQ_K, _JA = 0x15, 0x05
_ADD_K, _RET_K = 0x04, 0x06


def program(burn: int) -> list[tuple[int, int, int, int]]:
    """The classic BPF program (code, jt, jf, k) that runs ``burn`` extra instructions for an ESP
    packet (IPv4 or IPv6, the Ethernet header first, as tc sees it) and returns 0 for every packet."""
    if not 0 <= burn <= CHUNK:
        raise ValueError(f"burn must be 0..{CHUNK} instructions per program, not {burn!r}")
    return [
        (_LDH_ABS, 0, 0, 12),        # 0: A = ethertype
        (_JEQ_K, 0, 2, 0x0800),      # 1: IPv4? -> 2, else -> 4
        (_LDB_ABS, 0, 0, 23),        # 2: A = IPv4 protocol
        (_JA, 0, 0, 2),              # 3: -> 6
        (_JEQ_K, 0, 2, 0x86DD),      # 4: IPv6? -> 5, else -> 7
        (_LDB_ABS, 0, 0, 20),        # 5: A = IPv6 next header
        (_JEQ_K, 1, 0, ESP),         # 6: ESP? -> 8, else -> 7
        (_JA, 0, 0, burn),           # 7: -> the end (not ESP)
        *[(_ADD_K, 0, 0, 1)] * burn,  # 8...: the extra cost
        (_RET_K, 0, 0, 0),           # no match: the packet goes on unclassified
    ]


def bytecode(burn: int) -> str:
    """:func:`program` as tc's ``bpf bytecode`` argument ("count,code jt jf k,...")."""
    insns = program(burn)
    return ",".join([str(len(insns)), *(f"{c} {t} {f} {k}" for c, t, f, k in insns)])


def chunks(instructions: int, filters: int = 0) -> list[int]:
    """How ``instructions`` extra instructions are spread over filters (each at most :data:`CHUNK`), over at least
    ``filters`` of them (the rest burning none: arms of one A/B carry the same chain, so that they differ in the
    burn alone, not in the filters' own cost)."""
    if isinstance(instructions, bool) or not isinstance(instructions, int) \
            or not 0 <= instructions <= MAX_INSTRUCTIONS:
        raise ValueError(f"extra instructions must be 0..{MAX_INSTRUCTIONS}, not {instructions!r}")
    full, rest = divmod(instructions, CHUNK)
    out = [CHUNK] * full + ([rest] if rest else [])
    return out + [0] * (filters - len(out))


def filters_for(instructions: Iterable[int]) -> int:
    """The filters the largest of ``instructions`` takes: the chain every arm of an A/B carries."""
    return max((len(chunks(n)) for n in instructions), default=0)


def batch(interfaces: Iterable[str], instructions: int, filters: int = 0) -> str:
    """``tc -batch`` lines that put the cost on ``interfaces`` (of one namespace, none yet with clsact), over at
    least ``filters`` filters."""
    lines = []
    for ifname in interfaces:
        lines.append(f"qdisc add dev {ifname} clsact")
        for pref, burn in enumerate(chunks(instructions, filters), 1):
            lines.append(f'filter add dev {ifname} egress pref {pref} bpf bytecode "{bytecode(burn)}"')
    return "\n".join(lines) + "\n"


def _tc_batch(netns: str, text: str, what: str) -> None:
    proc = subprocess.run(["tc", "-n", netns, "-force", "-batch", "-"], input=text, text=True,
                          capture_output=True, timeout=60)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        hint = ""
        if any("classifier not found" in line or "Unknown qdisc" in line for line in detail):
            hint = " (the kernel needs cls_bpf and sch_ingress: CONFIG_NET_CLS_BPF, CONFIG_NET_SCH_INGRESS)"
        raise RuntimeError(f"{what} in {netns} failed: {detail[-1] if detail else proc.returncode}{hint}")


def install(where: Sequence[tuple[str, Sequence[str]]], instructions: int, filters: int = 0) -> None:
    """Put ``instructions`` extra instructions per ESP packet on the way out of each
    (namespace, interfaces), over at least ``filters`` filters; none of either puts nothing (see :func:`remove`)."""
    if instructions == 0 and filters == 0:
        return
    for netns, interfaces in where:
        _tc_batch(netns, batch(interfaces, instructions, filters),
                  f"adding {instructions} instructions on the ESP path")
    log.debug("ESP path slowed by %d instructions per packet on %s", instructions, where)


def remove(where: Sequence[tuple[str, Sequence[str]]]) -> None:
    """Take the programs off again (the clsact qdiscs with their filters)."""
    for netns, interfaces in where:
        _tc_batch(netns, "".join(f"qdisc del dev {i} clsact\n" for i in interfaces), "removing the ESP slowdown")

"""Kernel replies parsed into plain dataclasses (pure)."""
from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from typing import Any

from pyroute2.netlink import (
    nlmsg,
)

from ipsec.algorithms import Algorithm, find_by_kernel_name
from ipsec.sa import (
    PolicySpec,
    SASpec,
    SelectorSpec,
    TemplateSpec,
)
from ipsec.xfrm.constants import ACTION_NAMES, AF_VERSIONS, DIRECTION_NAMES, MODE_NAMES, PROTO_NAMES
from ipsec.xfrm.plans import unpack_address


@dataclasses.dataclass(frozen=True)
class AlgorithmState:
    """An algorithm as the kernel reports it for an installed SA."""

    kind: str
    kernel_name: str
    key: bytes = dataclasses.field(repr=False)
    key_bits: int
    icv_bits: int = 0

    @property
    def algorithm(self) -> Algorithm | None:
        """The catalog entry it corresponds to, or None if the testbed does not offer it."""
        return find_by_kernel_name(self.kernel_name, self.kind, self.key_bits,
                                   self.icv_bits if self.kind in ("aead", "auth") else None)


@dataclasses.dataclass(frozen=True)
class SAState:
    """An installed SA with its counters, as the kernel reports it.

    ``bytes``/``packets`` count what this SA protected (outbound) or unprotected
    (inbound): the IP payload in transport mode, the inner packet in tunnel mode.
    ``replay_window_failures``, ``replay_failures`` and ``integrity_failures`` are the
    kernel's xfrm_stats: packets dropped as outside the window, as replayed, and as
    failing the ICV.  ``out_seq``/``in_seq`` are the last sequence numbers sent/seen.
    ``proto`` is ``"esp"``, ``"ah"``, ``"comp"`` or, for SAs the kernel makes itself, a
    protocol number (an IPComp tunnel adds an IP-in-IP SA, ``"4"``).  Times are Unix
    seconds; ``use_time`` is 0 until the SA is first used.
    """

    src: str
    dst: str
    proto: str
    spi: int
    mode: str
    reqid: int
    family: int
    replay_window: int
    flags: int
    selector: SelectorSpec | None
    aead: AlgorithmState | None = None
    crypt: AlgorithmState | None = None
    auth: AlgorithmState | None = None
    comp: AlgorithmState | None = None
    bytes: int = 0
    packets: int = 0
    add_time: int = 0
    use_time: int = 0
    replay_window_failures: int = 0
    replay_failures: int = 0
    integrity_failures: int = 0
    out_seq: int = 0
    in_seq: int = 0

    def to_spec(self) -> SASpec:
        """The SASpec that would install this SA (ValueError if the testbed cannot express it).

        An all-zero selector (what the kernel derives when none is given) becomes None.
        """
        kwargs: dict[str, Any] = {}
        for kind in ("aead", "crypt", "auth", "comp"):
            state: AlgorithmState | None = getattr(self, kind)
            if state is None:
                continue
            alg = state.algorithm
            if alg is None:
                raise ValueError(f"{kind} algorithm {state.kernel_name} with {state.key_bits}-bit "
                                 f"key is not in the testbed's catalog")
            kwargs[kind] = alg
            if kind != "comp":
                kwargs[f"{kind}_key"] = state.key
            if kind == "aead":
                kwargs["aead_icv_bits"] = state.icv_bits
        selector = self.selector
        if selector is not None and _is_wildcard(selector):
            selector = None
        return SASpec(src=self.src, dst=self.dst, proto=self.proto, spi=self.spi, mode=self.mode,
                      reqid=self.reqid, replay_window=self.replay_window, selector=selector,
                      **kwargs)


def _is_wildcard(selector: SelectorSpec) -> bool:
    return (selector.src_network.prefixlen == 0 and selector.dst_network.prefixlen == 0
            and int(selector.src_network.network_address) == 0
            and int(selector.dst_network.network_address) == 0
            and selector.proto == 0 and selector.sport is None and selector.dport is None)


@dataclasses.dataclass(frozen=True)
class TemplateState:
    """A policy template as the kernel reports it (not validated: any kernel value)."""

    proto: str
    mode: str
    reqid: int
    src: str | None
    dst: str | None
    optional: bool
    spi: int = 0

    def to_spec(self) -> TemplateSpec:
        """The TemplateSpec it corresponds to (addresses kept only in tunnel mode)."""
        tunnel = self.mode == "tunnel"
        return TemplateSpec(proto=self.proto, mode=self.mode, reqid=self.reqid,
                            src=self.src if tunnel else None, dst=self.dst if tunnel else None,
                            optional=self.optional)


@dataclasses.dataclass(frozen=True)
class PolicyState:
    """An installed policy, as the kernel reports it."""

    selector: SelectorSpec
    direction: str
    action: str
    priority: int
    index: int
    templates: tuple[TemplateState, ...] = ()
    bytes: int = 0
    packets: int = 0
    add_time: int = 0
    use_time: int = 0

    def to_spec(self) -> PolicySpec:
        """The PolicySpec that would install this policy."""
        return PolicySpec(selector=self.selector, direction=self.direction, action=self.action,
                          priority=self.priority,
                          templates=tuple(t.to_spec() for t in self.templates))


def _parse_selector(msg: nlmsg) -> SelectorSpec | None:
    version = AF_VERSIONS.get(msg["sel_family"])
    if version is None:
        return None
    src = unpack_address(msg["sel_saddr"], version)
    dst = unpack_address(msg["sel_daddr"], version)
    return SelectorSpec(
        src=str(ipaddress.ip_network(f"{src}/{msg['sel_prefixlen_s']}", strict=False)),
        dst=str(ipaddress.ip_network(f"{dst}/{msg['sel_prefixlen_d']}", strict=False)),
        proto=msg["sel_proto"],
        sport=msg["sel_sport"] if msg["sel_sport_mask"] else None,
        dport=msg["sel_dport"] if msg["sel_dport_mask"] else None,
    )


def _alg_name(raw: bytes | str) -> str:
    if isinstance(raw, str):
        return raw.rstrip("\0")
    return bytes(raw).split(b"\0", 1)[0].decode("ascii", "replace")


def _parse_algorithm(kind: str, value: Mapping[str, Any], icv_field: str | None) -> AlgorithmState:
    return AlgorithmState(kind=kind, kernel_name=_alg_name(value["alg_name"]),
                          key=bytes(value.get("alg_key", b"")), key_bits=value["alg_key_len"],
                          icv_bits=value[icv_field] if icv_field else 0)


def parse_sa(msg: nlmsg) -> SAState:
    """An :class:`SAState` from a decoded xfrm_usersa_info message (NEWSA reply or dump)."""
    version = AF_VERSIONS.get(msg["family"])
    if version is None:
        raise ValueError(f"SA message with unknown address family {msg['family']}")
    algs: dict[str, AlgorithmState] = {}
    aead = msg.get_attr("XFRMA_ALG_AEAD")
    if aead is not None:
        algs["aead"] = _parse_algorithm("aead", aead, "alg_icv_len")
    crypt = msg.get_attr("XFRMA_ALG_CRYPT")
    if crypt is not None:
        algs["crypt"] = _parse_algorithm("crypt", crypt, None)
    # The kernel reports an auth algorithm twice (ALG_AUTH and ALG_AUTH_TRUNC); the
    # truncated form is the one carrying the ICV length actually used.
    auth = msg.get_attr("XFRMA_ALG_AUTH_TRUNC")
    if auth is not None:
        algs["auth"] = _parse_algorithm("auth", auth, "alg_trunc_len")
    else:
        auth = msg.get_attr("XFRMA_ALG_AUTH")
        if auth is not None:
            algs["auth"] = _parse_algorithm("auth", auth, None)
    comp = msg.get_attr("XFRMA_ALG_COMP")
    if comp is not None:
        algs["comp"] = _parse_algorithm("comp", comp, None)

    window = msg["replay_window"]
    out_seq = in_seq = 0
    esn = msg.get_attr("XFRMA_REPLAY_ESN_VAL")
    if esn is not None:
        window = esn["replay_window"]
        out_seq = (esn["oseq_hi"] << 32) | esn["oseq"]
        in_seq = (esn["seq_hi"] << 32) | esn["seq"]
    else:
        replay = msg.get_attr("XFRMA_REPLAY_VAL")
        if replay is not None:
            out_seq, in_seq = replay["oseq"], replay["seq"]
    proto = PROTO_NAMES.get(msg["id_proto"], str(msg["id_proto"]))
    return SAState(
        src=unpack_address(msg["saddr"], version),
        dst=unpack_address(msg["id_daddr"], version),
        proto=proto,
        spi=msg["id_spi"],
        mode=MODE_NAMES.get(msg["mode"], str(msg["mode"])),
        reqid=msg["reqid"],
        family=version,
        replay_window=window,
        flags=msg["flags"],
        selector=_parse_selector(msg),
        # The kernel copies its live lifetime counters and stats into the fixed part.
        bytes=msg["curlft_bytes"],
        packets=msg["curlft_packets"],
        add_time=msg["curlft_add_time"],
        use_time=msg["curlft_use_time"],
        replay_window_failures=msg["stats_replay_window"],
        replay_failures=msg["stats_replay"],
        integrity_failures=msg["stats_integrity_failed"],
        out_seq=out_seq,
        in_seq=in_seq,
        **algs,
    )


def parse_policy(msg: nlmsg) -> PolicyState:
    """A :class:`PolicyState` from a decoded xfrm_userpolicy_info message."""
    selector = _parse_selector(msg)
    if selector is None:
        raise ValueError(f"policy message with unknown selector family {msg['sel_family']}")
    templates = []
    for tmpl in msg.get_attr("XFRMA_TMPL") or ():
        version = AF_VERSIONS.get(tmpl["family"], selector.family)
        # All-zero endpoints: a transport template, addresses taken from the packet.
        src = None if not any(tmpl["saddr"]) else unpack_address(tmpl["saddr"], version)
        dst = None if not any(tmpl["id_daddr"]) else unpack_address(tmpl["id_daddr"], version)
        templates.append(TemplateState(
            proto=PROTO_NAMES.get(tmpl["id_proto"], str(tmpl["id_proto"])),
            mode=MODE_NAMES.get(tmpl["mode"], str(tmpl["mode"])),
            reqid=tmpl["reqid"],
            src=src,
            dst=dst,
            optional=bool(tmpl["optional"]),
            spi=int.from_bytes(tmpl["id_spi"], "big"),
        ))
    return PolicyState(
        selector=selector,
        direction=DIRECTION_NAMES.get(msg["dir"], str(msg["dir"])),
        action=ACTION_NAMES.get(msg["action"], str(msg["action"])),
        priority=msg["priority"],
        index=msg["index"],
        templates=tuple(templates),
        bytes=msg["curlft_bytes"],
        packets=msg["curlft_packets"],
        add_time=msg["curlft_add_time"],
        use_time=msg["curlft_use_time"],
    )

"""Plans: SA and policy specs turned into xfrm requests (pure data, ``.encode()`` gives the bytes)."""
from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from typing import Any

from pyroute2.netlink import (
    nlmsg,
)

from ipsec.sa import (
    LEGACY_REPLAY_WINDOW,
    PolicySpec,
    SASpec,
    SelectorSpec,
    TemplateSpec,
    family_of,
)
from ipsec.xfrm.constants import (
    ACTION_NUMBERS,
    AF_NUMBERS,
    DIRECTION_NUMBERS,
    FLAGS_ACKED,
    FLAGS_ADD,
    FLAGS_DUMP,
    FLAGS_GET,
    MODE_NUMBERS,
    PROTO_NUMBERS,
    XFRM_MSG_DELPOLICY,
    XFRM_MSG_DELSA,
    XFRM_MSG_FLUSHPOLICY,
    XFRM_MSG_FLUSHSA,
    XFRM_MSG_GETPOLICY,
    XFRM_MSG_GETSA,
    XFRM_MSG_NEWPOLICY,
    XFRM_MSG_NEWSA,
)
from ipsec.xfrm.messages import (
    LIFETIME_DEFAULTS,
    xfrm_empty,
    xfrm_userpolicy_id,
    xfrm_userpolicy_info,
    xfrm_usersa_flush,
    xfrm_usersa_id,
    xfrm_usersa_info,
)


@dataclasses.dataclass(frozen=True)
class XfrmRequest:
    """One xfrm netlink request as plain data: what to send, and what it is for.

    Attributes:
        operation: the API call it belongs to (``"add_sa"``, ``"del_policy"``...).
        subject: human-readable SA/policy it concerns, used in logs and errors.
        msg_type, flags: the netlink header's type and flags.
        msg_class: the pyroute2 message class of the fixed part.
        fields: values of the fixed part (missing fields are zero).
        attrs: netlink attributes, ``(name, value)`` in sending order.
        spec: the SASpec/PolicySpec it came from, if any (for error hints).
    """

    operation: str
    subject: str
    msg_type: int
    flags: int
    msg_class: type
    fields: Mapping[str, Any]
    attrs: tuple[tuple[str, Any], ...] = ()
    spec: SASpec | PolicySpec | None = dataclasses.field(default=None, compare=False)

    def to_nlmsg(self) -> nlmsg:
        """A fresh pyroute2 message (encoding mutates messages, so never reuse one)."""
        msg = self.msg_class()
        for name, value in self.fields.items():
            msg[name] = value
        msg["attrs"] = [[name, _copy_value(value)] for name, value in self.attrs]
        msg["header"] = {"type": self.msg_type, "flags": self.flags}
        return msg

    def encode(self, seq: int = 0, pid: int = 0) -> bytes:
        """The bytes that go on the wire, with the given header sequence number and port."""
        msg = self.to_nlmsg()
        msg["header"]["sequence_number"] = seq
        msg["header"]["pid"] = pid
        msg.encode()
        return bytes(msg.data)

    def __repr__(self) -> str:
        return f"XfrmRequest({self.operation}: {self.subject})"


def _copy_value(value: Any) -> Any:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return [_copy_value(item) for item in value]
    return value


def pack_address(address: str | None) -> bytes:
    """xfrm_address_t bytes for an address string (None: all zero)."""
    if address is None:
        return bytes(16)
    return ipaddress.ip_address(address).packed.ljust(16, b"\0")


def unpack_address(raw: bytes, version: int) -> str:
    """The address string held in an xfrm_address_t, for IP version 4 or 6."""
    if version == 4:
        return str(ipaddress.IPv4Address(bytes(raw[:4])))
    return str(ipaddress.IPv6Address(bytes(raw[:16])))


def _selector_fields(selector: SelectorSpec | None) -> dict[str, Any]:
    if selector is None:  # family 0: the kernel fills in the SA's own family
        return {"sel_daddr": bytes(16), "sel_saddr": bytes(16)}
    src, dst = selector.src_network, selector.dst_network
    return {
        "sel_daddr": pack_address(str(dst.network_address)),
        "sel_saddr": pack_address(str(src.network_address)),
        "sel_dport": selector.dport or 0,
        "sel_dport_mask": 0xFFFF if selector.dport is not None else 0,
        "sel_sport": selector.sport or 0,
        "sel_sport_mask": 0xFFFF if selector.sport is not None else 0,
        "sel_family": AF_NUMBERS[selector.family],
        "sel_prefixlen_d": dst.prefixlen,
        "sel_prefixlen_s": src.prefixlen,
        "sel_proto": selector.proto,
    }


def _algorithm_attrs(spec: SASpec) -> list[tuple[str, dict[str, Any]]]:
    attrs: list[tuple[str, dict[str, Any]]] = []
    if spec.aead is not None:
        attrs.append(("XFRMA_ALG_AEAD", {
            "alg_name": spec.aead.kernel_name, "alg_key_len": len(spec.aead_key) * 8,
            "alg_icv_len": spec.aead_icv_bits, "alg_key": spec.aead_key}))
    if spec.crypt is not None:
        attrs.append(("XFRMA_ALG_CRYPT", {
            "alg_name": spec.crypt.kernel_name, "alg_key_len": len(spec.crypt_key) * 8,
            "alg_key": spec.crypt_key}))
    if spec.auth is not None:
        attrs.append(("XFRMA_ALG_AUTH_TRUNC", {
            "alg_name": spec.auth.kernel_name, "alg_key_len": len(spec.auth_key) * 8,
            "alg_trunc_len": spec.auth.icv_bits, "alg_key": spec.auth_key}))
    if spec.comp is not None:
        attrs.append(("XFRMA_ALG_COMP", {
            "alg_name": spec.comp.kernel_name, "alg_key_len": 0, "alg_key": b""}))
    return attrs


def plan_add_sa(spec: SASpec) -> XfrmRequest:
    """XFRM_MSG_NEWSA for ``spec``: what ``ip xfrm state add`` sends for the same SA.

    Lifetimes are unlimited.  A replay window above 32 packets goes into an
    XFRMA_REPLAY_ESN_VAL attribute (bitmap replay) with ``replay_window`` 0 in the
    fixed part, exactly as iproute2 does.
    """
    window = spec.replay_window or 0
    fields = {
        **_selector_fields(spec.selector),
        "id_daddr": pack_address(spec.dst),
        "id_spi": spec.spi,
        "id_proto": PROTO_NUMBERS[spec.proto],
        "saddr": pack_address(spec.src),
        **LIFETIME_DEFAULTS,
        "reqid": spec.reqid,
        "family": AF_NUMBERS[spec.family],
        "mode": MODE_NUMBERS[spec.mode],
        "replay_window": window if window <= LEGACY_REPLAY_WINDOW else 0,
    }
    attrs: list[tuple[str, Any]] = list(_algorithm_attrs(spec))
    if window > LEGACY_REPLAY_WINDOW:
        attrs.append(("XFRMA_REPLAY_ESN_VAL", {
            "bmp_len": (window + 31) // 32, "replay_window": window}))
    return XfrmRequest("add_sa", spec.describe(), XFRM_MSG_NEWSA, FLAGS_ADD,
                       xfrm_usersa_info, fields, tuple(attrs), spec)


def _sa_id_request(operation: str, msg_type: int, flags: int, dst: str, spi: int,
                   proto: str, src: str | None) -> XfrmRequest:
    if proto not in PROTO_NUMBERS:
        raise ValueError(f"proto must be one of {', '.join(PROTO_NUMBERS)}, not {proto!r}")
    if isinstance(spi, bool) or not isinstance(spi, int) or not 0 < spi <= 0xFFFFFFFF:
        raise ValueError(f"spi must be an integer in 1..4294967295, not {spi!r}")
    family = family_of(dst)
    if src is not None and family_of(src) != family:
        raise ValueError(f"src and dst must both be IPv4 or both IPv6, not {src!r} and {dst!r}")
    fields = {"daddr": pack_address(dst), "spi": spi, "family": AF_NUMBERS[family],
              "proto": PROTO_NUMBERS[proto]}
    subject = f"{proto} spi 0x{spi:08x} {src or '*'} -> {dst}"
    # iproute2 always adds the source address, all-zero when not given; for ESP/AH/
    # IPComp the kernel looks the SA up by (dst, spi, proto) and ignores it.
    attrs = (("XFRMA_SRCADDR", pack_address(src)),)
    return XfrmRequest(operation, subject, msg_type, flags, xfrm_usersa_id, fields, attrs)


def plan_del_sa(dst: str, spi: int, proto: str, src: str | None = None) -> XfrmRequest:
    """XFRM_MSG_DELSA for the SA (dst, spi, proto), as ``ip xfrm state delete``."""
    return _sa_id_request("del_sa", XFRM_MSG_DELSA, FLAGS_ACKED, dst, spi, proto, src)


def plan_get_sa(dst: str, spi: int, proto: str, src: str | None = None) -> XfrmRequest:
    """XFRM_MSG_GETSA for one SA, as ``ip xfrm state get``; the reply is the SA."""
    return _sa_id_request("get_sa", XFRM_MSG_GETSA, FLAGS_GET, dst, spi, proto, src)


def plan_dump_sa() -> XfrmRequest:
    """Dump request for all SAs of the namespace."""
    return XfrmRequest("dump_sa", "all SAs", XFRM_MSG_GETSA, FLAGS_DUMP, xfrm_empty, {})


def plan_flush_sa() -> XfrmRequest:
    """XFRM_MSG_FLUSHSA for every IPsec protocol, as ``ip xfrm state flush``."""
    return XfrmRequest("flush_sa", "all SAs", XFRM_MSG_FLUSHSA, FLAGS_ACKED,
                       xfrm_usersa_flush, {"proto": 0})


def _template_dict(template: TemplateSpec, policy_family: int) -> dict[str, Any]:
    family = template.family or policy_family
    return {
        "id_daddr": pack_address(template.dst), "id_spi": bytes(4),
        "id_proto": PROTO_NUMBERS[template.proto], "family": AF_NUMBERS[family],
        "saddr": pack_address(template.src), "reqid": template.reqid,
        "mode": MODE_NUMBERS[template.mode], "share": 0, "optional": int(template.optional),
        # Any algorithm may satisfy the template (iproute2's default, all bits set).
        "aalgos": 0xFFFFFFFF, "ealgos": 0xFFFFFFFF, "calgos": 0xFFFFFFFF,
    }


def plan_add_policy(spec: PolicySpec) -> XfrmRequest:
    """XFRM_MSG_NEWPOLICY for ``spec``: what ``ip xfrm policy add`` sends."""
    fields = {
        **_selector_fields(spec.selector),
        **LIFETIME_DEFAULTS,
        "priority": spec.priority,
        "dir": DIRECTION_NUMBERS[spec.direction],
        "action": ACTION_NUMBERS[spec.action],
    }
    attrs: tuple[tuple[str, Any], ...] = ()
    if spec.templates:
        attrs = (("XFRMA_TMPL", [_template_dict(t, spec.family) for t in spec.templates]),)
    return XfrmRequest("add_policy", spec.describe(), XFRM_MSG_NEWPOLICY, FLAGS_ADD,
                       xfrm_userpolicy_info, fields, attrs, spec)


def plan_del_policy(selector: SelectorSpec, direction: str) -> XfrmRequest:
    """XFRM_MSG_DELPOLICY for the main-type policy (selector, direction)."""
    if direction not in DIRECTION_NUMBERS:
        raise ValueError(f"direction must be one of {', '.join(DIRECTION_NUMBERS)}, "
                         f"not {direction!r}")
    fields = {**_selector_fields(selector), "dir": DIRECTION_NUMBERS[direction]}
    return XfrmRequest("del_policy", f"policy {direction} {selector.describe()}",
                       XFRM_MSG_DELPOLICY, FLAGS_ACKED, xfrm_userpolicy_id, fields)


def plan_dump_policy() -> XfrmRequest:
    """Dump request for all policies of the namespace."""
    return XfrmRequest("dump_policy", "all policies", XFRM_MSG_GETPOLICY, FLAGS_DUMP,
                       xfrm_empty, {})


def plan_flush_policy() -> XfrmRequest:
    """XFRM_MSG_FLUSHPOLICY (main policy type), as ``ip xfrm policy flush``."""
    return XfrmRequest("flush_policy", "all policies", XFRM_MSG_FLUSHPOLICY, FLAGS_ACKED,
                       xfrm_empty, {})

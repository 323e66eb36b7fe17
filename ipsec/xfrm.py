"""Kernel IPsec SAs and policies over netlink (NETLINK_XFRM), built on pyroute2's framework.

pyroute2 has no xfrm API, only the ``NETLINK_XFRM`` constant, so this module declares
the xfrm messages the pyroute2 way (``nlmsg`` classes with ``fields`` and ``nla_map``,
a ``Marshal``, a ``NetlinkSocket`` subclass) and layers the project's API on top::

    SASpec / PolicySpec  --plan_*()-->  XfrmRequest  --XfrmSocket-->  kernel
      (ipsec.sa, pure)                  (pure data;                     |
                                         .encode() -> bytes)            |
    SAState / PolicyState  <--parse_sa()/parse_policy()-- nlmsg <-------+

Layouts follow ``/usr/include/linux/xfrm.h`` on x86_64 (sizes checked with a C
program, see the tests): ``xfrm_usersa_info`` 224 bytes, ``xfrm_usersa_id`` 24,
``xfrm_userpolicy_info`` 168, ``xfrm_userpolicy_id`` 64, ``xfrm_user_tmpl`` 64,
``xfrm_selector`` 56.  Padding that C inserts is spelled out as ``__pad`` fields
because pyroute2 packs fields one by one.  Requests carry the same bytes and netlink
flags as iproute2's ``ip xfrm`` (compared byte for byte in the unit tests).

Kernel behaviour this module relies on (Linux 6.1, net/xfrm/xfrm_user.c):

- an unknown or unloadable algorithm gives ENOSYS with the extended-ack message
  "Requested AEAD|CRYPT|AUTH_TRUNC|COMP algorithm not found" (checked before the
  protocol);
- a missing protocol (no esp4/ah4/ipcomp...) gives EPROTONOSUPPORT, "Requested type not
  found";
- a crypto template that cannot be instantiated at SA init gives ENOENT;
- get/delete of a missing SA or policy gives ESRCH (policy delete: ENOENT), a
  duplicate SA or policy EEXIST.

:class:`XfrmSocket` is the only part that touches the kernel.  Given ``netns`` it opens
its socket inside that named namespace (``/run/netns/NAME``) from a short-lived helper
thread that calls setns(2), so the calling thread never changes namespace.  Flushing
is refused outside a named namespace: the testbed never flushes the host's IPsec state.
"""
from __future__ import annotations

import dataclasses
import errno
import ipaddress
import logging
import os
import socket
import struct
from types import TracebackType
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from pyroute2.netlink import (
    NETLINK_XFRM,
    NLM_F_ACK,
    NLM_F_ACK_TLVS,
    NLM_F_CAPPED,
    NLM_F_DUMP,
    NLM_F_REQUEST,
    NLMSG_DONE,
    NLMSG_ERROR,
    SOL_NETLINK,
    nla,
    nlmsg,
)
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.nlsocket import AsyncNetlinkSocket, Marshal, NetlinkSocket

from ipsec.algorithms import PROTOCOL_MODULES, Algorithm, find_by_kernel_name
from ipsec.sa import (
    LEGACY_REPLAY_WINDOW,
    PolicySpec,
    SASpec,
    SelectorSpec,
    TemplateSpec,
    family_of,
)
from testbed.netns import socket_in

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------
# Constants from linux/xfrm.h, linux/netlink.h, linux/in.h
# ---------------------------------------------------------------------------------------
XFRM_MSG_NEWSA = 0x10
XFRM_MSG_DELSA = 0x11
XFRM_MSG_GETSA = 0x12
XFRM_MSG_NEWPOLICY = 0x13
XFRM_MSG_DELPOLICY = 0x14
XFRM_MSG_GETPOLICY = 0x15
XFRM_MSG_UPDPOLICY = 0x19
XFRM_MSG_UPDSA = 0x1A
XFRM_MSG_FLUSHSA = 0x1C
XFRM_MSG_FLUSHPOLICY = 0x1D

XFRM_INF = 0xFFFFFFFFFFFFFFFF
#: Message flags exactly as iproute2 6.1 sends them.  The kernel ignores CREATE/EXCL for
#: xfrm: NEWSA/NEWPOLICY always fail with EEXIST on a duplicate (UPD* would replace).
FLAGS_ADD = NLM_F_REQUEST | NLM_F_ACK
FLAGS_ACKED = NLM_F_REQUEST | NLM_F_ACK
FLAGS_GET = NLM_F_REQUEST
FLAGS_DUMP = NLM_F_REQUEST | NLM_F_DUMP

NETLINK_CAP_ACK = 10
NETLINK_EXT_ACK = 11

PROTO_NUMBERS: dict[str, int] = {"esp": socket.IPPROTO_ESP, "ah": socket.IPPROTO_AH, "comp": 108}
PROTO_NAMES: dict[int, str] = {number: name for name, number in PROTO_NUMBERS.items()}
MODE_NUMBERS: dict[str, int] = {"transport": 0, "tunnel": 1}
MODE_NAMES: dict[int, str] = {0: "transport", 1: "tunnel", 2: "ro", 3: "in_trigger", 4: "beet"}
DIRECTION_NUMBERS: dict[str, int] = {"in": 0, "out": 1, "fwd": 2}
DIRECTION_NAMES: dict[int, str] = {number: name for name, number in DIRECTION_NUMBERS.items()}
ACTION_NUMBERS: dict[str, int] = {"allow": 0, "block": 1}
ACTION_NAMES: dict[int, str] = {number: name for name, number in ACTION_NUMBERS.items()}
AF_NUMBERS: dict[int, int] = {4: socket.AF_INET, 6: socket.AF_INET6}
AF_VERSIONS: dict[int, int] = {socket.AF_INET: 4, socket.AF_INET6: 6}

NETNS_DIR = "/run/netns"
ROOT_NETNS = "/proc/1/ns/net"

# ---------------------------------------------------------------------------------------
# Message layouts (pyroute2 nlmsg/nla classes).  Names follow the C structs.
# ---------------------------------------------------------------------------------------
#: struct xfrm_selector, 56 bytes.  Addresses are xfrm_address_t: 16 bytes, IPv4 in the
#: first 4.  Ports and their masks are big-endian.
SELECTOR_FIELDS = (
    ("sel_daddr", "16s"),
    ("sel_saddr", "16s"),
    ("sel_dport", ">H"),
    ("sel_dport_mask", ">H"),
    ("sel_sport", ">H"),
    ("sel_sport_mask", ">H"),
    ("sel_family", "H"),
    ("sel_prefixlen_d", "B"),
    ("sel_prefixlen_s", "B"),
    ("sel_proto", "B"),
    ("__pad_sel", "3x"),
    ("sel_ifindex", "i"),
    ("sel_user", "I"),
)
#: struct xfrm_lifetime_cfg, 64 bytes.
LIFETIME_CFG_FIELDS = tuple((f"lft_{name}", "Q") for name in (
    "soft_byte_limit", "hard_byte_limit", "soft_packet_limit", "hard_packet_limit",
    "soft_add_expires_seconds", "hard_add_expires_seconds",
    "soft_use_expires_seconds", "hard_use_expires_seconds"))
#: struct xfrm_lifetime_cur, 32 bytes.
LIFETIME_CUR_FIELDS = tuple((f"curlft_{name}", "Q") for name in (
    "bytes", "packets", "add_time", "use_time"))
#: Byte and packet limits "infinite", expiry times 0 (none): what iproute2 sends.
LIFETIME_DEFAULTS: dict[str, int] = {
    "lft_soft_byte_limit": XFRM_INF, "lft_hard_byte_limit": XFRM_INF,
    "lft_soft_packet_limit": XFRM_INF, "lft_hard_packet_limit": XFRM_INF,
}
_ADDRESS_DEFAULTS = {"sel_daddr": b"", "sel_saddr": b"", "id_daddr": b"", "saddr": b"",
                     "daddr": b""}

#: struct xfrm_user_tmpl, 64 bytes; XFRMA_TMPL carries an array of them.
USER_TMPL = struct.Struct("=16s4sB3xH2x16sIBBBxIII")
USER_TMPL_NAMES = ("id_daddr", "id_spi", "id_proto", "family", "saddr", "reqid", "mode",
                   "share", "optional", "aalgos", "ealgos", "calgos")
ALGO_NAME_BYTES = 64


class xfrm_base(nlmsg):
    """Common attribute space of all xfrm messages (enum xfrm_attr_type_t)."""

    defaults = _ADDRESS_DEFAULTS
    nla_map = (
        ("XFRMA_UNSPEC", "none"),
        ("XFRMA_ALG_AUTH", "xfrm_algo"),
        ("XFRMA_ALG_CRYPT", "xfrm_algo"),
        ("XFRMA_ALG_COMP", "xfrm_algo"),
        ("XFRMA_ENCAP", "hex"),
        ("XFRMA_TMPL", "xfrm_user_tmpl"),
        ("XFRMA_SA", "hex"),
        ("XFRMA_POLICY", "hex"),
        ("XFRMA_SEC_CTX", "hex"),
        ("XFRMA_LTIME_VAL", "xfrm_lifetime_cur"),
        ("XFRMA_REPLAY_VAL", "xfrm_replay_state"),
        ("XFRMA_REPLAY_THRESH", "uint32"),
        ("XFRMA_ETIMER_THRESH", "uint32"),
        ("XFRMA_SRCADDR", "xfrm_address"),
        ("XFRMA_COADDR", "xfrm_address"),
        ("XFRMA_LASTUSED", "uint64"),
        ("XFRMA_POLICY_TYPE", "xfrm_userpolicy_type"),
        ("XFRMA_MIGRATE", "hex"),
        ("XFRMA_ALG_AEAD", "xfrm_algo_aead"),
        ("XFRMA_KMADDRESS", "hex"),
        ("XFRMA_ALG_AUTH_TRUNC", "xfrm_algo_auth"),
        ("XFRMA_MARK", "xfrm_mark"),
        ("XFRMA_TFCPAD", "uint32"),
        ("XFRMA_REPLAY_ESN_VAL", "xfrm_replay_state_esn"),
        ("XFRMA_SA_EXTRA_FLAGS", "uint32"),
        ("XFRMA_PROTO", "uint8"),
        ("XFRMA_ADDRESS_FILTER", "hex"),
        ("XFRMA_PAD", "none"),
        ("XFRMA_OFFLOAD_DEV", "hex"),
        ("XFRMA_SET_MARK", "uint32"),
        ("XFRMA_SET_MARK_MASK", "uint32"),
        ("XFRMA_IF_ID", "uint32"),
        ("XFRMA_MTIMER_THRESH", "uint32"),
    )

    class _xfrm_algo_base(nla):
        """struct xfrm_algo{,_auth,_aead}: name[64], lengths, then the key bytes."""

        fields: tuple = ()
        defaults = {"alg_key": b""}

        def ft_decode(self, offset: int) -> None:
            # The key has no fixed size: take alg_key_len bits, bounded by the NLA.
            fixed = struct.calcsize("=" + "".join(fmt for _, fmt in self.fields[:-1]))
            values = struct.unpack_from("=" + "".join(fmt for _, fmt in self.fields[:-1]),
                                        self.data, offset)
            for (name, _), value in zip(self.fields[:-1], values):
                self[name] = value
            end = self.offset + self.length
            key_len = (self["alg_key_len"] + 7) // 8
            self["alg_key"] = bytes(self.data[offset + fixed:min(offset + fixed + key_len, end)])
            self.pop("attrs", None)

    class xfrm_algo(_xfrm_algo_base):
        fields = (("alg_name", "64s"), ("alg_key_len", "I"), ("alg_key", "s"))

    class xfrm_algo_auth(_xfrm_algo_base):
        fields = (("alg_name", "64s"), ("alg_key_len", "I"), ("alg_trunc_len", "I"),
                  ("alg_key", "s"))

    class xfrm_algo_aead(_xfrm_algo_base):
        fields = (("alg_name", "64s"), ("alg_key_len", "I"), ("alg_icv_len", "I"),
                  ("alg_key", "s"))

    class xfrm_user_tmpl(nla):
        """An array of struct xfrm_user_tmpl; the value is a list of dicts."""

        fields: tuple = ()

        def ft_encode(self, offset: int) -> tuple[int, int]:
            for tmpl in self.getvalue():
                packed = USER_TMPL.pack(*(tmpl.get(name, 0) for name in USER_TMPL_NAMES))
                self.data.extend(packed)
                offset += len(packed)
            return offset, 0

        def ft_decode(self, offset: int) -> None:
            end = self.offset + self.length
            templates = []
            while offset + USER_TMPL.size <= end:
                templates.append(dict(zip(USER_TMPL_NAMES, USER_TMPL.unpack_from(self.data, offset))))
                offset += USER_TMPL.size
            self.value = templates
            self.pop("attrs", None)

    class xfrm_address(nla):
        """xfrm_address_t: 16 bytes, IPv4 in the first 4."""

        fields = (("value", "16s"),)

    class xfrm_lifetime_cur(nla):
        fields = LIFETIME_CUR_FIELDS

    class xfrm_replay_state(nla):
        fields = (("oseq", "I"), ("seq", "I"), ("bitmap", "I"))

    class xfrm_replay_state_esn(nla):
        """The fixed part of struct xfrm_replay_state_esn; the bitmap is not decoded."""

        fields = (("bmp_len", "I"), ("oseq", "I"), ("seq", "I"), ("oseq_hi", "I"),
                  ("seq_hi", "I"), ("replay_window", "I"))

    class xfrm_mark(nla):
        fields = (("v", "I"), ("m", "I"))

    class xfrm_userpolicy_type(nla):
        fields = (("type", "B"), ("__pad", "x"), ("reserved1", "H"), ("reserved2", "B"),
                  ("__pad2", "x"))


class xfrm_usersa_info(xfrm_base):
    """struct xfrm_usersa_info (224 bytes): XFRM_MSG_NEWSA requests and SA replies."""

    defaults = {**_ADDRESS_DEFAULTS, **LIFETIME_DEFAULTS}
    fields = SELECTOR_FIELDS + (
        ("id_daddr", "16s"),        # struct xfrm_id id (24 bytes)
        ("id_spi", ">I"),
        ("id_proto", "B"),
        ("__pad_id", "3x"),
        ("saddr", "16s"),
    ) + LIFETIME_CFG_FIELDS + LIFETIME_CUR_FIELDS + (
        ("stats_replay_window", "I"),  # struct xfrm_stats
        ("stats_replay", "I"),
        ("stats_integrity_failed", "I"),
        ("seq", "I"),
        ("reqid", "I"),
        ("family", "H"),
        ("mode", "B"),
        ("replay_window", "B"),
        ("flags", "B"),
        ("__pad", "7x"),
    )


class xfrm_usersa_id(xfrm_base):
    """struct xfrm_usersa_id (24 bytes): get/delete one SA."""

    fields = (("daddr", "16s"), ("spi", ">I"), ("family", "H"), ("proto", "B"), ("__pad", "x"))


class xfrm_userpolicy_info(xfrm_base):
    """struct xfrm_userpolicy_info (168 bytes): XFRM_MSG_NEWPOLICY and policy replies."""

    defaults = {**_ADDRESS_DEFAULTS, **LIFETIME_DEFAULTS}
    fields = SELECTOR_FIELDS + LIFETIME_CFG_FIELDS + LIFETIME_CUR_FIELDS + (
        ("priority", "I"),
        ("index", "I"),
        ("dir", "B"),
        ("action", "B"),
        ("flags", "B"),
        ("share", "B"),
        ("__pad", "4x"),
    )


class xfrm_userpolicy_id(xfrm_base):
    """struct xfrm_userpolicy_id (64 bytes): get/delete one policy."""

    fields = SELECTOR_FIELDS + (("index", "I"), ("dir", "B"), ("__pad", "3x"))


class xfrm_usersa_flush(xfrm_base):
    """struct xfrm_usersa_flush (1 byte); not padded, as iproute2 sends it (17-byte message)."""

    align = 0
    fields = (("proto", "B"),)


class xfrm_empty(xfrm_base):
    """No fixed part: XFRM_MSG_FLUSHPOLICY and dump requests."""

    fields = ()


class xfrm_nlmsgerr(nlmsg):
    """NLMSG_ERROR with extended ack: error, the echoed request (whole or capped), TLVs."""

    fields = (("error", "i"),)
    nla_map = (
        ("NLMSGERR_ATTR_UNUSED", "none"),
        ("NLMSGERR_ATTR_MSG", "asciiz"),
        ("NLMSGERR_ATTR_OFFS", "uint32"),
        ("NLMSGERR_ATTR_COOKIE", "hex"),
        ("NLMSGERR_ATTR_POLICY", "hex"),
        ("NLMSGERR_ATTR_MISS_TYPE", "uint32"),
        ("NLMSGERR_ATTR_MISS_NEST", "uint32"),
    )

    def ft_decode(self, offset: int) -> None:
        (self["error"],) = struct.unpack_from("i", self.data, offset)
        offset += 4
        flags = self["header"]["flags"]
        # pyroute2's nlmsgerr reads TLVs right after `error`; in NLMSG_ERROR the kernel
        # puts the echoed request (just its header when NLM_F_CAPPED) in between.
        # NLMSG_DONE has no echo.
        self["echo_type"] = None
        if self["header"]["type"] == NLMSG_ERROR and self.length >= 20 + 16:
            echo_len, self["echo_type"] = struct.unpack_from("IH", self.data, offset)
            offset += 16 if flags & NLM_F_CAPPED else (echo_len + 3) & ~3
        if flags & NLM_F_ACK_TLVS:
            self.decode_nlas(offset)
        else:
            self.pop("attrs", None)


class KernelError(NetlinkError):
    """A NetlinkError that keeps the kernel's extended-ack message separately."""

    def __init__(self, code: int, extack: Optional[str] = None) -> None:
        super().__init__(code, extack or os.strerror(code))
        self.extack = extack


class XfrmMarshal(Marshal):
    """Maps xfrm message types to their classes; decodes extended-ack errors."""

    msg_map = {
        XFRM_MSG_NEWSA: xfrm_usersa_info,
        XFRM_MSG_UPDSA: xfrm_usersa_info,
        XFRM_MSG_DELSA: xfrm_usersa_id,
        XFRM_MSG_GETSA: xfrm_usersa_id,
        XFRM_MSG_NEWPOLICY: xfrm_userpolicy_info,
        XFRM_MSG_UPDPOLICY: xfrm_userpolicy_info,
        XFRM_MSG_DELPOLICY: xfrm_userpolicy_id,
        XFRM_MSG_GETPOLICY: xfrm_userpolicy_id,
        XFRM_MSG_FLUSHSA: xfrm_usersa_flush,
        XFRM_MSG_FLUSHPOLICY: xfrm_empty,
    }

    def parse_one_message(self, key: int, flags: int, sequence_number: int,
                          data: bytes, offset: int, length: int) -> nlmsg:
        if key == NLMSG_ERROR or (key == NLMSG_DONE and flags & NLM_F_ACK_TLVS):
            msg = xfrm_nlmsgerr(data, offset=offset)
            msg.decode()
            code = abs(msg["error"])
            msg["header"]["error"] = KernelError(code, msg.get_attr("NLMSGERR_ATTR_MSG")) if code else None
            return msg
        return super().parse_one_message(key, flags, sequence_number, data, offset, length)


def decode_messages(data: bytes) -> list[nlmsg]:
    """Decode one netlink datagram (e.g. a captured kernel reply) into xfrm messages.

    Error messages come back too, with ``msg['header']['error']`` set to a
    :class:`KernelError`.
    """
    return list(XfrmMarshal().parse(bytes(data)))


# ---------------------------------------------------------------------------------------
# Plans: specs -> requests (pure)
# ---------------------------------------------------------------------------------------
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
    spec: Union[SASpec, PolicySpec, None] = dataclasses.field(default=None, compare=False)

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


def pack_address(address: Optional[str]) -> bytes:
    """xfrm_address_t bytes for an address string (None: all zero)."""
    if address is None:
        return bytes(16)
    return ipaddress.ip_address(address).packed.ljust(16, b"\0")


def unpack_address(raw: bytes, version: int) -> str:
    """The address string held in an xfrm_address_t, for IP version 4 or 6."""
    if version == 4:
        return str(ipaddress.IPv4Address(bytes(raw[:4])))
    return str(ipaddress.IPv6Address(bytes(raw[:16])))


def _selector_fields(selector: Optional[SelectorSpec]) -> dict[str, Any]:
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
                   proto: str, src: Optional[str]) -> XfrmRequest:
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


def plan_del_sa(dst: str, spi: int, proto: str, src: Optional[str] = None) -> XfrmRequest:
    """XFRM_MSG_DELSA for the SA (dst, spi, proto), as ``ip xfrm state delete``."""
    return _sa_id_request("del_sa", XFRM_MSG_DELSA, FLAGS_ACKED, dst, spi, proto, src)


def plan_get_sa(dst: str, spi: int, proto: str, src: Optional[str] = None) -> XfrmRequest:
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


# ---------------------------------------------------------------------------------------
# Parse: kernel messages -> plain dataclasses (pure)
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class AlgorithmState:
    """An algorithm as the kernel reports it for an installed SA."""

    kind: str
    kernel_name: str
    key: bytes = dataclasses.field(repr=False)
    key_bits: int
    icv_bits: int = 0

    @property
    def algorithm(self) -> Optional[Algorithm]:
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
    selector: Optional[SelectorSpec]
    aead: Optional[AlgorithmState] = None
    crypt: Optional[AlgorithmState] = None
    auth: Optional[AlgorithmState] = None
    comp: Optional[AlgorithmState] = None
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
            state: Optional[AlgorithmState] = getattr(self, kind)
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
    src: Optional[str]
    dst: Optional[str]
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


def _parse_selector(msg: nlmsg) -> Optional[SelectorSpec]:
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


def _alg_name(raw: Union[bytes, str]) -> str:
    if isinstance(raw, str):
        return raw.rstrip("\0")
    return bytes(raw).split(b"\0", 1)[0].decode("ascii", "replace")


def _parse_algorithm(kind: str, value: Mapping[str, Any], icv_field: Optional[str]) -> AlgorithmState:
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


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------
class XfrmError(RuntimeError):
    """An xfrm operation failed (or was refused).

    Attributes:
        operation: ``"add_sa"``, ``"del_policy"``, ``"flush_sa"``, ``"open"``...
        subject: the SA/policy/namespace concerned.
        errno: the kernel's error number, or None when the testbed refused by itself.
        kernel_message: the kernel's extended-ack text, if it sent one.
        missing_modules: kernel modules that would provide a missing algorithm or
            protocol (empty when that is not the problem).
    """

    def __init__(self, operation: str, subject: str, reason: str,
                 errno_: Optional[int] = None, kernel_message: Optional[str] = None,
                 missing_modules: Sequence[str] = ()) -> None:
        super().__init__(f"{operation} {subject}: {reason}")
        self.operation = operation
        self.subject = subject
        self.errno = errno_
        self.kernel_message = kernel_message
        self.missing_modules = tuple(missing_modules)


# Extended-ack texts of xfrm_user.c's attach_* functions, e.g. "Requested AUTH_TRUNC
# algorithm not found" for XFRMA_ALG_AUTH_TRUNC (seen on 6.1).
_EXTACK_KINDS = {"AEAD": "aead", "CRYPT": "crypt", "AUTH_TRUNC": "auth", "AUTH": "auth",
                 "COMP": "comp"}


def _missing_algorithms(spec: SASpec, extack: Optional[str]) -> list[Algorithm]:
    for word, kind in _EXTACK_KINDS.items():
        if extack and f"Requested {word} algorithm" in extack:
            alg = getattr(spec, kind)
            return [alg] if alg is not None else []
    return list(spec.algorithms)


def error_for(request: XfrmRequest, code: int, extack: Optional[str] = None) -> XfrmError:
    """The XfrmError for ``request`` failing with kernel errno ``code`` (pure).

    Names the operation and its SA/policy; for a missing algorithm (ENOSYS, or ENOENT
    when the crypto transform cannot be built) the algorithm and its kernel modules;
    for a missing protocol (EPROTONOSUPPORT) the protocol and its module.
    """
    name = errno.errorcode.get(code, str(code))
    reason = f"[{name}] {os.strerror(code)}"
    if extack:
        reason += f"; kernel says: {extack}"
    modules: list[str] = []
    spec = request.spec
    if isinstance(spec, SASpec) and code in (errno.ENOSYS, errno.ENOENT):
        algs = _missing_algorithms(spec, extack)
        for alg in algs:
            modules.extend(m for m in alg.modules if m not in modules)
        what = ", ".join(f"{alg.name} ({alg.kernel_name})" for alg in algs)
        verb = "lacks algorithm" if code == errno.ENOSYS else "could not instantiate"
        reason += (f"; this kernel {verb} {what}, provided by kernel module(s) "
                   f"{', '.join(modules)}")
    elif isinstance(spec, SASpec) and code == errno.EPROTONOSUPPORT:
        modules = list(PROTOCOL_MODULES[spec.proto][spec.family])
        if spec.proto == "comp" and spec.mode == "transport":
            modules = modules[:2]
        reason += (f"; this kernel lacks IPsec protocol {spec.proto} for IPv{spec.family} "
                   f"(mode {spec.mode}), provided by kernel module(s) {', '.join(modules)}")
    elif code == errno.ESRCH or (code == errno.ENOENT and request.operation == "del_policy"):
        reason += "; no such SA or policy"
    elif code == errno.EEXIST:
        reason += "; it is already installed"
    elif code == errno.EPERM:
        reason += "; needs CAP_NET_ADMIN (root)"
    return XfrmError(request.operation, request.subject, reason, code, extack, modules)


# ---------------------------------------------------------------------------------------
# Apply: the socket
# ---------------------------------------------------------------------------------------
def netns_path(name: str) -> str:
    """Path of a named network namespace (``/run/netns/NAME``), or ``name`` if it is a path."""
    return name if "/" in name else os.path.join(NETNS_DIR, name)


class _AsyncXfrmNetlinkSocket(AsyncNetlinkSocket):
    marshal_class = XfrmMarshal

    def setup_socket(self) -> socket.socket:
        path = self.spec["netns"]
        if path is None:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_XFRM)
        else:
            sock = socket_in(path, NETLINK_XFRM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.status["sndbuf"])
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.status["rcvbuf"])
        # Extended acks give the kernel's reason ("Requested AEAD algorithm not found");
        # capped acks keep it from echoing whole requests (keys included) back.
        sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
        sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
        return sock


class XfrmNetlinkSocket(NetlinkSocket):
    """A NETLINK_XFRM socket with the xfrm marshal, optionally inside a named netns.

    Low level (pyroute2's ``nlm_request`` etc.); use :class:`XfrmSocket` instead.
    """

    async_class = _AsyncXfrmNetlinkSocket

    def __init__(self, netns_file: Optional[str] = None) -> None:
        super().__init__(family=NETLINK_XFRM, netns=netns_file, flags=0)


class XfrmSocket:
    """Installs, reads and removes kernel SAs and policies; a context manager.

    ``XfrmSocket(netns="itb-1a2b3c-gw1")`` works inside the named namespace
    (``/run/netns/NAME``, or a path); ``netns=None`` uses the caller's namespace and
    then refuses to flush.  Every failure raises :class:`XfrmError`.  Use an instance
    from one thread.
    """

    def __init__(self, netns: Optional[str] = None) -> None:
        self.netns = netns
        self._path: Optional[str] = None
        if netns is not None:
            self._path = netns_path(netns)
            if not os.path.exists(self._path):
                raise XfrmError("open", f"netns {netns}",
                                f"no such network namespace ({self._path} does not exist)",
                                errno.ENOENT)
        try:
            self._nl: Optional[XfrmNetlinkSocket] = XfrmNetlinkSocket(self._path)
        except OSError as exc:
            raise XfrmError("open", f"netns {netns or '(current)'}",
                            f"cannot open a NETLINK_XFRM socket: {exc}", exc.errno) from exc
        log.debug("xfrm socket open in netns %s", netns or "(current)")

    @classmethod
    def _attach(cls, netlink: Any, netns: Optional[str] = None) -> "XfrmSocket":
        """An XfrmSocket over an existing netlink object (anything with ``nlm_request``
        and ``close``), without opening a socket; for tests."""
        self = cls.__new__(cls)
        self.netns = netns
        self._path = netns_path(netns) if netns is not None else None
        self._nl = netlink
        return self

    # -- lifecycle ------------------------------------------------------------------
    def close(self) -> None:
        """Close the socket (idempotent)."""
        if self._nl is not None:
            self._nl.close()
            self._nl = None

    def __enter__(self) -> "XfrmSocket":
        return self

    def __exit__(self, exc_type: Optional[type], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"XfrmSocket(netns={self.netns!r})"

    # -- plumbing -------------------------------------------------------------------
    def request(self, request: XfrmRequest) -> list[nlmsg]:
        """Send one planned request; return the reply messages (acks included).

        Raises:
            XfrmError: the kernel refused it, or the socket is closed.
        """
        if self._nl is None:
            raise XfrmError(request.operation, request.subject, "the XfrmSocket is closed")
        log.debug("%s %s (netns %s)", request.operation, request.subject, self.netns)
        try:
            return list(self._nl.nlm_request(request.to_nlmsg(), request.msg_type, request.flags))
        except NetlinkError as exc:
            raise error_for(request, exc.code, getattr(exc, "extack", None)) from exc
        except OSError as exc:  # the socket itself failed (e.g. ENOBUFS)
            raise XfrmError(request.operation, request.subject, f"netlink socket error: {exc}",
                            exc.errno) from exc

    def _refuse_outside_named_netns(self, operation: str, subject: str) -> None:
        if self._path is None:
            raise XfrmError(operation, subject,
                            "refused: this socket is not in a named network namespace, and "
                            "the testbed never flushes the host's (root namespace) xfrm state; "
                            "open XfrmSocket(netns=NAME)")
        try:
            ours, root = os.stat(self._path), os.stat(ROOT_NETNS)
        except OSError as exc:
            raise XfrmError(operation, subject, f"refused: cannot check that {self.netns} is "
                            f"not the root network namespace ({exc})") from exc
        if (ours.st_dev, ours.st_ino) == (root.st_dev, root.st_ino):
            raise XfrmError(operation, subject,
                            f"refused: {self.netns} is the root network namespace")

    # -- SAs ------------------------------------------------------------------------
    def add_sa(self, spec: SASpec) -> None:
        """Install one SA (EEXIST if an SA with the same dst/spi/proto exists)."""
        self.request(plan_add_sa(spec))

    def del_sa(self, dst: str, spi: int, proto: str, src: Optional[str] = None) -> None:
        """Delete the SA (dst, spi, proto); XfrmError with errno ESRCH if there is none."""
        self.request(plan_del_sa(dst, spi, proto, src))

    def get_sa(self, dst: str, spi: int, proto: str, src: Optional[str] = None) -> SAState:
        """The SA (dst, spi, proto) with its counters; XfrmError (ESRCH) if there is none."""
        request = plan_get_sa(dst, spi, proto, src)
        replies = [m for m in self.request(request) if m["header"]["type"] == XFRM_MSG_NEWSA]
        if not replies:
            raise XfrmError(request.operation, request.subject, "the kernel sent no SA")
        return parse_sa(replies[0])

    def dump_sa(self) -> list[SAState]:
        """Every SA in the namespace."""
        return [parse_sa(m) for m in self.request(plan_dump_sa())
                if m["header"]["type"] == XFRM_MSG_NEWSA]

    def flush_sa(self) -> None:
        """Delete every SA of the namespace; refused outside a named namespace."""
        request = plan_flush_sa()
        self._refuse_outside_named_netns(request.operation, request.subject)
        self.request(request)

    # -- policies -------------------------------------------------------------------
    def add_policy(self, spec: PolicySpec) -> None:
        """Install one policy (EEXIST if one with the same selector and direction exists)."""
        self.request(plan_add_policy(spec))

    def del_policy(self, selector: SelectorSpec, direction: str) -> None:
        """Delete the policy (selector, direction)."""
        self.request(plan_del_policy(selector, direction))

    def dump_policy(self) -> list[PolicyState]:
        """Every policy in the namespace (per-socket policies excluded)."""
        return [parse_policy(m) for m in self.request(plan_dump_policy())
                if m["header"]["type"] == XFRM_MSG_NEWPOLICY
                and m["dir"] in DIRECTION_NAMES]

    def flush_policy(self) -> None:
        """Delete every policy of the namespace; refused outside a named namespace."""
        request = plan_flush_policy()
        self._refuse_outside_named_netns(request.operation, request.subject)
        self.request(request)

    # -- batches --------------------------------------------------------------------
    def install(self, sas: Iterable[SASpec], policies: Iterable[PolicySpec] = ()) -> None:
        """Install SAs, then policies; all or nothing.

        If any item fails, what this call already installed is deleted again (newest
        first) and the first error is raised.  A failure while rolling back is logged,
        not raised, so the original cause is what the caller sees.
        """
        done: list[XfrmRequest] = []
        try:
            for sa in sas:
                self.add_sa(sa)
                done.append(plan_del_sa(sa.dst, sa.spi, sa.proto, sa.src))
            for policy in policies:
                self.add_policy(policy)
                done.append(plan_del_policy(policy.selector, policy.direction))
        except BaseException:
            log.warning("install failed after %d item(s); rolling back", len(done))
            for undo in reversed(done):
                try:
                    self.request(undo)
                except XfrmError as exc:
                    log.warning("rollback: %s", exc)
            raise
        log.info("installed %d SA/policy item(s) in netns %s", len(done), self.netns)

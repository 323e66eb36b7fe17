"""The xfrm message layouts, declared the pyroute2 way (``nlmsg``/``nla`` classes named after the C structs)."""
from __future__ import annotations

import os
import struct
from typing import ClassVar

from pyroute2.netlink import (
    NLM_F_ACK_TLVS,
    NLM_F_CAPPED,
    NLMSG_DONE,
    NLMSG_ERROR,
    nla,
    nlmsg,
)
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.nlsocket import Marshal

from ipsec.xfrm.constants import (
    XFRM_INF,
    XFRM_MSG_DELPOLICY,
    XFRM_MSG_DELSA,
    XFRM_MSG_FLUSHPOLICY,
    XFRM_MSG_FLUSHSA,
    XFRM_MSG_GETPOLICY,
    XFRM_MSG_GETSA,
    XFRM_MSG_NEWPOLICY,
    XFRM_MSG_NEWSA,
    XFRM_MSG_UPDPOLICY,
    XFRM_MSG_UPDSA,
)

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

    defaults: ClassVar[dict] = _ADDRESS_DEFAULTS
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
        defaults: ClassVar[dict] = {"alg_key": b""}

        def ft_decode(self, offset: int) -> None:
            # The key has no fixed size: take alg_key_len bits, bounded by the NLA.
            fixed = struct.calcsize("=" + "".join(fmt for _, fmt in self.fields[:-1]))
            values = struct.unpack_from("=" + "".join(fmt for _, fmt in self.fields[:-1]),
                                        self.data, offset)
            for (name, _), value in zip(self.fields[:-1], values, strict=True):
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
                templates.append(dict(zip(USER_TMPL_NAMES, USER_TMPL.unpack_from(self.data, offset), strict=True)))
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

    defaults: ClassVar[dict] = {**_ADDRESS_DEFAULTS, **LIFETIME_DEFAULTS}
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

    defaults: ClassVar[dict] = {**_ADDRESS_DEFAULTS, **LIFETIME_DEFAULTS}
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

    def __init__(self, code: int, extack: str | None = None) -> None:
        super().__init__(code, extack or os.strerror(code))
        self.extack = extack


class XfrmMarshal(Marshal):
    """Maps xfrm message types to their classes; decodes extended-ack errors."""

    msg_map: ClassVar[dict] = {
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

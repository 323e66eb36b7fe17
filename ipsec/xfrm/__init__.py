"""Kernel IPsec SAs and policies over netlink (NETLINK_XFRM), built on pyroute2's framework.

One module per layer: :mod:`~ipsec.xfrm.constants`, :mod:`~ipsec.xfrm.messages` (the C
structs as pyroute2 classes), :mod:`~ipsec.xfrm.plans` (specs -> requests, pure),
:mod:`~ipsec.xfrm.state` (replies -> dataclasses, pure), :mod:`~ipsec.xfrm.errors` and
:mod:`~ipsec.xfrm.apply` (the socket); this package re-exports their public names.

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

from ipsec.xfrm.apply import (
    XfrmNetlinkSocket,
    XfrmSocket,
    netns_path,
)
from ipsec.xfrm.constants import (
    ACTION_NAMES,
    ACTION_NUMBERS,
    AF_NUMBERS,
    AF_VERSIONS,
    DIRECTION_NAMES,
    DIRECTION_NUMBERS,
    FLAGS_ACKED,
    FLAGS_ADD,
    FLAGS_DUMP,
    FLAGS_GET,
    MODE_NAMES,
    MODE_NUMBERS,
    NETLINK_CAP_ACK,
    NETLINK_EXT_ACK,
    NETNS_DIR,
    PROTO_NAMES,
    PROTO_NUMBERS,
    ROOT_NETNS,
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
from ipsec.xfrm.errors import (
    XfrmError,
    error_for,
)
from ipsec.xfrm.messages import (
    ALGO_NAME_BYTES,
    LIFETIME_CFG_FIELDS,
    LIFETIME_CUR_FIELDS,
    LIFETIME_DEFAULTS,
    SELECTOR_FIELDS,
    USER_TMPL,
    USER_TMPL_NAMES,
    KernelError,
    XfrmMarshal,
    decode_messages,
    xfrm_base,
    xfrm_empty,
    xfrm_nlmsgerr,
    xfrm_userpolicy_id,
    xfrm_userpolicy_info,
    xfrm_usersa_flush,
    xfrm_usersa_id,
    xfrm_usersa_info,
)
from ipsec.xfrm.plans import (
    XfrmRequest,
    pack_address,
    plan_add_policy,
    plan_add_sa,
    plan_del_policy,
    plan_del_sa,
    plan_dump_policy,
    plan_dump_sa,
    plan_flush_policy,
    plan_flush_sa,
    plan_get_sa,
    unpack_address,
)
from ipsec.xfrm.state import (
    AlgorithmState,
    PolicyState,
    SAState,
    TemplateState,
    parse_policy,
    parse_sa,
)

__all__ = [
    "XFRM_MSG_NEWSA",
    "XFRM_MSG_DELSA",
    "XFRM_MSG_GETSA",
    "XFRM_MSG_NEWPOLICY",
    "XFRM_MSG_DELPOLICY",
    "XFRM_MSG_GETPOLICY",
    "XFRM_MSG_UPDPOLICY",
    "XFRM_MSG_UPDSA",
    "XFRM_MSG_FLUSHSA",
    "XFRM_MSG_FLUSHPOLICY",
    "XFRM_INF",
    "FLAGS_ADD",
    "FLAGS_ACKED",
    "FLAGS_GET",
    "FLAGS_DUMP",
    "NETLINK_CAP_ACK",
    "NETLINK_EXT_ACK",
    "PROTO_NUMBERS",
    "PROTO_NAMES",
    "MODE_NUMBERS",
    "MODE_NAMES",
    "DIRECTION_NUMBERS",
    "DIRECTION_NAMES",
    "ACTION_NUMBERS",
    "ACTION_NAMES",
    "AF_NUMBERS",
    "AF_VERSIONS",
    "NETNS_DIR",
    "ROOT_NETNS",
    "SELECTOR_FIELDS",
    "LIFETIME_CFG_FIELDS",
    "LIFETIME_CUR_FIELDS",
    "LIFETIME_DEFAULTS",
    "USER_TMPL",
    "USER_TMPL_NAMES",
    "ALGO_NAME_BYTES",
    "xfrm_base",
    "xfrm_usersa_info",
    "xfrm_usersa_id",
    "xfrm_userpolicy_info",
    "xfrm_userpolicy_id",
    "xfrm_usersa_flush",
    "xfrm_empty",
    "xfrm_nlmsgerr",
    "KernelError",
    "XfrmMarshal",
    "decode_messages",
    "XfrmRequest",
    "pack_address",
    "unpack_address",
    "plan_add_sa",
    "plan_del_sa",
    "plan_get_sa",
    "plan_dump_sa",
    "plan_flush_sa",
    "plan_add_policy",
    "plan_del_policy",
    "plan_dump_policy",
    "plan_flush_policy",
    "AlgorithmState",
    "SAState",
    "TemplateState",
    "PolicyState",
    "parse_sa",
    "parse_policy",
    "XfrmError",
    "error_for",
    "netns_path",
    "XfrmNetlinkSocket",
    "XfrmSocket",
]

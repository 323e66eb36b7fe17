"""Constants of linux/xfrm.h, linux/netlink.h and linux/in.h that the xfrm messages use."""
from __future__ import annotations

import socket

from pyroute2.netlink import (
    NLM_F_ACK,
    NLM_F_DUMP,
    NLM_F_REQUEST,
)

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
#: setsockopt(SOL_SOCKET) that sets a buffer above rmem_max (root); not in Python's socket module.
SO_RCVBUFFORCE = 33

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

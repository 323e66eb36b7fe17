"""Many xfrm requests per system call: what makes installing 10,000 SAs take seconds.

One request per round trip (send, wait for the ack, send the next) costs two or three
system calls per SA or policy; inside User-Mode Linux a system call of the guest is a
round trip through the host, and that, not the kernel's work, is what limits ``ip
-batch`` and a request-by-request netlink layer to a few thousand operations a second.

A batch sends consecutive requests together, up to :data:`MAX_MESSAGES` (or
:data:`MAX_BYTES`) in one datagram.  The kernel's xfrm socket handles a datagram's
messages one after another in the sender's own system call (``netlink_rcv_skb``),
and answers a message when it asked for an ack or when it failed.  So only the
last request of a datagram asks for an ack: when that ack (or its error) has arrived,
every earlier request of the datagram has been handled, and the error messages among
what arrived name exactly the requests that failed (by sequence number).  A datagram
costs one ``send`` and, unless something failed, one ``recv``.

:func:`frame` and :func:`failures` are pure; :func:`exchange` drives a socket.
"""
from __future__ import annotations

import dataclasses
import socket
import struct
from collections.abc import Iterator, Sequence

from pyroute2.netlink import NLM_F_ACK, NLMSG_ERROR

from ipsec.xfrm.plans import XfrmRequest

#: Requests per datagram.  Error messages for a datagram queue up on the socket before
#: they are read, and each costs about a kilobyte of receive buffer: 64 stay far below
#: the buffer :func:`exchange`'s caller sets (see ``XfrmSocket``).
MAX_MESSAGES = 64
#: Bytes per datagram, under the default send buffer (212,992 bytes) with room to spare.
MAX_BYTES = 32 * 1024
_HEADER = struct.Struct("=IHHII")  # struct nlmsghdr: len, type, flags, seq, pid


@dataclasses.dataclass(frozen=True)
class Datagram:
    """Requests ``first .. first + count - 1`` of a batch, encoded; the last one is acked."""

    data: bytes
    first: int
    count: int

    @property
    def last(self) -> int:
        return self.first + self.count - 1


def frame(requests: Sequence[XfrmRequest], first_seq: int, pid: int = 0,
          max_messages: int | None = None, max_bytes: int | None = None) -> list[Datagram]:
    """Encode ``requests`` into datagrams; request ``i`` gets sequence number ``first_seq + i``.

    Only the last request of each datagram keeps NLM_F_ACK; a request bigger than
    ``max_bytes`` travels alone.  The limits default to :data:`MAX_MESSAGES` and
    :data:`MAX_BYTES`.
    """
    max_messages = MAX_MESSAGES if max_messages is None else max_messages
    max_bytes = MAX_BYTES if max_bytes is None else max_bytes
    if max_messages < 1:
        raise ValueError(f"max_messages must be at least 1, not {max_messages}")
    encoded = [r.encode(first_seq + i, pid) for i, r in enumerate(requests)]
    out: list[Datagram] = []
    start = 0
    while start < len(encoded):
        end, size = start, 0
        while end < len(encoded) and end - start < max_messages and (
                end == start or size + len(encoded[end]) <= max_bytes):
            size += len(encoded[end])
            end += 1
        parts = [_without_ack(m) for m in encoded[start:end - 1]] + [_with_ack(encoded[end - 1])]
        out.append(Datagram(b"".join(parts), first_seq + start, end - start))
        start = end
    return out


def _set_flags(message: bytes, flags: int) -> bytes:
    return message[:6] + struct.pack("=H", flags) + message[8:]


def _flags(message: bytes) -> int:
    return struct.unpack_from("=H", message, 6)[0]


def _without_ack(message: bytes) -> bytes:
    return _set_flags(message, _flags(message) & ~NLM_F_ACK)


def _with_ack(message: bytes) -> bytes:
    return _set_flags(message, _flags(message) | NLM_F_ACK)


def messages(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """``(type, seq, message bytes)`` for each netlink message in one datagram."""
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, msg_type, _, seq, _ = _HEADER.unpack_from(data, offset)
        if length < _HEADER.size:
            raise ValueError(f"netlink message with length {length} at offset {offset}")
        yield msg_type, seq, data[offset:offset + length]
        offset += (length + 3) & ~3


def failures(data: bytes) -> tuple[dict[int, bytes], set[int]]:
    """From one received datagram: {seq: the error message} of the failed requests, and
    the sequence numbers it answers (acks and errors alike)."""
    failed: dict[int, bytes] = {}
    answered: set[int] = set()
    for msg_type, seq, message in messages(data):
        if msg_type != NLMSG_ERROR:
            continue  # e.g. a notification: not an answer
        answered.add(seq)
        (code,) = struct.unpack_from("=i", message, _HEADER.size)
        if code:
            failed[seq] = message
    return failed, answered


def exchange(sock: socket.socket, datagrams: Sequence[Datagram],
             bufsize: int = 65536) -> dict[int, bytes]:
    """Send each datagram and read until its last request is answered; {seq: error message}.

    Raises OSError if the socket fails (ENOBUFS: answers were lost).
    """
    failed: dict[int, bytes] = {}
    for d in datagrams:
        sock.send(d.data)
        while True:
            got, answered = failures(sock.recv(bufsize))
            failed.update((seq, m) for seq, m in got.items() if d.first <= seq <= d.last)
            if d.last in answered:
                break
    return failed

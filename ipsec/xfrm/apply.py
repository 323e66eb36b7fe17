"""The only part that touches the kernel: :class:`XfrmSocket`."""
from __future__ import annotations

import errno
import logging
import os
import socket
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any

from pyroute2.netlink import (
    NETLINK_XFRM,
    SOL_NETLINK,
    nlmsg,
)
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.nlsocket import AsyncNetlinkSocket, NetlinkSocket

from ipsec.sa import (
    PolicySpec,
    SASpec,
    SelectorSpec,
)
from ipsec.xfrm import batch as _batch
from ipsec.xfrm.constants import (
    DIRECTION_NAMES,
    NETLINK_CAP_ACK,
    NETLINK_EXT_ACK,
    NETNS_DIR,
    ROOT_NETNS,
    SO_RCVBUFFORCE,
    XFRM_MSG_NEWPOLICY,
    XFRM_MSG_NEWSA,
)
from ipsec.xfrm.errors import XfrmError, error_for
from ipsec.xfrm.messages import XfrmMarshal, decode_messages
from ipsec.xfrm.plans import (
    XfrmRequest,
    plan_add_policy,
    plan_add_sa,
    plan_del_policy,
    plan_del_sa,
    plan_dump_policy,
    plan_dump_sa,
    plan_flush_policy,
    plan_flush_sa,
    plan_get_sa,
)
from ipsec.xfrm.state import PolicyState, SAState, parse_policy, parse_sa
from testbed.netns import socket_in

log = logging.getLogger(__name__)

#: Receive buffer of the batch socket: room for every answer to one datagram of a batch.
BATCH_RCVBUF = 1 << 20


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

    def __init__(self, netns_file: str | None = None) -> None:
        super().__init__(family=NETLINK_XFRM, netns=netns_file, flags=0)


class XfrmSocket:
    """Installs, reads and removes kernel SAs and policies; a context manager.

    ``XfrmSocket(netns="itb-1a2b3c-gw1")`` works inside the named namespace
    (``/run/netns/NAME``, or a path); ``netns=None`` uses the caller's namespace and
    then refuses to flush.  Every failure raises :class:`XfrmError`.  Use an instance
    from one thread.
    """

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        self._path: str | None = None
        self._raw: socket.socket | None = None
        self._seq = 0
        if netns is not None:
            self._path = netns_path(netns)
            if not os.path.exists(self._path):
                raise XfrmError("open", f"netns {netns}",
                                f"no such network namespace ({self._path} does not exist)",
                                errno.ENOENT)
        try:
            self._nl: XfrmNetlinkSocket | None = XfrmNetlinkSocket(self._path)
        except OSError as exc:
            raise XfrmError("open", f"netns {netns or '(current)'}",
                            f"cannot open a NETLINK_XFRM socket: {exc}", exc.errno) from exc
        log.debug("xfrm socket open in netns %s", netns or "(current)")

    @classmethod
    def _attach(cls, netlink: Any, netns: str | None = None, raw: Any = None) -> XfrmSocket:
        """An XfrmSocket over an existing netlink object (anything with ``nlm_request``
        and ``close``) and, for batches, a datagram socket (``send``, ``recv``,
        ``getsockname``, ``close``), without opening a socket; for tests."""
        self = cls.__new__(cls)
        self.netns = netns
        self._path = netns_path(netns) if netns is not None else None
        self._nl = netlink
        self._raw = raw
        self._seq = 0
        return self

    # -- lifecycle ------------------------------------------------------------------
    def close(self) -> None:
        """Close the socket (idempotent)."""
        if self._nl is not None:
            self._nl.close()
            self._nl = None
        if self._raw is not None:
            self._raw.close()
            self._raw = None

    def __enter__(self) -> XfrmSocket:
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
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

    def del_sa(self, dst: str, spi: int, proto: str, src: str | None = None) -> None:
        """Delete the SA (dst, spi, proto); XfrmError with errno ESRCH if there is none."""
        self.request(plan_del_sa(dst, spi, proto, src))

    def get_sa(self, dst: str, spi: int, proto: str, src: str | None = None) -> SAState:
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
    def _batch_socket(self, operation: str) -> socket.socket:
        """The datagram socket that batches use, opened on first use in this namespace."""
        if self._nl is None:
            raise XfrmError(operation, f"netns {self.netns or '(current)'}", "the XfrmSocket is closed")
        if self._raw is None:
            try:
                sock = (socket_in(self._path, NETLINK_XFRM) if self._path is not None
                        else socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_XFRM))
                try:
                    sock.bind((0, 0))
                    sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
                    sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)  # never echo keys back
                    try:
                        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, BATCH_RCVBUF)
                    except PermissionError:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BATCH_RCVBUF)
                except OSError:
                    sock.close()
                    raise
            except OSError as exc:
                raise XfrmError(operation, f"netns {self.netns or '(current)'}",
                                f"cannot open a NETLINK_XFRM socket: {exc}", exc.errno) from exc
            self._raw = sock
        return self._raw

    def batch(self, requests: Sequence[XfrmRequest]) -> list[XfrmError | None]:
        """Send ``requests`` many per system call (see :mod:`ipsec.xfrm.batch`); each one's
        error, or None where it succeeded, in order.

        Every request is tried, whatever failed before it.  Raises XfrmError only when
        the socket itself fails, and then which requests took effect is unknown.
        """
        if not requests:
            return []
        sock = self._batch_socket(requests[0].operation)
        first = self._seq + 1
        self._seq += len(requests)
        log.debug("batch of %d request(s) (netns %s)", len(requests), self.netns)
        try:
            pid = sock.getsockname()[0]
            failed = _batch.exchange(sock, _batch.frame(requests, first, pid))
        except OSError as exc:
            raise XfrmError(requests[0].operation, f"batch of {len(requests)} ({requests[0].subject} ...)",
                            f"netlink socket error: {exc}; what the batch changed is unknown",
                            exc.errno) from exc
        errors: list[XfrmError | None] = [None] * len(requests)
        for seq, message in failed.items():
            (reply,) = decode_messages(message)
            kernel = reply["header"]["error"]
            errors[seq - first] = error_for(requests[seq - first], kernel.code, kernel.extack)
        return errors

    def install(self, sas: Iterable[SASpec], policies: Iterable[PolicySpec] = ()) -> None:
        """Install SAs, then policies, in batches; all or nothing.

        If any item fails, what this call installed is deleted again (newest first) and
        the first error is raised.  A failure while rolling back is logged, not raised,
        so the original cause is what the caller sees.
        """
        sas, policies = list(sas), list(policies)
        adds = [plan_add_sa(sa) for sa in sas] + [plan_add_policy(p) for p in policies]
        undos = ([plan_del_sa(sa.dst, sa.spi, sa.proto, sa.src) for sa in sas]
                 + [plan_del_policy(p.selector, p.direction) for p in policies])
        try:
            errors = self.batch(adds)
        except XfrmError:
            log.warning("install: the socket failed; removing whatever went in")
            self._roll_back(undos, missing_ok=True)
            raise
        failed = [e for e in errors if e is not None]
        if failed:
            log.warning("install failed for %d of %d item(s); rolling back", len(failed), len(adds))
            self._roll_back([u for u, e in zip(undos, errors, strict=True) if e is None])
            raise failed[0]
        log.info("installed %d SA/policy item(s) in netns %s", len(adds), self.netns)

    def _roll_back(self, undos: list[XfrmRequest], missing_ok: bool = False) -> None:
        try:
            errors = self.batch(undos[::-1])
        except XfrmError as exc:
            log.warning("rollback: %s", exc)
            return
        for e in errors:
            if e is not None and not (missing_ok and _is_missing(e)):
                log.warning("rollback: %s", e)

    def remove(self, sas: Iterable[SASpec], policies: Iterable[PolicySpec] = (),
               missing_ok: bool = False) -> None:
        """Delete policies, then SAs, in batches; every one is tried.

        Raises the first error (none for an SA or policy already gone when
        ``missing_ok``).
        """
        deletes = ([plan_del_policy(p.selector, p.direction) for p in policies]
                   + [plan_del_sa(sa.dst, sa.spi, sa.proto, sa.src) for sa in sas])
        errors = [e for e in self.batch(deletes)
                  if e is not None and not (missing_ok and _is_missing(e))]
        if errors:
            raise errors[0]
        log.info("removed %d SA/policy item(s) in netns %s", len(deletes), self.netns)


def _is_missing(error: XfrmError) -> bool:
    """A delete that found nothing: ESRCH for an SA, ENOENT for a policy."""
    return error.errno in (errno.ESRCH, errno.ENOENT)

"""The only part that touches the kernel: :class:`XfrmSocket`."""
from __future__ import annotations

import errno
import logging
import os
import socket
from collections.abc import Iterable
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
from ipsec.xfrm.constants import (
    DIRECTION_NAMES,
    NETLINK_CAP_ACK,
    NETLINK_EXT_ACK,
    NETNS_DIR,
    ROOT_NETNS,
    XFRM_MSG_NEWPOLICY,
    XFRM_MSG_NEWSA,
)
from ipsec.xfrm.errors import XfrmError, error_for
from ipsec.xfrm.messages import XfrmMarshal
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
    def _attach(cls, netlink: Any, netns: str | None = None) -> XfrmSocket:
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

"""The smallest network: two namespaces joined by one veth.

::

    itb-<run>-a                          itb-<run>-b
    +-----------------+   veth pair   +-----------------+
    | itb<run>a       |---------------| itb<run>b       |
    | 192.0.2.1/24    |               | 192.0.2.2/24    |
    | 2001:db8::1/64  |               | 2001:db8::2/64  |
    +-----------------+               +-----------------+

Addresses come from the documentation ranges (RFC 5737, RFC 3849): they exist only
inside these namespaces.  Used by the integration tests and the quick measurement;
the Mininet topologies build on the same namespace helpers.
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

from testbed import names, netns

IFA_F_NODAD = 0x02


@dataclasses.dataclass(frozen=True)
class VethPair:
    """Names and addresses of a built pair (``side`` is ``"a"`` or ``"b"``)."""

    run_id: str
    a: str
    b: str
    if_a: str
    if_b: str
    v4a: str = "192.0.2.1"
    v4b: str = "192.0.2.2"
    v6a: str = "2001:db8::1"
    v6b: str = "2001:db8::2"
    mtu: int = 1500

    def addr(self, side: str, family: int) -> str:
        if side not in ("a", "b") or family not in (4, 6):
            raise ValueError(f"side must be 'a' or 'b' and family 4 or 6, not {side!r}, {family!r}")
        return getattr(self, f"v{family}{side}")


@contextlib.contextmanager
def veth_pair(run_id: str | None = None, mtu: int = 1500) -> Iterator[VethPair]:
    """Build the pair for the ``with`` block; both namespaces are deleted after it."""

    if not 1280 <= mtu <= 65535:
        raise ValueError(f"mtu must be 1280..65535 (IPv6 needs 1280), not {mtu}")
    rid = run_id or names.new_run_id()
    p = VethPair(rid, names.netns_name(rid, "a"), names.netns_name(rid, "b"),
                 names.ifname(rid, "a"), names.ifname(rid, "b"), mtu=mtu)
    with contextlib.ExitStack() as stack:
        for ns in (p.a, p.b):
            netns.create(ns)
            stack.callback(netns.delete, ns)
        with netns.iproute(p.a) as ipr:
            # created inside a and its peer moved to b at once: nothing touches the root namespace
            ipr.link("add", ifname=p.if_a, kind="veth", peer={"ifname": p.if_b, "net_ns_fd": p.b})
        for ns, dev, v4, v6 in ((p.a, p.if_a, p.v4a, p.v6a), (p.b, p.if_b, p.v4b, p.v6b)):
            with netns.iproute(ns) as ipr:
                idx = ipr.link_lookup(ifname=dev)[0]
                ipr.link("set", index=idx, mtu=mtu)
                ipr.addr("add", index=idx, address=v4, prefixlen=24)
                ipr.addr("add", index=idx, address=v6, prefixlen=64, flags=IFA_F_NODAD)
                ipr.link("set", index=idx, state="up")
        yield p

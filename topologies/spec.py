"""Topologies as data: nodes, links, a dual-stack address plan, routes, IPsec pairs.

Pure: standard library only, testable without root.  The four topologies build a
:class:`TopologySpec`; :mod:`topologies.network` turns one into namespaces with
Mininet.

Address plan (deterministic): link segment ``k`` is ``198.18.k.0/24`` and
``2001:db8:0:k::/64`` (RFC 2544's benchmarking range and RFC 3849's documentation
prefix: they exist only inside the testbed's namespaces).  On each segment the
nodes are numbered in the order the links name them, from 1; a ``switch`` node
(a Linux bridge) has no address.  Routes are computed: every node reaches every
segment through the first hop of a shortest path, and ``gateway`` nodes forward.
"""
from __future__ import annotations

import collections
import dataclasses
import ipaddress
import re

from ipsec.overhead import PMTU_MODES

ROLES = ("host", "gateway", "switch")
MIN_MTU = 1280  # IPv6 needs at least this (RFC 8200); every segment is dual-stack
MAX_MTU = 65535
MAX_CLIENTS = 200  # one /24 client segment with room for the gateway or server
_NAME = re.compile(r"^[a-z][a-z0-9]{0,3}$")


def client_names(clients: int) -> list[str]:
    """``c1`` .. ``cN`` for the multi-client topologies; ValueError outside 1..MAX_CLIENTS."""
    if isinstance(clients, bool) or not isinstance(clients, int) or not 1 <= clients <= MAX_CLIENTS:
        raise ValueError(f"clients must be 1..{MAX_CLIENTS}, not {clients!r}")
    return [f"c{i}" for i in range(1, clients + 1)]


def v4_segment(k: int) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(f"198.18.{k}.0/24")


def v6_segment(k: int) -> ipaddress.IPv6Network:
    return ipaddress.IPv6Network(f"2001:db8:0:{k:x}::/64")


@dataclasses.dataclass(frozen=True)
class NodeSpec:
    """A node: ``name`` (1-4 lowercase letters/digits, used in interface names) and role."""

    name: str
    role: str = "host"

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"node name must be 1-4 lowercase letters or digits starting with a letter, "
                             f"not {self.name!r}")
        if self.role not in ROLES:
            raise ValueError(f"node role must be one of {', '.join(ROLES)}, not {self.role!r}")


@dataclasses.dataclass(frozen=True)
class LinkSpec:
    """A point-to-point link (a veth pair) between nodes ``a`` and ``b`` on segment ``segment``.

    ``shaped``: the link the experiment shapes (the seeds' bottleneck); ``untrusted``: the
    link that stands for the Internet, where only IPsec may be seen.
    """

    a: str
    b: str
    segment: int
    mtu: int = 1500
    shaped: bool = False
    untrusted: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.segment <= 255:
            raise ValueError(f"link segment must be 0..255, not {self.segment}")
        if not MIN_MTU <= self.mtu <= MAX_MTU:
            raise ValueError(f"link mtu must be {MIN_MTU}..{MAX_MTU} (IPv6 needs {MIN_MTU}), not {self.mtu}")
        if self.a == self.b:
            raise ValueError(f"a link joins two different nodes, not {self.a} to itself")


@dataclasses.dataclass(frozen=True)
class IPsecPair:
    """Traffic between hosts ``a`` and ``b`` that IPsec protects.

    Transport mode: the hosts are the endpoints.  Tunnel mode: ``tunnel_a``/``tunnel_b``
    are the endpoints (a gateway, or the host itself for a road warrior); each side's
    selector is the host's LAN segment behind a gateway, or the host itself.
    """

    a: str
    b: str
    tunnel_a: str
    tunnel_b: str


@dataclasses.dataclass(frozen=True)
class TopologySpec:
    """A whole network; checked on construction."""

    name: str
    nodes: tuple[NodeSpec, ...]
    links: tuple[LinkSpec, ...]
    ipsec: tuple[IPsecPair, ...]
    #: the (client, server) pairs measurements run between
    flows: tuple[tuple[str, str], ...]
    pmtu: str = "discover"

    def __post_init__(self) -> None:
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: node names repeat: {names}")
        known = set(names)
        for link in self.links:
            for end in (link.a, link.b):
                if end not in known:
                    raise ValueError(f"{self.name}: link {link.a}-{link.b} names unknown node {end!r}")
        for pair in self.ipsec:
            for end in (pair.a, pair.b, pair.tunnel_a, pair.tunnel_b):
                if end not in known:
                    raise ValueError(f"{self.name}: IPsec pair names unknown node {end!r}")
        if self.pmtu not in PMTU_MODES:
            raise ValueError(f"pmtu must be one of {', '.join(PMTU_MODES)}, not {self.pmtu!r}")
        if sum(link.shaped for link in self.links) != 1:
            raise ValueError(f"{self.name}: exactly one link must be the shaped one")

    def node(self, name: str) -> NodeSpec:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    @property
    def shaped_link(self) -> LinkSpec:
        return next(link for link in self.links if link.shaped)

    def shaped_sender(self, client: str) -> tuple[str, str]:
        """(node, peer) of the shaped link as ``client``'s data crosses it: the end on the
        client's side, whose egress shaper carries the data (the other end's carries the ACKs)."""
        link = self.shaped_link
        seen, todo = {client}, [client]
        while todo:
            here = todo.pop()
            for hop in self.links:
                if hop is link or here not in (hop.a, hop.b):
                    continue
                other = hop.b if here == hop.a else hop.a
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
        if link.a in seen and link.b not in seen:
            return link.a, link.b
        if link.b in seen and link.a not in seen:
            return link.b, link.a
        raise ValueError(f"{self.name}: {client} is not on one side of the shaped link {link.a}-{link.b}")


@dataclasses.dataclass(frozen=True)
class Interface:
    """One end of a link on a node, with its addresses (None on a switch port)."""

    node: str
    index: int
    segment: int
    peer: str
    mtu: int
    v4: str | None  # "198.18.1.2/24"
    v6: str | None

    def ifname(self, run_id: str) -> str:
        """``itb<run id><node>e<index>``, within 15 characters."""
        return f"itb{run_id}{self.node}e{self.index}"

    def address(self, family: int) -> str | None:
        value = self.v4 if family == 4 else self.v6
        return value.split("/")[0] if value else None


@dataclasses.dataclass(frozen=True)
class Route:
    """``dst`` (a segment prefix) via ``gateway`` on node ``node``."""

    node: str
    dst: str
    gateway: str


@dataclasses.dataclass(frozen=True)
class AddressPlan:
    interfaces: tuple[Interface, ...]
    routes: tuple[Route, ...]

    def of(self, node: str) -> tuple[Interface, ...]:
        return tuple(i for i in self.interfaces if i.node == node)

    def next_hops(self, flows: tuple[tuple[str, str], ...] = ()) -> tuple[tuple[Interface, Interface], ...]:
        """``(x, y)``: node interface ``x`` and, on its segment, the interface ``y`` of a next hop
        of ``x``'s routes, or of a node routing through ``x``, or of the other end of one of ``flows``
        sharing the segment (both ways round), in plan order."""
        owner = {i.address(f): i for i in self.interfaces for f in (4, 6) if i.address(f)}
        pairs = set()
        for r in self.routes:
            hop = owner[r.gateway]
            here = next(i for i in self.of(r.node) if i.segment == hop.segment)
            pairs |= {(here, hop), (hop, here)}
        for a, b in flows:
            for x in (i for i in self.of(a) if i.v4):
                for y in (i for i in self.of(b) if i.v4 and i.segment == x.segment):
                    pairs |= {(x, y), (y, x)}
        order = {i: n for n, i in enumerate(self.interfaces)}
        return tuple(sorted(pairs, key=lambda p: (order[p[0]], order[p[1]])))

    def address(self, node: str, family: int = 4) -> str:
        """The node's address on its first addressed interface."""
        for i in self.of(node):
            if i.address(family):
                return i.address(family)
        raise ValueError(f"node {node} has no IPv{family} address")

    def segment_prefix(self, node: str, family: int) -> str:
        """The prefix of the node's first addressed segment (its LAN)."""
        for i in self.of(node):
            value = i.v4 if family == 4 else i.v6
            if value:
                return str(ipaddress.ip_interface(value).network)
        raise ValueError(f"node {node} has no IPv{family} segment")


def plan_addresses(spec: TopologySpec) -> AddressPlan:
    """Interfaces, addresses and static routes for ``spec`` (see the module docstring)."""
    roles = {n.name: n.role for n in spec.nodes}
    counters: dict[int, int] = collections.defaultdict(int)
    index: dict[str, int] = collections.defaultdict(int)
    ifaces = []
    for link in spec.links:
        for me, peer in ((link.a, link.b), (link.b, link.a)):
            v4 = v6 = None
            if roles[me] != "switch":
                counters[link.segment] += 1
                host = counters[link.segment]
                v4 = f"{v4_segment(link.segment)[host]}/24"
                v6 = f"{v6_segment(link.segment)[host]}/64"
            ifaces.append(Interface(me, index[me], link.segment, peer, link.mtu, v4, v6))
            index[me] += 1
    return AddressPlan(tuple(ifaces), plan_routes(spec, ifaces))


def plan_routes(spec: TopologySpec, ifaces: list[Interface]) -> tuple[Route, ...]:
    """Static routes: to each segment a node is not on, via the first hop of a shortest path."""
    roles = {n.name: n.role for n in spec.nodes}
    on_segment: dict[int, list[Interface]] = collections.defaultdict(list)
    for i in ifaces:
        on_segment[i.segment].append(i)
    # L3 adjacency: two addressed nodes are neighbours when they share a segment
    # (switches are transparent).
    neighbours: dict[str, dict[str, Interface]] = collections.defaultdict(dict)
    for members in on_segment.values():
        for x in members:
            for y in members:
                if x.node != y.node and x.v4 and y.v4:
                    neighbours[x.node][y.node] = y  # y's interface, as seen from x
    routes = []
    for node in (n.name for n in spec.nodes if n.role != "switch"):
        mine = {i.segment for i in ifaces if i.node == node}
        first_hop = _first_hops(node, neighbours)
        for seg, members in sorted(on_segment.items()):
            if seg in mine or not any(m.v4 for m in members):
                continue
            targets = [m.node for m in members if m.v4 and m.node in first_hop]
            if not targets:
                continue
            best = min(targets, key=lambda t: first_hop[t][0])
            hop = first_hop[best][1]
            via = neighbours[node][hop]
            if roles[node] == "host" and roles.get(hop) == "host":
                continue  # hosts do not route through other hosts
            routes.append(Route(node, str(v4_segment(seg)), via.address(4)))
            routes.append(Route(node, str(v6_segment(seg)), via.address(6)))
    return tuple(routes)


def _first_hops(src: str, neighbours: dict[str, dict[str, Interface]]) -> dict[str, tuple[int, str]]:
    """{node: (distance, first hop from src)} by breadth-first search."""
    seen: dict[str, tuple[int, str]] = {}
    queue = collections.deque((n, 1, n) for n in sorted(neighbours[src]))
    while queue:
        node, dist, hop = queue.popleft()
        if node in seen or node == src:
            continue
        seen[node] = (dist, hop)
        for nxt in sorted(neighbours[node]):
            if nxt not in seen:
                queue.append((nxt, dist + 1, hop))
    return seen

"""multi_host_to_host: N hosts, each with its own SA to one end host (seed 002's "3h2h",
seed 004's 1..5 clients in transport mode to a server).

::

    +----+
    | c1 |-----+        segment 1: 198.18.1.0/24, 2001:db8:0:1::/64
    +----+     |        (untrusted)
      ...    +----+  shaped access link  +-----+
    +----+   | sw |======================| srv | .1
    | cN |---+----+  (a Linux bridge)    +-----+
    +----+ .1+N

Every client shares the server's shaped access link.  IPsec: transport mode between
each client and srv (tunnel mode: the same endpoints as tunnel ends).  Measurements
run from every client to srv.
"""
from __future__ import annotations

from topologies.spec import IPsecPair, LinkSpec, NodeSpec, TopologySpec, client_names


def spec(clients: int = 3, mtu: int = 1500, pmtu: str = "discover") -> TopologySpec:
    names = client_names(clients)
    links = [LinkSpec("srv", "sw", 1, mtu=mtu, shaped=True, untrusted=True)]
    links += [LinkSpec(c, "sw", 1, mtu=mtu, untrusted=True) for c in names]
    return TopologySpec(
        name="multi_host_to_host",
        nodes=(*(NodeSpec(c) for c in names), NodeSpec("sw", "switch"), NodeSpec("srv")),
        links=tuple(links),
        ipsec=tuple(IPsecPair(c, "srv", c, "srv") for c in names),
        flows=tuple((c, "srv") for c in names),
        pmtu=pmtu,
    )

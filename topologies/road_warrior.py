"""road_warrior: N clients, each its own IPsec endpoint, through one gateway to a server
(seed 003's second scenario, seed 002's "3hgh").

::

    +----+ .2
    | c1 |-----+        segment 1: 198.18.1.0/24 (untrusted: the clients' network)
    +----+     |
      ...    +----+ shaped access link  .1 +----+ .1    .2 +-----+
    +----+   | sw |========================| gw |----------| srv |
    | cN |---+----+ (a Linux bridge)       +----+ segment 2 +-----+
    +----+ .1+N                                   198.18.2.0/24 (server LAN)

IPv6: 2001:db8:0:1::/64 and 2001:db8:0:2::/64.  In tunnel mode each client and the
gateway are the endpoints (client address <-> server LAN); in transport mode each
client and the server.  Measurements run from every client to srv.
"""
from __future__ import annotations

from topologies.spec import IPsecPair, LinkSpec, NodeSpec, TopologySpec, client_names


def spec(clients: int = 3, mtu: int = 1500, pmtu: str = "discover") -> TopologySpec:
    names = client_names(clients)
    # The gateway's port comes first so it is .1 on the client segment; clients .2 upwards.
    links = [LinkSpec("gw", "sw", 1, mtu=mtu, shaped=True, untrusted=True)]
    links += [LinkSpec(c, "sw", 1, mtu=mtu, untrusted=True) for c in names]
    links += [LinkSpec("gw", "srv", 2, mtu=mtu)]
    return TopologySpec(
        name="road_warrior",
        nodes=(*(NodeSpec(c) for c in names), NodeSpec("sw", "switch"), NodeSpec("gw", "gateway"),
               NodeSpec("srv")),
        links=tuple(links),
        ipsec=tuple(IPsecPair(c, "srv", c, "gw") for c in names),
        flows=tuple((c, "srv") for c in names),
        pmtu=pmtu,
    )

"""vpn_gateway: host - gateway - gateway - host (seed 002's "hggh", seed 003's first scenario).

::

       segment 1                 segment 2 (shaped, untrusted:        segment 3
     198.18.1.0/24               the Internet) 198.18.2.0/24         198.18.3.0/24
    +----+ .1    .2 +-----+ .1                         .2 +-----+ .1    .2 +----+
    | h1 |----------| gw1 |===============================| gw2 |----------| h2 |
    +----+          +-----+                               +-----+          +----+
      client LAN                                                   server LAN

IPv6: the same segments in 2001:db8:0:<k>::/64.  The gateways forward; the hosts
route the far LAN through their gateway.  IPsec: in tunnel mode gw1 and gw2 are the
endpoints and protect LAN to LAN (ESP on segment 2, plaintext on the LANs); in
transport mode h1 and h2 protect their own traffic end to end.  Measurements run
from h1 to h2.
"""
from __future__ import annotations

from topologies.spec import IPsecPair, LinkSpec, NodeSpec, TopologySpec


def spec(mtu: int = 1500, pmtu: str = "discover") -> TopologySpec:
    return TopologySpec(
        name="vpn_gateway",
        nodes=(NodeSpec("h1"), NodeSpec("gw1", "gateway"), NodeSpec("gw2", "gateway"), NodeSpec("h2")),
        links=(LinkSpec("h1", "gw1", 1, mtu=mtu),
               LinkSpec("gw1", "gw2", 2, mtu=mtu, shaped=True, untrusted=True),
               LinkSpec("gw2", "h2", 3, mtu=mtu)),
        ipsec=(IPsecPair("h1", "h2", "gw1", "gw2"),),
        flows=(("h1", "h2"),),
        pmtu=pmtu,
    )

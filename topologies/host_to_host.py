"""host_to_host: two hosts on one link (seeds 000, 001 and 002's "h2h").

::

         segment 1: 198.18.1.0/24, 2001:db8:0:1::/64   (shaped, untrusted)
    +----+ .1                                      .2 +----+
    | h1 |--------------------------------------------| h2 |
    +----+                                            +----+

IPsec: transport mode between h1 and h2; tunnel mode uses the hosts as their own
tunnel endpoints.  Measurements run from h1 to h2.
"""
from __future__ import annotations

from topologies.spec import IPsecPair, LinkSpec, NodeSpec, TopologySpec


def spec(mtu: int = 1500, pmtu: str = "discover") -> TopologySpec:
    return TopologySpec(
        name="host_to_host",
        nodes=(NodeSpec("h1"), NodeSpec("h2")),
        links=(LinkSpec("h1", "h2", 1, mtu=mtu, shaped=True, untrusted=True),),
        ipsec=(IPsecPair("h1", "h2", "h1", "h2"),),
        flows=(("h1", "h2"),),
        pmtu=pmtu,
    )

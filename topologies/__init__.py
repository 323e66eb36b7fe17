"""Networks the testbed builds: specs (data) in one module per topology, built by
:mod:`topologies.network` with Mininet."""
from __future__ import annotations

from collections.abc import Callable

from topologies import host_to_host, multi_host_to_host, road_warrior, vpn_gateway
from topologies.spec import TopologySpec

#: name -> spec builder; every builder takes mtu= and pmtu=, the multi-client ones clients=
TOPOLOGIES: dict[str, Callable[..., TopologySpec]] = {
    "host_to_host": host_to_host.spec,
    "vpn_gateway": vpn_gateway.spec,
    "road_warrior": road_warrior.spec,
    "multi_host_to_host": multi_host_to_host.spec,
}
MULTI_CLIENT = ("road_warrior", "multi_host_to_host")
#: Kernel modules the networks use: IPv6, veth pairs, bridges for switches, the qdiscs of
#: topologies.shaping, what ingress shaping would take (ifb, u32, mirred) and the ESP
#: slowdown of ipsec.slowdown (sch_ingress for clsact, cls_bpf).
KERNEL_MODULES: tuple[str, ...] = ("ipv6", "veth", "bridge", "dummy", "ifb", "sch_tbf", "sch_htb", "sch_netem",
                                   "sch_ingress", "cls_u32", "act_mirred", "cls_bpf")


def build_spec(name: str, clients: int = 3, mtu: int = 1500, pmtu: str = "discover") -> TopologySpec:
    """The spec of topology ``name``; ValueError names unknown topologies and bad parameters."""
    if name not in TOPOLOGIES:
        raise ValueError(f"unknown topology {name!r}; choose one of {', '.join(TOPOLOGIES)}")
    if name in MULTI_CLIENT:
        return TOPOLOGIES[name](clients=clients, mtu=mtu, pmtu=pmtu)
    return TOPOLOGIES[name](mtu=mtu, pmtu=pmtu)

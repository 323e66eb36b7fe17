"""Topology specs and the address plan, without root."""
import ipaddress

import pytest

from topologies import TOPOLOGIES, build_spec
from topologies.spec import LinkSpec, NodeSpec, plan_addresses


@pytest.mark.parametrize("name", list(TOPOLOGIES))
def test_every_node_is_dual_stack_and_names_fit(name):
    spec = build_spec(name, clients=50)
    plan = plan_addresses(spec)
    for node in spec.nodes:
        ifaces = plan.of(node.name)
        assert ifaces, f"{node.name} has no interface"
        for i in ifaces:
            assert len(i.ifname("abcdef")) <= 15
            if node.role == "switch":
                assert i.v4 is None and i.v6 is None
            else:
                assert ipaddress.ip_interface(i.v4).version == 4
                assert ipaddress.ip_interface(i.v6).version == 6
    v4 = [i.v4 for i in plan.interfaces if i.v4]
    assert len(v4) == len(set(v4)), "an address is given twice"


def test_vpn_gateway_plan_is_the_documented_one():
    plan = plan_addresses(build_spec("vpn_gateway"))
    assert [(i.node, i.v4) for i in plan.interfaces] == [
        ("h1", "198.18.1.1/24"), ("gw1", "198.18.1.2/24"), ("gw1", "198.18.2.1/24"),
        ("gw2", "198.18.2.2/24"), ("gw2", "198.18.3.1/24"), ("h2", "198.18.3.2/24")]
    routes = {(r.node, r.dst): r.gateway for r in plan.routes}
    assert routes[("h1", "198.18.3.0/24")] == "198.18.1.2"
    assert routes[("h2", "2001:db8:0:1::/64")] == "2001:db8:0:3::1"
    assert routes[("gw1", "198.18.3.0/24")] == "198.18.2.2"
    assert ("gw1", "198.18.1.0/24") not in routes  # directly connected
    assert build_spec("vpn_gateway").shaped_link == LinkSpec("gw1", "gw2", 2, shaped=True, untrusted=True)


def test_road_warrior_clients_route_through_the_gateway_not_each_other():
    spec = build_spec("road_warrior", clients=3)
    plan = plan_addresses(spec)
    assert plan.address("gw") == "198.18.1.1"
    assert [plan.address(f"c{i}") for i in (1, 2, 3)] == ["198.18.1.2", "198.18.1.3", "198.18.1.4"]
    client_routes = [r for r in plan.routes if r.node == "c2"]
    assert {(r.dst, r.gateway) for r in client_routes} == {("198.18.2.0/24", "198.18.1.1"),
                                                           ("2001:db8:0:2::/64", "2001:db8:0:1::1")}
    assert [p.tunnel_b for p in spec.ipsec] == ["gw"] * 3
    assert spec.flows == (("c1", "srv"), ("c2", "srv"), ("c3", "srv"))



def test_next_hops_pair_each_node_with_the_neighbours_it_routes_through_and_back():
    plan = plan_addresses(build_spec("road_warrior", clients=3))
    pairs = [(x.node, y.node, y.address(4), y.address(6)) for x, y in plan.next_hops()]
    # the gateway and each client on the clients' segment, the gateway and the server on the LAN;
    # clients never with each other (none routes through another)
    assert pairs == [("gw", "c1", "198.18.1.2", "2001:db8:0:1::2"), ("gw", "c2", "198.18.1.3", "2001:db8:0:1::3"),
                     ("gw", "c3", "198.18.1.4", "2001:db8:0:1::4"), ("c1", "gw", "198.18.1.1", "2001:db8:0:1::1"),
                     ("c2", "gw", "198.18.1.1", "2001:db8:0:1::1"), ("c3", "gw", "198.18.1.1", "2001:db8:0:1::1"),
                     ("gw", "srv", "198.18.2.2", "2001:db8:0:2::2"), ("srv", "gw", "198.18.2.1", "2001:db8:0:2::1")]
    assert all(x.segment == y.segment for x, y in plan.next_hops())
    assert plan_addresses(build_spec("host_to_host")).next_hops() == ()  # one segment, no routes
    # ... where the flows' ends meet on one segment: they are each other's next hop
    spec = build_spec("multi_host_to_host", clients=2)
    assert [(x.node, y.node) for x, y in plan_addresses(spec).next_hops(spec.flows)] == [
        ("srv", "c1"), ("srv", "c2"), ("c1", "srv"), ("c2", "srv")]


@pytest.mark.parametrize("kwargs,match", [
    (dict(name="star"), "unknown topology 'star'.*vpn_gateway"),
    (dict(name="road_warrior", clients=0), "clients must be 1..200"),
    (dict(name="multi_host_to_host", clients=201), "clients must be 1..200"),
    (dict(name="vpn_gateway", mtu=1279), "mtu must be 1280..65535"),
    (dict(name="host_to_host", pmtu="sometimes"), "pmtu must be one of discover, fragment"),
])
def test_bad_parameters_fail_before_anything_exists(kwargs, match):
    with pytest.raises(ValueError, match=match):
        build_spec(**kwargs)


def test_node_names_are_checked():
    with pytest.raises(ValueError, match="1-4 lowercase"):
        NodeSpec("server1")
    with pytest.raises(ValueError, match="role must be one of"):
        NodeSpec("r1", "router")

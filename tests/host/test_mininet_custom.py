"""`mn --custom topologies/mininet_custom.py --topo NAME` gets the testbed's networks.

Loaded the way mn loads it (exec without __file__) and built with Mininet's own
API; mn's runner itself is not used because on any failure it runs Mininet's
global cleanup, which would touch other Mininet users of this machine.
"""
import os
import subprocess

import pytest
from mininet.net import Mininet

from topologies.network import TestbedHost

CUSTOM = os.path.join(os.path.dirname(__file__), "..", "..", "topologies", "mininet_custom.py")


def load_like_mn():
    customs: dict = {}
    with open(CUSTOM) as f:
        exec(compile(f.read(), CUSTOM, "exec"), customs, customs)
    return customs["topos"]


def test_custom_file_offers_every_topology():
    assert set(load_like_mn()) == {"host_to_host", "vpn_gateway", "road_warrior", "multi_host_to_host"}


@pytest.mark.parametrize("topo,args,src,dst", [("vpn_gateway", (), "h1", "2001:db8:0:3::2"),
                                               ("road_warrior", (2,), "c2", "198.18.2.2")])
def test_mininet_builds_it_dual_stack_and_stops_clean(topo, args, src, dst):
    topo_obj = load_like_mn()[topo](*args)
    net = Mininet(topo=topo_obj, controller=None, host=TestbedHost)
    try:
        net.start()
        out = net[src].cmd(f"ping -c1 -W3 {dst}; echo rc=$?")
        assert "rc=0" in out, out
    finally:
        net.stop()
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"itb-{topo_obj.run_id}-" not in left

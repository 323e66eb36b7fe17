"""The testbed's topologies for Mininet's own ``mn`` command::

    sudo .venv/bin/mn --custom topologies/mininet_custom.py --topo vpn_gateway --controller none
    sudo .venv/bin/mn --custom topologies/mininet_custom.py --topo road_warrior,5 --controller none

Each node gets the testbed's dual-stack address plan, routes and forwarding; at the
``mininet>`` prompt try ``h1 ping -c1 198.18.3.2`` or ``h1 ping -6 -c1 2001:db8:0:3::2``.
IPsec is not applied here; ``ipsec-testbed demo`` builds the same networks with it.

Beware: when ``mn`` itself fails it runs Mininet's global cleanup (``mn -c``), which
kills every Mininet shell on the machine and deletes files in /tmp; the testbed's
own commands never do that.
"""
from __future__ import annotations

import inspect
import os
import sys

# mn exec()s this file without __file__; the code object still knows its file name.
_HERE = os.path.abspath(inspect.currentframe().f_code.co_filename)
sys.path.insert(0, os.path.dirname(os.path.dirname(_HERE)))

from topologies import TOPOLOGIES, build_spec  # noqa: E402
from topologies.network import TestbedTopo  # noqa: E402


def _factory(name: str):
    def make(clients: int = 3, mtu: int = 1500) -> TestbedTopo:
        return TestbedTopo(build_spec(name, clients=int(clients), mtu=int(mtu)))
    return make


#: what ``mn --custom`` reads
topos = {name: _factory(name) for name in TOPOLOGIES}

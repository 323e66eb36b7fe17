"""Build a :class:`~topologies.spec.TopologySpec` with Mininet, dual-stack, shaped, IPsec-ready.

Mininet is the engine: every node is a Mininet host (its shell, ``node.cmd()``, the
CLI), every link a veth pair it creates inside the nodes' namespaces.  The testbed
adds what Mininet lacks:

- each node's namespace is also bound to ``/run/netns/itb-<run>-<node>`` the moment
  its shell starts, so iproute2 (``ip -n``), pyroute2 and ``ipsec-testbed clean``
  find it, and interfaces are named ``itb<run><node>e<i>``;
- IPv4 and IPv6 on every segment, routes and forwarding, set through pyroute2;
- switch nodes are a Linux bridge in their own namespace (no Open vSwitch);
- shaping with :mod:`topologies.shaping` on the spec's shaped link;
- IPsec applied and removed per profile through :mod:`ipsec.plan`, or WireGuard between the
  same tunnel ends through :mod:`ipsec.wireguard` (profile ``wireguard``).

:class:`Network` is a context manager; everything it creates is registered for
teardown right after it is created, so an exception at any step leaves nothing.
The same host class serves ``mn --custom topologies/mininet_custom.py``.
"""
from __future__ import annotations

import collections
import contextlib
import logging
import os
import shutil
import socket
import subprocess
import time

from mininet.net import Mininet
from mininet.node import Host, Node
from mininet.topo import Topo
from mininet.util import numCores

from ipsec import ike, slowdown, wireguard
from ipsec.plan import AssociationSpec, Endpoint, SpiPlanner, apply_association, plan_association, remove_association
from ipsec.profiles import parse_profile
from testbed import names, netns, waiting
from testbed.errors import critical
from testbed.record import Keying
from topologies.shaping import apply_shaping, remove_shaping
from topologies.spec import AddressPlan, Interface, Route, TopologySpec, plan_addresses

#: A neighbour entry that neither ages nor is probed (linux/neighbour.h)
NUD_PERMANENT = 0x80
#: A bridge port that forwards (linux/if_bridge.h)
BR_STATE_FORWARDING = 3

log = logging.getLogger(__name__)

IFA_F_NODAD = 0x02
IFA_F_TENTATIVE = 0x40

# Mininet.init() raises host-wide limits and root-namespace sysctls (fixLimits); the
# testbed never changes the host's root namespace, so that step is marked done.
Mininet.inited = True
# Mininet counts CPUs with `grep -c processor /proc/cpuinfo`, a process (0.1 s in UML).
numCores.ncores = os.cpu_count() or 1


class TestbedHost(Host):
    """A Mininet host configured by the testbed (see the module docstring).

    Parameters (from :class:`TestbedTopo`): ``run_id``, ``interfaces`` (its
    :class:`Interface` list), ``routes``, ``forward``, ``bridge``, ``pmtu``, ``shaping``
    ({ifname: ShapingSpec}).
    """

    __test__ = False  # not a pytest test class, despite the name

    @classmethod
    def setup(cls) -> None:
        """Mininet's check that its tools exist, without a `which` process per tool (0.1 s each in UML).

        Only mnexec is needed: the testbed configures interfaces over netlink, not with ifconfig.
        """
        if not shutil.which("mnexec"):
            raise RuntimeError("mnexec not found: install Debian's mininet package (scripts/install.sh)")
        Host.isSetup = Node.isSetup = True  # else Mininet runs their setup (the `which`s) next

    def __init__(self, name: str, run_id: str = "", **params) -> None:
        self.run_id = run_id or names.new_run_id()
        self.netns_name = names.netns_name(self.run_id, name)
        super().__init__(name, **params)

    def startShell(self, mnopts=None) -> None:  # noqa: N802 (Mininet's name)
        super().startShell(mnopts)
        # Name the namespace at once: from here on `clean` finds it and its processes.
        from pyroute2 import netns as pr_netns
        pr_netns.attach(self.netns_name, self.shell.pid)

    def config(self, interfaces=(), routes=(), forward=False, bridge=False, pmtu="discover",
               shaping=None, **params):
        """Addresses, MTU, bridge, routes and sysctls, through pyroute2 and sysctl."""
        # No duplicate address detection: these segments are ours alone, and DAD would
        # hold IPv6 back for a second after every link comes up.
        sysctls = {"net.ipv6.conf.all.accept_dad": "0", "net.ipv6.conf.default.accept_dad": "0",
                   # Each TCP connection starts from the same state: no ssthresh or RTT
                   # remembered from the previous point's connection to the same host.
                   "net.ipv4.tcp_no_metrics_save": "1"}
        sysctls.update({f"net.ipv6.conf.{i.ifname(self.run_id)}.accept_dad": "0" for i in interfaces})
        if forward:
            sysctls.update({"net.ipv4.ip_forward": "1", "net.ipv6.conf.all.forwarding": "1"})
        if pmtu == "fragment":
            # 2005-era behaviour (seed 003): hosts send without DF, so a gateway whose
            # ESP-reduced MTU is too small fragments instead of signalling the sender.
            sysctls["net.ipv4.ip_no_pmtu_disc"] = "1"
        netns.write_sysctls(self.netns_name, sysctls)
        # A loss-based congestion control, as the seeds' kernels had: BBR (some hosts'
        # default) paces by its own bandwidth estimate and overshoots a shaped link.
        # Namespaces may only pick what the host allows; reno always is.
        try:
            netns.write_sysctls(self.netns_name, {"net.ipv4.tcp_congestion_control": "cubic"})
        except OSError:
            netns.write_sysctls(self.netns_name, {"net.ipv4.tcp_congestion_control": "reno"})
        configure_node(self.netns_name, self.run_id, tuple(interfaces), tuple(routes), bridge)
        if shaping:
            for ifname, shape in shaping.items():
                mtu = next(i.mtu for i in interfaces if i.ifname(self.run_id) == ifname)
                apply_shaping(self.netns_name, ifname, shape, mtu=mtu)
        return {}

    def terminate(self) -> None:
        super().terminate()
        netns.delete(self.netns_name)


def configure_node(ns: str, run_id: str, interfaces: tuple[Interface, ...], routes: tuple[Route, ...],
                   bridge: bool) -> None:
    """Apply one node's part of the address plan inside namespace ``ns``."""

    with netns.iproute(ns) as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
        br = None
        if bridge:
            ipr.link("add", ifname="br0", kind="bridge")
            br = ipr.link_lookup(ifname="br0")[0]
        for i in interfaces:
            idx = ipr.link_lookup(ifname=i.ifname(run_id))[0]
            # Down and up again: the link-local address Mininet's bring-up started DAD on
            # is made again, now without DAD.
            ipr.link("set", index=idx, state="down")
            ipr.link("set", index=idx, mtu=i.mtu)
            if br is not None:
                ipr.link("set", index=idx, master=br)
            for addr in (i.v4, i.v6):
                if addr:
                    a, plen = addr.split("/")
                    ipr.addr("add", index=idx, address=a, prefixlen=int(plen), flags=IFA_F_NODAD)
            ipr.link("set", index=idx, state="up")
        if br is not None:
            ipr.link("set", index=br, mtu=min(i.mtu for i in interfaces), state="up")
        for r in routes:
            ipr.route("add", dst=r.dst, gateway=r.gateway)
        wait_no_tentative(ipr, ns)


def wait_no_tentative(ipr, ns: str, timeout_s: float = 10.0) -> None:
    """Bounded wait until no IPv6 address in ``ns`` is still tentative."""
    for _ in waiting.Deadline(timeout_s, interval_s=0.05).polls():
        tentative = [a.get_attr("IFA_ADDRESS") for a in ipr.get_addr(family=10)
                     if (a.get_attr("IFA_FLAGS") or a["flags"]) & IFA_F_TENTATIVE]
        if not tentative:
            return
    raise RuntimeError(f"{ns}: IPv6 addresses still tentative after {timeout_s:g} s: {tentative}")


def wait_links_ready(namespaces, timeout_s: float = 10.0) -> None:
    """Bounded wait until every link in ``namespaces`` is up as the kernel's link watch sees it (operstate
    UP, set when it has given the device its queue) and every bridge port forwards.

    Bringing a veth's two ends up gives them carrier at once, but the kernel passes the change on through
    its link watch, deferred work that runs at once only for an urgent change and otherwise up to a second
    later; until it has run, a bridge port stays disabled and drops whatever reaches it without counting it.
    The port seen late was always the switch's first (index 2, its peer the first client's interface, index
    2 in its own namespace): a likely reading is that the link watch takes a veth whose index equals its
    peer's for a device of its own, whose change is not urgent (``linkwatch_urgent_event``).
    Built without this wait, the road-warrior tunnel test lost its first one to three pings (0.2-0.6 s of
    them, captured leaving the client and never reaching the gateway) in 2 of 50 runs in a row.
    """
    deadline = waiting.Deadline(timeout_s, interval_s=0.02)
    t0, waited = time.monotonic(), []
    for ns in namespaces:
        with netns.iproute(ns) as ipr:
            for _ in deadline.polls():
                links = ipr.get_links()
                down = [f"{link.get_attr('IFLA_IFNAME')} {link.get_attr('IFLA_OPERSTATE')}" for link in links
                        if link.get_attr("IFLA_IFNAME") != "lo"
                        and link.get_attr("IFLA_OPERSTATE") not in ("UP", "UNKNOWN")]
                ports = [link for link in links if link.get_attr("IFLA_MASTER")]
                if ports:
                    states = {link["index"]: info.get_attr("IFLA_BRPORT_STATE")
                              for link in ipr.get_links(family=socket.AF_BRIDGE)
                              if (info := link.get_attr("IFLA_PROTINFO"))}
                    down += [f"{link.get_attr('IFLA_IFNAME')} not forwarding" for link in ports
                             if states.get(link["index"]) != BR_STATE_FORWARDING]
                if not down:
                    break
                waited.append(f"{ns}: {', '.join(down)}")
            else:
                raise RuntimeError(f"{ns}: links not up after {timeout_s:g} s: {', '.join(down)}")
    if waited:
        log.debug("links ready after %.3f s; waited for %s", time.monotonic() - t0, "; ".join(dict.fromkeys(waited)))


class TestbedTopo(Topo):
    """A Mininet ``Topo`` built from a :class:`TopologySpec` (usable by ``mn --custom``)."""

    __test__ = False

    def __init__(self, spec: TopologySpec, run_id: str | None = None, shaping=None, **opts) -> None:
        self.spec = spec
        self.run_id = run_id or names.new_run_id()
        self.plan: AddressPlan = plan_addresses(spec)
        self.shaping = shaping
        super().__init__(**opts)

    def build(self, **_opts) -> None:
        spec, plan, rid = self.spec, self.plan, self.run_id
        for node in spec.nodes:
            mine = plan.of(node.name)
            shaping = {}
            if self.shaping is not None:
                shaping = {i.ifname(rid): self.shaping for i in self.shaped_interfaces(node.name)}
            self.addHost(node.name, cls=TestbedHost, run_id=rid, interfaces=mine,
                         routes=tuple(r for r in plan.routes if r.node == node.name),
                         forward=node.role == "gateway", bridge=node.role == "switch",
                         pmtu=spec.pmtu if node.role == "host" else "discover", shaping=shaping,
                         ip=None, mac=None, defaultRoute=None)
        seen: dict[str, int] = {}
        for link in spec.links:
            ia = plan.of(link.a)[seen.setdefault(link.a, 0)]
            ib = plan.of(link.b)[seen.setdefault(link.b, 0)]
            seen[link.a] += 1
            seen[link.b] += 1
            self.addLink(link.a, link.b, intfName1=ia.ifname(rid), intfName2=ib.ifname(rid))

    def shaped_interfaces(self, node: str) -> list[Interface]:
        """``node``'s interfaces on the shaped link (both ends are shaped, one per direction)."""
        shaped = self.spec.shaped_link
        return [i for i in self.plan.of(node)
                if {node, i.peer} == {shaped.a, shaped.b} and i.segment == shaped.segment]


class Network:
    """A built network: ``with Network(spec) as net: ...``; see the module docstring."""

    def __init__(self, spec: TopologySpec, run_id: str | None = None, shaping=None) -> None:
        self.spec = spec
        self.run_id = run_id or names.new_run_id()
        self.topo = TestbedTopo(spec, self.run_id, shaping=shaping)
        self.plan = self.topo.plan
        self.mininet: Mininet | None = None
        self._ipsec: list = []
        self._ipsec_families: set[int] = set()
        self._ike: ike.Daemons | None = None  # keying by IKE (apply_ipsec(keying="ike"|"ike-rsa"))
        self._ike_up = False
        self._wireguard: list[wireguard.DevicePlan] = []  # the WireGuard devices up now
        self._esp_slowdown = 0  # extra instructions per ESP packet now (ipsec.slowdown)
        self._esp_filters = 0  # ... over this many filters at least
        self._stack = contextlib.ExitStack()
        self.build_s = 0.0

    # -- lifecycle ---------------------------------------------------------------
    def __enter__(self) -> Network:
        t0 = time.monotonic()
        try:
            with critical():  # a signal stops the run after the build, then tears it down
                self.mininet = Mininet(topo=self.topo, controller=None, host=TestbedHost, build=False)
                self._stack.callback(self._stop_mininet)
                self.mininet.build()
                wait_links_ready(self.ns(n.name) for n in self.spec.nodes)
                self._pin_next_hops()
        except BaseException:
            self._stack.close()
            raise
        self.build_s = time.monotonic() - t0
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _pin_next_hops(self) -> None:
        """Permanent neighbour entries between every node and its next hops (and the two ends of a flow
        on one segment), as ``mn --arp`` makes.

        Resolved on demand, ARP and neighbour discovery queue behind the data at the shaped link:
        with a hundred clients behind it, a late client's resolution is dropped at the full queue
        and its SYN, with nowhere to go, backs off for minutes (the first point of 200 road warriors
        at 10 Mbit/s: 72 and 74 of them not connected after 237 s).
        """
        pinned = collections.defaultdict(list)  # node: its (interface, neighbour's interface) pairs
        for x, y in self.plan.next_hops(self.spec.flows):
            pinned[x.node].append((x, y))
        # the pairs go both ways, so every interface in them is some node's own: its index and MAC there
        ends = {}
        for node in sorted(pinned):
            with netns.iproute(self.ns(node)) as ipr:
                for x, _ in pinned[node]:
                    if x not in ends:
                        (link,) = ipr.get_links(ipr.link_lookup(ifname=x.ifname(self.run_id))[0])
                        ends[x] = (link["index"], link.get_attr("IFLA_ADDRESS"))
        for node in sorted(pinned):
            with netns.iproute(self.ns(node)) as ipr:
                for x, y in pinned[node]:
                    for family in (4, 6):
                        if y.address(family):
                            ipr.neigh("replace", dst=y.address(family), lladdr=ends[y][1], ifindex=ends[x][0],
                                      state=NUD_PERMANENT)

    def close(self) -> None:
        """Remove IPsec, stop every node, delete every namespace; safe to call twice."""
        with critical():
            try:
                self.remove_ipsec()
            finally:
                self._stack.close()

    def _stop_mininet(self) -> None:
        net = self.mininet
        if net is None:
            return
        try:
            # Not net.stop(): it deletes every link with its own `ip link del` process
            # (a tenth of a second each inside UML, 51 for 50 road warriors).  Ending a
            # node deletes its namespace (TestbedHost.terminate), which deletes its
            # interfaces, and a veth goes with either of its ends.
            for host in net.hosts:
                host.terminate()
        finally:
            # Nodes whose shell never started are not in net.hosts; their names may exist.
            for node in self.spec.nodes:
                netns.delete(names.netns_name(self.run_id, node.name))

    def reshape(self, shaping) -> None:
        """Shape the shaped link as ``shaping`` (a :class:`~topologies.shaping.ShapingSpec`) now.

        The old qdiscs are removed and the new ones added, on both ends; the network,
        its processes and its IPsec state stay as they are.  A sweep changes rate this
        way instead of building the network again.
        """
        with critical():
            for node in self.spec.nodes:
                for i in self.topo.shaped_interfaces(node.name):
                    remove_shaping(self.ns(node.name), i.ifname(self.run_id))
                    apply_shaping(self.ns(node.name), i.ifname(self.run_id), shaping, mtu=i.mtu)
            self.topo.shaping = shaping

    @property
    def shaping(self):
        """The shaped link's :class:`~topologies.shaping.ShapingSpec` now (None: not shaped)."""
        return self.topo.shaping

    # -- names and addresses -----------------------------------------------------
    def ns(self, node: str) -> str:
        """The namespace name of ``node`` (``ip -n`` takes it)."""
        self.spec.node(node)
        return names.netns_name(self.run_id, node)

    def addr(self, node: str, family: int = 4) -> str:
        return self.plan.address(node, family)

    def ifname(self, node: str, peer: str) -> str:
        """The interface of ``node`` on its link to ``peer``."""
        for i in self.plan.of(node):
            if i.peer == peer:
                return i.ifname(self.run_id)
        raise ValueError(f"{node} has no link to {peer}")

    def untrusted_interfaces(self) -> list[tuple[str, str]]:
        """(namespace, ifname) of every interface on an untrusted link (captures go here)."""
        out = []
        for link in self.spec.links:
            if link.untrusted:
                for node, peer in ((link.a, link.b), (link.b, link.a)):
                    if self.spec.node(node).role != "switch":
                        out.append((self.ns(node), self.ifname(node, peer)))
        return out

    def __getitem__(self, node: str) -> Host:
        """The Mininet node (``net['h1'].cmd('ping ...')``)."""
        return self.mininet[node]

    # -- IPsec -------------------------------------------------------------------
    def plan_ipsec(self, profile: str, mode: str, family: int = 4, planner=None) -> list:
        """Association plans for every IPsec pair of the topology (pure but for keys)."""
        planner = planner or SpiPlanner()
        return [plan_association(spec, planner) for spec in self.associations(profile, mode, family)]

    def associations(self, profile: str, mode: str, family: int = 4) -> list[AssociationSpec]:
        """What every IPsec pair of the topology protects, between which endpoints (pure)."""
        specs = []
        for pair, (a, b) in zip(self.spec.ipsec, self.tunnel_ends(family), strict=True):
            if mode == "transport":
                a = Endpoint(self.ns(pair.a), self.addr(pair.a, family))
                b = Endpoint(self.ns(pair.b), self.addr(pair.b, family))
                forward = False
            else:
                forward = self.spec.node(pair.tunnel_a).role == "gateway" or \
                    self.spec.node(pair.tunnel_b).role == "gateway"
            specs.append(AssociationSpec(profile, mode, a, b, forward=forward))
        return specs

    def tunnel_ends(self, family: int = 4) -> list[tuple[Endpoint, Endpoint]]:
        """The two ends of every tunnel of the topology, one pair per IPsec pair (pure): each end's
        namespace, its address on the untrusted link, and the network it protects."""
        return [(self._tunnel_end(pair.tunnel_a, pair.a, family), self._tunnel_end(pair.tunnel_b, pair.b, family))
                for pair in self.spec.ipsec]

    def _tunnel_end(self, gw: str, host: str, family: int):
        if gw == host:
            return Endpoint(self.ns(gw), self.addr(gw, family), None)
        # The gateway's address towards the other side, protecting the host's LAN.
        return Endpoint(self.ns(gw), self._outer_address(gw, family), self.plan.segment_prefix(host, family))

    def _outer_address(self, gw: str, family: int) -> str:
        """A gateway's address on its untrusted link (or its first one)."""
        for i in self.plan.of(gw):
            link = next(link for link in self.spec.links
                        if {link.a, link.b} == {gw, i.peer} and link.segment == i.segment)
            if link.untrusted and i.address(family):
                return i.address(family)
        return self.addr(gw, family)

    def apply_ipsec(self, profile: str, mode: str = "tunnel", families=(4, 6),
                    keying: Keying | str = Keying.STATIC) -> list:
        """Protect every IPsec pair with ``profile`` (both IP versions by default); returns the plans.
        Profile ``wireguard`` puts WireGuard between the same tunnel ends (:meth:`apply_wireguard`).

        ``keying`` static: the SAs and policies are written over netlink (:mod:`ipsec.plan`);
        ike: an IKEv2 daemon in each endpoint's namespace negotiates them (:mod:`ipsec.ike`), and
        there are no plans (the daemons hold the keys).
        """
        keying = Keying.named(keying)
        self.remove_ipsec()
        if parse_profile(profile).wireguard:
            why = wireguard.refusal(mode, keying)
            if why:
                raise ValueError(why)
            self.apply_wireguard(families)
            return []
        if keying.negotiated:
            specs = [spec for family in families for spec in self.associations(profile, mode, family)]
            if self._ike is None or self._ike.auth != ike.auth_of(keying):
                self._ike = ike.Daemons(self.run_id, ike.auth_of(keying))
            with critical():
                self._ipsec_families = set(families)
                self._ike_up = True  # from here on, remove_ipsec() stops whatever up() started
            self._ike.up(specs)  # interruptible: tunnels may take a minute to come up, or fail to
            return []
        planner = SpiPlanner()
        plans = [plan for family in families for plan in self.plan_ipsec(profile, mode, family, planner)]
        with critical():
            self._ipsec_families = set(families)
            for plan in plans:
                apply_association(plan)
                self._ipsec.append(plan)
        return list(self._ipsec)

    def apply_wireguard(self, families=(4, 6)) -> list[wireguard.DevicePlan]:
        """WireGuard between every pair of tunnel ends, a device per IP version (:mod:`ipsec.wireguard`);
        returns the devices.  Replaces whatever tunnel was up."""
        self.remove_ipsec()
        devices = []
        for family in families:
            ends = self.tunnel_ends(family)
            inside = {}  # each end's own address inside what it protects, where it has one
            for pair, (a, b) in zip(self.spec.ipsec, ends, strict=True):
                for node, end in ((pair.tunnel_a, a), (pair.tunnel_b, b)):
                    own = wireguard.inside_address(end.subnet, [i.address(family) for i in self.plan.of(node)])
                    if own:
                        inside[end.ns] = own
            devices += wireguard.plan_tunnels(ends, self.run_id, family, self._untrusted_mtu(), inside)
        with critical():
            self._ipsec_families = set(families)
            wireguard.apply(devices)
            self._wireguard = devices
        return list(devices)

    def _untrusted_mtu(self) -> int:
        return min((link.mtu for link in self.spec.links if link.untrusted), default=1500)

    @property
    def wireguard_devices(self) -> tuple[wireguard.DevicePlan, ...]:
        """The WireGuard devices up now (their plans hold the private keys); empty when WireGuard is off."""
        return tuple(self._wireguard)

    @property
    def ike_keying(self) -> ike.Daemons | None:
        """The IKE daemons keying the network now (None: static keying, or IPsec off)."""
        return self._ike if self._ike_up else None

    def negotiated_sas(self) -> list[str]:
        """The SAs the IKE daemons negotiated, as the kernel holds them now, one line each (no keys);
        empty with static keying."""
        return self._ike.sas() if self._ike_up else []

    @property
    def ipsec_plans(self) -> tuple:
        """The association plans installed now (their SAs hold the keys); empty when IPsec is off."""
        return tuple(self._ipsec)

    def remove_ipsec(self) -> None:
        """Remove what :meth:`apply_ipsec` or :meth:`apply_wireguard` installed, and the path MTUs the
        senders learnt through it; the network stays up."""
        had = bool(self._ipsec) or self._ike_up or bool(self._wireguard)
        with critical():
            if self._ike_up:
                self._ike_up = False
                self._ike.down()
            while self._ipsec:
                remove_association(self._ipsec.pop(), missing_ok=True)
            if self._wireguard:
                devices, self._wireguard = self._wireguard, []
                wireguard.remove(devices, missing_ok=True)
        if had:
            self.forget_path_mtus(self._ipsec_families)

    @property
    def esp_slowdown(self) -> int:
        """The extra BPF instructions every ESP packet costs now (0: none; see :meth:`slow_esp`)."""
        return self._esp_slowdown

    def slow_esp(self, instructions: int, filters: int = 0) -> None:
        """Make every ESP packet cost ``instructions`` extra BPF instructions on its way out of an
        IPsec endpoint (:mod:`ipsec.slowdown`), over at least ``filters`` filters (the arms of an A/B
        carry the same chain), replacing any slowdown before; 0 of both removes it.

        The calibration regression of the gate: the IPsec profiles' CPU cost per packet grows,
        plain traffic's does not.  Works whether IPsec is on or not.
        """
        if (instructions, filters) == (self._esp_slowdown, self._esp_filters):
            return
        slowdown.chunks(instructions)  # checks the number before anything changes
        ends = dict.fromkeys(end for pair in self.spec.ipsec
                             for end in (pair.a, pair.b, pair.tunnel_a, pair.tunnel_b))
        where = [(self.ns(node), [i.ifname(self.run_id) for i in self.plan.of(node)]) for node in ends]
        with critical():
            if self._esp_slowdown or self._esp_filters:
                slowdown.remove(where)
                self._esp_slowdown = self._esp_filters = 0
            slowdown.install(where, instructions, filters)
            self._esp_slowdown, self._esp_filters = instructions, filters

    def forget_path_mtus(self, families=(4, 6)) -> None:
        """Drop the path MTUs the flows' senders cached (route exceptions, kept 10 minutes).

        A tunnel's ESP overhead teaches a sender a smaller path MTU (1446 bytes for AES-GCM
        over IPv4); left in place, the plain points measured after an IPsec point would send
        smaller segments than their MSS asks. IPv4's cache goes with a sysctl write; IPv6's
        exceptions only with a netlink delete each, which ``ip -6 route flush cache`` does.
        """
        def flush_v4() -> None:
            with open("/proc/sys/net/ipv4/route/flush", "w") as f:
                f.write("1")

        for node in dict.fromkeys(client for client, _server in self.spec.flows):
            if 4 in families:
                netns.run_in(self.ns(node), flush_v4)
            if 6 in families:
                subprocess.run(["ip", "-n", self.ns(node), "-6", "route", "flush", "cache"],
                               capture_output=True, check=False)

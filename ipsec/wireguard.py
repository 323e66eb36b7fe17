"""WireGuard between the testbed's tunnel ends: planned (pure but for the keys), set up and removed over netlink.

The ends are the ones IPsec's tunnel mode uses (:meth:`topologies.network.Network.tunnel_ends`): two
gateways protecting their LANs, a road warrior and its gateway, two hosts.  Each end gets one WireGuard
device per IP version, so that an IPv6 point's packets cross the link in IPv6 as IPsec's do::

    end a (namespace)                                                end b
    itb<run>wg4  private key a, port 51820  <== UDP ==>  itb<run>wg4  private key b, port 51820
      peer b: public key b, endpoint b's address, allowed IPs = what b protects
    itb<run>wg6  the same over IPv6, port 51821

Routes and MTU as wg-quick sets them.  The device's MTU is the link's minus 80.  Where a peer's
endpoint lies inside what it protects (a road warrior, two hosts), a route to that network through the
device would carry the tunnel's own packets into itself; wg-quick's answer for a default route is the
one used for every network here::

    the device marks its own UDP packets with fwmark 0xca6c
    ip rule:   not fwmark 0xca6c lookup 51820      (everything but the tunnel's own packets)
    table 51820: <each peer's network> dev itb<run>wg4 [src <this end's address inside what it protects>]

so that the tunnel's packets take the main table, and everything else to a peer's network the device.
A lookup that finds nothing in table 51820 goes on to the main table, as before.

Keys: each device's private key is 32 bytes from :mod:`secrets`, made per run and held only here and
in the kernel; its public key is read back from the kernel (which derives it), never computed or
written out.  :func:`apply` leaves nothing behind when any step fails; :func:`remove` deletes what
it made (the routes go with the device).
"""
from __future__ import annotations

import base64
import dataclasses
import errno
import ipaddress
import secrets
import socket
from collections.abc import Iterable, Sequence

from pyroute2.netlink.exceptions import NetlinkError

from ipsec.overhead import WIREGUARD_MTU_RESERVE
from ipsec.plan import Endpoint
from testbed import names, netns
from testbed.record import Keying

#: The ports the devices listen on, per IP version.
LISTEN_PORTS = {4: 51820, 6: 51821}
#: The mark on the tunnel's own packets, and the routing table of the protected networks (wg-quick's).
FWMARK = 0xCA6C
TABLE = 51820
#: The rule's priority: before the main table's (32766).
RULE_PRIORITY = 32000
#: What wg-quick takes off the link's MTU for the device's (IPv6 40 + UDP 8 + header 16 + tag 16): the byte
#: model's figure.
MTU_RESERVE = WIREGUARD_MTU_RESERVE
#: ``FIB_RULE_INVERT``: the rule matches packets *without* the mark.
_FIB_RULE_INVERT = 0x2
_FAMILY = {4: socket.AF_INET, 6: socket.AF_INET6}


class WireGuardError(RuntimeError):
    """WireGuard could not be set up: the message says where and why."""


@dataclasses.dataclass(frozen=True)
class PeerPlan:
    """One peer of a device: the other end, where it listens, and what it protects."""

    ns: str
    endpoint: str
    port: int
    allowed_ips: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class DevicePlan:
    """One WireGuard device: its namespace, name, IP version, port, MTU, key and peers.

    ``src``: this end's own address inside what it protects (the routes' source, so that what
    the end itself sends through the tunnel passes its peers' allowed IPs); None when it has none.
    """

    ns: str
    ifname: str
    family: int
    port: int
    mtu: int
    private_key: bytes = dataclasses.field(repr=False)
    peers: tuple[PeerPlan, ...]
    src: str | None = None

    @property
    def routes(self) -> tuple[str, ...]:
        """The networks this device carries: its peers' allowed IPs."""
        return tuple(dict.fromkeys(ip for peer in self.peers for ip in peer.allowed_ips))


def device_name(run_id: str, family: int) -> str:
    """``itb<run id>wg4`` / ``wg6``: the run's prefix, within the 15 characters a name may have."""
    return names.ifname(run_id, f"wg{family}")


def plan_tunnels(pairs: Iterable[tuple[Endpoint, Endpoint]], run_id: str, family: int, link_mtu: int = 1500,
                 inside: dict[str, str] | None = None) -> list[DevicePlan]:
    """The devices that protect every pair of tunnel ends (pure but for the keys).

    ``pairs``: the two ends of each tunnel, each with its namespace, its address on the untrusted link
    (a peer's endpoint) and the network it protects (its peers' allowed IPs).  An end in several pairs
    (a gateway with 200 road warriors) has one device with a peer each; two pairs between the same two
    ends are one peer with both networks.  ``inside``: each end's own address inside what it protects,
    by namespace, where it has one (a gateway's LAN address).
    """
    if family not in LISTEN_PORTS:
        raise ValueError(f"family must be 4 or 6, not {family!r}")
    peers: dict[str, dict[str, PeerPlan]] = {}
    for a, b in pairs:
        for here, there in ((a, b), (b, a)):
            if here.family != family:
                raise ValueError(f"an IPv{here.family} end ({here.address}) in an IPv{family} plan")
            mine = peers.setdefault(here.ns, {})
            known = mine.get(there.ns)
            allowed = (*(known.allowed_ips if known else ()), there.subnet)
            mine[there.ns] = PeerPlan(there.ns, known.endpoint if known else there.address, LISTEN_PORTS[family],
                                      tuple(dict.fromkeys(allowed)))
    inside = inside or {}
    return [DevicePlan(ns, device_name(run_id, family), family, LISTEN_PORTS[family], link_mtu - MTU_RESERVE,
                       secrets.token_bytes(32), tuple(mine.values()), inside.get(ns))
            for ns, mine in peers.items()]


def inside_address(subnet: str, addresses: Sequence[str]) -> str | None:
    """The first of ``addresses`` inside ``subnet`` (None: none is)."""
    net = ipaddress.ip_network(subnet, strict=False)
    return next((a for a in addresses if a and ipaddress.ip_address(a) in net), None)


def _b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def _wireguard_socket(ns: str):
    from pyroute2.netlink import NETLINK_GENERIC
    from pyroute2.netlink.generic.wireguard import WireGuard

    return WireGuard(use_socket=netns.socket_in(ns, NETLINK_GENERIC))


def apply(devices: Sequence[DevicePlan]) -> None:
    """Create and configure ``devices``, their routes and rules; on any failure remove what was made
    and raise :class:`WireGuardError` naming the device and the kernel's reason."""
    made: list[DevicePlan] = []
    try:
        public = {}  # each device's public key, by its namespace and IP version (a key per device)
        for dev in devices:
            public[dev.ns, dev.family] = _create(dev)  # a device it could not create is not its own to remove
            made.append(dev)
        for dev in devices:
            _peer_and_route(dev, public)
    except WireGuardError:
        remove(made, missing_ok=True)
        raise
    except (NetlinkError, OSError, ValueError) as e:
        remove(made, missing_ok=True)
        where = made[-1] if made else None
        place = f" {where.ifname} in {where.ns}" if where else ""
        raise WireGuardError(f"WireGuard{place}: {e.args[-1] if e.args else e}") from e


def _create(dev: DevicePlan) -> str:
    """The device with its key, port, mark and MTU; returns its public key (base64) as the kernel derived it."""
    with netns.iproute(dev.ns, ext_ack=True) as ipr:
        try:
            ipr.link("add", ifname=dev.ifname, kind="wireguard")
        except NetlinkError as e:
            if e.code == errno.EOPNOTSUPP:  # no such link kind
                raise WireGuardError("this kernel has no WireGuard (CONFIG_WIREGUARD): the project's kernel "
                                     "has it (--uml-kernel recipe)") from None
            raise
        try:
            (index,) = ipr.link_lookup(ifname=dev.ifname)
            ipr.link("set", index=index, mtu=dev.mtu)
            wg = _wireguard_socket(dev.ns)
            try:
                wg.set(dev.ifname, private_key=_b64(dev.private_key), listen_port=dev.port, fwmark=FWMARK)
                (info,) = wg.info(dev.ifname)
                key = info.get_attr("WGDEVICE_A_PUBLIC_KEY")  # base64, as pyroute2 decodes it
            finally:
                wg.close()
        except BaseException:
            ipr.link("del", ifname=dev.ifname)
            raise
    return key.decode() if isinstance(key, bytes) else key


def _peer_and_route(dev: DevicePlan, public: dict[tuple[str, int], str]) -> None:
    wg = _wireguard_socket(dev.ns)
    try:
        for peer in dev.peers:
            wg.set(dev.ifname, peer={"public_key": public[peer.ns, dev.family], "endpoint_addr": peer.endpoint,
                                     "endpoint_port": peer.port, "allowed_ips": list(peer.allowed_ips)})
    finally:
        wg.close()
    with netns.iproute(dev.ns, ext_ack=True) as ipr:
        (index,) = ipr.link_lookup(ifname=dev.ifname)
        ipr.link("set", index=index, state="up")
        for net in dev.routes:
            route = {"dst": net, "oif": index, "table": TABLE, "family": _FAMILY[dev.family]}
            if dev.src:
                route["prefsrc"] = dev.src
            ipr.route("replace", **route)
        if not _has_rule(ipr, dev.family):
            ipr.rule("add", **_rule(dev.family))


def _rule(family: int) -> dict:
    return {"family": _FAMILY[family], "table": TABLE, "priority": RULE_PRIORITY, "fwmark": FWMARK,
            "fwmask": 0xFFFFFFFF, "flags": _FIB_RULE_INVERT}


def _has_rule(ipr, family: int) -> bool:
    return any(r.get_attr("FRA_TABLE") == TABLE and r.get_attr("FRA_PRIORITY") == RULE_PRIORITY
               for r in ipr.get_rules(family=_FAMILY[family]))


def remove(devices: Sequence[DevicePlan], missing_ok: bool = False) -> None:
    """Delete ``devices`` (their routes go with them) and the rule beside each."""
    errors = []
    for dev in devices:
        try:
            with netns.iproute(dev.ns) as ipr:
                found = ipr.link_lookup(ifname=dev.ifname)
                if found:
                    ipr.link("del", index=found[0])
                elif not missing_ok:
                    errors.append(f"{dev.ifname} in {dev.ns}: no such device")
                if _has_rule(ipr, dev.family):
                    ipr.rule("del", **_rule(dev.family))
        except (NetlinkError, OSError) as e:
            if not (missing_ok and not netns_exists(dev.ns)):
                errors.append(f"{dev.ifname} in {dev.ns}: {e}")
    if errors:
        raise WireGuardError("could not remove WireGuard: " + "; ".join(errors))


def netns_exists(ns: str) -> bool:
    return ns in netns.list_ours()


def peers_of(ns: str, ifname: str) -> list[dict]:
    """What the kernel holds of a device's peers now, without keys: endpoint, allowed IPs, last handshake
    (seconds since the epoch, 0: none yet), bytes received and sent."""
    wg = _wireguard_socket(ns)
    try:
        out = []
        for msg in wg.info(ifname):
            for peer in msg.get_attr("WGDEVICE_A_PEERS") or []:
                endpoint = peer.get_attr("WGPEER_A_ENDPOINT")
                handshake = peer.get_attr("WGPEER_A_LAST_HANDSHAKE_TIME")
                out.append({"endpoint": endpoint["addr"] if endpoint is not None else None,
                            "allowed_ips": [a["addr"] for a in peer.get_attr("WGPEER_A_ALLOWEDIPS") or []],
                            "handshake_s": handshake["tv_sec"] if handshake is not None else 0,
                            "rx_bytes": peer.get_attr("WGPEER_A_RX_BYTES") or 0,
                            "tx_bytes": peer.get_attr("WGPEER_A_TX_BYTES") or 0})
        return out
    finally:
        wg.close()


def refusal(mode: str, keying: Keying | str) -> str | None:
    """Why WireGuard cannot run in IPsec ``mode`` with ``keying`` (None: it can): it is a tunnel, with keys
    of its own."""
    if mode != "tunnel":
        return (f"profile wireguard: WireGuard is a tunnel and has no {mode} mode (IPsec's alone); leave "
                "--mode tunnel, the default, to compare it with IPsec")
    if Keying.named(keying) is not Keying.STATIC:
        return (f"profile wireguard: WireGuard makes its own keys (Noise handshakes), not --keying {keying}; "
                "leave --keying static, the default, to compare it with IPsec")
    return None

"""What the page, the server and the engine say to each other: checked here, in one place.

The page may ask for these actions only; each is checked (:func:`check_action`) by the server before
it goes to the engine, and again by the engine, so neither trusts the other with a free-form
command::

    {"action": "ipsec", "on": true|false}         protect the network with the profile, or not
    {"action": "profile", "name": PROFILE}         one of ipsec.profiles.CATALOG's (not ``none``)
    {"action": "rate", "mbit": RATE}               one of RATES
    {"action": "size", "mss": MSS}                 one of SIZES: the traffic's TCP segment payload
    {"action": "traffic", "on": true|false}        iperf3 from the first client to its server
    {"action": "capture"}                          packets on the untrusted link, and decrypted
    {"action": "keys", "show": true|false}         the SA pane shows the keys, or hides them
    {"action": "pcap", "id": N}                    the last capture and its Wireshark keys, as a zip

The engine answers with events (``{"event": NAME, ...}``): ``hello`` (the network, the choices and
the settings), ``status`` (the settings now), ``goodput`` (one reading), ``marker`` (a setting
changed), ``packets``, ``sas``, ``pcap`` (to the ``pcap`` action of the same id), ``error``, ``bye``.
"""
from __future__ import annotations

import re
from typing import Any

from ipsec.profiles import CATALOG, parse_profile

#: The link rates the page offers (the seeds' and the sweep's, Mbit/s).
RATES = (1.0, 2.0, 4.0, 10.0, 34.0, 44.0, 51.0, 100.0, 1000.0)
#: The TCP payload sizes the page offers (bytes per segment, the sweep's default sizes).
SIZES = (100, 250, 500, 750, 1000, 1250, 1460)
#: How many packets a capture takes from each end of the untrusted link.
CAPTURE_COUNT = 4


def profiles(mode: str = "tunnel", keying: str = "static") -> tuple[str, ...]:
    """The profiles the page offers: the catalogue's, without ``none`` (that is IPsec off), and without
    ``wireguard`` where the demo's mode or keying is IPsec's alone (transport, IKE)."""
    from ipsec import wireguard

    offered = [p for p in (parse_profile(n.name) for n in CATALOG) if not p.is_none]
    return tuple(p.name for p in offered if not (p.wireguard and wireguard.refusal(mode, keying)))


class ActionError(ValueError):
    """An action the page may not ask for; the message says why."""


def _bool(message: dict, key: str) -> bool:
    value = message.get(key)
    if not isinstance(value, bool):
        raise ActionError(f"{message.get('action')}: {key!r} must be true or false")
    return value


def check_action(message: Any) -> dict[str, Any]:
    """The action ``message`` as the engine takes it (only its known keys); :class:`ActionError` otherwise."""
    if not isinstance(message, dict):
        raise ActionError("an action is a JSON object")
    action = message.get("action")
    if action in ("ipsec", "traffic"):
        return {"action": action, "on": _bool(message, "on")}
    if action == "keys":
        return {"action": action, "show": _bool(message, "show")}
    if action == "capture":
        return {"action": action}
    if action == "profile":
        if message.get("name") not in profiles():
            raise ActionError(f"profile: {message.get('name')!r} is not one of {', '.join(profiles())}")
        return {"action": action, "name": message["name"]}
    if action == "rate":
        mbit = message.get("mbit")
        if isinstance(mbit, bool) or not isinstance(mbit, (int, float)) or float(mbit) not in RATES:
            raise ActionError(f"rate: {mbit!r} is not one of {', '.join(f'{r:g}' for r in RATES)} (Mbit/s)")
        return {"action": action, "mbit": float(mbit)}
    if action == "size":
        size = message.get("mss")
        if isinstance(size, bool) or size not in SIZES:
            raise ActionError(f"size: {size!r} is not one of {', '.join(map(str, SIZES))} (bytes)")
        return {"action": action, "mss": int(size)}
    if action == "pcap":
        ident = message.get("id")
        if isinstance(ident, bool) or not isinstance(ident, int):
            raise ActionError("pcap: 'id' must be an integer")
        return {"action": action, "id": ident}
    raise ActionError(f"unknown action {action!r}")


def describe_network(spec, mode: str, rate_mbit: float) -> dict[str, Any]:
    """The network as the page draws it: nodes in columns from the clients to the server, links with
    the shaped and the untrusted one marked, the ends that hold SAs in ``mode``."""
    from cli.demo import ipsec_ends

    server = spec.flows[0][1]
    # columns: hops from the server, the server rightmost
    hops = {server: 0}
    frontier = [server]
    while frontier:
        nxt = []
        for node in frontier:
            for link in spec.links:
                for a, b in ((link.a, link.b), (link.b, link.a)):
                    if a == node and b not in hops:
                        hops[b] = hops[node] + 1
                        nxt.append(b)
        frontier = nxt
    far = max(hops.values())
    return {
        "topology": spec.name,
        "nodes": [{"name": n.name, "role": n.role, "column": far - hops.get(n.name, far)} for n in spec.nodes],
        "links": [{"a": link.a, "b": link.b, "shaped": link.shaped, "untrusted": link.untrusted,
                   "rate_mbit": rate_mbit if link.shaped else None} for link in spec.links],
        "ipsec_ends": ipsec_ends(spec, mode),
        "ipsec_pairs": [[p.a, p.b] if mode == "transport" else [p.tunnel_a, p.tunnel_b] for p in spec.ipsec],
        "flow": list(spec.flows[0]),
        "mode": mode,
    }


_INTERVAL = re.compile(r"^\[\s*\d+\]\s+([\d.]+)-([\d.]+)\s+sec\s+[\d.]+\s+[KMGT]?Bytes\s+([\d.]+)\s+([KMGT]?)bits/sec")
_UNIT = {"": 1e-6, "K": 1e-3, "M": 1.0, "G": 1e3, "T": 1e6}


def interval_mbps(line: str) -> float | None:
    """The goodput of one of iperf3's interval lines (``[  5]   1.00-1.50   sec  ...  9.51 Mbits/sec``), in
    Mbit/s; None for any other line (a test's summary, which ends in ``sender`` or ``receiver``, included)."""
    m = _INTERVAL.match(line.strip())
    if not m or line.rstrip().endswith(("sender", "receiver")):
        return None
    return float(m.group(3)) * _UNIT[m.group(4)]


def packet_row(n: int, packet) -> dict[str, Any]:
    """One captured packet as the page lists it: addresses, protocol, ESP's SPI and sequence, length."""
    ip = packet.getlayer("IP") or packet.getlayer("IPv6")
    row = {"n": n + 1, "src": ip.src if ip else "", "dst": ip.dst if ip else "", "length": len(ip or packet)}
    for proto in ("ESP", "AH"):
        if packet.haslayer(proto):
            layer = packet.getlayer(proto)
            return {**row, "proto": proto, "spi": f"0x{layer.spi:08x}", "seq": int(layer.seq), "summary": ""}
    from ipsec.wire import WIREGUARD_PORTS, wireguard_message  # scapy: where the packets are

    udp = packet.getlayer("UDP")
    message = wireguard_message(bytes(udp.payload)) if udp is not None and \
        {udp.sport, udp.dport} & WIREGUARD_PORTS else {}
    if message:  # WireGuard: its message type, the receiver's index in the SPI's column, the counter in seq's
        index = message.get("receiver", message.get("sender"))
        size = f", {message['encrypted_bytes']} encrypted bytes" if "encrypted_bytes" in message else ""
        return {**row, "proto": "WireGuard", "spi": f"0x{index:08x}", "seq": message.get("counter"),
                "summary": f"{message['name']}{size}"}
    inner = ip.payload if ip else packet
    return {**row, "proto": inner.name if inner else "?", "spi": "", "seq": None, "summary": inner.summary()}


_CURRENT_BYTES = re.compile(r"lifetime current:\s*\n\s*(\d+)\(bytes\)")


def busiest_first(state_text: str) -> str:
    """``ip -s xfrm state``'s SAs reordered, the one that has carried the most bytes first: the counters a
    class watches tick are at the top of the pane, not below an idle IPv6 pair."""
    blocks = [b for b in re.split(r"(?m)^(?=src )", state_text) if b.strip()]
    carried = [int(m.group(1)) if (m := _CURRENT_BYTES.search(b)) else 0 for b in blocks]
    order = sorted(range(len(blocks)), key=lambda i: -carried[i])  # stable: equal counters keep the kernel's order
    return "".join(blocks[i] if blocks[i].endswith("\n") else blocks[i] + "\n" for i in order)


def decrypted_row(d) -> dict[str, Any]:
    """One decrypted packet (:class:`ipsec.wire.DecryptedPacket`) as the page lists it: what was inside."""
    inner = d.inner
    payload = inner.payload
    return {"n": d.index + 1, "proto": d.proto.upper(), "spi": f"0x{d.spi:08x}", "seq": d.seq, "mode": d.mode,
            "src": inner.src, "dst": inner.dst, "inner": payload.name if payload else "?",
            "summary": payload.summary() if payload else ""}

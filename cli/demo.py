"""``ipsec-testbed demo``: a network with IPsec up, and Mininet's CLI to explore it.

For classrooms: the network is built, shaped and protected, a short guide is printed, and
Mininet's command line opens with a few commands of the testbed's own::

    mininet> h1 ping -c 3 h2          Mininet as usual: a node's name, then a command
    mininet> capture                  a few packets on the untrusted link: only ESP
    mininet> decrypt                  the same packets, decrypted with the run's keys
    mininet> sa                       the SAs with their counters (keys hidden; `sa keys`)
    mininet> speed                    iperf3 between the far hosts, 2 seconds
    mininet> ipsec off / ipsec on     compare throughput without and with IPsec
    mininet> exit                     tear it all down

With ``--pcap DIR`` every capture is also written there with a Wireshark configuration
holding the keys (owner-only files), so students open it decrypted:
``WIRESHARK_CONFIG_DIR=DIR wireshark DIR/capture-1.pcap``.  Without it keys are written
nowhere.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

from mininet.cli import CLI

from experiments.engine import iperf
from ipsec import ike
from ipsec.xfrm import XfrmSocket
from testbed.backends import current
from testbed.record import Keying
from topologies import build_spec
from topologies.shaping import ShapingSpec

GUIDE = """\
IPsec Testbed demo: {topology}, {profile} in {mode} mode, {rate:g} Mbit/s on the {shaped} link.

  {diagram}      (= untrusted link, ~ shaped link)

  Try:
{commands}
"""


def guide_commands(client: str, server: str, kind: str, wan: str, ends: list[str]) -> str:
    """The guide's list of commands, in two aligned columns."""
    rows = [(f"{client} ping -c 3 {server}", f"a ping from {client} to {server}, through the IPsec {kind}"),
            ("capture", f"what crosses the untrusted link ({wan}) while {client} pings {server}: only ESP"),
            ("decrypt", "the captured packets, decrypted with this run's keys"),
            ("sa", f"the SAs on {', '.join(ends)}, with their packet and byte counters"),
            ("speed", f"iperf3 {client} -> {server} for 2 s"),
            ("ipsec off", "then `speed` again: the same link without IPsec"),
            ("ipsec on", "and back"),
            (f"{ends[0]} ip xfrm policy", "any command in a node's namespace"),
            ("guide", "this text again;  exit (or Ctrl-D) tears everything down")]
    width = max(len(c) for c, _ in rows) + 3
    return "\n".join(f"    {c.ljust(width)}{what}" for c, what in rows)


def diagram(spec) -> str:
    """The topology as one line: ``h1 - gw1 = gw2 - h2`` (``=`` untrusted, ``~`` shaped)."""
    parts, seen = [], None
    for link in spec.links:
        a, b = link.a, link.b
        sep = " = " if link.untrusted else (" ~ " if link.shaped else " - ")
        if seen is None:
            parts.append(a)
        elif a != seen:
            parts.append(f" | {a}")
        parts += [sep, b]
        seen = b
    return "".join(parts)


def ipsec_ends(spec, mode: str) -> list[str]:
    """The nodes that hold SAs in ``mode``: the hosts (transport) or the tunnel ends."""
    nodes: list[str] = []
    for pair in spec.ipsec:
        ends = (pair.a, pair.b) if mode == "transport" else (pair.tunnel_a, pair.tunnel_b)
        nodes += [n for n in ends if n not in nodes]
    return nodes


def keyed_sas(net, mode: str, keying: Keying | str) -> list:
    """The network's SAs with their keys: as installed, or as the kernel holds what IKE negotiated."""
    if not Keying.named(keying).negotiated:
        return [sa for plan in net.ipsec_plans for sa in plan.sas]
    held = {}
    for node in ipsec_ends(net.spec, mode):
        with XfrmSocket(net.ns(node)) as x:
            held.update({(st.proto, st.spi, st.dst): st.to_spec() for st in x.dump_sa()
                         if st.proto in ("esp", "ah", "comp")})
    return list(held.values())


def sa_text(net, node: str, keys: bool = False, hidden: str = "<key hidden>") -> str:
    """``ip -s xfrm state`` in ``node``'s namespace, its keys replaced by ``hidden`` unless ``keys``; with
    WireGuard up, its devices and peers there as ``wg show`` lays them out (no keys: none is exported)."""
    devices = [d for d in net.wireguard_devices if d.ns == net.ns(node)]
    if devices:
        return wireguard_text(devices)
    text = subprocess.run(["ip", "-s", "-n", net.ns(node), "xfrm", "state"], capture_output=True, text=True).stdout
    return text if keys else re.sub(r"0x[0-9a-f]{16,}", hidden, text)


def wireguard_text(devices, now: float | None = None) -> str:
    """WireGuard devices and their peers now, as ``wg show`` lays them out, without keys."""
    from ipsec.wireguard import peers_of

    now = time.time() if now is None else now
    lines = []
    for dev in devices:
        lines.append(f"interface: {dev.ifname}\n  listening port: {dev.port}\n  mtu: {dev.mtu}\n"
                     "  private key: (in the kernel only; WireGuard's data keys come from handshakes)")
        for peer in peers_of(dev.ns, dev.ifname):
            ago = f"{now - peer['handshake_s']:.0f} seconds ago" if peer["handshake_s"] else "(none)"
            lines.append(f"\npeer endpoint: {peer['endpoint']}:{dev.port}\n"
                         f"  allowed ips: {', '.join(peer['allowed_ips'])}\n  latest handshake: {ago}\n"
                         f"  transfer: {peer['rx_bytes']} B received, {peer['tx_bytes']} B sent")
        lines.append("\n")
    return "\n".join(lines)


def untrusted_senders(net) -> str:
    """Who :func:`capture` listens to, for a sentence: ``gw1 (itb...e1) and gw2 (itb...e0)``."""
    return " and ".join(f"{ns.rsplit('-', 1)[1]} ({dev})" for ns, dev in net.untrusted_interfaces())


def capture(net, count: int, ping: bool = True, timeout_s: float = 5.0) -> list:
    """The packets the ends of the untrusted link send onto it, ``count`` from each (fewer if ``timeout_s``
    passes), in time order; with ``ping``, while the first flow's client pings its server ``count`` times."""
    import scapy.layers.inet
    import scapy.layers.inet6
    import scapy.layers.ipsec
    import scapy.layers.l2  # noqa: F401
    from scapy.utils import rdpcap

    client, server = net.spec.flows[0]
    packets = []
    with tempfile.TemporaryDirectory(prefix="itb-demo-") as tmp:
        dumps = []
        for n, (ns, dev) in enumerate(net.untrusted_interfaces()):
            # -Q out: what the interface sent, i.e. what crossed the wire.  A capture of
            # what it received would also show the decrypted packets, which the kernel
            # hands to packet taps on the receiving interface again.  Only IPv4 (the ping's
            # family): an ARP or IPv6 neighbour-discovery frame would take a packet's place.
            pcap = os.path.join(tmp, f"{n}.pcap")
            dump = subprocess.Popen(["ip", "netns", "exec", ns, "tcpdump", "-n", "-U", "-Q", "out", "-c",
                                     str(count), "-i", dev, "-w", pcap, "ip"], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
            dump.stderr.readline()  # "listening on ...": the capture is live
            dumps.append((dump, pcap))
        if ping:
            subprocess.run(["ip", "netns", "exec", net.ns(client), "ping", "-c", str(count), "-i", "0.2",
                            "-W", "2", net.addr(server)], stdout=subprocess.DEVNULL)
        for dump, pcap in dumps:
            try:
                dump.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                dump.terminate()
                dump.wait()
            if os.path.getsize(pcap) > 24:  # more than the pcap header
                packets += list(rdpcap(pcap))
    packets.sort(key=lambda p: float(p.time))
    return packets


class DemoCLI(CLI):
    """Mininet's CLI with the testbed's commands (see the module docstring)."""

    prompt = "mininet> "

    def __init__(self, net, profile: str, mode: str, guide: str, pcap_dir: str | None = None,
                 keying: Keying | str = Keying.STATIC, **kw) -> None:
        self.net = net
        self.profile, self.mode, self.keying = profile, mode, keying
        self.guide = guide
        self.pcap_dir = pcap_dir
        self.captured: list = []
        self.captures = 0
        self.ipsec_on = True
        print(guide, flush=True)
        super().__init__(net.mininet, **kw)

    # -- helpers ----------------------------------------------------------------------
    def _flow(self) -> tuple[str, str]:
        return self.net.spec.flows[0]

    def _ends(self) -> list[str]:
        return ipsec_ends(self.net.spec, self.mode)

    def _sas(self) -> list:
        return keyed_sas(self.net, self.mode, self.keying)

    # -- commands ---------------------------------------------------------------------
    def do_guide(self, _line: str) -> None:
        """Print the guide again."""
        print(self.guide)

    def do_sa(self, line: str) -> None:
        """sa [keys]: the SAs of every IPsec end with their counters (keys hidden unless `sa keys`)."""
        if not self.ipsec_on:
            print("IPsec is off (`ipsec on` to switch it on)")
        for node in self._ends():
            text = sa_text(self.net, node, keys=line.strip() == "keys", hidden="<key hidden: `sa keys` shows it>")
            print(f"--- {node}: ip -s xfrm state\n{text or '(no SA)'}")

    def do_capture(self, line: str) -> None:
        """capture [N]: N pings (default 3) across the network, and what both ends of the untrusted link sent."""
        count = int(line) if line.strip().isdigit() else 3
        client, server = self._flow()
        packets = capture(self.net, count)
        self.captured = packets
        where = untrusted_senders(self.net)
        print(f"{len(packets)} packets sent onto the untrusted link by {where} while {client} pinged {server}:")
        for i, p in enumerate(packets):
            print(f"  {i + 1:2d}  {p.summary()}")
        if packets and self.pcap_dir:
            from ipsec.wire import write_wireshark

            self.captures += 1
            try:
                written, _ = write_wireshark(f"capture-{self.captures}.pcap", packets, self._sas(), self.pcap_dir,
                                             overwrite=True)
                print(f"written: {written} (open it decrypted: WIRESHARK_CONFIG_DIR={self.pcap_dir} "
                      f"wireshark {written})")
            except ValueError as e:
                print(f"not written: {e}")
        if packets:
            print("`decrypt` shows what is inside")

    def do_decrypt(self, _line: str) -> None:
        """decrypt: the last capture's ESP/AH packets, decrypted with this run's keys."""
        from ipsec.wire import DecryptError, decrypt

        if not self.captured:
            print("nothing captured yet: `capture` first")
            return
        if not any(p.haslayer("ESP") or p.haslayer("AH") for p in self.captured):
            print("no ESP or AH in the capture (is IPsec off?): the packets above are the plaintext")
            return
        try:
            shown = decrypt(self.captured, self._sas())
        except (DecryptError, ValueError) as e:
            print(f"cannot decrypt: {e}")
            return
        for d in shown:
            print(f"  {d.index + 1:2d}  {d.proto.upper()} spi 0x{d.spi:08x} seq {d.seq} ({d.mode})  ->  "
                  f"{d.inner.summary()}")

    def do_speed(self, _line: str) -> None:
        """speed: iperf3 from the first client to its server for 2 s (after a 1 s warm-up)."""
        client, server = self._flow()
        try:
            r = iperf.measure(self.net.ns(server), self.net.ns(client), self.net.addr(server), duration_s=2,
                              omit_s=1)
        except iperf.IperfError as e:
            print(f"speed: {e}")
            return
        state = f"with {self.profile}" if self.ipsec_on else "without IPsec"
        print(f"{client} -> {server} {state}: {r.goodput_mbps:.2f} Mbit/s "
              f"({r.retransmits} retransmissions)")

    def do_ipsec(self, line: str) -> None:
        """ipsec on|off: protect the network with the demo's profile, or not."""
        word = line.strip()
        if word == "off":
            self.net.remove_ipsec()
            self.ipsec_on = False
            print("IPsec off: the untrusted link now carries plaintext (`capture` shows it)")
        elif word == "on":
            self.net.apply_ipsec(self.profile, self.mode, families=(4, 6), keying=self.keying)
            self.ipsec_on = True
            print(f"IPsec on: {self.profile} in {self.mode} mode, fresh keys"
                  + (f", {ike.describe_keying(self.keying)}" if ike.is_ike(self.keying) else ""))
        else:
            print("usage: ipsec on | ipsec off")


def run_demo(topology: str, profile: str, mode: str, rate_mbit: float, clients: int,
             pcap_dir: str | None = None, stdin=None, keying: Keying | str = Keying.STATIC) -> int:
    """Build the network, protect it, open the CLI; everything is removed when it ends."""
    from topologies.network import Network

    spec = build_spec(topology, clients=clients)
    if pcap_dir:
        os.makedirs(pcap_dir, mode=0o700, exist_ok=True)
    print(f"building {topology} in {current().label()}...", flush=True)
    with Network(spec, shaping=ShapingSpec(rate_mbit=rate_mbit)) as net:
        net.apply_ipsec(profile, mode, families=(4, 6), keying=keying)
        client, server = spec.flows[0]
        shaped = spec.shaped_link
        ends = ipsec_ends(spec, mode)
        wan = "-".join(sorted({n.rsplit('-', 1)[1] for n, _ in net.untrusted_interfaces()}))
        guide = GUIDE.format(topology=topology, profile=profile, mode=mode, rate=rate_mbit,
                             shaped=f"{shaped.a}-{shaped.b}", diagram=diagram(spec),
                             commands=guide_commands(client, server, "tunnel" if mode == "tunnel" else "transport SAs",
                                                     wan, ends))
        DemoCLI(net, profile, mode, guide, pcap_dir, keying=keying, stdin=stdin or sys.stdin)
    print("demo: network removed")
    return 0

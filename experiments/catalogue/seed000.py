"""Seed 000: IKEv2/IPsec tunnel mode against no VPN between two hosts on a 1 Gbit link.

The seed (a benchmark write-up, shared/seeds/000) measured two ThinkPad X230 (Core
i5-3320M, CentOS 7.8 and 8.1) through a 1 Gbit switch: iperf3 TCP and UDP (-b 0),
IPv4 and IPv6, no VPN against an IKEv2 tunnel with AES-GCM-256; an 8 GiB TCP transfer
with the sender's system CPU; and, in an annex, an unencrypted VPN (ESP null +
HMAC-SHA1) in tunnel and transport mode with and without IPComp, and MTU 3000.

Here: host_to_host at 1000 Mbit/s, ESP keys installed directly (no IKE) in every part but
``ikev2``, which keys the same tunnel as the seed did: IKEv2 between the two hosts,
authenticated by RSA signatures (``authby=rsasig``; a key pair per host, made per run), its
AES-GCM-256 CHILD_SA negotiated by strongSwan's charon (the seed's ``conn`` blocks are
libreswan's).  The bulk transfer runs for --bulk-seconds instead of 8 GiB (8 GiB at the
seed's 934 Mbit/s took about 74 s); its CPU share is the whole machine's.  UDP
datagrams are 1350 bytes, so no point is fragmented by the tunnel.
"""
from __future__ import annotations

from experiments.engine.plan import SweepSpec
from experiments.job import Part
from experiments.reproduce import Reproduction, SeedOption
from testbed.record import Keying

EPILOG = """\
examples:
  sudo ipsec-testbed reproduce 000             # every part, ~6 min in UML
  sudo ipsec-testbed reproduce 000 --dry-run   # the parts and their time
  sudo ipsec-testbed reproduce 000 --parts bulk --bulk-seconds 60

The report (report.html and the tables printed at the end) puts every number of the
seed next to this run's, with the ratios that transfer across hardware and whether
each of the seed's claims holds here.
"""
RATE = 1000.0
UDP_BYTES = 1350


OPTIONS = (
    SeedOption("--bulk-seconds", 10, kind=int, metavar="S",
               help="length of the bulk TCP transfer that stands for the seed's 8 GiB (default: %(default)s)"),
)


def parts(args) -> list[Part]:
    gcm = ("none", "aes-gcm-256")
    null = ("none", "null-sha1", "null-sha1+ipcomp")

    def spec(**kw) -> SweepSpec:
        base = dict(topology="host_to_host", mode="tunnel", rates_mbit=(RATE,), repetitions=3, duration_s=2,
                    warmup_s=0.5, udp_bitrate="0")
        return SweepSpec(**{**base, **kw})

    tcp = dict(transports=("tcp",), sizes=(1460,), size_mode="mss")
    udp = dict(transports=("udp",), sizes=(UDP_BYTES,))
    out = [
        Part("throughput_tcp", "4.2 iperf3 TCP, IPv4 and IPv6, no VPN vs AES-GCM-256 tunnel",
             spec(profiles=gcm, ip_versions=(4, 6), **tcp), reference="throughput"),
        Part("throughput_udp", "4.2 iperf3 UDP -b 0, IPv4 and IPv6, no VPN vs AES-GCM-256 tunnel",
             spec(profiles=gcm, ip_versions=(4, 6), **udp), reference="throughput"),
        Part("ikev2", "3 the tunnel keyed as the seed keyed it: IKEv2 with RSA signatures, TCP, IPv4 and IPv6",
             spec(profiles=("aes-gcm-256",), plain=False, keying=Keying.IKE_RSA, ip_versions=(4, 6), **tcp),
             keying_fixed=True),
        Part("bulk", f"4.3 bulk TCP transfer ({args.bulk_seconds} s for the seed's 8 GiB) with system CPU",
             spec(profiles=gcm, ip_versions=(4, 6), repetitions=2, duration_s=args.bulk_seconds, **tcp)),
    ]
    for mode in ("tunnel", "transport"):
        sec = "7.1" if mode == "tunnel" else "7.2"
        out += [Part(f"annex_{mode}_tcp", f"{sec} unencrypted VPN ({mode}), with and without IPComp, TCP",
                     spec(profiles=null, mode=mode, ip_versions=(4,), **tcp), reference=f"annex_{mode}"),
                Part(f"annex_{mode}_udp", f"{sec} unencrypted VPN ({mode}), with and without IPComp, UDP",
                     spec(profiles=null, mode=mode, ip_versions=(4,), **udp), reference=f"annex_{mode}")]
    out.append(Part("mtu3000", "5 MTU 3000 instead of 1500 (TCP, IPv4, no VPN vs AES-GCM-256)",
                    spec(profiles=gcm, ip_versions=(4,), mtu=3000, transports=("tcp",), sizes=(2960,),
                         size_mode="mss")))
    return out


REPRODUCTION = Reproduction(seed="000", name="seed000_x230_gigabit", doc=__doc__, parts=parts,
                            options=OPTIONS, epilog=EPILOG,
                            fastest_link_mbit=1000, fastest_link="Intel 82579LM gigabit NICs through a gigabit switch")

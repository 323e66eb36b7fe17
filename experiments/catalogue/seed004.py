"""Seed 004: IPv6 transport mode, 1 to 5 clients streaming to one server, DES and AES with HMAC-MD5.

The seed (the WIT IPv6 IPsec testbed, 2003, shared/seeds/004) ran netperf TCP_STREAM and
UDP_STREAM from 1, 2, 3, 4 and 5 clients (dual Pentium III 850 MHz, 100 Mbit Ethernet,
USAGI 2.4.19) at the same time to one server, with no IPsec and with IPv6 transport mode
ESP (DES or AES, HMAC-MD5), and measured throughput and the server's CPU load.

Here: multi_host_to_host with N clients (one part per N), IPv6, transport mode, the
server's link at 100 Mbit/s, TCP MSS and UDP datagrams of 1400 bytes (no fragmentation
with either cipher).  The CPU figures are the whole machine's: inside User-Mode Linux
every host shares one CPU, so "server CPU" cannot be told apart.
"""
from __future__ import annotations

from experiments.engine.plan import SweepSpec
from experiments.job import Part
from experiments.reproduce import Reproduction, SeedOption

EPILOG = """\
examples:
  sudo ipsec-testbed reproduce 004             # 1..5 clients, ~5 min in UML
  sudo ipsec-testbed reproduce 004 --max-clients 3 --repetitions 3
"""


OPTIONS = (
    SeedOption("--max-clients", 5, kind=int, metavar="N",
               help="measure 1..N concurrent clients (default: %(default)s, as the seed)"),
    SeedOption("--rate", 100.0, kind=float, metavar="MBIT",
               help="rate of the server's link in Mbit/s (default: %(default)g, the seed's 100 Mbit cards)"),
)


def parts(args) -> list[Part]:
    if not 1 <= args.max_clients <= 16:
        raise ValueError(f"--max-clients must be 1..16, not {args.max_clients}")
    return [Part(f"clients{n}", f"Figures 3-6 with {n} client{'s' if n > 1 else ''}",
                 SweepSpec(topology="multi_host_to_host", clients=n, mode="transport",
                           profiles=("none", "des-cbc-md5", "aes-cbc-128-md5"), ip_versions=(6,),
                           transports=("tcp", "udp"), rates_mbit=(args.rate,), sizes=(1400,), size_mode="mss",
                           udp_bitrate="0", repetitions=2, duration_s=2, warmup_s=0.5))
            for n in range(1, args.max_clients + 1)]


REPRODUCTION = Reproduction(seed="004", name="seed004_ipv6_clients", doc=__doc__, parts=parts,
                            options=OPTIONS, epilog=EPILOG,
                            fastest_link_mbit=100,
                            fastest_link="Intel Ethernet Pro 100 and 3Com 3c905 NICs on a Cisco 2924")

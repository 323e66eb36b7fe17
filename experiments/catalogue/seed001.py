"""Seed 001: native 2.6-kernel IPsec, ESP 3DES-CBC + HMAC-SHA1 with AH, transport mode, netio.

The seed (an article on the 2.6 kernel's IPsec, shared/seeds/001) measured two Pentium
IV 2.2 GHz machines running 2.6.7 with netio: TCP and UDP, packet (write) sizes 1 KB to
32 KB, without IPsec and with transport mode ESP 3DES + HMAC-SHA1 plus AH (its setkey
script), in KByte/s (Tables 1 and 2).  The link is not named; its plain figures (about
10.9 MByte/s TCP, 11.7 UDP) are those of 100 Mbit Ethernet, which is what is shaped here.

Here: host_to_host at 100 Mbit/s, iperf3 with write sizes (-l) 1024..32768 bytes for
TCP and datagrams of those sizes for UDP (-b 0; above the path MTU they are
fragmented, as netio's were), profile 3des-cbc-sha1+ah-md5 against none.
"""
from __future__ import annotations

from experiments.engine.plan import SweepSpec
from experiments.job import Part
from experiments.reproduce import Reproduction, SeedOption

EPILOG = """\
examples:
  sudo ipsec-testbed reproduce 001             # both tables, ~5 min in UML
  sudo ipsec-testbed reproduce 001 --parts netio_tcp --sizes 1024,32768
"""
SIZES = (1024, 2048, 4096, 8192, 16384, 32768)


OPTIONS = (
    SeedOption("--sizes", SIZES, kind=int, metavar="BYTES,...",
               help="write / datagram sizes (default: the seed's 1 KB .. 32 KB)"),
    SeedOption("--rate", 100.0, kind=float, metavar="MBIT",
               help="rate of the link in Mbit/s (default: %(default)g, Fast Ethernet)"),
)


def parts(args) -> list[Part]:
    def spec(transport: str) -> SweepSpec:
        return SweepSpec(topology="host_to_host", mode="transport", profiles=("none", "3des-cbc-sha1+ah-md5"),
                         ip_versions=(4,), transports=(transport,), rates_mbit=(args.rate,), sizes=args.sizes,
                         size_mode="write", repetitions=3, duration_s=2, warmup_s=0.5, udp_bitrate="0")

    return [Part("netio_tcp", "Table 1: netio TCP, without and with IPsec", spec("tcp"), reference="netio"),
            Part("netio_udp", "Table 2: netio UDP, without and with IPsec", spec("udp"), reference="netio")]


REPRODUCTION = Reproduction(seed="001", name="seed001_netio_3des_ah", doc=__doc__, parts=parts,
                            options=OPTIONS, epilog=EPILOG)

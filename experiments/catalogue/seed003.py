"""Seed 003: VPN gateways with AES + HMAC-MD5, TCP payload 100..1460 bytes over 100..10 Mbit/s links.

The seed (Ronan, Davy and Rossebø, 2005, shared/seeds/003) routed iperf TCP between a
client and a server through two Linux 2.6.5 gateways (dual Xeon 2.4 GHz) with an ESP
tunnel (AES, HMAC-MD5) between them, the gateways' link shaped with tc tbf to 100, 51,
44, 34 and 10 Mbit/s (and 4, 2, 1 for low-resource users), packet sizes 1460 down to
100 bytes, and reported IPsec/plain normalized throughput and the gateways' CPU.

Here: vpn_gateway, none against aes-cbc-128-md5 tunnel (the seed does not give AES's key
size), TCP MSS as the packet size.  By default the era's behaviour, as in the seed: no path
MTU discovery, so the gateway fragments what no longer fits the tunnel (the dip above ~1340
bytes its conclusion names); --pmtu discover measures a modern stack instead.
"""
from __future__ import annotations

from experiments.engine.plan import SweepSpec
from experiments.job import Part
from experiments.reproduce import Reproduction, SeedOption

EPILOG = """\
examples:
  sudo ipsec-testbed reproduce 003             # ~9 min in UML
  sudo ipsec-testbed reproduce 003 --rates 4,2,1 --out runs/seed003-low
  sudo ipsec-testbed reproduce 003 --pmtu discover   # a modern stack
"""
RATES = (100.0, 51.0, 44.0, 34.0, 10.0)
SIZES = (1460, 1250, 1000, 750, 500, 250, 100)


OPTIONS = (
    SeedOption("--rates", RATES, kind=float, metavar="MBIT,...",
               help="gateway link rates (default: 100,51,44,34,10; the seed also used 4,2,1)"),
    SeedOption("--sizes", SIZES, kind=int, metavar="BYTES,...",
               help="TCP MSS values (default: the seed's 1460,1250,1000,750,500,250,100)"),
    SeedOption("--profile", "aes-cbc-128-md5",
               help="the IPsec profile (default: %(default)s; ipsec-testbed profiles lists others)"),
    SeedOption("--pmtu", "fragment", choices=("discover", "fragment"),
               help="fragment: the seed's 2005 behaviour, the gateway fragments what does not fit the "
                    "tunnel; discover: modern path MTU discovery (default: %(default)s)"),
)


def parts(args) -> list[Part]:
    return [Part("gateway", "Figures 6-7: throughput and normalized throughput against packet size and rate",
                 SweepSpec(topology="vpn_gateway", mode="tunnel", profiles=("none", args.profile), ip_versions=(4,),
                           transports=("tcp",), rates_mbit=args.rates, sizes=args.sizes, size_mode="mss",
                           pmtu=args.pmtu, repetitions=2, duration_s=2, warmup_s=0.5))]


REPRODUCTION = Reproduction(seed="003", name="seed003_gateway_rates", doc=__doc__, parts=parts,
                            options=OPTIONS, epilog=EPILOG,
                            fastest_link_mbit=100, fastest_link="its gateway link shaped with tbf from 100 Mbit/s down")

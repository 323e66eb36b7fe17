"""Named sweeps for the regression gate (``ipsec-testbed regress --suite NAME``).

Each suite is a :class:`~experiments.engine.plan.SweepSpec`, as a seed's parts are: data, not code;
the regression gate measures it as a sweep's :class:`~experiments.job.Job`.
They are short on purpose (a CI job runs one on every change) and repeat each point
enough times for the gate to tell noise from a change.
"""
from __future__ import annotations

from experiments.engine.plan import SweepSpec

SUITES: dict[str, tuple[str, SweepSpec]] = {
    "detect": ("built to detect a slower kernel IPsec (with --inject-slowdown or --ab): VPN gateways, "
               "AES-GCM-256 tunnel alone, unshaped (1000 Mbit/s, so the emulator's CPU sets the goodput), "
               "MSS 1460, 24 repetitions of 2 s; judged on goodput and CPU per packet, with 3 % tolerance against a "
               "baseline, 0.5 % between arms. About 1 min in UML, 2 min with two arms",
               SweepSpec(topology="vpn_gateway", profiles=("aes-gcm-256",), plain=False, rates_mbit=(1000.0,),
                         sizes=(1460,), repetitions=24, duration_s=2.0, warmup_s=0.2)),
    "counted": ("built for the counted backend (--kernel qemu), whose clock counts instructions: VPN gateways, "
                "AES-GCM-256 tunnel alone, UDP datagrams of 1400 B offered at 100 Mbit/s on an unshaped link (paced: "
                "every datagram takes the same path, none waits for an ACK, as TCP's do), 16 repetitions of 1 s "
                "(one window in about a hundred carries a rare event of the guest's, +0.7 %: among 16 it moves the "
                "mean little); judged on goodput and instructions per packet, with 1 % tolerance against a "
                "baseline, 0.5 % between arms. About 1 min on the counted backend, 1.5 min with two arms",
                SweepSpec(topology="vpn_gateway", profiles=("aes-gcm-256",), plain=False, rates_mbit=(1000.0,),
                          sizes=(1400,), transports=("udp",), udp_bitrate="100M", repetitions=16, duration_s=1.0,
                          warmup_s=0.5)),
    "quick": ("host to host, no IPsec and AES-GCM-128 transport, 50 Mbit/s, MSS 1400, 3 repetitions of 1 s "
              "(about 30 s in UML): to try the gate",
              SweepSpec(topology="host_to_host", mode="transport", profiles=("aes-gcm-128",), rates_mbit=(50.0,),
                        sizes=(1400,), repetitions=3, duration_s=1.0, warmup_s=1.0)),
    "smoke": ("VPN gateways, no IPsec and AES-GCM-256 tunnel, 100 Mbit/s, MSS 500 and 1460, 5 repetitions "
              "(about 1.5 min in UML)",
              SweepSpec(topology="vpn_gateway", profiles=("aes-gcm-256",), rates_mbit=(100.0,), sizes=(500, 1460),
                        repetitions=5, duration_s=2.0, warmup_s=1.0)),
    "ciphers": ("host to host, transport mode, every ESP cipher family the seeds use, unshaped (1000 Mbit/s), "
                "MSS 1460, 4 repetitions (about 2.5 min in UML)",
                SweepSpec(topology="host_to_host", mode="transport",
                          profiles=("aes-gcm-128", "aes-gcm-256", "aes-cbc-128-sha1", "aes-cbc-256-sha256",
                                    "3des-cbc-sha1", "null-sha1"),
                          rates_mbit=(1000.0,), sizes=(1460,), repetitions=4, duration_s=2.0, warmup_s=1.0)),
    "ipv6": ("VPN gateways over IPv6, no IPsec and AES-GCM-256 tunnel, 100 Mbit/s, MSS 1000, 5 repetitions",
             SweepSpec(topology="vpn_gateway", profiles=("aes-gcm-256",), ip_versions=(6,), rates_mbit=(100.0,),
                       sizes=(1000,), repetitions=5, duration_s=2.0, warmup_s=1.0)),
    "tunnels": ("VPN gateways, no tunnel, ESP AES-GCM-256 and ChaCha20-Poly1305, and WireGuard (the same cipher "
                "in two protocols), unshaped (10 Gbit/s, so the emulator's CPU sets the goodput), MSS 100 and "
                "1460, 6 repetitions of 2 s (about 2 min in UML; on the project's kernel, which has WireGuard)",
                SweepSpec(topology="vpn_gateway", profiles=("aes-gcm-256", "chacha20-poly1305", "wireguard"),
                          rates_mbit=(10000.0,), sizes=(100, 1460), repetitions=6, duration_s=2.0, warmup_s=0.5)),
}


#: The gate's settings a suite is built for, used where the command line gives none
#: (``--metrics`` as record fields, ``--max-drop`` in percent).
#: ``arms_max_drop`` is the tolerance for arms of one run compared pair by pair (``--inject-slowdown``),
#: ``max_drop`` the one against a saved baseline from another run, where the machine's drift between
#: the runs is not cancelled (benchmarks/regress_power.py measured both for the detect suite).
GATE_DEFAULTS: dict[str, dict] = {
    "detect": {"metrics": ("goodput_mbps", "cpu_us_per_packet"), "max_drop": 3.0, "arms_max_drop": 0.5},
    # (CPU per packet: on the counted backend, instructions per packet; analysis.regress.on_clock)
    "counted": {"metrics": ("goodput_mbps", "cpu_us_per_packet"), "max_drop": 1.0, "arms_max_drop": 0.5},
}
#: ... and everywhere else
DEFAULT_GATE = {"metrics": ("goodput_mbps",), "max_drop": 5.0, "arms_max_drop": 5.0}


def gate_defaults(name: str | None) -> dict:
    """The gate's settings for suite ``name`` (None: a run directory given instead of a suite)."""
    return {**DEFAULT_GATE, **GATE_DEFAULTS.get(name or "", {})}


def suite_spec(name: str) -> SweepSpec:
    """Suite ``name``'s sweep; ValueError naming the suites otherwise."""
    try:
        return SUITES[name][1]
    except KeyError:
        raise ValueError(f"unknown suite {name!r}; suites: {', '.join(SUITES)}") from None

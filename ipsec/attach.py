"""SA and policy plans for the two ends of a host-to-host association.

A plan is data: the SAs both ends hold and each end's policies, ready for
:meth:`ipsec.xfrm.XfrmSocket.install`.  Keys are fresh from :func:`ipsec.sa.random_key`
on every call.
"""
from __future__ import annotations

import dataclasses

from ipsec.algorithms import get_algorithm
from ipsec.sa import PolicySpec, SASpec, SelectorSpec, TemplateSpec, family_of, random_key


@dataclasses.dataclass(frozen=True)
class HostToHostPlan:
    """``sas`` go to both ends; ``policies_a``/``policies_b`` to one end each."""

    sas: tuple[SASpec, ...]
    policies_a: tuple[PolicySpec, ...]
    policies_b: tuple[PolicySpec, ...]


def plan_esp_transport(a: str, b: str, aead: str = "aes-gcm-256", spi_ab: int = 0x1001,
                       spi_ba: int = 0x1002, reqid: int = 1) -> HostToHostPlan:
    """ESP in transport mode with an AEAD between addresses ``a`` and ``b`` (one SA each way)."""
    if family_of(a) != family_of(b):
        raise ValueError(f"a and b must both be IPv4 or both IPv6, not {a!r} and {b!r}")
    alg = get_algorithm(aead, kind="aead")
    sas = (SASpec(src=a, dst=b, proto="esp", spi=spi_ab, reqid=reqid, aead=alg, aead_key=random_key(alg)),
           SASpec(src=b, dst=a, proto="esp", spi=spi_ba, reqid=reqid, aead=alg, aead_key=random_key(alg)))
    tmpl = (TemplateSpec("esp", "transport", reqid),)

    def policies(me: str, peer: str) -> tuple[PolicySpec, ...]:
        return (PolicySpec(SelectorSpec(me, peer), "out", templates=tmpl),
                PolicySpec(SelectorSpec(peer, me), "in", templates=tmpl))
    return HostToHostPlan(sas, policies(a, b), policies(b, a))

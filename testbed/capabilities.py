"""What a kernel can do (a probe's findings) and what a piece of work needs of it: plain data.

:class:`Probe` holds the :class:`Check` results of one kernel, found by trying each
capability for real (``experiments.doctor.probe`` does the trying).  :class:`Needs` says
which of those capabilities some work cannot do without: a plain sweep needs only
``veth`` and ``qdisc tbf``; one with ESP profiles needs ``esp`` too.  Backends compare
the two to say whether they can run the work (:mod:`testbed.backends`).
"""
from __future__ import annotations

import dataclasses

#: What every experiment needs: namespaces joined by veth pairs, and a shaper.
BASE_NEEDS = ("veth", "qdisc tbf")


@dataclasses.dataclass(frozen=True)
class Check:
    """One probed capability: ``group`` is kernel, ipsec, algorithm, qdisc, tunnel, tool or backend."""

    group: str
    name: str
    ok: bool
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class Needs:
    """The capabilities (probe check names) some work cannot run without."""

    capabilities: tuple[str, ...] = BASE_NEEDS

    def __post_init__(self) -> None:
        object.__setattr__(self, "capabilities", tuple(dict.fromkeys(self.capabilities)))

    def plus(self, *names: str) -> Needs:
        return Needs(self.capabilities + names)

    def describe(self) -> str:
        return ", ".join(self.capabilities)


#: What the IPsec experiments need: the base plus ESP over IPv4.
ESP_NEEDS = Needs(BASE_NEEDS + ("esp",))


@dataclasses.dataclass(frozen=True)
class Probe:
    """All checks of one kernel, and which backend's kernel it was."""

    kernel_release: str
    backend: str
    checks: tuple[Check, ...]

    def ok(self, name: str) -> bool:
        """Whether the check called ``name`` passed (False when it was not run)."""
        return any(c.ok for c in self.checks if c.name == name)

    def missing(self, needs: Needs = ESP_NEEDS) -> list[str]:
        """The capabilities of ``needs`` this kernel lacks."""
        return [n for n in needs.capabilities if not self.ok(n)]

    def to_json(self) -> dict:
        return {"kernel_release": self.kernel_release, "backend": self.backend,
                "checks": [dataclasses.asdict(c) for c in self.checks]}

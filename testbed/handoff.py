"""What the host hands a guest: one typed object, in one environment variable, read in one place.

A job that needs a kernel with ESP runs inside User-Mode Linux (``python -m cli.job``).  What that
guest needs of the host travels as a :class:`Handoff`, JSON in :data:`ENV`:

- ``job``: the job itself (:class:`experiments.job.Job` as JSON: what to run, where, since when);
- ``versions`` and ``host_cpu_model``: found on the host, where the tools are (meta.json);
- ``kernel``: which UML kernel the host chose and why (meta.json's ``kernel_*``);
- ``cpu_meter_tty`` and ``speed_probe``: the guest's end of the host's CPU meter (a console line)
  and how the speed probe on a spare host CPU times the windows;
- ``keep_awake``: what keeps the guest's host CPU from idling, if anything (:mod:`testbed.awake`; meta.json).

On the host the parts are added as they are found (:func:`hand`); the UML backend writes the
whole object into the guest's environment when it boots one.  In a guest :func:`received`
reads it once.  Besides it a guest has only ``IPSEC_TESTBED_BACKEND`` (the backend it runs on,
:data:`testbed.backends.base.GUEST_ENV`), which every process started by a backend carries.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Mapping
from typing import Any

ENV = "IPSEC_TESTBED_HANDOFF"


@dataclasses.dataclass(frozen=True)
class Handoff:
    job: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    versions: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    host_cpu_model: str = ""
    kernel: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    cpu_meter_tty: str = ""
    speed_probe: str = ""
    keep_awake: str = ""

    def to_env(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls, text: str) -> Handoff:
        """The object from :meth:`to_env`'s text; ValueError when it is not one (another version's)."""
        try:
            return cls(**json.loads(text))
        except (TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"${ENV} is not a hand-off this version reads: {e}") from None

    def with_(self, **changes: Any) -> Handoff:
        return dataclasses.replace(self, **changes)


_outgoing = Handoff()


def hand(**fields: Any) -> Handoff:
    """On the host: add ``fields`` to what the next guest gets; returns the whole."""
    global _outgoing
    _outgoing = _outgoing.with_(**fields)
    return _outgoing


def outgoing() -> Handoff:
    """On the host: what the next guest gets."""
    return _outgoing


@functools.cache
def received() -> Handoff | None:
    """In a guest: what the host handed it (None on the host, or from a host of another version)."""
    text = os.environ.get(ENV)
    if not text:
        return None
    try:
        return Handoff.from_env(text)
    except ValueError:
        return None


def current() -> Handoff:
    """What this job knows of itself: the host's hand-off in a guest, the one being built on the host."""
    return received() or _outgoing

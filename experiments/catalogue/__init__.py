"""What the testbed measures, as data: the seeds' experiments and the regression gate's suites.

The engine (:mod:`experiments.engine.plan`, :mod:`experiments.engine.sweep`, :mod:`experiments.reproduce`)
measures whatever it is given; this package says what: one module per seed, each a
:class:`~experiments.reproduce.Reproduction` of named parts, and :mod:`.suites`, the sweeps
``ipsec-testbed regress --suite NAME`` runs.
"""
from __future__ import annotations

import importlib

from experiments.reproduce import Reproduction

#: seed number -> module of this package that holds its REPRODUCTION
SEEDS = {"000": "seed000", "001": "seed001", "002": "seed002", "003": "seed003", "004": "seed004"}


def reproduction(seed: str) -> Reproduction:
    """Seed ``seed``'s experiment (``"3"``, ``"003"`` and ``"seed003"`` name the same); ValueError otherwise."""
    key = seed.lower().removeprefix("seed").split("_")[0]
    key = key.zfill(3) if key.isdigit() else key
    if key not in SEEDS:
        raise ValueError(f"unknown seed {seed!r}; seeds: {', '.join(SEEDS)}")
    return importlib.import_module(f"{__name__}.{SEEDS[key]}").REPRODUCTION


def reproductions() -> list[Reproduction]:
    return [reproduction(seed) for seed in SEEDS]

"""``--sampler`` names to Optuna samplers over the candidate space.

- ``evo``: :class:`~evo.search.sampler_evo.EvoSampler` (a Gaussian-process model of the
  study's measurements with a failure model picks each candidate; starts from the defaults).
- ``evo-ga``: :class:`~evo.search.sampler_ga.GaSampler` (elites, mutation, crossover; the
  default before ``evo``).
- ``tpe``: Optuna's multivariate, grouped TPE (``group=True`` models the conditional
  family -> params space), constant liar so a batch of pending trials spreads out.
- ``gp``: Optuna's GPSampler (needs scipy; seconds per trial).
- ``cmaes``: Optuna's CMA-ES. It does not model categorical parameters, and every evo
  parameter is one, so Optuna samples them all with its RandomSampler: random search with
  replacement (invalid points and repeats included). Kept for comparison, not recommended.
- ``random``: uniform over valid, untried points (family first, then point).
- ``grid``: every valid point once, in manifest order, families interleaved.

``warm`` (evo and evo-ga): start from the manifest defaults (``evo run`` always does); a cold
sampler starts from random points.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import optuna

from evo.errors import EvoError
from evo.manifest import Family
from evo.search.proposal import SweepSampler
from evo.search.sampler_evo import EvoSampler
from evo.search.sampler_ga import GaSampler

SAMPLERS = ("evo", "evo-ga", "tpe", "gp", "cmaes", "random", "grid")
PROPOSING = ("evo", "evo-ga", "random", "grid")  # samplers that never propose an invalid or tried point


def make_sampler(name: str, families: Sequence[Family], seed: int | None = None,
                 warm: bool = True) -> optuna.samplers.BaseSampler:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "evo":
            return EvoSampler(families, seed, warm=warm)
        if name == "evo-ga":
            return GaSampler(families, seed, warm=warm)
        if name == "tpe":
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True)
        if name == "gp":
            return optuna.samplers.GPSampler(seed=seed)
        if name == "cmaes":
            return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
        if name in ("random", "grid"):
            return SweepSampler(families, seed, order=name)
    raise EvoError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")

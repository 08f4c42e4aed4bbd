"""``--sampler`` names to Optuna samplers over the candidate space.

- ``evo`` (the default): :class:`~evo.search.sampler_evo.EvoSampler` (elites, mutation,
  crossover, family switches along the manifests' ``successors``; the children it breeds are
  pre-screened by a numpy Gaussian process of the study's measurements).
- ``evo-gp``: :class:`~evo.search.sampler_gp.GpSampler` (a Gaussian-process model of the
  study's measurements with a failure model picks each candidate; needs scikit-learn).
- ``tpe``: Optuna's multivariate, grouped TPE (``group=True`` models the conditional
  family -> params space), constant liar so a batch of pending trials spreads out.
- ``gp``: Optuna's GPSampler (needs scipy; seconds per trial).
- ``cmaes``: Optuna's CMA-ES. It does not model categorical parameters, and every evo
  parameter is one, so Optuna samples them all with its RandomSampler: random search with
  replacement (invalid points and repeats included). Kept for comparison, not recommended.
- ``random``: uniform over valid, untried points (family first, then point).
- ``grid``: every valid point once, in manifest order, families interleaved.

``warm`` (evo and evo-gp): start from the manifest defaults (``evo run`` always does); a cold
sampler starts from random points (the sampler benchmark's cold start).
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Sequence

import optuna

from evo.errors import EvoError
from evo.vocab import SAMPLERS
from evo.family.manifest import Family
from evo.family.render import Kernel
from evo.search import surrogate
from evo.search.proposal import SweepSampler
from evo.search.sampler_evo import EvoSampler
from evo.search.sampler_gp import GpSampler

PROPOSING = ("evo", "evo-gp", "random", "grid")  # samplers that never propose an invalid or tried point


def make_sampler(name: str, families: Sequence[Family], seed: int | None = None,
                 warm: bool = True, kernels: Collection[Kernel] | None = None) -> optuna.samplers.BaseSampler:
    """Sampler ``name`` over ``families``; the evolutionary one mutates only genes that ``kernels``
    (the study's: head dim, dtype, causal) read."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "evo":
            return EvoSampler(families, seed, warm=warm, kernels=kernels)
        if name == "evo-gp":
            return GpSampler(families, seed, warm=warm)
        if name == "tpe":
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True)
        if name == "gp":
            require(name)
            return optuna.samplers.GPSampler(seed=seed)
        if name == "cmaes":
            return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
        if name in ("random", "grid"):
            return SweepSampler(families, seed, order=name)
    raise EvoError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")


def require(name: str) -> None:
    """EvoError when sampler ``name`` needs a package that is not installed (``evo run`` asks
    before it opens the database)."""
    if name == "evo-gp":
        surrogate.require()
    elif name == "gp":
        try:
            import scipy  # noqa: F401  (Optuna's GPSampler imports it when it samples)
        except ImportError:
            raise EvoError("--sampler gp (Optuna's GPSampler) needs scipy: pip install 'evo-kernels[gp]'") from None

"""How a candidate is spelled in Optuna: ``family`` is a categorical, then that family's params.

Each family's parameters are categoricals over the manifest domain, named ``<family>.<param>``
so two families may use the same parameter name with different domains (Optuna's RDB storage
requires one distribution per name within a study). The search space is conditional: a trial
only holds the parameters of the family it picked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import optuna

from evo.errors import EvoError
from evo.family.manifest import Family, Value
from evo.family.space import Candidate

FAMILY = "family"
CANDIDATE = "candidate"  # the user attr a told trial keeps its stored candidate id under
SPEEDUPS = "speedups"    # the user attr a trial timed in full keeps its per-case speedups under
IMPORTED_FROM = "evo:imported_from"  # the user attr of a trial evo.search.warmstart enqueued: where from


def param_name(family: str, name: str) -> str:
    return f"{family}.{name}"


def suggest(trial: optuna.Trial, families: Sequence[Family]) -> tuple[Family, dict[str, Value]]:
    """Ask the trial for a family, then for each of its parameters (not yet validated)."""
    by_name = {f.name: f for f in families}
    fam = by_name[trial.suggest_categorical(FAMILY, list(by_name))]
    params = {n: cast(Value, trial.suggest_categorical(param_name(fam.name, n), list(p.values)))
              for n, p in fam.params.items()}
    return fam, params


def distributions(families: Sequence[Family]) -> dict[str, optuna.distributions.CategoricalDistribution]:
    """Every distribution a trial of this study may use (for ``study.ask`` and checks)."""
    out = {FAMILY: optuna.distributions.CategoricalDistribution([f.name for f in families])}
    for fam in families:
        for n, p in fam.params.items():
            out[param_name(fam.name, n)] = optuna.distributions.CategoricalDistribution(list(p.values))
    return out


def trial_params(cand: Candidate) -> dict[str, Value]:
    """The Optuna params of a candidate (for ``enqueue_trial``)."""
    return {FAMILY: cand.family} | {param_name(cand.family, n): v for n, v in cand.params}


def from_trial_params(params: Mapping[str, Any]) -> tuple[str, dict[str, Value]] | None:
    """Family name and raw params of a trial, or None when the trial never picked a family."""
    family = params.get(FAMILY)
    if family is None:
        return None
    prefix = family + "."
    return family, {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}


def check_compatible(study: optuna.Study, families: Sequence[Family]) -> None:
    """Refuse to continue a study whose recorded domains differ from the manifests now."""
    wanted = distributions(families)
    seen: dict[str, Any] = {}
    for t in study.get_trials(deepcopy=False):
        seen |= t.distributions
    for name, dist in seen.items():
        if name in wanted and wanted[name] != dist:
            raise EvoError(f"study {study.study_name!r} was run with {name} in {list(dist.choices)} "
                           f"but the manifests now give {list(wanted[name].choices)}; "
                           f"start a new --study")

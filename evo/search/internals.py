"""The few things evo needs from Optuna that its public API does not offer, in one place.

Everything else in evo goes through Optuna's public API (``Study``, ``Trial``, the storage's
public methods). These three cannot, and ``tests/test_optuna_internals.py`` fails loudly, naming
the one that went, if an Optuna release changes any of them:

- :data:`FIXED_PARAMS`: ``Study.enqueue_trial`` keeps the enqueued parameters in the waiting
  trial's system attrs under this key until the trial draws them; a retried candidate whose
  trial died before drawing is re-enqueued from there, and samplers know a retry by it.
- :func:`set_trial_system_attr`: a sampler's ``before_trial`` hook gets the study and a frozen
  trial; storing the sampler's proposal on that trial needs the study's storage and the trial's
  storage id, neither of which is public.
- :func:`unbeaten`: Optuna's ``fail_stale_trials`` only sees trials that have a heartbeat row;
  a trial whose worker died before its first beat has none. Finding those reads the RDB
  storage's ``trials`` and ``trial_heartbeats`` tables (reflected by name, not through Optuna's
  private ORM models).
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy import MetaData, Table, select

FIXED_PARAMS = "fixed_params"
TRIALS_TABLE, HEARTBEATS_TABLE = "trials", "trial_heartbeats"


def enqueued_params(t: FrozenTrial) -> dict[str, Any]:
    """The parameters a trial drew, else those it was enqueued with (empty when neither)."""
    return dict(t.params) if t.params else dict(t.system_attrs.get(FIXED_PARAMS, {}))


def is_enqueued(t: FrozenTrial) -> bool:
    """Whether the trial was made by ``Study.enqueue_trial`` (a retry, or a point given by hand)."""
    return FIXED_PARAMS in t.system_attrs


def set_trial_system_attr(study: optuna.Study, trial: FrozenTrial, key: str, value: Any) -> None:
    """Set a system attr on ``trial`` from inside a sampler hook (no public route exists)."""
    study._storage.set_trial_system_attr(trial._trial_id, key, value)


def unbeaten(storage: optuna.storages.RDBStorage, study_id: int) -> list[int]:
    """Storage ids of the study's RUNNING trials that have no heartbeat row at all."""
    meta = MetaData()
    trials = Table(TRIALS_TABLE, meta, autoload_with=storage.engine)
    beats = Table(HEARTBEATS_TABLE, meta, autoload_with=storage.engine)
    q = (select(trials.c.trial_id).outerjoin(beats, beats.c.trial_id == trials.c.trial_id)
         .where(trials.c.study_id == study_id, trials.c.state == TrialState.RUNNING.name,
                beats.c.trial_id.is_(None)))
    with storage.engine.connect() as conn:
        return [int(tid) for tid in conn.scalars(q)]

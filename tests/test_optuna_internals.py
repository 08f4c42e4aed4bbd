"""The Optuna internals evo relies on (evo/search/internals.py) are still there: when an Optuna
release changes one, this fails naming it, instead of resume and recovery breaking quietly."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from evo.search import internals
from evo.search.study import storage
from evo.store import open_store


@pytest.fixture
def rdb(tmp_path: Path) -> optuna.storages.RDBStorage:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    open_store(url).close()
    return storage(url, heartbeat_s=5, grace_s=10)


def test_enqueue_trial_keeps_the_params_under_fixed_params(rdb: optuna.storages.RDBStorage) -> None:
    study = optuna.create_study(study_name="s", storage=rdb)
    study.enqueue_trial({"family": "tiny"})
    (waiting,) = study.get_trials(states=(TrialState.WAITING,))
    assert internals.FIXED_PARAMS in waiting.system_attrs, "Optuna no longer stores enqueued params as fixed_params"
    assert internals.is_enqueued(waiting) and internals.enqueued_params(waiting) == {"family": "tiny"}


def test_a_sampler_hook_can_set_a_system_attr(rdb: optuna.storages.RDBStorage) -> None:
    study = optuna.create_study(study_name="s", storage=rdb)
    study.ask()
    (frozen,) = study.get_trials()
    assert hasattr(study, "_storage") and hasattr(frozen, "_trial_id"), "Study._storage or FrozenTrial._trial_id went"
    internals.set_trial_system_attr(study, frozen, "evo:test", {"x": 1})
    assert study.get_trials()[0].system_attrs["evo:test"] == {"x": 1}


def test_the_heartbeat_tables_find_a_running_trial_that_never_beat(rdb: optuna.storages.RDBStorage) -> None:
    study = optuna.create_study(study_name="s", storage=rdb)
    sid = rdb.get_study_id_from_name("s")
    silent, beating = study.ask(), study.ask()
    ids = [rdb.get_trial_id_from_study_id_trial_number(sid, t.number) for t in (silent, beating)]
    rdb.record_heartbeat(ids[1])
    assert internals.unbeaten(rdb, sid) == [ids[0]], "Optuna's trials / trial_heartbeats tables changed"
    study.tell(silent, 1.0)
    assert internals.unbeaten(rdb, sid) == []

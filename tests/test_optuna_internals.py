"""The Optuna internals evo relies on (evo/search/internals.py) are still there: when an Optuna
release changes one, this fails naming it, instead of resume and recovery breaking quietly."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from evo.search import internals
from evo.search.study import storage
from evo.store import open_store
from pg_fixture import pg_url  # noqa: F401  (fixture)


@pytest.fixture(params=["sqlite", "postgresql"])
def rdb(request: pytest.FixtureRequest, tmp_path: Path) -> optuna.storages.RDBStorage:
    """Optuna's storage on SQLite and on PostgreSQL (its trial state is an enum there)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{tmp_path / 'evo.sqlite'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
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


def test_beat_records_heartbeats_as_optuna_does(rdb: optuna.storages.RDBStorage) -> None:
    study = optuna.create_study(study_name="s", storage=rdb)
    sid = rdb.get_study_id_from_name("s")
    old, new = study.ask(), study.ask()
    rdb.record_heartbeat(_tid(rdb, old))
    internals.beat(rdb, [_tid(rdb, old), _tid(rdb, new)])  # one moved, one new
    assert internals.unbeaten(rdb, sid) == [], "Optuna's trial_heartbeats table changed"
    assert rdb._get_stale_trial_ids(sid) == []  # fresh beats, at the database's time
    internals.beat(rdb, [])


def _tid(rdb: optuna.storages.RDBStorage, trial: optuna.Trial) -> int:
    return rdb.get_trial_id_from_study_id_trial_number(rdb.get_study_id_from_name("s"), trial.number)


def test_one_write_stores_a_trials_params_and_user_attrs_as_optuna_would(rdb: optuna.storages.RDBStorage) -> None:
    study = optuna.create_study(study_name="s", storage=rdb)
    for _ in range(2):
        study.enqueue_trial({"family": "other", "x": 0.25})
    plain, batched = study.ask(), study.ask()
    for trial in (plain, batched):
        with internals.one_write(trial, rdb, _tid(rdb, trial)) if trial is batched else _nothing():
            trial.suggest_categorical("family", ["tiny", "other"])
            trial.suggest_float("x", 0.0, 1.0)
            trial.set_user_attr("label", "a")
            trial.set_user_attr("label", "b")  # the last value of a key wins
            trial.set_user_attr("speedups", {"F1": 1.5})
    kept = {t.number: t for t in study.get_trials()}
    assert (kept[1].params, kept[1].distributions) == (kept[0].params, kept[0].distributions), \
        "Optuna's trial_params table changed"
    assert kept[1].user_attrs == kept[0].user_attrs == {"label": "b", "speedups": {"F1": 1.5}}, \
        "Optuna's trial_user_attributes table changed"
    assert batched.params == kept[1].params  # the trial object holds them too
    study.tell(batched, 1.0)
    assert study.get_trials()[1].state == TrialState.COMPLETE


def test_one_write_writes_nothing_after_an_error_or_to_a_finished_trial(rdb: optuna.storages.RDBStorage) -> None:
    study = optuna.create_study(study_name="s", storage=rdb)
    broken, failed = study.ask(), study.ask()
    with pytest.raises(RuntimeError), internals.one_write(broken, rdb, _tid(rdb, broken)):
        broken.suggest_categorical("family", ["tiny"])
        raise RuntimeError
    rdb.set_trial_state_values(_tid(rdb, failed), TrialState.FAIL)  # as a survivor fails a stale trial
    with pytest.raises(UpdateFinishedTrialError), internals.one_write(failed, rdb, _tid(rdb, failed)):
        failed.set_user_attr("status", "fast")
    assert [(t.params, t.user_attrs) for t in study.get_trials()] == [({}, {}), ({}, {})]


def test_one_write_all_writes_several_trials_at_once_and_names_the_finished(rdb: optuna.storages.RDBStorage) -> None:
    study = optuna.create_study(study_name="s", storage=rdb)
    a, failed, b = study.ask(), study.ask(), study.ask()
    rdb.set_trial_state_values(_tid(rdb, failed), TrialState.FAIL)  # as a survivor fails a stale trial
    with internals.one_write_all([(t, _tid(rdb, t)) for t in (a, failed, b)], rdb) as lost:
        for i, t in enumerate((a, failed, b)):
            t.suggest_float("x", 0.0, 1.0)
            t.set_user_attr("label", str(i))
    assert lost == [_tid(rdb, failed)]
    kept = study.get_trials()
    assert [(t.params.keys(), t.user_attrs) for t in kept] == [({"x"}, {"label": "0"}), (set(), {}), ({"x"}, {"label": "2"})]
    assert all(t.storage is study._storage for t in (a, failed, b))  # each trial's own storage again


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield


def test_queue_empty_makes_ask_skip_the_queue_and_only_inside(rdb: optuna.storages.RDBStorage) -> None:
    study = optuna.create_study(study_name="s", storage=rdb)
    study.enqueue_trial({"x": 0.5})
    with internals.queue_empty(study):
        fresh = study.ask()
    assert fresh.number == 1, "Study.ask no longer pops through _pop_waiting_trial_id"
    assert study.ask().number == 0  # outside, the queue is read again
    assert not study.get_trials(states=(TrialState.WAITING,))


def test_tell_finishes_a_trial_as_study_tell_does_and_knows_its_storage_id(rdb: optuna.storages.RDBStorage) -> None:
    study = optuna.create_study(study_name="s", storage=rdb)
    done, pruned, screened, nan, failed, read = (study.ask() for _ in range(6))
    assert [internals.trial_id(t) for t in (done, pruned)] == [_tid(rdb, done), _tid(rdb, pruned)], \
        "Trial._trial_id is no longer the storage id"
    internals.tell(study, done, [2.0])
    internals.tell(study, pruned, state=TrialState.PRUNED)
    screened.report(0.5, 0)
    internals.tell(study, screened, state=TrialState.PRUNED)  # as Study.tell: its last reported value
    with pytest.warns(UserWarning, match="nan is not acceptable"):  # as Study.tell: a NaN value fails the trial, with a warning
        internals.tell(study, nan, [float("nan")])
    for t in (failed, read):
        rdb.set_trial_state_values(_tid(rdb, t), TrialState.FAIL)  # as a survivor fails a stale trial
    with pytest.raises(UpdateFinishedTrialError):  # the write checks the state: nothing is written
        internals.tell(study, failed, [1.0])
    assert study.get_trials()[5].state == TrialState.FAIL  # now this process has read it finished
    with pytest.raises(ValueError, match="Cannot tell a FAIL trial"):
        internals.tell(study, read, [1.0])
    kept = study.get_trials()
    assert [(t.state, t.values) for t in kept] == [(TrialState.COMPLETE, [2.0]), (TrialState.PRUNED, None),
                                                   (TrialState.PRUNED, [0.5]), (TrialState.FAIL, None),
                                                   (TrialState.FAIL, None), (TrialState.FAIL, None)]


def _reads(rdb: optuna.storages.RDBStorage, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The trial ids the RDB storage reads one trial of, from now on."""
    reads: list[int] = []
    real = optuna.storages.RDBStorage.get_trial
    monkeypatch.setattr(optuna.storages.RDBStorage, "get_trial", lambda self, tid: reads.append(tid) or real(self, tid))
    return reads


def test_ask_and_tell_do_not_read_the_trial_they_hold(rdb: optuna.storages.RDBStorage,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    study = optuna.create_study(study_name="s", storage=rdb)
    study.enqueue_trial({"x": 0.5})
    reads = _reads(rdb, monkeypatch)
    popped, fresh = internals.ask(study), internals.ask(study)
    assert reads == [internals.trial_id(popped)], "Optuna's cached storage no longer creates or reads through _backend"
    assert internals.enqueued_params(popped._cached_frozen_trial) == {"x": 0.5}  # a popped trial is read
    assert fresh.number == 1
    stored = rdb.get_trial(internals.trial_id(fresh))
    asked = fresh._cached_frozen_trial
    assert (asked.number, asked.state, asked.datetime_start, asked.params, asked.system_attrs) == \
        (stored.number, stored.state, stored.datetime_start, {}, {})
    fresh.suggest_float("x", 0.0, 1.0)
    reads.clear()
    internals.tell(study, fresh, [1.0])
    assert reads == [] and study.get_trials()[1].state == TrialState.COMPLETE
    assert study._storage._backend is rdb  # the storage is itself again
    monkeypatch.setattr(study, "_storage", rdb)  # another kind of storage reads as always
    internals.tell(study, popped, [1.0])
    assert reads == [internals.trial_id(popped)]


def test_mark_sets_a_system_attr_on_running_trials_as_optuna_would(rdb: optuna.storages.RDBStorage) -> None:
    study = optuna.create_study(study_name="s", storage=rdb)
    plain, first, failed = study.ask(), study.ask(), study.ask()
    rdb.set_trial_system_attr(_tid(rdb, plain), "evo:run", "7")
    rdb.set_trial_system_attr(_tid(rdb, first), "evo:run", "6")  # replaced, as Optuna's write replaces it
    rdb.set_trial_state_values(_tid(rdb, failed), TrialState.FAIL)  # as a survivor fails a stale trial
    rdb.set_trial_system_attr(_tid(rdb, plain), "evo:proposal", {"op": "seed"})
    rdb.set_trial_system_attr(_tid(rdb, first), "evo:other", 1)  # a key not written stays
    assert internals.mark(rdb, {_tid(rdb, first): {"evo:run": "7", "evo:proposal": {"op": "seed"}},
                                _tid(rdb, failed): {"evo:run": "7"}}) == [_tid(rdb, failed)]
    kept = study.get_trials()
    assert kept[1].system_attrs == kept[0].system_attrs | {"evo:other": 1} == \
        {"evo:run": "7", "evo:proposal": {"op": "seed"}, "evo:other": 1}, "Optuna's trial_system_attributes table changed"
    assert kept[2].system_attrs == {}
    assert internals.mark(rdb, {}) == []

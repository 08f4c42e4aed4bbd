"""Liveness from Optuna's heartbeat: stale trials are failed and retried, beating ones never; a
run whose lease ran out is failed, a beating one never."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from evo.search.params import IMPORTED_FROM
from evo.search.proposal import RETRY_OF
from evo.search.resume import (ABANDONED, RETRIES, STATUS, Heartbeat, Retry, counted, given_up, recover,
                               release)
from evo.search.study import storage
from evo.store import open_store

pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed")
GRACE_S = 1


@pytest.fixture
def rdb(tmp_path: Path) -> optuna.storages.RDBStorage:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    open_store(url)  # the store sets the file up (WAL) as evo run does
    return storage(url, heartbeat_s=1, grace_s=GRACE_S, retry=Retry(max_retry=2))


@pytest.fixture
def study(rdb: optuna.storages.RDBStorage) -> optuna.Study:
    return optuna.create_study(study_name="r", storage=rdb, direction="maximize")


def running_trial(study: optuna.Study, beat: bool = True) -> optuna.Trial:
    t = study.ask()
    if beat:
        study._storage.record_heartbeat(t._trial_id)
    t.suggest_categorical("family", ["flash_scalar"])
    return t


def stale(seconds: float = GRACE_S + 1.2) -> None:
    """Let heartbeats age past the grace period (the database clock has 1 s resolution)."""
    time.sleep(seconds)


def test_a_trial_whose_heartbeat_stopped_is_failed_and_retried(study, rdb) -> None:
    t = running_trial(study)
    stale()
    (gone,) = recover(study, rdb, rdb.get_heartbeat_stale_trial_callback())
    assert gone.number == t.number and study.trials[t.number].state == TrialState.FAIL
    (retry,) = study.get_trials(states=(TrialState.WAITING,))
    assert retry.user_attrs[RETRY_OF] == t.number and retry.user_attrs[RETRIES] == [t.number]
    assert retry.system_attrs["fixed_params"] == {"family": "flash_scalar"}
    assert given_up(study.trials) == {t.number} and counted(study.trials) == 0


def test_a_retried_import_keeps_its_origin(study, rdb) -> None:
    origin = {"study": "old", "trial": 7, "candidate": "abc"}
    study.enqueue_trial({"family": "flash_scalar"}, user_attrs={IMPORTED_FROM: origin})
    t = running_trial(study)
    assert t.user_attrs[IMPORTED_FROM] == origin
    stale()
    recover(study, rdb, rdb.get_heartbeat_stale_trial_callback())
    (retry,) = study.get_trials(states=(TrialState.WAITING,))
    assert retry.user_attrs[IMPORTED_FROM] == origin and retry.user_attrs[RETRY_OF] == t.number


def test_a_beating_trial_is_never_failed(study, rdb) -> None:
    t = running_trial(study, beat=False)
    beat = Heartbeat(rdb, interval_s=0.5).start()
    beat.add(t._trial_id)
    try:
        stale()
        assert recover(study, rdb, rdb.get_heartbeat_stale_trial_callback()) == []
        assert study.trials[t.number].state == TrialState.RUNNING
    finally:
        beat.stop()


def test_the_heartbeat_keeps_its_run_alive_while_it_holds_no_trial(rdb) -> None:
    with open_store(rdb.url) as store:
        dead, live = (store.start_run("evo run", study="r", lease_s=GRACE_S) for _ in range(2))
        beat = Heartbeat(rdb, interval_s=0.5, renew=functools.partial(store.renew_run, live, GRACE_S)).start()
        try:
            stale()
            assert store.fail_expired_runs() == [dead]
            assert [store.get_run(r).status for r in (dead, live)] == ["failed", "running"]
        finally:
            beat.stop()


def test_a_trial_that_never_beat_gets_a_heartbeat_then_goes_stale(study, rdb) -> None:
    t = running_trial(study, beat=False)  # its worker died between ask and the first beat
    retry = rdb.get_heartbeat_stale_trial_callback()
    assert recover(study, rdb, retry) == []  # adopted: a live owner would have the grace period
    stale()
    assert [x.number for x in recover(study, rdb, retry)] == [t.number]


def test_only_one_recoverer_fails_and_retries_a_stale_trial(study, rdb, tmp_path: Path) -> None:
    other = storage(rdb.url, heartbeat_s=1, grace_s=GRACE_S)  # a second worker on the database
    other_study = optuna.load_study(study_name="r", storage=other)
    running_trial(study)
    stale()
    got = recover(study, rdb, rdb.get_heartbeat_stale_trial_callback()) + \
        recover(other_study, other, other.get_heartbeat_stale_trial_callback())
    assert len(got) == 1 and len(study.get_trials(states=(TrialState.WAITING,))) == 1


def test_a_chain_of_retries_ends_at_max_retry(study, rdb) -> None:
    retry = rdb.get_heartbeat_stale_trial_callback()  # max_retry=2
    running_trial(study)
    for _ in range(2):
        stale()
        recover(study, rdb, retry)
        t = study.ask()  # pops the retry
        study._storage.record_heartbeat(t._trial_id)
    stale()
    recover(study, rdb, retry)
    chains = [x.user_attrs.get(RETRIES) for x in study.trials]
    assert chains == [None, [0], [0, 1]]  # the third failure is not retried
    assert not study.get_trials(states=(TrialState.WAITING, TrialState.RUNNING))
    assert given_up(study.trials) == {0, 1, 2} and counted(study.trials) == 0


def test_a_fail_with_an_outcome_counts_unless_it_was_retried(study, rdb) -> None:
    t = running_trial(study)
    study._storage.set_trial_user_attr(t._trial_id, STATUS, "red")  # told, then the worker died
    stale()
    recover(study, rdb, rdb.get_heartbeat_stale_trial_callback())
    assert counted(study.trials) == 0  # its retry will answer it from the store
    u = running_trial(study)
    study._storage.set_trial_user_attr(u._trial_id, STATUS, "red")
    study.tell(u, state=TrialState.FAIL)
    assert counted(study.trials) == 1


def test_release_gives_up_own_trials_and_requeues_them(study) -> None:
    t = running_trial(study)
    (gone,) = release(study, study._storage, [t._trial_id], "run stopped: KeyboardInterrupt")
    assert gone.user_attrs[STATUS] == ABANDONED and gone.state == TrialState.FAIL
    assert [w.user_attrs[RETRY_OF] for w in study.get_trials(states=(TrialState.WAITING,))] == [t.number]


class _FailingStorage:
    """A storage whose heartbeats fail until ``healthy`` is set."""

    def __init__(self) -> None:
        self.healthy = False
        self.beats: list[int] = []

    def record_heartbeat(self, trial_id: int) -> None:
        if not self.healthy:
            raise RuntimeError("database is locked")
        self.beats.append(trial_id)


def test_failing_heartbeats_are_logged_and_said_until_they_succeed(caplog: pytest.LogCaptureFixture) -> None:
    store = _FailingStorage()
    beat = Heartbeat(store, interval_s=3600)  # no thread: beat() is the thread's step
    store.healthy = True
    beat.add(7)
    store.healthy = False
    assert beat.failing() is None
    with caplog.at_level("WARNING", logger="evo"):
        beat.beat()
        beat.beat()
    assert "2 heartbeat(s) in a row failed (RuntimeError: database is locked)" in (beat.failing() or "")
    assert [r.getMessage() for r in caplog.records][-1] == ("heartbeat for trial 7 failed (2 in a row): "
                                                             "RuntimeError: database is locked")
    store.healthy = True
    beat.beat()
    assert beat.failing() is None and store.beats == [7, 7]

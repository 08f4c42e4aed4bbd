"""Recovery of trials left RUNNING: dead owner on this host, stale heartbeat elsewhere, live owner."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from evo.search.proposal import RETRY_OF
from evo.search.resume import OWNER, Heartbeat, counts, me, recover
from evo.search.study import storage
from evo.store import open_store

pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed")


@pytest.fixture
def study(tmp_path: Path) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    open_store(url)  # the store sets the file up (WAL) as evo run does
    return optuna.create_study(study_name="r", storage=storage(url, heartbeat_s=1, grace_s=1),
                               direction="maximize")


def running_trial(study: optuna.Study, owner: dict | None) -> optuna.Trial:
    t = study.ask()
    t.suggest_categorical("family", ["flash_scalar"])
    if owner is not None:
        t.storage.set_trial_system_attr(t._trial_id, OWNER, owner)
    return t


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_trial_of_a_dead_local_process_is_failed_and_requeued(study: optuna.Study) -> None:
    t = running_trial(study, me() | {"pid": dead_pid()})
    (gone,) = recover(study, grace_s=3600)
    assert gone.number == t.number and gone.user_attrs["status"] == "abandoned"
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert [(w.user_attrs[RETRY_OF], w.system_attrs["fixed_params"]) for w in waiting] == \
        [(t.number, {"family": "flash_scalar"})]
    assert not counts(study.trials[t.number])


def test_a_trial_of_a_live_process_is_left_alone(study: optuna.Study) -> None:
    running_trial(study, me())
    assert recover(study, grace_s=0) == []
    assert [x.state for x in study.trials] == [TrialState.RUNNING]


def test_a_remote_trial_is_failed_once_its_heartbeat_is_stale(study: optuna.Study) -> None:
    t = running_trial(study, {"host": "elsewhere", "pid": 1, "start": ""})
    beat = Heartbeat(study._storage, interval_s=0.2).start()
    beat.add(t._trial_id)
    time.sleep(1.5)
    assert recover(study, grace_s=3600) == []  # still beating
    beat.stop()
    time.sleep(2.2)
    (gone,) = recover(study, grace_s=3600)
    assert gone.number == t.number and gone.state == TrialState.FAIL
    assert [w.user_attrs[RETRY_OF] for w in study.get_trials(states=(TrialState.WAITING,))] == [t.number]


def test_a_trial_killed_before_its_owner_stamp_is_failed_at_once(study: optuna.Study) -> None:
    t = study.ask()  # asked, never stamped, no params: the kill landed in between
    (gone,) = recover(study, grace_s=3600)
    assert gone.number == t.number and gone.user_attrs["status"] == "abandoned"
    assert study.get_trials(states=(TrialState.WAITING,)) == []  # it had proposed nothing

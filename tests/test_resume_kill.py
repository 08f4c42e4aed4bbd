"""SIGKILL an ``evo run`` mid-search, resume it, and check the database is whole (the resumed run
finds the killed trials stale once the grace period has passed, and retries them)."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from evo.search.resume import RUN, counted, given_up
from evo.store import open_store
from synthetic_sweep import make_recording

TRIALS = 16


def evo_run(rec: Path, db: str) -> list[str]:
    return [sys.executable, "-m", "evo", "run", "--replay", str(rec), "--db", db, "--study", "k",
            "--trials", str(TRIALS), "--batch", "2", "--cases", "F1", "--seed", "3", "--heartbeat", "1", "--grace", "2"]


def mid_batch(db: str) -> bool:
    """At least 4 trials complete and trials in flight, every one holding its params (so the kill
    leaves work behind to retry)."""
    try:
        trials = optuna.load_study(study_name="k", storage=db).get_trials(deepcopy=False)
    except KeyError:
        return False
    states = collections.Counter(t.state for t in trials)
    running = [t for t in trials if t.state == TrialState.RUNNING]
    owned = all(RUN in t.system_attrs and t.params for t in running)
    return states[TrialState.COMPLETE] >= 4 and bool(running) and owned


def kill_mid_batch(rec: Path, db: str, env: dict[str, str]) -> list[FrozenTrial]:
    """Start a run, SIGKILL it once trials are in flight; the trials as the kill left them."""
    proc = subprocess.Popen(evo_run(rec, db), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not mid_batch(db) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed: " + proc.stderr.read().decode()[-500:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return optuna.load_study(study_name="k", storage=db).get_trials(deepcopy=False)


def test_sigkill_mid_run_then_resume_leaves_a_consistent_database(tmp_path: Path) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rec = make_recording(tmp_path / "sweep.json.gz", seed=1)
    env = os.environ | {"COLUMNS": "100"}
    for attempt in range(5):  # the poll and the kill race the run: retry until work is left in flight
        db = f"sqlite:///{tmp_path / f'evo{attempt}.sqlite'}"
        killed = kill_mid_batch(rec, db, env)
        left_running = [t.number for t in killed if t.state == TrialState.RUNNING and t.params]
        if left_running:
            break
    done_before = {t.number: t.values for t in killed if t.state == TrialState.COMPLETE}
    assert 4 <= len(done_before) < TRIALS and left_running

    out = subprocess.run(evo_run(rec, db), env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]

    trials = optuna.load_study(study_name="k", storage=db).get_trials(deepcopy=False)
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert done_before == {t.number: t.values for t in trials if t.number in done_before}
    by_number = {t.number: t for t in trials}
    gone = given_up(trials)
    for n in left_running:  # failed by the heartbeat check, given up, and retried
        assert by_number[n].state == TrialState.FAIL and n in gone
        assert any(t.user_attrs.get("evo:retries", [None])[-1] == n for t in trials)
    assert counted(trials) == TRIALS
    kept = [t for t in trials if t.state.is_finished() and t.number not in gone]
    keys = collections.Counter(tuple(sorted(t.params.items())) for t in kept)
    assert max(keys.values()) == 1  # the evo sampler never repeats a candidate
    store = open_store(db)
    for t in trials:
        cid = t.user_attrs.get("candidate")
        if cid is not None:
            assert len(store.evaluations(cid)) <= 1  # evaluated once, even when retried
            rows = [x for x in store.get(cid).trials if x.study == "k" and x.number == t.number]
            assert [x.state for x in rows] == [t.state.name]

"""SIGKILL an ``evo run`` mid-search, resume it, and check the database is whole (the resumed run
finds the killed trials stale once the grace period has passed, retries them, and the killed
run ends failed). The run is killed where tests/fixtures/paced_evo.py stops it, in an evaluation
with earlier trials complete, not wherever a poll of the database raced it to."""

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
STORED = 6  # evaluations the killed run stores and tells before it stops in the next one
PACED = Path(__file__).parent / "fixtures" / "paced_evo.py"
ENV = os.environ | {"COLUMNS": "100"}


def evo_run(rec: Path, db: str) -> list[str]:
    """``evo run`` arguments (after the program) of both the killed and the resumed run."""
    return ["run", "--replay", str(rec), "--db", db, "--study", "k", "--trials", str(TRIALS), "--batch", "2",
            "--cases", "F1", "--seed", "3", "--heartbeat", "1", "--grace", "2"]


def kill_mid_trial(rec: Path, db: str, tmp: Path) -> list[FrozenTrial]:
    """Start a run that stops in its evaluation after the first :data:`STORED`, SIGKILL it
    there; the trials as the kill left them."""
    stopped, log = tmp / "stopped", tmp / "killed.log"
    hang = {"EVO_TEST_HANG": "mid-trial", "EVO_TEST_HANG_AFTER": str(STORED), "EVO_TEST_HANG_FILE": str(stopped),
            "EVO_TEST_PACE_S": "0"}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, str(PACED), *evo_run(rec, db)], env=ENV | hang, stdout=out,
                                stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while not stopped.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        assert stopped.exists() and proc.poll() is None, "the run ended before it got where it is killed: " + \
            log.read_text()[-2000:]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return optuna.load_study(study_name="k", storage=db).get_trials(deepcopy=False)


def test_sigkill_mid_run_then_resume_leaves_a_consistent_database(tmp_path: Path) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rec = make_recording(tmp_path / "sweep.json.gz", seed=1)
    db = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    killed = kill_mid_trial(rec, db, tmp_path)
    left_running = [t.number for t in killed if t.state == TrialState.RUNNING and t.params]
    done_before = {t.number: t.values for t in killed if t.state == TrialState.COMPLETE}
    assert 4 <= len(done_before) < TRIALS and left_running
    (killed_run,) = {int(t.system_attrs[RUN]) for t in killed if t.number in left_running}

    out = subprocess.run([sys.executable, "-m", "evo", *evo_run(rec, db)], env=ENV, capture_output=True, text=True,
                         timeout=300)
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
    run = store.get_run(killed_run)
    assert run is not None and run.status == "failed"  # by the resumed run: its trial went stale, its lease ran out
    for t in trials:
        cid = t.user_attrs.get("candidate")
        if cid is not None:
            assert len(store.evaluations(cid)) <= 1  # evaluated once, even when retried
            rows = [x for x in store.get(cid).trials if x.study == "k" and x.number == t.number]
            assert [x.state for x in rows] == [t.state.name]

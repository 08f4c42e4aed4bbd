"""Many ``evo run`` workers on one study (replay, no GPU): four on PostgreSQL, two on SQLite.

One worker is SIGKILLed mid-search at a point the test chooses, where tests/fixtures/paced_evo.py
stops it: with a candidate in flight, or between two trials holding none. The study must still
end with exactly ``--trials`` counted trials, every trial recorded once in Optuna and once in the
store with the same state, every candidate evaluated at most once, the lineage consistent, the
killed worker's trials retried to completion by another worker, its run failed, and the other
workers undisturbed. A killed worker that held a trial has its run failed by the survivor that
fails the trial; one that held none, once its run's lease has passed: by a survivor if one is
still running then, else by the next command on the study (here, one more ``evo run``).
Replayed evaluations are paced, as a GPU's would take time.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy import select

from evo.search.resume import RETRIES, RUN, STATUS, counted, given_up
from evo.search.study import storage
from evo.store import open_store
from evo.store.engine import schema_lock
from evo.store.models import Run, Trial
from pg_fixture import pg_url  # noqa: F401  (fixture)
from synthetic_sweep import make_recording

TRIALS = 24
GRACE_S = 5
PACED = Path(__file__).parent / "fixtures" / "paced_evo.py"
KILL_AT = ["mid-trial", "between-trials"]  # where the victim is stopped and killed (paced_evo.py)


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return make_recording(tmp_path_factory.mktemp("rec") / "sweep.json.gz", seed=1)


def start_worker(rec: Path, db: str, study: str, seed: int, log: Path, hang: dict[str, str] | None = None
                 ) -> subprocess.Popen:
    """One paced worker; ``hang``: the environment that stops it somewhere (paced_evo.py)."""
    argv = [sys.executable, str(PACED), "run", "--replay", str(rec), "--db", db, "--study", study,
            "--trials", str(TRIALS), "--batch", "2", "--cases", "F1", "--seed", str(seed),
            "--heartbeat", "1", "--grace", str(GRACE_S)]
    return subprocess.Popen(argv, env=os.environ | {"COLUMNS": "120"} | (hang or {}), stdout=log.open("w"),
                            stderr=subprocess.STDOUT)


class Reader:
    """Reads the study and the store the way a worker opens them (under the schema lock)."""

    def __init__(self, db: str, study: str) -> None:
        self.db, self.study = db, study
        self.rdb: optuna.storages.RDBStorage | None = None

    def trials(self) -> list[FrozenTrial]:
        if self.rdb is None:
            with schema_lock(self.db):
                self.rdb = storage(self.db)
        try:
            sid = self.rdb.get_study_id_from_name(self.study)
        except KeyError:
            return []
        return self.rdb.get_all_trials(sid, deepcopy=False)

    def run_status(self, run: int) -> str:
        with open_store(self.db) as store:
            view = store.get_run(run)
        assert view is not None
        return view.status

    def run_of(self, pid: int) -> int | None:
        with open_store(self.db) as store, store._read() as s:
            for run in s.scalars(select(Run)):
                if run.device.get("pid") == pid:
                    return run.id
        return None


def kill_stopped(reader: Reader, victim: subprocess.Popen, stopped: Path) -> tuple[int, list[FrozenTrial]]:
    """SIGKILL ``victim`` once it has stopped where it was told to (it creates ``stopped``);
    returns its run id and its trials the kill left RUNNING."""
    deadline = time.monotonic() + 120
    while not stopped.exists() and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stopped.exists() and victim.poll() is None, "the victim ended before it got where it is killed"
    run = reader.run_of(victim.pid)
    assert run is not None
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    return run, [t for t in reader.trials() if t.state == TrialState.RUNNING and t.system_attrs.get(RUN) == str(run)]


def run_study(rec: Path, db: str, study: str, workers: int, logs: Path, kill_at: str
              ) -> tuple[int, list[FrozenTrial], str, list[int], list[Path]]:
    """Start the workers, kill the first at ``kill_at``, wait for the rest (all must exit 0).
    A worker killed between trials leaves the survivors nothing to wait for, so its run may
    outlive them: then the next command on the study runs too, once the run's lease has surely
    passed. Returns the killed run, its trials the kill left RUNNING, its status when the
    survivors were done, and the pids and logs of every other worker."""
    paths = [logs / f"{study}-worker{i}.log" for i in range(workers)]
    stopped = logs / f"{study}-stopped"
    hang = {"EVO_TEST_HANG": kill_at, "EVO_TEST_HANG_FILE": str(stopped)}
    procs = [start_worker(rec, db, study, seed, log, hang if seed == 0 else None) for seed, log in enumerate(paths)]
    reader = Reader(db, study)
    try:
        run, left = kill_stopped(reader, procs[0], stopped)
        killed = time.monotonic()
        for p, log in zip(procs[1:], paths[1:], strict=True):
            assert p.wait(timeout=240) == 0, log.read_text()[-3000:]
        status = reader.run_status(run)
        if kill_at == "between-trials":
            time.sleep(max(0.0, killed + GRACE_S + 1 - time.monotonic()))
            paths.append(logs / f"{study}-next.log")
            procs.append(start_worker(rec, db, study, workers, paths[-1]))
            assert procs[-1].wait(timeout=120) == 0, paths[-1].read_text()[-3000:]
            assert f"reached {TRIALS} trials" in paths[-1].read_text()  # the study was done
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return run, left, status, [p.pid for p in procs[1:]], paths[1:]


def check_study(db: str, study: str, victim_run: int, left: list[FrozenTrial], survivors: list[int],
                logs: list[Path]) -> None:
    trials = Reader(db, study).trials()
    by_number = {t.number: t for t in trials}
    assert all(t.state.is_finished() for t in trials)
    assert counted(trials) == TRIALS

    store = open_store(db)
    with store._read() as s:
        runs = {r.id: r for r in s.scalars(select(Run).where(Run.study == study))}
        rows = list(s.scalars(select(Trial).where(Trial.study == study)))
    survivor_runs = {rid for rid, r in runs.items() if r.device.get("pid") in survivors}
    assert len(survivor_runs) == len(survivors) and all(runs[r].status == "done" for r in survivor_runs)
    assert runs[victim_run].status == "failed"  # by a survivor or the next command, whether or not it held a trial

    # every trial recorded exactly once, in Optuna and in the store, with the same state
    assert sorted(r.trial_number for r in rows) == sorted(by_number)
    for r in rows:
        t = by_number[r.trial_number]
        assert (r.state, r.candidate_id) == (t.state.name, t.user_attrs.get("candidate"))

    # the killed worker's trials: failed, not counted, retried once and finished by a survivor
    gone = given_up(trials)
    retries = collections.defaultdict(list)
    for t in trials:
        if t.user_attrs.get(RETRIES):
            retries[t.user_attrs[RETRIES][-1]].append(t)
    for t in left:
        assert by_number[t.number].state == TrialState.FAIL and t.number in gone
        if t.params:
            (retry,) = retries[t.number]
            assert retry.number not in gone and STATUS in retry.user_attrs
            assert int(retry.system_attrs[RUN]) in survivor_runs

    # each candidate evaluated once (the claim), tagged with the worker that measured it
    pids = set()
    for cid in {t.user_attrs["candidate"] for t in trials if "candidate" in t.user_attrs}:
        evs = store.evaluations(cid)
        assert len(evs) <= 1, cid
        pids |= {int(e.device_info["pid"]) for e in evs}
    assert pids and pids <= {r.device.get("pid") for r in runs.values()}

    # lineage: edges between candidates of the study, each child's edges written by one worker at once
    in_study = {t.user_attrs["candidate"] for t in trials if "candidate" in t.user_attrs}
    edges = store.edges(study=study)
    assert edges
    per_child = collections.defaultdict(set)
    for e in edges:
        assert e.parent_id in in_study and e.child_id in in_study and e.parent_id != e.child_id
        per_child[e.child_id].add(e.run_id)
    assert all(len(r) == 1 for r in per_child.values()), [(e.child_id[:8], e.parent_id[:8], e.kind, e.run_id, e.created) for e in edges if len(per_child[e.child_id]) > 1]

    # the survivors were never disturbed: none of their trials was failed under them
    for log in logs:
        assert "failed as stale" not in log.read_text()
    store.close()


def killed_at(rec: Path, db: str, workers: int, logs: Path, kill_at: str) -> None:
    """Run a study with a worker killed at ``kill_at``, and check it."""
    run, left, status, others, paths = run_study(rec, db, "k", workers, logs, kill_at)
    if kill_at == "mid-trial":  # a candidate in flight: a survivor fails and retries it, and fails the run
        assert any(t.params for t in left) and status == "failed"
    else:  # nothing to retry; the run is failed once its lease has passed, by whoever looks then
        assert left == [] and status in ("running", "failed")
    check_study(db, "k", run, left, others, paths)


@pytest.mark.parametrize("kill_at", KILL_AT)
def test_four_workers_on_postgresql_one_killed(pg_url: str, recording: Path, tmp_path: Path,  # noqa: F811
                                               kill_at: str) -> None:
    killed_at(recording, pg_url, 4, tmp_path, kill_at)


@pytest.mark.parametrize("kill_at", KILL_AT)
def test_two_workers_on_sqlite_one_killed(recording: Path, tmp_path: Path, kill_at: str) -> None:
    killed_at(recording, f"sqlite:///{tmp_path / 'evo.sqlite'}", 2, tmp_path, kill_at)

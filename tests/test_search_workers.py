"""One worker among several: a claim is taken over only from a trial that is no longer running
(a holder in another study has its heartbeat checked here: that study may have no worker left),
a trial failed as stale under a live worker is noted, not a crash, and counted once (lost, not
also recovered), a trial answered after waiting for another worker is counted once, the run of
a worker that died holding no trial is failed once its lease has passed, and a dead worker's
trials and run are failed while a live worker is in the middle of a batch."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy import select

from evo.family.manifest import load_family
from evo.store.recording import load_recording
from evo.results import Evaluation
from evo.search.evaluators import Job, ReplayEvaluator, Unmeasured
from evo.search.loop import Outcome, Pending, Search, ask_batch, describe
from evo.search.resume import RUN, Retry
from evo.search.sampler_evo import EvoSampler
from evo.search.study import storage
from evo.store import open_store
from evo.store.models import Trial
from evo.gpu.suites import fast_cases
from synthetic_sweep import make_recording

pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed")
BID = "c" * 64


@pytest.fixture
def setup(tmp_path: Path):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    store = open_store(url)
    retry = Retry()
    rdb = storage(url, heartbeat_s=1, grace_s=1, retry=retry)
    ev = ReplayEvaluator(load_recording(make_recording(tmp_path / "rec.json.gz")))
    study = optuna.create_study(study_name="b", storage=rdb, direction="maximize")
    search = Search(study, store, ev, [load_family("flash_mma")], fast_cases()[:1], "sdpa_default", "geomean",
                    store.start_run("evo run", study="b"), storage=rdb, retry=retry)
    yield search, rdb, store
    store.close()


def holder_in(rdb, store, study_name: str, device: str) -> optuna.Trial:
    other = optuna.create_study(study_name=study_name, storage=rdb, direction="maximize", load_if_exists=True)
    t = other.ask()
    rdb.record_heartbeat(t._trial_id)
    assert store.claim(BID, device, t._trial_id, study_name, t.number) == (t._trial_id, study_name)
    return t


def asked(search: Search) -> Pending:
    """A trial of the search's study, asked as the search asks one (without drawing a candidate)."""
    t = search.study.ask()
    return Pending(t, t._trial_id, load_family("flash_mma"), {})


def test_a_running_holder_keeps_its_claim(setup) -> None:
    search, rdb, store = setup
    holder = holder_in(rdb, store, "b", search.evaluator.device)
    assert not search._claim(BID, asked(search))
    search.study.tell(holder, state=TrialState.FAIL)  # finished: the claim is free to take over
    mine = asked(search)
    assert search._claim(BID, mine) and store.claim(BID, search.evaluator.device, 0, "b", 0) == (mine.trial_id, "b")


def test_a_dead_holder_in_another_study_is_failed_here_and_its_claim_taken(setup) -> None:
    search, rdb, store = setup
    holder = holder_in(rdb, store, "a", search.evaluator.device)  # its worker died; nobody runs study a
    mine = asked(search)
    assert not search._claim(BID, mine)  # still within the grace period
    time.sleep(2.3)
    assert search._claim(BID, mine)
    assert rdb.get_trial(holder._trial_id).state == TrialState.FAIL
    with store._read() as s:  # and marked FAIL in the store, under its own study
        row = s.scalars(select(Trial).where(Trial.study == "a", Trial.trial_number == holder.number)).one()
    assert row.state == "FAIL"
    assert search.study.get_trials(states=(TrialState.FAIL,)) == []  # no trial of this study was touched


def test_a_batch_takes_its_lineage_from_the_study_its_asks_saw(setup) -> None:
    """describe reads no study where ask_batch gives the view its asks saw, and finds the same
    parents as from a read (the batch's new trials there hold their proposals)."""
    search, rdb, store = setup
    search.study.sampler = EvoSampler([load_family("flash_mma")], seed=0)
    asked_, _, view = ask_batch(search, 8)  # a batch told, for parents to come from
    search._complete(search._prepare(*describe(asked_, search, view)))
    asked_, _, view = ask_batch(search, 16)
    assert view is not None and [t.number for t in view] == list(range(16))
    reads = []
    real = search.study.get_trials
    search.study.get_trials = lambda **kw: reads.append(1) or real(**kw)  # type: ignore[method-assign]
    pending, seen = describe(asked_, search, view)
    assert reads == [] and seen == view
    again, _ = describe(asked_, search)  # the same trials, lineage from a read of the study
    assert reads == [1]
    assert [p.parents for p in pending] == [p.parents for p in again] and any(p.parents for p in pending)


@pytest.mark.parametrize("when", ["before the outcome", "before tell"])
def test_a_trial_failed_as_stale_under_its_worker_is_noted_not_a_crash(setup, when: str) -> None:
    search, rdb, store = setup
    notes: list[str] = []
    search.reporter.note = notes.append  # type: ignore[method-assign]
    [p], _ = describe(ask_batch(search, 1)[0], search)
    stale = lambda *_: rdb.set_trial_state_values(p.trial._trial_id, TrialState.FAIL)  # noqa: E731
    if when == "before the outcome":  # another worker found it stale
        stale()
    else:  # ... while this one was writing the store's row
        record = store.record_trial

        def record_then_go_stale(*args: object) -> None:
            record(*args)
            search.store.record_trial = record  # type: ignore[method-assign]
            stale()

        search.store.record_trial = record_then_go_stale  # type: ignore[method-assign]
    search._finish(p, Outcome("fast", values=[1.2]))
    assert search.summary.lost == 1 and search.summary.finished == 0
    assert len(notes) == 1 and "failed as stale by another worker" in notes[0]
    with store._read() as s:
        row = s.scalars(select(Trial).where(Trial.study == "b", Trial.trial_number == p.trial.number)).one()
    assert row.state == "FAIL"


def test_a_worker_that_died_holding_no_trial_has_its_run_failed_after_the_grace_period(setup) -> None:
    search, rdb, store = setup
    notes: list[str] = []
    search.reporter.note = notes.append  # type: ignore[method-assign]
    dead = store.start_run("evo run", study="b", lease_s=1)  # as evo run starts one; killed between trials
    search._recover()
    assert store.get_run(dead).status == "running" and notes == []  # within the grace period
    time.sleep(2.3)  # the database clock has 1 s resolution
    search._recover()
    assert store.get_run(dead).status == "failed"
    assert notes == [f"marked run {dead} failed: its worker's heartbeat stopped"]
    assert search.study.get_trials() == []  # it left nothing to retry
    search._recover()
    assert len(notes) == 1  # failed once


def test_each_trial_told_is_counted_once_however_it_was_answered(setup) -> None:
    """The summary's status rows add up to the trials told, and each told trial was measured
    here, answered from the store at once, or answered once another worker had measured it:
    one of the three (a trial waited for used to count as answered from the store as well)."""
    search, rdb, store = setup
    search.poll_s = 0
    measured, reused, waited = asked(search), asked(search), asked(search)
    search._finish(measured, Outcome("fast", values=[1.0]))
    search._finish(reused, Outcome("red", "wrong", reused=True))
    search.scoring.reuse = lambda known: Outcome("fast", values=[1.2], reused=True)  # type: ignore[method-assign]
    search._await({BID: [waited]})  # the other worker's measurement is in the store by the first look
    s = search.summary
    assert s.finished == sum(s.counts.values()) == 3 and s.counts == {"fast": 2, "red": 1}
    assert (s.reused, s.waited, s.finished - s.reused - s.waited) == (1, 1, 1)
    assert rdb.get_trial(waited.trial_id).user_attrs["reused"] is True  # the trial itself says it was not measured


def test_a_trial_of_this_worker_failed_by_its_own_check_is_lost_not_also_recovered(setup) -> None:
    search, rdb, store = setup
    [p], _ = describe(ask_batch(search, 1)[0], search)  # one heartbeat; this worker's beats then stall (no heartbeat thread here)
    time.sleep(2.3)    # past the 1 s grace period (the database clock has 1 s resolution)
    search._recover()  # this worker's own check finds its trial stale
    assert rdb.get_trial(p.trial_id).state == TrialState.FAIL
    search._finish(p, Outcome("fast", values=[1.2]))
    s = search.summary
    assert (s.lost, s.recovered, s.finished) == (1, 0, 0)
    assert store.get_run(search.run_id).status == "running"  # a live worker does not fail its own run


class Held(ReplayEvaluator):
    """Holds the first evaluation it starts until the test lets it go, so that its worker stays
    inside one batch."""

    def __init__(self, recording: Path) -> None:
        super().__init__(load_recording(recording))
        self.inside, self.go = threading.Event(), threading.Event()
        self.started = 0

    def evaluate(self, jobs: Iterable[Job]) -> Iterator[Evaluation | Unmeasured]:
        for job in jobs:
            self.started += 1
            self.inside.set()
            assert self.go.wait(timeout=300)
            yield from super().evaluate([job])


class Notes:
    """A reporter that keeps the notes, and the thread each reporter call came from."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.threads: set[str] = set()

    def start(self, total: int, done: int) -> None:
        self.threads.add(threading.current_thread().name)

    def advance(self, number: int, outcome: Outcome, best: object) -> None:
        self.threads.add(threading.current_thread().name)

    def note(self, text: str) -> None:
        self.threads.add(threading.current_thread().name)
        self.notes.append(text)


def test_a_dead_workers_trials_and_run_are_failed_while_a_live_worker_is_inside_a_batch(tmp_path: Path) -> None:
    """The liveness check runs on its own schedule, not only before a batch: a worker killed
    after one heartbeat, and one of its trials that never got one (killed in between), are
    failed, mirrored in the store and its run failed while the live worker is still evaluating
    the first candidate of its batch. The live worker's own trial, beaten all along, is left
    alone, and what was found is said on the worker's thread."""
    heartbeat_s, grace_s = 1, 2
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    store, retry = open_store(url), Retry()
    rdb = storage(url, heartbeat_s=heartbeat_s, grace_s=grace_s, retry=retry)
    study = optuna.create_study(study_name="b", storage=rdb, direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=0))
    ev, reporter = Held(make_recording(tmp_path / "rec.json.gz", drop=0.0)), Notes()
    search = Search(study, store, ev, [load_family("flash_mma")], fast_cases()[:1], "sdpa_default", "geomean",
                    store.start_run("evo run", study="b", lease_s=grace_s), storage=rdb, retry=retry, batch=1,
                    reporter=reporter)
    worker = threading.Thread(target=search.run, args=(3,), name="worker")
    worker.start()
    try:
        assert ev.inside.wait(timeout=120), "the live worker never started an evaluation"
        dead_run = store.start_run("evo run", study="b", lease_s=grace_s)
        dead = optuna.load_study(study_name="b", storage=rdb)
        beaten, unbeaten = dead.ask(), dead.ask()
        for t in (beaten, unbeaten):
            rdb.set_trial_system_attr(t._trial_id, RUN, str(dead_run))
        rdb.record_heartbeat(beaten._trial_id)  # ... and then the worker was killed
        def rows() -> dict[int, tuple[str, int | None]]:
            with store._read() as s:
                return {r.trial_number: (r.state, r.run_id) for r in s.scalars(select(Trial).where(Trial.study == "b"))}

        # until the sweep has mirrored both trials too: it fails them in Optuna first, and the run
        # may be failed (its lease, or the first trial's mirror) before the second trial's row is written
        deadline = time.monotonic() + 20 * (grace_s + heartbeat_s)
        while time.monotonic() < deadline and not (
                rdb.get_trial(beaten._trial_id).state == rdb.get_trial(unbeaten._trial_id).state == TrialState.FAIL
                and store.get_run(dead_run).status == "failed" and {beaten.number, unbeaten.number} <= rows().keys()):
            time.sleep(0.1)
        assert ev.started == 1 and not ev.go.is_set()  # still inside the live worker's first evaluation
        assert rdb.get_trial(beaten._trial_id).state == rdb.get_trial(unbeaten._trial_id).state == TrialState.FAIL
        assert store.get_run(dead_run).status == "failed"
        mirrored = rows()
        assert mirrored.get(beaten.number) == mirrored.get(unbeaten.number) == ("FAIL", dead_run)
        (own,) = [t for t in search.study.get_trials() if t.number not in (beaten.number, unbeaten.number)
                  and not t.state.is_finished()]
        assert own.state == TrialState.RUNNING  # the one being evaluated, beaten by its worker all along
    finally:
        ev.go.set()
        worker.join(timeout=300)
    assert not worker.is_alive()
    s = search.summary
    assert (s.recovered, s.lost) == (2, 0) and s.total == 3
    assert "re-queued 2 trial(s) of a worker whose heartbeat stopped" in reporter.notes or (
        reporter.notes.count("re-queued 1 trial(s) of a worker whose heartbeat stopped") == 2)
    assert reporter.threads == {"worker"}
    store.close()

"""Finding dead workers from a live one: their stale trials failed and retried, their runs failed.

A sweep runs Optuna's heartbeat check on the study (:func:`~evo.search.resume.recover`: stale
trials failed, their candidates enqueued again), mirrors every trial it failed into evo's store
(FAIL, and the dead worker's run ``failed`` at once), and fails the runs whose lease ran out,
so that a worker that died holding no trial is found too.

Sweeps run on a thread of their own every half heartbeat interval (:meth:`Liveness.start`),
whatever the worker is doing (building a batch, evaluating, waiting), and once more before each
batch (:meth:`Liveness.check`). A dead worker's trials are failed by the first sweep of any
live worker once the grace period has passed since their last beat: within the grace period
and half a heartbeat interval of its death (plus the database clock's resolution, SQLite's 1 s).
A trial it asked for but never beat for (killed in between) gets its first beat from a sweep,
so it is failed within the grace period and one heartbeat interval. What a sweep on the thread
finds is said, and counted in the summary, on the worker's own thread
(:meth:`Liveness.report`), so a :class:`~evo.search.records.Reporter` is only ever called from
there.

Trials given up by this worker itself (Ctrl-C, a spent time budget) are mirrored the same way
(:meth:`Liveness.mirror`), without touching its run. A trial of this worker that a sweep fails
(its own heartbeats stalled past the grace period) is counted where its tell fails, as lost,
not as recovered.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import optuna
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from evo.search.params import CANDIDATE
from evo.search.records import Reporter, RunSummary
from evo.search.resume import RUN, Heartbeat, Retry, recover

log = logging.getLogger("evo")


class Liveness:
    """One worker's view of the other workers' liveness on ``study`` (see the module docstring);
    ``run_id`` is this worker's run, ``period_s`` the time between two sweeps of its thread."""

    def __init__(self, study: optuna.Study, storage: RDBStorage, retry: Retry, store: Any, run_id: Any,
                 heartbeat: Heartbeat, summary: RunSummary, reporter: Reporter, period_s: float,
                 ask_lock: AbstractContextManager[Any] | None = None) -> None:
        self.study, self.rdb, self.retry, self.store, self.run_id = study, storage, retry, store, run_id
        self.ask_lock = ask_lock or contextlib.nullcontext()
        self.heartbeat, self.summary, self.reporter, self.period_s = heartbeat, summary, reporter, period_s
        self._lock = threading.Lock()
        self._notes: list[str] = []      # found by sweeps, not reported yet
        self._recovered = 0              # other workers' trials failed by sweeps, not counted yet
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="evo-liveness", daemon=True)

    def start(self) -> None:
        """Sweep every ``period_s`` on a thread of its own until :meth:`stop`."""
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def check(self) -> None:
        """A sweep now, on this thread, then :meth:`report`; first, say so when this worker's own
        heartbeats are failing."""
        if (why := self.heartbeat.failing()) is not None:
            self.reporter.note(why)
        self._sweep()
        self.report()

    def report(self) -> None:
        """Say what sweeps found since the last report and count the trials they recovered."""
        with self._lock:
            notes, recovered = self._notes, self._recovered
            self._notes, self._recovered = [], 0
        self.summary.recovered += recovered
        for text in notes:
            self.reporter.note(text)

    def check_study(self, name: str) -> None:
        """The heartbeat check on another study (one whose trial holds a claim this worker wants:
        that study's workers may all be gone)."""
        other = optuna.load_study(study_name=name, storage=self.rdb)
        self.mirror(self._recover(other), dead_runs=True, study=name)

    def mirror(self, abandoned: Sequence[FrozenTrial], dead_runs: bool, study: str | None = None) -> int:
        """Mark given-up trials (of this study, or of ``study``) FAIL in the store too, and, for
        a dead worker (not this one), its run failed; returns how many."""
        for t in abandoned:
            run_id = _run_of(t)
            self.store.record_trial(study or self.study.study_name, t.number, t.user_attrs.get(CANDIDATE), run_id,
                                    TrialState.FAIL.name, None)
            # also fail_expired_runs' job, but the lease can end a sweep later (renewed after the trial's beat)
            if dead_runs and run_id is not None and run_id != self.run_id \
                    and (view := self.store.get_run(run_id)) and view.status == "running":
                self.store.finish_run(run_id, "failed")
        return len(abandoned)

    def _watch(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self._sweep()
            except Exception as exc:  # noqa: BLE001 - any storage error: logged, tried again next period
                log.warning("liveness check failed (tried again in %g s): %s: %s", self.period_s,
                            type(exc).__name__, exc)

    def _sweep(self) -> None:
        """Fail the study's stale trials and mirror them, then the runs whose lease ran out;
        keep what was found for :meth:`report`."""
        failed = self._recover(self.study)
        self.mirror(failed, dead_runs=True)
        expired = self.store.fail_expired_runs()
        others = sum(_run_of(t) != self.run_id for t in failed)
        with self._lock:
            self._recovered += others
            if others:
                self._notes.append(f"re-queued {others} trial(s) of a worker whose heartbeat stopped")
            self._notes += [f"marked run {r} failed: its worker's heartbeat stopped" for r in expired]

    def _recover(self, study: optuna.Study) -> list[FrozenTrial]:
        """:func:`~evo.search.resume.recover` on ``study`` under the ask lock: a stale trial is
        failed and its retry enqueued in two steps, and between them another worker's batch saw a
        slot free that the retry then filled as well, so the study reached its trials with the
        retry left WAITING (four workers on PostgreSQL, one killed mid-trial, on a loaded host:
        1 run in 5)."""
        with self.ask_lock:
            return recover(study, self.rdb, self.retry)


def _run_of(t: FrozenTrial) -> int | None:
    """The run that asked for trial ``t`` (its ``evo:run`` system attr), if it says."""
    run = t.system_attrs.get(RUN)
    return int(run) if run is not None and str(run).isdigit() else None

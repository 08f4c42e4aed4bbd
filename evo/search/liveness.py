"""Finding dead workers from a live one: their stale trials failed and retried, their runs failed.

A check (:meth:`Liveness.check`) runs Optuna's heartbeat check on the study
(:func:`~evo.search.resume.recover`: stale trials failed, their candidates enqueued again),
mirrors every trial it failed into evo's store (FAIL, and the dead worker's run ``failed``),
and fails the runs whose lease ran out, so that a worker that died holding no trial is found
too. A trial given up by this worker itself (Ctrl-C, a spent time budget) is mirrored the same
way, without touching its run. A trial of this worker that its own check fails (its heartbeats
stalled past the grace period) is counted where its tell fails, as lost, not as recovered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optuna
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from evo.search.params import CANDIDATE
from evo.search.records import Reporter, RunSummary
from evo.search.resume import RUN, Heartbeat, Retry, recover


class Liveness:
    """One worker's view of the other workers' liveness on ``study`` (see the module docstring);
    ``run_id`` is this worker's run."""

    def __init__(self, study: optuna.Study, storage: RDBStorage, retry: Retry, store: Any, run_id: Any,
                 heartbeat: Heartbeat, summary: RunSummary, reporter: Reporter) -> None:
        self.study, self.rdb, self.retry, self.store, self.run_id = study, storage, retry, store, run_id
        self.heartbeat, self.summary, self.reporter = heartbeat, summary, reporter

    def check(self) -> None:
        """Fail stale trials of dead workers and re-queue them (Optuna's heartbeat check), then
        the runs whose lease ran out (a worker that died holding no trial has no stale trial to
        give it away); say so when this worker's own heartbeats are failing."""
        if (why := self.heartbeat.failing()) is not None:
            self.reporter.note(why)
        failed = recover(self.study, self.rdb, self.retry)
        self.mirror(failed, dead_runs=True)
        others = sum(_run_of(t) != self.run_id for t in failed)
        if others:
            self.summary.recovered += others
            self.reporter.note(f"re-queued {others} trial(s) of a worker whose heartbeat stopped")
        for run_id in self.store.fail_expired_runs():
            self.reporter.note(f"marked run {run_id} failed: its worker's heartbeat stopped")

    def check_study(self, name: str) -> None:
        """The heartbeat check on another study (one whose trial holds a claim this worker wants:
        that study's workers may all be gone)."""
        other = optuna.load_study(study_name=name, storage=self.rdb)
        self.mirror(recover(other, self.rdb, self.retry), dead_runs=True, study=name)

    def mirror(self, abandoned: Sequence[FrozenTrial], dead_runs: bool, study: str | None = None) -> int:
        """Mark given-up trials (of this study, or of ``study``) FAIL in the store too, and, for
        a dead worker (not this one), its run failed; returns how many."""
        for t in abandoned:
            run_id = _run_of(t)
            self.store.record_trial(study or self.study.study_name, t.number, t.user_attrs.get(CANDIDATE), run_id,
                                    TrialState.FAIL.name, None)
            # also fail_expired_runs' job, but the lease can end a check later (renewed after the trial's beat)
            if dead_runs and run_id is not None and run_id != self.run_id \
                    and (view := self.store.get_run(run_id)) and view.status == "running":
                self.store.finish_run(run_id, "failed")
        return len(abandoned)


def _run_of(t: FrozenTrial) -> int | None:
    """The run that asked for trial ``t`` (its ``evo:run`` system attr), if it says."""
    run = t.system_attrs.get(RUN)
    return int(run) if run is not None and str(run).isdigit() else None

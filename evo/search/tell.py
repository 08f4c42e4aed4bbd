"""Telling a trial its outcome: lineage edges, the trial's user attrs, the store's row, then Optuna.

The order matters for a worker that dies half way: the store's trial row is written before
``tell``, so a trial the heartbeat check later fails is FAIL in both (the worker that fails it
mirrors it in the store). A trial whose candidate the pruner stopped after its screen is told
PRUNED (Optuna's state for it), with no value in the store: a screen never ranks a candidate. A trial that another worker failed as stale meanwhile (this worker's
heartbeats stalled past the grace period) cannot be told: it is counted as lost and noted, and
its retry is answered from the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from evo.family.space import Candidate
from evo.results import Status
from evo.gpu.margin import GREEN_SHARE, over_share
from evo.search.internals import one_write, tell
from evo.search.params import CANDIDATE, SPEEDUPS
from evo.search.records import BUILT_AS, LABEL, REUSED, Best, Outcome, Pending, Reporter, RunSummary
from evo.search.resume import REASON, STATUS, Heartbeat


class Teller:
    """Tells a worker's trials their outcomes and keeps its :class:`RunSummary` of them.

    ``running(trial_id)`` says whether a trial is still RUNNING in the storage (a tell that
    failed on a trial still running is an error, not a stale trial)."""

    def __init__(self, study: optuna.Study, rdb: optuna.storages.RDBStorage, store: Any, run_id: Any,
                 heartbeat: Heartbeat, summary: RunSummary, reporter: Reporter, running: Callable[[int], bool]) -> None:
        self.study, self.rdb, self.store, self.run_id, self.heartbeat = study, rdb, store, run_id, heartbeat
        self.summary, self.reporter, self.running = summary, reporter, running
        self.in_study: set[str] = set()   # candidates whose edges the study holds already

    def know(self, candidate_ids: Iterable[str]) -> None:
        """Candidates already in the study (their edges were stored when they first appeared)."""
        self.in_study |= set(candidate_ids)

    def finish_all(self, ps: Sequence[Pending], outcome: Outcome) -> None:
        """Tell every trial of one candidate: the first one the outcome, the others reused."""
        for i, p in enumerate(ps):
            self.finish(p, outcome if i == 0 else replace(outcome, reused=True))

    def finish(self, p: Pending, outcome: Outcome, waited: bool = False) -> None:
        """Tell ``p``'s trial its outcome (see the module docstring for the order), count it
        (``waited``: answered from the store once another worker had measured its candidate)."""
        label = (p.candidate or Candidate(p.family.name, tuple(p.raw.items()))).label()
        self._edges(p, outcome.candidate_id)
        try:
            self._tell(p, outcome, label)
        except (UpdateFinishedTrialError, ValueError):  # ValueError: "Cannot tell a FAIL trial"
            if self.running(p.trial_id):
                raise
            self._lost(p, outcome.candidate_id)
            return
        finally:
            self.heartbeat.discard(p.trial_id)
        self._count(p.trial.number, outcome, label, waited)

    def _edges(self, p: Pending, cid: str | None) -> None:
        """Store the candidate's lineage edges the first time it appears in the study (the store
        decides which worker's edges those are when two draw it at once)."""
        if cid is None or cid in self.in_study:
            return
        parents = [(parent, mutation, kind) for parent, mutation, kind in p.parents
                   if parent != cid]  # an import that renders as it did is the same candidate
        if parents:
            self.store.add_lineage(cid, parents, self.run_id, self.study.study_name)
        self.in_study.add(cid)

    def _tell(self, p: Pending, outcome: Outcome, label: str) -> None:
        """The trial's user attrs (in one transaction: a FAIL trial with a ``status`` is an
        outcome, whole), the store's row, then Optuna's tell."""
        trial, cid = p.trial, outcome.candidate_id
        state = (TrialState.COMPLETE if outcome.values is not None else
                 TrialState.PRUNED if outcome.status == Status.PRUNED else TrialState.FAIL)
        value = None if outcome.values is None else Best(0, "", "", outcome.values).score
        with one_write(trial, self.rdb, p.trial_id):  # all of them in one transaction
            for key, v in _attrs(outcome, label).items():
                trial.set_user_attr(key, v)
        # the store first: if we die before tell, recovery marks both FAIL
        self.store.record_trial(self.study.study_name, trial.number, cid, self.run_id, state.name, value)
        if outcome.values is not None:  # Study.tell, less a read of the trial (internals.tell)
            tell(self.study, trial, outcome.values)
        else:
            tell(self.study, trial, state=state)

    def _lost(self, p: Pending, cid: str | None) -> None:
        """Our trial was failed as stale meanwhile (and re-queued): mirror FAIL, say so."""
        self.store.record_trial(self.study.study_name, p.trial.number, cid, self.run_id,
                                TrialState.FAIL.name, None)
        self.summary.lost += 1
        self.reporter.note(_lost_note(p.trial.number))

    def _count(self, number: int, outcome: Outcome, label: str, waited: bool) -> None:
        """Add a told trial to the summary (its status, and how it was answered: waited for,
        else reused or measured here; and the best so far), tell the reporter."""
        s = self.summary
        s.finished += 1
        s.counts[outcome.status] += 1
        s.waited += waited
        s.reused += outcome.reused and not waited
        s.twins += outcome.built_as is not None
        if outcome.values is not None and outcome.built_as is None and (
                s.best is None or Best(0, "", "", outcome.values).score > s.best.score):
            s.best = Best(number, outcome.candidate_id or "", label, outcome.values, over_share(outcome.shares or {}))
        self.reporter.advance(number, outcome, s.best)


def _attrs(outcome: Outcome, label: str) -> dict[str, Any]:
    """A told trial's user attrs (``status`` last)."""
    attrs: dict[str, Any] = {LABEL: label}
    if outcome.reason:
        attrs[REASON] = outcome.reason
    if outcome.candidate_id is not None:
        attrs[CANDIDATE] = outcome.candidate_id
    if outcome.reused:
        attrs[REUSED] = True
    if outcome.built_as is not None:
        attrs[BUILT_AS] = outcome.built_as
    if outcome.speedups:  # per case, where Optuna's tools look (optuna-dashboard, load_study)
        attrs[SPEEDUPS] = outcome.speedups
    if outcome.shares:    # JSON keys are strings
        attrs[GREEN_SHARE] = {str(d): round(v, 4) for d, v in sorted(outcome.shares.items())}
    attrs[STATUS] = outcome.status
    return attrs


def _lost_note(number: int) -> str:
    return (f"trial {number} was failed as stale by another worker before this one could tell it "
            "(its heartbeats stalled past the grace period); its retry is answered from the store")

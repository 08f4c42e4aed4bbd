"""What a measurement means for the study: the outcome a trial is told.

A study scores its candidates on its FAST cases against its baseline, as one geometric mean or
one value per bucket (:mod:`evo.search.objective`). :class:`Scoring` turns what the store holds
or what an evaluation returned into an :class:`~evo.search.records.Outcome`: values when every
selected case was timed, else a FAIL status with the reason. A stored outcome is reused only
when it is final (a build failure, red, crashed, timeout; ``pruned`` too while the search
screens: the full-only protocol times a pruned candidate in full) or when it was timed as this
study times (its baseline beside the candidate) on every case.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from evo.gpu.margin import worst_shares
from evo.results import CheckResult, Evaluation, Shape, Status, Timing
from evo.scoring import speedups
from evo.search import objective
from evo.search.evaluators import Unmeasured
from evo.search.records import UNMEASURED, Outcome
from evo.search.storeview import Known
from evo.vocab import FAILED, PASSED


class Scoring:
    """A study's objective (``objective_kind`` over ``cases`` against ``baseline``), and what its
    evaluator times beside a candidate (``paired``:
    :meth:`Evaluator.paired <evo.search.evaluators.Evaluator.paired>`)."""

    def __init__(self, cases: Sequence[Shape], baseline: str, objective_kind: str,
                 paired: Callable[[], str], screening: bool = False) -> None:
        self.cases, self.baseline, self.objective, self.paired = list(cases), baseline, objective_kind, paired
        self.screening = screening

    def reuse(self, known: Known | None) -> Outcome | None:
        """A final outcome from the store, or None when the candidate still needs work."""
        if known is None:
            return None
        if known.status in FAILED or (self.screening and known.status is Status.PRUNED):
            return Outcome(known.status.value, known.reason, candidate_id=known.candidate_id, reused=True)
        if known.status in PASSED and known.timed_beside(self.paired()) and not objective.missing_cases(
                known.timings, self.baseline, self.cases):
            return self.scored(known.candidate_id, known.timings, known.checks, reused=True)
        return None

    def missing(self, timings: Sequence[Timing]) -> list[Shape]:
        """The study's cases ``timings`` lack."""
        return objective.missing_cases(timings, self.baseline, self.cases)

    def scored(self, cid: str, timings: Sequence[Timing], checks: Sequence[CheckResult],
               reused: bool = False) -> Outcome:
        """The objective values of a candidate timed on every case, with its per-case speedups
        and GREEN margin; ``unscored`` when a case is missing."""
        missing = self.missing(timings)
        if missing:
            return Outcome("unscored", "no timing on " + ", ".join(s.tag for s in missing),
                           candidate_id=cid, reused=reused)
        vals = objective.values(timings, self.baseline, self.cases, self.objective)
        per_case = speedups(timings, self.baseline)
        return Outcome(Status.FAST.value, values=vals, candidate_id=cid, reused=reused,
                       speedups={s.tag: per_case[s.tag] for s in self.cases if s.tag in per_case},
                       shares=worst_shares(checks))

    def evaluated(self, cid: str, ev: Evaluation | Unmeasured, prior: Known | None) -> Outcome:
        """The outcome of an evaluation, on top of what the store held (``prior``: a passed
        evaluation whose timings FAST completes and whose GREEN checks count for the margin)."""
        if isinstance(ev, Unmeasured):
            return Outcome(UNMEASURED, ev.reason)
        if ev.status is Status.FAST:
            before = prior or Known(cid, Status.FAST)
            return self.scored(cid, before.timings + list(ev.timings), before.checks + list(ev.checks))
        if ev.status is Status.GREEN:
            return Outcome(Status.GREEN.value, ev.reason or "passed GREEN, not timed", candidate_id=cid)
        return Outcome(ev.status.value, ev.reason, candidate_id=cid)

"""The store's API: every write is one transaction, every read returns detached views.

Callers (the CLI, the search, the evaluator, promote) never see ORM objects or sessions: they
hand in the pipeline's records (Candidate, Rendered, BuildResult, Evaluation) and get back
the frozen views of :mod:`evo.store.views`. A crash between two calls leaves the database
consistent, because nothing is ever half-written by one call.

:class:`Store` is made of one part per concern, each in its own module on
:class:`~evo.store.base.StoreBase`: runs and their leases (:mod:`evo.store.runs`), candidates
and builds (:mod:`evo.store.candidates`), edges, trials and claims (:mod:`evo.store.links`),
evaluations (:mod:`evo.store.evaluations`) and insights (:mod:`evo.store.insights`). What reads
across the parts (a candidate's whole record, the best candidates) and the table counts are
here.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select

from evo.errors import EvoError
from evo.results import Shape, Status
from evo.scoring import score
from evo.store.candidates import CandidateStore
from evo.store.convert import build_view, cand_view, trial_view
from evo.store.evaluations import EvaluationStore
from evo.store.insights import InsightStore
from evo.store.links import LinkStore
from evo.store.models import Base, Candidate, Trial
from evo.store.runs import RunStore
from evo.store.views import CandidateRecord, CandidateView
from evo.vocab import DEFAULT_BASELINE


class Store(RunStore, CandidateStore, LinkStore, EvaluationStore, InsightStore):
    """A lineage database (see :func:`evo.store.open_store`)."""

    def get(self, id_or_prefix: str) -> CandidateRecord:
        """Everything about one candidate: row, builds, evaluations (checks, timings), lineage, trials."""
        cid = self.resolve(id_or_prefix)
        with self._read() as s:
            cand = s.get(Candidate, cid)
            assert cand is not None
            view, builds = cand_view(cand), [build_view(b) for b in cand.builds]
            trials = [trial_view(t) for t in s.scalars(select(Trial).where(Trial.candidate_id == cid)
                                                       .order_by(Trial.id))]
        return CandidateRecord(view, builds, self.evaluations(cid), self.parents(cid), self.children(cid), trials)

    def best(self, n: int = 10, *, baseline: str = DEFAULT_BASELINE, cases: Sequence[Shape] | None = None,
             family: str | None = None, study: str | None = None,
             device: str | None = None) -> list[tuple[CandidateView, float]]:
        """The ``n`` FAST candidates with the highest score (those lacking a selected case's
        timings are left out), best first."""
        fast = self.find_candidates(family=family, status=Status.FAST, study=study)
        timings = self.latest_timings([c.id for c in fast], device)
        scored = []
        for c in fast:
            if c.id in timings:
                try:
                    scored.append((c, score(timings[c.id][1], baseline, cases)))
                except EvoError:
                    continue
        scored.sort(key=lambda cs: cs[1], reverse=True)
        return scored[:n]

    def counts(self) -> dict[str, int]:
        """Rows per evo table (for ``evo doctor``)."""
        with self._read() as s:
            return {t.name: s.scalar(select(func.count()).select_from(t)) or 0
                    for t in Base.metadata.sorted_tables}

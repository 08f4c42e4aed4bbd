"""What ties candidates together and to the search: lineage edges, Optuna trials, build claims.

An edge says a child candidate came from a parent (a mutation, a crossover, the nearest
completed candidate, or an import from another study). A trial row links Optuna trial ``number``
of a study to the candidate it measured. A claim on (build id, device) says which trial of which
worker is measuring that build on that kind of GPU right now (docs/scale-out.md).
"""

from __future__ import annotations

import math
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from evo.errors import EvoError
from evo.store.base import StoreBase
from evo.store.candidates import study_ids
from evo.store.convert import edge_view
from evo.store.models import Candidate, Claim, Edge, Run, Trial, utcnow
from evo.store.views import EdgeView

EDGE_KINDS = ("mutation", "crossover", "nearest", "import")


class LinkStore(StoreBase):
    """The edges, trials and claims part of :class:`evo.store.Store`."""

    def add_edge(self, parent_id: str, child_id: str, mutation: Mapping[str, Sequence[Any]] | None = None,
                 kind: str = "mutation", run_id: int | None = None) -> None:
        """Record that ``child`` came from ``parent`` (idempotent per parent, child, kind)."""
        with self._tx() as s:
            _insert_edge(s, parent_id, child_id, mutation, kind, run_id)

    def add_lineage(self, child_id: str, parents: Sequence[tuple[str, Mapping[str, Sequence[Any]] | None, str]],
                    run_id: int | None, study: str) -> bool:
        """Record ``child``'s edges ``(parent, mutation, kind)`` unless a run of ``study`` recorded
        some already; True when these were written. One transaction holding the child's row
        (``FOR UPDATE`` on PostgreSQL; SQLite's writers are serialized by ``BEGIN IMMEDIATE``), so
        two workers that draw the same candidate from different parents cannot both write its
        lineage: the first to tell it does."""
        with self._tx() as s:
            if s.get(Candidate, child_id, with_for_update=True) is None:
                raise EvoError(f"no candidate {child_id}")
            ours = select(Run.id).where(Run.study == study)
            if s.scalar(select(Edge.id).where(Edge.child_id == child_id, Edge.run_id.in_(ours)).limit(1)) is not None:
                return False
            for parent_id, mutation, kind in parents:
                _insert_edge(s, parent_id, child_id, mutation, kind, run_id)
            return True

    def parents(self, candidate_id: str) -> list[EdgeView]:
        return self._edges(Edge.child_id == candidate_id)

    def children(self, candidate_id: str) -> list[EdgeView]:
        return self._edges(Edge.parent_id == candidate_id)

    def edges(self, study: str | None = None) -> list[EdgeView]:
        """All edges, or those whose child belongs to ``study``."""
        return self._edges(None if study is None else Edge.child_id.in_(study_ids(study)))

    def _edges(self, where: Any) -> list[EdgeView]:
        q = select(Edge).order_by(Edge.id)
        if where is not None:
            q = q.where(where)
        with self._read() as s:
            return [edge_view(e) for e in s.scalars(q)]

    def record_trial(self, study: str, number: int, candidate_id: str | None, run_id: int | None = None,
                     state: str = "COMPLETE", value: float | None = None) -> None:
        """Link Optuna trial ``number`` of ``study`` to a candidate (updates it when it exists)."""
        with self._tx() as s:
            row = s.scalar(select(Trial).where(Trial.study == study, Trial.trial_number == number))
            if row is None:
                row = Trial(study=study, trial_number=number)
                s.add(row)
            row.candidate_id, row.run_id, row.state = candidate_id, run_id, state
            row.value = None if value is None or math.isnan(value) else value

    def claim(self, build_id: str, device: str, trial_id: int, study: str, number: int) -> tuple[int, str]:
        """Claim (build_id, device) for Optuna trial ``trial_id`` of ``study`` unless another
        trial holds it; returns the holder's trial id and study (this trial's when it is ours now)."""
        with self._tx() as s:
            row = s.get(Claim, (build_id, device))
            if row is not None:
                return row.trial_id, row.study
            s.add(Claim(build_id=build_id, device=device, trial_id=trial_id, study=study,
                        trial_number=number, host=socket.gethostname()))
            return trial_id, study

    def take_over(self, build_id: str, device: str, holder: int, trial_id: int, study: str, number: int) -> bool:
        """Move the claim on (build_id, device) from trial ``holder`` (no longer running) to
        ``trial_id``; False when someone else moved it first."""
        with self._tx() as s:
            row = s.get(Claim, (build_id, device))
            if row is None or row.trial_id != holder:
                return False
            row.trial_id, row.study, row.trial_number = trial_id, study, number
            row.host, row.claimed = socket.gethostname(), utcnow()
            return True


def _insert_edge(s: Session, parent_id: str, child_id: str, mutation: Mapping[str, Sequence[Any]] | None,
                 kind: str, run_id: int | None) -> None:
    """Add the edge in ``s`` unless the same (parent, child, kind) is stored (from any run)."""
    if kind not in EDGE_KINDS:
        raise EvoError(f"unknown edge kind {kind!r}; one of {', '.join(EDGE_KINDS)}")
    for cid in (parent_id, child_id):
        if s.get(Candidate, cid) is None:
            raise EvoError(f"no candidate {cid}")
    exists = s.scalar(select(Edge.id).where(Edge.parent_id == parent_id, Edge.child_id == child_id, Edge.kind == kind))
    if exists is None:
        s.add(Edge(parent_id=parent_id, child_id=child_id, kind=kind, run_id=run_id,
                   mutation={k: list(v) for k, v in (mutation or {}).items()}))

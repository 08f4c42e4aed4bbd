"""Candidates and their builds: what was proposed, how it built, and finding candidates again.

A candidate's id is its build id (the hash of everything that makes its cubin), or, for one that
violates its manifest and was never rendered, ``invalid-`` + a hash of its parameters.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from sqlalchemy import func, or_, select

from evo.errors import EvoError
from evo.family.manifest import load_family
from evo.family.render import Rendered, subset
from evo.family.space import Candidate as CandidatePoint
from evo.results import BuildResult, Status
from evo.store.base import StoreBase
from evo.store.convert import cand_view, resources_dict
from evo.store.engine import safe_url
from evo.store.models import Build, Candidate, Run, Trial
from evo.store.views import CandidateView
from evo.vocab import EVALUATED


def short_id(cid: str) -> str:
    """How ids are shown: 12 hex digits (16 characters for ``invalid-`` ids)."""
    return cid[:16] if cid.startswith("invalid-") else cid[:12]


def invalid_id(cand: CandidatePoint) -> str:
    """Id of a candidate that was never rendered: ``invalid-`` + 40 hex of its canonical key."""
    return "invalid-" + hashlib.sha256(cand.key().encode()).hexdigest()[:40]


def _subset(rendered: Rendered) -> list[list[Any]] | None:
    """The kernels ``rendered`` exports as the store keeps them, None when they are all of its
    family's (a family the store cannot load is taken as exporting all of them)."""
    try:
        fam = load_family(rendered.candidate.family)
    except EvoError:
        return None
    return subset(fam, rendered.entries)


class CandidateStore(StoreBase):
    """The candidates-and-builds part of :class:`evo.store.Store`."""

    def record_invalid(self, cand: CandidatePoint, reason: str, run_id: int | None = None) -> str:
        """Store a candidate that violates its manifest (never rendered); returns its id."""
        cid = invalid_id(cand)
        with self._tx() as s:
            if s.get(Candidate, cid) is None:
                s.add(Candidate(id=cid, family=cand.family, family_version=_family_version(cand.family),
                                params=cand.p, label=cand.label(), status=Status.INVALID.value,
                                reason=reason, first_run_id=run_id))
        return cid

    def record_build(self, rendered: Rendered, result: BuildResult, run_id: int | None = None) -> str:
        """Insert the candidate if new, add its build row, set its build status (an already
        evaluated candidate keeps its evaluation status); returns the candidate id."""
        cid = result.build_id
        with self._tx() as s:
            row = s.get(Candidate, cid)
            if row is None:
                cand = rendered.candidate
                row = Candidate(id=cid, family=cand.family, family_version=rendered.family_version,
                                params=cand.p, label=cand.label(), source_hash=result.source_hash,
                                arch=result.arch, flags=list(result.flags), status=result.status.value,
                                reason=result.reason, first_run_id=run_id, kernels=_subset(rendered))
                s.add(row)
            elif Status(row.status) not in EVALUATED:
                row.status, row.reason = result.status.value, result.reason
            seen = s.scalar(select(func.count()).select_from(Build).where(Build.candidate_id == cid))
            if not (result.cached and seen):
                s.add(Build(candidate_id=cid, run_id=run_id, status=result.status.value, reason=result.reason,
                            seconds=result.seconds, cached=result.cached, log=result.log,
                            resources={k: resources_dict(v) for k, v in result.resources.items()},
                            cubin_path=result.cubin_path))
        return cid

    def resolve(self, id_or_prefix: str) -> str:
        """The full id of a candidate given its id or a unique prefix of it."""
        key = id_or_prefix.strip().lower()
        if not key:
            raise EvoError("empty candidate id")
        with self._read() as s:
            if s.get(Candidate, key) is not None:
                return key
            escaped = key.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            found = list(s.scalars(select(Candidate.id).where(Candidate.id.like(escaped + "%", escape="\\"))
                                   .limit(2)))
        if not found:
            raise EvoError(f"no candidate with id {id_or_prefix!r} in {safe_url(self.url)}")
        if len(found) > 1:
            raise EvoError(f"candidate id prefix {id_or_prefix!r} is ambiguous; give more characters")
        return found[0]

    def candidate(self, cid: str) -> CandidateView | None:
        """One candidate's row (family, parameters, status) and nothing linked to it; None when unknown."""
        with self._read() as s:
            row = s.get(Candidate, cid)
            return cand_view(row) if row is not None else None

    def find_candidates(self, *, family: str | None = None, status: Status | str | Iterable[Status | str] | None = None,
                        study: str | None = None, run_id: int | None = None, arch: str | None = None,
                        limit: int | None = None) -> list[CandidateView]:
        """Candidates matching every given filter, oldest first."""
        q = select(Candidate).order_by(Candidate.created, Candidate.id)
        if family is not None:
            q = q.where(Candidate.family == family)
        if status is not None:
            wanted = [status] if isinstance(status, (str, Status)) else list(status)
            q = q.where(Candidate.status.in_([Status(x).value for x in wanted]))
        if arch is not None:
            q = q.where(Candidate.arch == arch)
        if study is not None:
            q = q.where(Candidate.id.in_(study_ids(study)))
        if run_id is not None:
            q = q.where(or_(Candidate.first_run_id == run_id,
                            Candidate.id.in_(select(Build.candidate_id).where(Build.run_id == run_id))))
        if limit is not None:
            q = q.limit(limit)
        with self._read() as s:
            return [cand_view(c) for c in s.scalars(q)]

    def statuses(self, ids: Iterable[str]) -> dict[str, Status]:
        """Current status of each known id (unknown ids are absent)."""
        wanted = list(dict.fromkeys(ids))
        out: dict[str, Status] = {}
        with self._read() as s:
            for chunk in (wanted[i:i + 500] for i in range(0, len(wanted), 500)):
                for cid, st in s.execute(select(Candidate.id, Candidate.status).where(Candidate.id.in_(chunk))):
                    out[cid] = Status(st)
        return out


def study_ids(study: str) -> Any:
    """Select of candidate ids in a study: linked by a trial, or first seen in one of its runs."""
    by_trial = select(Trial.candidate_id).where(Trial.study == study, Trial.candidate_id.is_not(None))
    by_run = select(Candidate.id).join(Run, Run.id == Candidate.first_run_id).where(Run.study == study)
    return by_trial.union(by_run)


def _family_version(family: str) -> int | None:
    try:
        return load_family(family).version
    except EvoError:
        return None

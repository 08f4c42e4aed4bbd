"""Evaluations: a candidate's GREEN checks and FAST timings on one device, stored as one.

An evaluation row, its checks and its timings are written in one transaction together with the
candidate's new status; reads give :mod:`evo.results` records back, so scoring code works the
same on fresh and stored measurements.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from evo.errors import EvoError
from evo.results import Evaluation, Status, Timing
from evo.store.base import StoreBase
from evo.store.candidates import study_ids
from evo.store.convert import eval_view, num, timing
from evo.store.models import Candidate, Check, EvaluationRow, TimingRow
from evo.store.views import EvaluationView
from evo.vocab import FULL


class EvaluationStore(StoreBase):
    """The evaluations part of :class:`evo.store.Store`."""

    def record_evaluation(self, evaluation: Evaluation, run_id: int | None = None,
                          device: str | None = None) -> int:
        """Store one evaluation with its checks and timings and set the candidate's status, all
        in one transaction. ``device`` (default: ``evaluation.device["name"]``) is the name
        evaluations are matched by. Returns the evaluation id."""
        with self._tx() as s:
            cand = s.get(Candidate, evaluation.build_id)
            if cand is None:
                raise EvoError(f"no candidate {evaluation.build_id}: record its build first")
            row = EvaluationRow(candidate_id=cand.id, run_id=run_id,
                                device=device if device is not None else evaluation.device.get("name", ""),
                                device_info=dict(evaluation.device), status=evaluation.status.value,
                                reason=evaluation.reason, green_seconds=evaluation.green_seconds,
                                fast_seconds=evaluation.fast_seconds)
            s.add(row)
            row.checks = [Check(**c.shape.as_dict(), seed=c.seed, passed=c.passed,
                                max_abs_err=num(c.max_abs_err), ref_err=num(c.ref_err),
                                tolerance=num(c.tolerance), reason=c.reason) for c in evaluation.checks]
            row.timings = [TimingRow(**t.shape.as_dict(), backend=t.backend, median_us=t.median_us,
                                     p20_us=t.p20_us, p80_us=t.p80_us, samples_us=list(t.samples_us),
                                     tflops=t.tflops if t.median_us > 0 else 0.0, flagged=t.flagged)
                           for t in evaluation.timings]
            cand.status, cand.reason = evaluation.status.value, evaluation.reason
            s.flush()
            return row.id

    def set_status(self, evaluation_id: int, status: Status, reason: str) -> None:
        """Give a stored evaluation, and its candidate, another status and reason (one
        transaction): a search's screen, stored as soon as it came back, once the pruner has
        pruned it (``pruned``)."""
        with self._tx() as s:
            row = s.get(EvaluationRow, evaluation_id)
            if row is None:
                raise EvoError(f"no evaluation {evaluation_id}")
            row.status, row.reason = status.value, reason
            row.candidate.status, row.candidate.reason = status.value, reason

    def measured_baselines(self, device: str, host: str, since: datetime) -> dict[str, list[Timing]]:
        """Per rung, the newest baseline Timing of each (case, backend) that a worker on ``host``
        measured on ``device`` since ``since`` for its cache (the evaluations whose device info
        names them under ``baselines_measured``, :mod:`evo.gpu.evaluate`): what the host's
        workers share instead of measuring again."""
        out: dict[str, dict[tuple[str, str], Timing]] = {}
        with self._read() as s:
            rows = s.execute(select(EvaluationRow.id, EvaluationRow.device_info)
                             .where(EvaluationRow.device == device, EvaluationRow.created >= since)
                             .order_by(EvaluationRow.id)).all()
            named = {eid: json.loads(info["baselines_measured"]) for eid, info in rows
                     if info.get("host") == host and info.get("baselines_measured")}
            if not named:
                return {}
            q = select(TimingRow).where(TimingRow.evaluation_id.in_(named)).order_by(TimingRow.id)
            for row in s.scalars(q):
                t = timing(row)
                key = f"{t.shape.tag}|{t.backend}"
                for rung, keys in named[row.evaluation_id].items():
                    if key in keys:
                        out.setdefault(rung, {})[(t.shape.tag, t.backend)] = t
        return {rung: list(ts.values()) for rung, ts in out.items()}

    def rung_evaluations(self, study: str | None = None) -> list[tuple[str, Status, dict[str, Any]]]:
        """(candidate id, status, device info) of every evaluation a search made in rungs (its
        device info names its ``rung``), oldest first; only of ``study``'s candidates when given.
        Checks and timings are not read."""
        q = select(EvaluationRow.candidate_id, EvaluationRow.status, EvaluationRow.device_info).order_by(EvaluationRow.id)
        if study is not None:
            q = q.where(EvaluationRow.candidate_id.in_(study_ids(study)))
        with self._read() as s:
            return [(cid, Status(st), dict(info)) for cid, st, info in s.execute(q) if "rung" in info]

    def code_digests(self, device: str, after: int = 0) -> list[tuple[int, str, dict[str, str]]]:
        """(evaluation id, candidate id, kernel function -> portable machine-code digest) of every ``fast``
        evaluation on ``device`` after evaluation ``after`` that timed in the full protocol (a search's
        full rung, or no rung) and recorded the digests (``kernel_code_sha256``), oldest first: what the
        search knows a kernel timed before by (:mod:`evo.search.twins`). Checks and timings are not read."""
        q = (select(EvaluationRow.id, EvaluationRow.candidate_id, EvaluationRow.device_info)
             .where(EvaluationRow.device == device, EvaluationRow.id > after,
                    EvaluationRow.status == Status.FAST.value)
             .order_by(EvaluationRow.id))
        with self._read() as s:
            return [(eid, cid, {str(k): str(v) for k, v in json.loads(info["kernel_code_sha256"]).items()})
                    for eid, cid, info in s.execute(q)
                    if info.get("kernel_code_sha256") and info.get("rung", FULL) == FULL]

    def evaluations(self, candidate_id: str, device: str | None = None) -> list[EvaluationView]:
        """The candidate's evaluations, oldest first (only those on ``device`` when given)."""
        with self._read() as s:
            q = (select(EvaluationRow).where(EvaluationRow.candidate_id == candidate_id)
                 .options(selectinload(EvaluationRow.checks), selectinload(EvaluationRow.timings))
                 .order_by(EvaluationRow.id))
            if device is not None:
                q = q.where(EvaluationRow.device == device)
            return [eval_view(e) for e in s.scalars(q)]

    def failed_evaluations(self) -> list[EvaluationView]:
        """Every evaluation with at least one failed GREEN check, oldest first (with its checks)."""
        with self._read() as s:
            failed = select(Check.evaluation_id).where(Check.passed.is_(False))
            q = (select(EvaluationRow).where(EvaluationRow.id.in_(failed))
                 .options(selectinload(EvaluationRow.checks), selectinload(EvaluationRow.timings))
                 .order_by(EvaluationRow.id))
            return [eval_view(e) for e in s.scalars(q)]

    def latest_timings(self, ids: Iterable[str], device: str | None = None) -> dict[str, tuple[str, list[Timing]]]:
        """Per candidate: (device, timings) from all its evaluations on ``device`` (default:
        the device of its newest timed evaluation), oldest first so newer ones win in scoring."""
        wanted = list(dict.fromkeys(ids))
        out: dict[str, tuple[str, list[Timing]]] = {}
        with self._read() as s:
            for chunk in (wanted[i:i + 500] for i in range(0, len(wanted), 500)):
                q = (select(EvaluationRow.candidate_id, EvaluationRow.device, TimingRow)
                     .join(TimingRow, TimingRow.evaluation_id == EvaluationRow.id)
                     .where(EvaluationRow.candidate_id.in_(chunk))
                     .order_by(EvaluationRow.id, TimingRow.id))
                if device is not None:
                    q = q.where(EvaluationRow.device == device)
                rows = s.execute(q).all()
                newest = {cid: dev for cid, dev, _ in rows}  # ordered by id: the last one wins
                for cid, dev, t in rows:
                    if dev == newest[cid]:
                        out.setdefault(cid, (dev, []))[1].append(timing(t))
        return out

    def timings_for(self, candidate_id: str, device: str | None = None) -> list[Timing]:
        """All stored timings of one candidate on one device (see :meth:`latest_timings`)."""
        return self.latest_timings([candidate_id], device).get(candidate_id, ("", []))[1]

"""The store's API: every write is one transaction, every read returns detached views.

Callers (the CLI, the search, the evaluator, promote) never see ORM objects or sessions: they
hand in the pipeline's records (Candidate, Rendered, BuildResult, Evaluation) and get back
the frozen views of :mod:`evo.store.views`. A crash between two calls leaves the database
consistent, because nothing is ever half-written by one call.
"""

from __future__ import annotations

import hashlib
import math
import socket
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, and_, delete, func, or_, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, selectinload, sessionmaker

from evo import paths
from evo.errors import EvoError
from evo.family.manifest import load_family
from evo.family.render import Rendered
from evo.results import BuildResult, CheckResult, Evaluation, Resources, Shape, Status, Timing
from evo.scoring import score
from evo.family.space import Candidate as CandidatePoint
from evo.store.engine import WRITE, describe, safe_url
from evo.store.models import (Base, Build, Candidate, Check, Claim, Edge, EvaluationRow, Insight, Run, TimingRow,
                              Trial, utcnow)
from evo.store.views import (BuildView, CandidateRecord, CandidateView, EdgeView, EvaluationView, InsightView,
                             RunView, TrialView)
from evo.vocab import DEFAULT_BASELINE, EVALUATED

EDGE_KINDS = ("mutation", "crossover", "nearest", "import")
RUN_STATUSES = ("running", "done", "failed", "interrupted")


@dataclass(frozen=True)
class NewInsight:
    """An insight to store (the insights stage computes these)."""

    kind: str
    key: str
    text: str
    stats: dict[str, Any] = field(default_factory=dict)
    support: int = 0
    evidence: list[Any] = field(default_factory=list)


def short_id(cid: str) -> str:
    """How ids are shown: 12 hex digits (16 characters for ``invalid-`` ids)."""
    return cid[:16] if cid.startswith("invalid-") else cid[:12]


def invalid_id(cand: CandidatePoint) -> str:
    """Id of a candidate that was never rendered: ``invalid-`` + 40 hex of its canonical key."""
    return "invalid-" + hashlib.sha256(cand.key().encode()).hexdigest()[:40]


class Store:
    """A lineage database (see :func:`evo.store.open_store`)."""

    def __init__(self, engine: Engine, url: str) -> None:
        self.engine, self.url = engine, url
        self._read = sessionmaker(engine, expire_on_commit=False)
        self._write = sessionmaker(engine.execution_options(**WRITE), expire_on_commit=False)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[Session]:
        """One write transaction: committed when the block ends, rolled back on any error."""
        try:
            with self._write() as s, s.begin():
                yield s
        except OperationalError as exc:
            raise EvoError(f"database write failed: {describe(exc)}") from None

    # ---- runs ---------------------------------------------------------------------------

    def start_run(self, command: str, *, study: str | None = None, options: Mapping[str, Any] | None = None,
                  device: Mapping[str, Any] | None = None, lease_s: float | None = None) -> int:
        """Record the start of a command that writes; returns the run id. With ``lease_s`` the
        run holds a lease of that many seconds, which its worker's heartbeat keeps renewing
        (:meth:`renew_run`); past it, the run counts as dead (:meth:`fail_expired_runs`)."""
        with self._tx() as s:
            run = Run(study=study, command=command, options=dict(options or {}), git_sha=paths.git_sha(),
                      host=socket.gethostname(), device=dict(device or {}), status="running",
                      alive_until=None if lease_s is None else _lease_end(s, lease_s))
            s.add(run)
            s.flush()
            return run.id

    def finish_run(self, run_id: int, status: str = "done") -> None:
        if status not in RUN_STATUSES:
            raise EvoError(f"unknown run status {status!r}; one of {', '.join(RUN_STATUSES)}")
        with self._tx() as s:
            run = s.get(Run, run_id)
            if run is None:
                raise EvoError(f"no run {run_id}")
            run.status, run.finished = status, utcnow()

    def renew_run(self, run_id: int, lease_s: float) -> None:
        """Extend the run's lease to ``lease_s`` seconds from now (a worker's heartbeat)."""
        with self._tx() as s:
            s.execute(update(Run).where(Run.id == run_id).values(alive_until=_lease_end(s, lease_s)))

    def fail_expired_runs(self) -> list[int]:
        """Mark ``failed`` every run still ``running`` past its lease: its worker died without
        finishing it (killed, crashed, host lost), with or without a trial in flight. Returns
        the ids this call failed. Every worker calls this before each batch, so the write lock
        is taken only when a read found such a run."""
        with self._read() as s:
            if s.scalar(_expired_ids(_server_now(s)).limit(1)) is None:
                return []
        with self._tx() as s:
            ids = list(s.scalars(_expired_ids(_server_now(s))))
            if ids:
                s.execute(update(Run).where(Run.id.in_(ids)).values(status="failed", finished=utcnow()))
            return ids

    @contextmanager
    def recording(self, command: str, *, study: str | None = None, options: Mapping[str, Any] | None = None,
                  device: Mapping[str, Any] | None = None, lease_s: float | None = None) -> Iterator[int]:
        """Record one command as a run around the block (the one run-bookkeeping path of every
        command that writes): ``done`` when the block ends, ``interrupted`` on Ctrl-C
        (KeyboardInterrupt), ``failed`` on any other exception, which goes on up. ``lease_s``:
        see :meth:`start_run` (a process that is killed never reaches the end of the block)."""
        run_id = self.start_run(command, study=study, options=options, device=device, lease_s=lease_s)
        status = "failed"
        try:
            yield run_id
            status = "done"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            self.finish_run(run_id, status)

    def get_run(self, run_id: int) -> RunView | None:
        with self._read() as s:
            row = s.execute(_with_expiry(_server_now(s)).where(Run.id == run_id)).first()
            return None if row is None else _run_view(*row)

    def runs(self, study: str) -> list[RunView]:
        """The study's runs, oldest first (the server's clock read once for all of them)."""
        with self._read() as s:
            rows = s.execute(_with_expiry(_server_now(s)).where(Run.study == study).order_by(Run.id))
            return [_run_view(r, expired) for r, expired in rows]

    # ---- candidates, builds, lineage, trials ----------------------------------------------

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
                                reason=result.reason, first_run_id=run_id)
                s.add(row)
            elif Status(row.status) not in EVALUATED:
                row.status, row.reason = result.status.value, result.reason
            seen = s.scalar(select(func.count()).select_from(Build).where(Build.candidate_id == cid))
            if not (result.cached and seen):
                s.add(Build(candidate_id=cid, run_id=run_id, status=result.status.value, reason=result.reason,
                            seconds=result.seconds, cached=result.cached, log=result.log,
                            resources={k: _asdict(v) for k, v in result.resources.items()},
                            cubin_path=result.cubin_path))
        return cid

    def add_edge(self, parent_id: str, child_id: str, mutation: Mapping[str, Sequence[Any]] | None = None,
                 kind: str = "mutation", run_id: int | None = None) -> None:
        """Record that ``child`` came from ``parent`` (idempotent per parent, child, kind)."""
        if kind not in EDGE_KINDS:
            raise EvoError(f"unknown edge kind {kind!r}; one of {', '.join(EDGE_KINDS)}")
        with self._tx() as s:
            for cid in (parent_id, child_id):
                if s.get(Candidate, cid) is None:
                    raise EvoError(f"no candidate {cid}")
            exists = s.scalar(select(Edge.id).where(Edge.parent_id == parent_id, Edge.child_id == child_id,
                                                    Edge.kind == kind))
            if exists is None:
                s.add(Edge(parent_id=parent_id, child_id=child_id, kind=kind, run_id=run_id,
                           mutation={k: list(v) for k, v in (mutation or {}).items()}))

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

    # ---- claims (one worker measures a build on a kind of device; docs/scale-out.md) -----------

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

    # ---- evaluations --------------------------------------------------------------------

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
                                max_abs_err=_num(c.max_abs_err), ref_err=_num(c.ref_err),
                                tolerance=_num(c.tolerance), reason=c.reason) for c in evaluation.checks]
            row.timings = [TimingRow(**t.shape.as_dict(), backend=t.backend, median_us=t.median_us,
                                     p20_us=t.p20_us, p80_us=t.p80_us, samples_us=list(t.samples_us),
                                     tflops=t.tflops if t.median_us > 0 else 0.0, flagged=t.flagged)
                           for t in evaluation.timings]
            cand.status, cand.reason = evaluation.status.value, evaluation.reason
            s.flush()
            return row.id

    def evaluations(self, candidate_id: str, device: str | None = None) -> list[EvaluationView]:
        """The candidate's evaluations, oldest first (only those on ``device`` when given)."""
        with self._read() as s:
            q = (select(EvaluationRow).where(EvaluationRow.candidate_id == candidate_id)
                 .options(selectinload(EvaluationRow.checks), selectinload(EvaluationRow.timings))
                 .order_by(EvaluationRow.id))
            if device is not None:
                q = q.where(EvaluationRow.device == device)
            return [_eval_view(e) for e in s.scalars(q)]

    def failed_evaluations(self) -> list[EvaluationView]:
        """Every evaluation with at least one failed GREEN check, oldest first (with its checks)."""
        with self._read() as s:
            failed = select(Check.evaluation_id).where(Check.passed.is_(False))
            q = (select(EvaluationRow).where(EvaluationRow.id.in_(failed))
                 .options(selectinload(EvaluationRow.checks), selectinload(EvaluationRow.timings))
                 .order_by(EvaluationRow.id))
            return [_eval_view(e) for e in s.scalars(q)]

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
                        out.setdefault(cid, (dev, []))[1].append(_timing(t))
        return out

    def timings_for(self, candidate_id: str, device: str | None = None) -> list[Timing]:
        """All stored timings of one candidate on one device (see :meth:`latest_timings`)."""
        return self.latest_timings([candidate_id], device).get(candidate_id, ("", []))[1]

    # ---- queries --------------------------------------------------------------------------

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

    def get(self, id_or_prefix: str) -> CandidateRecord:
        """Everything about one candidate: row, builds, evaluations (checks, timings), lineage, trials."""
        cid = self.resolve(id_or_prefix)
        with self._read() as s:
            cand = s.get(Candidate, cid)
            assert cand is not None
            view, builds = _cand_view(cand), [_build_view(b) for b in cand.builds]
            trials = [_trial_view(t) for t in s.scalars(select(Trial).where(Trial.candidate_id == cid)
                                                        .order_by(Trial.id))]
        return CandidateRecord(view, builds, self.evaluations(cid), self.parents(cid), self.children(cid), trials)

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
            q = q.where(Candidate.id.in_(_study_ids(study)))
        if run_id is not None:
            q = q.where(or_(Candidate.first_run_id == run_id,
                            Candidate.id.in_(select(Build.candidate_id).where(Build.run_id == run_id))))
        if limit is not None:
            q = q.limit(limit)
        with self._read() as s:
            return [_cand_view(c) for c in s.scalars(q)]

    def statuses(self, ids: Iterable[str]) -> dict[str, Status]:
        """Current status of each known id (unknown ids are absent)."""
        wanted = list(dict.fromkeys(ids))
        out: dict[str, Status] = {}
        with self._read() as s:
            for chunk in (wanted[i:i + 500] for i in range(0, len(wanted), 500)):
                for cid, st in s.execute(select(Candidate.id, Candidate.status).where(Candidate.id.in_(chunk))):
                    out[cid] = Status(st)
        return out

    def parents(self, candidate_id: str) -> list[EdgeView]:
        return self._edges(Edge.child_id == candidate_id)

    def children(self, candidate_id: str) -> list[EdgeView]:
        return self._edges(Edge.parent_id == candidate_id)

    def edges(self, study: str | None = None) -> list[EdgeView]:
        """All edges, or those whose child belongs to ``study``."""
        return self._edges(None if study is None else Edge.child_id.in_(_study_ids(study)))

    def _edges(self, where: Any) -> list[EdgeView]:
        q = select(Edge).order_by(Edge.id)
        if where is not None:
            q = q.where(where)
        with self._read() as s:
            return [_edge_view(e) for e in s.scalars(q)]

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

    # ---- insights -----------------------------------------------------------------------

    def replace_insights(self, study: str | None, items: Iterable[NewInsight], kind: str | None = None) -> None:
        """Replace the study's insights (of ``kind``, or all) with ``items`` in one transaction."""
        with self._tx() as s:
            q = delete(Insight).where(Insight.study.is_(None) if study is None else Insight.study == study)
            if kind is not None:
                q = q.where(Insight.kind == kind)
            s.execute(q)
            s.add_all(Insight(study=study, kind=i.kind, key=i.key, text=i.text, stats=dict(i.stats),
                              support=i.support, evidence=list(i.evidence)) for i in items)

    def insights(self, study: str | None = None, kind: str | None = None) -> list[InsightView]:
        q = select(Insight).order_by(Insight.support.desc(), Insight.id)
        if study is not None:
            q = q.where(Insight.study == study)
        if kind is not None:
            q = q.where(Insight.kind == kind)
        with self._read() as s:
            return [InsightView(i.id, i.study, i.kind, i.key, i.text, dict(i.stats), i.support,
                                list(i.evidence), i.created) for i in s.scalars(q)]

    def counts(self) -> dict[str, int]:
        """Rows per evo table (for ``evo doctor``)."""
        with self._read() as s:
            return {t.name: s.scalar(select(func.count()).select_from(t)) or 0
                    for t in Base.metadata.sorted_tables}


# ---- helpers --------------------------------------------------------------------------------

def _server_now(s: Session) -> datetime:
    """The database server's clock (as Optuna's heartbeats use it), so that leases written by
    hosts whose clocks differ compare alike. SQLite's is UTC, to the second."""
    now = s.scalar(select(func.now()))
    assert now is not None
    return now


def _lease_end(s: Session, lease_s: float) -> datetime:
    return _server_now(s) + timedelta(seconds=lease_s)


def _lease_expired(now: datetime) -> Any:
    """The one rule for a dead run: still ``running`` and its lease ended before ``now`` (the
    server's clock, :func:`_server_now`); NULL, read as not expired, for a run without a lease."""
    return and_(Run.status == "running", Run.alive_until < now)


def _expired_ids(now: datetime) -> Any:
    """Select of the ids of runs whose lease has expired by ``now``, oldest first."""
    return select(Run.id).where(_lease_expired(now)).order_by(Run.id)


def _with_expiry(now: datetime) -> Any:
    """Select of runs, each with whether its lease has expired by ``now``."""
    return select(Run, _lease_expired(now))


def _study_ids(study: str) -> Any:
    """Select of candidate ids in a study: linked by a trial, or first seen in one of its runs."""
    by_trial = select(Trial.candidate_id).where(Trial.study == study, Trial.candidate_id.is_not(None))
    by_run = select(Candidate.id).join(Run, Run.id == Candidate.first_run_id).where(Run.study == study)
    return by_trial.union(by_run)


def _family_version(family: str) -> int | None:
    try:
        return load_family(family).version
    except EvoError:
        return None


def _num(x: float) -> float | None:
    return None if math.isnan(x) else x


def _asdict(r: Resources) -> dict[str, int]:
    return {k: getattr(r, k) for k in Resources.__dataclass_fields__}


def _shape(row: Check | TimingRow) -> Shape:
    return Shape(row.case, row.B, row.H, row.L, row.D, row.causal, row.dtype)


def _nan(x: float | None) -> float:
    return math.nan if x is None else x


def _timing(t: TimingRow) -> Timing:
    return Timing(_shape(t), t.backend, t.median_us, t.p20_us, t.p80_us, list(t.samples_us), t.flagged)


def _run_view(r: Run, expired: bool | None) -> RunView:
    """The run's view; ``expired``: :func:`_lease_expired`, as :func:`_with_expiry` selects it."""
    return RunView(r.id, r.study, r.started, r.finished, r.status, r.command, dict(r.options), r.git_sha,
                   r.host, dict(r.device), r.alive_until, bool(expired))


def _cand_view(c: Candidate) -> CandidateView:
    return CandidateView(c.id, c.family, c.family_version, dict(c.params), c.label, Status(c.status), c.reason,
                         c.source_hash, c.arch, tuple(c.flags or ()), c.created, c.first_run_id)


def _build_view(b: Build) -> BuildView:
    return BuildView(b.id, b.run_id, Status(b.status), b.reason, b.seconds, b.cached, b.log,
                     {k: Resources(**v) for k, v in b.resources.items()}, b.cubin_path, b.created)


def _edge_view(e: Edge) -> EdgeView:
    return EdgeView(e.parent_id, e.child_id, e.kind, {k: tuple(v) for k, v in e.mutation.items()},
                    e.run_id, e.created)


def _trial_view(t: Trial) -> TrialView:
    return TrialView(t.study, t.trial_number, t.candidate_id, t.run_id, t.state, t.value)


def _eval_view(e: EvaluationRow) -> EvaluationView:
    return EvaluationView(
        e.id, e.candidate_id, e.run_id, e.device, dict(e.device_info), Status(e.status), e.reason,
        e.green_seconds, e.fast_seconds, e.created,
        checks=[CheckResult(_shape(c), c.seed, c.passed, _nan(c.max_abs_err), _nan(c.ref_err),
                            _nan(c.tolerance), c.reason) for c in e.checks],
        timings=[_timing(t) for t in e.timings],
    )

"""Read models the store hands out: plain frozen dataclasses, detached from any session.

Checks and timings come back as :mod:`evo.results` records (CheckResult, Timing with their
Shape), so scoring and display code works the same on fresh and stored measurements.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from evo.results import CheckResult, Resources, Status, Timing

if TYPE_CHECKING:
    from evo.family.render import Rendered


@dataclass(frozen=True)
class RunView:
    """One command that wrote (``evo_runs``): what ran, with which options, where, at which git
    sha, and how it ended (running, done, failed, interrupted).

    ``lease_expired``: the run is still ``running`` past its lease (``alive_until``) by the
    database server's clock when it was read, so its worker is dead; a worker on the database,
    or the next ``evo run``, marks it failed (:meth:`evo.store.Store.fail_expired_runs`).
    Readers write nothing, so they show it as such (:attr:`status_text`) instead of failing it."""

    id: int
    study: str | None
    started: datetime
    finished: datetime | None
    status: str
    command: str
    options: dict[str, Any]
    git_sha: str | None
    host: str
    device: dict[str, Any]
    alive_until: datetime | None = None
    lease_expired: bool = False

    @property
    def status_text(self) -> str:
        """The status as reports show it: ``running (lease expired <when> UTC)`` for a run whose
        worker is dead but that no worker has marked failed yet, else :attr:`status`."""
        if not self.lease_expired or self.alive_until is None:
            return self.status
        when = self.alive_until.astimezone(UTC) if self.alive_until.tzinfo else self.alive_until  # SQLite's: UTC
        return f"{self.status} (lease expired {when:%Y-%m-%d %H:%M:%S} UTC)"


@dataclass(frozen=True)
class CandidateView:
    """One candidate row: identity, parameters and its current status."""

    id: str
    family: str
    family_version: int | None
    params: dict[str, Any]
    label: str
    status: Status
    reason: str
    source_hash: str | None
    arch: str | None
    flags: tuple[str, ...]
    created: datetime
    first_run_id: int | None
    kernels: frozenset[tuple[int, str, bool]] | None = None   # the kernels it exports (None: all of its family's)

    def rendered(self) -> Rendered:
        """Its parameters rendered by today's templates, exporting the kernels it exports (a
        search's subset is part of its source and id: :mod:`evo.family.render`)."""
        from evo.family.render import render
        from evo.family.space import make_candidate

        return render(make_candidate(self.family, self.params), kernels=self.kernels)


@dataclass(frozen=True)
class BuildView:
    """One build of a candidate: status, reason, seconds, ptxas report per entry, cubin path."""

    id: int
    run_id: int | None
    status: Status
    reason: str
    seconds: float
    cached: bool
    log: str
    resources: dict[str, Resources]
    cubin_path: str | None
    created: datetime


@dataclass(frozen=True)
class EdgeView:
    """``child`` came from ``parent``; ``mutation`` is ``{param: (old, new)}``."""

    parent_id: str
    child_id: str
    kind: str
    mutation: dict[str, tuple[Any, Any]]
    run_id: int | None
    created: datetime


@dataclass(frozen=True)
class TrialView:
    """One Optuna trial of a study as the store mirrors it: its candidate, state and value."""

    study: str
    number: int
    candidate_id: str | None
    run_id: int | None
    state: str
    value: float | None


@dataclass(frozen=True)
class EvaluationView:
    """One evaluation of a candidate on one device: status, GREEN checks, FAST timings."""

    id: int
    candidate_id: str
    run_id: int | None
    device: str
    device_info: dict[str, Any]
    status: Status
    reason: str
    green_seconds: float
    fast_seconds: float
    created: datetime
    checks: list[CheckResult] = field(default_factory=list)
    timings: list[Timing] = field(default_factory=list)


@dataclass(frozen=True)
class CandidateRecord:
    """Everything known about one candidate (what ``evo show`` prints)."""

    candidate: CandidateView
    builds: list[BuildView]
    evaluations: list[EvaluationView]
    parents: list[EdgeView]
    children: list[EdgeView]
    trials: list[TrialView]


@dataclass(frozen=True)
class InsightView:
    """One stored insight (a move's effect, a resource failure rate) with its support."""

    id: int
    study: str | None
    kind: str
    key: str
    text: str
    stats: dict[str, Any]
    support: int
    evidence: list[Any]
    created: datetime

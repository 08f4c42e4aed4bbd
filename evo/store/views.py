"""Read models the store hands out: plain frozen dataclasses, detached from any session.

Checks and timings come back as :mod:`evo.results` records (CheckResult, Timing with their
Shape), so scoring and display code works the same on fresh and stored measurements.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from evo.results import CheckResult, Resources, Status, Timing


@dataclass(frozen=True)
class RunView:
    """One command that wrote (``evo_runs``): what ran, with which options, where, at which git
    sha, and how it ended (running, done, failed, interrupted)."""

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

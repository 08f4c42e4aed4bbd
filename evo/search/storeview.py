"""What the store already knows about a build id on a device, in the form the search needs.

The search never builds or evaluates the same candidate twice: a build failure (same build id,
so same source, flags and arch) is final everywhere; an evaluation is reused on the device it
was made on (red, crashed, timeout: final; green/fast: its timings, to which FAST adds only
the cases still missing, and its GREEN checks, whose margin the search records), and a passed
one only when it was timed as this search times (:attr:`Known.paired`, the baseline timed beside
the candidate, against :meth:`Evaluator.paired <evo.search.evaluators.Evaluator.paired>`). A
screened candidate (``pruned``, or ``green`` from a screen whose full rung never ran) comes back
with its GREEN checks and its screen's timings, and :attr:`Known.rung` says it was a screen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evo.results import CheckResult, Status, Timing
from evo.store import Store
from evo.vocab import BUILD_FAILED, FULL, GATED


@dataclass(frozen=True)
class Known:
    """What the store already holds for a build on a device: its status, why, its timings and
    (passed only) its GREEN checks."""

    candidate_id: str
    status: Status
    reason: str = ""
    timings: list[Timing] = field(default_factory=list)
    checks: list[CheckResult] = field(default_factory=list)
    paired: str = ""   # passed: the baselines its newest evaluation timed beside the candidate, comma-separated ("": cached)
    rung: str = FULL   # passed: the rung of its newest evaluation (a search's screen, else full)
    evaluation_id: int | None = None    # passed: the id of its newest evaluation
    full_cases: tuple[str, ...] = ()    # a screen: the case tags it timed as the full rung does (evo.search.rungs)

    def timed_beside(self, baseline: str) -> bool:
        """Whether ``baseline`` was timed beside the candidate ("": whether nothing was, as in a
        recording or a search that compares with cached timings)."""
        return baseline in self.paired.split(",") if baseline else not self.paired


def known_outcome(store: Store, build_id: str, device: str) -> Known | None:
    """The stored outcome of ``build_id`` on ``device``, or None when there is nothing to reuse."""
    return known_outcomes(store, [build_id], device)[build_id]


def known_outcomes(store: Store, build_ids: Sequence[str], device: str) -> dict[str, Known | None]:
    """:func:`known_outcome` of each build id, their statuses read in one query: a batch's
    candidates are mostly new, and a query each was a sixteenth of a trial's statements with four
    workers on PostgreSQL (issue 35)."""
    statuses = store.statuses(build_ids) if build_ids else {}
    return {bid: _known(store, bid, statuses.get(bid), device) for bid in build_ids}


def _known(store: Store, build_id: str, status: Status | None, device: str) -> Known | None:
    """The stored outcome of ``build_id`` (whose candidate has ``status``) on ``device``."""
    if status is None:
        return None
    if status in BUILD_FAILED:
        return Known(build_id, status, store.get(build_id).candidate.reason)
    evaluations = store.evaluations(build_id, device)
    if not evaluations:
        return None
    last = evaluations[-1]
    if last.status not in GATED:
        return Known(build_id, last.status, last.reason)
    info = last.device_info
    return Known(build_id, last.status, last.reason, store.timings_for(build_id, device),
                 [c for e in evaluations for c in e.checks], str(info.get("paired", "")), str(info.get("rung", FULL)),
                 last.id, full_cases(info))


def full_cases(device_info: Mapping[str, Any]) -> tuple[str, ...]:
    """The case tags a screen timed as the full rung times them (its device info's
    ``screen_full_cases``, written by :func:`evo.gpu.evaluate._fast`; none for any other evaluation)."""
    return tuple(t for t in str(device_info.get("screen_full_cases", "")).split(",") if t)

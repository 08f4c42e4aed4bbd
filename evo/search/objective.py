"""The search objective: speedup over an SDPA baseline on the selected FAST cases.

``geomean``: one value, the geometric mean over the cases of baseline median / candidate
median (:func:`evo.scoring.score`). ``per-bucket``: one value per shape bucket (head dim x
causal), each the geometric mean over that bucket's cases, for a multi-objective study.
Every value is maximized.
"""

from __future__ import annotations

from collections.abc import Sequence

from evo.errors import EvoError
from evo.vocab import BASELINES, OBJECTIVES
from evo.results import Shape, Timing
from evo.scoring import score


Bucket = tuple[int, bool]


def buckets(cases: Sequence[Shape]) -> list[Bucket]:
    """Shape buckets present in ``cases``: (head dim, causal), sorted."""
    return sorted({(s.D, s.causal) for s in cases})


def bucket_name(b: Bucket) -> str:
    return f"d{b[0]}-{'causal' if b[1] else 'full'}"


def names(objective: str, cases: Sequence[Shape]) -> list[str]:
    """One name per objective value (for the study's metric names and the summary)."""
    check(objective)
    return ["geomean"] if objective == "geomean" else [bucket_name(b) for b in buckets(cases)]


def check(objective: str, baseline: str = BASELINES[0]) -> None:
    if objective not in OBJECTIVES:
        raise EvoError(f"unknown objective {objective!r}; choose {' or '.join(OBJECTIVES)}")
    if baseline not in BASELINES:
        raise EvoError(f"unknown baseline {baseline!r}; choose {' or '.join(BASELINES)}")


def missing_cases(timings: Sequence[Timing], baseline: str, cases: Sequence[Shape]) -> list[Shape]:
    """Cases lacking a candidate or a baseline timing (they need FAST, or cannot be scored)."""
    have: dict[str, set[str]] = {}
    for t in timings:
        have.setdefault(t.shape.tag, set()).add(t.backend)
    return [s for s in cases if not {"evo", baseline} <= have.get(s.tag, set())]


def values(timings: Sequence[Timing], baseline: str, cases: Sequence[Shape], objective: str) -> list[float]:
    """The objective values of a timed candidate (callers check :func:`missing_cases` first)."""
    if objective == "geomean":
        return [score(timings, baseline, cases)]
    return [score(timings, baseline, [s for s in cases if (s.D, s.causal) == b]) for b in buckets(cases)]

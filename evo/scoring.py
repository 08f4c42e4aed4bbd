"""Speedups and scores from raw timings (pure functions, no database, no GPU).

A candidate's timings on a suite hold, per case, one :class:`~evo.results.Timing` for the
candidate (backend ``evo``) and one per SDPA baseline measured beside it. The speedup on a
case is baseline median / candidate median; a score over a selection of cases is their
geometric mean (docs/design.md, FAST); an edge's effect is child score / parent score over the
cases both were timed on. Cases are matched by :attr:`~evo.results.Shape.tag` (name,
causal, dtype), so a case measured in two evaluations is the same case.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from evo.errors import EvoError
from evo.results import Shape, Timing
from evo.vocab import DEFAULT_BASELINE, EVO


def latest(timings: Iterable[Timing]) -> dict[tuple[str, str], Timing]:
    """The last timing of each (case tag, backend): re-measurements replace older ones."""
    return {(t.shape.tag, t.backend): t for t in timings}


def speedups(timings: Iterable[Timing], baseline: str = DEFAULT_BASELINE) -> dict[str, float]:
    """Per case tag: baseline median / candidate median, for cases that have both."""
    by = latest(timings)
    return {tag: by[(tag, baseline)].median_us / t.median_us
            for (tag, backend), t in by.items()
            if backend == EVO and (tag, baseline) in by and t.median_us > 0}


def geomean(values: Iterable[float]) -> float:
    """Geometric mean of positive numbers (raises on an empty sequence)."""
    vals = list(values)
    if not vals:
        raise EvoError("geometric mean of no values")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def _tags(cases: Sequence[Shape] | None) -> list[str] | None:
    return None if cases is None else [s.tag for s in cases]


def score(timings: Iterable[Timing], baseline: str = DEFAULT_BASELINE,
          cases: Sequence[Shape] | None = None) -> float:
    """Geometric-mean speedup over ``cases`` (default: every case with both timings).

    Every selected case must have a candidate and a baseline timing; scores over different
    case sets are not comparable, so a missing one is an error, not a silent skip.
    """
    per_case = speedups(timings, baseline)
    tags = _tags(cases)
    if tags is None:
        tags = sorted(per_case)
    missing = [t for t in tags if t not in per_case]
    if missing or not tags:
        raise EvoError(f"no {EVO} and {baseline} timings for " + (", ".join(missing) or "any case"))
    return geomean(per_case[t] for t in tags)


def edge_effect(parent: Iterable[Timing], child: Iterable[Timing], baseline: str = DEFAULT_BASELINE,
                cases: Sequence[Shape] | None = None) -> float | None:
    """Child score / parent score over the selected cases both have (None if they share none)."""
    p, c = speedups(parent, baseline), speedups(child, baseline)
    common = sorted(set(p) & set(c))
    tags = _tags(cases)
    if tags is not None:
        common = [t for t in common if t in tags]
    if not common:
        return None
    return geomean(c[t] for t in common) / geomean(p[t] for t in common)

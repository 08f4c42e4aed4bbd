"""The dispatch table's planning (pure): length buckets, what was measured of each contender, and
the route of each (head dim, dtype, causal, bucket) key.

Promote (:mod:`evo.products.promote`) feeds it the database's timings; the confirmation
(:mod:`evo.products.confirm`) and the verification (:mod:`evo.products.verify`) read its records.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evo.errors import EvoError
from evo.family.render import Entry
from evo.gpu.draws import bucket_top, verified_heads
from evo.gpu.timing import recheck_failed
from evo.results import Shape, Timing
from evo.scoring import geomean, latest
from evo.store import CandidateView
from evo.vocab import DEFAULT_BASELINE, EVO

Key = tuple[int, str, bool]  # head dim, dtype, causal


@dataclass(frozen=True)
class Bucket:
    """Sequence lengths ``lo..hi`` (``hi`` None: the top bucket before :func:`plan_routes` closes it)."""

    lo: int
    hi: int | None

    def __contains__(self, length: int) -> bool:
        return length >= self.lo and (self.hi is None or length <= self.hi)

    def label(self) -> str:
        return f"{self.lo}..{'inf' if self.hi is None else self.hi}"


def length_buckets(lengths: Iterable[int]) -> list[Bucket]:
    """One bucket per distinct measured length, split at the geometric means of neighbours."""
    ls = sorted(set(lengths))
    if not ls or ls[0] < 1:
        raise EvoError("no measured sequence lengths to derive buckets from")
    edges = [math.isqrt(a * b) for a, b in itertools.pairwise(ls)]
    return [Bucket(lo, hi) for lo, hi in zip([1, *(e + 1 for e in edges)], [*edges, None], strict=True)]


@dataclass(frozen=True)
class Measured:
    """One candidate on one FAST case: its median and the baseline's, same evaluation."""

    shape: Shape
    evo_us: float
    base_us: float

    @property
    def speedup(self) -> float:
        return self.base_us / self.evo_us


@dataclass(frozen=True)
class Contender:
    """A promotable candidate and what was measured of it on the chosen device."""

    view: CandidateView
    cases: tuple[Measured, ...]


@dataclass(frozen=True)
class Route:
    """One row of the dispatch table: a key, a bucket and its kernel (None: SDPA). The bucket's
    top is finite, the longest length promote verifies in it; past the last top of a key, and
    past ``max_bh`` heads, the package calls SDPA."""

    key: Key
    bucket: Bucket
    shapes: tuple[Shape, ...]                  # the FAST cases of this key in this bucket
    winner: str | None = None                  # candidate id
    speedup: float | None = None               # the winner's geometric mean over ``shapes``
    best: tuple[str, float] | None = None      # best contender when none beat SDPA
    max_bh: int = 0                            # the most B * H the kernel is verified for here

    @property
    def top(self) -> int:
        """The longest length served (finite: :func:`plan_routes` closes every bucket)."""
        return self.bucket.hi if self.bucket.hi is not None else self.bucket.lo


def served_heads(key: Key, bucket: Bucket, shapes: Iterable[Shape]) -> int:
    """The most B * H a route serves: promote's many-heads check at the bucket's shortest length
    (:func:`evo.gpu.draws.verified_heads`), or the most heads a FAST case of the bucket was timed
    and checked at, whichever is more."""
    return max([verified_heads(bucket.lo, key[0]), *(s.B * s.H for s in shapes)])


def measurements(timings: Iterable[Timing], baseline: str = DEFAULT_BASELINE) -> tuple[Measured, ...]:
    """Per case with a candidate and a baseline timing (newest of each), unless the candidate's
    timing failed its implausibility re-check."""
    by = latest(timings)
    out = []
    for (tag, backend), t in by.items():
        base = by.get((tag, baseline))
        if backend == EVO and base is not None and t.median_us > 0 and not recheck_failed(t):
            out.append(Measured(t.shape, t.median_us, base.median_us))
    return tuple(out)


def plan_routes(contenders: Sequence[Contender], min_speedup: float = 1.0) -> list[Route]:
    """The dispatch table: every bucket of every key that has at least one winner, each closed at
    the longest length promote verifies in it (the top bucket at twice its longest
    measured length, :func:`evo.gpu.draws.bucket_top`).

    A bucket's winner covers the most of its cases (scores over different case sets are not
    comparable), then has the highest geometric-mean speedup, which must exceed ``min_speedup``.
    """
    measured = [(c.view.id, m) for c in contenders for m in c.cases]
    if not measured:
        return []
    buckets = length_buckets(m.shape.L for _, m in measured)
    keys = sorted({(m.shape.D, m.shape.dtype, m.shape.causal) for _, m in measured})
    routes: list[Route] = []
    for key in keys:
        rows = []
        for b in buckets:
            shapes = {m.shape for _, m in measured if key_of(m.shape) == key and m.shape.L in b}
            ranked = []
            for c in contenders:
                mine = [m.speedup for m in c.cases if m.shape in shapes]
                if mine:
                    ranked.append((-len(mine), -geomean(mine), c.view.id))
            ranked.sort()
            ordered = tuple(sorted(shapes, key=lambda s: (s.L, s.B, s.H, s.case)))
            closed = Bucket(b.lo, bucket_top(b.lo, b.hi, [s.L for s in ordered]))
            heads = served_heads(key, closed, ordered)
            if ranked and -ranked[0][1] > min_speedup:
                rows.append(Route(key, closed, ordered, ranked[0][2], -ranked[0][1], max_bh=heads))
            else:
                best = (ranked[0][2], -ranked[0][1]) if ranked else None
                rows.append(Route(key, closed, ordered, best=best, max_bh=heads))
        if any(r.winner for r in rows):
            routes += rows
    return routes


def key_of(s: Shape) -> Key:
    return (s.D, s.dtype, s.causal)


@dataclass(frozen=True)
class Shipped:
    """A winner as it goes into the package: its kernels, files and provenance."""

    view: CandidateView
    entries: dict[Key, Entry]
    cubin: Path
    source: str
    provenance: dict[str, Any]

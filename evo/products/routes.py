"""The dispatch table's planning (pure): length buckets, what was measured of each contender, and
the route of each (head dim, dtype, causal, bucket) key.

The routing rule (kernel ABI v2; docs/trust.md): a package serves only what promote checked. A
route is a key (head dim, dtype, causal) and a bucket of the *longer* of the query and key lengths
(:func:`evo.gpu.draws.route_length`), closed at the longest length promote checks in it; it serves
a problem when that length is in its bucket (so both Lq and Lk are at most its top), B * Hq is at
most its ``max_bh``, Hq / Hkv at most its ``max_group``, and, when Lq != Lk, a causal mask at one of
its ``aligns``. Each limit is what promote's checks of the bucket run
(:func:`evo.products.verify.cases_for`): the bucket's edges and ragged lengths as the longer length
with the other drawn shorter, grouped heads, both corners of a causal mask, and the many-heads
checks, multi-head and multi-query, at its shortest length; a FAST case of the bucket (timed, its
outputs checked) widens the heads and group limits to its own. Past any limit the package calls
SDPA.

Decode problems (:func:`is_decode`: at most :data:`~evo.gpu.draws.DECODE_ROWS` query rows per head
against a longer cache, the shape of the decode suite's cases, ``acceptance/decode.toml``) have routes
of their own: their FAST cases are bucketed apart from the others, and each such route serves only
problems of at most ``max_lq`` query rows. The package tries a key's decode routes first and its
other routes after them, so a decode kernel serves the decode buckets it won and the prefill routes
keep theirs.

Query chunks on a longer key cache (:func:`is_chunk`: Lq < Lk, not decode: chunked prefill, and
cross-attention with fewer queries than keys) have routes of their own too: a bucket's chunk cases
would otherwise share one kernel with its equal-length cases (at 2026-11-28q the chunked-prefill case
L3, 512 queries on 8192 keys, and F7, 8192 on 8192, shared the D=128 causal route 5793..16384, and L3's
winner served F7 at 0.95x SDPA's time). A chunk route serves at most ``max_lq`` query rows, the
geometric middle of its cases' longest query length and shortest key length (below that shortest key
length), and only max(Lq, Lk) from ``max_lq + 1``, so that Lq < Lk in every problem it takes. The
package tries its decode routes first, then its chunk routes, then the others; a problem that no chunk
route takes falls through to the others. Promote checks a chunk route over its bucket as any other
(the checks' other length is drawn shorter both ways, so they cover the chunks it serves).

Decode cases with per-sequence lengths or pages (``Shape.layout`` ``lens`` or ``paged``: D6, D7) plan
layout routes of their own, one set per layout, bucketed by the capacity (the longest a sequence can
be): a call with ``seqlens=`` (and ``block_table=``) goes only to a route of its layout, whose kernel
serves it through its ``_lens`` / ``_paged`` entry where it beat SDPA's padded fallback on those
cases, and to SDPA otherwise (no layout route of its key, or none that beat SDPA). A layout route
serves at most ``max_lq`` query rows and each sequence's causal mask at its own bottom right.

Promote (:mod:`evo.products.promote`) feeds it the database's timings; the confirmation
(:mod:`evo.products.confirm`) and the verification (:mod:`evo.products.verify`) read its records.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evo.errors import EvoError
from evo.family.render import Entry
from evo.gpu.draws import DECODE_ROWS, ROUTE_ALIGNS, bucket_top, route_length, verified_group, verified_heads
from evo.gpu.timing import recheck_failed
from evo.results import LAYOUTS, Shape, Timing
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
    """One bucket per distinct measured length (of the longer of Lq and Lk), split at the
    geometric means of neighbours."""
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
    """One row of the dispatch table: a key, a bucket (of the longer of Lq and Lk) and its kernel
    (None: SDPA). The bucket's top is finite, the longest length promote verifies in it; past the
    last top of a key, past ``max_bh`` heads, past ``max_group`` query heads per key/value head, or
    with a causal mask at an alignment not in :attr:`aligns` when Lq != Lk, the package calls SDPA."""

    key: Key
    bucket: Bucket
    shapes: tuple[Shape, ...]                  # the FAST cases of this key in this bucket
    winner: str | None = None                  # candidate id
    speedup: float | None = None               # the winner's geometric mean over ``shapes``
    best: tuple[str, float] | None = None      # best contender when none beat SDPA
    max_bh: int = 0                            # the most B * Hq the kernel is verified for here
    max_group: int = 1                         # the most Hq / Hkv the kernel is verified for here
    max_lq: int | None = None                  # a decode or chunk route: the most query rows it serves (None: any)
    layout: str = "contiguous"                 # lens, paged: a route of calls with seqlens (and block_table)
    chunk: bool = False                        # a chunk route: query chunks on longer caches (bucket from max_lq + 1)

    @property
    def top(self) -> int:
        """The longest length served (finite: :func:`plan_routes` closes every bucket)."""
        return self.bucket.hi if self.bucket.hi is not None else self.bucket.lo

    @property
    def cross(self) -> bool:
        """Whether the route serves Lq != Lk: promote checks every bucket with the other length
        drawn shorter, both ways (:func:`evo.gpu.draws.llm_bucket_cases`)."""
        return True

    @property
    def aligns(self) -> tuple[str, ...]:
        """The causal alignments served when Lq != Lk (none for a non-causal route, where the
        alignment means nothing): both corners, each checked both ways at every bucket's edges; a
        layout route's mask is at each sequence's bottom right, where its checks put it."""
        if not self.key[2]:
            return ()
        return ROUTE_ALIGNS if self.layout == "contiguous" else ("bottom_right",)

    def limits(self) -> str:
        """What the route serves, in words (the package's explain() says the same). Lk of a layout
        route is the capacity: the cache's length (a paged one's pages_per_seq x page_size)."""
        rows = f"Lq <= {self.max_lq}, " if self.max_lq is not None else ""
        text = (f"{rows}max(Lq, Lk) {self.bucket.lo}..{self.top}, B*Hq <= {self.max_bh}, "
                f"Hq/Hkv <= {self.max_group}")
        if self.layout != "contiguous":
            return text + (", each sequence's causal mask at its bottom right" if self.aligns else "")
        return text + (", Lq != Lk with the causal mask at either corner" if self.aligns else
                       ", Lq != Lk" if self.cross else ", Lq == Lk only")


def served_heads(key: Key, bucket: Bucket, shapes: Iterable[Shape]) -> int:
    """The most B * H a route serves: promote's many-heads check at the bucket's shortest length
    (:func:`evo.gpu.draws.verified_heads`), or the most heads a FAST case of the bucket was timed
    and checked at, whichever is more."""
    return max([verified_heads(bucket.lo, key[0]), *(s.B * s.H for s in shapes)])


def served_group(heads: int, shapes: Iterable[Shape]) -> int:
    """The most query heads per key/value head a route serves: those of promote's multi-query
    many-heads check of ``heads`` (the route's ``max_bh``: :func:`evo.gpu.draws.verified_group`), or
    of a FAST case of the bucket, whichever is more. (The bucket's other checks draw groups of 1-8.)"""
    return max([verified_group(heads), *(s.group for s in shapes)])


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


def is_decode(s: Shape) -> bool:
    """Whether a FAST case is a decode problem: at most DECODE_ROWS query rows per head against a
    longer key cache (every case of ``acceptance/decode.toml``, none of the other suites)."""
    return s.L <= DECODE_ROWS < s.Lk


def is_chunk(s: Shape) -> bool:
    """Whether a FAST case is a query chunk on a longer key cache: fewer queries than keys, more
    than a decode problem's rows (L3, chunked prefill; L7, cross-attention)."""
    return s.Lk > s.L and not is_decode(s)


def plan_routes(contenders: Sequence[Contender], min_speedup: float = 1.0) -> list[Route]:
    """The dispatch table: the decode routes (planned on the contiguous decode cases alone, each
    serving at most DECODE_ROWS query rows), the layout routes of each cache layout (planned on that
    layout's cases alone, bucketed by capacity, DECODE_ROWS query rows too), the chunk routes
    (:func:`_chunk_routes`, on the chunk cases alone), then the others (planned on every other case),
    as :func:`_plan_part` plans each."""
    def part(layout: str, decode: bool, chunk: bool = False) -> list[tuple[str, Measured]]:
        """Every contender's measurements of the cases of ``layout``, decode or not, chunks or not."""
        return [(c.view.id, m) for c in contenders for m in c.cases
                if m.shape.layout == layout and is_decode(m.shape) == decode and is_chunk(m.shape) == chunk]

    routes = _plan_part(contenders, part("contiguous", True), min_speedup, DECODE_ROWS)
    for layout in LAYOUTS[1:]:
        routes += _plan_part(contenders, part(layout, True), min_speedup, DECODE_ROWS, layout)
    routes += _chunk_routes(contenders, part("contiguous", False, chunk=True), min_speedup)
    return routes + _plan_part(contenders, part("contiguous", False), min_speedup, None)


def _chunk_routes(contenders: Sequence[Contender], measured: Sequence[tuple[str, Measured]],
                  min_speedup: float) -> list[Route]:
    """The chunk routes: :func:`_plan_part`'s routes of the chunk cases, less the buckets that hold
    none (a chunk in them falls through to the other routes), each serving at most ``max_lq`` query
    rows (the geometric middle of its cases' longest query length and shortest key length, below
    the latter) and max(Lq, Lk) from ``max_lq + 1``, its heads and group limits those of that bucket."""
    routes = []
    for r in _plan_part(contenders, measured, min_speedup, None):
        if not r.shapes:
            continue
        shortest = min(length_of(s) for s in r.shapes)
        rows = min(math.isqrt(max(s.L for s in r.shapes) * shortest), shortest - 1)
        bucket = Bucket(max(r.bucket.lo, rows + 1), r.bucket.hi)
        heads = served_heads(r.key, bucket, r.shapes)
        routes.append(dataclasses.replace(r, bucket=bucket, max_lq=rows, chunk=True, max_bh=heads,
                                          max_group=served_group(heads, r.shapes)))
    return routes


def _plan_part(contenders: Sequence[Contender], measured: Sequence[tuple[str, Measured]], min_speedup: float,
               max_lq: int | None, layout: str = "contiguous") -> list[Route]:
    """The routes of ``measured`` (a part of the contenders' cases, all of ``layout``): every bucket
    of every key that has at least one winner, each closed at the longest length promote verifies in
    it (the top bucket at twice its longest measured length, :func:`evo.gpu.draws.bucket_top`).

    A bucket's winner covers the most of its cases (scores over different case sets are not
    comparable), then beats ``min_speedup`` on every one of them if any candidate does (a kernel
    that serves one case of its bucket slower than SDPA loses to one that serves none so, even at
    a lower mean), then has the highest geometric-mean speedup, which must exceed ``min_speedup``.
    """
    if not measured:
        return []
    buckets = length_buckets(length_of(m.shape) for _, m in measured)
    keys = sorted({(m.shape.D, m.shape.dtype, m.shape.causal) for _, m in measured})
    routes: list[Route] = []
    for key in keys:
        rows = []
        for b in buckets:
            shapes = {m.shape for _, m in measured if key_of(m.shape) == key and length_of(m.shape) in b}
            scored: list[tuple[int, bool, float, str]] = []
            for c in contenders:
                mine = [m.speedup for m in c.cases if m.shape in shapes]
                if mine:
                    scored.append((-len(mine), min(mine) <= min_speedup, -geomean(mine), c.view.id))
            ranked = [(n, mean, cid) for n, _, mean, cid in sorted(scored)]
            ordered = tuple(sorted(shapes, key=lambda s: (length_of(s), s.L, s.B, s.H, s.case)))
            closed = Bucket(b.lo, bucket_top(b.lo, b.hi, [length_of(s) for s in ordered]))
            heads = served_heads(key, closed, ordered)
            group = served_group(heads, ordered)
            if ranked and -ranked[0][1] > min_speedup:
                rows.append(Route(key, closed, ordered, ranked[0][2], -ranked[0][1], max_bh=heads, max_group=group,
                                  max_lq=max_lq, layout=layout))
            else:
                best = (ranked[0][2], -ranked[0][1]) if ranked else None
                rows.append(Route(key, closed, ordered, best=best, max_bh=heads, max_group=group, max_lq=max_lq,
                                  layout=layout))
        if any(r.winner for r in rows):
            routes += rows
    return routes


def key_of(s: Shape) -> Key:
    return (s.D, s.dtype, s.causal)


def length_of(s: Shape) -> int:
    """The length a FAST case is bucketed by: the longer of its query and key lengths."""
    return route_length(s.L, s.Lk)


@dataclass(frozen=True)
class Shipped:
    """A winner as it goes into the package: its kernels, files and provenance."""

    view: CandidateView
    entries: dict[Key, Entry]
    cubin: Path
    source: str
    provenance: dict[str, Any]

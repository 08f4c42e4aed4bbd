"""A search's screen: the few FAST cases a candidate is timed on first, and what they say.

Which cases (:func:`screen_cases`): in each group of the study's cases -- a bucket (head dim,
causal), split further by the cache layout and by decode (at most DECODE_ROWS query rows) or not,
since a ragged or paged decode case is no estimate of a contiguous one (with buckets alone, D3
stood for D1-D4, D6 and D7 of the decode suite: screens of x1.07-1.23 against full scores of
x1.92-1.95 in study dec3, H100, 15f2118, blind to the layout entries) -- every case
the steady-state rule leaves cheap (a roofline floor under 20 us: no 300 ms of
warm-up per op, about 0.1 s each) and the bucket's largest case (most FLOPs; a tie goes to the
later one), which is what a kernel's main loop does at scale. For the default suite that is
F1-F3 and F5 in each head-dim-64 bucket and F8 in each head-dim-128 bucket: 10 of 16 cases, 4
of them long (the full rung's 10 long cases cost about 1.5 s each). On the stored H100 studies
wgmma9-16 and fast3 (295 candidates, every case timed in full) this choice predicted each
candidate's 16-case score within a median 0.6 % (90 % within 2.2 %, no bias); one case per
bucket was off by a median 1.5 % (90 % within 4.7 %).

What they say (:func:`screened`): a group's screened value is the geometric mean of its screened
cases' speedups, and each case of the group counts at that value (a case left out of the screen
stands in at its group's mean); a bucket's screened value is the geometric mean over its cases so
counted, and the screened score, the screen's estimate of the study's objective, the same over
every case. Where groups are buckets (every FAST suite but decode) that is each bucket's mean. The screen's
short cases come from another protocol than the full rung's (the candidate alone, few samples,
against a cached baseline; its long cases are timed as the full rung times them, unless the run
says ``--screen-alone``: :meth:`evo.gpu.evaluate.Plan.for_case`), so a screen is compared only
with other screens (:mod:`evo.search.pruner`) and never ranks a candidate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from evo.results import Shape, Timing
from evo.scoring import speedups
from evo.search.objective import Bucket, bucket_name, buckets
from evo.gpu.timing import steady_case

OVERALL = "all"   # the screened score's key among a trial's screened values (beside each bucket's name)
DECODE_ROWS = 16  # query rows up to which a case is decode (the package's decode routes take Lq <= 16)

Group = tuple[int, bool, str, bool]


def _group(s: Shape) -> Group:
    """The group of ``s`` (module docstring): its bucket, its cache layout, whether it is decode."""
    return (s.D, s.causal, s.layout, s.L <= DECODE_ROWS)


def screen_cases(cases: Sequence[Shape]) -> list[Shape]:
    """The cases a screen times, in the order of ``cases`` (module docstring)."""
    keep: set[int] = set()
    for g in {_group(s) for s in cases}:
        members = [i for i, s in enumerate(cases) if _group(s) == g]
        keep.update(i for i in members if not steady_case(cases[i]))
        keep.add(max(members, key=lambda i: (cases[i].flops, i)))
    return [s for i, s in enumerate(cases) if i in keep]


@dataclass(frozen=True)
class Screen:
    """What a screen says: the screened score (an estimate of the objective's geometric mean)
    and each bucket's screened value, by bucket name."""

    score: float
    buckets: dict[str, float]

    def values(self, objective: str) -> list[float]:
        """The objective's values as the screen estimates them (one, or one per bucket)."""
        return [self.score] if objective == "geomean" else list(self.buckets.values())

    def attrs(self) -> dict[str, float]:
        """The screened values as a trial's user attr holds them (:data:`OVERALL` and each bucket)."""
        return {OVERALL: round(self.score, 6)} | {k: round(v, 6) for k, v in self.buckets.items()}


def screened(timings: Sequence[Timing], baseline: str, cases: Sequence[Shape]) -> Screen | None:
    """The screen of ``cases`` from a screen's ``timings`` against ``baseline``; None when a
    group has none of its cases timed (then nothing can be said of it)."""
    per_case = speedups(timings, baseline)
    logs: dict[Group, list[float]] = {}
    for s in cases:
        if s.tag in per_case:
            logs.setdefault(_group(s), []).append(math.log(per_case[s.tag]))
    if any(_group(s) not in logs for s in cases):
        return None
    mean = {g: sum(v) / len(v) for g, v in logs.items()}
    counted: dict[Bucket, list[float]] = {}   # every case of a bucket at its group's mean
    for s in cases:
        counted.setdefault((s.D, s.causal), []).append(mean[_group(s)])
    score = math.exp(sum(sum(v) for v in counted.values()) / len(cases))
    return Screen(score, {bucket_name(b): math.exp(sum(counted[b]) / len(counted[b])) for b in buckets(cases)})

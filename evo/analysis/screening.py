"""How well a search's screens foretold its full scores (``evo insights``, the GPU throughput check).

A search in rungs (docs/design.md, "Rungs") stores, with the full evaluation of each candidate
it screened and kept, the screened score beside the full score (device info ``screen_score``
and ``full_score``: geometric means over the study's cases). The screen's error is
screened / full - 1; this module reads every such pair of a study (or of the database) and what
became of the screens: how many candidates were screened, how many of them were pruned.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from evo.store import Store, short_id
from evo.vocab import SCREEN, Status


@dataclass(frozen=True)
class ScreenPair:
    """One candidate timed on both rungs: its screened and its full score."""

    candidate_id: str
    screen: float
    full: float

    @property
    def error(self) -> float:
        """screened / full - 1: above 0 the screen read the candidate faster than the full rung."""
        return self.screen / self.full - 1.0


@dataclass(frozen=True)
class ScreenErrors:
    """The screens of ``study`` (None: of every study): how many candidates were screened and
    pruned, and the screen's error on each candidate also timed in full (``pairs``, oldest first)."""

    study: str | None
    screened: int
    pruned: int
    pairs: list[ScreenPair] = field(default_factory=list)

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile of |error| over the pairs (None without one)."""
        errs = sorted(abs(p.error) for p in self.pairs)
        if not errs:
            return None
        pos = q * (len(errs) - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, len(errs) - 1)
        return errs[lo] + (errs[hi] - errs[lo]) * (pos - lo)

    @property
    def worst(self) -> ScreenPair | None:
        """The pair the screen missed by most."""
        return max(self.pairs, key=lambda p: abs(p.error), default=None)

    @property
    def bias(self) -> float | None:
        """The mean error (None without a pair): how far the screen reads high on average."""
        return statistics.fmean(p.error for p in self.pairs) if self.pairs else None

    def line(self) -> str:
        """One line for a summary: counts, then the error's median, 90th percentile, worst and bias."""
        head = f"{self.screened} screened, {self.pruned} pruned"
        if not self.pairs:
            return f"{head}; no candidate timed on both rungs yet"
        worst, bias = self.worst, self.bias
        assert worst is not None and bias is not None
        return (f"{head}; screen vs full over {len(self.pairs)}: median |error| {self.quantile(0.5):.1%}, "
                f"90% within {self.quantile(0.9):.1%}, worst {worst.error:+.1%} ({short_id(worst.candidate_id)}), "
                f"mean {bias:+.1%}")

    def document(self) -> dict[str, Any]:
        """As JSON: the counts, the error's quantiles, and every pair."""
        return {"study": self.study, "screened": self.screened, "pruned": self.pruned,
                "median_abs_error": self.quantile(0.5), "p90_abs_error": self.quantile(0.9),
                "max_abs_error": abs(self.worst.error) if self.worst else None, "mean_error": self.bias,
                "pairs": [{"candidate_id": p.candidate_id, "screen": p.screen, "full": p.full, "error": p.error}
                          for p in self.pairs]}


def screen_errors(store: Store, study: str | None = None) -> ScreenErrors:
    """The screens of ``study``'s candidates (every candidate when None) and their errors."""
    screened: set[str] = set()
    pruned: set[str] = set()
    pairs: dict[str, ScreenPair] = {}
    for cid, status, info in store.rung_evaluations(study):
        if info.get("rung") == SCREEN:
            screened.add(cid)
            if status is Status.PRUNED:
                pruned.add(cid)
        elif "screen_score" in info and "full_score" in info:
            pairs[cid] = ScreenPair(cid, float(info["screen_score"]), float(info["full_score"]))  # the newest
    return ScreenErrors(study, len(screened), len(pruned), list(pairs.values()))

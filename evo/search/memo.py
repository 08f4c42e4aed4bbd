"""What a sampler derives from a finished trial, computed once per trial instead of once per ask.

A finished trial never changes (Optuna refuses to update it), so a value read from it -- its
candidate's record key, its decoded and validated candidate -- can be kept. A sampler that
scanned all trials on every ask with fresh parsing and validation spent a growing share of each
ask on trials it had seen before (issue 35); with this it only does that work for new trials.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Generic, TypeVar

from optuna.trial import FrozenTrial

T = TypeVar("T")


class TrialMemo(Generic[T]):
    """``compute(trial)`` once per finished trial (keyed by number and start time, so that a
    sampler reused on another study never mixes the two up); unfinished trials are computed
    afresh each time."""

    def __init__(self, compute: Callable[[FrozenTrial], T]) -> None:
        self.compute = compute
        self._kept: dict[tuple[int, datetime], T] = {}

    def __call__(self, t: FrozenTrial) -> T:
        if not t.state.is_finished() or t.datetime_start is None:
            return self.compute(t)
        key = (t.number, t.datetime_start)
        if key not in self._kept:
            self._kept[key] = self.compute(t)
        return self._kept[key]

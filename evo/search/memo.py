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
    afresh each time.

    A storage hands out the same object for a finished trial on every read (Optuna's cached RDB
    storage and its in-memory one do), so each value is also kept by that object's identity, the
    object held with it so that its id cannot be reused: at a thousand trials and several scans an
    ask, hashing the (number, start time) key was a tenth of the ask."""

    def __init__(self, compute: Callable[[FrozenTrial], T]) -> None:
        self.compute = compute
        self._kept: dict[tuple[int, datetime], T] = {}
        self._by_object: dict[int, tuple[FrozenTrial, T]] = {}

    def __call__(self, t: FrozenTrial) -> T:
        hit = self._by_object.get(id(t))
        if hit is not None and hit[0] is t:
            return hit[1]
        if not t.state.is_finished() or t.datetime_start is None:
            return self.compute(t)
        key = (t.number, t.datetime_start)
        if key not in self._kept:
            self._kept[key] = self.compute(t)
        self._by_object[id(t)] = (t, self._kept[key])
        return self._kept[key]

"""evo/gpu/references.py: the worker's cache of expected outputs (on CPU tensors): made once per
key, kept as a copy the caller's tensor cannot change, the least recently used dropped past the
byte budget, and one too large for the budget not kept at all."""

from __future__ import annotations

from collections.abc import Callable

import torch

from evo.gpu.gate import Expected
from evo.gpu.references import ReferenceCache


def made(value: float, n: int = 4, calls: list[float] | None = None) -> Callable[[], Expected]:
    """A maker of an Expected of ``n`` times ``value``, noting each call in ``calls``."""
    def make() -> Expected:
        if calls is not None:
            calls.append(value)
        return Expected(torch.full((n,), value, dtype=torch.float32), (value,))
    return make


def test_a_key_is_made_once_and_its_copy_is_not_the_callers() -> None:
    cache, calls = ReferenceCache(max_bytes=1024), list[float]()
    first = cache.get("a", made(1.0, calls=calls), "cpu")
    first.ref.fill_(9.0)                           # what the first check got is its own tensor
    again = cache.get("a", made(2.0, calls=calls), "cpu")
    assert calls == [1.0] and again.own_errs == (1.0,)
    assert torch.equal(again.ref, torch.full((4,), 1.0))
    assert (cache.misses, cache.hits) == (1, 1)


def test_the_least_recently_used_goes_first_past_the_budget() -> None:
    cache, calls = ReferenceCache(max_bytes=2 * 16), list[float]()     # two keys of 4 float32s
    cache.get("a", made(1.0, calls=calls), "cpu")
    cache.get("b", made(2.0, calls=calls), "cpu")
    cache.get("a", made(1.0, calls=calls), "cpu")            # a is now the most recently used
    cache.get("c", made(3.0, calls=calls), "cpu")            # so b goes
    assert cache.nbytes == 32
    cache.get("a", made(1.0, calls=calls), "cpu")
    cache.get("b", made(2.0, calls=calls), "cpu")
    assert calls == [1.0, 2.0, 3.0, 2.0]


def test_one_larger_than_the_budget_is_returned_but_not_kept() -> None:
    cache, calls = ReferenceCache(max_bytes=8), list[float]()
    assert cache.get("big", made(5.0, calls=calls), "cpu").own_errs == (5.0,)
    cache.get("big", made(5.0, calls=calls), "cpu")
    assert calls == [5.0, 5.0] and cache.nbytes == 0

"""A worker's baseline cache (evo/gpu/baselines.py): measured once, again on schedule, refusals
remembered, inherited entries kept only where it has none, fresh measurements handed out once."""

from __future__ import annotations

from evo.gpu.baselines import BaselineCache
from evo.results import Shape, Timing

F1 = Shape("F1", 1, 8, 512, 64, False)


def recorder(calls: list[tuple[str, ...]], refuse: str = ""):
    def measure(shape: Shape, backends: tuple[str, ...]) -> list[Timing]:
        calls.append(backends)
        return [Timing(shape, b, 10.0 + len(calls), 0.0, 0.0) for b in backends if b != refuse]
    return measure


def test_a_baseline_is_measured_once_then_again_every_so_many_uses() -> None:
    cache, calls = BaselineCache(), []
    assert [t.median_us for t in cache.get(F1, ("a", "b"), 2, recorder(calls))] == [11.0, 11.0]
    cache.uses += 1
    assert [t.median_us for t in cache.get(F1, ("b",), 2, recorder(calls))] == [11.0] and len(calls) == 1
    cache.uses += 1
    assert [t.median_us for t in cache.get(F1, ("a", "b"), 2, recorder(calls))] == [12.0, 12.0]
    assert calls == [("a", "b"), ("a", "b")]


def test_a_backend_that_cannot_time_a_case_is_not_asked_again_until_it_ages() -> None:
    cache, calls = BaselineCache(), []
    assert [t.backend for t in cache.get(F1, ("a", "fa4"), 5, recorder(calls, refuse="fa4"))] == ["a"]
    assert [t.backend for t in cache.get(F1, ("a", "fa4"), 5, recorder(calls, refuse="fa4"))] == ["a"]
    assert calls == [("a", "fa4")]


def test_inherited_baselines_fill_only_what_is_missing_and_fresh_ones_are_drained_once() -> None:
    cache, calls = BaselineCache(), []
    cache.get(F1, ("a",), 5, recorder(calls))
    cache.inherit([Timing(F1, "a", 1.0, 1.0, 1.0), Timing(F1, "b", 2.0, 2.0, 2.0)])
    assert [t.median_us for t in cache.get(F1, ("a", "b"), 5, recorder(calls))] == [11.0, 2.0]
    assert [t.backend for t in cache.drain()] == ["a"] and cache.drain() == []


def test_a_ramped_cache_measures_again_after_2_4_and_8_uses_then_on_schedule() -> None:
    for ramp, expected in ((True, [0, 2, 6, 14, 30, 46]), (False, [0, 16, 32, 48])):
        cache, calls, at = BaselineCache(ramp=ramp), [], []
        for use in range(50):
            cache.uses = use
            n = len(calls)
            cache.get(F1, ("a",), 16, recorder(calls))
            if len(calls) > n:
                at.append(use)
        assert at == expected, ramp


def test_an_inherited_entry_counts_as_a_first_measurement_on_the_ramp() -> None:
    cache, calls = BaselineCache(ramp=True), []
    cache.inherit([Timing(F1, "a", 1.0, 1.0, 1.0)])
    cache.uses = 1
    assert [t.median_us for t in cache.get(F1, ("a",), 16, recorder(calls))] == [1.0]
    cache.uses = 2
    assert [t.median_us for t in cache.get(F1, ("a",), 16, recorder(calls))] == [11.0]

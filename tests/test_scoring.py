"""Speedups, scores and edge effects from timings."""

from __future__ import annotations

import math

import pytest

from evo.errors import EvoError
from evo.results import Shape, Timing
from evo.scoring import edge_effect, geomean, score, speedups

F1 = Shape("F1", 1, 8, 512, 64, False)
F1C = Shape("F1", 1, 8, 512, 64, True)
F2 = Shape("F2", 1, 16, 1024, 64, False)


def t(shape: Shape, backend: str, median: float) -> Timing:
    return Timing(shape, backend, median, median * 0.9, median * 1.1)


def timed(evo: dict[Shape, float], base: dict[Shape, float], baseline: str = "sdpa_default") -> list[Timing]:
    return [t(s, "evo", m) for s, m in evo.items()] + [t(s, baseline, m) for s, m in base.items()]


def test_speedup_is_baseline_over_candidate() -> None:
    assert speedups(timed({F1: 5.0}, {F1: 10.0})) == {F1.tag: 2.0}


def test_causal_and_full_are_different_cases() -> None:
    assert speedups(timed({F1: 5.0, F1C: 4.0}, {F1: 10.0, F1C: 4.0})) == {F1.tag: 2.0, F1C.tag: 1.0}


def test_speedup_needs_the_named_baseline() -> None:
    assert speedups(timed({F1: 5.0}, {F1: 10.0}, "sdpa_flash"), "sdpa_default") == {}


def test_remeasurement_replaces_older_timing() -> None:
    assert speedups(timed({F1: 5.0}, {F1: 10.0}) + [t(F1, "sdpa_default", 20.0)]) == {F1.tag: 4.0}


def test_score_is_geometric_mean() -> None:
    assert score(timed({F1: 1.0, F2: 1.0}, {F1: 2.0, F2: 8.0})) == pytest.approx(4.0)


def test_score_over_a_selection() -> None:
    assert score(timed({F1: 1.0, F2: 1.0}, {F1: 2.0, F2: 8.0}), cases=[F2]) == pytest.approx(8.0)


@pytest.mark.parametrize("cases", [[F1, F2], None])
def test_score_without_needed_timings_is_an_error(cases: list[Shape] | None) -> None:
    timings = timed({F1: 1.0}, {F1: 2.0}) if cases else []
    with pytest.raises(EvoError):
        score(timings, cases=cases)


def test_geomean_of_nothing_is_an_error() -> None:
    with pytest.raises(EvoError):
        geomean([])


def test_edge_effect_uses_common_cases_only() -> None:
    parent = timed({F1: 2.0}, {F1: 2.0})
    child = timed({F1: 1.0, F2: 1.0}, {F1: 2.0, F2: 100.0})
    assert edge_effect(parent, child) == pytest.approx(2.0)


def test_edge_effect_without_common_cases_is_none() -> None:
    assert edge_effect(timed({F1: 1.0}, {F1: 1.0}), timed({F2: 1.0}, {F2: 1.0})) is None


def test_edge_effect_is_symmetric_inverse() -> None:
    a, b = timed({F1: 3.0, F2: 1.0}, {F1: 6.0, F2: 2.0}), timed({F1: 2.0, F2: 1.0}, {F1: 6.0, F2: 2.0})
    assert math.isclose(edge_effect(a, b) * edge_effect(b, a), 1.0)

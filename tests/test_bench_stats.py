"""Quartiles and the Mann-Whitney U test of the sampler benchmark, censored runs included."""

from __future__ import annotations

import math
import random

import pytest

from evo.samplerbench.stats import mann_whitney, quantile, quartiles, ranks

INF = math.inf


def test_quartiles_are_values_some_run_needed() -> None:
    xs = [7, 3, 10, 1, 4, 9]
    assert quartiles(xs) == (3, 4, 9)
    runs = [random.Random(s).randrange(99) for s in range(50)]
    assert all(q in runs for q in quartiles(runs))


def test_a_quartile_on_censored_runs_is_censored_not_interpolated() -> None:
    assert quartiles([5, 8, INF, INF]) == (5, 8, INF)
    assert quantile([5, INF, INF], 0.5) == INF


def test_ties_share_their_average_rank() -> None:
    assert ranks([10, INF, 3, 10, INF]) == [2.5, 4.5, 1.0, 2.5, 4.5]


def test_u_test_against_a_hand_computed_case() -> None:
    # x = [1, 2], y = [3, 4, 5]: U = 0, no ties, mu = 3, var = 2*3*6/12 = 3
    u, p = mann_whitney([1, 2], [3, 4, 5], "less")
    assert u == 0 and p == pytest.approx(0.5 * math.erfc(2.5 / math.sqrt(3) / math.sqrt(2)))
    assert mann_whitney([1, 2], [3, 4, 5])[1] == pytest.approx(2 * p)


def test_identical_samples_give_p_one() -> None:
    assert mann_whitney([INF] * 5, [INF] * 7)[1] == 1.0


@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_u_test_agrees_with_scipy(alternative: str) -> None:
    stats = pytest.importorskip("scipy.stats")
    r = random.Random(7)
    x = [r.choice([2, 3, 5, 8, 13, INF]) for _ in range(50)]
    y = [r.choice([5, 8, 13, 21, INF]) for _ in range(50)]
    big = lambda v: [1e9 if math.isinf(a) else a for a in v]  # noqa: E731
    ref = stats.mannwhitneyu(big(x), big(y), alternative=alternative, method="asymptotic")
    u, p = mann_whitney(x, y, alternative)
    assert (u, p) == (pytest.approx(ref.statistic), pytest.approx(ref.pvalue))

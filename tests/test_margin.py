"""GREEN's margin (evo.gpu.margin): the worst error share per head dim, and what promote would refuse."""

from __future__ import annotations

import math

import pytest

from evo.gpu.margin import TOLERANCE_SHARE, over_share, worst_shares
from evo.results import CheckResult, Shape


def check(D: int, err: float, tol: float = 1e-2) -> CheckResult:
    return CheckResult(Shape("G1", 1, 2, 64, D, False), 0, err <= tol, err, tol / 3, tol)


def test_the_worst_share_is_taken_per_head_dim() -> None:
    shares = worst_shares([check(64, 2e-3), check(64, 5e-3), check(128, 9e-3), check(128, 1e-3)])
    assert shares.keys() == {64, 128}
    assert shares[64] == pytest.approx(0.5) and shares[128] == pytest.approx(0.9)


def test_checks_without_a_finite_error_or_a_tolerance_are_skipped() -> None:
    assert worst_shares([check(64, math.nan), check(64, 1e-3, tol=0.0), check(128, math.inf)]) == {}


def test_head_dims_above_promotes_share_are_named_whatever_the_key_type() -> None:
    assert TOLERANCE_SHARE == 0.75
    assert over_share({64: 0.5, 128: 0.9}) == [128]
    assert over_share({"128": 0.76, "64": 0.8}) == [64, 128]
    assert over_share({"64": TOLERANCE_SHARE}) == [] and over_share({}) == []

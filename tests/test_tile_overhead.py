"""scripts/tile_overhead.py: causal tile counts, and the two-case split recovers the costs it
was given."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location(
    "tile_overhead", Path(__file__).resolve().parents[1] / "scripts" / "tile_overhead.py")
assert SPEC and SPEC.loader
MODEL = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(MODEL)


def test_causal_tiles_count_the_diagonal_and_a_ragged_tail() -> None:
    assert MODEL.tiles(256, 1, 128, 128) == (2, 1 + 2)
    assert MODEL.tiles(300, 2, 128, 128) == (6, 2 * (1 + 2 + 3))   # the last query tile sees all 3 KV tiles
    assert MODEL.tiles(256, 1, 192, 128) == (2, 2 + 2)               # rows 0-191 need keys 0-191: two tiles


@pytest.mark.parametrize("block_m, block_n", [(128, 128), (192, 128), (64, 96)])
def test_the_split_recovers_the_costs_it_was_built_from(block_m: int, block_n: int) -> None:
    a, b = 1.3, 2.1                       # us per KV tile, us per query tile (per SM)
    times = {}
    for case, (length, heads) in MODEL.CASES.items():
        m, k = MODEL.tiles(length, heads, block_m, block_n)
        times[case] = (a * k + b * m) / MODEL.SMS
    assert MODEL.split(times, block_m, block_n) == pytest.approx((a, b))

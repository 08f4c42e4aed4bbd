"""scripts/tile_balance.py mirrors flash_wgmma's persistent causal tile walker: every tile is
taken by exactly one CTA under both orders (a tile lost or taken twice is a wrong output), and
the per-section snake (CAUSAL_ORDER = "sections") evens out the work where the global one did not."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location(
    "tile_balance", Path(__file__).resolve().parents[1] / "scripts" / "tile_balance.py")
assert SPEC and SPEC.loader
MODEL = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(MODEL)


@pytest.mark.parametrize("length, bh, block_m, d, sms", [
    (4096, 128, 128, 128, 132),   # F8c: eight whole sections
    (8192, 32, 128, 128, 132),    # F7c: four
    (8192, 33, 128, 128, 132),    # four and a partial fifth
    (2048, 96, 192, 64, 132),     # F4c with three consumers: ragged query tiles
    (1, 5, 64, 64, 132),          # L = 1: fewer tiles than CTAs
    (300, 3, 128, 128, 7),        # one section, a few CTAs
    (1 << 17, 3, 128, 128, 132),  # a head larger than the L2 section: one head per section
    (5000, 17, 128, 64, 16),
])
def test_every_tile_is_taken_once(length: int, bh: int, block_m: int, d: int, sms: int) -> None:
    tiles = MODEL.Tiles(length, bh, block_m, d)
    for nth in (tiles.nth_global, tiles.nth_sections):
        taken = sorted(t for a in tiles.assignment(nth, sms) for t in a)
        assert taken == list(range(tiles.total)), nth.__name__


def test_the_section_snake_evens_out_the_long_causal_cases() -> None:
    for case, before in (("F7c", 1.25), ("F8c", 1.2)):
        got = MODEL.imbalance(MODEL.CASES[case])
        assert got["global"] > before and got["sections"] < 1.02 and got["greedy"] < 1.02, case
    assert MODEL.imbalance(MODEL.CASES["F4c"])["sections"] < MODEL.imbalance(MODEL.CASES["F4c"])["global"] - 0.05


@pytest.mark.parametrize("lq, lk, group, shift", [
    (4096, 4096, 4, 0), (1024, 8192, 8, 7168), (8192, 1024, 1, -7168), (300, 5000, 2, 4700)])
def test_every_tile_is_taken_once_with_gqa_and_two_lengths(lq: int, lk: int, group: int, shift: int) -> None:
    tiles = MODEL.Tiles(lq, 64, 128, 128, lk, group)
    for nth in (tiles.nth_global, tiles.nth_sections):
        taken = sorted(t for a in tiles.assignment(nth, 132) for t in a)
        assert taken == list(range(tiles.total)), nth.__name__
    # longest first within a section whatever the shift: a tile's work never grows along the order
    per = tiles.sec * tiles.n_m
    work = [MODEL.cost(tiles, t, lq, 128, 128, lk, shift) for t in range(tiles.total)]
    assert all(work[t] >= work[t + 1] for t in range(tiles.total - 1) if (t + 1) % per)

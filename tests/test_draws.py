"""GREEN's draws: reproducible from the stored seed, covering every kind a kernel could key on,
names that spell the inputs; promote's bucket checks."""

from __future__ import annotations

import math
import random

import pytest

from evo.gpu.draws import LAYOUT_KINDS, bucket_cases, bucket_lengths, bucket_top, case_name, drawn_cases, spike_factor
from evo.gpu.suites import DRAW_KINDS as KINDS
from evo.errors import EvoError
from evo.gpu.suites import DrawSettings, green_settings

PLAIN = tuple(k for k in KINDS if k not in LAYOUT_KINDS)   # drawn for a kernel without cache layouts
ALL_KEYS = [(d, dt, c) for d in (64, 128) for dt in ("fp16", "bf16") for c in (False, True)]
SETTINGS = green_settings().draws
assert SETTINGS is not None


def test_green_toml_draws_every_kind() -> None:
    assert SETTINGS.kinds == KINDS and SETTINGS.tile == 64 and SETTINGS.std[1] >= 3.0


def test_same_seed_same_cases_other_seed_other_cases() -> None:
    a = drawn_cases(SETTINGS, ALL_KEYS, 7)
    assert a == drawn_cases(SETTINGS, list(reversed(ALL_KEYS)), 7)
    assert a != drawn_cases(SETTINGS, ALL_KEYS, 8)


def test_one_case_per_kind_and_dtype_with_the_kernels_keys_only() -> None:
    keys = [(128, "bf16", True), (64, "fp16", False)]
    cases = drawn_cases(SETTINGS, keys, 3)
    assert len(cases) == len(PLAIN) * 2
    assert [c.shape.dtype for c in cases] == ["fp16", "bf16"] * len(PLAIN)
    assert all((c.shape.D, c.shape.dtype, c.shape.causal) in keys for c in cases)
    assert all(c.seeds == (0,) for c in cases)
    assert drawn_cases(SETTINGS, [], 3) == []


@pytest.mark.parametrize("seed", range(40))
def test_lengths_cover_what_a_kernel_could_key_on(seed: int) -> None:
    cases = drawn_cases(SETTINGS, ALL_KEYS, seed)
    by_kind = {k: [c.shape for c in cases[2 * i:2 * i + 2]] for i, k in enumerate(KINDS)}
    assert all(s.L == 1 for s in by_kind["one"])
    assert all(2 <= s.L < SETTINGS.tile for s in by_kind["short"])
    assert all(s.L % 32 in (0, 1, 31) for s in by_kind["edge"])
    assert all(s.L % 2 == 1 and SETTINGS.tile < s.L < 32 * SETTINGS.tile for s in by_kind["odd"])
    assert all(SETTINGS.long[0] <= s.L <= SETTINGS.long[1] and s.B * s.H <= 2 for s in by_kind["long"])
    assert all(c.spike > 0 for c in cases[10:12])                      # the spiked kind
    assert all(SETTINGS.max_heads >= s.B * s.H for s in (c.shape for c in cases[:2 * KINDS.index("wide")]))
    assert all(len(c.shape.case) <= 32 for c in cases)                 # the store's column


LONG = KINDS.index("long")


def _of_kind(kind: int, seeds: range = range(30)) -> list:
    return [c for seed in seeds for c in drawn_cases(SETTINGS, ALL_KEYS, seed)[2 * kind:2 * kind + 2]]


def test_scales_spreads_and_batches_vary_over_seeds() -> None:
    cases = [c for seed in range(30) for c in drawn_cases(SETTINGS, ALL_KEYS, seed)]
    assert 0.6 < sum(c.scale is not None for c in cases) / len(cases) < 0.9   # 3 in 4 non-default
    others = [c for i, k in enumerate(KINDS) if k not in ("long", "flat", "mixed", "long_kv") for c in _of_kind(i)]
    factors = [c.scale * math.sqrt(c.shape.D) for c in others if c.scale is not None]
    assert all(f <= 0.51 or f >= 1.99 for f in factors)                # far from the default
    assert min(factors) < 0.2 and max(factors) > 2.5
    assert max(c.std for c in cases) >= 3.5 and min(c.std for c in cases) <= 1.5
    assert {c.shape.B for c in cases} >= {1, 2, 3} and len({c.shape.H for c in cases}) >= 4
    assert {c.shape.causal for c in cases} == {False, True} and {c.shape.D for c in cases} == {64, 128}


def test_long_draws_keep_many_keys_at_large_magnitude() -> None:
    longs = _of_kind(LONG)
    assert longs and all(2.0 <= c.std <= 3.0 and c.spike == 0 for c in longs)
    assert all(c.scale is None or c.scale * math.sqrt(c.shape.D) <= 1.0 for c in longs)


def test_long_spiked_draws_stress_a_long_row() -> None:
    """A peaked row over many tiles (where a stale row maximum shows): long lengths, a spiked key,
    the stress scales and spreads of the short draws."""
    cases = _of_kind(KINDS.index("long_spiked"), range(40))
    assert cases and all(SETTINGS.long[0] <= c.shape.L <= SETTINGS.long[1] and c.shape.B * c.shape.H <= 2
                         and c.spike > 0 for c in cases)
    factors = [c.scale * math.sqrt(c.shape.D) for c in cases if c.scale is not None]
    assert factors and all(f <= 0.51 or f >= 1.99 for f in factors) and max(c.std for c in cases) > 3.0


def test_wide_draws_give_a_persistent_grid_several_tiles_a_cta() -> None:
    """More query tiles than an H100 or H200 has SMs (132) at the largest tile (192 rows), an
    odd length so each head's last tile is ragged."""
    cases = _of_kind(KINDS.index("wide"), range(40))
    lo, hi = SETTINGS.wide_heads
    assert cases and all(lo - 4 < c.shape.B * c.shape.H <= hi and c.shape.L % 2 == 1
                         and 4 * SETTINGS.tile < c.shape.L < 16 * SETTINGS.tile for c in cases)
    assert all(c.shape.B * c.shape.H * math.ceil(c.shape.L / 192) > 132 for c in cases)
    assert len({c.shape.B for c in cases}) >= 3 and {c.shape.causal for c in cases} == {False, True}


def test_a_new_kind_leaves_the_draws_of_the_kinds_before_it() -> None:
    """A stored salt still names the same cases for the kinds its evaluation drew."""
    older = DrawSettings(kinds=PLAIN[:-1])
    for seed in range(10):
        assert drawn_cases(SETTINGS, ALL_KEYS, seed)[:-2] == drawn_cases(older, ALL_KEYS, seed)


def test_a_spiked_key_reaches_the_spike_score() -> None:
    assert spike_factor(SETTINGS, 1.0, 1.0) == pytest.approx(200.0)
    assert spike_factor(SETTINGS, 0.5, 2.0) == pytest.approx(100.0)
    assert spike_factor(SETTINGS, 0.01, 1.0) == 8000.0                 # capped inside fp16's range


def test_the_name_spells_the_inputs() -> None:
    cases = drawn_cases(SETTINGS, ALL_KEYS, 5)
    i = next(i for i, c in enumerate(cases) if c.spike)
    c = cases[i]
    assert c.shape.case == case_name("R", i, c.scale, c.std, c.spike)
    assert c.shape.case.endswith(" spike") and f"sd={c.std:.1f}" in c.shape.case
    assert case_name("R", 3, None, 1.0, 0.0) == "R03 sd=1.0"
    assert case_name("P", 12, 0.0389, 2.6, 77.0) == "P12 sc=0.0389 sd=2.6 spike"


@pytest.mark.parametrize(("lo", "hi", "measured", "top"), [
    (1, 362, [128, 512], 362), (725, None, [1024, 2048], 4096), (5793, None, [8192], 16384), (1, None, [], 3)])
def test_bucket_top(lo: int, hi: int | None, measured: list[int], top: int) -> None:
    assert bucket_top(lo, hi, measured) == top


def test_bucket_lengths_are_its_edges_and_ragged_lengths_inside() -> None:
    got = bucket_lengths(363, 724, random.Random(1))
    assert {363, 364, 723, 724} <= set(got) and all(363 <= n <= 724 for n in got)
    assert len(got) >= 5 and got == sorted(set(got))
    assert bucket_lengths(1, 1, random.Random(0)) == [1]


def test_bucket_cases_are_the_routes_key_stressed() -> None:
    cases = bucket_cases(SETTINGS, (128, "bf16", True), 725, 1448, seed=9, start=4)
    assert [c.shape.case[:3] for c in cases] == [f"P{i:02d}" for i in range(4, 4 + len(cases))]
    assert all((c.shape.D, c.shape.dtype, c.shape.causal) == (128, "bf16", True) for c in cases)
    assert all(725 <= c.shape.L <= 1448 for c in cases)
    assert sum(c.spike > 0 for c in cases) == len(cases) // 2
    assert cases == bucket_cases(SETTINGS, (128, "bf16", True), 725, 1448, seed=9, start=4)


@pytest.mark.parametrize(("text", "error"), [
    ('kinds = ["one", "tiny"]', "unknown [draws] kind tiny"),
    ("scale = [3.0, 0.1]", "scale must be [low, high]"),
    ("tile = 2", "tile >= 4"),
])
def test_bad_draw_settings_are_one_line_errors(tmp_path, text: str, error: str) -> None:
    base = (tmp_path / "green.toml")
    base.write_text('seeds = [0]\n[tolerance]\nfloor = { fp16 = 5e-4, bf16 = 4e-3 }\n'
                    f'[draws]\n{text}\n[[case]]\nname = "G1"\nshape = [1, 1, 8, 16]\n')
    with pytest.raises(EvoError, match=error.replace("[", r"\[").replace("]", r"\]")):
        green_settings(base)


def test_no_draws_section_means_the_core_only(tmp_path) -> None:
    base = tmp_path / "green.toml"
    base.write_text('seeds = [0]\n[tolerance]\nfloor = { fp16 = 5e-4, bf16 = 4e-3 }\n'
                    '[[case]]\nname = "G1"\nshape = [1, 1, 8, 16]\n')
    assert green_settings(base).draws is None
    assert DrawSettings().kinds == KINDS


def test_the_input_axes_each_have_a_kind_of_their_own() -> None:
    """docs/trust.md's axes: flat and mixed softmax over long rows, heavy tails, exact ties, inputs
    placed inside one allocation, and serving-size batches of heads."""
    flat, mixed = _of_kind(KINDS.index("flat"), range(20)), _of_kind(KINDS.index("mixed"), range(20))
    assert all(c.inputs == "flat" and SETTINGS.long[0] <= c.shape.L and c.spike == 0 for c in flat)
    assert all(c.inputs == "mixed" and SETTINGS.long[0] <= c.shape.L and c.spike > 0 for c in mixed)
    for kind in ("heavy", "equal_keys", "placed"):
        assert all(c.inputs == kind for c in _of_kind(KINDS.index(kind), range(10)))
    many = _of_kind(KINDS.index("many_heads"), range(20))
    lo, hi = SETTINGS.many_heads
    assert all(lo - 64 < c.shape.B * c.shape.H <= hi for c in many)
    assert max(c.shape.L for c in many) <= SETTINGS.tile
    assert all(c.shape.case.split()[-1] == {"flat": "flat", "mixed": "mix"}[c.inputs] for c in flat + mixed)


def test_the_abi_v2_kinds_draw_grouped_heads_unequal_lengths_and_both_corners() -> None:
    """Each of issue 33's kinds draws the problem it names, over 30 seeds; together they put the
    causal mask at both corners, with rows that see no key among them."""
    kind = {k: [c.shape for c in _of_kind(KINDS.index(k))] for k in ("gqa", "mqa", "chunk", "q_longer", "cross", "long_kv")}
    assert all(s.H % s.Hkv == 0 and s.Hkv < s.H for s in kind["gqa"]) and len({s.group for s in kind["gqa"]}) >= 4
    assert all(s.Hkv == 1 and s.H >= 2 for s in kind["mqa"])
    assert all(s.Lk > s.L for s in kind["chunk"]) and all(s.Lk < s.L for s in kind["q_longer"])
    assert any(s.Lk > s.L for s in kind["cross"]) and any(s.Lk < s.L for s in kind["cross"])
    assert all(SETTINGS.long[0] <= s.Lk <= SETTINGS.long[1] and 2 * SETTINGS.tile >= s.L for s in kind["long_kv"])
    every = [s for shapes in kind.values() for s in shapes]
    assert {s.align for s in every if s.causal} == {"top_left", "bottom_right"}
    assert any(s.causal and s.shift < 0 for s in every)              # q_longer at the bottom right
    assert all(len(s.case) <= 32 for s in every)


@pytest.mark.parametrize("seed", range(200))
def test_every_evaluation_draws_what_catches_each_abi_v2_fault(seed: int) -> None:
    """Not by chance: each dtype gets a case with two or more K/V heads of two or more query heads
    each (wrong_kv_head), and a causal bottom-right one with Lk > Lq (top_left_only,
    causal_off_by_one, ignore_lk), whatever the seed (the GPU run of b53ddde met a salt whose
    grouped draws all had one K/V head: the planted wrong_kv_head passed)."""
    for keys in (ALL_KEYS, [(128, "bf16", True), (64, "fp16", False), (64, "fp16", True)]):
        cases = [c.shape for c in drawn_cases(SETTINGS, keys, seed)]
        for dt in ("fp16", "bf16"):
            mine = [s for s in cases if s.dtype == dt]
            assert any(s.Hkv >= 2 and s.group >= 2 for s in mine)
            assert any(s.causal and s.align == "bottom_right" and s.Lk > s.L for s in mine)

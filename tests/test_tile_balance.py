"""scripts/tile_balance.py mirrors flash_wgmma's persistent causal tile walker: every tile is
taken by exactly one CTA under each order (a tile lost or taken twice is a wrong output), the
per-section snake (CAUSAL_ORDER = "sections") evens out the work where the global one did not, and
SECTION_DEAL rotate keeps sections of fewer tiles than CTAs from leaving the same CTAs idle, and
even (equal sections) keeps a small last section from making a tail. The template's own Tiles struct,
compiled for the host, walks the tiles exactly as the model does, and its TILE_SCHED dynamic scheduler
takes every tile once and leaves its counter at zero, whatever order the CTAs draw in."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from collections.abc import Iterator
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
    for mb, even in ((8, False), (32, False), (8, True), (32, True)):
        tiles = MODEL.Tiles(length, bh, block_m, d, section=mb << 20, even=even)
        for nth in (tiles.nth_global, tiles.nth_sections, tiles.nth_rotated):
            taken = sorted(t for a in tiles.assignment(nth, min(sms, tiles.total)) for t in a)
            assert taken == list(range(tiles.total)), (nth.__name__, mb, even)


def test_the_section_snake_evens_out_the_long_causal_cases() -> None:
    for case, before in (("F7c", 1.25), ("F8c", 1.2)):
        got = MODEL.imbalance(MODEL.CASES[case])
        assert got["global"] > before and got["sections"] < 1.02 and got["greedy"] < 1.02, case
    assert MODEL.imbalance(MODEL.CASES["F4c"])["sections"] < MODEL.imbalance(MODEL.CASES["F4c"])["global"] - 0.05


@pytest.mark.parametrize("lq, lk, group, shift", [
    (4096, 4096, 4, 0), (1024, 8192, 8, 7168), (8192, 1024, 1, -7168), (300, 5000, 2, 4700)])
def test_every_tile_is_taken_once_with_gqa_and_two_lengths(lq: int, lk: int, group: int, shift: int) -> None:
    tiles = MODEL.Tiles(lq, 64, 128, 128, lk, group)
    for nth in (tiles.nth_global, tiles.nth_sections, tiles.nth_rotated):
        taken = sorted(t for a in tiles.assignment(nth, 132) for t in a)
        assert taken == list(range(tiles.total)), nth.__name__
    # longest first within a section whatever the shift: a tile's work never grows along the order
    per = tiles.sec * tiles.n_m
    work = [MODEL.cost(tiles, t, lq, 128, 128, lk, shift) for t in range(tiles.total)]
    assert all(work[t] >= work[t + 1] for t in range(tiles.total - 1) if (t + 1) % per)


@pytest.mark.parametrize("n_m, sec, bh, g", [
    (4, 16, 32, 128),    # L3c at 16 MB: two sections of 64 tiles on 128 CTAs
    (4, 8, 32, 128),     # at 8 MB: four of 32
    (11, 10, 128, 132),  # L5c at 8 MB: 110-tile sections and a last one of 88
    (20, 10, 55, 132),   # one whole round (odd: the partial round goes backward), a last section of 100
    (66, 4, 13, 132),    # two whole rounds and no partial one, a last section of 66
    (7, 19, 140, 132),   # 133-tile sections: one tile past a round
    (131, 1, 9, 132),    # one tile short of a round
    (1, 1, 10, 3), (5, 1, 4, 3), (3, 3, 11, 4)])
def test_the_rotated_deal_takes_every_tile_once_and_evens_out_the_counts(n_m: int, sec: int, bh: int, g: int) -> None:
    """Sections of fewer and of more tiles than CTAs, whole rounds odd and even, a last smaller
    section or none: every tile once, and no CTA takes more than one tile over any other."""
    tiles = MODEL.Tiles(n_m, bh, 1, 128)
    tiles.sec = sec
    assignment = tiles.assignment(tiles.nth_rotated, g)
    assert sorted(t for a in assignment for t in a) == list(range(tiles.total))
    counts = [len(a) for a in assignment]
    assert max(counts) - min(counts) <= 1, counts


def test_rotating_the_sections_mends_the_chunk_that_smaller_sections_left_to_half_the_grid() -> None:
    """L3c (32/8 heads, 512 queries on 8192 keys): 128 tiles on 128 CTAs. At 16 and 8 MB its sections
    hold 64 and 32 tiles; dealt from CTA 0 each time, the busiest CTA has 2x and 4x the mean (measured
    2026-11-28s: 116 -> 180 and 353 us); rotated, every CTA takes one tile."""
    for mb, before in ((16, 2.0), (8, 4.0)):
        got = MODEL.llm_imbalance(MODEL.LLM_CASES["L3c"], mb)
        assert got["sections"] > before and got["rotated"] < 1.03, (mb, got)
    l5c = MODEL.llm_imbalance(MODEL.LLM_CASES["L5c"], 8)
    assert l5c["rotated"] < l5c["sections"] - 0.5, l5c


def test_equal_sections_take_the_tail_off_the_d96_case() -> None:
    """L5c (4 x 32 heads of 786 KB of K and V, 2048 rows): at 32 MB, 42 heads a section leave a last
    section of 2 heads, a tail of its own; four sections of 32 heads do not (the package's fp16 kernel
    there has two consumers, 128 x 128 tiles)."""
    got = MODEL.llm_imbalance(MODEL.LLM_CASES["L5c"], 32, tile=(128, 128))
    assert got["sections"] > 1.1 and got["rotated"] > 1.1 and got["even"] < 1.01, got
    tiles = MODEL.Tiles(2048, 128, 128, 96, section=32 << 20, even=True)
    assert tiles.sec == 32 and MODEL.Tiles(2048, 128, 128, 96, section=32 << 20).sec == 42


HARNESS = r"""
#include <algorithm>
#include <cstdio>
using std::max; using std::min;
struct Dim { unsigned x, y, z; };
Dim blockIdx, gridDim;
#define __device__
#define __forceinline__
#include "tiles.h"
int main() {   // per launch: each CTA's tiles, as the kernel walks them, one line a CTA
    int lq, lk, bh, hq, hkv, block_m, d, sms;
    while (std::scanf("%d %d %d %d %d %d %d %d", &lq, &lk, &bh, &hq, &hkv, &block_m, &d, &sms) == 8) {
        Tiles<true, true> t(lq, lk, bh, hq, hkv, block_m, d);
        gridDim.x = unsigned(min(sms, t.total));
        for (unsigned c = 0; c < gridDim.x; ++c) {
            blockIdx.x = c;
            for (int k = 0, tile = t.nth(0); tile < t.total; tile = t.nth(++k)) std::printf("%d ", tile);
            std::printf("\n");
        }
    }
}
"""
LAUNCHES = [(512, 8192, 32, 32, 8, 128, 128, 128), (2048, 2048, 128, 32, 32, 128, 96, 132),
            (2048, 2048, 128, 32, 32, 192, 96, 132), (512, 512, 512, 32, 8, 128, 128, 132),
            (4096, 4096, 32, 32, 8, 128, 128, 132), (333, 5000, 17, 17, 1, 64, 64, 16), (300, 150, 7, 7, 7, 128, 128, 5)]


def _run_rendered(params: dict[str, object], last: str, harness: str, runs: list[tuple[int, ...]],
                  tmp_path: Path) -> Iterator[str]:
    """Render flash_wgmma at ``params``, take its source from ``struct Tiles`` to the end of struct ``last``
    (with the ORDER and L2_SECTION constants) into tiles.h, compile ``harness`` (which includes it) for the
    host and run it on ``runs``, one line of numbers each: its output's lines."""
    from evo.family.render import render
    from evo.family.space import make_candidate

    source = render(make_candidate("flash_wgmma", params)).source.splitlines()
    start = next(i for i, line in enumerate(source) if line == "struct Tiles {") - 1
    end = source.index("};", source.index(f"struct {last} {{", start))
    consts = [line for line in source if line.startswith(("constexpr int ORDER =", "constexpr long long L2_SECTION ="))]
    (tmp_path / "tiles.h").write_text("\n".join([*consts, *source[start:end + 1]]) + "\n")
    (tmp_path / "walk.cpp").write_text(harness)
    subprocess.run(["g++", "-std=c++17", "-O1", "-o", str(tmp_path / "walk"), str(tmp_path / "walk.cpp")],
                   check=True, capture_output=True)
    stdin = "\n".join(" ".join(map(str, run)) for run in runs)
    return iter(subprocess.run([str(tmp_path / "walk")], input=stdin, capture_output=True, text=True,
                               check=True).stdout.splitlines())


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
@pytest.mark.parametrize("deal", ["restart", "rotate", "even"])
def test_the_model_walks_the_tiles_as_the_rendered_template_does(deal: str, tmp_path: Path) -> None:
    """The template's Tiles struct, rendered at 8 MB sections and compiled for the host, deals every
    launch's tiles to the same CTAs in the same order as the model (so what the model says of the
    deals is said of the kernel's code, not of a copy of it)."""
    lines = _run_rendered({"CAUSAL_ORDER": "sections", "SECTION_DEAL": deal, "L2_SECTION_MB": 8}, "Tiles", HARNESS,
                          LAUNCHES, tmp_path)
    for lq, lk, bh, hq, hkv, block_m, d, sms in LAUNCHES:
        tiles = MODEL.Tiles(lq, bh, block_m, d, lk, hq // hkv, 8 << 20, deal == "even")
        nth = tiles.nth_sections if deal == "restart" else tiles.nth_rotated
        for mine in tiles.assignment(nth, min(sms, tiles.total)):
            assert [int(t) for t in next(lines).split()] == mine, (deal, lq, lk, bh)


SCHED_HARNESS = r"""
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>
using std::max; using std::min;
struct Dim { unsigned x, y, z; };
Dim blockIdx, gridDim;
#define __device__
#define __forceinline__
// one thread plays every CTA's producer in turn, so the atomics are plain read-modify-writes
unsigned atomicAdd(unsigned* p, unsigned v) { const unsigned old = *p; *p += v; return old; }
unsigned atomicExch(unsigned* p, unsigned v) { const unsigned old = *p; *p = v; return old; }
#include "tiles.h"
// per launch (Lq, Lk, B Hq, Hq, Hkv, BLOCK_M, D, CTAs, launches, counter or null): the CTAs' producers
// draw in a random order, a CTA at a time; prints every tile taken as CTA:tile, then the counter after each launch
int main() {
    int lq, lk, bh, hq, hkv, block_m, d, g, launches, use;
    std::mt19937 rng(7);
    while (std::scanf("%d %d %d %d %d %d %d %d %d %d", &lq, &lk, &bh, &hq, &hkv, &block_m, &d, &g, &launches, &use) == 10) {
        const Tiles<true, true> t(lq, lk, bh, hq, hkv, block_m, d);
        unsigned counter = 0;
        gridDim.x = unsigned(g);
        for (int launch = 0; launch < launches; ++launch) {
            std::vector<int> tile(g), tc(g, 0), live;
            for (int c = 0; c < g; ++c) {
                blockIdx.x = unsigned(c);
                tile[c] = Sched<true, true>{t, use ? &counter : nullptr}.first();
                if (tile[c] < t.total) live.push_back(c);
            }
            while (!live.empty()) {
                const size_t i = rng() % live.size();
                const int c = live[i];
                blockIdx.x = unsigned(c);
                std::printf("%d:%d ", c, tile[c]);
                tile[c] = Sched<true, true>{t, use ? &counter : nullptr}.next(tc[c]++);
                if (tile[c] >= t.total) { live[i] = live.back(); live.pop_back(); }
            }
            std::printf("\ncounter %u\n", counter);
        }
    }
}
"""
# (Lq, Lk, B Hq, Hq, Hkv, BLOCK_M, D, CTAs): many tiles a CTA, one each, fewer tiles than CTAs, one tile
SCHED_LAUNCHES = [(2048, 2048, 256, 32, 1, 128, 128, 132), (512, 8192, 32, 32, 8, 128, 128, 128),
                  (1000, 1000, 64, 16, 4, 128, 128, 132), (100, 100, 3, 3, 3, 128, 128, 7), (64, 64, 1, 1, 1, 128, 64, 1),
                  (333, 5000, 17, 17, 1, 64, 64, 16)]


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
def test_the_dynamic_scheduler_takes_every_tile_once_and_leaves_its_counter_at_zero(tmp_path: Path) -> None:
    """TILE_SCHED dynamic's Sched, rendered and compiled for the host, with the CTAs' draws interleaved at
    random: three launches back to back on one counter each take every tile exactly once (a counter a
    launch left above zero would skip the next launch's first tiles), the counter is zero after each, also
    with more CTAs than tiles; with no counter (null) the walk is the static deal's, tile for tile."""
    runs = [(*launch, 3, 1) for launch in SCHED_LAUNCHES] + [(*launch, 1, 0) for launch in SCHED_LAUNCHES]
    runs.append((100, 100, 3, 3, 3, 128, 128, 9, 3, 1))          # 9 CTAs for 3 tiles: a grid past the tiles
    lines = _run_rendered({"TILE_SCHED": "dynamic", "PRODUCER_REGS": 32}, "Sched", SCHED_HARNESS, runs, tmp_path)
    for lq, lk, bh, hq, hkv, block_m, d, g, launches, use in runs:
        tiles = MODEL.Tiles(lq, bh, block_m, d, lk, hq // hkv)
        for _ in range(launches):
            mine: list[list[int]] = [[] for _ in range(g)]
            for pair in next(lines).split():
                c, t = map(int, pair.split(":"))
                mine[c].append(t)
            assert sorted(t for a in mine for t in a) == list(range(tiles.total)), (lq, bh, g, use)
            assert next(lines) == "counter 0", (lq, bh, g, use)
        if not use:   # no counter: each CTA's tiles, in order, are the static deal's (CAUSAL_ORDER global)
            assert mine == tiles.assignment(tiles.nth_global, g), (lq, bh, g)

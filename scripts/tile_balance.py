"""How evenly flash_wgmma's persistent causal schedules share the work among CTAs: a static model.

The functions mirror the template's `Tiles` (templates/flash_wgmma/kernel.cu.j2) line for line, and
tests/test_tile_balance.py compiles the rendered struct for the host to check that it deals every
tile to the same CTA in the same order. `at` maps a tile index to (query tile, head) under the
L2-section order; `nth_global` is ORDER 2 (one back-and-forth snake over all sections' tiles);
`nth_sections` is ORDER 3 with SECTION_DEAL restart (each section dealt by a snake of its own, its
first round from CTA 0); `nth_rotated` is ORDER 3 with SECTION_DEAL rotate (each section's snake
starts where the last one's partial round ended, so the CTAs that take a partial round, and those
that take a section's longest tiles, move round the grid from section to section); and
``Tiles(..., even=True)`` sizes the sections as SECTION_DEAL even does (as many as the L2 section
needs, of equal heads). A tile's cost is its KV tiles (kernel ABI v2: the keys its rows see, j <= i
+ shift below Lk) plus one for its prologue and epilogue; the busiest CTA's cost over the mean is
the schedule's slowdown against a perfect split, and a greedy list schedule in the same tile order
is the reference: TILE_SCHED dynamic's ticket counter, less the STAGES K/V tiles before a tile's end
at which its CTA draws the next.

    python scripts/tile_balance.py          # the long causal FAST cases, 132 SMs
    python scripts/tile_balance.py --llm    # the causal LLM cases at each L2 section size

A section with fewer tiles than the grid has CTAs is where the orders part: ORDER 3 deals every
section from CTA 0, so under 16 MB sections L3c's two sections of 64 tiles both go to CTAs 0-63 and
CTAs 64-127 idle (measured 2026-11-28s: 180 us against 116 at 32 MB).
"""

from __future__ import annotations

import argparse
import heapq
from collections.abc import Callable

L2_SECTION = 32 << 20
CASES = {"F4c": (8, 12, 2048, 64), "F5c": (1, 12, 8192, 64), "F6c": (1, 12, 4096, 128),
         "F7c": (2, 16, 8192, 128), "F8c": (4, 32, 4096, 128)}
# The persistent causal LLM cases (acceptance/llm.toml): B, Hq, Hkv, Lq, Lk, D, mask at the bottom
# right; with BLOCK_M and BLOCK_N of llm6's best (29a1cf7bf11c: two consumers at D=128, three at D=96).
# L4c (D=256) is left out: D=256 is never persistent, the hardware deals its CTAs as SMs free up.
LLM_CASES = {"L1c": (1, 32, 8, 4096, 4096, 128, False), "L2c": (8, 64, 8, 2048, 2048, 128, False),
             "L3c": (1, 32, 8, 512, 8192, 128, True), "L5c": (4, 32, 32, 2048, 2048, 96, False),
             "L6c": (8, 32, 1, 2048, 2048, 128, False), "L8c": (16, 32, 8, 512, 512, 128, False)}
TILE = {96: (192, 80), 128: (128, 128)}   # D: (BLOCK_M, BLOCK_N)
# L5c's two kernels in the package at 2026-11-28s: bf16 three consumers (594b392bfa05), fp16 two (6c23f54583ae)
L5C_TILES = ((192, 112), (128, 128))


class Tiles:
    """The template's tile walker for one causal launch (persistent, ORDER 2 or 3)."""

    def __init__(self, length: int, bh: int, block_m: int, d: int, lk: int | None = None,
                 group: int = 1, section: int = L2_SECTION, even: bool = False) -> None:
        """``length`` is Lq, ``lk`` Lk (default Lq), ``bh`` B * Hq, ``group`` Hq / Hkv, ``section``
        the L2 section's bytes (L2_SECTION_MB << 20), ``even`` SECTION_DEAL even's equal sections."""
        lk = length if lk is None else lk
        self.n_m = -(-length // block_m)
        self.bh_count = bh
        self.total = self.n_m * bh
        # the template's L2_SECTION * Hq / (4 Lk D Hkv), Hq = group * Hkv
        self.sec = int(max(1, min(bh, section * group // (4 * lk * d))))
        if even:                  # the template's even(): as many sections, of equal heads
            n = -(-bh // self.sec)
            self.sec = -(-bh // n)

    def at(self, tile: int) -> tuple[int, int]:
        """(query tile index, batch*head) of ``tile``: within a section, longest first."""
        first = tile // (self.sec * self.n_m) * self.sec
        v = tile % (self.sec * self.n_m)
        heads = min(self.sec, self.bh_count - first)
        return self.n_m - 1 - v // heads, first + v % heads

    def nth_global(self, k: int, c: int, g: int) -> int:
        return k * g + (g - 1 - c if k & 1 else c)

    def in_section(self, tiles: int, c: int, g: int) -> int:
        rounds = (tiles + g - 1) // g
        last = rounds - 1
        return last + (1 if (g - 1 - c if last & 1 else c) < tiles - last * g else 0)

    def nth_sections(self, k: int, c: int, g: int) -> int:
        per, full = self.sec * self.n_m, self.bh_count // self.sec
        mine = self.in_section(per, c, g)
        s, j = full, k - full * mine
        if mine > 0 and k < full * mine:
            s, j = divmod(k, mine)
        elif full * per == self.total or j >= self.in_section(self.total - full * per, c, g):
            return self.total
        return s * per + j * g + (g - 1 - c if j & 1 else c)

    @staticmethod
    def before(s: int, r: int, c: int, g: int) -> int:
        """How many of the ring windows [0, r), [r, 2r), ... [(s-1) r, s r), taken mod ``g``, hold CTA
        ``c``: the partial rounds CTA ``c`` took in the ``s`` whole sections before section ``s``."""
        return (s * r - c + g - 1) // g if s * r > c else 0

    def nth_rotated(self, k: int, c: int, g: int) -> int:
        """ORDER 3 with SECTION_DEAL rotate or even: section s's partial round (r = per mod g tiles) goes to the ring
        window [s r, s r + r) of CTAs, so its snake starts at CTA s r (that round forward) or s r + r
        (backward); the last, smaller section continues the windows."""
        per, full = self.sec * self.n_m, self.bh_count // self.sec
        q, r = divmod(per, g)
        lo, hi = 0, full          # the last section s with s q + before(s) <= k: it holds tile k
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if mid * q + self.before(mid, r, c, g) <= k:
                lo = mid
            else:
                hi = mid - 1
        tiles = per if lo < full else self.total - full * per
        j = k - (lo * q + self.before(lo, r, c, g))
        qs, rs = divmod(tiles, g)
        cs = (c - (lo * r + (rs if qs & 1 else 0)) % g + g) % g
        if tiles == 0 or j >= qs + (1 if (g - 1 - cs if qs & 1 else cs) < rs else 0):
            return self.total
        return lo * per + j * g + (g - 1 - cs if j & 1 else cs)

    def assignment(self, nth: Callable[[int, int, int], int], g: int) -> list[list[int]]:
        """Each CTA's tiles, walked as the kernel walks them (until nth gives total)."""
        out = []
        for c in range(g):
            mine, k = [], 0
            while (t := nth(k, c, g)) < self.total:
                mine.append(t)
                k += 1
            out.append(mine)
        return out


def cost(tiles: Tiles, tile: int, length: int, block_m: int, block_n: int, lk: int | None = None,
         shift: int = 0) -> float:
    """KV tiles of a causal query tile (the keys its rows below Lq = ``length`` see, ``lk`` keys,
    j <= i + ``shift``) plus one."""
    mi, _ = tiles.at(tile)
    lk = length if lk is None else lk
    keys = max(0, min(lk, min(length, (mi + 1) * block_m) + shift))
    return -(-keys // block_n) + 1.0


def spread(tiles: Tiles, work: list[float], g: int) -> dict[str, float]:
    """Busiest CTA / mean under ORDER 2, ORDER 3 (SECTION_DEAL restart), ORDER 3 rotated and a greedy
    list schedule, for the per-tile ``work`` on a persistent grid of ``g`` CTAs (the host's min(tiles,
    SMs))."""
    g = min(g, tiles.total)
    mean = sum(work) / g
    out = {}
    for name, nth in (("global", tiles.nth_global), ("sections", tiles.nth_sections),
                      ("rotated", tiles.nth_rotated)):
        out[name] = max(sum(work[t] for t in a) for a in tiles.assignment(nth, g)) / mean
    heap = [0.0] * g
    for w in work:
        heapq.heapreplace(heap, heap[0] + w)
    out["greedy"] = max(heap) / mean
    return out


def imbalance(case: tuple[int, int, int, int], block_m: int = 128, block_n: int = 128,
              g: int = 132) -> dict[str, float]:
    """Busiest CTA / mean of a FAST case (B, H, L, D) at the 32 MB section."""
    b, h, length, d = case
    tiles = Tiles(length, b * h, block_m, d)
    return spread(tiles, [cost(tiles, t, length, block_m, block_n) for t in range(tiles.total)], g)


def llm_imbalance(case: tuple[int, int, int, int, int, int, bool], section_mb: int, g: int = 132,
                  tile: tuple[int, int] | None = None) -> dict[str, float]:
    """Busiest CTA / mean of an LLM case (B, Hq, Hkv, Lq, Lk, D, bottom right) at a section size, with
    ``tile`` (BLOCK_M, BLOCK_N; default TILE's): spread's orders, "even" (SECTION_DEAL even: the
    rotated deal over equal sections) and "greedy even" (TILE_SCHED dynamic over those sections)."""
    b, hq, hkv, lq, lk, d, bottom_right = case
    block_m, block_n = tile or TILE[d]
    shift = lk - lq if bottom_right else 0
    out = {}
    for even in (False, True):
        tiles = Tiles(lq, b * hq, block_m, d, lk, hq // hkv, section_mb << 20, even)
        got = spread(tiles, [cost(tiles, t, lq, block_m, block_n, lk, shift) for t in range(tiles.total)], g)
        out |= {"even": got["rotated"], "greedy even": got["greedy"]} if even else got
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sms", type=int, default=132, help="persistent CTAs (default 132, an H100/H200)")
    ap.add_argument("--llm", action="store_true", help="the causal LLM cases at 8, 16, 32 and 48 MB sections")
    args = ap.parse_args()
    if args.llm:
        runs = [(name, llm, None) for name, llm in LLM_CASES.items() if name != "L5c"]
        runs += [("L5c", LLM_CASES["L5c"], tile) for tile in L5C_TILES]
        for name, llm, tile in runs:
            for mb in (8, 16, 32, 48):
                r = llm_imbalance(llm, mb, args.sms, tile)
                m, n = tile or TILE[llm[5]]
                print(f"{name} {m}x{n} {mb:2d} MB: busiest CTA / mean  restart {r['sections']:.3f}  "
                      f"rotate {r['rotated']:.3f}  even {r['even']:.3f}  greedy {r['greedy']:.3f}  "
                      f"greedy even {r['greedy even']:.3f}  global {r['global']:.3f}")
        return
    for name, case in CASES.items():
        for block_m in ((128, 192) if case[3] == 64 else (128,)):
            r = imbalance(case, block_m, 128, args.sms)
            print(f"{name} BLOCK_M {block_m}: busiest CTA / mean  global {r['global']:.3f}  "
                  f"sections {r['sections']:.3f}  rotated {r['rotated']:.3f}  greedy {r['greedy']:.3f}")


if __name__ == "__main__":
    main()

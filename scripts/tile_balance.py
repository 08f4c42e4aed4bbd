"""How evenly flash_wgmma's persistent causal schedules share the work among CTAs: a static model.

The functions mirror the template's `Tiles` (templates/flash_wgmma/kernel.cu.j2) line for line:
`at` maps a tile index to (query tile, head) under the L2-section order, `nth_global` is ORDER 2
(one back-and-forth snake over all sections' tiles), `nth_sections` ORDER 3 (each section dealt by
a snake of its own). A tile's cost is its KV tiles (kernel ABI v2: the keys its rows see, j <= i +
shift below Lk) plus one for its prologue and epilogue; the
busiest CTA's cost over the mean is the schedule's slowdown against a perfect split, and a greedy
list schedule in the same tile order (what an atomic tile counter would give) is the reference.

    python scripts/tile_balance.py          # the long causal FAST cases, 132 SMs
"""

from __future__ import annotations

import argparse
import heapq
from collections.abc import Callable

L2_SECTION = 32 << 20
CASES = {"F4c": (8, 12, 2048, 64), "F5c": (1, 12, 8192, 64), "F6c": (1, 12, 4096, 128),
         "F7c": (2, 16, 8192, 128), "F8c": (4, 32, 4096, 128)}


class Tiles:
    """The template's tile walker for one causal launch (persistent, ORDER 2 or 3)."""

    def __init__(self, length: int, bh: int, block_m: int, d: int, lk: int | None = None,
                 group: int = 1) -> None:
        """``length`` is Lq, ``lk`` Lk (default Lq), ``bh`` B * Hq, ``group`` Hq / Hkv."""
        lk = length if lk is None else lk
        self.n_m = -(-length // block_m)
        self.bh_count = bh
        self.total = self.n_m * bh
        # the template's L2_SECTION * Hq / (4 Lk D Hkv), Hq = group * Hkv
        self.sec = int(max(1, min(bh, L2_SECTION * group // (4 * lk * d))))

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


def imbalance(case: tuple[int, int, int, int], block_m: int = 128, block_n: int = 128,
              g: int = 132) -> dict[str, float]:
    """Busiest CTA / mean for ORDER 2, ORDER 3 and a greedy list schedule."""
    b, h, length, d = case
    tiles = Tiles(length, b * h, block_m, d)
    work = [cost(tiles, t, length, block_m, block_n) for t in range(tiles.total)]
    mean = sum(work) / g
    out = {}
    for name, nth in (("global", tiles.nth_global), ("sections", tiles.nth_sections)):
        out[name] = max(sum(work[t] for t in a) for a in tiles.assignment(nth, g)) / mean
    heap = [0.0] * g
    for w in work:
        heapq.heapreplace(heap, heap[0] + w)
    out["greedy"] = max(heap) / mean
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sms", type=int, default=132, help="persistent CTAs (default 132, an H100/H200)")
    args = ap.parse_args()
    for name, case in CASES.items():
        for block_m in ((128, 192) if case[3] == 64 else (128,)):
            r = imbalance(case, block_m, 128, args.sms)
            print(f"{name} BLOCK_M {block_m}: busiest CTA / mean  global {r['global']:.3f}  "
                  f"sections {r['sections']:.3f}  greedy {r['greedy']:.3f}")


if __name__ == "__main__":
    main()

"""Split a causal kernel's time into a cost per KV tile and a fixed cost per query tile, from
two stored timings of the same candidate: F4c (8x12 heads, L 2048) and F5c (12 heads, L 8192).

Usage: python scripts/tile_overhead.py [--db URL] ID[:BLOCK_M[:BLOCK_N]] ...

Model: time x SMs = a x (KV tiles computed) + b x (query tiles), summed over every query tile of
every head (a causal query tile i computes ceil(min((i + 1) BLOCK_M, L) / BLOCK_N) KV tiles).
Two cases with very different KV tiles per query tile (about 8 at L 2048, 32 at L 8192) give
``a`` and ``b``; ``b / a`` is what a query tile costs beyond its KV tiles (prologue, epilogue, the
masked part of the diagonal tile, the tail of the schedule), in KV tiles, and ``b`` over the
total is the share of F4c's time it takes. BLOCK_M and BLOCK_N default to D=64's genes of the
candidate (64 x WGS_D64 and BLOCK_N_D64).
"""

from __future__ import annotations

import argparse
import math
import sys

from evo.paths import db_url
from evo.store import open_store

SMS = 132
CASES = {"F4c-fp16": (2048, 8 * 12), "F5c-fp16": (8192, 12)}


def tiles(length: int, heads: int, block_m: int, block_n: int) -> tuple[int, int]:
    """(query tiles, KV tiles computed) of one causal launch over ``heads`` batch x heads."""
    m_tiles = math.ceil(length / block_m)
    kv = sum(math.ceil(min((i + 1) * block_m, length) / block_n) for i in range(m_tiles))
    return m_tiles * heads, kv * heads


def split(times: dict[str, float], block_m: int, block_n: int, sms: int = SMS) -> tuple[float, float]:
    """(us per KV tile per SM, us per query tile per SM) solving the two-case model exactly."""
    (m1, k1), (m2, k2) = (tiles(*CASES[c], block_m, block_n) for c in CASES)
    t1, t2 = (times[c] * sms for c in CASES)
    det = k1 * m2 - k2 * m1
    return (t1 * m2 - t2 * m1) / det, (k1 * t2 - k2 * t1) / det


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ids", nargs="+", help="candidate id or prefix, optionally :BLOCK_M[:BLOCK_N]")
    ap.add_argument("--db", default=None)
    args = ap.parse_args(argv)
    store = open_store(db_url(args.db) if args.db else None)
    print("| candidate | BLOCK_M x N | F4c us | F5c us | us per KV tile | us per query tile | in KV tiles | share of F4c |")
    print("|---|---|---|---|---|---|---|---|")
    for spec in args.ids:
        ident, *dims = spec.split(":")
        cid = store.resolve(ident)
        params = store.get(cid).candidate.params
        block_m = int(dims[0]) if dims else 64 * int(params.get("WGS_D64", 1))
        block_n = int(dims[1]) if len(dims) > 1 else int(params.get("BLOCK_N_D64", 128))
        times = {t.shape.tag: t.median_us for t in store.timings_for(cid) if t.backend == "evo"}
        if not all(c in times for c in CASES):
            print(f"{ident}: needs stored evo timings of {' and '.join(CASES)}", file=sys.stderr)
            return 1
        a, b = split(times, block_m, block_n)
        m4, k4 = tiles(*CASES["F4c-fp16"], block_m, block_n)
        print(f"| {cid[:12]} | {block_m} x {block_n} | {times['F4c-fp16']:.1f} | {times['F5c-fp16']:.1f} | "
              f"{a:.3f} | {b:.3f} | {b / a:.2f} | {b * m4 / (a * k4 + b * m4):.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A CPU model of flash_wgmma's online-softmax numerics: how conditional rescaling (LAZY) and the
row sum's rounding move the error against an fp64 reference (dev/perf-notes.md, 2026-11-26).

The kernel, per query row and KV tile of BLOCK_N keys: S in fp32 from T inputs, a running max m
(LAZY: kept while the tile's max exceeds it by at most 2^8 after scaling), P = exp2(S sl - m sl)
in fp32, O += P V with P rounded to T (fp32 accumulate), l += the row sum of P. The variants differ
only in what l adds: ``plain`` the fp32 P (the kernel before b353e33), ``rounded`` P as rounded for
P V (the kernel since), ``truncated`` P with its low mantissa bits cleared before both (one LOP3;
biased). Inputs: normal Q and K of a given std with one spiked key, normal V.

    python scripts/lazy_rounding_model.py            # the table in dev/perf-notes.md
"""

from __future__ import annotations

import argparse
import math

import torch

VARIANTS = {"exact max": (False, "plain"), "lazy": (True, "plain"), "lazy, rounded sum": (True, "rounded"),
            "lazy, truncated P": (True, "truncated"), "exact max, rounded sum": (False, "rounded")}
LAZY_LOG2 = 8.0
TRUNCATE = {torch.float16: ~((1 << 13) - 1), torch.bfloat16: ~((1 << 16) - 1)}   # fp32 bits below T's mantissa


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lazy: bool, sum_of: str,
              block_n: int = 128) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v of one block of rows, as the kernel computes it (see module doc)."""
    rows, d = q.shape
    sl = math.log2(math.e) / math.sqrt(d)
    m = torch.full((rows,), -math.inf)
    row_sum = torch.zeros(rows)
    o = torch.zeros(rows, d)
    for n0 in range(0, k.shape[0], block_n):
        s = q.float() @ k[n0:n0 + block_n].float().T
        mx = torch.maximum(m, s.max(1).values)
        if lazy:
            mx = torch.where((mx - m) * sl > LAZY_LOG2, mx, m)
        alpha = torch.where(m == -math.inf, torch.zeros_like(m), torch.exp2(m * sl - mx * sl))
        m = mx
        p = torch.exp2(s * sl - (mx * sl)[:, None])
        if sum_of == "truncated":
            p = (p.view(torch.int32) & TRUNCATE[q.dtype]).view(torch.float32)
        p_t = p.to(q.dtype)
        summed = p_t.float() if sum_of == "rounded" else p
        row_sum = row_sum * alpha + summed.sum(1)
        o = o * alpha[:, None] + p_t.float() @ v[n0:n0 + block_n].float()
    return (o / row_sum[:, None]).double()


def inputs(dtype: torch.dtype, seed: int, rows: int, length: int, d: int, std: float,
           spike: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q, K (one key scaled by ``spike``), V in ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(rows, d, generator=g) * std
    k = torch.randn(length, d, generator=g) * std
    k[length // 3] *= spike
    v = torch.randn(length, d, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def errors(dtype: torch.dtype, seed: int, rows: int = 256, length: int = 4096, d: int = 128,
           std: float = 3.0, spike: float = 8.0) -> dict[str, float]:
    """max|err| against fp64 of each variant on one draw."""
    q, k, v = inputs(dtype, seed, rows, length, d, std, spike)
    ref = torch.softmax(q.double() @ k.double().T / math.sqrt(d), 1) @ v.double()
    return {name: (attention(q, k, v, lazy, how) - ref).abs().max().item() for name, (lazy, how) in VARIANTS.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3, help="draws per dtype (default 3)")
    args = ap.parse_args()
    print("dtype seed " + " | ".join(VARIANTS))
    for dtype in (torch.float16, torch.bfloat16):
        for seed in range(args.seeds):
            e = errors(dtype, seed)
            print(f"{str(dtype).removeprefix('torch.')} {seed} " + " | ".join(f"{e[n]:.2e}" for n in VARIANTS))


if __name__ == "__main__":
    main()

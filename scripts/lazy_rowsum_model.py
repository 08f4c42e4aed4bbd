"""CPU model of the flash_wgmma softmax: why conditional rescaling (LAZY) costs accuracy, and
what summing the rounded P (ROWSUM_MMA) gives back. No GPU needed.

The kernel's online softmax is replayed block by block in torch on the CPU: S in fp32, P =
2^(S*scale*log2e - max) in fp32, P rounded to fp16/bf16 for P V (fp32 accumulation), O and l
rescaled by alpha (l: the row sum). LAZY keeps a stale row max while the new one exceeds it by at most 2^8, so
the largest P is up to 2^8 instead of exactly 1, and its rounding no longer cancels against an
l summed from the unrounded P. Printed: the worst max|err| against a float64 reference over a
few seeds, for (exact / LAZY max) x (l from fp32 P / l from the rounded P), on the package's
stress inputs (std 3, spiked key, scale 2.5/sqrt(D)).

Usage: python scripts/lazy_rowsum_model.py [L] [D]   (default 4096 128)
"""

from __future__ import annotations

import math
import sys

import torch

LAZY_LOG2 = 8.0
LOG2E = 1.4426950408889634


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, block_n: int, lazy: bool,
            rounded_sum: bool) -> torch.Tensor:
    """The kernel's online softmax over key blocks of ``block_n`` (no mask: full attention)."""
    dt, sl = q.dtype, scale * LOG2E
    scores = q.float() @ k.float().T
    m = torch.full((q.shape[0],), -math.inf)
    row_sum = torch.zeros(q.shape[0])
    o = torch.zeros(q.shape[0], v.shape[1])
    for n0 in range(0, k.shape[0], block_n):
        s = scores[:, n0:n0 + block_n]
        mx = torch.maximum(m, s.max(1).values)
        if lazy:
            mx = torch.where((mx - m) * sl > LAZY_LOG2, mx, m)
        base = torch.where(mx == -math.inf, torch.zeros_like(mx), mx * sl)
        alpha = torch.exp2(m * sl - base)
        p = torch.exp2(s * sl - base[:, None])
        p_used = p.to(dt).float()                      # what P V multiplies
        o = o * alpha[:, None] + p_used @ v[n0:n0 + block_n].float()
        row_sum = row_sum * alpha + (p_used if rounded_sum else p).sum(1)
        m = mx
    return (o / row_sum[:, None]).to(dt)


def worst_errors(L: int, D: int, dtype: torch.dtype, seeds: int = 4, block_n: int = 128,
                 factor: float = 2.5) -> dict[str, float]:
    out: dict[str, float] = {}
    for seed in range(seeds):
        gen = torch.Generator().manual_seed(seed)
        q, k, v = (torch.randn(n, D, generator=gen) * 3.0 for n in (256, L, L))
        k[(L - 1) // 2] *= 200.0 / (factor * 9.0)       # the package's stress test's spiked key
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
        scale = factor / math.sqrt(D)
        ref = torch.softmax((q.double() @ k.double().T) * scale, -1) @ v.double()
        for lazy in (False, True):
            for rounded in (False, True):
                err = float((forward(q, k, v, scale, block_n, lazy, rounded).double() - ref).abs().max())
                key = f"{'LAZY' if lazy else 'exact'} max, l from {'rounded' if rounded else 'fp32'} P"
                out[key] = max(out.get(key, 0.0), err)
    return out


if __name__ == "__main__":
    L, D = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (4096, 128)
    for dtype in (torch.float16, torch.bfloat16):
        errs = worst_errors(L, D, dtype)
        exact = errs["exact max, l from fp32 P"]
        for key, err in errs.items():
            print(f"{str(dtype).split('.')[1]:9s} L={L} D={D}  {key:32s} {err:.2e}  ({err / exact:.2f}x exact)")

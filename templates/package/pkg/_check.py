"""Which path serves a call, and a self-check a user can run on their own shapes.

``explain`` reads the dispatch table the package was promoted with and says, in one line, which
kernel serves a problem or why SDPA does. ``selfcheck`` runs the package on random inputs of the
given shapes and judges every output by the rule the kernels passed in evo (GREEN's): its error
against a float64 reference (a float32 one for large problems) may be at most ``multiplier``
times the error of PyTorch's own SDPA against the same reference, plus a floor per dtype.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from . import _launcher

_SUITE = Path(__file__).resolve().parent / "tests" / "green_suite.json"
_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16"}
_TORCH = {name: dt for dt, name in _DTYPES.items()}
_MAX_GRID_Y = 65535
_SCORES_BYTES = 1 << 30     # the reference goes through the heads in chunks of this many score bytes


def explain(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False) -> str:
    """One line: the kernel (candidate, entry, bucket) that serves this call, or why SDPA does."""
    reason = _not_served(q, k, v)
    if reason:
        return f"SDPA: {reason}"
    B, H, L, D = q.shape
    name = _DTYPES[q.dtype]
    routes = [r for r in _launcher.table()["routes"]
              if r["head_dim"] == D and r["dtype"] == name and r["causal"] == causal]
    if not routes:
        return f"SDPA: no kernel was promoted for D={D} {name} {'causal' if causal else 'full'}"
    route = next((r for r in routes if r["min_len"] <= L <= r["max_len"]), None)
    if route is None:
        top = max(r["max_len"] for r in routes)
        return f"SDPA: L={L} is past {top}, the longest length promote verified for this key"
    where = f"bucket L {route['min_len']}..{route['max_len']}"
    if route["kernel"] is None:
        return f"SDPA: no kernel beat SDPA in {where} when the package was promoted"
    if B * H > route["max_bh"]:
        return f"SDPA: B*H={B * H} is past {route['max_bh']}, the most heads promote verified in {where}"
    lib = _launcher.get()
    if lib is None or not lib.supports(q, k, v, causal):
        return "SDPA: the kernels do not run here (no launcher, another GPU arch, or a misaligned tensor)"
    return f"kernel {route['entry']} of candidate {route['candidate'][:12]} ({where}, B*H <= {route['max_bh']})"


def _not_served(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> str:
    """Why no kernel can take these tensors at all, or the empty string."""
    if not (q.is_cuda and k.is_cuda and v.is_cuda):
        return "not on a CUDA device"
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        return "the kernels take q, k, v of one (B, H, L, D) shape"
    if q.dtype not in _DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        return f"dtype {q.dtype}: the kernels take float16 or bfloat16"
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return "autograd needs a graph through the inputs (the kernels are forward only)"
    if q.shape[0] * q.shape[1] > _MAX_GRID_Y:
        return f"B*H={q.shape[0] * q.shape[1]} is over the grid's limit {_MAX_GRID_Y}"
    return ""


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
               wide: torch.dtype) -> torch.Tensor:
    """SDPA's math backend in ``wide`` precision, head chunk by head chunk (bounded memory)."""
    B, H, L, D = q.shape
    step = max(1, _SCORES_BYTES // (L * L * torch.finfo(wide).bits // 8))
    flat = [t.reshape(B * H, L, D) for t in (q, k, v)]
    prev = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        with sdpa_kernel(SDPBackend.MATH):
            parts = [F.scaled_dot_product_attention(*(t[i:i + step].to(wide) for t in flat), is_causal=causal,
                                                    scale=scale) for i in range(0, B * H, step)]
    finally:
        torch.set_float32_matmul_precision(prev)
    return torch.cat(parts).view(B, H, L, D)


def _max_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    diff = (out.to(ref.dtype) - ref).abs()
    return float(diff.max()) if bool(torch.isfinite(diff).all()) else math.inf


def check_one(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              scale: float | None = None) -> dict[str, Any]:
    """The package's output on ``q, k, v`` judged by GREEN's rule; the report's row."""
    from . import attention

    suite = json.loads(_SUITE.read_text())
    B, H, L, D = q.shape
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    wide = torch.float64 if B * H * L * L < suite["float64_below"] else torch.float32
    ref = _reference(q, k, v, causal, scale, wide)
    sdpa_err = _max_err(F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale), ref)
    err = _max_err(attention(q, k, v, causal=causal, scale=scale), ref)
    tol = suite["multiplier"] * sdpa_err + suite["floors"][_DTYPES[q.dtype]]
    return {"shape": [B, H, L, D], "dtype": _DTYPES[q.dtype], "causal": causal, "scale": scale,
            "served_by": explain(q, k, v, causal=causal), "err": err, "sdpa_err": sdpa_err, "tol": tol,
            "passed": err <= tol}


def selfcheck(shapes: Iterable[Sequence[int]], *, dtypes: Sequence[str] = ("fp16", "bf16"),
              causal: Sequence[bool] = (False, True), seed: int = 0, std: float = 1.0,
              device: str = "cuda") -> list[dict[str, Any]]:
    """Each (B, H, L, D) in ``shapes``, in each dtype and causal mode, on fresh normal inputs of
    standard deviation ``std``: which path served it and whether its output passed GREEN's rule.
    Returns one row per problem (``passed``, ``err``, ``tol``, ``served_by``, ...)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    rows = []
    for dims in shapes:
        B, H, L, D = (int(x) for x in dims)
        for name in dtypes:
            for c in causal:
                q, k, v = (torch.randn((B, H, L, D), generator=gen, device=device).mul_(std).to(_TORCH[name])
                           for _ in range(3))
                rows.append(check_one(q, k, v, causal=c))
    return rows

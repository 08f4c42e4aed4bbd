"""Which path serves a call, and a self-check a user can run on their own shapes.

``explain`` reads the dispatch table the package was promoted with and says, in one line, which
kernel serves a problem and what its route serves (the limits promote verified), or why SDPA
serves it (``_routes`` states the rule). ``selfcheck`` runs the package on random inputs of the
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

from . import _fallback, _launcher
from ._routes import Problem, route_for, served

_SUITE = Path(__file__).resolve().parent / "tests" / "green_suite.json"
_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16"}
_TORCH = {name: dt for dt, name in _DTYPES.items()}
_MAX_GRID_Y = 65535
_MAX_ELEMENTS = 2**31 - 1
_ALIGNMENT = 16
_SCORES_BYTES = 1 << 30     # the reference goes through the heads in chunks of this many score bytes


def explain(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
            dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False,
            *, causal_align: str = "top_left", seqlens: torch.Tensor | None = None,
            block_table: torch.Tensor | None = None) -> str:
    """One line: the kernel (candidate, entry) that serves this call and what its route serves, or
    why SDPA does. Takes ``attention``'s arguments as they are (``scale`` does not change the path)."""
    _fallback.bottom_right(causal_align)
    if seqlens is not None:
        return _explain_cache(query, key, value, is_causal, enable_gqa, seqlens, block_table)
    reason = _not_served(query, key, value, attn_mask, dropout_p, enable_gqa)
    if reason:
        return f"SDPA: {reason}"
    route, why = route_for(_launcher.table()["routes"], problem_of(query, key, is_causal, causal_align))
    if route is None:
        return f"SDPA: {why}"
    lib = _launcher.get()
    if lib is None or not lib.supports(query, key, value, is_causal, causal_align == "bottom_right"):
        return "SDPA: the kernels do not run here (no launcher, or another GPU arch)"
    return served(route)


def _explain_cache(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, is_causal: bool, enable_gqa: bool,
                   seqlens: torch.Tensor, block_table: torch.Tensor | None) -> str:
    """:func:`explain` of a call with per-sequence lengths (and a block table): the layout route of
    its capacity and that kernel's _lens / _paged entry, or why SDPA serves it (the pages gathered
    back, the keys past each length masked)."""
    layout = "paged" if block_table is not None else "lens"
    fallback = "SDPA (" + ("pages gathered, " if block_table is not None else "") + "keys past each length masked): "
    if not (query.is_cuda and key.is_cuda and seqlens.is_cuda) or query.dim() != 4 or key.dim() != 4:
        return fallback + "the kernels take CUDA tensors q (B, Hq, Lq, D) and k, v of 4 dimensions"
    if query.shape[1] % key.shape[1] or (query.shape[1] != key.shape[1] and not enable_gqa):
        return fallback + f"Hq={query.shape[1]} on Hkv={key.shape[1]} (enable_gqa=True and a multiple needed)"
    capacity = key.shape[2] * (block_table.shape[1] if block_table is not None else 1)
    B, Hq, Lq, D = query.shape
    problem = Problem(B, Hq, key.shape[1], Lq, capacity, D, _DTYPES.get(query.dtype, str(query.dtype)), is_causal,
                      "bottom_right" if is_causal else "top_left", layout)
    route, why = route_for(_launcher.table()["routes"], problem)
    if route is None:
        return fallback + why
    lib = _launcher.get()
    if lib is None or not lib.supports_cache(query, key, value, is_causal, seqlens, block_table):
        return fallback + ("the kernels do not run here, or the inputs are not theirs (int32 contiguous seqlens "
                           "(B,) and block_table (B, pages_per_seq) on q's device, 16-byte aligned tensors)")
    return f"{served(route)}, on a capacity of {capacity} keys"


def problem_of(query: torch.Tensor, key: torch.Tensor, is_causal: bool, causal_align: str) -> Problem:
    """The dispatch rule's view of a call on 4-D tensors."""
    B, Hq, Lq, D = query.shape
    return Problem(B, Hq, key.shape[1], Lq, key.shape[2], D, _DTYPES.get(query.dtype, str(query.dtype)), is_causal,
                   causal_align if is_causal else "top_left")


def _not_served(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None,
                dropout_p: float, enable_gqa: bool) -> str:
    """Why no kernel can take these arguments at all, or the empty string."""
    if attn_mask is not None or dropout_p != 0.0:
        return "a mask or dropout (the kernels take neither)"
    if not (query.is_cuda and key.is_cuda and value.is_cuda):
        return "not on a CUDA device"
    if query.dim() != 4 or key.dim() != 4 or value.shape != key.shape:
        return "the kernels take q (B, Hq, Lq, D), k and v of one (B, Hkv, Lk, D) shape"
    if key.shape[0] != query.shape[0] or key.shape[3] != query.shape[3]:
        return "k and v must have q's batch and head dim"
    if query.shape[1] != key.shape[1] and not enable_gqa:
        return f"Hq={query.shape[1]} != Hkv={key.shape[1]} without enable_gqa=True (SDPA raises, as it does)"
    if min(*query.shape, *key.shape) < 1 or query.shape[1] % key.shape[1]:
        return f"Hq={query.shape[1]} is not a multiple of Hkv={key.shape[1]}, or a dimension is empty"
    if query.dtype not in _DTYPES or key.dtype != query.dtype or value.dtype != query.dtype:
        return f"dtype {query.dtype}: the kernels take float16 or bfloat16"
    if torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad):
        return "autograd needs a graph through the inputs (the kernels are forward only)"
    if query.shape[0] * query.shape[1] > _MAX_GRID_Y:
        return f"B*Hq={query.shape[0] * query.shape[1]} is over the grid's limit {_MAX_GRID_Y}"
    if max(query.numel(), key.numel()) > _MAX_ELEMENTS:
        return "a tensor of 2^31 elements or more (the kernels index with 32-bit ints)"
    if any(t.is_contiguous() and t.data_ptr() % _ALIGNMENT for t in (query, key, value)):
        return f"a tensor not {_ALIGNMENT}-byte aligned (a view with a storage offset)"
    return ""


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, shift: int, scale: float,
               wide: torch.dtype) -> torch.Tensor:
    """SDPA's math backend in ``wide`` precision, head chunk by head chunk (bounded memory), on k and v
    expanded to q's heads, with the causal mask j <= i + shift; rows that see no key are zeros."""
    B, H, L, D = q.shape
    Lk = k.shape[2]
    group = H // k.shape[1]
    k, v = (t.repeat_interleave(group, dim=1) if group > 1 else t for t in (k, v))
    step = max(1, _SCORES_BYTES // (L * Lk * torch.finfo(wide).bits // 8))
    flat = [t.reshape(B * H, t.shape[2], D) for t in (q, k, v)]
    mask = None
    if causal:
        mask = torch.arange(Lk, device=q.device).unsqueeze(0) <= torch.arange(L, device=q.device).unsqueeze(1) + shift
    prev = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        with sdpa_kernel(SDPBackend.MATH):
            parts = [F.scaled_dot_product_attention(flat[0][i:i + step].to(wide), flat[1][i:i + step].to(wide),
                                                    flat[2][i:i + step].to(wide), attn_mask=mask, scale=scale)
                     for i in range(0, B * H, step)]
    finally:
        torch.set_float32_matmul_precision(prev)
    out = torch.cat(parts).view(B, H, L, D)
    if mask is not None:
        out = out.masked_fill(~mask.any(dim=-1).unsqueeze(-1), 0.0)
    return out


def _max_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    diff = (out.to(ref.dtype) - ref).abs()
    return float(diff.max()) if bool(torch.isfinite(diff).all()) else math.inf


def check_one(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, is_causal: bool = False,
              scale: float | None = None, causal_align: str = "top_left") -> dict[str, Any]:
    """The package's output on ``query, key, value`` (grouped heads allowed) judged by GREEN's
    rule; the report's row."""
    from . import attention

    bottom_right = _fallback.bottom_right(causal_align)
    suite = json.loads(_SUITE.read_text())
    B, H, L, D = query.shape
    Hkv, Lk = key.shape[1], key.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    gqa = H != Hkv
    wide = torch.float64 if B * H * L * Lk < suite["float64_below"] else torch.float32
    ref = _reference(query, key, value, is_causal, Lk - L if bottom_right else 0, scale, wide)
    sdpa_err = _max_err(_fallback.sdpa(query, key, value, None, 0.0, is_causal, scale, gqa, bottom_right), ref)
    err = _max_err(attention(query, key, value, is_causal=is_causal, scale=scale, enable_gqa=gqa,
                             causal_align=causal_align), ref)
    tol = suite["multiplier"] * sdpa_err + suite["floors"][_DTYPES[query.dtype]]
    align = causal_align if is_causal and L != Lk else "top_left"
    return {"shape": [B, H, Hkv, L, Lk, D], "dtype": _DTYPES[query.dtype], "causal": is_causal,
            "align": align, "scale": scale,
            "served_by": explain(query, key, value, is_causal=is_causal, enable_gqa=gqa, causal_align=causal_align),
            "err": err, "sdpa_err": sdpa_err, "tol": tol, "passed": err <= tol}


def _dims(shape: Sequence[int]) -> tuple[int, int, int, int, int, int]:
    """(B, Hq, Hkv, Lq, Lk, D) from a (B, H, L, D) or a (B, Hq, Hkv, Lq, Lk, D) shape."""
    dims = tuple(int(x) for x in shape)
    if len(dims) == 4:
        B, H, L, D = dims
        return B, H, H, L, L, D
    if len(dims) == 6:
        return dims  # type: ignore[return-value]
    raise ValueError(f"a shape is (B, H, L, D) or (B, Hq, Hkv, Lq, Lk, D), not {tuple(shape)}")


def selfcheck(shapes: Iterable[Sequence[int]], *, dtypes: Sequence[str] = ("fp16", "bf16"),
              causal: Sequence[bool] = (False, True), causal_align: Sequence[str] = ("top_left",),
              seed: int = 0, std: float = 1.0, device: str = "cuda") -> list[dict[str, Any]]:
    """Each shape in ``shapes``, (B, H, L, D) or (B, Hq, Hkv, Lq, Lk, D), in each dtype and causal
    mode (and, causal with Lq != Lk, each of ``causal_align``), on fresh normal inputs of standard
    deviation ``std``: which path served it and whether its output passed GREEN's rule. Returns one
    row per problem (``passed``, ``err``, ``tol``, ``served_by``, ...)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    rows = []
    for shape in shapes:
        B, Hq, Hkv, Lq, Lk, D = _dims(shape)
        for name in dtypes:
            for c in causal:
                for align in (causal_align if c and Lq != Lk else ("top_left",)):
                    q, k, v = (torch.randn(dims, generator=gen, device=device).mul_(std).to(_TORCH[name])
                               for dims in ((B, Hq, Lq, D), (B, Hkv, Lk, D), (B, Hkv, Lk, D)))
                    rows.append(check_one(q, k, v, is_causal=c, causal_align=align))
    return rows

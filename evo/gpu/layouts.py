"""K/V cache layouts as tensors (docs/kernel-abi.md, "Ragged and paged caches"): what a problem's
``seqlens`` and ``block_table`` are on a device, and how a paged cache's pool maps to and from the
(B, Hkv, Lk, D) cache it holds.

GREEN draws its inputs as that logical cache and hands a paged kernel the pool; FAST draws the pool
itself (random either way) and the checks gather it back. Everything follows the
:class:`~evo.results.Shape`'s own ``seqlens()`` and ``block_table()``, so a kernel, its reference
and its baselines see one problem.
"""

from __future__ import annotations

import torch

from evo.results import Shape


def cache_args(shape: Shape, device: str | torch.device) -> dict[str, torch.Tensor]:
    """The extra launch arguments of ``shape``'s layout, as keywords of
    :meth:`evo.gpu.runtime.CandidateKernels.launch`: none for a contiguous cache; ``seqlens``
    (int32, (B,)) for ``lens``; and ``block_table`` (int32, (B, pages_per_seq)) for ``paged``."""
    if shape.layout == "contiguous":
        return {}
    out = {"seqlens": torch.tensor(shape.seqlens(), dtype=torch.int32, device=device)}
    if shape.layout == "paged":
        out["block_table"] = torch.tensor(shape.block_table(), dtype=torch.int32,
                                          device=device).view(shape.B, shape.pages_per_seq)
    return out


def kv_dims(shape: Shape) -> tuple[int, int, int, int]:
    """The dims of k and v as a kernel takes them: (B, Hkv, Lk, D), or a paged cache's pool
    (B * pages_per_seq pages, Hkv, page_size, D)."""
    if shape.layout == "paged":
        return (shape.B * shape.pages_per_seq, shape.Hkv, shape.page_size, shape.D)
    return (shape.B, shape.Hkv, shape.Lk, shape.D)


def page_index(shape: Shape, device: str | torch.device) -> torch.Tensor:
    """A paged cache's block table as one int64 index of B * pages_per_seq pages (what
    :func:`from_pages` gathers by; made ahead of a CUDA graph capture, which copies nothing)."""
    return torch.tensor(shape.block_table(), dtype=torch.long, device=device)


def to_pages(t: torch.Tensor, shape: Shape) -> torch.Tensor:
    """A (B, Hkv, Lk, D) cache of ``shape`` as its paged pool: page ``block_table[b * P + p]``
    holds keys ``p * page_size ..`` of sequence ``b`` (P pages a sequence, the last padded with
    zeros). ``t`` itself for other layouts."""
    if shape.layout != "paged":
        return t
    B, Hkv, Lk, D = t.shape
    P, ps = shape.pages_per_seq, shape.page_size
    padded = torch.zeros((B, Hkv, P * ps, D), dtype=t.dtype, device=t.device)
    padded[:, :, :Lk] = t
    logical = padded.view(B, Hkv, P, ps, D).permute(0, 2, 1, 3, 4).reshape(B * P, Hkv, ps, D)
    pool = torch.empty_like(logical)
    pool[page_index(shape, t.device)] = logical
    return pool


def from_pages(pool: torch.Tensor, shape: Shape, index: torch.Tensor | None = None) -> torch.Tensor:
    """The inverse of :func:`to_pages`: the (B, Hkv, Lk, D) cache a paged pool holds (gathered
    through the block table, or ``index``, its :func:`page_index`). ``pool`` itself for other layouts."""
    if shape.layout != "paged":
        return pool
    P, ps = shape.pages_per_seq, shape.page_size
    pages = pool[page_index(shape, pool.device) if index is None else index]   # (B * P, Hkv, ps, D), in key order
    cache = pages.view(shape.B, P, shape.Hkv, ps, shape.D).permute(0, 2, 1, 3, 4)
    return cache.reshape(shape.B, shape.Hkv, P * ps, shape.D)[:, :, :shape.Lk]

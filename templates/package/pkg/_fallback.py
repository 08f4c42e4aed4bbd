"""SDPA for every call no kernel serves, with the package's two conventions on top of it.

- ``causal_align="bottom_right"``: the causal mask aligned at the bottom right (query i sees keys
  j <= i + Lk - Lq; FlashAttention's convention), through
  ``torch.nn.attention.bias.causal_lower_right`` when Lq < Lk (SDPA's fused backends take it), and
  an explicit boolean mask when Lq > Lk (``causal_lower_right`` would leave rows with no key) or
  while torch.compile traces the call (dynamo cannot construct that tensor subclass);
- a query row that sees no key (bottom right with Lq > Lk: the first Lq - Lk rows) is zeros, as
  the kernels write it (kernel ABI v2), where SDPA's math backend gives NaN: the mask lets such a
  row see every key, so that the softmax stays finite forward and backward, and the row is then
  zeroed.

- per-sequence lengths (``seqlens``) and a paged cache (``block_table``): :func:`sdpa_cache` gathers
  the pages back into a (B, Hkv, Lk, D) cache and masks each sequence's keys past its length, its
  causal mask at its own bottom right; a sequence of no keys is zeros.

Everything else is SDPA's own behaviour, its errors included (Hq != Hkv without ``enable_gqa``, a
mask together with ``is_causal``, ...), so ``attention`` stays a drop-in for it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

ALIGNS = ("top_left", "bottom_right")


def bottom_right(causal_align: str) -> bool:
    """Whether ``causal_align`` puts the causal mask at the bottom right (ValueError for a value
    other than those of :data:`ALIGNS`)."""
    if causal_align not in ALIGNS:
        raise ValueError(f"causal_align must be 'top_left' or 'bottom_right', not {causal_align!r}")
    return causal_align == "bottom_right"


def lower_right_mask(Lq: int, Lk: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(mask, unseen) for a bottom-right causal mask: ``mask[i, j]`` is whether query i sees key j
    (j <= i + Lk - Lq), except that a row seeing no key sees every key; ``unseen[i]`` marks those
    rows (their output is zeros)."""
    rows = torch.arange(Lq, device=device).unsqueeze(1)
    mask = torch.arange(Lk, device=device).unsqueeze(0) <= rows + (Lk - Lq)
    unseen = ~mask.any(dim=-1)
    return mask | unseen.unsqueeze(1), unseen


def sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None,
         dropout_p: float, is_causal: bool, scale: float | None, enable_gqa: bool,
         bottom_right: bool) -> torch.Tensor:
    """``scaled_dot_product_attention`` with the causal mask at the bottom right when asked (and
    Lq != Lk: with equal lengths both corners are the same mask), rows seeing no key zeroed."""
    Lq, Lk = query.shape[-2], key.shape[-2]
    if is_causal and bottom_right and Lq != Lk and attn_mask is None:
        if Lq < Lk and not torch.compiler.is_compiling():
            return F.scaled_dot_product_attention(query, key, value, attn_mask=causal_lower_right(Lq, Lk),
                                                  dropout_p=dropout_p, scale=scale, enable_gqa=enable_gqa)
        mask, unseen = lower_right_mask(Lq, Lk, query.device)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout_p, scale=scale,
                                             enable_gqa=enable_gqa)
        return out.masked_fill(unseen.unsqueeze(-1), 0.0)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                                          is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)


def gather_pages(pool: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
    """The (B, Hkv, pages_per_seq * page_size, D) cache a pool (pages, Hkv, page_size, D) holds:
    key j of sequence b is row j % page_size of page block_table[b, j // page_size]."""
    B, pages = block_table.shape
    _, Hkv, page_size, D = pool.shape
    picked = pool[block_table.long().reshape(-1)]                 # (B * pages, Hkv, page_size, D)
    return picked.view(B, pages, Hkv, page_size, D).transpose(1, 2).reshape(B, Hkv, pages * page_size, D)


def sdpa_cache(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, is_causal: bool, scale: float | None,
               enable_gqa: bool, seqlens: torch.Tensor, block_table: torch.Tensor | None) -> torch.Tensor:
    """SDPA on sequences of their own lengths: a paged cache gathered back first, then a boolean
    mask (B, 1, Lq, Lk) letting sequence b's query i see its keys j < seqlens[b] (and, causal,
    j <= i + seqlens[b] - Lq); a row that sees no key sees every key and is then zeroed."""
    if block_table is not None:
        key, value = gather_pages(key, block_table), gather_pages(value, block_table)
    Lq, Lk = query.shape[-2], key.shape[-2]
    n = seqlens.to(query.device, torch.long).view(-1, 1, 1, 1)
    j = torch.arange(Lk, device=query.device).view(1, 1, 1, Lk)
    mask = j < n
    if is_causal:
        mask = mask & (j <= torch.arange(Lq, device=query.device).view(1, 1, Lq, 1) + n - Lq)
    unseen = ~mask.any(dim=-1, keepdim=True)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask | unseen, scale=scale,
                                         enable_gqa=enable_gqa)
    return out.masked_fill(unseen, 0.0)

"""The split-KV launch plan (docs/kernel-abi.md, "The split-KV variant"): how a split-KV kernel's
keys are divided, its grid, and the workspace it needs.

This module is the one spelling of that math. It imports nothing outside the standard library so
that ``evo promote`` can copy it verbatim into a package (``NAME/_splitkv.py``), whose C++ launcher
calls :func:`launch_numbers` for every split-KV launch; evo's own runtime reaches it through
:func:`evo.family.space.split_plan`, which validates the problem first.
"""

from __future__ import annotations

from dataclasses import dataclass

WORKSPACE_ALIGN = 256    # bytes: the split-KV workspace's counters are padded to this


@dataclass(frozen=True)
class SplitConfig:
    """How a split-KV kernel (``[launch] abi = "split_kv"``) divides the keys: every split is a
    whole number of ``key_tile`` keys and at least ``split_min`` long (but where the cache is shorter);
    splitting stops before the grid passes ``waves`` CTAs per SM; and a ragged cache (``lens`` or
    ``paged``: lengths the host does not see) gets at least ``ragged_splits`` splits, so that its
    longest sequences are not each one CTA that the rest of the grid waits for."""

    key_tile: int
    split_min: int
    waves: int
    ragged_splits: int = 1


@dataclass(frozen=True)
class SplitPlan:
    """One split-KV launch: ``m_tiles`` query tiles of each (batch, K/V head), the keys in ``splits``
    parts of ``split_len`` keys (the last one ragged), ``groups`` = B * Hkv * m_tiles tiles in all."""

    m_tiles: int
    splits: int
    split_len: int
    groups: int

    def grid(self, B: int, Hkv: int) -> tuple[int, int, int]:
        """(m_tiles x splits, B * Hkv, 1): blockIdx.x is m_tile * splits + split."""
        return (self.m_tiles * self.splits, B * Hkv, 1)

    def workspace_bytes(self, rows_per_cta: int, head_dim: int) -> int:
        """Scratch the launch needs (0 with one split): a counter per tile, padded to
        WORKSPACE_ALIGN bytes, then each split's fp32 O and log-sum-exp per packed row."""
        if self.splits == 1:
            return 0
        return self.counter_bytes() + 4 * self.groups * self.splits * rows_per_cta * (head_dim + 1)

    def counter_bytes(self) -> int:
        """The workspace's leading counters, a uint32 per tile padded to WORKSPACE_ALIGN bytes."""
        return -(-4 * self.groups // WORKSPACE_ALIGN) * WORKSPACE_ALIGN


def plan(split: SplitConfig, rows_per_cta: int, B: int, Hq: int, Hkv: int, Lq: int, Lk: int,
         sms: int, ragged: bool = False) -> SplitPlan:
    """The split-KV launch of one valid problem (every size at least 1, Hkv dividing Hq) on a GPU of
    ``sms`` SMs: the packed rows of a (batch, K/V head) are the query rows of its Hq / Hkv query
    heads; the keys are split only as far as the grid stays within ``waves x sms`` CTAs (a grid
    that already fills the GPU is not split: each split costs its partial result and the combine),
    at least ``ragged_splits`` ways on a ``ragged`` cache (``Lk`` its capacity), no split shorter
    than ``split_min`` keys (one split where Lk is below twice that) and every split a whole number
    of key tiles. (Measured on an H100, dev/perf-notes.md "Decode": splitting a grid of 128-256
    tiles cost 5-19 %; a ragged batch of 100-16000 keys ran 3-9 % faster in 3-4 splits.)"""
    m_tiles = -(-(Hq // Hkv) * Lq // rows_per_cta)
    groups = B * Hkv * m_tiles
    tiles = -(-Lk // split.key_tile)
    most = min(max(1, Lk // split.split_min), tiles)
    count = max(1, min(split.waves * sms // groups, most))
    if ragged:
        count = max(count, min(split.ragged_splits, most))
    split_len = -(-tiles // count) * split.key_tile
    return SplitPlan(m_tiles, -(-Lk // split_len), split_len, groups)


def launch_numbers(key_tile: int, split_min: int, waves: int, ragged_splits: int, rows_per_cta: int,
                   head_dim: int, B: int, Hq: int, Hkv: int, Lq: int, Lk: int, sms: int,
                   ragged: bool) -> tuple[int, int, int, int, int]:
    """What a launcher needs of :func:`plan`, as plain ints (the package's C++ launcher calls this):
    (grid x, grid y, split length, workspace bytes, counter bytes to zero before the launch)."""
    p = plan(SplitConfig(key_tile, split_min, waves, ragged_splits), rows_per_cta, B, Hq, Hkv, Lq, Lk, sms,
             ragged)
    x, y, _ = p.grid(B, Hkv)
    nbytes = p.workspace_bytes(rows_per_cta, head_dim)
    return x, y, p.split_len, nbytes, p.counter_bytes() if nbytes else 0

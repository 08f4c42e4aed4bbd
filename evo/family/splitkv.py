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
    whole number of ``key_tile`` keys and at least ``split_min`` long (but where the cache is shorter),
    and the split count aims at ``waves`` CTAs per SM over the whole grid."""

    key_tile: int
    split_min: int
    waves: int


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
         sms: int) -> SplitPlan:
    """The split-KV launch of one valid problem (every size at least 1, Hkv dividing Hq) on a GPU of
    ``sms`` SMs: the packed rows of a (batch, K/V head) are the query rows of its Hq / Hkv query
    heads; the keys are split so that the grid holds about ``waves x sms`` CTAs, no split shorter
    than ``split_min`` keys (one split where Lk is below twice that) and every split a whole number
    of key tiles."""
    m_tiles = -(-(Hq // Hkv) * Lq // rows_per_cta)
    groups = B * Hkv * m_tiles
    tiles = -(-Lk // split.key_tile)
    wanted = -(-split.waves * sms // groups)
    most = max(1, Lk // split.split_min)
    count = max(1, min(wanted, most, tiles))
    split_len = -(-tiles // count) * split.key_tile
    return SplitPlan(m_tiles, -(-Lk // split_len), split_len, groups)


def launch_numbers(key_tile: int, split_min: int, waves: int, rows_per_cta: int, head_dim: int,
                   B: int, Hq: int, Hkv: int, Lq: int, Lk: int, sms: int) -> tuple[int, int, int, int, int]:
    """What a launcher needs of :func:`plan`, as plain ints (the package's C++ launcher calls this):
    (grid x, grid y, split length, workspace bytes, counter bytes to zero before the launch)."""
    p = plan(SplitConfig(key_tile, split_min, waves), rows_per_cta, B, Hq, Hkv, Lq, Lk, sms)
    x, y, _ = p.grid(B, Hkv)
    nbytes = p.workspace_bytes(rows_per_cta, head_dim)
    return x, y, p.split_len, nbytes, p.counter_bytes() if nbytes else 0

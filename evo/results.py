"""Plain records that cross stage and process boundaries (picklable, no ORM, no torch).

The build stage produces a BuildResult, the GPU worker an Evaluation made of CheckResults
(GREEN) and Timings (FAST); the store maps them to rows, the search reads their status and
score. Keeping them here lets every stage be tested alone.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from evo.vocab import Status

__all__ = ["ALIGNS", "LAYOUTS", "BuildResult", "CheckResult", "Evaluation", "Fidelity", "Resources", "Shape", "Status", "Timing"]


@dataclass(frozen=True)
class Resources:
    """ptxas report for one kernel entry."""

    registers: int
    smem_static: int
    spill_stores: int
    spill_loads: int
    stack_frame: int
    smem_dynamic: int = 0
    wgmma_serialized: str = ""           # ptxas's reason when it serialized the entry's wgmma (C7511)


@dataclass
class BuildResult:
    """What compiling one candidate for one arch gave: its status (``built``, ``compile_failed``
    or ``resource_rejected``) and why, the cubin, the nvcc log and the ptxas report per entry."""

    build_id: str
    source_hash: str
    arch: str
    flags: tuple[str, ...]
    status: Status                       # BUILT, COMPILE_FAILED or RESOURCE_REJECTED
    reason: str = ""
    cubin_path: str | None = None
    log: str = ""
    seconds: float = 0.0
    cached: bool = False
    resources: dict[str, Resources] = field(default_factory=dict)  # entry name -> report


ALIGNS = ("top_left", "bottom_right")
"""Where a causal mask is aligned: SDPA's ``is_causal`` (query i sees keys j <= i) or
FlashAttention's (query i sees keys j <= i + Lk - Lq: the last query sees every key)."""

LAYOUTS = ("contiguous", "lens", "paged")
"""How a problem's K/V cache is laid out (docs/kernel-abi.md, "Ragged and paged caches"):
``contiguous``, one length ``Lk`` for every sequence; ``lens``, (B, Hkv, Lk, D) with ``Lk`` the
capacity and a length per sequence; ``paged``, the same sequences in a pool of pages."""


@dataclass(frozen=True)
class Shape:
    """One attention problem; ``case`` names it in a suite (G1, F3, LL8).

    q and o are (B, H, L, D), k and v (B, Hkv, Lk, D): ``H`` query heads on ``Hkv`` key/value heads
    (grouped-query attention; 0 or omitted: ``H``), ``L`` queries on ``Lk`` keys (0 or omitted:
    ``L``). ``align`` places a causal mask (:data:`ALIGNS`); it is normalized to ``top_left``
    where it makes no difference (not causal, or ``L == Lk``), so one problem has one spelling.

    ``layout`` (:data:`LAYOUTS`) other than ``contiguous`` gives each sequence its own length,
    drawn from ``lens_min`` to ``Lk`` with ``lens_seed`` (:meth:`seqlens`), and its causal mask at
    the bottom right of its own keys (``align`` is then ``bottom_right`` when causal); ``paged``
    keeps the keys in pages of ``page_size`` rows, shuffled (:meth:`block_table`). A contiguous
    problem keeps ``lens_min``, ``lens_seed`` and ``page_size`` at 0, so it reads as it always did.
    """

    case: str
    B: int
    H: int
    L: int
    D: int
    causal: bool
    dtype: str = "fp16"
    Hkv: int = 0
    Lk: int = 0
    align: str = "top_left"
    layout: str = "contiguous"
    lens_min: int = 0
    lens_seed: int = 0
    page_size: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "Hkv", self.Hkv or self.H)
        object.__setattr__(self, "Lk", self.Lk or self.L)
        if self.align not in ALIGNS:
            raise ValueError(f"unknown causal alignment {self.align!r}; one of {', '.join(ALIGNS)}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"unknown cache layout {self.layout!r}; one of {', '.join(LAYOUTS)}")
        if self.layout == "contiguous":
            if self.lens_min or self.lens_seed or self.page_size:
                raise ValueError("lens_min, lens_seed and page_size belong to a lens or paged cache")
        else:
            if not 0 <= self.lens_min <= self.Lk:
                raise ValueError(f"lens_min {self.lens_min} is outside 0..Lk ({self.Lk})")
            if (self.page_size >= 1) != (self.layout == "paged"):
                raise ValueError("a paged cache needs page_size >= 1, and only a paged cache has one")
            if self.causal:                     # each sequence's mask sits at its own bottom right
                object.__setattr__(self, "align", "bottom_right")
                return
        if not self.causal or self.Lk == self.L:
            object.__setattr__(self, "align", "top_left")

    def seqlens(self) -> list[int]:
        """Each sequence's key count: ``Lk`` for every one in a contiguous cache; else drawn with
        ``random.Random(lens_seed)`` uniformly from ``lens_min`` to ``Lk``, then the first three
        set to ``Lk``, ``lens_min`` and ``lens_min + 1`` (the longest, so that it is the capacity,
        and the shortest edges), and the list shuffled: pure, the same on any machine."""
        if self.layout == "contiguous":
            return [self.Lk] * self.B
        rng = random.Random(self.lens_seed)
        lens = [rng.randint(self.lens_min, self.Lk) for _ in range(self.B)]
        for i, n in enumerate((self.Lk, self.lens_min, min(self.lens_min + 1, self.Lk))[:self.B]):
            lens[i] = n
        rng.shuffle(lens)
        return lens

    @property
    def pages_per_seq(self) -> int:
        """Block-table entries per sequence of a paged cache: ``Lk`` in whole pages (0 otherwise)."""
        return -(-self.Lk // self.page_size) if self.layout == "paged" else 0

    def block_table(self) -> list[int]:
        """A paged cache's block table, ``B * pages_per_seq`` page numbers (row ``b`` for sequence
        ``b``): a shuffle of the pool's pages (``random.Random(lens_seed + 1)``), so no sequence's
        pages lie in order. Empty for other layouts."""
        pages = list(range(self.B * self.pages_per_seq))
        random.Random(self.lens_seed + 1).shuffle(pages)
        return pages

    @cached_property
    def _lens(self) -> tuple[int, ...]:
        return tuple(self.seqlens())

    @property
    def kv_rows(self) -> int:
        """Key rows the problem holds per K/V head, over the batch (what a kernel must read)."""
        return sum(self._lens)

    @property
    def shift(self) -> int:
        """The kernel ABI's causal offset: query i sees keys j <= i + shift (docs/kernel-abi.md)."""
        return self.Lk - self.L if self.align == "bottom_right" else 0

    @property
    def visible_pairs(self) -> float:
        """(query, key) pairs the mask lets through, per head; the flash-attention convention
        (half of L * L) for a square causal problem, the exact count otherwise (with lengths per
        sequence: their mean over the batch)."""
        if self.layout != "contiguous":
            return sum(_visible(self.L, n, n - self.L, self.causal) for n in self._lens) / self.B
        if self.causal and self.Lk == self.L:
            return self.L * self.L / 2
        return _visible(self.L, self.Lk, self.shift, self.causal)

    @property
    def flops(self) -> float:
        """Forward FLOPs: 4 * D per visible (query, key) pair per head (two GEMMs)."""
        return 4.0 * self.B * self.H * self.D * self.visible_pairs

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.H // self.Hkv

    @property
    def tag(self) -> str:
        return f"{self.case}{'c' if self.causal else ''}-{self.dtype}"

    @property
    def dims(self) -> str:
        """``2,8,512,64`` (B, H, L, D), with ``H/Hkv`` and ``Lq/Lk`` where they differ and ``br``
        for a bottom-right causal mask: how tables and messages print a problem."""
        heads = f"{self.H}/{self.Hkv}" if self.Hkv != self.H else f"{self.H}"
        length = f"{self.L}/{self.Lk}" if self.Lk != self.L else f"{self.L}"
        cache = {"contiguous": "", "lens": f" lens {self.lens_min}..{self.Lk}",
                 "paged": f" paged{self.page_size} {self.lens_min}..{self.Lk}"}[self.layout]
        return f"{self.B},{heads},{length},{self.D}" + (" br" if self.align == "bottom_right" else "") + cache

    def as_dict(self) -> dict[str, Any]:
        """The shape as every JSON file and table row of evo writes it (and the store's columns);
        ``Hkv``, ``Lk`` and ``align`` only where they differ from ``H``, ``L`` and top-left, so a
        multi-head self-attention problem reads as it always did."""
        d: dict[str, Any] = {"case": self.case, "B": self.B, "H": self.H, "L": self.L, "D": self.D,
                             "causal": self.causal, "dtype": self.dtype}
        if self.Hkv != self.H:
            d["Hkv"] = self.Hkv
        if self.Lk != self.L:
            d["Lk"] = self.Lk
        if self.align != "top_left":
            d["align"] = self.align
        if self.layout != "contiguous":
            d |= {"layout": self.layout, "lens_min": self.lens_min, "lens_seed": self.lens_seed}
            if self.page_size:
                d["page_size"] = self.page_size
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Shape:
        """The inverse of :meth:`as_dict` (a missing dtype is fp16, as in the oldest recordings)."""
        return cls(str(d["case"]), int(d["B"]), int(d["H"]), int(d["L"]), int(d["D"]), bool(d["causal"]),
                   str(d.get("dtype", "fp16")), int(d.get("Hkv") or 0), int(d.get("Lk") or 0),
                   str(d.get("align") or "top_left"), str(d.get("layout") or "contiguous"),
                   int(d.get("lens_min") or 0), int(d.get("lens_seed") or 0), int(d.get("page_size") or 0))


def _visible(L: int, Lk: int, shift: int, causal: bool) -> float:
    """(query, key) pairs L queries see of Lk keys, query i seeing keys j <= i + shift when causal."""
    if not causal:
        return float(L * Lk)
    # row i sees clamp(i + shift + 1, 0, Lk) keys: the sum of clamp(a, 0, Lk) over
    # a = shift + 1 .. shift + L, as the difference of two prefix sums
    def prefix(n: int) -> int:  # sum of min(a, Lk) for a = 1 .. n (0 for n <= 0)
        m = min(max(n, 0), Lk)
        return m * (m + 1) // 2 + max(n - Lk, 0) * Lk
    return float(prefix(shift + L) - prefix(shift))


@dataclass
class CheckResult:
    """One GREEN check: one shape x seed. ``passed`` is the gate's verdict for it."""

    shape: Shape
    seed: int
    passed: bool
    max_abs_err: float
    ref_err: float           # error of PyTorch's own low-precision SDPA against the fp32 reference
    tolerance: float         # 2 * ref_err + floor
    reason: str = ""         # empty when passed; else what failed (nan, unwritten, mismatch, ...)


@dataclass(frozen=True)
class Fidelity:
    """An independent measurement of the launches FAST timed: CUPTI kernel timestamps (through
    torch.profiler) of replays of the same captured graph, per launch (microseconds).

    ``median_us`` / ``p20_us`` / ``p80_us``: first kernel start to last kernel end of a replay,
    over its launches (what CUDA events measure, gaps between launches included);
    ``busy_us``: the kernels' own durations summed, per launch (median over replays);
    ``events_us``: CUDA events around the same profiled replays, per launch (median): how much
    the profiler itself slowed them."""

    median_us: float
    p20_us: float
    p80_us: float
    busy_us: float
    replays: int
    events_us: float = 0.0


@dataclass
class Timing:
    """Device-time statistics of one backend on one shape (microseconds per launch)."""

    shape: Shape
    backend: str             # "evo", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_default"
    median_us: float
    p20_us: float
    p80_us: float
    samples_us: list[float] = field(default_factory=list)
    flagged: str = ""        # non-empty when implausible, spread wide or unconfirmed (and why)
    fidelity: Fidelity | None = None  # the profiler's measurement of the same launches (evo bench)

    @property
    def tflops(self) -> float:
        return self.shape.flops / (self.median_us * 1e-6) / 1e12


@dataclass
class Evaluation:
    """Everything the GPU worker learned about one built candidate."""

    build_id: str
    status: Status           # CRASHED, TIMEOUT, RED, GREEN or FAST
    reason: str = ""
    checks: list[CheckResult] = field(default_factory=list)
    timings: list[Timing] = field(default_factory=list)
    device: dict[str, str] = field(default_factory=dict)
    green_seconds: float = 0.0
    fast_seconds: float = 0.0

"""Plain records that cross stage and process boundaries (picklable, no ORM, no torch).

The build stage produces a BuildResult, the GPU worker an Evaluation made of CheckResults
(GREEN) and Timings (FAST); the store maps them to rows, the search reads their status and
score. Keeping them here lets every stage be tested alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from evo.vocab import Status

__all__ = ["BuildResult", "CheckResult", "Evaluation", "Fidelity", "Resources", "Shape", "Status", "Timing"]


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


@dataclass(frozen=True)
class Shape:
    """One attention problem: (B, H, L, D), causal, dtype; ``case`` names it in a suite (G1, F3)."""

    case: str
    B: int
    H: int
    L: int
    D: int
    causal: bool
    dtype: str = "fp16"

    @property
    def flops(self) -> float:
        """Forward FLOPs, flash-attention convention: 4*B*H*L*L*D, halved when causal."""
        f = 4.0 * self.B * self.H * self.L * self.L * self.D
        return f / 2 if self.causal else f

    @property
    def tag(self) -> str:
        return f"{self.case}{'c' if self.causal else ''}-{self.dtype}"

    def as_dict(self) -> dict[str, Any]:
        """The shape as every JSON file and table row of evo writes it (and the store's columns)."""
        return {"case": self.case, "B": self.B, "H": self.H, "L": self.L, "D": self.D, "causal": self.causal,
                "dtype": self.dtype}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Shape:
        """The inverse of :meth:`as_dict` (a missing dtype is fp16, as in the oldest recordings)."""
        return cls(str(d["case"]), int(d["B"]), int(d["H"]), int(d["L"]), int(d["D"]), bool(d["causal"]),
                   str(d.get("dtype", "fp16")))


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

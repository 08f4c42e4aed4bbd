"""GREEN: decide, case by case, whether a kernel computes attention correctly (DESIGN.md, GREEN).

One check = one shape x one seed: fresh normal inputs (seeded by case, seed and a per-evaluation
salt), a reference from SDPA's math backend on the inputs upcast to float32 (float64 for small
shapes), and PyTorch's own low-precision SDPA against that reference to set the tolerance
(``multiplier * ref_err + floor``). The candidate writes into an output view between two guard
regions, all poisoned with a NaN payload no arithmetic produces, and then must have: written
nothing outside the view, left its inputs bit-identical, written every element, produced no NaN
or Inf, stayed within tolerance, and produced the same bits when run again.

The launch is any callable ``launch(q, k, v, o, causal, scale)``: a compiled candidate on the
GPU, or plain torch code on CPU tensors in the tests. Nothing here catches exceptions: a CUDA
fault propagates so the worker can mark the candidate ``crashed``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Collection, Sequence

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from evo.errors import EvoError
from evo.results import CheckResult, Shape, Status
from evo.suites import GreenSettings

Launch = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, bool, float], None]

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# Quiet NaNs with a payload that arithmetic never yields (GPUs and CPUs produce the canonical NaN),
# so an element still holding exactly these bits was never written.
POISON = {"fp16": 0x7E5A, "bf16": 0x7FE5}


def input_seed(shape: Shape, seed: int, salt: int) -> int:
    """The generator seed of one check: stable per (case, seed, salt), independent of process."""
    key = (f"{shape.case}|{shape.B},{shape.H},{shape.L},{shape.D}|{int(shape.causal)}|"
           f"{shape.dtype}|{seed}|{salt}")
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little") >> 1


def make_inputs(shape: Shape, seed: int, salt: int,
                device: str | torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Independent standard-normal q, k, v of ``shape`` in its dtype (never zeros, never equal)."""
    gen = torch.Generator(device=device).manual_seed(input_seed(shape, seed, salt))
    dims = (shape.B, shape.H, shape.L, shape.D)
    dt = TORCH_DTYPES[shape.dtype]
    q, k, v = (torch.randn(dims, generator=gen, device=device, dtype=torch.float32).to(dt)
               for _ in range(3))
    return q, k, v


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
              dtype: torch.dtype, max_scores_bytes: int = 1 << 30) -> torch.Tensor:
    """SDPA's math backend on the inputs upcast to ``dtype``, with full-precision float32 matmuls.

    Heads go through in chunks whose L x L score matrices stay under ``max_scores_bytes``, so
    long FAST shapes can be re-checked without materializing every head's scores at once.
    """
    B, H, L, D = q.shape
    step = max(1, max_scores_bytes // (L * L * torch.finfo(dtype).bits // 8))
    heads = [t.reshape(B * H, L, D) for t in (q, k, v)]
    prev = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        with sdpa_kernel(SDPBackend.MATH):
            out = [F.scaled_dot_product_attention(*(t[i:i + step].to(dtype) for t in heads),
                                                  is_causal=causal, scale=scale)
                   for i in range(0, B * H, step)]
    finally:
        torch.set_float32_matmul_precision(prev)
    return torch.cat(out).view(B, H, L, D)


def max_abs_err(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, tuple[int, ...] | None]:
    """max |out - ref| and its index (b, h, row, col); ``inf`` and no index if anything is not finite."""
    diff = (out.to(ref.dtype) - ref).abs()
    if not bool(torch.isfinite(diff).all()):
        return math.inf, None
    flat = int(diff.argmax())
    err = float(diff.reshape(-1)[flat])
    index = []
    for n in reversed(diff.shape):
        flat, i = divmod(flat, n)
        index.append(i)
    return err, tuple(reversed(index))


class GuardedOutput:
    """An output view of ``shape`` with guard regions before and after it, all NaN-poisoned."""

    def __init__(self, shape: Shape, guard: int, device: str | torch.device) -> None:
        self.n = shape.B * shape.H * shape.L * shape.D
        self.guard = guard
        self.pattern = POISON[shape.dtype]
        self.buf = torch.empty(self.n + 2 * guard, dtype=TORCH_DTYPES[shape.dtype], device=device)
        self.out = self.buf[guard:guard + self.n].view(shape.B, shape.H, shape.L, shape.D)

    def poison(self) -> None:
        self.buf.view(torch.int16).fill_(self.pattern)

    def guards_changed(self) -> int:
        bits = self.buf.view(torch.int16)
        return int((bits[:self.guard] != self.pattern).sum()
                   + (bits[self.guard + self.n:] != self.pattern).sum())

    def unwritten(self) -> int:
        return int((self.out.view(torch.int16) == self.pattern).sum())


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(torch.int16), b.view(torch.int16))


def _memory_faults(buf: GuardedOutput, inputs: Sequence[torch.Tensor],
                   copies: Sequence[torch.Tensor]) -> str:
    """Writes outside the output view, or into the inputs."""
    oob = buf.guards_changed()
    if oob:
        return f"wrote out of bounds: {oob} guard elements changed"
    touched = [n for n, a, b in zip("qkv", inputs, copies) if not _same_bits(a, b)]
    if touched:
        return f"modified its inputs: {', '.join(touched)}"
    return ""


def _output_faults(buf: GuardedOutput, err: float, where: tuple[int, ...] | None, tol: float) -> str:
    """Unwritten, NaN or Inf elements, or an error over tolerance."""
    out = buf.out
    unwritten = buf.unwritten()
    if unwritten:
        return f"unwritten: {unwritten} of {buf.n} output elements still hold the NaN poison"
    nans = int(torch.isnan(out).sum())
    if nans:
        return f"NaN in output: {nans} elements"
    infs = int(torch.isinf(out).sum())
    if infs:
        return f"Inf in output: {infs} elements"
    if err > tol and where is not None:
        b, h, i, d = where
        return f"max|err| {err:.1e} > tol {tol:.1e} at b={b} h={h} row {i} col {d}"
    return ""


def check_case(launch: Launch, shape: Shape, seed: int, settings: GreenSettings, *,
               salt: int = 0, device: str | torch.device = "cuda") -> CheckResult:
    """Run one GREEN check of ``launch`` on ``shape`` with inputs drawn for (seed, salt)."""
    q, k, v = make_inputs(shape, seed, salt, device)
    scale = 1.0 / math.sqrt(shape.D)
    wide = torch.float64 if shape.B * shape.H * shape.L * shape.L < settings.float64_below \
        else torch.float32
    ref = reference(q, k, v, shape.causal, scale, wide)
    ref_err, _ = max_abs_err(F.scaled_dot_product_attention(q, k, v, is_causal=shape.causal,
                                                            scale=scale), ref)
    if not math.isfinite(ref_err):
        raise EvoError(f"PyTorch's own SDPA is not finite on {shape.tag}: no tolerance to gate with")
    tol = settings.tolerance(ref_err, shape.dtype)
    copies = (q.clone(), k.clone(), v.clone())
    buf = GuardedOutput(shape, settings.guard_elements, device)

    buf.poison()
    launch(q, k, v, buf.out, shape.causal, scale)
    first = buf.out.clone()
    err, where = max_abs_err(first, ref)
    reason = _memory_faults(buf, (q, k, v), copies) or _output_faults(buf, err, where, tol)
    if not reason:
        buf.poison()
        launch(q, k, v, buf.out, shape.causal, scale)
        reason = _memory_faults(buf, (q, k, v), copies)
        if not reason and not _same_bits(buf.out, first):
            differ = int((buf.out.view(torch.int16) != first.view(torch.int16)).sum())
            reason = f"non-deterministic: {differ} elements differ between two runs on the same inputs"
    return CheckResult(shape, seed, not reason, err, ref_err, tol, reason)


def run_green(launch: Launch, cases: Sequence[Shape], settings: GreenSettings, salt: int, *,
              device: str | torch.device = "cuda") -> list[CheckResult]:
    """Every case x every seed of ``settings``, in order; all results kept, nothing caught."""
    return [check_case(launch, shape, seed, settings, salt=salt, device=device)
            for shape in cases for seed in settings.seeds]


def label(check: CheckResult) -> str:
    """``G4c fp16 seed 1``: which case, causal mode, dtype and seed a check ran."""
    s = check.shape
    return f"{s.case}{'c' if s.causal else ''} {s.dtype} seed {check.seed}"


def verdict(checks: Sequence[CheckResult],
            gate_dtypes: Collection[str] | None = None) -> tuple[Status, str]:
    """GREEN only if every gating check passed; else RED naming the first failure.

    ``gate_dtypes`` limits which dtypes count (default: all of them, as green.toml has it).
    """
    gating = [c for c in checks if gate_dtypes is None or c.shape.dtype in gate_dtypes]
    if not gating:
        return Status.RED, "no GREEN checks ran"
    failed = [c for c in gating if not c.passed]
    if failed:
        more = f" (and {len(failed) - 1} more failing checks)" if len(failed) > 1 else ""
        return Status.RED, f"{label(failed[0])}: {failed[0].reason}{more}"
    worst = max(gating, key=lambda c: c.max_abs_err / c.tolerance)
    return Status.GREEN, (f"all {len(gating)} checks passed; worst max|err|/tol "
                          f"{worst.max_abs_err / worst.tolerance:.2f} at {label(worst)}")

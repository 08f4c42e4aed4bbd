"""GREEN: decide, case by case, whether a kernel computes attention correctly (docs/design.md, GREEN).

One check = one case x one seed: fresh normal inputs (seeded by case, seed and a per-evaluation
salt; of the case's spread, with a spiked key if it has one), a reference from SDPA's math
backend on the inputs upcast to float32 (float64 for small shapes), and PyTorch's own
low-precision SDPA against that reference to set the tolerance (``multiplier * ref_err +
floor``), all at the case's scale. The candidate writes into an output view between two guard
regions, all poisoned with a NaN payload no arithmetic produces, and then must have: written
nothing outside the view, left its inputs bit-identical, written every element, produced no NaN
or Inf, stayed within tolerance, and produced the same bits when run again.

:func:`check_outputs` applies the same rule to outputs a kernel wrote while it was being timed
(FAST), against a reference on freshly regenerated inputs, many input sets at once.

The launch is any callable ``launch(q, k, v, o, causal, scale, shift)`` (docs/kernel-abi.md:
q and o ``(B, Hq, Lq, D)``, k and v ``(B, Hkv, Lk, D)``, query i sees keys j <= i + shift when
causal): a compiled candidate on the GPU, or plain torch code on CPU tensors in the tests. A
problem with per-sequence lengths or a paged cache (``Shape.layout``) also passes ``seqlens=`` and
``block_table=`` (k and v then the pool), and its reference takes each sequence alone. Nothing here catches exceptions: a CUDA
fault propagates so the worker can mark the candidate ``crashed``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from evo.errors import EvoError
from evo.results import CheckResult, Shape, Status
from evo.gpu.layouts import cache_args, from_pages, to_pages
from evo.gpu.suites import INPUTS, GreenCase, GreenSettings

if TYPE_CHECKING:   # the module itself is imported where a mask needs it (sdpa)
    from torch.nn.attention.bias import CausalBias

Launch = Callable[..., None]
"""``launch(q, k, v, o, causal, scale, shift)``, and for a problem with a lens or paged cache also
the keywords ``seqlens`` and ``block_table`` (:func:`evo.gpu.layouts.cache_args`)."""

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# Quiet NaNs with a payload that arithmetic never yields (GPUs and CPUs produce the canonical NaN),
# so an element still holding exactly these bits was never written.
POISON = {"fp16": 0x7E5A, "bf16": 0x7FE5}


def input_seed(shape: Shape, seed: int, salt: int) -> int:
    """The generator seed of one check: stable per (case, seed, salt), independent of process."""
    key = (f"{shape.case}|{shape.B},{shape.H},{shape.L},{shape.D}|{int(shape.causal)}|"
           f"{shape.dtype}|{seed}|{salt}")
    if (shape.Hkv, shape.Lk, shape.align) != (shape.H, shape.L, "top_left"):  # older keys unchanged
        key += f"|{shape.Hkv},{shape.Lk},{shape.align}"
    if shape.layout != "contiguous":
        key += f"|{shape.layout},{shape.lens_min},{shape.lens_seed},{shape.page_size}"
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little") >> 1


FLAT = 1e-4          # "flat" queries: this fraction of the drawn spread, so every score is near zero
HEAVY_CLIP = 30.0    # "heavy" entries stay within 30 standard deviations (fp16's range, with the spike's room)
PLACED_GAP = 256     # bytes between the "placed" tensors inside their one allocation
SPIKES_TAIL = 32     # "spikes": the larger spiked key lies among the last this many keys (the last split)


def _normal(dims: tuple[int, ...], gen: torch.Generator, device: str | torch.device, heavy: bool) -> torch.Tensor:
    """Standard normal entries, or Student-t with 3 degrees of freedom scaled to variance 1."""
    z = torch.randn(dims, generator=gen, device=device, dtype=torch.float32)
    if not heavy:
        return z
    chi2 = torch.randn((3, *dims), generator=gen, device=device, dtype=torch.float32).square().sum(0)
    t = z / torch.sqrt(chi2 / 3).clamp_min(1e-3) / math.sqrt(3.0)
    return t.clamp(-HEAVY_CLIP, HEAVY_CLIP)


def _placed(tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Copies of ``tensors`` as contiguous views into one allocation, last first, each after a gap
    of :data:`PLACED_GAP` bytes: inputs that share a buffer and start at offsets, not at the
    allocator's own (2 MB-aligned) addresses."""
    gap = PLACED_GAP // tensors[0].element_size()
    n = tensors[0].numel()
    pool = torch.empty(len(tensors) * (n + gap), dtype=tensors[0].dtype, device=tensors[0].device)
    out = []
    for i, t in enumerate(reversed(tensors)):
        start = i * (n + gap) + gap
        view = pool[start:start + n].view(t.shape)
        view.copy_(t)
        out.append(view)
    return tuple(reversed(out))


def make_inputs(shape: Shape, seed: int, salt: int, device: str | torch.device, *, std: float = 1.0,
                spike: float = 0.0, inputs: str = "normal") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v of ``shape`` in its dtype (never zeros, never equal), of standard deviation ``std``,
    drawn as ``inputs`` says (:data:`evo.gpu.suites.INPUTS`): independent normal entries by default;
    ``spike`` > 0 multiplies one key row per key/value head, drawn from the first half of the keys
    (so that under a causal mask most rows see it), by ``spike``; with ``inputs="spikes"`` two: one
    in the first eighth by ``spike / 2`` and one among the last :data:`SPIKES_TAIL` keys by ``spike``.
    q is (B, H, L, D), k and v (B, Hkv, Lk, D)."""
    if inputs not in INPUTS:
        raise EvoError(f"unknown GREEN inputs {inputs!r}; one of {', '.join(INPUTS)}")
    gen = torch.Generator(device=device).manual_seed(input_seed(shape, seed, salt))
    q_dims, kv_dims = (shape.B, shape.H, shape.L, shape.D), (shape.B, shape.Hkv, shape.Lk, shape.D)
    q, k, v = (_normal(d, gen, device, inputs == "heavy") * std for d in (q_dims, kv_dims, kv_dims))
    if inputs == "flat":
        q *= FLAT
    elif inputs == "mixed":
        q[:, :, 0::2] *= FLAT
    elif inputs == "equal_keys":
        k = k[:, :, :1].expand(kv_dims).clone()
    if spike and shape.layout != "contiguous":
        _spike_sequences(k, shape, spike, inputs == "spikes", gen)
    elif spike:
        b, h = torch.meshgrid(torch.arange(shape.B, device=device), torch.arange(shape.Hkv, device=device),
                              indexing="ij")
        if inputs == "spikes":    # far apart, so a split-KV kernel holds them in different splits
            first = torch.randint(0, max(1, shape.Lk // 8), (shape.B, shape.Hkv), generator=gen, device=device)
            last = torch.randint(max(0, shape.Lk - SPIKES_TAIL), shape.Lk, (shape.B, shape.Hkv), generator=gen,
                                 device=device)
            k[b, h, first] *= spike / 2
            k[b, h, last] *= spike
        else:
            rows = torch.randint(0, (shape.Lk + 1) // 2, (shape.B, shape.Hkv), generator=gen, device=device)
            k[b, h, rows] *= spike
    dt = TORCH_DTYPES[shape.dtype]
    typed = (q.to(dt), k.to(dt), v.to(dt))
    if inputs == "placed":
        q, k, v = _placed(typed)
        return q, k, v
    return typed


def _spike_sequences(k: torch.Tensor, shape: Shape, spike: float, two: bool, gen: torch.Generator) -> None:
    """:func:`make_inputs`'s spiked keys where each sequence has its own length n (a lens or paged
    cache): one key of each (sequence, K/V head) in its first half multiplied by ``spike``, or with
    ``two`` one among its last :data:`SPIKES_TAIL` keys (its last split) by ``spike`` and, where n is
    16 or more, one in its first eighth by ``spike / 2`` (never the same key). A sequence of no keys
    gets none."""
    n = torch.tensor(shape.seqlens(), device=k.device).unsqueeze(1).expand(shape.B, shape.Hkv)
    b, h = torch.meshgrid(torch.arange(shape.B, device=k.device), torch.arange(shape.Hkv, device=k.device),
                          indexing="ij")

    def spike_at(where: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, factor: float) -> None:
        """Multiply one key drawn from lo .. hi - 1 of each (sequence, head) where ``where``."""
        pick = lo + (torch.rand(n.shape, generator=gen, device=k.device) * (hi - lo).clamp_min(1)).long()
        k[b[where], h[where], pick.clamp(0, shape.Lk - 1)[where]] *= factor

    zero = torch.zeros_like(n)
    if two:
        spike_at(n > 0, torch.maximum(n // 8, n - SPIKES_TAIL), n, spike)
        spike_at(n >= 16, zero, n // 8, spike / 2)
    else:
        spike_at(n > 0, zero, (n + 1) // 2, spike)


def causal_mask(L: int, Lk: int, shift: int, device: str | torch.device) -> torch.Tensor:
    """The ABI's causal mask as booleans (L, Lk): query i sees key j when j <= i + shift."""
    i = torch.arange(L, device=device).unsqueeze(1)
    return torch.arange(Lk, device=device).unsqueeze(0) <= i + shift


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, shift: int,
         scale: float | None = None) -> torch.Tensor:
    """PyTorch's SDPA on an ABI problem (GQA heads, Lq != Lk, the causal mask at ``shift``), in
    whatever backend it picks: the top-left mask as ``is_causal``, the bottom-right one as
    ``causal_lower_right`` (Lq < Lk), any other shift as a boolean mask. Rows that see no key are left as
    SDPA leaves them (NaN in some backends): :func:`zero_unseen` sets the ABI's zeros."""
    Lq, Lk = q.shape[2], k.shape[2]
    gqa = q.shape[1] != k.shape[1]
    if not causal or shift == 0:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa)
    mask: torch.Tensor | CausalBias
    if shift == Lk - Lq > 0:
        # imported here only: torch.nn.attention.bias brings about 830 modules (torch._dynamo, sympy), which a
        # GPU worker compiled from source in 4-5 s of its first request (dev/perf-notes.md, 2026-11-28 l)
        from torch.nn.attention.bias import causal_lower_right

        mask = causal_lower_right(Lq, Lk)
    else:
        mask = causal_mask(Lq, Lk, shift, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)


def zero_unseen(o: torch.Tensor, causal: bool, shift: int) -> torch.Tensor:
    """``o`` with the rows that see no key (causal, i + shift < 0) set to zero, as the ABI has them."""
    if causal and shift < 0:
        o[:, :, :min(-shift, o.shape[2])] = 0
    return o


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
              dtype: torch.dtype, max_scores_bytes: int = 1 << 30, shift: int = 0) -> torch.Tensor:
    """SDPA's math backend on the inputs upcast to ``dtype``, with full-precision float32 matmuls;
    k and v may have fewer heads (each serves ``Hq / Hkv`` query heads, expanded here) and
    another length; a causal mask at ``shift``; rows that see no key are zeros (the ABI's rule).

    Heads go through in chunks whose Lq x Lk score matrices stay under ``max_scores_bytes``, so
    long FAST shapes can be re-checked without materializing every head's scores at once.
    """
    B, H, L, D = q.shape
    group = H // k.shape[1]
    k, v = (t.repeat_interleave(group, dim=1) if group > 1 else t for t in (k, v))
    Lk = k.shape[2]
    step = max(1, max_scores_bytes // (L * Lk * torch.finfo(dtype).bits // 8))
    heads = [t.reshape(B * H, t.shape[2], D) for t in (q, k, v)]
    mask = causal_mask(L, Lk, shift, q.device) if causal and (shift or Lk != L) else None
    prev = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        with sdpa_kernel(SDPBackend.MATH):
            out = [F.scaled_dot_product_attention(heads[0][i:i + step].to(dtype), heads[1][i:i + step].to(dtype),
                                                  heads[2][i:i + step].to(dtype), attn_mask=mask,
                                                  is_causal=causal and mask is None, scale=scale)
                   for i in range(0, B * H, step)]
    finally:
        torch.set_float32_matmul_precision(prev)
    return zero_unseen(torch.cat(out).view(B, H, L, D), causal, shift)


def problem_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, shape: Shape, scale: float,
                      dtype: torch.dtype) -> torch.Tensor:
    """:func:`reference` on ``shape``'s problem, k and v the (B, Hkv, Lk, D) cache: with lengths
    per sequence (a lens or paged cache), each sequence alone on its first ``seqlens()[b]`` keys,
    the causal mask at its bottom right, and a sequence of no keys all zeros."""
    if shape.layout == "contiguous":
        return reference(q, k, v, shape.causal, scale, dtype, shift=shape.shift)
    out = torch.zeros(q.shape, dtype=dtype, device=q.device)
    for b, n in enumerate(shape.seqlens()):
        if n:
            out[b:b + 1] = reference(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n], shape.causal, scale, dtype,
                                     shift=n - shape.L)
    return out


# PyTorch's backends for the tolerance's own SDPA, in this order: never cuDNN, which builds an
# execution plan for every new shape (about 25 ms each on an H100, 1.9 s for one D=256 draw), and
# every drawn GREEN case is a new shape: with it, PyTorch's SDPA was 4.0 s of GREEN's 4.4 s.
TOLERANCE_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def own_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, shift: int,
             scale: float | None) -> torch.Tensor:
    """:func:`sdpa` in a low-precision flash-style backend (:data:`TOLERANCE_BACKENDS`), rows
    that see no key zeros. A boolean mask (a causal shift neither top left nor bottom right) on
    grouped K/V heads gets the heads expanded first: the memory-efficient backend takes masks but
    not groups, and math, the one left, computes in float32 and would tighten the tolerance."""
    Lq, Lk = q.shape[2], k.shape[2]
    group = q.shape[1] // k.shape[1]
    if causal and shift != 0 and not shift == Lk - Lq > 0 and group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    with sdpa_kernel(TOLERANCE_BACKENDS, set_priority=True):
        return zero_unseen(sdpa(q, k, v, causal=causal, shift=shift, scale=scale), causal, shift)


def problem_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, shape: Shape, scale: float) -> torch.Tensor:
    """PyTorch's own SDPA in the inputs' dtype on ``shape``'s problem (:func:`own_sdpa`; k and v the
    (B, Hkv, Lk, D) cache; per sequence where each has its length, as :func:`problem_reference`),
    rows that see no key zeros: what sets GREEN's tolerance."""
    if shape.layout == "contiguous":
        return own_sdpa(q, k, v, causal=shape.causal, shift=shape.shift, scale=scale)
    out = torch.zeros_like(q)
    for b, n in enumerate(shape.seqlens()):
        if n:
            out[b:b + 1] = own_sdpa(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n], causal=shape.causal,
                                    shift=n - shape.L, scale=scale)
    return out


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
    touched = [n for n, a, b in zip("qkv", inputs, copies, strict=True) if not _same_bits(a, b)]
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


def wide_dtype(shape: Shape, settings: GreenSettings) -> torch.dtype:
    """The reference's precision: float64 for small problems, float32 otherwise."""
    return torch.float64 if settings.float64_below > shape.B * shape.H * shape.L * shape.Lk else torch.float32


def _as_case(case: Shape | GreenCase) -> GreenCase:
    return case if isinstance(case, GreenCase) else GreenCase(case)


def check_case(launch: Launch, case: Shape | GreenCase, seed: int, settings: GreenSettings, *,
               salt: int = 0, device: str | torch.device = "cuda") -> CheckResult:
    """Run one GREEN check of ``launch`` on ``case`` with inputs drawn for (seed, salt)."""
    case = _as_case(case)
    shape = case.shape
    q, k, v = make_inputs(shape, seed, salt, device, std=case.std, spike=case.spike, inputs=case.inputs)
    scale = case.scale_for()
    ref = problem_reference(q, k, v, shape, scale, wide_dtype(shape, settings))
    own = problem_sdpa(q, k, v, shape, scale)
    ref_err, _ = max_abs_err(own, ref)
    if not math.isfinite(ref_err):
        raise EvoError(f"PyTorch's own SDPA is not finite on {shape.tag}: no tolerance to gate with")
    tol = settings.tolerance(ref_err, shape.dtype)
    k, v = to_pages(k, shape), to_pages(v, shape)            # the kernel's own layout (a pool if paged)
    cache = cache_args(shape, q.device)                      # seqlens, block_table: none if contiguous
    copies = (q.clone(), k.clone(), v.clone())
    buf = GuardedOutput(shape, settings.guard_elements, device)

    buf.poison()
    launch(q, k, v, buf.out, shape.causal, scale, shape.shift, **cache)
    first = buf.out.clone()
    err, where = max_abs_err(first, ref)
    reason = _memory_faults(buf, (q, k, v), copies) or _output_faults(buf, err, where, tol)
    if not reason:
        buf.poison()
        launch(q, k, v, buf.out, shape.causal, scale, shape.shift, **cache)
        reason = _memory_faults(buf, (q, k, v), copies)
        if not reason and not _same_bits(buf.out, first):
            differ = int((buf.out.view(torch.int16) != first.view(torch.int16)).sum())
            reason = f"non-deterministic: {differ} elements differ between two runs on the same inputs"
    return CheckResult(shape, seed, not reason, err, ref_err, tol, reason)


def check_cost(case: Shape | GreenCase) -> int:
    """What one check of ``case`` costs, about: the reference's work, B * H * Lq * Lk * D. A
    small problem is also the decisive one for most bugs (a length one off a tile, a single
    row), so cheapest first finds a failure soonest."""
    s = _as_case(case).shape
    return s.B * s.H * s.L * s.Lk * s.D


def run_green(launch: Launch, cases: Sequence[Shape | GreenCase], settings: GreenSettings, salt: int, *,
              device: str | torch.device = "cuda", first_failure: bool = False) -> list[CheckResult]:
    """Every case x its seeds (the settings' seeds unless the case has its own), cheapest case
    first (:func:`check_cost`; equal costs in the order given); nothing caught. With
    ``first_failure`` (a search) the run stops at the first failing check of a gating dtype:
    one is enough for a red verdict, and a kernel off by one tile fails on the smallest cases
    in milliseconds instead of after every long one."""
    out = []
    for case in sorted(map(_as_case, cases), key=check_cost):
        for seed in case.seeds if case.seeds is not None else settings.seeds:
            out.append(check := check_case(launch, case, seed, settings, salt=salt, device=device))
            if first_failure and not check.passed and check.shape.dtype in settings.gate_dtypes:
                return out
    return out


def _per_set_max(diff: torch.Tensor, n: int) -> list[float]:
    """max |x| of each of ``n`` equal slices of ``diff`` along dim 0; inf where one is not finite."""
    flat = diff.reshape(n, -1).abs()
    flat = torch.where(torch.isfinite(flat), flat, torch.full_like(flat, math.inf))
    return [float(x) for x in flat.amax(dim=1).tolist()]


InputSet = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def check_outputs(passes: Sequence[tuple[str, Sequence[torch.Tensor]]], fresh: Sequence[InputSet],
                  live: Sequence[InputSet], shape: Shape, scale: float, settings: GreenSettings,
                  guards: Sequence[GuardedOutput] = ()) -> str:
    """Why outputs a kernel wrote while it was timed are wrong ("" when all are right).

    ``fresh`` are the input sets regenerated from their seed and ``live`` the ones the kernel
    read, which must still be bit-identical; each pass pairs what it was (e.g. "after the timed
    replays") with one output per set. GREEN's rule per set: no guard element changed, no element
    left holding the poison, no NaN or Inf, and max|err| against the reference on the fresh
    inputs within ``multiplier`` x PyTorch's own error on that set + floor. All sets go through
    the reference at once (stacked along the batch dimension).
    """
    n = len(fresh)
    for i, (a, b) in enumerate(zip(live, fresh, strict=True)):
        touched = [name for name, x, y in zip("qkv", a, b, strict=True) if not _same_bits(x, y)]
        if touched:
            return f"set {i} of {n}: modified its inputs while timed: {', '.join(touched)}"
    for i, g in enumerate(guards):
        if g.guards_changed():
            return f"set {i} of {n}: wrote out of bounds while timed: {g.guards_changed()} guard elements changed"
    wide = wide_dtype(shape, settings)
    if shape.layout == "contiguous":
        q, k, v = (torch.cat([s[j] for s in fresh]) for j in range(3))
        ref, own = problem_reference(q, k, v, shape, scale, wide), problem_sdpa(q, k, v, shape, scale)
    else:                                                    # set by set: a pool is only a cache with its table
        caches = [(q, from_pages(k, shape), from_pages(v, shape)) for q, k, v in fresh]
        ref = torch.cat([problem_reference(*c, shape, scale, wide) for c in caches])
        own = torch.cat([problem_sdpa(*c, shape, scale) for c in caches])
    tols = [settings.tolerance(e, shape.dtype) for e in _per_set_max(own.to(wide) - ref, n)]
    if not all(math.isfinite(t) for t in tols):
        raise EvoError(f"PyTorch's own SDPA is not finite on {shape.tag}: no tolerance to check with")
    poison = POISON[shape.dtype]
    for what, outs in passes:
        for i, o in enumerate(outs):
            unwritten = int((o.view(torch.int16) == poison).sum())
            if unwritten:
                return f"{what}, set {i} of {n}: unwritten: {unwritten} of {o.numel()} output elements"
        errs = _per_set_max(torch.cat(list(outs)).to(wide) - ref, n)
        for i, (err, tol) in enumerate(zip(errs, tols, strict=True)):
            if not err <= tol:
                found = "NaN or Inf in output" if math.isinf(err) else f"max|err| {err:.1e} > tol {tol:.1e}"
                return f"{what}, set {i} of {n}: {found}"
    return ""


def label(check: CheckResult) -> str:
    """``G4c fp16 seed 1``: which case, causal mode, dtype and seed a check ran; a drawn case
    (its name spells its inputs) adds its shape: ``R07c fp16 seed 0 B,H,L,D=1,2,37,64 (sd=2.6 spike)``."""
    s = check.shape
    name, _, inputs = s.case.partition(" ")
    text = f"{name}{'c' if s.causal else ''} {s.dtype} seed {check.seed}"
    return text + (f" B,H,L,D={s.dims} ({inputs})" if inputs else "")


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

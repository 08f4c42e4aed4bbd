"""The GREEN gate on CPU: a correct torch launch passes; each negative control is red for its reason."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from evo.gpu import gate
from evo.errors import EvoError
from evo.gpu.gate import (POISON, GuardedOutput, check_case, label, make_inputs, max_abs_err,
                      reference, run_green, verdict)
from evo.results import CheckResult, Shape, Status
from evo.gpu.suites import GreenSettings

SETTINGS = GreenSettings(seeds=(0, 1), multiplier=2.0, floors={"fp16": 5e-4, "bf16": 4e-3},
                         guard_elements=64)
TILE = 16
RAGGED = Shape("T1", 2, 3, 37, 16, causal=True)  # 37 = 2 full tiles of 16 + a partial one
FULL = Shape("T2", 1, 2, 24, 32, causal=False)

Tensor = torch.Tensor


def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float,
              keys: int | None = None) -> Tensor:
    """Plain float32 attention; ``keys`` limits which keys are seen (a skipped KV tail)."""
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    L = q.shape[-2]
    seen = torch.ones(L, L, dtype=torch.bool)
    if causal:
        seen = seen.tril()
    if keys is not None:
        seen[:, keys:] = False
        seen[:, 0] = True  # keep every row's softmax defined
    return torch.softmax(s.masked_fill(~seen, -math.inf), dim=-1) @ v.float()


def correct(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    o.copy_(attention(q, k, v, causal, scale))


def writes_nothing(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    pass


def writes_zeros(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    o.zero_()


def skips_last_query_tile(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    full = q.shape[-2] // TILE * TILE
    o[:, :, :full].copy_(attention(q, k, v, causal, scale)[:, :, :full])


def skips_last_key_tile(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    o.copy_(attention(q, k, v, causal, scale, keys=q.shape[-2] // TILE * TILE))


def drops_scale(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    o.copy_(attention(q, k, v, causal, 1.0))


def ignores_causal(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    o.copy_(attention(q, k, v, False, scale))


def _beside(o: Tensor, offset: int) -> Tensor:
    """One element of o's storage ``offset`` elements from o's first (negative: before it)."""
    return torch.as_strided(o, (1,), (1,), o.storage_offset() + offset)


def writes_after(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    correct(q, k, v, o, causal, scale)
    _beside(o, o.numel() + 5).fill_(1.0)


def writes_before(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    correct(q, k, v, o, causal, scale)
    _beside(o, -1).fill_(1.0)


def modifies_k(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    correct(q, k, v, o, causal, scale)
    k[0, 0, 0, 0] += 1


def writes_nan(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    correct(q, k, v, o, causal, scale)
    o[0, 0, 3, 1] = math.nan


def writes_inf(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    correct(q, k, v, o, causal, scale)
    o[0, 0, 3, 1] = -math.inf


def non_deterministic() -> Callable[..., None]:
    """Correct on the first call; one ulp off in one element on every later call."""
    calls = itertools.count()

    def launch(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
        correct(q, k, v, o, causal, scale)
        if next(calls) % 2:
            o.view(torch.int16)[0, 0, 0, 0] += 1
    return launch


def check(launch: Callable[..., None], shape: Shape, seed: int = 0, salt: int = 0) -> CheckResult:
    return check_case(launch, shape, seed, SETTINGS, salt=salt, device="cpu")


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("shape", [RAGGED, FULL], ids=["ragged-causal", "full"])
def test_correct_launch_passes(shape: Shape, dtype: str) -> None:
    r = check(correct, Shape(shape.case, shape.B, shape.H, shape.L, shape.D, shape.causal, dtype))
    assert r.passed and r.reason == "" and r.max_abs_err <= r.tolerance


def test_tolerance_is_twice_torch_error_plus_floor() -> None:
    r = check(correct, RAGGED)
    assert r.ref_err > 0
    assert r.tolerance == pytest.approx(2 * r.ref_err + SETTINGS.floors["fp16"])


@pytest.mark.parametrize(("launch", "shape", "reason"), [
    (writes_nothing, FULL, "unwritten: 1536 of 1536 output elements"),
    (writes_zeros, FULL, "max|err|"),
    (skips_last_query_tile, RAGGED, "unwritten"),
    (skips_last_key_tile, Shape("T3", 1, 2, 37, 16, causal=False), "max|err|"),
    (drops_scale, FULL, "max|err|"),
    (ignores_causal, RAGGED, "max|err|"),
    (writes_after, FULL, "wrote out of bounds: 1 guard elements"),
    (writes_before, FULL, "wrote out of bounds: 1 guard elements"),
    (modifies_k, FULL, "modified its inputs: k"),
    (writes_nan, FULL, "NaN in output: 1 elements"),
    (writes_inf, FULL, "Inf in output: 1 elements"),
    (non_deterministic(), FULL, "non-deterministic: 1 elements differ"),
], ids=lambda x: getattr(x, "__name__", None))
def test_negative_control_is_rejected(launch: Callable[..., None], shape: Shape, reason: str) -> None:
    r = check(launch, shape)
    assert not r.passed
    assert r.reason.startswith(reason), r.reason


def test_ignoring_the_causal_mask_is_harmless_without_one() -> None:
    assert check(ignores_causal, FULL).passed


def test_error_names_where_it_is_largest() -> None:
    def off_by_one(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
        correct(q, k, v, o, causal, scale)
        o[0, 1, 20, 7] += 1
    assert check(off_by_one, FULL).reason.endswith("at b=0 h=1 row 20 col 7")


def test_unwritten_output_has_infinite_error() -> None:
    assert check(writes_nothing, FULL).max_abs_err == math.inf


def test_poison_is_a_nan_arithmetic_does_not_make() -> None:
    for dtype, bits in POISON.items():
        t = torch.tensor([bits], dtype=torch.int16).view({"fp16": torch.float16,
                                                          "bf16": torch.bfloat16}[dtype])
        made = torch.tensor([math.nan], dtype=t.dtype).view(torch.int16)
        assert torch.isnan(t).all() and int(made) != bits


def test_guarded_output_is_an_aligned_view_between_guards() -> None:
    g = GuardedOutput(FULL, 64, "cpu")
    g.poison()
    assert g.out.shape == (1, 2, 24, 32) and g.out.storage_offset() == 64 and g.out.is_contiguous()
    assert g.unwritten() == g.out.numel() and g.guards_changed() == 0


def test_inputs_are_fresh_per_seed_and_salt_and_reproducible() -> None:
    q0, k0, v0 = make_inputs(FULL, 0, 0, "cpu")
    assert not torch.equal(q0, k0) and not torch.equal(k0, v0) and bool((q0 != 0).any())
    assert torch.equal(q0, make_inputs(FULL, 0, 0, "cpu")[0])
    assert not torch.equal(q0, make_inputs(FULL, 1, 0, "cpu")[0])
    assert not torch.equal(q0, make_inputs(FULL, 0, 7, "cpu")[0])


def test_max_abs_err_of_non_finite_output_is_inf() -> None:
    ref = torch.zeros(1, 1, 2, 2, dtype=torch.float64)
    assert max_abs_err(torch.full((1, 1, 2, 2), math.nan), ref) == (math.inf, None)
    assert max_abs_err(torch.tensor([[[[0.0, 0.5], [0.0, 0.0]]]]), ref) == (0.5, (0, 0, 0, 1))


def test_reference_in_head_chunks_equals_all_at_once() -> None:
    q, k, v = make_inputs(RAGGED, 0, 0, "cpu")
    whole = reference(q, k, v, True, 0.25, torch.float64)
    chunked = reference(q, k, v, True, 0.25, torch.float64, max_scores_bytes=2 * 37 * 37 * 8)
    assert whole.shape == (2, 3, 37, 16) and torch.equal(whole, chunked)


def test_float32_reference_for_large_shapes_also_passes() -> None:
    settings = GreenSettings(seeds=(0,), multiplier=2.0, floors=SETTINGS.floors,
                             guard_elements=64, float64_below=0)
    assert check_case(correct, RAGGED, 0, settings, device="cpu").passed


def test_non_finite_torch_result_is_an_error_not_a_free_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    real = F.scaled_dot_product_attention

    def sdpa(q: Tensor, *args: object, **kwargs: object) -> Tensor:
        out = real(q, *args, **kwargs)  # type: ignore[arg-type]
        return out.fill_(math.inf) if q.dtype == torch.float16 else out
    monkeypatch.setattr(gate.F, "scaled_dot_product_attention", sdpa)
    with pytest.raises(EvoError, match="not finite"):
        check(correct, FULL)


@pytest.mark.parametrize("shift", [0, 8, -3, 5])   # top left, bottom right (Lk - Lq), two boolean masks
def test_the_tolerance_sdpa_never_asks_cudnn_and_gives_grouped_masks_to_a_flash_style_backend(
        monkeypatch: pytest.MonkeyPatch, shift: int) -> None:
    """cuDNN builds a plan per new shape (GREEN's draws are all new): the tolerance's SDPA runs with
    it disabled and FlashAttention's backend first; a boolean mask on grouped heads gets its K/V
    heads expanded (the memory-efficient backend takes masks, not groups), so that math, which
    computes in float32, is not what sets the tolerance."""
    real, seen = gate.sdpa, []

    def spy(q: Tensor, k: Tensor, v: Tensor, *, causal: bool, shift: int, scale: float | None) -> Tensor:
        masked = causal and shift != 0 and shift != k.shape[2] - q.shape[2]
        seen.append((torch.backends.cuda.cudnn_sdp_enabled(), torch._C._get_sdp_priority_order()[0],
                     k.shape[1], masked))
        return real(q, k, v, causal=causal, shift=shift, scale=scale)
    monkeypatch.setattr(gate, "sdpa", spy)
    shape = Shape("T3", 1, 4, 16, 32, causal=True, Hkv=2, Lk=24)
    q, k, v = make_inputs(shape, 0, 0, "cpu")
    before = torch.backends.cuda.cudnn_sdp_enabled()
    own = gate.own_sdpa(q, k, v, causal=True, shift=shift, scale=0.2)
    cudnn, first, kv_heads, masked = seen[-1]
    assert not cudnn and first == int(gate.SDPBackend.FLASH_ATTENTION)
    assert masked == (shift not in (0, 8)) and kv_heads == (4 if masked else 2)
    ref = reference(q, k, v, True, 0.2, torch.float64, shift=shift)
    assert max_abs_err(own, ref)[0] < 1e-2
    assert torch.backends.cuda.cudnn_sdp_enabled() == before      # the flags are restored


def test_run_green_checks_every_case_and_seed_in_order() -> None:
    checks = run_green(correct, [FULL, RAGGED], SETTINGS, salt=3, device="cpu")
    assert [(c.shape, c.seed) for c in checks] == [(FULL, 0), (FULL, 1), (RAGGED, 0), (RAGGED, 1)]
    assert all(c.passed for c in checks)


def test_run_green_runs_the_cheapest_checks_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate, "check_case", lambda launch, case, seed, settings, **kw:
                        CheckResult(case.shape, seed, True, 0.0, 0.0, 1.0))
    wide = Shape("T3", 1, 64, 24, 32, causal=False)
    checks = run_green(correct, [RAGGED, wide, FULL], SETTINGS, salt=3, device="cpu")   # by B*H*L*Lk*D
    assert [(c.shape, c.seed) for c in checks] == [(FULL, 0), (FULL, 1), (RAGGED, 0), (RAGGED, 1), (wide, 0), (wide, 1)]


def test_run_green_stops_at_the_first_failure_when_asked() -> None:
    """A kernel that writes nothing fails its first check: a search needs no more to call it red;
    a failing check of a dtype that does not gate does not stop it."""
    checks = run_green(writes_nothing, [FULL, RAGGED], SETTINGS, salt=0, device="cpu", first_failure=True)
    assert [(c.shape, c.seed, c.passed) for c in checks] == [(FULL, 0, False)]
    assert verdict(checks)[0] is Status.RED
    bf16_only = GreenSettings(seeds=(0,), multiplier=2.0, floors=SETTINGS.floors, guard_elements=64, gate_dtypes=("bf16",))
    assert len(run_green(writes_nothing, [FULL, RAGGED], bf16_only, salt=0, device="cpu", first_failure=True)) == 2


def test_run_green_lets_launch_errors_propagate() -> None:
    def crashes(*args: object) -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    with pytest.raises(RuntimeError, match="illegal memory access"):
        run_green(crashes, [FULL], SETTINGS, salt=0, device="cpu")


def _result(case: str, causal: bool, dtype: str, seed: int, reason: str = "") -> CheckResult:
    return CheckResult(Shape(case, 1, 1, 8, 64, causal, dtype), seed, not reason, 1e-3, 4e-4, 1.3e-3, reason)


def test_verdict_green_when_every_check_passes() -> None:
    status, reason = verdict([_result("G1", False, "fp16", 0), _result("G4", True, "bf16", 1)])
    assert status is Status.GREEN and reason.startswith("all 2 checks passed")


def test_verdict_names_the_first_failing_check() -> None:
    checks = [_result("G1", False, "fp16", 0),
              _result("G4", True, "fp16", 1, "max|err| 3.1e-01 > tol 2.0e-03"),
              _result("G5", False, "bf16", 0, "unwritten: 5 of 8 output elements")]
    assert verdict(checks) == (Status.RED, "G4c fp16 seed 1: max|err| 3.1e-01 > tol 2.0e-03 "
                                           "(and 1 more failing checks)")


def test_verdict_ignores_dtypes_that_do_not_gate() -> None:
    checks = [_result("G1", False, "fp16", 0), _result("G1", False, "bf16", 0, "NaN in output: 1 elements")]
    assert verdict(checks, gate_dtypes={"fp16"})[0] is Status.GREEN
    assert verdict(checks)[0] is Status.RED


def test_verdict_of_nothing_is_red() -> None:
    assert verdict([]) == (Status.RED, "no GREEN checks ran")


def test_label() -> None:
    assert label(_result("G4", True, "bf16", 1)) == "G4c bf16 seed 1"


def test_sdpa_leaves_the_bias_module_unloaded_unless_a_bottom_right_mask_needs_it() -> None:
    """torch.nn.attention.bias brings torch._dynamo and sympy (830 modules, seconds of a GPU worker's
    first request): a FAST-suite case (no shift) must not load it, a bottom-right case with Lq < Lk does."""
    code = (
        "import sys, torch\n"
        "from evo.gpu.gate import sdpa\n"
        "q, k = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 6, 8)\n"
        "sdpa(q, q, q, causal=True, shift=0); sdpa(q, k, k, causal=False, shift=2)\n"
        "before = 'torch.nn.attention.bias' in sys.modules\n"
        "sdpa(q, k, k, causal=True, shift=2)\n"
        "print(before, 'torch.nn.attention.bias' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]

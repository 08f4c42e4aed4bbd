"""flash_wgmma at head dims 96 and 256 on a GPU (Hopper) against a float32 reference: the
default; "features" (packed GQA rows, Q in registers at D=96, conditional rescaling, row sums on
the tensor cores, one consumer at D=256); "three" (three consumers taking turns at D=96, three
stages at D=256); "padded" (P V over D=96's whole second box). Problems: grouped-query heads, a
query chunk on a longer key cache (the causal mask at the bottom right), cross-attention and more
queries than keys (rows that see no key are zeros). The tolerance is the gate's: twice PyTorch's
own error in the dtype plus a floor. Only the D=96 and D=256 kernels are built (the family
restricted to them); the other head dims have tests of their own (tests/test_runtime_gpu.py,
tests/test_gate_gpu.py)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

import pytest
import torch

from evo.family.manifest import load_family
from evo.family.render import render
from evo.family.space import make_candidate
from evo.gpu.runtime import CandidateKernels
from evo.results import Status
from evo.toolchain.build import build_batch

pytestmark = pytest.mark.gpu

FAMILY = dataclasses.replace(load_family("flash_wgmma"), head_dims=(96, 256))
POINTS = {
    "default": {},
    "features": {"PACK_GQA": True, "PRODUCER_REGS": 32, "Q_IN_REGS": True, "LAZY_D96": True, "LAZY_D256": True,
                 "ROWSUM_MMA": True, "BLOCK_N_D96": 80, "WGS_D256": 1, "BLOCK_N_D256": 96, "CAUSAL_TRIM": True},
    "three": {"WGS_D96": 3, "BLOCK_N_D96": 64, "PINGPONG3": True, "STAGES_D256": 3, "BLOCK_N_D256": 48},
    "padded": {"PAD_PV_D96": True},   # D=96's P V over whole swizzle atoms: the fallback if N = 96 is red
}
DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
FLOOR = {"fp16": 5e-4, "bf16": 4e-3}       # acceptance/green.toml's [tolerance]
# (B, Hq, Hkv, Lq, Lk, causal, bottom_right)
PROBLEMS = {
    "gqa": (2, 8, 2, 333, 333, True, False),
    "gqa_full": (1, 6, 3, 200, 200, False, False),
    "chunk": (1, 4, 2, 130, 515, True, True),
    "cross": (2, 4, 4, 200, 77, False, False),
    "q_longer": (1, 4, 1, 300, 150, True, True),
}


@pytest.fixture(scope="module", params=list(POINTS))
def kernels(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CandidateKernels]:
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("flash_wgmma needs a Hopper GPU (sm_90a)")
    rendered = render(make_candidate(FAMILY, POINTS[request.param]), FAMILY)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVO_CANDIDATES", str(tmp_path_factory.mktemp("candidates")))
        (built,) = build_batch([rendered], "sm_90a")
    assert built.status is Status.BUILT and built.cubin_path, f"{built.reason}\n{built.log[-3000:]}"
    yield CandidateKernels(built.cubin_path, rendered.entries, torch.cuda.current_device())


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, shift: int,
               dtype: torch.dtype) -> torch.Tensor:
    """Attention in ``dtype`` math (k, v repeated over their query heads); a row that sees no key
    is zeros (the ABI's convention)."""
    group = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(group, dim=1).to(dtype) for t in (k, v))
    s = (q.to(dtype) @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        i = torch.arange(q.shape[2], device=q.device)[:, None]
        j = torch.arange(k.shape[2], device=q.device)[None, :]
        s = s.masked_fill(j > i + shift, -math.inf)
    p = torch.softmax(s.float(), dim=-1).nan_to_num(0.0).to(dtype)
    return p @ v


@pytest.mark.parametrize("problem", list(PROBLEMS))
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("D", [96, 256])
def test_new_head_dims_match_the_reference(kernels: CandidateKernels, D: int, dtype: str, problem: str) -> None:
    B, Hq, Hkv, Lq, Lk, causal, bottom_right = PROBLEMS[problem]
    shift = Lk - Lq if causal and bottom_right else 0
    gen = torch.Generator(device="cuda").manual_seed(D * 100 + len(problem))
    half = getattr(torch, DTYPES[dtype])
    q = torch.randn(B, Hq, Lq, D, device="cuda", generator=gen).to(half)
    k, v = (torch.randn(B, Hkv, Lk, D, device="cuda", generator=gen).to(half) for _ in range(2))
    o = torch.full_like(q, math.nan)
    kernels.launch(q, k, v, o, causal=causal, shift=shift)
    torch.cuda.synchronize()
    truth = _reference(q, k, v, causal, shift, torch.float32)
    own = _reference(q, k, v, causal, shift, half).float()
    assert not o.isnan().any()
    err = (o.float() - truth).abs().max().item()
    assert err <= 2 * (own - truth).abs().max().item() + FLOOR[dtype], (problem, err)

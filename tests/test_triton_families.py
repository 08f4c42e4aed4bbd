"""The Triton-backend families pass GREEN's checks under Triton's interpreter, on CPU.

``TRITON_INTERPRET=1`` runs the same rendered modules the GPU worker runs, on CPU tensors (numpy
underneath), so every template gene is checked without a GPU. Skipped cleanly, with the reason,
when triton is not installed or its interpreter cannot run here. bf16 goes through
``tl.dot`` wrongly in the interpreter (numpy has no bfloat16), and GREEN's bf16 tolerance on CPU comes from
PyTorch's CPU SDPA, which does its math in fp32 and so leaves no room for a kernel that rounds
P to bf16 as every flash kernel does: both families are checked in fp16 here, and in both
dtypes on the GPU (``pytest -m gpu``, tests/test_seed_families_gpu.py).
"""

from __future__ import annotations

import importlib.util
import math
from functools import cache
from pathlib import Path

import pytest

from evo.toolchain.build import build_batch
from evo.gpu.gate import check_case
from evo.gpu.pykernels import ModuleKernels, import_module
from evo.family.render import render
from evo.results import Shape
from evo.family.space import make_candidate
from evo.gpu.suites import green_settings

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # numpy, inside the interpreter
SHAPES = [(1, 2, 1, 64), (2, 1, 17, 64), (1, 1, 130, 64), (1, 2, 100, 128)]
ROWS = [(1, 1, 1, 64), (1, 1, 40, 128), (1, 1, 300, 64)]   # one program per row: kept short


@cache
def interpreter_problem() -> str:
    """Why Triton's interpreter cannot run here ("" when it can): a probe with the constructs
    the families use (runtime loop bounds, masked loads, tl.dot)."""
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed (pip install triton runs these checks on CPU)"
    import os

    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def probe(x, y, n, B: tl.constexpr):
        r = tl.arange(0, B)
        acc = tl.zeros([B, B], dtype=tl.float32)
        for _ in range(0, (n // B) * B, B):
            t = tl.load(x + r[:, None] * B + r[None, :], mask=r[:, None] < n, other=0.0)
            acc += tl.dot(t, t)
        tl.store(y + r[:, None] * B + r[None, :], acc)

    x = torch.eye(16, dtype=torch.float16)
    y = torch.zeros(16, 16)
    try:
        probe[(1,)](x, y, 16, B=16)
    except Exception as exc:  # noqa: BLE001 - any failure means: cannot check here
        return f"Triton's interpreter fails here ({type(exc).__name__}: {exc}); triton 3.6 needs numpy < 2.4"
    return "" if bool((y == x.float()).all()) else "Triton's interpreter computes a wrong tl.dot here"


@pytest.fixture(autouse=True)
def _interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    problem = interpreter_problem()
    if problem:
        pytest.skip(problem)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "cache"))


def green(family: str, dtypes: tuple[str, ...], shapes=SHAPES, **params: object) -> list[str]:  # type: ignore[no-untyped-def]
    """Every failing GREEN check of the candidate on ``shapes``, both causal modes."""
    rendered = render(make_candidate(family, params))
    (result,) = build_batch([rendered], arch="sm_90a")
    kernels = ModuleKernels(result.cubin_path or "", rendered.entries, device="cpu")
    failed = []
    for B, H, L, D in shapes:
        for causal in (False, True):
            for dtype in dtypes:
                shape = Shape("T", B, H, L, D, causal, dtype)
                check = check_case(kernels, shape, 0, green_settings(), device="cpu")
                if not check.passed:
                    failed.append(f"{shape}: {check.reason}")
    return failed


@pytest.mark.parametrize("params", [
    {},
    {"TMA": True},
    {"TMA": True, "BLOCK_M": 128, "BLOCK_N": 32, "MASK_SPLIT": False},
    {"EXP2": False, "BLOCK_N": 64},
], ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "default")
def test_triton_flash_is_green(params: dict) -> None:
    assert green("triton_flash", ("fp16",), **params) == []


@pytest.mark.parametrize("params", [{}, {"S_DTYPE": "fp16", "THREADS_PER_ROW": 32, "CHUNK": 256}],
                         ids=["default", "fp16-scores"])
def test_seed_pipeline_is_green(params: dict) -> None:
    assert green("seed_pipeline", ("fp16",), ROWS, **params) == []


# Kernel ABI v2 beyond GREEN's square shapes: grouped-query heads (Hq / Hkv = 1, 2, 4), Lq != Lk
# both ways, the causal mask at the top left (shift 0), the bottom right (Lk - Lq, negative when
# Lq > Lk) and a negative shift, so rows that see no key (written as zeros) occur.
ABI_CASES = [(1, 2, 1, 17, 40, 64), (2, 4, 2, 33, 9, 64), (1, 4, 1, 5, 130, 128), (1, 2, 2, 70, 23, 128)]
ABI_ROWS = [(1, 4, 2, 9, 20, 64), (1, 2, 1, 12, 5, 128)]   # seed_pipeline: one program per row


def reference(q, k, v, causal: bool, scale: float, shift: int):  # type: ignore[no-untyped-def]
    """fp32 attention with grouped-query heads and key j seen by query i when j <= i + shift;
    a row that sees no key is zeros."""
    import torch

    group = q.shape[1] // k.shape[1]
    k, v = (t.float().repeat_interleave(group, 1) for t in (k, v))
    s = (q.float() @ k.transpose(-1, -2)) * scale
    if causal:
        i = torch.arange(q.shape[2])[:, None]
        j = torch.arange(k.shape[2])[None, :]
        s = s.masked_fill(j > i + shift, float("-inf"))
    return (torch.softmax(s, -1) @ v).nan_to_num(0.0)


def abi_failures(family: str, cases=ABI_CASES, **params: object) -> list[str]:  # type: ignore[no-untyped-def]
    """Every v2 case the rendered module's launch(q, k, v, o, causal, scale, shift) gets wrong (fp16)."""
    import torch

    rendered = render(make_candidate(family, params))
    (result,) = build_batch([rendered], arch="sm_90a")
    module = import_module(result.cubin_path or "")
    gen = torch.Generator().manual_seed(0)
    failed = []
    for B, Hq, Hkv, Lq, Lk, D in cases:
        q = torch.randn(B, Hq, Lq, D, generator=gen).half()
        k, v = (torch.randn(B, Hkv, Lk, D, generator=gen).half() for _ in range(2))
        for causal, shift in ((False, 0), (True, 0), (True, Lk - Lq), (True, -3)):
            o = torch.full_like(q, float("nan"))
            module.launch(q, k, v, o, causal, 1 / math.sqrt(D), shift)
            err = (o.float() - reference(q, k, v, causal, 1 / math.sqrt(D), shift)).abs().max().item()
            if not err < 2e-2:   # NaN fails too
                failed.append(f"B={B} Hq={Hq} Hkv={Hkv} Lq={Lq} Lk={Lk} D={D} causal={causal} shift={shift}: {err}")
    return failed


@pytest.mark.parametrize("params", [{}, {"TMA": True, "BLOCK_N": 32, "MASK_SPLIT": False}],
                         ids=["default", "tma-masked"])
def test_triton_flash_takes_gqa_lengths_and_shift(params: dict) -> None:
    assert abi_failures("triton_flash", **params) == []


def test_seed_pipeline_takes_gqa_lengths_and_shift() -> None:
    assert abi_failures("seed_pipeline", ABI_ROWS, CHUNK=256) == []

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
from functools import cache
from pathlib import Path

import pytest

from evo.toolchain.build import build_batch
from evo.gpu.gate import check_case
from evo.gpu.pykernels import ModuleKernels
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

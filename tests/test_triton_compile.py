"""Every triton_flash variant compiles for Hopper (cuda:90) on CPU, through Triton's own compiler.

The interpreter (tests/test_triton_families.py) runs kernels as Python and so never sees a
compile error: with ``TMA=true`` the kernel once failed on every GPU, because Triton compiles the
code after an early ``return`` in a constexpr branch and that code did pointer arithmetic on a
tensor descriptor. ``triton.compile`` with an explicit target needs no GPU (ptxas ships with
Triton). Skipped when triton is not installed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from evo.family.render import render
from evo.family.space import make_candidate

triton = pytest.importorskip("triton", reason="triton is not installed (pip install triton runs this check)")


def rendered_module(tmp_path: Path, params: dict[str, object]) -> ModuleType:
    path = tmp_path / "kernel.py"
    path.write_text(render(make_candidate("triton_flash", params)).source)
    spec = importlib.util.spec_from_file_location("triton_flash_kernel", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("tma", [True, False], ids=["tma", "pointers"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D", [64, 128])
def test_triton_flash_compiles_for_hopper(tmp_path: Path, tma: bool, causal: bool, D: int) -> None:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    m = rendered_module(tmp_path, {"TMA": tma})
    rows = {"Q": m.BLOCK_M, "K": m.BLOCK_N, "V": m.BLOCK_N, "O": m.BLOCK_M}
    signature = {name: f"tensordesc<fp16[1,{n},{D}]>" if tma else "*fp16" for name, n in rows.items()}
    constants = {"D": D, "CAUSAL": causal, "BLOCK_M": m.BLOCK_M, "BLOCK_N": m.BLOCK_N, "TMA": tma,
                 "EXP2": m.EXP2, "MASK_SPLIT": m.MASK_SPLIT}
    signature |= {"L": "i32", "qk_scale": "fp32"} | dict.fromkeys(constants, "constexpr")
    kernel = triton.compile(ASTSource(m._fwd, signature, constants), target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": m.NUM_WARPS, "num_stages": m.NUM_STAGES})
    assert "mma" in kernel.asm["ptx"]                       # the dots became tensor-core code
    assert ("cp.async.bulk.tensor" in kernel.asm["ptx"]) == tma
    assert 0 < kernel.metadata.shared <= 227 * 1024         # fits an H100's shared memory

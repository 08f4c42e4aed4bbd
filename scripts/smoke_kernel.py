"""Smoke-test one rendered candidate on the GPU, standalone (torch + cupy + nvcc).

    python scripts/smoke_kernel.py flash_mma BLOCK_M=64 STAGES=3
    python scripts/smoke_kernel.py flash_scalar

Renders the candidate, compiles it with nvcc to a cubin for this GPU, loads it with cupy and
launches every entry on a few shapes (causal and not, fp16 and bf16) with the output poisoned
with NaN and a NaN guard after it. For each case it prints the kernel's max abs error against
float32 math SDPA on the upcast inputs next to PyTorch's own low-precision SDPA error, and fails
(exit 1) on an error above 2x PyTorch's + a floor, on NaN left in the output, or on a write
past the output. A first-run check of a family, not the GREEN gate.
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
from pathlib import Path

import cupy
import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from evo.manifest import load_family  # noqa: E402
from evo.render import render  # noqa: E402
from evo.space import make_candidate, parse_assignments  # noqa: E402

SHAPES = [(1, 8, 512, 64), (2, 4, 1531, 128), (1, 2, 1, 64), (1, 2, 17, 128)]
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
FLOOR = 1e-3
GUARD = 4096  # elements after the output that must stay NaN


def arch_for(arches: tuple[str, ...]) -> str:
    major, minor = torch.cuda.get_device_capability()
    for name in (f"sm_{major}{minor}a", f"sm_{major}{minor}"):
        if name in arches:
            return name
    return f"sm_{major}{minor}"


def build(source: str, flags: tuple[str, ...], arch: str, workdir: Path) -> Path:
    src, cubin = workdir / "cand.cu", workdir / "cand.cubin"
    src.write_text(source)
    gencode = f"arch=compute_{arch[3:]},code={arch}"
    cmd = ["nvcc", "-cubin", *flags, "-gencode", gencode, "-Xptxas", "-v", "-o", str(cubin), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    name = ""
    for line in proc.stderr.splitlines():  # ptxas -v: one entry name, then its spills and registers
        if "Compiling entry function" in line:
            name = line.split("'")[1]
        elif "spill stores" in line:
            spills = line.strip()
        elif "Used" in line and "registers" in line:
            print(f"  {name}: {line.split('Used ')[1].split(',')[0]}; {spills}")
    if proc.returncode != 0:
        sys.exit(f"nvcc failed:\n{proc.stderr}")
    return cubin


def as_cupy(t: torch.Tensor) -> cupy.ndarray:
    """Zero-copy view for the launch; cupy has no bf16, so every tensor goes as its raw 16 bits."""
    return cupy.asarray(t.view(torch.int16))


def run_case(module: cupy.RawModule, entry, B: int, H: int, L: int, D: int, dtype: torch.dtype, causal: bool) -> bool:
    torch.manual_seed(B * 1000003 + H * 1009 + L * 31 + D)
    q, k, v = (torch.randn(B, H, L, D, device="cuda", dtype=dtype) for _ in range(3))
    buf = torch.full((B * H * L * D + GUARD,), float("nan"), device="cuda", dtype=dtype)
    out = buf[: B * H * L * D].view(B, H, L, D)
    scale = 1.0 / math.sqrt(D)

    kern = module.get_function(entry.name)
    smem = entry.launch.smem_bytes
    if smem > 48 * 1024:
        kern.max_dynamic_shared_size_bytes = smem
    grid = entry.launch.grid(B, H, L)
    torch.cuda.synchronize()
    kern(grid, (entry.launch.threads, 1, 1),
         (as_cupy(q), as_cupy(k), as_cupy(v), as_cupy(out), np.int32(B), np.int32(H), np.int32(L), np.float32(scale)),
         shared_mem=smem)
    cupy.cuda.Device().synchronize()

    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, scale=scale)
    mine = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    torch_err = (mine.float() - ref).abs().max().item()
    nan_left = bool(torch.isnan(out).any().item())
    guard_hit = bool((~torch.isnan(buf[B * H * L * D:])).any().item())
    err = (out.float() - ref).abs().nan_to_num(nan=float("inf")).max().item()
    ok = err <= 2 * torch_err + FLOOR and not nan_left and not guard_hit
    print(f"{'ok  ' if ok else 'FAIL'} {entry.name:28s} B={B} H={H} L={L:5d} D={D:3d} "
          f"err={err:.3e} torch_err={torch_err:.3e} nan_left={nan_left} guard_written={guard_hit}")
    return ok


def main(argv: list[str]) -> int:
    if not argv:
        sys.exit(__doc__)
    fam = load_family(argv[0])
    cand = make_candidate(fam, parse_assignments(fam, argv[1:]))
    rendered = render(cand, fam)
    arch = arch_for(fam.arches)
    print(f"{cand.label()} on {torch.cuda.get_device_name()} ({arch})")
    with tempfile.TemporaryDirectory() as tmp:
        module = cupy.RawModule(path=str(build(rendered.source, fam.nvcc_flags, arch, Path(tmp))))
        failures = 0
        for B, H, L, D in SHAPES:
            if D not in fam.head_dims:
                continue
            for dname, dtype in DTYPES.items():
                if dname not in fam.dtypes:
                    continue
                for causal in (False, True):
                    failures += not run_case(module, rendered.entry(D, dname, causal), B, H, L, D, dtype, causal)
    print(f"{failures} failing case(s)" if failures else "all cases passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Launch one candidate, SDPA's cuDNN backend and a dense GEMM once each per FAST case, for
Nsight Compute to compare (GPU host; a kernel-writing tool, see dev/perf-notes.md).

Where a kernel's time goes is a question of pipes and stalls that timings cannot answer: run it
under ncu, e.g.

    ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis \\
        --section WarpStateStats python3 scripts/ncu_probe.py flash_wgmma "" F4,F7

Each op runs twice (the first launch warms up; ncu profiles both); the GEMM (8192^3 fp16) is the
tensor-core reference measured under the same clock rule.
Usage: python scripts/ncu_probe.py FAMILY PARAMS CASES
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from evo.api import candidate, fast_shapes
    from evo.toolchain.build import build_batch, default_arch
    from evo.results import Status
    from evo.gpu.runtime import load_kernels

    family, params, cases = argv[0], argv[1], argv[2]
    rendered = candidate(family, [p for p in params.split(",") if p])
    (built,) = build_batch([rendered], arch=default_arch())
    if built.status is not Status.BUILT or not built.cubin_path:
        print(f"not built: {built.reason}")
        return 1
    kernels = load_kernels(built.cubin_path, rendered.entries, device=0)
    a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.float16) for _ in range(2))
    for _ in range(2):
        torch.matmul(a, b)
    for shape in fast_shapes(cases, "fp16"):
        q, k, v = (torch.randn(shape.B, shape.H, shape.L, shape.D, device="cuda", dtype=torch.float16)
                   for _ in range(3))
        o = torch.empty_like(q)
        print(f"{shape.tag}: {family} {params or 'defaults'}, then SDPA cuDNN", flush=True)
        for _ in range(2):
            kernels.launch(q, k, v, o, causal=shape.causal)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            for _ in range(2):
                F.scaled_dot_product_attention(q, k, v, is_causal=shape.causal)
        torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

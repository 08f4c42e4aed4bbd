"""Launch one candidate and its baselines once each per FAST case, for Nsight Compute to compare
(GPU host; a kernel-writing tool, see dev/perf-notes.md).

Where a kernel's time goes is a question of pipes and stalls that timings cannot answer: run it
under ncu, e.g.

    ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis \\
        --section WarpStateStats python3 scripts/ncu_probe.py --family flash_wgmma --cases F4,F7
    ncu ... python3 scripts/ncu_probe.py --id 287fdd1b57ec --db /tmp/evo.sqlite --cases L3,L7 --dtype bf16

Every case runs in the suite's shape (grouped heads, Lq != Lk, the mask's corner): the candidate,
then each baseline of ``--backends`` that can run it (default SDPA's default, which is cuDNN on
Hopper, and FlashAttention-4 where it imports), each op twice (the first launch warms up; ncu
profiles both), after a dense 8192^3 GEMM in the case's dtype: the tensor-core reference under the
same clock rule. The candidate is a family with ``--params`` (KEY=VALUE,...) or a stored one
(``--id``, rebuilt from today's templates under its stored id).
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--family", help="a family's candidate, with --params")
    what.add_argument("--id", help="a stored candidate (id or prefix), with --db")
    ap.add_argument("--params", default="", help="KEY=VALUE,... for --family (default: its defaults)")
    ap.add_argument("--db", default=None, help="SQLite file or URL holding --id")
    ap.add_argument("--cases", required=True, help="FAST cases, e.g. F4,F7 or L3,L7")
    ap.add_argument("--dtype", default=None, help="fp16 or bf16 (default: each suite's own)")
    ap.add_argument("--backends", default="sdpa_default,fa4", help="baselines launched after the candidate")
    args = ap.parse_args(argv)

    import torch

    from evo.api import candidate, fast_shapes, load_candidate
    from evo.errors import EvoError
    from evo.gpu.gate import TORCH_DTYPES, make_inputs
    from evo.gpu.timing import baseline_op, baseline_unavailable

    try:
        loaded = load_candidate(args.id, db=args.db) if args.id else load_candidate(
            candidate(args.family, [p for p in args.params.split(",") if p]))
    except EvoError as e:
        print(e)
        return 1
    kernels = loaded.kernels
    shapes = fast_shapes(args.cases, args.dtype)
    for dtype in sorted({s.dtype for s in shapes}):
        a, b = (torch.randn(8192, 8192, device="cuda", dtype=TORCH_DTYPES[dtype]) for _ in range(2))
        for _ in range(2):
            torch.matmul(a, b)
    for shape in shapes:
        q, k, v = make_inputs(shape, seed=1, salt=0, device="cuda")
        o = torch.empty_like(q)
        ops = [b for b in args.backends.split(",") if b and not baseline_unavailable(b, shape)]
        print(f"{shape.tag}: {loaded.build_id[:12]}, then {', '.join(ops) or 'no baseline'}", flush=True)
        for _ in range(2):
            kernels.launch(q, k, v, o, causal=shape.causal, shift=shape.shift)
        for name in ops:
            op = baseline_op(name, shape)
            for _ in range(2):
                op(q, k, v, torch.empty_like(q))
        torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

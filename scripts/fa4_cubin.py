"""Build FlashAttention-4's Hopper forward kernel for one problem on a machine without a GPU, and keep its cubin.

FlashAttention-4 (flash-attn-4, CuTe DSL) compiles its kernels just in time; its interface selects the SM90
kernel and its tiles from the problem (head dim, causal, GQA) and can compile under torch's fake tensors
with the target named by environment (FLASH_ATTENTION_ARCH, CUTE_DSL_ARCH, FLASH_ATTENTION_NUM_SMS). With
CUTE_DSL_KEEP=cubin the DSL writes the cubin it built, which `scripts/sass_counts.py --cubin PATH --step
--order` then reads beside evo's kernels: the baseline's machine code, instruction by instruction, without
device time (dev/perf-notes.md, 2026-11-28 o).

Needs what FA4 needs, which is not evo's environment: Python 3.12 (the DSL's compiled modules are
cp312), torch, einops, and FA4's packages, e.g. the parts ../shared/device/fa4/pack.sh wrote, unpacked
as its stage.sh does into a folder SITE:

    python3.12 -m venv /tmp/v312 && /tmp/v312/bin/pip install torch==2.13.0 einops
    PYTHONPATH=SITE:SITE/nvidia_cutlass_dsl/dsl_packages /tmp/v312/bin/python scripts/fa4_cubin.py \\
        --out /tmp/fa4 1 32 8 512 8192 128 --causal
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("B", type=int)
    ap.add_argument("Hq", type=int)
    ap.add_argument("Hkv", type=int)
    ap.add_argument("Lq", type=int)
    ap.add_argument("Lk", type=int)
    ap.add_argument("D", type=int)
    ap.add_argument("--causal", action="store_true", help="FA4's causal mask (bottom right where Lq != Lk)")
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--out", type=Path, required=True, help="folder the cubin (and its PTX) are written to")
    ap.add_argument("--sms", type=int, default=132, help="multiprocessors of the target (H100/H200 SXM: 132)")
    args = ap.parse_args(argv)

    args.out.mkdir(parents=True, exist_ok=True)
    # read by FA4 and the DSL when they are imported and when they compile: set before both
    os.environ.update(FLASH_ATTENTION_ARCH="sm_90", CUTE_DSL_ARCH="sm_90a", FLASH_ATTENTION_NUM_SMS=str(args.sms),
                      CUTE_DSL_KEEP="ptx,cubin", CUTE_DSL_DUMP_DIR=str(args.out))
    try:
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode

        from flash_attn.cute.interface import flash_attn_func
    except ImportError as exc:
        print(f"fa4_cubin: {exc} (see the module docstring for the environment it needs)", file=sys.stderr)
        return 2

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    before = set(args.out.glob("*.cubin"))
    with FakeTensorMode():   # shapes and dtypes only: nothing is allocated on (or asked of) a GPU
        q = torch.empty(args.B, args.Lq, args.Hq, args.D, dtype=dtype, device="cuda")
        k = torch.empty(args.B, args.Lk, args.Hkv, args.D, dtype=dtype, device="cuda")
        v = torch.empty(args.B, args.Lk, args.Hkv, args.D, dtype=dtype, device="cuda")
        flash_attn_func(q, k, v, causal=args.causal)
    built = sorted(set(args.out.glob("*.cubin")) - before)
    if not built:
        print("fa4_cubin: FA4 compiled nothing new (the DSL's cache answered?); clear --out and run again",
              file=sys.stderr)
        return 1
    for path in built:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

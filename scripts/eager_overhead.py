"""Wall-clock cost of one synchronized eager call: a promoted package vs PyTorch SDPA.

Usage: python scripts/eager_overhead.py PACKAGE [--calls N] [--json FILE]
For F1 (1, 8, 512, 64) fp16, causal and not: each sample is `fn(q, k, v); synchronize()` timed
with perf_counter, after warm-up (which also builds and loads the package's launcher); the
median over N calls is reported with p20/p80, together with the package's max abs difference
from SDPA. Both are called the same way, in the same process, alternating in blocks.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import time

import torch
import torch.nn.functional as F


def _per_call_us(fn, q, k, v, causal: bool, calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn(q, k, v, causal)
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def _summary(samples: list[float]) -> dict[str, float]:
    qs = statistics.quantiles(samples, n=10)
    return {"median_us": statistics.median(samples), "p20_us": qs[1], "p80_us": qs[7], "n": len(samples)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("package")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--json")
    args = ap.parse_args()
    pkg = importlib.import_module(args.package)
    ops = {
        args.package: lambda q, k, v, c: pkg.attention(q, k, v, is_causal=c),
        "sdpa_default": lambda q, k, v, c: F.scaled_dot_product_attention(q, k, v, is_causal=c),
    }
    rows = []
    for causal in (False, True):
        q, k, v = (torch.randn(1, 8, 512, 64, device="cuda", dtype=torch.float16) for _ in range(3))
        diff = (ops[args.package](q, k, v, causal).float() - ops["sdpa_default"](q, k, v, causal).float()).abs().max().item()
        samples: dict[str, list[float]] = {n: [] for n in ops}
        for fn in ops.values():  # warm-up
            _per_call_us(fn, q, k, v, causal, 200)
        for _ in range(10):  # alternate in blocks so drift hits both
            for n, fn in ops.items():
                samples[n] += _per_call_us(fn, q, k, v, causal, args.calls // 10)
        row = {"case": "F1c" if causal else "F1", "supports": bool(pkg.supports(q, k, v, is_causal=causal)),
               "max_abs_diff_vs_sdpa": diff, **{n: _summary(s) for n, s in samples.items()}}
        rows.append(row)
        print(f"{row['case']:4} supports={row['supports']} diff={diff:.2e}  " + "  ".join(
            f"{n}: {row[n]['median_us']:.1f} us (p20 {row[n]['p20_us']:.1f}, p80 {row[n]['p80_us']:.1f})" for n in ops))
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

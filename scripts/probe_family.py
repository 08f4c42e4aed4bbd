"""Probe kernel configurations of one family on the GPU: correctness per shape, then speed.

A kernel-writing tool (dev/perf-notes.md), not part of the search: for each configuration it
prints every check's max error against an fp32 reference next to PyTorch's own low-precision
error (the GREEN tolerance rule), then times the FAST cases against SDPA's backends with evo's
timer. Each configuration runs in its own process with a time limit, so a kernel that faults
or hangs costs one line of output, not the run.

    python3 scripts/probe_family.py flash_wgmma --config CONSUMER_WGS=1,PINGPONG=false \
        --config default --time F1,F6 --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import sys
import traceback
from typing import Any

CHECKS = [  # (B, H, L, D): L = 1, below one tile, tile edges, odd, ragged and long; and wide (more
    # query tiles than SMs, ragged: a persistent CTA walks several tiles, as GREEN's `wide` draw)
    (1, 2, 1, 64), (1, 2, 1, 128), (2, 3, 17, 64), (1, 2, 64, 128), (1, 2, 127, 64),
    (1, 2, 129, 128), (2, 4, 333, 64), (2, 4, 1531, 128), (1, 8, 1024, 64), (1, 4, 2048, 128),
    (3, 40, 301, 64), (2, 48, 517, 128),
]
FLOOR = {"fp16": 5e-4, "bf16": 4e-3}


def _check(kern: Any, B: int, H: int, L: int, D: int, causal: bool, dtype: str, scale: float,
           std: float, seed: int) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    tdt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(B, H, L, D, device="cuda", generator=gen) * std for _ in range(3))
    k[..., L // 2, :] *= 4.0                       # a spiked key: max subtraction matters
    q, k, v = (t.to(tdt) for t in (q, k, v))
    o = torch.full_like(q, float("nan"))
    kern.launch(q, k, v, o, causal=causal, scale=scale)
    torch.cuda.synchronize()
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, scale=scale)
    low = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale).float()
    err = (o.float() - ref).abs().nan_to_num(float("inf")).max().item()
    ref_err = (low - ref).abs().max().item()
    # PyTorch's low-precision SDPA gives NaN for some scales (negative): then only the floor applies
    tol = 2 * ref_err + FLOOR[dtype] if math.isfinite(ref_err) else 4 * FLOOR[dtype]
    return {"shape": [B, H, L, D], "causal": causal, "dtype": dtype, "scale": scale, "std": std,
            "err": err, "ref_err": ref_err, "tol": tol, "ok": err <= tol,
            "nan": bool(torch.isnan(o).any().item())}


def _child(family: str, params: dict[str, Any], cubin: str, time_cases: list[str], out: Any) -> None:
    try:
        import torch

        from evo.gpu import suites, timing
        from evo.family.render import render
        from evo.gpu.runtime import CandidateKernels
        from evo.family.space import make_candidate

        rendered = render(make_candidate(family, params))
        kern = CandidateKernels(cubin, rendered.entries, 0)
        checks = []
        for i, (B, H, L, D) in enumerate(CHECKS):
            for causal in (False, True):
                for dtype in ("fp16", "bf16"):
                    scale = 1 / math.sqrt(D) if i % 3 else (0.3 if i % 2 else -0.2)
                    checks.append(_check(kern, B, H, L, D, causal, dtype, scale, 3.0 if i % 4 == 1 else 1.0, i))
        timings = []
        if time_cases and all(c["ok"] for c in checks):
            for shape in suites.fast_cases(time_cases):
                def op(q: Any, k: Any, v: Any, o: Any, _c: bool = shape.causal, _k: Any = kern) -> None:
                    _k.launch(q, k, v, o, causal=_c)
                res = timing.time_case(op, shape, ("sdpa_flash", "sdpa_cudnn"), rounds=3, reps=10).timings
                timings.append({t.backend: t.median_us for t in res} | {"case": shape.tag,
                               "tflops_evo": shape.flops / (res[0].median_us * 1e-6) / 1e12})
        torch.cuda.synchronize()
        out.put({"checks": checks, "timings": timings})
    except BaseException:  # noqa: BLE001 - reported to the parent as one record
        out.put({"error": traceback.format_exc(limit=4)})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("family")
    ap.add_argument("--config", action="append", default=[], help="K=V,K=V (or 'default'); repeatable")
    ap.add_argument("--time", default="", help="FAST cases to time, e.g. F1,F6 (only for configs that pass)")
    ap.add_argument("--time-first", type=int, default=1, help="time only the first N configurations")
    ap.add_argument("--timeout", type=float, default=90.0, help="seconds per configuration")
    ap.add_argument("--json", default="", help="write every record here")
    args = ap.parse_args()

    from evo.toolchain.build import build_batch, default_arch
    from evo.family.manifest import load_family
    from evo.family.render import render
    from evo.family.space import make_candidate, parse_assignments

    fam = load_family(args.family)
    configs = [{} if c == "default" else parse_assignments(fam, c.split(",")) for c in (args.config or ["default"])]
    rendered = [render(make_candidate(fam, c)) for c in configs]
    built = build_batch(rendered, default_arch(), jobs=16)
    ctx = mp.get_context("spawn")
    records = []
    for n, (cfg, r, b) in enumerate(zip(configs, rendered, built, strict=True)):
        label = r.candidate.label()
        rec: dict[str, Any] = {"config": label, "build": b.status.value, "reason": b.reason,
                               "registers": {k: v.registers for k, v in b.resources.items()}}
        if b.cubin_path is None or b.status.value != "built":
            print(f"== {label}: {b.status.value} {b.reason}")
            records.append(rec)
            continue
        q: Any = ctx.Queue()
        p = ctx.Process(target=_child, args=(args.family, cfg, b.cubin_path,
                                                 args.time.split(",") if args.time and n < args.time_first else [], q))
        p.start()
        p.join(args.timeout)
        if p.is_alive():
            p.kill()
            p.join()
            rec["error"] = f"no answer within {args.timeout} s (hang?)"
        else:
            rec |= q.get() if not q.empty() else {"error": f"child died, exit code {p.exitcode}"}
        records.append(rec)
        print(f"== {label}")
        if "error" in rec:
            print("   ERROR", rec["error"])
            continue
        bad = [c for c in rec["checks"] if not c["ok"]]
        print(f"   checks: {len(rec['checks']) - len(bad)}/{len(rec['checks'])} pass")
        for c in bad[:12]:
            print(f"   FAIL {c['shape']} {'causal' if c['causal'] else 'full'} {c['dtype']} scale={c['scale']:.3g} "
                  f"std={c['std']}: err {c['err']:.3g} (torch {c['ref_err']:.3g}, tol {c['tol']:.3g}) nan={c['nan']}")
        for t in rec["timings"]:
            print(f"   {t['case']:>10}  evo {t['evo']:9.2f} us  {t['tflops_evo']:6.1f} TF/s   "
                  f"flash {t.get('sdpa_flash', float('nan')):9.2f}  cudnn {t.get('sdpa_cudnn', float('nan')):9.2f}"
                  f"   x{t.get('sdpa_cudnn', float('nan')) / t['evo']:.3f} vs cudnn")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(records, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

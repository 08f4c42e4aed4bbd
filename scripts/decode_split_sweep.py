"""How a split-KV decode kernel's time depends on its split count: a kernel-writing probe.

Not part of the search (dev/perf-notes.md, "Decode"). For each configuration of flash_decode and
each decode case it times the kernel at the split count :func:`evo.family.splitkv.plan` picks and
at every other count in ``--splits``, with the plan's own rounding of the keys into whole tiles, so
that the plan's rule can be judged against the counts it did not pick. Timing: CUDA events around
``--reps`` back-to-back launches (each cache is larger than L2, so no launch finds the next one's
bytes there), the median of ``--repeats`` such runs, in microseconds per launch; GB/s counts the
K/V bytes each case must read (:func:`evo.gpu.bandwidth.kv_bytes`).

    python3 scripts/decode_split_sweep.py --cases D1,D5,D6 --config default \
        --config WAVES=4 --splits 1,2,3,4,6,8 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from typing import Any


def _parse_config(text: str) -> dict[str, Any]:
    if text == "default":
        return {}
    out: dict[str, Any] = {}
    for part in text.split(","):
        name, value = part.split("=")
        out[name] = int(value) if value.lstrip("-").isdigit() else value
    return out


def _time(fn: Any, reps: int, repeats: int) -> float:
    import torch

    for _ in range(3):
        fn()
    runs = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        stop.record()
        stop.synchronize()
        runs.append(start.elapsed_time(stop) * 1000.0 / reps)
    return statistics.median(runs)


def _sweep(kernels: Any, s: Any, counts: list[int], forced: dict[str, int | None], reps: int,
           repeats: int) -> list[tuple[int, float]]:
    """(split count, us per launch) of ``kernels`` on case ``s`` at each of ``counts``."""
    import torch

    from evo.gpu.layouts import cache_args, kv_dims

    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[s.dtype]
    q = torch.randn(s.B, s.H, s.L, s.D, device="cuda", dtype=dt)
    k, v = (torch.randn(*kv_dims(s), device="cuda", dtype=dt) for _ in range(2))
    o = torch.empty_like(q)
    extra = cache_args(s, "cuda")
    shift = s.Lk - s.L if s.align == "bottom_right" else 0
    out = []
    for count in counts:
        forced["count"] = count
        out.append((count, _time(lambda: kernels.launch(q, k, v, o, causal=s.causal, shift=shift, **extra),
                                 reps, repeats)))
    forced["count"] = None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="D1,D5,D6,D7")
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--splits", default="1,2,3,4,6,8")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()

    import torch

    import evo.gpu.runtime as runtime
    from evo.family import splitkv
    from evo.family.manifest import load_family
    from evo.family.render import render
    from evo.family.space import make_candidate
    from evo.gpu.bandwidth import gbps, kv_bytes
    from evo.gpu.suites import fast_cases
    from evo.results import Status
    from evo.toolchain.build import build_batch

    family = load_family("flash_decode")
    shapes = fast_cases([args.cases])
    forced: dict[str, int | None] = {"count": None}
    real_plan = runtime.split_plan

    def plan(split: splitkv.SplitConfig, rows: int, B: int, Hq: int, Hkv: int, Lq: int, Lk: int,
             sms: int, ragged: bool = False) -> splitkv.SplitPlan:
        p = real_plan(split, rows, B, Hq, Hkv, Lq, Lk, sms, ragged)
        if forced["count"] is None:
            return p
        tiles = -(-Lk // split.key_tile)
        count = max(1, min(forced["count"], tiles))
        split_len = -(-tiles // count) * split.key_tile
        return replace(p, splits=-(-Lk // split_len), split_len=split_len)

    runtime.split_plan = plan   # the launcher's own name for it
    configs = args.config or ["default"]
    cands = [make_candidate(family, _parse_config(c)) for c in configs]
    built = build_batch([render(c, family) for c in cands], arch="sm_90a")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows: list[dict[str, Any]] = []
    for text, cand, result in zip(configs, cands, built, strict=True):
        if result.status is not Status.BUILT:
            print(f"{text}: {result.status.value} {result.reason}")
            continue
        rendered = render(cand, family)
        kernels = runtime.CandidateKernels(result.cubin_path, rendered.entries)
        for s in shapes:
            entry = next(e for e in rendered.entries if (e.head_dim, e.dtype, e.causal) == (s.D, s.dtype, s.causal))
            natural = real_plan(entry.launch.split, entry.launch.rows_per_cta, s.B, s.H, s.Hkv, s.L, s.Lk, sms,
                                ragged=s.layout != "contiguous")
            counts = sorted({natural.splits, *(int(x) for x in args.splits.split(","))})
            for count, us in _sweep(kernels, s, counts, forced, args.reps, args.repeats):
                row = {"config": text, "case": s.case, "splits": count, "plan": natural.splits,
                       "groups": natural.groups, "us": round(us, 2), "gbps": round(gbps(kv_bytes(s), us), 1)}
                rows.append(row)
                mark = "  <- plan" if count == natural.splits else ""
                print(f"{text:28s} {s.case:4s} groups {natural.groups:4d} splits {count:3d} "
                      f"{us:9.2f} us {row['gbps']:8.1f} GB/s{mark}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

"""The hand-run seed campaigns, measured by evo: each claim beside evo's GREEN + FAST figure.

``ROWS`` lists what the campaigns claimed (figure, shape, GPU) and the candidate of a seed
family that reproduces each step; :func:`run` builds them, gates and times each in one GPU
worker (GREEN, then FAST interleaved with SDPA, exactly as ``evo eval`` does), times SDPA's
backends over the sweep grid in the same worker, and writes one JSON record under
``benchmarks/`` that :mod:`evo.products.seedreport` turns into BENCHMARKS.md rows and SVG plots.

    python3 -m evo.products.seeds --out benchmarks            # rows + sweep (the GPU host)
    python3 -m evo.products.seeds --no-sweep --only ladder    # a part

The sweep is trimmed to fit a short GPU call (see SWEEP): every corner of the stated grid
(batch 1 and 8, heads 12 and 24, D 64/128/256) at L = 512, 2048, 8192 and 16384, one round of
3 CUDA-graph samples per backend (FAST uses 3 rounds of up to 10).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, UTC
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from evo import paths
from evo.products.bench import VERSION_KEYS
from evo.toolchain.build import build_batch, default_arch
from evo.errors import EvoError
from evo.family.render import render
from evo.results import Evaluation, Shape, Status
from evo.family.space import make_candidate
from evo.vocab import EVO, SDPA_BACKENDS, gpu_slug, short_sha
from evo.gpu.worker import EvalRequest, Worker, progress, require_gpu

SEED_BACKENDS = ("sdpa_flash", "sdpa_cudnn", "sdpa_default")
FAST_OPTIONS = {"interleave": True, "rounds": 3, "reps": 5, "backends": SEED_BACKENDS}
SWEEP_BACKENDS = SDPA_BACKENDS


def ladder_shapes() -> tuple[Shape, ...]:
    return tuple(Shape(f"N{n}", 2, 12, n, 64, False) for n in (64, 128, 256, 512, 1024))


WMMA_SHAPE = Shape("W", 1, 8, 512, 64, False)
PIPE_SHAPE = Shape("P", 1, 16, 1024, 64, False)
TRITON_SHAPES = (Shape("F1", 1, 8, 512, 64, False), Shape("F3", 32, 8, 128, 64, False),
                 Shape("F5", 1, 12, 8192, 64, False), Shape("F6", 1, 12, 4096, 128, False))


@dataclass(frozen=True)
class Row:
    """One step of a campaign: the candidate that reproduces it and what was claimed for it."""

    group: str                    # ladder, wmma, pipeline, triton
    step: str                     # V0 naive, full WMMA, ...
    family: str
    params: dict[str, Any]
    shapes: tuple[Shape, ...]
    claim: str                    # the claimed figure, in words ("" where the campaign gave none)
    claimed_on: str               # the GPU the claim was made on
    claimed_us: dict[str, float] = field(default_factory=dict)   # case -> claimed microseconds


L4, RTX4090, H100, H200 = "NVIDIA L4", "NVIDIA RTX 4090", "NVIDIA H100", "NVIDIA H200"
ROWS = (
    Row("ladder", "V0 naive", "seed_naive", {}, ladder_shapes(), "", RTX4090, {"N64": 530.0, "N1024": 114000.0}),
    Row("ladder", "V1 online softmax, shared-memory K/V tile", "seed_online", {}, ladder_shapes(), "", RTX4090),
    Row("ladder", "V2 warp per row, half2 loads, shuffles", "flash_scalar", {"VEC": 2}, ladder_shapes(), "", RTX4090),
    Row("ladder", "V3 tensor cores (WMMA) for Q K^T", "seed_wmma", {}, ladder_shapes(), "", RTX4090),
    Row("wmma", "scalar (the V2 kernel)", "flash_scalar", {"VEC": 2}, (WMMA_SHAPE,), "", L4, {"W": 1750.0}),
    Row("wmma", "full WMMA 16x16x16 (Q K^T and P V)", "seed_wmma", {"PV": "wmma"}, (WMMA_SHAPE,),
        "SDPA 31 us there", L4, {"W": 1177.0}),
    Row("wmma", "full WMMA + cp.async producer warp", "seed_wmma",
        {"PV": "wmma", "LOADER": "cp_async_producer"}, (WMMA_SHAPE,), "", L4, {"W": 1162.0}),
    Row("pipeline", "three kernels: cuBLAS Q K^T, Triton row softmax, cuBLAS P V", "seed_pipeline", {},
        (PIPE_SHAPE,), "1.65 us/head", H100, {"P": 1.65 * 16}),
    Row("triton", "Triton flash BM=64 BN=128 (pointers)", "triton_flash", {}, TRITON_SHAPES,
        "about SDPA parity (best BM=64, BN=128); a plain Triton FA2 forward: 1.23-1.29x cuDNN on F1/F3, "
        "0.85-0.95x on long shapes (on an H200)", H100),
    Row("triton", "Triton flash BM=64 BN=128 + TMA descriptors", "triton_flash", {"TMA": True},
        TRITON_SHAPES, "", H100),
)
GROUPS = ("ladder", "wmma", "pipeline", "triton")

# The SDPA sweep, trimmed to a short GPU call: every (batch, heads, D) corner of the stated grid
# at four lengths spanning it (the stated grid has L = 512 .. 16384 in powers of two).
SWEEP_GRID = {"B": (1, 8), "H": (12, 24), "L": (512, 2048, 8192, 16384), "D": (64, 128, 256)}
SWEEP_REPS = 3


def sweep_shapes() -> list[Shape]:
    g = SWEEP_GRID
    return [Shape(f"S{B}x{H}x{L}x{D}", B, H, L, D, False)
            for B, H, D, L in itertools.product(g["B"], g["H"], g["D"], g["L"])]


# ----------------------------------------------------------------------------- the GPU worker


def time_sweep(shapes: Sequence[Shape], backends: Sequence[str], reps: int = SWEEP_REPS) -> list[dict[str, Any]]:
    """Median microseconds per backend and shape, by FAST's own timer (CUDA-graph replays on
    inputs rotated past L2); a backend that refuses a shape is absent from its point."""
    import torch

    from evo.gpu.timing import GraphTimer, Rotation, Stats, make_inputs, runs, sdpa_op

    points = []
    for i, shape in enumerate(shapes):
        progress(f"sweep {shape.case}")
        sets = make_inputs(shape, seed=i)
        us: dict[str, float] = {}
        for backend in backends:
            op = sdpa_op(backend, shape)
            if not runs(op, sets[0]):
                continue
            try:
                timer = GraphTimer(Rotation(op, sets), warmup=1)
            except (RuntimeError, torch.cuda.OutOfMemoryError):
                torch.cuda.synchronize()
                continue
            try:
                us[backend] = Stats.of(timer.sample(reps)).median
            finally:
                timer.close()
        points.append({"B": shape.B, "H": shape.H, "L": shape.L, "D": shape.D, "us": us})
        sets.clear()
        torch.cuda.empty_cache()
    return points


def serve(conn: Connection) -> None:
    """Worker target: :func:`evo.gpu.evaluate.serve`'s requests, plus ``options["sweep"]`` requests
    answered with the sweep's points (in the Evaluation's ``device["sweep"]``)."""
    from evo.gpu.evaluate import Session, evaluate, serve_requests

    def answer(request: EvalRequest, session: Session) -> Evaluation:
        if not request.options.get("sweep"):
            return evaluate(request, session)
        points = time_sweep(request.fast_cases, tuple(request.options["backends"]))
        return Evaluation(request.build_id, Status.FAST, "sweep timed",
                          device=dict(session.device) | {"sweep": json.dumps(points)})

    serve_requests(conn, answer)


# ----------------------------------------------------------------------------- the run


def candidate_key(row: Row) -> str:
    return make_candidate(row.family, row.params).key()


def row_record(row: Row, build_id: str, ev: Evaluation) -> dict[str, Any]:
    """A row of the record: the claim, the candidate, its GREEN verdict and per-case timings."""
    cases = []
    for shape in row.shapes:
        got = {t.backend: t for t in ev.timings if t.shape == shape}
        evo = got.get(EVO)
        cases.append({**shape.as_dict(),
                      "us": {b: t.median_us for b, t in got.items()},
                      "spread_us": (evo.p80_us - evo.p20_us) if evo else None,
                      "claimed_us": row.claimed_us.get(shape.case),
                      "flagged": evo.flagged if evo else ""})
    label = make_candidate(row.family, row.params).label()
    return {"group": row.group, "step": row.step, "family": row.family, "candidate": label,
            "candidate_id": build_id, "claim": row.claim, "claimed_on": row.claimed_on,
            "status": ev.status.value, "reason": ev.reason, "green_checks": len(ev.checks),
            "green_seconds": round(ev.green_seconds, 2), "cases": cases}


def save(record: dict[str, Any], device: dict[str, str], out_dir: Path, *, complete: bool) -> Path:
    """Write ``record`` with the device's facts (named by its GPU, day and sha) atomically, with
    ``complete`` saying whether every row and the sweep asked for are in it; returns its path."""
    doc = record | {"gpu": device.get("name", "unknown"),
                    "versions": {k: device.get(k, "unknown") for k in VERSION_KEYS}, "complete": complete}
    out_dir.mkdir(parents=True, exist_ok=True)
    day = doc["created"][:10].replace("-", "")
    final = out_dir / f"seeds-{gpu_slug(doc['gpu'])}-{day}-{doc['git_sha']}.json"
    part = final.with_suffix(".json.part")
    part.write_text(json.dumps(doc, indent=2) + "\n")
    part.replace(final)
    return final


def run(out_dir: Path, groups: Sequence[str] = GROUPS, sweep: bool = True, *, timeout_s: float = 600.0,
        log: Any = print) -> Path:
    """Measure the seed rows of ``groups`` (and the sweep), write the record, regenerate
    BENCHMARKS.md; returns the record's path. The record is rewritten after every measured
    candidate (``"complete": false`` until the end), so a run cut short keeps what it measured."""
    from evo.products.bench import regenerate

    require_gpu()
    rows = [r for r in ROWS if r.group in groups]
    arch = default_arch()
    rendered = {candidate_key(r): render(make_candidate(r.family, r.params)) for r in rows}
    t0 = time.monotonic()
    built = dict(zip(rendered, build_batch(list(rendered.values()), arch=arch), strict=True)) if rendered else {}
    log(f"built {len(built)} seed candidates in {time.monotonic() - t0:.1f} s")
    record: dict[str, Any] = {"kind": "seeds", "git_sha": short_sha(paths.git_sha()),
                              "created": datetime.now(UTC).isoformat(timespec="seconds"),
                              "fast": {k: v for k, v in FAST_OPTIONS.items() if k != "interleave"},
                              "rows": [], "sweep": None}
    device: dict[str, str] = {}
    done: dict[str, tuple[str, Evaluation]] = {}
    with Worker(0, "evo.products.seeds:serve") as worker:
        for key, r in rendered.items():   # each candidate once, on every case its rows name
            b = built[key]
            shapes = tuple(dict.fromkeys(s for row in rows if candidate_key(row) == key for s in row.shapes))
            t = time.monotonic()
            if b.status is not Status.BUILT:
                ev = Evaluation(b.build_id, b.status, b.reason)
            else:
                ev = worker.evaluate(EvalRequest(b.build_id, b.cubin_path or "", r.entries, green=True,
                                                 fast_cases=shapes, options=dict(FAST_OPTIONS)), timeout_s)
            device = device or ev.device
            done[key] = (b.build_id, ev)
            log(f"{r.candidate.label()[:70]:70} {ev.status.value:17} {time.monotonic() - t:6.1f} s  {ev.reason[:70]}")
            record["rows"] = [row_record(row, *done[k]) for row in rows if (k := candidate_key(row)) in done]
            save(record, device, out_dir, complete=False)
        if sweep:
            t = time.monotonic()
            shapes = tuple(sweep_shapes())
            ev = worker.evaluate(EvalRequest("sdpa-sweep", "", (), green=False, fast_cases=shapes,
                                             options={"sweep": True, "backends": SWEEP_BACKENDS}), timeout_s)
            if ev.status is not Status.FAST:
                raise EvoError(f"the SDPA sweep failed: {ev.status.value}: {ev.reason}")
            device = device or ev.device
            record["sweep"] = {"grid": {k: list(v) for k, v in SWEEP_GRID.items()}, "reps": SWEEP_REPS,
                               "backends": list(SWEEP_BACKENDS), "dtype": "fp16", "causal": False,
                               "points": json.loads(ev.device["sweep"])}
            log(f"sweep    {len(shapes)} shapes x {len(SWEEP_BACKENDS)} backends {time.monotonic() - t:6.1f} s")
    final = save(record, device, out_dir, complete=True)
    regenerate(out_dir)
    return final


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evo.products.seeds", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=paths.root() / "benchmarks", help="folder for the JSON record")
    ap.add_argument("--only", default=",".join(GROUPS), help=f"groups to measure, of {','.join(GROUPS)}")
    ap.add_argument("--no-sweep", action="store_true", help="leave out the SDPA backend sweep")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per worker request")
    args = ap.parse_args(argv)
    groups = [g.strip() for g in args.only.split(",") if g.strip()]
    unknown = [g for g in groups if g not in GROUPS]
    try:
        if unknown:
            raise EvoError(f"unknown group {', '.join(unknown)}; groups: {', '.join(GROUPS)}")
        path = run(args.out, groups, not args.no_sweep, timeout_s=args.timeout)
    except EvoError as exc:
        print(f"evo: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path} and {args.out.resolve().parent / 'BENCHMARKS.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

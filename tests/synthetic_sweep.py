"""A made-up but well-formed sweep recording over the real families' spaces, for CPU tests.

Speedups come from a smooth function of the parameters (each family has an optimum per head
dim; feature flags add small, case-dependent effects), so samplers have something to climb.
About 4% of points are red, a few crashed, compile_failed, and every point whose shared
memory exceeds a made-up budget is resource_rejected; ``drop`` of the points are left out so
replay meets unmeasured candidates. Header gpu is ``synthetic`` so nothing mistakes it for data.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from evo.family.manifest import load_family
from evo.store.recording import Record, Recording, new_header, save_recording
from evo.results import Shape, Status
from evo.family.space import all_candidates, launch_config
from evo.gpu.suites import fast_cases

FAMILIES = ("flash_mma", "flash_scalar")
SMEM_BUDGET = 160 * 1024


def _log2(x: int) -> float:
    return math.log2(x)


def speedup(family: str, p: dict, s: Shape) -> float:
    """The made-up speedup over sdpa_default of one point on one case."""
    d128 = s.D == 128
    if family == "flash_scalar":
        base = 0.25 - 0.02 * (_log2(p["ROWS_PER_BLOCK"]) - 2) ** 2 - 0.01 * (_log2(p["KV_TILE"]) - 6) ** 2
        return max(0.05, base + 0.03 * (p["VEC"] == 8))
    bm_opt, bn_opt = (7.0, 6.0) if d128 else (6.5, 6.5)
    x = (-0.08 * (_log2(p["BLOCK_M"]) - bm_opt) ** 2 - 0.06 * (_log2(p["BLOCK_N"]) - bn_opt) ** 2
         - 0.05 * (p["STAGES"] - (3 if s.L >= 2048 else 2)) ** 2
         - 0.04 * (_log2(p["NUM_WARPS"]) - 2) ** 2)
    x += 0.08 * (p["SWIZZLE"] == "xor") + 0.03 * p["EXP2"] + 0.02 * p["Q_IN_REGS"]
    x += 0.10 * (p["CAUSAL_SKIP"] and s.causal)
    return 1.15 * math.exp(x)


def smem(family: str, cand, D: int) -> int:
    return launch_config(load_family(family), cand, D).smem_bytes


def make_recording(path: Path, seed: int = 0, drop: float = 0.03, cases: list[Shape] | None = None) -> Path:
    """Write the synthetic recording to ``path`` and return it."""
    rng = random.Random(seed)
    shapes = cases or fast_cases()
    rec = Recording(new_header("synthetic", "sm_90a", shapes, {"evo": "test"}))
    for name in FAMILIES:
        fam = load_family(name)
        for cand in all_candidates(fam):
            if rng.random() < drop:
                continue
            r = Record(name, fam.version, cand.p, Status.FAST, build_id="")
            roll = rng.random()
            if max(smem(name, cand, D) for D in fam.head_dims) > SMEM_BUDGET:
                r.status, r.reason = Status.RESOURCE_REJECTED, "smem over the made-up budget"
            elif roll < 0.04:
                r.status, r.reason = Status.RED, "mismatch on G4"
            elif roll < 0.05:
                r.status, r.reason = Status.CRASHED, "worker died (signal 11)"
            elif roll < 0.06:
                r.status, r.reason = Status.COMPILE_FAILED, "nvcc: error"
            else:
                for s in shapes:
                    base = 1e-3 * s.flops / 1e6 + 8.0
                    evo = base / speedup(name, cand.p, s) * (1 + 0.01 * rng.random())
                    r.timings[s.tag] = {"evo": {"median_us": evo, "p20_us": evo * 0.99, "p80_us": evo * 1.01},
                                        "sdpa_default": {"median_us": base},
                                        "sdpa_flash": {"median_us": base * 1.4}}
            rec.add(r)
    return save_recording(rec, path)

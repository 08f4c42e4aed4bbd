"""flash_mma's race in CTAs that run no K/V tile, before and after the fix (2026-11-28).

Builds the candidate a search found red ("non-deterministic: 8 elements differ between two runs on
the same inputs", R35c bf16) from the current template and from the same source with the fix taken
out, then runs GREEN's check on that case (3 x 2 heads, 551 queries on 248 keys, causal at the
bottom right, std 3.1) CHECKS times each: every check launches twice on the same inputs and
compares with the float64 reference and with itself.

    python3 dev/gpu-runs/2026-11-28-race/no_key_race.py   (repo root, on a GPU)
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from evo.family.render import render
from evo.family.space import make_candidate
from evo.gpu.gate import check_case
from evo.gpu.runtime import CandidateKernels
from evo.gpu.suites import GreenCase, green_settings
from evo.results import Shape, Status
from evo.toolchain.build import build_batch, default_arch

PARAMS = {"BLOCK_M": 128, "BLOCK_N": 64, "NUM_WARPS": 4, "STAGES": 2, "Q_IN_REGS": False, "CAUSAL_SKIP": True}
FIX = """    if (n_tiles == 0) {                         // (CTA-uniform) no tile waited for Q: its copies, made by every
        mma_ops::cp_async_wait<0>();            // thread, must land before O takes their rows, or a late one
        __syncthreads();                        // overwrites O (a causal CTA whose rows see no key, Lq > Lk)
    }
"""
CHECKS = 40


def main() -> None:
    fixed = render(make_candidate("flash_mma", PARAMS))
    assert FIX in fixed.source, "the fix is not in the template"
    source = fixed.source.replace(FIX, "")
    unfixed = replace(fixed, source=source, source_hash=hashlib.sha256(source.encode()).hexdigest())
    shape = Shape("no-key", 3, 2, 551, 128, True, "bf16", Lk=248, align="bottom_right")
    settings = green_settings()
    for name, built in zip(("without the fix", "with the fix"), build_batch([unfixed, fixed], default_arch()),
                           strict=True):
        assert built.status is Status.BUILT and built.cubin_path, built.reason
        kernels = CandidateKernels(built.cubin_path, fixed.entries, 0)
        reasons = [check_case(kernels, GreenCase(shape, std=3.1), seed, settings, salt=7).reason
                   for seed in range(CHECKS)]
        bad = [r for r in reasons if r]
        print(f"{name}: {len(bad)} of {CHECKS} checks red" + (f"; first: {bad[0]}" if bad else ""), flush=True)


if __name__ == "__main__":
    main()

"""Which way of launching makes a candidate hang? (GPU host; diagnostic.)

Builds FAMILY with PARAMS (``K=V,K=V``, parsed and checked as `evo eval -p` does), then runs each phase in its
own process under a time limit, so a hung kernel costs one phase, not the call:
  eager    2000 launches per case over 16 input sets, one synchronize at the end
  ragged   300 launches of random (B, H, L) with L in 1..2048, both causal modes
  bench    evo.gpu.timing.time_case per case as `evo bench` runs it (interleaved with SDPA,
           fidelity, timed outputs checked)
Prints one line per phase: ok with what ran, or HUNG / FAILED with the time limit or the error.
Usage: python scripts/hang_probe.py FAMILY PARAMS [CASES] [LIMIT_S]
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

PHASES = ("eager", "ragged", "bench")


def run_phase(phase: str, family: str, params: str, cases: str) -> str:
    import random

    import torch

    from evo.api import candidate, fast_shapes
    from evo.toolchain.build import build_batch, default_arch
    from evo.results import Status
    from evo.gpu.runtime import load_kernels

    rendered = candidate(family, [p for p in params.split(",") if p])
    (built,) = build_batch([rendered], arch=default_arch())
    assert built.status is Status.BUILT and built.cubin_path, built.reason
    kernels = load_kernels(built.cubin_path, rendered.entries, device=0)
    shapes = fast_shapes(cases, "fp16")
    if phase == "eager":
        for shape in shapes:
            sets = [[torch.randn(shape.B, shape.H, shape.L, shape.D, device="cuda", dtype=torch.float16)
                     for _ in range(4)] for _ in range(16)]
            for i in range(2000):
                kernels.launch(*sets[i % 16], causal=shape.causal)
            torch.cuda.synchronize()
        return f"{len(shapes)} cases x 2000 launches"
    if phase == "ragged":
        rng = random.Random(0)
        for _ in range(300):
            B, H, L = rng.randint(1, 4), rng.randint(1, 16), rng.randint(1, 2048)
            q, k, v, o = (torch.randn(B, H, L, 64, device="cuda", dtype=torch.float16) for _ in range(4))
            kernels.launch(q, k, v, o, causal=rng.random() < 0.5)
        torch.cuda.synchronize()
        return "300 random shapes"
    from evo.gpu.suites import green_settings
    from evo.gpu.timing import time_case

    out = []
    for shape in shapes:
        def cand(q: Any, k: Any, v: Any, o: Any, _c: bool = shape.causal) -> None:
            kernels.launch(q, k, v, o, causal=_c)

        got = time_case(cand, shape, fidelity=True, check=green_settings())
        out.append(f"{shape.tag} {got.timings[0].median_us:.2f} us{' WRONG ' + got.output_failure if got.output_failure else ''}")
    return "; ".join(out)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--phase":
        print(run_phase(*argv[1:5]), flush=True)
        return 0
    family, params = argv[0], argv[1]
    cases = argv[2] if len(argv) > 2 else "F1,F2,F3"
    limit = float(argv[3]) if len(argv) > 3 else 60.0
    bad = 0
    for phase in PHASES:
        t0 = time.time()
        try:
            done = subprocess.run([sys.executable, __file__, "--phase", phase, family, params, cases],
                                  capture_output=True, text=True, timeout=limit)
            tail = (done.stdout.strip().splitlines() or [""])[-1]
            err = (done.stderr.strip().splitlines() or [""])[-1]
            verdict = f"ok: {tail}" if done.returncode == 0 else f"FAILED (rc {done.returncode}): {err}"
        except subprocess.TimeoutExpired:
            verdict = f"HUNG: no end within {limit:.0f} s"
        bad += not verdict.startswith("ok")
        print(f"{phase:7s} {time.time() - t0:6.1f} s  {verdict}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

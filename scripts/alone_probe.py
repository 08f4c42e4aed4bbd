"""Does a candidate timed alone (as a search times it) agree with the same candidate timed
beside the SDPA backends (as `evo bench` times it)? GPU host; diagnostic for the clock rule of
evo/timing.py (a candidate alone keeps its baselines' steady-state rule).

For each FAST case, a family default is timed three ways by evo.timing.time_case, in this order:
  bench   interleaved with every SDPA backend (what `evo bench` records)
  alone   alone, with the baselines just measured passed as ``known`` (what a search records now)
  bare    alone, with no baselines known (the rule before: steady state only for its own long launches)
and the per-launch medians and their ratios to `bench` are printed, with the count of cases
where `alone` is within 5% of `bench`. Usage: python scripts/alone_probe.py [CASES] [FAMILY]
"""

from __future__ import annotations

import sys
from typing import Any

from evo.api import fast_shapes
from evo.build import build_batch, default_arch
from evo.render import render
from evo.results import Status
from evo.runtime import load_kernels
from evo.space import make_candidate
from evo.evaluate import QUICK
from evo.timing import time_case
from evo.vocab import EVO, SDPA_BACKENDS


def main(cases: str, family: str) -> int:
    rendered = render(make_candidate(family, {}))
    (built,) = build_batch([rendered], arch=default_arch())
    assert built.status is Status.BUILT and built.cubin_path, built.reason
    kernels = load_kernels(built.cubin_path, rendered.entries, device=0)
    quick = {k: QUICK[k] for k in ('rounds', 'reps', 'remeasure')}
    agree, shapes = 0, fast_shapes(cases, "fp16")
    print(f"{'case':10s} {'bench us':>9s} {'alone us':>9s} {'bare us':>9s}  alone/bench  bare/bench")
    for shape in shapes:
        def cand(q: Any, k: Any, v: Any, o: Any, _c: bool = shape.causal) -> None:
            kernels.launch(q, k, v, o, causal=_c)

        bench = time_case(cand, shape, SDPA_BACKENDS).timings
        baselines = [t for t in bench if t.backend != EVO]
        alone = time_case(cand, shape, (), known=baselines, **quick).timings[0]
        bare = time_case(cand, shape, (), **quick).timings[0]
        ref = bench[0].median_us
        ok = abs(alone.median_us / ref - 1) <= 0.05
        agree += ok
        print(f"{shape.tag:10s} {ref:9.2f} {alone.median_us:9.2f} {bare.median_us:9.2f}  "
              f"{alone.median_us / ref:11.3f}  {bare.median_us / ref:10.3f}{'' if ok else '  OUTSIDE'}")
    print(f"alone within 5% of bench on {agree} of {len(shapes)} cases")
    return 0 if agree == len(shapes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "F1-F8", sys.argv[2] if len(sys.argv) > 2 else "flash_wgmma"))

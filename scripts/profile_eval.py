"""Where one search-time evaluation spends its time (GPU host): GREEN and FAST of a family's
default, in this process, as the search's worker runs them (quick FAST, baselines cached), twice:
the first pays for the baselines, the second is what every later candidate costs.

Usage: python scripts/profile_eval.py [FAMILY ...]  (default flash_wgmma); prints the phase
times and cProfile's top functions by own time and by cumulative time.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import secrets
import sys
import time

from evo.api import fast_shapes
from evo.toolchain.build import build_batch, default_arch
from evo.gpu.evaluate import Session, evaluate
from evo.family.render import render
from evo.results import Status
from evo.family.space import make_candidate
from evo.gpu.worker import EvalRequest


def main(families: list[str]) -> None:
    session = Session()
    shapes = fast_shapes("F1-F8", "fp16")
    for family in families:
        rendered = render(make_candidate(family, {}))
        (built,) = build_batch([rendered], arch=default_arch())
        assert built.status is Status.BUILT and built.cubin_path, built.reason
        for attempt in ("first", "second"):
            request = EvalRequest(built.build_id, built.cubin_path, rendered.entries, green=True,
                                  fast_cases=tuple(shapes),
                                  options={"quick": True, "salt": secrets.randbelow(2**31)})
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.enable()
            ev = evaluate(request, session)
            prof.disable()
            session.evaluations += 1
            print(f"\n=== {family} {attempt}: {ev.status.value} in {time.perf_counter() - t0:.1f} s "
                  f"(GREEN {ev.green_seconds:.1f} s, {len(ev.checks)} checks; FAST {ev.fast_seconds:.1f} s, "
                  f"{len(ev.timings)} timings, {ev.device.get('fast_outputs_checked')} outputs checked)")
            for key in ("tottime", "cumulative"):
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats(key).print_stats(22)
                print("\n".join(line[:150] for line in out.getvalue().splitlines()[6:]))


if __name__ == "__main__":
    main(sys.argv[1:] or ["flash_wgmma"])

"""Does GREEN slow down when every CPU core is busy? A probe for issue 35's GREEN cost.

`evo run` builds the next batch with nvcc (one process per core by default) while the GPU worker
runs GREEN on this one; GREEN is a Python loop of small launches, copies and comparisons, so a
worker that competes with a core's worth of nvcc for its CPU waits between launches. This times
GREEN alone (no FAST) on one built candidate under three loads: an idle host; one spinning
process per core at the worker's own priority (what the build does today); the same at nice 19.

    python3 scripts/green_contention.py [FAMILY]  (default flash_wgmma); prints GREEN seconds per
    load, the median of --repeats evaluations with fresh draws.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import secrets
import statistics
import time


def _spin(niceness: int) -> None:
    os.nice(niceness)
    while True:
        pass


def _green_seconds(request_args: tuple, session: object, repeats: int) -> list[float]:
    from evo.gpu.evaluate import evaluate
    from evo.gpu.worker import EvalRequest

    build_id, cubin, entries = request_args
    out = []
    for _ in range(repeats):
        request = EvalRequest(build_id, cubin, entries, green=True, fast_cases=(),
                              options={"quick": True, "salt": secrets.randbelow(2**31)})
        ev = evaluate(request, session)
        out.append(ev.green_seconds)
        print(f"  {ev.status.value}: GREEN {ev.green_seconds:.2f} s, {len(ev.checks)} checks", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("family", nargs="?", default="flash_wgmma")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    from evo.family.render import render
    from evo.family.space import make_candidate
    from evo.gpu.evaluate import Session
    from evo.results import Status
    from evo.toolchain.build import build_batch, default_arch

    rendered = render(make_candidate(args.family, {}))
    (built,) = build_batch([rendered], arch=default_arch())
    assert built.status is Status.BUILT and built.cubin_path, built.reason
    session = Session()
    request_args = (built.build_id, built.cubin_path, rendered.entries)
    _green_seconds(request_args, session, 1)          # warm-up: context, modules, allocator
    results = {}
    for load, niceness in (("idle", None), ("busy cores, nice 0", 0), ("busy cores, nice 19", 19), ("idle again", None)):
        print(f"{load}:", flush=True)
        hogs = [mp.Process(target=_spin, args=(niceness,), daemon=True) for _ in range(os.cpu_count() or 1)] \
            if niceness is not None else []
        for h in hogs:
            h.start()
        time.sleep(1.0 if hogs else 0.0)
        try:
            results[load] = statistics.median(_green_seconds(request_args, session, args.repeats))
        finally:
            for h in hogs:
                h.terminate()
            for h in hogs:
                h.join()
    for load, sec in results.items():
        print(f"GREEN median {sec:6.2f} s  {load}")


if __name__ == "__main__":
    main()

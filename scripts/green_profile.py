"""Where does a search's evaluation of one candidate spend its GPU worker's time? A probe for issue 35.

Builds one candidate (the family's defaults), then in this process, as a worker would: a warm-up
evaluation, then GREEN as a search runs it (``first_failure``) and the screen rung on the default
suite's screen cases, each timed per phase. The phases are the gate's own functions (inputs,
reference, PyTorch's SDPA, the candidate's launches, the comparisons), each wrapped so that the GPU
is synchronized before and after it: the seconds are the phase's wall time including its GPU
work. Also the checks sorted by cost and cProfile's top functions.

    python3 scripts/green_profile.py [FAMILY] [--json OUT]   (default flash_wgmma)
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import json
import pstats
import secrets
import time
from collections.abc import Callable
from typing import Any

PHASES = ("make_inputs", "problem_reference", "problem_sdpa", "max_abs_err", "_memory_faults", "_output_faults",
          "to_pages", "cache_args", "check_outputs")


def _timed(fn: Callable[..., Any], name: str, acc: dict[str, float], sync: Callable[[], None]) -> Callable[..., Any]:
    def wrapper(*a: Any, **k: Any) -> Any:
        sync()
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            sync()
            acc[name] += time.perf_counter() - t0
    return wrapper


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("family", nargs="?", default="flash_wgmma")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    import torch

    import evo.gpu.gate as gate
    from evo.family.render import render
    from evo.family.space import make_candidate
    from evo.gpu.evaluate import Session, evaluate
    from evo.gpu.suites import fast_cases
    from evo.gpu.worker import EvalRequest
    from evo.results import Status
    from evo.search.screen import screen_cases
    from evo.toolchain.build import build_batch, default_arch
    from evo.vocab import SCREEN

    t0 = time.perf_counter()
    rendered = render(make_candidate(args.family, {}))
    (built,) = build_batch([rendered], arch=default_arch())
    assert built.status is Status.BUILT and built.cubin_path, built.reason
    print(f"build {time.perf_counter() - t0:.1f} s", flush=True)
    session = Session()
    screen = tuple(screen_cases(fast_cases()))

    def request(green: bool, cases: tuple, rung: str) -> EvalRequest:
        return EvalRequest(built.build_id, built.cubin_path, rendered.entries, green=green, fast_cases=cases,
                           options={"quick": True, "first_failure": True, "rung": rung,
                                    "salt": secrets.randbelow(2**31)})

    t0 = time.perf_counter()
    warm = evaluate(request(True, screen, SCREEN), session)
    print(f"warm-up (GREEN + screen, baselines cached) {time.perf_counter() - t0:.1f} s: {warm.status.value}",
          flush=True)

    acc: dict[str, float] = collections.defaultdict(float)
    sync = torch.cuda.synchronize
    saved = {n: getattr(gate, n) for n in PHASES}
    for n in PHASES:
        setattr(gate, n, _timed(saved[n], n, acc, sync))
    per_check: list[tuple[float, str]] = []
    check_case = gate.check_case

    def timed_check(*a: Any, **k: Any) -> Any:
        sync()
        t = time.perf_counter()
        r = check_case(*a, **k)
        sync()
        per_check.append((time.perf_counter() - t, gate.label(r)))
        return r

    gate.check_case = timed_check
    report: dict[str, Any] = {}
    for what, green, cases in (("green", True, ()), ("screen", False, screen)):
        acc.clear()
        per_check.clear()
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        ev = evaluate(request(green, cases, SCREEN), session)
        prof.disable()
        wall = time.perf_counter() - t0
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(30)
        print(f"\n=== {what}: {wall:.2f} s wall, {ev.status.value}, {len(ev.checks)} checks, "
              f"{len(ev.timings)} timings; green_seconds {ev.green_seconds:.2f}")
        for n, sec in sorted(acc.items(), key=lambda x: -x[1]):
            print(f"  {n:20s} {sec:7.3f} s")
        for sec, lab in sorted(per_check, reverse=True)[:15]:
            print(f"  check {sec * 1e3:7.1f} ms  {lab}")
        print(s.getvalue()[:6000])
        report[what] = {"wall_s": wall, "phases_s": dict(acc), "checks": len(ev.checks),
                        "per_check_ms": sorted(((round(t * 1e3, 2), lab) for t, lab in per_check), reverse=True)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()

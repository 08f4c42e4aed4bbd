"""How long does an op take to settle into its own clock state after something else ran? A probe
for the steady-state warm-up (``evo.gpu.timing.STEADY_WARM_MS``, issue 35).

Every long FAST case (roofline floor >= 20 us: the cases the steady-state rule warms) is timed for
two ops, flash_wgmma's default candidate (``evo``) and SDPA's default (``sdpa_default``), each after
one of three primers:

- ``other``: the other op on the same case for PRIME_MS (a search's full rung, a paired baseline);
- ``prev``: the same op on the previous long case for PRIME_MS (a screen: one case after another);
- ``idle``: the GPU idle for a second (a run's first case, a worker between requests).

After the primer the op's captured graph is replayed back to back for CURVE_MS with a CUDA event
pair around every replay: the curve of microseconds per launch against milliseconds since the
switch. Its settled value is the median over the curve's last third. For each warm-up length X the
JSON gives the error a sample would make: the median of the 5 replays starting at X + 20 ms (the
sampler's own 20 ms of untimed replays, ``WARM_MS``) relative to the settled value.

    python3 scripts/steady_curve.py [--repeats 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from typing import Any

PRIME_MS = 400.0
CURVE_MS = 600.0
WARMS_MS = (0, 25, 50, 75, 100, 150, 200, 300)
SAMPLES = 5          # replays a sample takes after its warm-up (a screen's reps)


def curve(timer: Any) -> list[tuple[float, float]]:
    """(ms since the first replay started, us per launch) of back-to-back replays for CURVE_MS."""
    import torch

    n = max(1, int(CURVE_MS / max(timer.replay_ms, 1e-3)))
    with torch.cuda.stream(timer.stream):
        events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
        events[0].record()
        for e in events[1:]:
            timer.graph.replay()
            e.record()
        events[-1].synchronize()
    out, t = [], 0.0
    for a, b in itertools.pairwise(events):
        ms = a.elapsed_time(b)
        out.append((t, ms * 1e3 / timer.launches))
        t += ms
    return out


def errors(points: list[tuple[float, float]]) -> dict[str, Any]:
    """The settled value and, per warm-up length, a sample's relative error against it."""
    end = points[-1][0]
    settled = statistics.median(us for t, us in points if t >= 2 * end / 3)
    err = {}
    for x in WARMS_MS:
        after = [us for t, us in points if t >= x + 20.0][:SAMPLES]
        if len(after) == SAMPLES:
            err[str(x)] = round(statistics.median(after) / settled - 1.0, 5)
    return {"settled_us": round(settled, 3), "error_at_warm_ms": err}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--primers", default="other,prev,idle", help="comma-separated, of other, prev, idle")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    import torch

    from evo.family.render import render
    from evo.family.space import make_candidate
    from evo.gpu.kernels import load_kernels
    from evo.gpu.suites import fast_cases
    from evo.gpu.timing import CaseRun, baseline_op, steady_case
    from evo.results import Status
    from evo.toolchain.build import build_batch, default_arch

    rendered = render(make_candidate("flash_wgmma", {}))
    (built,) = build_batch([rendered], arch=default_arch())
    assert built.status is Status.BUILT and built.cubin_path, built.reason
    kernels = load_kernels(built.cubin_path, rendered.entries, device=0)
    long_cases = [s for s in fast_cases() if steady_case(s)]
    runs = []
    for shape in long_cases:
        def cand(q: Any, k: Any, v: Any, o: Any, _s: Any = shape) -> None:
            kernels.launch(q, k, v, o, causal=_s.causal, shift=_s.shift)
        runs.append(CaseRun({"evo": cand, "sdpa_default": baseline_op("sdpa_default", shape)}, shape,
                            optional=("sdpa_default",), seed=1, warmup=3))
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(), "prime_ms": PRIME_MS, "curve_ms": CURVE_MS,
                              "cases": []}
    print(f"{'case':12s} {'op':13s} {'primer':6s} " + " ".join(f"{x:>6d}" for x in WARMS_MS) + "   (% error of a sample after X ms of warm-up)")
    for i, (shape, run) in enumerate(zip(long_cases, runs, strict=True)):
        prev = runs[i - 1]
        for name, other in (("evo", "sdpa_default"), ("sdpa_default", "evo")):
            timer = run.timers[name]
            for primer in args.primers.split(","):
                rows = []
                for _ in range(args.repeats):
                    if primer == "other":
                        run.timers[other].warm(PRIME_MS)
                    elif primer == "prev":
                        prev.timers[name].warm(PRIME_MS)
                    torch.cuda.synchronize()     # the primer's stream is not the curve's: no overlap
                    if primer == "idle":
                        time.sleep(1.0)
                    points = curve(timer)
                    rows.append(errors(points) | {"curve": [(round(t, 3), round(us, 3)) for t, us in points]})
                worst = {x: max(abs(r["error_at_warm_ms"].get(str(x), 0.0)) for r in rows) for x in WARMS_MS}
                print(f"{shape.tag:12s} {name:13s} {primer:6s} " + " ".join(f"{100 * worst[x]:6.2f}" for x in WARMS_MS),
                      flush=True)
                report["cases"].append({"case": shape.tag, "op": name, "primer": primer, "replay_ms": timer.replay_ms,
                                        "repeats": rows})
    for run in runs:
        run.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f)


if __name__ == "__main__":
    main()

"""Why FAST and the profiler disagree (GPU host, diagnostic for docs/design.md's fidelity check).

For a few FAST cases, a family default and the SDPA backends are captured once (evo.gpu.timing's
CaseRun), then measured four ways while nvidia-smi logs the SM clock and power every 10 ms:
  A  FAST as evo bench runs it (interleaved rounds)
  B  the profiler as evo bench runs it now (20 ms warm-up, 10 profiled replays)
  C  the profiler after 300 ms of the op's own replays
  D  CUDA events after 300 ms of the op's own replays (no profiler)
Per op and case it prints the four per-launch medians, the profiler's busy time, and the mean
SM clock and power over each phase. Usage: python scripts/fidelity_probe.py [CASES] [FAMILY]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from typing import Any

import torch

from evo.api import fast_shapes
from evo.toolchain.build import build_batch, default_arch
from evo.family.render import render
from evo.results import Status
from evo.gpu.runtime import load_kernels
from evo.family.space import make_candidate
from evo.gpu.timing import WARM_MS, CaseRun, profile, sdpa_op
from evo.vocab import EVO

BACKENDS = ("sdpa_flash", "sdpa_cudnn", "sdpa_default")
LONG_WARM_MS = 300.0


class SmiLog:
    """nvidia-smi sampling clocks and power every 10 ms; :meth:`mean` over a time window."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,nounits",
             "-lms", "10"], stdout=subprocess.PIPE, text=True)
        self.rows: list[tuple[float, float, float]] = []

    def stop(self) -> None:
        self.proc.terminate()
        out, _ = self.proc.communicate()
        for line in out.splitlines():
            try:
                stamp, mhz, watts = (x.strip() for x in line.split(","))
                t = time.mktime(time.strptime(stamp.split(".")[0], "%Y/%m/%d %H:%M:%S")) + float("0." + stamp.split(".")[1])
                self.rows.append((t, float(mhz), float(watts)))
            except ValueError:
                continue

    def mean(self, t0: float, t1: float) -> str:
        inside = [(m, w) for t, m, w in self.rows if t0 <= t <= t1]
        if not inside:
            return "-"
        return f"{statistics.mean(m for m, _ in inside):.0f}MHz/{statistics.mean(w for _, w in inside):.0f}W"


def main(cases: str, family: str) -> None:
    rendered = render(make_candidate(family, {}))
    (built,) = build_batch([rendered], arch=default_arch())
    assert built.status is Status.BUILT and built.cubin_path, built.reason
    kernels = load_kernels(built.cubin_path, rendered.entries, device=0)
    smi = SmiLog()
    time.sleep(0.5)
    rows: list[tuple[str, str, dict[str, Any]]] = []
    for shape in fast_shapes(cases, "fp16"):
        def cand(q: Any, k: Any, v: Any, o: Any, _c: bool = shape.causal) -> None:
            kernels.launch(q, k, v, o, causal=_c)

        ops = {EVO: cand} | {b: sdpa_op(b, shape) for b in BACKENDS}
        run = CaseRun(ops, shape, optional=BACKENDS, seed=0, warmup=3)
        try:
            found: dict[str, dict[str, Any]] = {n: {} for n in run.timers}
            torch.cuda.synchronize()
            t0 = time.time()
            samples = run.sample(5, 10, 400.0)
            torch.cuda.synchronize()
            phase_a = (t0, time.time())
            for name, s in samples.items():
                found[name]["A"] = statistics.median(s)
            for name, timer in run.timers.items():
                t0 = time.time()
                f = profile(timer)
                found[name]["B"], found[name]["busy"] = (f.median_us, f.busy_us) if f else (0.0, 0.0)
                found[name]["clkB"] = (t0, time.time())
                t0 = time.time()
                timer.warm(LONG_WARM_MS - WARM_MS)
                f = profile(timer)
                found[name]["C"] = f.median_us if f else 0.0
                found[name]["clkC"] = (t0, time.time())
                t0 = time.time()
                timer.warm(LONG_WARM_MS)
                found[name]["D"] = statistics.median(timer.sample(10))
                torch.cuda.synchronize()
                found[name]["clkD"] = (t0, time.time())
            for name in found:
                rows.append((shape.tag, name, found[name] | {"clkA": phase_a}))
        finally:
            run.close()
    smi.stop()
    print(f"{'case':10s} {'op':13s} {'A fast':>9s} {'B prof':>9s} {'busy':>9s} {'C prof+w':>9s} {'D ev+w':>9s}"
          f"  A/B    A/C    A/D    clocks A | B | C | D")
    for tag, name, f in rows:
        clocks = " | ".join(smi.mean(*f[k]) for k in ("clkA", "clkB", "clkC", "clkD"))
        print(f"{tag:10s} {name:13s} {f['A']:9.2f} {f['B']:9.2f} {f['busy']:9.2f} {f['C']:9.2f} {f['D']:9.2f}"
              f"  {f['A'] / f['B']:.3f}  {f['A'] / f['C']:.3f}  {f['A'] / f['D']:.3f}  {clocks}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "F1,F6,F8", sys.argv[2] if len(sys.argv) > 2 else "flash_wgmma")

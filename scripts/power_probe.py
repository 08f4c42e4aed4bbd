"""Each op of one FAST case run back to back for a few seconds while nvidia-smi samples the SM clock and
the board's power, to tell a kernel that is slow from one that draws the clocks down (GPU host; a
kernel-writing tool, see dev/perf-notes.md, 2026-11-28 m).

In short bursts near boost clocks FlashAttention-4 gains 11-12 % on L3c and evo 2-4 %; if evo's kernel
draws more power for the same work, the power cap takes its clocks down first. This runs a stored
candidate (``--id``, rebuilt from today's templates) and the baselines of ``--backends`` in turn, each for
``--seconds`` of back-to-back replays of a captured CUDA graph of its launches (as ``evo bench`` times
them), twice over, and prints per op: microseconds a launch over its last second, and the median SM
clock (MHz), power (W) and temperature (C) nvidia-smi saw during that second:

    python3 scripts/power_probe.py --id 287fdd1b57ec --db /tmp/evo.sqlite --case L3 --dtype bf16
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evo.gpu.timing import GraphTimer


def _samples(path: str) -> list[tuple[float, float, float, float]]:
    """(unix time, SM MHz, W, C) from nvidia-smi's CSV lines, unreadable lines skipped."""
    out = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for line in lines:
        parts = [p.strip() for p in line.split(",")]
        try:
            t = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append((t, float(parts[1].split()[0]), float(parts[2].split()[0]), float(parts[3])))
        except (ValueError, IndexError):
            continue
    return out


def _run(timers: dict[str, GraphTimer], smi: subprocess.Popen[bytes], rounds: int,
         seconds: float) -> list[tuple[int, str, float, float, float]]:
    """Each op's captured graph replayed back to back for ``seconds`` after a second idle, ``rounds``
    times over, while ``smi`` samples; then ``smi`` is stopped. Rows (round, op, start, end, us a
    launch) of the samples taken in each op's last second."""
    phases = []
    time.sleep(1.0)
    try:
        for rnd in range(rounds):
            for name, timer in timers.items():
                time.sleep(1.0)                          # idle between ops: each starts from the same state
                start = time.time()
                while time.time() - start < seconds:
                    t0 = time.time()
                    us = statistics.median(timer.sample(3))
                    if time.time() - start >= seconds - 1.0:
                        phases.append((rnd, name, t0, time.time(), us))
    finally:
        time.sleep(0.5)
        smi.terminate()
        smi.wait()
    return phases


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--id", required=True, help="a stored candidate (id or prefix)")
    ap.add_argument("--db", required=True, help="SQLite file or URL holding --id")
    ap.add_argument("--case", required=True, help="one FAST case, e.g. L3")
    ap.add_argument("--dtype", default="bf16", help="fp16 or bf16")
    ap.add_argument("--backends", default="fa4,sdpa_default", help="baselines run after the candidate")
    ap.add_argument("--seconds", type=float, default=3.0, help="back-to-back launches per op and round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default=None, help="write the rows here too")
    args = ap.parse_args(argv)

    import torch

    from evo.api import fast_shapes, load_candidate
    from evo.errors import EvoError
    from evo.gpu.gate import make_inputs
    from evo.gpu.timing import GraphTimer, baseline_op, baseline_unavailable

    try:
        loaded = load_candidate(args.id, db=args.db)
    except EvoError as e:
        print(e)
        return 1
    kernels = loaded.kernels
    (shape,) = fast_shapes(args.case, args.dtype)
    q, k, v = make_inputs(shape, seed=1, salt=0, device="cuda")
    o = torch.empty_like(q)
    ops: dict[str, Callable[[], object]] = {
        f"evo {loaded.build_id[:12]}": lambda: kernels.launch(q, k, v, o, causal=shape.causal, shift=shape.shift)}
    for name in (b for b in args.backends.split(",") if b):
        if baseline_unavailable(name, shape):
            print(f"{name}: unavailable for {shape.tag}")
            continue
        ops[name] = functools.partial(baseline_op(name, shape), q, k, v, o)
    # captured in CUDA graphs as evo bench times them: a Python launch (FA4's) cannot keep the GPU fed
    # at about 100 us a kernel, and a back-to-back loop of eager calls then measures the host
    timers = {name: GraphTimer(run) for name, run in ops.items()}
    torch.cuda.synchronize()

    log = "/tmp/power_probe_smi.csv"
    with open(log, "w", encoding="utf-8") as sink:
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
                                "--format=csv,noheader", "-lms", "20"], stdout=sink)
        phases = _run(timers, smi, args.rounds, args.seconds)
    samples = _samples(log)
    rows = []
    by: dict[tuple[int, str], list[tuple[float, float, float]]] = {}
    for rnd, name, t0, t1, us in phases:
        by.setdefault((rnd, name), []).append((t0, t1, us))
    for (rnd, name), spans in by.items():
        inside = [s for s in samples if any(t0 <= s[0] <= t1 for t0, t1, _ in spans)]
        row = {"round": rnd, "op": name, "us": statistics.median(u for _, _, u in spans),
               "mhz": statistics.median(s[1] for s in inside) if inside else None,
               "watts": statistics.median(s[2] for s in inside) if inside else None,
               "celsius": statistics.median(s[3] for s in inside) if inside else None,
               "samples": len(inside)}
        rows.append(row)
        print(f"round {rnd} {name:>24}: {row['us']:8.1f} us  {row['mhz']} MHz  {row['watts']} W  "
              f"{row['celsius']} C  ({len(inside)} samples)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"case": shape.tag, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

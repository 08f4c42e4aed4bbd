"""Per FAST case, the fastest candidate's FAST time in a database beside the SDPA baselines timed
with it: what a promoted package's per-case winners would serve (issue 33's tables).

    python scripts/study_cases.py db/evo.sqlite
"""

from __future__ import annotations

import argparse
import math
import sqlite3
import statistics
from collections import defaultdict

QUERY = """select e.candidate_id, t."case", t.causal, t.dtype, t.B, t.H, t.Hkv, t.L, t.Lk, t.D, t.align,
                  t.backend, t.median_us, t.tflops
           from evo_timings t join evo_evaluations e on t.evaluation_id = e.id"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db", help="an evo SQLite database")
    args = ap.parse_args()
    rows = sqlite3.connect(args.db).execute(QUERY).fetchall()
    by: dict[tuple[str, bool, str], dict[str, list[tuple]]] = defaultdict(lambda: defaultdict(list))
    for cid, case, causal, dt, B, H, Hkv, L, Lk, D, align, backend, us, tflops in rows:
        dims = f"{B},{H}/{Hkv or H},{L}/{Lk or L},{D}" + (" br" if align == "bottom_right" else "")
        by[(case, bool(causal), dt)][backend].append((us, cid, tflops, dims))
    print(f"{'case':10} {'B,Hq/Hkv,Lq/Lk,D':26} {'evo us':>8} {'TFLOP/s':>8} {'cuDNN us':>9} {'x cuDNN':>8} "
          f"{'x default':>9} {'x flash':>8}  candidate")
    ratios = []
    for (case, causal, dt), times in sorted(by.items()):
        if "evo" not in times or "sdpa_cudnn" not in times:
            continue
        us, cid, tflops, dims = min(times["evo"])
        base = {b: statistics.median(x[0] for x in times[b]) for b in ("sdpa_cudnn", "sdpa_default", "sdpa_flash")
                if b in times}
        ratios.append(base["sdpa_cudnn"] / us)
        print(f"{case + ('c' if causal else '') + '-' + dt:10} {dims:26} {us:8.1f} {tflops:8.0f} {base['sdpa_cudnn']:9.1f} "
              f"{base['sdpa_cudnn'] / us:8.2f} {base.get('sdpa_default', math.nan) / us:9.2f} "
              f"{base.get('sdpa_flash', math.nan) / us:8.2f}  {cid[:12]}")
    if ratios:
        print(f"geometric mean x cuDNN {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}, "
              f"lowest {min(ratios):.3f}, over {len(ratios)} cases")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

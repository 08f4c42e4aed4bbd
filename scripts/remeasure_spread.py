"""How far a kernel's speedup over SDPA's default moves when the same case is measured again on the same
GPU kind (the same machine code: one candidate measured twice, or two candidates whose entry serving the
case compiled to the same bytes, as a gene that touches other head dims leaves it): on the same board or another (the evaluations' GPU UUIDs, recorded since 2026-11-29 w), or,
for evaluations from before that, within one session (both within --session-hours of each other: one
machine held for the session) and across sessions. The noise floor of any A/B read from a database
(scripts/gene_pairs.py) and of a search that ranks trials timed in different sessions (dev/perf-notes.md, w).

    python scripts/remeasure_spread.py db/evo.sqlite [--device "NVIDIA H200"] [--cases L]

Each measurement is one evaluation's median FAST time of the kernel and of SDPA's default timed beside it
(a search's screens, a shorter protocol, left out); a pair is two evaluations that both timed the case
with the same machine code: the same portable digest (``kernel_code_sha256``, without the cubin's symbol
indices) where both recorded one, else the same file-bound digest (``kernel_sha256``).
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import statistics
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from evo.family.render import entry_name
from evo.store.engine import sqlite_header_error

ROWS = """select e.id, e.candidate_id, e.created, coalesce(json_extract(e.device_info, '$.gpu_uuid'), ''),
                 coalesce(json_extract(e.device_info, '$.kernel_code_sha256'),
                          json_extract(e.device_info, '$.kernel_sha256'), '{}'),
                 t."case", t.causal, t.dtype, t."D", t.backend, t.median_us
          from evo_timings t join evo_evaluations e on t.evaluation_id = e.id
          where e.device = ? and t.backend in ('evo', 'sdpa_default') and t."case" like ?
            and coalesce(json_extract(e.device_info, '$.rung'), '') != 'screen'"""   # the full protocol's numbers


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db", help="an evo SQLite database")
    ap.add_argument("--device", default="NVIDIA H200", help="the GPU kind whose timings are read")
    ap.add_argument("--cases", default="L", help="case names starting with this (default L: issue 33's suite)")
    ap.add_argument("--session-hours", type=float, default=3.0, help="two measurements this close: one session")
    args = ap.parse_args(argv)
    if problem := sqlite_header_error(Path(args.db)):
        ap.error(problem)
    db = sqlite3.connect(args.db)
    # (the machine code serving the case, else the candidate; case tag) -> evaluation -> (created, board, {backend: us})
    seen: dict[tuple[str, str], dict[int, tuple[datetime, str, dict[str, float]]]] = defaultdict(dict)
    hashes: dict[int, dict[str, str]] = {}
    for eid, cid, created, board, kernels, case, causal, dtype, head_dim, backend, us in db.execute(
            ROWS, (args.device, args.cases + "%")):
        tag = f"{case}{'c' if causal else ''}-{dtype}"                 # as evo.results.Shape.tag spells it
        if eid not in hashes:
            hashes[eid] = json.loads(kernels)
        code = hashes[eid].get(entry_name(head_dim, dtype, bool(causal)), cid)
        seen[(code, tag)].setdefault(eid, (datetime.fromisoformat(created), board, {}))[2][backend] = us
    moves: dict[str, list[float]] = {k: [] for k in ("same board", "another board", "same session, board unknown",
                                                     "across sessions, board unknown")}
    for evals in seen.values():
        first: dict[tuple[float, float], tuple[datetime, str]] = {}   # the same two medians stored again (a
        for at, board, t in sorted(evals.values(), key=lambda e: e[0]):   # rung's timings carried up) are one
            if len(t) == 2:                                               # measurement, not two
                first.setdefault((t["evo"], t["sdpa_default"]), (at, board))
        points = sorted((at, board, sdpa / evo) for (evo, sdpa), (at, board) in first.items())
        for i, (at_i, board_i, x_i) in enumerate(points):
            for at_j, board_j, x_j in points[i + 1:]:
                if board_i and board_j:
                    kind = "same board" if board_i == board_j else "another board"
                else:
                    hours = (at_j - at_i).total_seconds() / 3600
                    kind = f"{'same session' if hours <= args.session_hours else 'across sessions'}, board unknown"
                moves[kind].append(abs(math.log(x_j / x_i)))
    print(f"{args.device}, cases {args.cases}*: |change| of one kernel's speedup over SDPA's default "
          "between two measurements of one case")
    for kind, xs in moves.items():
        if not xs:
            print(f"  {kind:30} no pairs")
            continue
        pct = [100 * (math.exp(x) - 1) for x in xs]
        print(f"  {kind:30} {len(xs):5} pairs: median {statistics.median(pct):.1f} %, "
              f"90th percentile {quantile(pct, 0.9):.1f} %, largest {max(pct):.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

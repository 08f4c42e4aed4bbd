"""How many of a search run's screens timed machine code timed before (evo.search.twins, dev/perf-notes.md x).

    python scripts/twin_share.py db/evo.sqlite RUN [RUN ...] [--device "NVIDIA H200"]

For each screen the run stored (a search's first rung), the kernels it timed are known by their portable
digests (device info ``kernel_code_sha256``; a search builds only the kernels its cases run, so these are
the study's kernels). A screen is counted as a *twin of a timed kernel* when an earlier evaluation on the
device, of another candidate, timed the same code of every one of those kernels in full and passed
(``fast``, the full protocol). That bounds from above what the search answers from the store instead of
timing: it also asks that the earlier candidate launch the kernels alike and that its timings cover the
study's cases beside its baseline, neither of which is read here (2026-11-29 c: a screen of spec-l7
matched a kernel timed only on the FAST suite's cases). Else as a *twin of a screen* when an earlier screen
of another candidate timed that code (the search still screens those again). Also printed: how many
distinct codes the run's screens covered.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

from evo.store.engine import sqlite_header_error

ROWS = """select id, candidate_id, run_id, status, coalesce(json_extract(device_info, '$.rung'), 'full'),
                 json_extract(device_info, '$.kernel_code_sha256')
          from evo_evaluations where device = ? and json_extract(device_info, '$.kernel_code_sha256') is not null
          order by id"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db", help="an evo SQLite database")
    ap.add_argument("runs", nargs="+", type=int, help="evo run ids (evo_runs.id; a run's --summary-json says its run_id)")
    ap.add_argument("--device", default="NVIDIA H200", help="the GPU kind whose evaluations are read")
    args = ap.parse_args(argv)
    if problem := sqlite_header_error(Path(args.db)):
        ap.error(problem)
    rows = [(eid, cid, run, status, rung, json.loads(code))
            for eid, cid, run, status, rung, code in sqlite3.connect(args.db).execute(ROWS, (args.device,))]
    for run in args.runs:
        entries = sorted({fn for _, _, r, _, rung, code in rows if r == run and rung == "screen" for fn in code})
        timed: dict[tuple[str, ...], set[str]] = {}     # code of the entries -> candidates timed in full, passed
        screened: dict[tuple[str, ...], set[str]] = {}  # code of the entries -> candidates screened
        screens = of_timed = of_screen = 0
        codes = set()
        for _, cid, r, status, rung, code in rows:
            if not entries or not all(fn in code for fn in entries):
                continue
            key = tuple(code[fn] for fn in entries)
            if r == run and rung == "screen":
                screens += 1
                codes.add(key)
                if timed.get(key, set()) - {cid}:
                    of_timed += 1
                elif screened.get(key, set()) - {cid}:
                    of_screen += 1
            if status == "fast" and rung == "full":
                timed.setdefault(key, set()).add(cid)
            if rung == "screen":
                screened.setdefault(key, set()).add(cid)
        share = f" ({of_timed / screens:.0%})" if screens else ""
        print(f"run {run}: {screens} screens of {len(codes)} distinct codes of {len(entries)} kernel(s); "
              f"twins of a kernel timed in full {of_timed}{share}, else of a screened one {of_screen}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

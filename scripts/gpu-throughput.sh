#!/usr/bin/env bash
# Issue 35's measurement on one GPU, in one call of at most 560 s: `evo run` with its defaults
# (default families and FAST cases, the evo sampler, rungs on) for a fixed time budget, then the
# top 10 candidates by screen that the search pruned timed with the full protocol, and
# $OUT/throughput.json: candidates per GPU-hour and the screen's error (scripts/screen_check.py
# says what each figure counts). Logs, the run's summary and the database come back under $OUT.
#
# The command (repo root, the wheels carried as .whl/*.whl, as scripts/gpu-short.sh; the lending
# tool: run with carry [".whl"] and a 600 s limit), about 510 s:
#     EVO_GIT_SHA=$(git rev-parse --short HEAD) scripts/gpu-throughput.sh
# Knobs: TP_BUDGET (the search's --time-budget, 270 s), TP_SEED (1), TP_CHECK_S (the check's limit,
# 180 s; it starts no full evaluation after TP_CHECK_S - 40 s), TP_FLAGS (more `evo run` options,
# e.g. --full-only for the protocol before rungs, or --prune-bar incumbent, to compare on the same seed), TP_RESUME (a gzipped
# evo.sqlite from an earlier call's $OUT, carried: the run resumes that study, so a search longer than
# one call is several calls), TP_CHECK_S=0 (no check: a part before the last), TP_BUDGET=0 (no search:
# the check alone, on TP_RESUME's study; TP_SUMMARY: the run's run.json, carried).
# Each resumed part pays the worker's start and the caches' priming again (about 30 s on an H200 at
# def00f6), so the longest single run a call allows is the fairer reading of a 10-minute one:
# TP_BUDGET=560 TP_CHECK_S=0 under a 600 s limit (about 575 s), then TP_BUDGET=0 for the check.
# Keep $OUT/run.json as benchmarks/throughput/<gpu>-<YYYYMMDD>-<sha>-<N>gpu.json: BENCHMARKS.md's
# search-throughput table is made from those (scripts/gen_benchmarks_md.py).
set -uo pipefail
source scripts/gpu-stages.sh
export EVO_HOME=${EVO_HOME:-/tmp/evo-throughput}     # database and build cache off $OUT (the cubins are large)
BUDGET=${TP_BUDGET:-270}
CHECK_S=${TP_CHECK_S:-180}
if [ -n "${TP_RESUME:-}" ]; then mkdir -p "$EVO_HOME/db" && gunzip -c "$TP_RESUME" > "$EVO_HOME/db/evo.sqlite" || exit 1; fi
stage env 20 bash -c 'nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; nproc'
# --trials far above what the budget allows: the time budget is what ends the search
[ "$BUDGET" -gt 0 ] && stage run $((BUDGET + 70)) $EVO run --study tp --trials 100000 --seed "${TP_SEED:-1}" \
  --time-budget "$BUDGET" --summary-json "$OUT/run.json" ${TP_FLAGS:-}
[ "$CHECK_S" -gt 0 ] && stage check "$CHECK_S" python3 scripts/screen_check.py --study tp --summary "${TP_SUMMARY:-$OUT/run.json}" --top 10 \
  --time-budget $((CHECK_S - 40)) --out "$OUT/throughput.json"
cat "$OUT/throughput.json" 2>/dev/null | head -40
python3 -c 'import sqlite3, sys; c=sqlite3.connect(sys.argv[1]); c.execute("PRAGMA wal_checkpoint(TRUNCATE)")' \
  "$EVO_HOME/db/evo.sqlite" 2>/dev/null
gzip -c "$EVO_HOME/db/evo.sqlite" > "$OUT/evo.sqlite.gz" 2>/dev/null

#!/usr/bin/env bash
# Issue 35's flash_wgmma recording for `evo bench-samplers`, one GPU call at a time: `evo run` with
# the random sampler (uniform over the valid points it has not tried) on flash_wgmma's pinned
# sub-space (docs/search.md, "A sub-space of flash_wgmma for the sampler benchmark": $PINS below,
# 768 valid points) for a time budget, every candidate stopped after its screen (--screen-only: the
# recording keeps screens, so a full rung would be GPU time spent on nothing it keeps), then
# `evo export-sweep --fidelity screen`: each candidate at its screen, about 2 s of H100 a screen. Calls resume one study,
# the database carried from each call's $OUT to the next (WR_RESUME), until the sub-space is
# exhausted (the run then stops by itself: "search space exhausted").
#
# The command (repo root, the wheels carried as .whl/*.whl, as scripts/gpu-short.sh; the lending
# tool: carry [".whl"] and a 600 s limit), about 500 s a call:
#     EVO_GIT_SHA=$(git rev-parse --short HEAD) scripts/gpu-wgmma-recording.sh
# and each later call with the previous call's database carried (put it in the work tree first):
#     WR_RESUME=evo.sqlite.gz EVO_GIT_SHA=... scripts/gpu-wgmma-recording.sh
# $OUT gets run.json (the run's summary), sweep-wgmma-screen.json.gz (the recording of every call
# so far: each export writes the whole database's screens), evo.sqlite.gz and the logs.
# A screen-only candidate costs about 2 s of H100 (GREEN 0.3 s and the screen 1.6 s at 2a6de5d),
# so the 768 points take about 1,600 s of one GPU: four calls of 420 s (export-sweep reads only the
# database: a call cut short can be exported on a CPU from its evo.sqlite.gz). On a host of several
# GPUs `evo run` puts a worker on each (its default): on 4 H100s about one call, if the builds keep
# up; the screens then come from four cards of one name (each against its own worker's cached
# baseline), and the recording mixes them.
# Knobs: WR_BUDGET (the search's --time-budget, 420 s), WR_SEED (1), WR_STUDY (wgmma-rec),
# WR_RESUME (above), WR_DRY=1 (print each stage's command, one line each, and run nothing: the
# CPU check in tests/test_pins.py runs the printed `evo run` on a recording instead of a GPU).
set -uo pipefail
# flash_wgmma's genes held at their manifest defaults; free: WGS_D64, BLOCK_N_D64, WGS_D128,
# BLOCK_N_D128, SOFTMAX_ILP, Q_IN_REGS, PINGPONG3
PINS=STAGES_D64=2,EXP_EMU_D64=0,STAGES_D128=2,WGS_D96=2,BLOCK_N_D96=128,STAGES_D96=2,PAD_PV_D96=false,WGS_D256=2,BLOCK_N_D256=80,STAGES_D256=2,PRODUCER_REGS=24,PINGPONG=true,INTRA_WG_OVERLAP=true,CAUSAL_ORDER=global,CAUSAL_TRIM=false,LAZY_D64=false,LAZY_D128=false,LAZY_D96=false,LAZY_D256=false,ROWSUM_MMA=false,PERSISTENT=true,PACK_GQA=false,RESCALE_EARLY=false,Q_SMEM_WG3=false,SPLIT_MASK=false,L2_SECTION_MB=32,SECTION_DEAL=restart,TILE_SCHED=static
BUDGET=${WR_BUDGET:-420}
DRY=${WR_DRY:-}
if [ -n "$DRY" ]; then
  OUT=${OUT:-/tmp/evo-out}; EVO="python3 -m evo"
  stage() { shift 2; echo "$*"; }
else
  source scripts/gpu-stages.sh
fi
export EVO_HOME=${EVO_HOME:-/tmp/evo-wgmma-rec}     # database and build cache off $OUT (the cubins are large)
if [ -z "$DRY" ] && [ -n "${WR_RESUME:-}" ]; then
  mkdir -p "$EVO_HOME/db" && gunzip -c "$WR_RESUME" > "$EVO_HOME/db/evo.sqlite" || exit 1
fi
stage env 20 bash -c 'nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; nproc'
# --trials far above the sub-space: the time budget, or the sub-space exhausted, ends the search
stage run $((BUDGET + 70)) $EVO run --families flash_wgmma --sampler random --pin "$PINS" --study "${WR_STUDY:-wgmma-rec}" \
  --screen-only --trials 100000 --seed "${WR_SEED:-1}" --time-budget "$BUDGET" --summary-json "$OUT/run.json"
if [ -z "$DRY" ]; then   # the database first: the next call resumes it, and export-sweep needs no GPU
  python3 -c 'import sqlite3, sys; c=sqlite3.connect(sys.argv[1]); c.execute("PRAGMA wal_checkpoint(TRUNCATE)")' \
    "$EVO_HOME/db/evo.sqlite" 2>/dev/null
  gzip -c "$EVO_HOME/db/evo.sqlite" > "$OUT/evo.sqlite.gz" 2>/dev/null
fi
stage export 60 $EVO export-sweep --fidelity screen --out "$OUT/sweep-wgmma-screen.json.gz"

#!/usr/bin/env bash
# Issue 33's slowest LLM cases against FlashAttention-4 under Nsight Compute: a stored candidate,
# SDPA's default and FA4 launched once each per case by scripts/ncu_probe.py (after a dense GEMM in
# the same dtype), every kernel profiled with the sections that tell a main loop's pipes and stalls
# apart. Where evo stood (dev/perf-notes.md, 2026-11-28 i): L3c (the chunk on an 8192-key cache) at
# 0.88-0.95x FA4 and L7 (cross-attention, D=64) at 0.92-0.97x.
#
# After FlashAttention-4's two big parts are staged (../shared/device/fa4/README.md), one call:
#   carry [".whl", ".clean", ".fa4/small"]:
#   source .fa4/small/stage.sh .fa4/small; EVO_GIT_SHA=<sha> scripts/gpu-ncu-llm.sh     (~150 s)
# .clean/cur.sqlite.gz: the database holding NCU_ID, gzipped. Knobs: NCU_ID (287fdd1b57ec, llm3's
# best), NCU_CASES (L3,L7), NCU_DTYPE (bf16). Back: $OUT/ncu.ncu-rep, its details as CSV, the log.
set -uo pipefail
source scripts/gpu-stages.sh
export PYTHONPATH=$PYTHONPATH:/tmp/site/nvidia_cutlass_dsl/dsl_packages   # FlashAttention-4, where staged
export EVO_HOME=/tmp/evoncu
mkdir -p "$EVO_HOME/db" && gunzip -c "${NCU_DB:-.clean/cur.sqlite.gz}" > "$EVO_HOME/db/evo.sqlite" || exit 1
stage ncu 400 ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
  -f -o "$OUT/ncu" python3 scripts/ncu_probe.py --id "${NCU_ID:-287fdd1b57ec}" --cases "${NCU_CASES:-L3,L7}" \
  --dtype "${NCU_DTYPE:-bf16}"
stage ncu-csv 60 bash -c "ncu -i '$OUT/ncu.ncu-rep' --page details --csv > '$OUT/ncu-details.csv'"

#!/usr/bin/env bash
# Issue 33's bar against SDPA was set by a harness that times short bursts of CUDA-graph launches;
# evo times every long case in each op's steady state. This times one stored LLM-suite candidate on
# the LLM suite in both protocols (`evo bench --clocks steady|burst`), bf16 and fp16, beside cuDNN,
# SDPA's default and FlashAttention-4, so that the ratios can be read in either (docs/design.md, FAST).
#
# After FlashAttention-4's two big parts are staged (../shared/device/fa4/README.md), one call:
#   carry [".whl", ".clean", ".fa4/small"]:
#   source .fa4/small/stage.sh .fa4/small; EVO_GIT_SHA=<sha> scripts/gpu-clocks.sh     (~300 s)
# .clean/cur.sqlite.gz: the current database, gzipped (`git show 2cc8def:dev/gpu-runs/2026-11-28d-h100/
# evo.sqlite.gz`, scripts/fetch-db.sh's). Knobs: CLOCKS_ID (the candidate, 287fdd1b57ec: llm3's
# best), CLOCKS_DTYPES ("bf16 fp16"). Everything comes back as $OUT/clocks.tgz.
set -uo pipefail
source scripts/gpu-stages.sh
export PYTHONPATH=$PYTHONPATH:/tmp/site/nvidia_cutlass_dsl/dsl_packages   # FlashAttention-4, where staged
export EVO_HOME=/tmp/evoclocks
mkdir -p "$EVO_HOME/db" && gunzip -c "${CLOCKS_DB:-.clean/cur.sqlite.gz}" > "$EVO_HOME/db/evo.sqlite" || exit 1
stage env 30 bash -c 'nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
  python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())"
  python3 -c "from flash_attn.cute import flash_attn_func; import importlib.metadata as m; print(\"fa4\", m.version(\"flash-attn-4\"))"'
for dtype in ${CLOCKS_DTYPES:-bf16 fp16}; do
  for clocks in steady burst; do
    stage "bench-$dtype-$clocks" 200 $EVO bench --id "${CLOCKS_ID:-287fdd1b57ec}" --cases llm --dtype "$dtype" \
      --clocks "$clocks" --backends sdpa_cudnn,sdpa_default,fa4 --out "$OUT/clocks/benchmarks"
  done
done
cp "$OUT"/*.log "$OUT/clocks/" 2>/dev/null
tar czf "$OUT/clocks.tgz" -C "$OUT" clocks && rm -rf "$OUT/clocks"

#!/usr/bin/env bash
# Issue 35's scaling measurement on one many-GPU host, in one call: `evo run` with its defaults on
# 1, then 2, then (where the host has them) 4 of its GPUs, each a fresh study and database for the
# same time budget and seed, one after the other on the same cards, so that the ratio of candidates
# per hour compares one card with itself. nvidia-smi is logged every 10 s beside the runs (a slow
# card shows there, as the H100 x2 host's GPU 0 did at da5c8b5).
#
# The command (repo root, the wheels carried as .whl/*.whl; the lending tool: carry [".whl"], kind
# nvidia-h100-x4 or -x2, a 600 s limit):
#     EVO_GIT_SHA=$(git rev-parse --short HEAD) SC_BUDGET=160 scripts/gpu-scaling.sh
# Knobs: SC_BUDGET (each run's --time-budget, 160 s), SC_SEED (1), SC_COUNTS ("1 2 4": GPU counts to
# run, each capped at the host's). Out: $OUT/run-<N>gpu.json, $OUT/smi.csv, $OUT/scaling.txt and
# $OUT/logs.tar.gz (the runs' logs, the GPUs' list, the stage summary): the device tool brings back
# at most 8 files, and on 2026-11-28 the tenth, smi.csv, stayed behind.
set -uo pipefail
source scripts/gpu-stages.sh
BUDGET=${SC_BUDGET:-160}
have=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/gpus.txt"
nvidia-smi --query-gpu=timestamp,index,utilization.gpu,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv -l 10 > "$OUT/smi.csv" 2>&1 &
smi=$!
for n in ${SC_COUNTS:-1 2 4}; do
  [ "$n" -gt "$have" ] && continue
  gpus=$(seq -s, 0 $((n - 1)))
  EVO_HOME=/tmp/evo-scaling-$n stage "run-${n}gpu" $((BUDGET + 70)) $EVO run --study tp --trials 100000 \
    --seed "${SC_SEED:-1}" --time-budget "$BUDGET" --gpus "$gpus" --summary-json "$OUT/run-${n}gpu.json"
done
kill "$smi" 2>/dev/null
python3 - "$OUT" <<'PY' | tee "$OUT/scaling.txt"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
runs = {int(p.stem.split("-")[1][:-3]): json.loads(p.read_text()) for p in sorted(out.glob("run-*gpu.json"))}
one = runs.get(1)
for n, r in sorted(runs.items()):
    host = r["candidates_per_hour"]
    ratio = f"{host / one['candidates_per_hour']:.2f}x one GPU" if one else "no one-GPU run"
    print(f"{n} GPU(s): {r['measured']} candidates in {r['wall_s']:.0f} s, {host:.0f} an hour for the host, "
          f"{r['candidates_per_gpu_hour']:.0f} per GPU-hour; {ratio}")
PY
tar -czf "$OUT/logs.tar.gz" -C "$OUT" gpus.txt summary.log $(cd "$OUT" && ls run-*gpu.log) && \
  rm -f "$OUT"/gpus.txt "$OUT"/summary.log "$OUT"/run-*gpu.log

#!/usr/bin/env bash
# Issue 14 on the GPU host, in one call (about 2-3 minutes on an H100): the seed campaigns'
# rows and the trimmed SDPA sweep (python -m evo.products.seeds: GREEN + FAST per candidate, one worker),
# then an evolution seeded only with the naive V0 kernel, allowed to switch families
# (seed_naive -> seed_online -> seed_wmma, manifest successors), and its lineage.
# Usage (repo root): OUT=/tmp/evo-out scripts/seeds-gpu.sh
# Afterwards, here: copy $OUT/seeds/benchmarks/seeds-*.json into benchmarks/ and run
#   python scripts/gen_benchmarks_md.py     (BENCHMARKS.md rows and benchmarks/plots/*.svg)
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}
mkdir -p "$OUT/seeds"
export PYTHONPATH=${PYTHONPATH:-}:$PWD PYTHONUNBUFFERED=1
DB="sqlite:///$OUT/seeds/ladder.sqlite"
TRIALS=${SEEDS_TRIALS:-12}
t0=$(date +%s)
echo "=== seeds: rows and SDPA sweep ($(date +%T))"
python3 -m evo.products.seeds --out "$OUT/seeds/benchmarks" 2>&1 | tee "$OUT/seeds/bench.log"
echo "=== seeds: evolution from V0, $TRIALS trials ($(date +%T), $(( $(date +%s) - t0 )) s so far)"
python3 -m evo run --db "$DB" --study seeds-ladder --families seed_naive,seed_online,seed_wmma \
  --cases F1f --trials "$TRIALS" --batch 4 --jobs 16 --seed 1 2>&1 | tee "$OUT/seeds/run.log" | tail -12
python3 -m evo lineage --db "$DB" --study seeds-ladder 2>&1 | tee "$OUT/seeds/lineage.txt" | head -80
python3 -m evo lineage --db "$DB" --study seeds-ladder --format json > "$OUT/seeds/lineage.json" 2>&1
python3 -m evo insights --db "$DB" --study seeds-ladder 2>&1 | tee "$OUT/seeds/insights.txt" | head -30
echo "=== seeds: done in $(( $(date +%s) - t0 )) s"

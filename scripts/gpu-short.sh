#!/usr/bin/env bash
# A time-boxed GPU call for a small device budget: each stage has its own limit (a stage that
# hangs is aborted with Python's faulthandler traceback, its worker processes killed), and
# every log is packed into one archive at the end ($OUT/short.tgz), whatever happened.
# Usage (repo root, .whl carried): scripts/gpu-short.sh
set -uo pipefail
source scripts/gpu-stages.sh
stage env 30 bash -c 'nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; python3 -c "import torch; print(torch.__version__, torch.backends.cudnn.version())"; python3 -m evo doctor'
[ "${SHORT_TESTS_S:-190}" = 0 ] || stage tests ${SHORT_TESTS_S:-190} python3 -m pytest -v -rA -m gpu -p no:cacheprovider tests/test_gate_gpu.py tests/test_promote_gpu.py tests/test_worker_gpu.py
stage wgmma ${SHORT_RUN_S:-170} $EVO run --study wgmma --families flash_wgmma --sampler evo --trials ${SHORT_TRIALS:-12} \
  --batch ${SHORT_BATCH:-6} --time-budget ${SHORT_BUDGET:-60} --cases F1-F8 --jobs 16 --seed 1
stage lineage 30 bash -c "$EVO lineage --study wgmma; $EVO insights --study wgmma; $EVO show \$($EVO lineage --study wgmma --format json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print(max(d[\"nodes\"], key=lambda n: n.get(\"score\") or 0)[\"id\"])' 2>/dev/null || echo x)"
stage bench ${SHORT_BENCH_S:-110} $EVO bench --best 1 --cases "${SHORT_BENCH_CASES:-F1-F8}" --out "$OUT/benchmarks"
python3 -c 'import sqlite3; c=sqlite3.connect("db/evo.sqlite"); c.execute("PRAGMA wal_checkpoint(TRUNCATE)")' 2>/dev/null
cp db/evo.sqlite "$OUT/evo.sqlite" 2>/dev/null
(cd "$OUT" && tar czf /tmp/short.tgz . && find . -mindepth 1 -delete); mv /tmp/short.tgz "$OUT/"

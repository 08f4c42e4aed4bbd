#!/usr/bin/env bash
# Issue 33's two cases where evo trails FlashAttention-4 most (L3c: 512 query rows on an 8192-key
# cache, bottom-right causal, D=128; L7: cross-attention 1024 on 4096, D=64), taken apart in one call:
#   1. Nsight Compute on the stored candidate PROBE_ID against FA4 and SDPA's default (ncu_probe.py),
#      with the sections that tell pipes, stalls and the scheduler's issue rate apart;
#   2. gene variants of PROBE_ID (PROBE_VARIANTS, one line each: a name, then KEY=VALUE ...) gated and
#      timed by `evo eval` on L3 and L7, then PROBE_ID and every green variant benched against FA4
#      and SDPA's default in both clock protocols (`evo bench --id ... --clocks steady|burst`).
#
# After FlashAttention-4's two big parts are staged (../shared/device/fa4/README.md), one call:
#   carry [".whl", ".fa4/small", "db/evo.sqlite.gz"]:
#   source .fa4/small/stage.sh .fa4/small; EVO_GIT_SHA=<sha> scripts/gpu-llm-probe.sh     (~500 s)
# The default variants are the next ones to try (dev/perf-notes.md, 2026-11-28 p; built here without spills),
# on 594b392bfa05 (the best at p): SPLIT_MASK (the masked tiles peeled into a loop of their own, as FA3/4 do:
# the unmasked D=128 step 482 -> 470 instructions, 8b464f07e589), and Q from shared memory at D=128 too (FA4's
# choice there; its three-consumer D=64 and D=96 kernels read Q from shared memory already, so this changes
# the D=128 kernels alone). The earlier lists: dev/gpu-runs/2026-11-28l-h200/README.md
# (1068deb), dev/perf-notes.md (m) and dev/gpu-runs/2026-11-28m-h200/README.md (cb8d579, b229657),
# dev/gpu-runs/2026-11-28p-h200/README.md (a2f84eb, e4e18b4).
# db/evo.sqlite.gz: the database holding PROBE_ID, gzipped (`scripts/fetch-db.sh` then gzip; PROBE_DB names
# another). Knobs: PROBE_ID (594b392bfa05), PROBE_DTYPE (bf16), PROBE_CASES (L3,L7: what the variants are gated and
# timed on and the bench covers), PROBE_NCU (1; 0 skips step 1), PROBE_NCU_CASES (the cases ncu profiles; PROBE_CASES), PROBE_ROUNDS (steady benches, 1),
# PROBE_PYTEST (test files run with -m gpu at the end, none by default; PROBE_PYTEST_K: their -k filter),
# PROBE_VARIANTS=none (no variant: a second call that benches ids stored by the first, carried back as PROBE_DB),
# PROBE_IDS (more stored ids benched beside PROBE_ID), PROBE_BURST (1; 0 skips the burst bench). Back, two files (a call returns
# eight at most): $OUT/probe.tgz (ncu report and CSV, the variants' ids, the bench JSON, every log) and
# the database as $OUT/evo.sqlite.gz.
set -uo pipefail
source scripts/gpu-stages.sh
export PYTHONPATH=$PYTHONPATH:/tmp/site/nvidia_cutlass_dsl/dsl_packages   # FlashAttention-4, where staged
export EVO_HOME=/tmp/evoprobe
DBF=$EVO_HOME/db/evo.sqlite
ID=${PROBE_ID:-594b392bfa05}
DT=${PROBE_DTYPE:-bf16}
CASES=${PROBE_CASES:-L3,L7}
P=$OUT/probe
mkdir -p "$EVO_HOME/db" "$P" && gunzip -c "${PROBE_DB:-db/evo.sqlite.gz}" > "$DBF" || exit 1
env_stage
if [ "${PROBE_NCU:-1}" = 1 ]; then
  stage ncu 300 ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section InstructionStats \
    --section Occupancy --section LaunchStats -f -o "$P/ncu" python3 scripts/ncu_probe.py --id "$ID" --db "$DBF" \
    --cases "${PROBE_NCU_CASES:-$CASES}" --dtype "$DT"
  stage ncu-csv 60 bash -c "ncu -i '$P/ncu.ncu-rep' --page details --csv > '$P/ncu-details.csv'"
fi
# The stored candidate's genes, so that each variant differs from it in the named genes alone.
base=$(stored_params "$DBF" "$ID") || exit 1
ids="$ID ${PROBE_IDS:-}"
while read -r name genes; do
  [ -z "$name" ] || [ "$name" = none ] && continue
  over=""; for g in $genes; do over="$over -p $g"; done
  # shellcheck disable=SC2086  # word splitting of the -p lists is the point
  stage "eval-$name" 200 $EVO eval flash_wgmma $base $over --cases "$CASES" --dtype "$DT"
  # the id evo eval names in its verdict (or, where it stopped before one, before its worker started);
  # a variant that did not pass GREEN is not benched
  vid=$(grep -oE -m1 'candidate [0-9a-f]{12}' "$OUT/eval-$name.log" | cut -d' ' -f2)
  [ -z "$vid" ] && vid=$(grep -oE -m1 '[0-9a-f]{12} sm_90a' "$OUT/eval-$name.log" | cut -d' ' -f1)
  echo "$name ${vid:-not-built} $(grep -oE -m1 '^(fast|red|[a-z_]+):' "$OUT/eval-$name.log") $genes" >> "$P/variants.txt"
  grep -q '^fast:' "$OUT/eval-$name.log" && ids="$ids $vid"
done <<< "${PROBE_VARIANTS:-split SPLIT_MASK=true
q-smem-d128 Q_IN_REGS=false Q_SMEM_WG3=false}"
idargs=""; for i in $ids; do idargs="$idargs --id $i"; done
for round in $(seq "${PROBE_ROUNDS:-1}"); do
  # shellcheck disable=SC2086
  stage "bench-steady-$round" 400 $EVO bench $idargs --cases "$CASES" --dtype "$DT" --clocks steady \
    --backends sdpa_default,fa4 --out "$P/benchmarks-$round"
done
# shellcheck disable=SC2086
[ "${PROBE_BURST:-1}" = 1 ] && stage bench-burst 300 $EVO bench $idargs --cases "$CASES" --dtype "$DT" --clocks burst \
  --backends sdpa_default,fa4 --out "$P/benchmarks-burst"
if [ -n "${PROBE_PYTEST:-}" ]; then
  # shellcheck disable=SC2086
  stage pytest-gpu 400 python3 -m pytest -q -m gpu -p no:cacheprovider ${PROBE_PYTEST_K:+-k "$PROBE_PYTEST_K"} $PROBE_PYTEST
fi
python3 -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute("PRAGMA wal_checkpoint(TRUNCATE)")' "$DBF"
gzip -c "$DBF" > "$OUT/evo.sqlite.gz"
mv "$OUT"/*.log "$P/" 2>/dev/null
tar czf "$OUT/probe.tgz" -C "$OUT" probe && rm -rf "$P"

#!/usr/bin/env bash
# One call on the GPU host: build, test, measure. Usage (from the repo root, with .whl carried):
#   scripts/gpu-check.sh STAGE [STAGE ...]
# Stages: env smoke tests throughput eval sweep:N run:N gpus:N wgmma:SECONDS bench promote seeds report
#         profile fidelity probe:CASES ncu:CASES aa:CASES save pack:NAME
# Results (logs, database, recordings, benchmark JSON) go under $OUT (default /tmp/evo-out).
# The database db/evo.sqlite is carried between calls (the host starts bare each time).
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
[ -n "${EVO_GIT_SHA:-}" ] || echo "warning: EVO_GIT_SHA unset: results will say git sha unknown (the host has no .git)"
EVO="python3 -m evo"
CASES=${EVO_CASES:-F1,F2,F3,F4,F6}      # FAST cases a search scores (both causal modes)
log() { echo; echo "=== $* ($(date +%T))"; }

for stage in "$@"; do
  name=${stage%%:*}; arg=${stage#*:}; [ "$arg" = "$stage" ] && arg=""
  case $name in
    env)
      log env
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
      python3 -c 'import torch,sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
      nvcc --version | tail -1; echo "git sha: ${EVO_GIT_SHA:-unknown (EVO_GIT_SHA unset; the host's .git is not this tree's)}"
      $EVO doctor ;;
    smoke)
      log smoke
      # each family's default through the real gate and timer (evo eval), into a scratch database
      for fam in flash_mma flash_scalar; do $EVO eval $fam --cases F1 --db /tmp/smoke.sqlite 2>&1 | tail -12; done ;;
    tests)
      log "pytest -m gpu"
      # the gate's negative controls and the worker first; EVO_TESTS_TIMEOUT caps the stage
      timeout "${EVO_TESTS_TIMEOUT:-1800}" python3 -m pytest -v -rA --durations=40 -m gpu -p no:cacheprovider --continue-on-collection-errors tests/test_gate_gpu.py \
        tests/test_promote_gpu.py tests/test_worker_gpu.py tests/test_runtime_gpu.py tests/test_evaluate.py tests \
        2>&1 | tee "$OUT/pytest-gpu.log" | grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed| red: |refusing" | tail -150 ;;
    throughput)
      log "compile throughput (${arg:-20} random candidates per family, 16 jobs)"
      EVO_CANDIDATES=/tmp/throughput-cache $EVO build flash_mma flash_scalar --random "${arg:-20}" --seed 7 --jobs 16 \
        --db sqlite:////tmp/throughput.sqlite 2>&1 | tee "$OUT/throughput.log" | tail -8 ;;
    eval)
      log "eval family defaults"
      for fam in flash_mma flash_scalar; do $EVO eval $fam 2>&1 | tee -a "$OUT/eval.log" | tail -30; done ;;
    sweep)
      log "sweep: ${arg:-100} more random trials"
      $EVO run --study sweep --sampler random --trials "${arg:-100}" --cases "$CASES" --batch 32 --jobs 16 2>&1 \
        | tee -a "$OUT/sweep.log" | tail -15 ;;
    run)
      log "evolution: ${arg:-60} trials, evo sampler"
      $EVO run --study "${EVO_STUDY:-evo-gpu}" --sampler evo --trials "${arg:-60}" --cases "$CASES" --batch 16 --jobs 16 --seed 1 2>&1 \
        | tee -a "$OUT/run.log" | tail -15
      $EVO lineage --study "${EVO_STUDY:-evo-gpu}" 2>&1 | tee "$OUT/lineage.txt" | head -60
      $EVO insights --study "${EVO_STUDY:-evo-gpu}" 2>&1 | tee "$OUT/insights.txt" | head -60 ;;
    gpus)
      # N trials with one worker process per entry of $EVO_GPUS (default 0,0: two workers on GPU 0),
      # in a fresh database and build cache, so runs with other $EVO_GPUS compare on equal terms
      study="scale-$(echo "${EVO_GPUS:-0,0}" | tr ',' '-')-$(date +%s)"
      log "scale: ${arg:-6} trials, --gpus ${EVO_GPUS:-0,0}, study $study"
      EVO_CANDIDATES="/tmp/$study-cache" $EVO run --gpus "${EVO_GPUS:-0,0}" --db "sqlite:////tmp/$study.sqlite" \
        --study "$study" --families "${EVO_FAMILIES:-flash_mma}" --trials "${arg:-6}" --batch 2 --cases F1 --seed 1 2>&1 \
        | tee -a "$OUT/scale.log" | tail -15
      python3 scripts/scale_check.py --db "sqlite:////tmp/$study.sqlite" --study "$study" 2>&1 | tee -a "$OUT/scale.log" ;;
    wgmma)
      # every fp16 FAST case and the bf16 ones issue 10's package bench measures (EVO_WGMMA_CASES);
      # EVO_START_FROM=studies (with EVO_START_TOP) seeds a new study from their best (docs/search.md);
      # EVO_SEED: the sampler seed (default 1)
      log "evolution of flash_wgmma: ${arg:-240} s, evo sampler, ${EVO_WGMMA_CASES:-F1-F8,F6-F7-bf16}"
      # no evaluation starts past the budget (one in flight finishes, up to its request timeout);
      # an interrupt 90 s after it (the run re-queues its open trials and keeps what it measured)
      # bounds the call even then
      start=(); [ -n "${EVO_START_FROM:-}" ] && start=(--start-from "$EVO_START_FROM" --start-top "${EVO_START_TOP:-8}")
      timeout -s INT -k 30 $(( ${arg:-240} + 90 )) $EVO run --study "${EVO_STUDY:-wgmma}" --families flash_wgmma "${start[@]}" \
        --sampler evo --trials 400 --time-budget "${arg:-240}" --cases "${EVO_WGMMA_CASES:-F1-F8,F6-F7-bf16}" \
        --batch "${EVO_WGMMA_BATCH:-4}" --jobs 16 --seed "${EVO_SEED:-1}" 2>&1 | tee -a "$OUT/wgmma-run.log" | tail -25
      $EVO lineage --study "${EVO_STUDY:-wgmma}" 2>&1 | tee "$OUT/wgmma-lineage.txt" | head -40
      $EVO insights --study "${EVO_STUDY:-wgmma}" 2>&1 | tee "$OUT/wgmma-insights.txt" | head -40 ;;
    bench)
      log "bench the best candidate"
      $EVO bench --best 1 --out "$OUT/benchmarks" 2>&1 | tee "$OUT/bench.log" | tail -30 ;;
    promote)
      # EVO_PROMOTE_FLAGS: promote options, default --confirm (winners timed again beside SDPA
      # before routing: the search's bucket winners read up to 10 % faster than they are);
      # the timings compared are this GPU's (EVO_PROMOTE_DEVICE), not those of whichever GPU
      # most candidates were timed on (the database may hold another card's studies)
      gpu=${EVO_PROMOTE_DEVICE:-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)}
      log "promote on '$gpu' timings ${EVO_PROMOTE_FLAGS---confirm}, install offline, package tests, bench --package"
      rm -rf /tmp/pkg /tmp/pkgsite
      $EVO promote --name evoattn --out /tmp/pkg --device "$gpu" ${EVO_PROMOTE_FLAGS---confirm} 2>&1 | tee "$OUT/promote.log" | tail -20 || { echo "promote failed"; continue; }
      python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/pkgsite /tmp/pkg/evoattn 2>&1 | tail -3
      (cd /tmp && PYTHONPATH=/tmp/pkgsite:$PYTHONPATH python3 -m pytest -q -p no:cacheprovider --pyargs evoattn.tests 2>&1 | tail -15) | tee -a "$OUT/promote.log"
      PYTHONPATH=/tmp/pkgsite:$PYTHONPATH python3 scripts/eager_overhead.py evoattn --json "$OUT/eager.json" 2>&1 | tee -a "$OUT/promote.log"
      PYTHONPATH=/tmp/pkgsite:$PYTHONPATH $EVO bench --package evoattn --out "$OUT/benchmarks" 2>&1 | tee -a "$OUT/promote.log" | tail -30
      PYTHONPATH=/tmp/pkgsite:$PYTHONPATH $EVO bench --package evoattn --dtype bf16 --cases F6,F7 --out "$OUT/benchmarks" 2>&1 | tee -a "$OUT/promote.log" | tail -12
      python3 scripts/check_package_speed.py /tmp/pkg/evoattn/evoattn/PROVENANCE.json "$OUT"/benchmarks/*-evoattn*.json 2>&1 | tee -a "$OUT/promote.log" ;;
    seeds)
      log "seed campaigns (issue 14): rows, SDPA sweep, evolution from V0"
      OUT="$OUT" scripts/seeds-gpu.sh ;;
    report)
      log "report (HTML; make the screenshot where Chromium is: evo report ... --screenshot)"
      bench=(); [ -d "$OUT/benchmarks" ] && bench=(--bench "$OUT/benchmarks")
      $EVO report --study "${EVO_STUDY:-evo-gpu}" --out "$OUT/report-gpu.html" "${bench[@]}" 2>&1 | tail -3 ;;
    profile)
      log "where one search-time evaluation spends its time (${arg:-flash_wgmma})"
      python3 scripts/profile_eval.py ${arg:-flash_wgmma} 2>&1 | tee "$OUT/profile.log" | grep -E "^===|GREEN|FAST" ;;
    fidelity)
      log "FAST vs the profiler, by clock state (${arg:-F1,F6,F8})"
      python3 scripts/fidelity_probe.py "${arg:-F1,F6,F8}" 2>&1 | tee "$OUT/fidelity.log" | tail -30 ;;
    probe)
      # flash_wgmma configurations ('|'-separated in $EVO_PROBE_CONFIGS, each K=V,K=V or default):
      # 48 checks each (12 shapes x causal x fp16/bf16), then the FAST cases (default F1-F8) against SDPA's cuDNN and flash backends
      log "probe flash_wgmma: ${EVO_PROBE_CONFIGS:-default} on ${arg:-F1-F8}"
      cfgs=(); IFS='|' read -ra parts <<< "${EVO_PROBE_CONFIGS:-default}"
      for c in "${parts[@]}"; do cfgs+=(--config "$c"); done
      python3 scripts/probe_family.py flash_wgmma "${cfgs[@]}" --time "${arg:-F1-F8}" --time-first 99 \
        --timeout 240 --json "$OUT/probe.json" 2>&1 | tee -a "$OUT/probe.log" | grep -vE '^\s+[0-9]' ;;
    aa)
      # A/A: SDPA in the candidate's slot against SDPA as the baseline (an unbiased FAST gives 1.00)
      log "A/A check of FAST on ${arg:-F4c,F5f,F6f}"
      # (after the promote stage, EVO_AA_PACKAGE=evoattn with PYTHONPATH=/tmp/pkgsite adds the package itself)
      python3 scripts/aa_probe.py "${arg:-F4c,F5f,F6f}" fp16 ${EVO_AA_PACKAGE:-} 2>&1 | tee -a "$OUT/aa.log" | tail -12 ;;
    ncu)
      # where the issue slots go: stall reasons and the hottest SASS lines of the flash_wgmma
      # configuration $EVO_NCU_CONFIG (default genes if empty) and cuDNN on the cases given
      log "ncu stalls: flash_wgmma '${EVO_NCU_CONFIG:-}' and cuDNN on ${arg:-F4f}"
      ncu --clock-control none -k 'regex:evo_attn|cudnn' -o "$OUT/stalls" \
        --section SpeedOfLight --section WarpStateStats --section SourceCounters \
        --metrics 'regex:^smsp__average_warps_issue_stalled_.+_per_issue_active\.ratio$' \
        python3 scripts/ncu_probe.py flash_wgmma "${EVO_NCU_CONFIG:-}" "${arg:-F4f}" > "$OUT/ncu-run.log" 2>&1
      ncu -i "$OUT/stalls.ncu-rep" --page details --print-details all > "$OUT/ncu-stalls.log" 2>&1
      ncu -i "$OUT/stalls.ncu-rep" --page source --csv --print-source sass -k regex:evo_attn > "$OUT/ncu-sass.csv" 2>&1
      grep -E 'evo_attn|cudnn_gen|Duration|Warp Cycles Per Issued|issue_stalled' "$OUT/ncu-stalls.log" | awk '$NF+0 > 0.1 || !/stalled/' | head -80 ;;
    save)
      log save
      python3 - <<'PY'
import sqlite3; c = sqlite3.connect("db/evo.sqlite"); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.close()
PY
      gzip -c db/evo.sqlite > "$OUT/evo.sqlite.gz"; ls -la "$OUT" ;;
    pack)
      # The device tool brings back at most 8 files: everything under $OUT goes into one archive.
      log "pack $OUT into ${arg:-results}.tgz"
      (cd "$OUT" && tar czf "/tmp/${arg:-results}.tgz" --exclude='*.tgz' . && find . -mindepth 1 -not -name '*.tgz' -delete)
      mv "/tmp/${arg:-results}.tgz" "$OUT/"; ls -la "$OUT" ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done

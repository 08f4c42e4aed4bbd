#!/usr/bin/env bash
# Issue 33's measurement on one H100: flash_wgmma searched over the LLM suite and the FAST suite with
# the rung evaluator, a package promoted from the whole database, and `evo bench --package` beside
# SDPA and FlashAttention-4. Three calls on one warm machine (the database and the package stay in
# /tmp between them), after FlashAttention-4's parts are staged (../shared/device/fa4/README.md):
#
#   carry [".whl", "db/evo.sqlite.gz", ".fa4/small"]:
#     source .fa4/small/stage.sh .fa4/small; EVO_GIT_SHA=... scripts/gpu-llm.sh search   (~560 s)
#   carry [".whl"]:  EVO_GIT_SHA=... scripts/gpu-llm.sh package   (~570 s)
#   carry [".whl"]:  EVO_GIT_SHA=... scripts/gpu-llm.sh fast      (~450 s)
#
# search: the carried database (db/evo.sqlite.gz: scripts/fetch-db.sh's, gzipped) gets study llm4 (the
#   16 LLM cases, bf16 and fp16, from llm3's best; LLM_BUDGET s) and study fast4 (the FAST suite's
#   cases the package is benched on, from fast3's best; FAST_BUDGET s); the database comes back.
# package: `evo promote --confirm` of the whole database on this GPU's timings, the package's own
#   tests, then the LLM suite benched in bf16 beside cuDNN, SDPA's default and FA4.
# fast: the LLM suite in fp16 as in package, the FAST suite benched through the same package (fp16, and F6, F7 in bf16) beside cuDNN and
#   SDPA's default, and the package's speed checked against its provenance.
# Knobs: LLM_BUDGET (240), FAST_BUDGET (100), BENCH_BACKENDS (sdpa_cudnn,sdpa_default,fa4 for the
# LLM suite: sdpa_flash is 2x behind there and sdpa_efficient refuses grouped heads).
set -uo pipefail
source scripts/gpu-stages.sh
export PYTHONPATH=$PYTHONPATH:/tmp/site/nvidia_cutlass_dsl/dsl_packages   # FlashAttention-4, where staged
export EVO_HOME=/tmp/evohome
DBF=$EVO_HOME/db/evo.sqlite
PKG=evoattn
gpu() { nvidia-smi --query-gpu=name --format=csv,noheader | head -1; }
save_db() {
  python3 -c 'import sqlite3, sys; c=sqlite3.connect(sys.argv[1]); c.execute("PRAGMA wal_checkpoint(TRUNCATE)")' "$DBF"
  gzip -c "$DBF" > "$OUT/evo.sqlite.gz"
}

bench_llm() {   # the LLM suite in one dtype through the installed package
  stage "bench-llm-$1" 150 $EVO bench --package $PKG --cases llm --dtype "$1" \
    --backends "${BENCH_BACKENDS:-sdpa_cudnn,sdpa_default,fa4}" --out "$OUT/benchmarks"
}

case ${1:-} in
  search)
    mkdir -p "$EVO_HOME/db" && gunzip -c db/evo.sqlite.gz > "$DBF" || exit 1
    stage env 30 bash -c 'nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
      python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())"
      python3 -c "from flash_attn.cute import flash_attn_func; import importlib.metadata as m; print(\"fa4\", m.version(\"flash-attn-4\"))"'
    stage llm4 $(( ${LLM_BUDGET:-240} + 80 )) $EVO run --study llm4 --families flash_wgmma --cases L1-L8,L1-L8-fp16 \
      --start-from llm3 --start-top 4 --trials 100000 --time-budget "${LLM_BUDGET:-240}" --seed 1 \
      --summary-json "$OUT/llm4.json"
    stage fast4 $(( ${FAST_BUDGET:-100} + 70 )) $EVO run --study fast4 --families flash_wgmma --cases F1-F8,F6-F7-bf16 \
      --start-from fast3 --start-top 4 --trials 100000 --time-budget "${FAST_BUDGET:-100}" --seed 1 \
      --summary-json "$OUT/fast4.json"
    for s in llm4 fast4; do
      $EVO lineage --study $s > "$OUT/lineage-$s.txt" 2>&1; $EVO insights --study $s > "$OUT/insights-$s.txt" 2>&1
    done
    save_db ;;
  package)
    [ -f "$DBF" ] || { echo "no database in $DBF: run the search call first, on the same warm machine"; exit 1; }
    stage promote 420 bash -c "rm -rf /tmp/pkg /tmp/pkgsite; $EVO promote --name $PKG --out /tmp/pkg --device '$(gpu)' --confirm \
      && python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/pkgsite /tmp/pkg/$PKG \
      && cd /tmp && PYTHONPATH=/tmp/pkgsite:\$PYTHONPATH python3 -m pytest -q -p no:cacheprovider --pyargs $PKG.tests"
    save_db
    tar czf "$OUT/$PKG-pkg.tgz" -C /tmp pkg
    export PYTHONPATH=/tmp/pkgsite:$PYTHONPATH
    bench_llm bf16 ;;
  fast)
    [ -d /tmp/pkgsite ] || { echo "no package in /tmp/pkgsite: run the package call first, on the same warm machine"; exit 1; }
    export PYTHONPATH=/tmp/pkgsite:$PYTHONPATH
    bench_llm fp16
    stage bench-fast-fp16 200 $EVO bench --package $PKG --backends sdpa_cudnn,sdpa_default --out "$OUT/benchmarks"
    stage bench-fast-bf16 90 $EVO bench --package $PKG --dtype bf16 --cases F6,F7 --backends sdpa_cudnn,sdpa_default \
      --out "$OUT/benchmarks"
    stage check-speed 60 python3 scripts/check_package_speed.py /tmp/pkg/$PKG/$PKG/PROVENANCE.json "$OUT"/benchmarks/*.json ;;
  *) echo "usage: scripts/gpu-llm.sh search|package|fast"; exit 2 ;;
esac

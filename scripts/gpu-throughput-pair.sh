#!/usr/bin/env bash
# Issue 35 on one host of 3 or 4 GPUs: two `evo run`s of scripts/gpu-throughput.sh at once on the
# same seed, arm A with its defaults and arm B with PAIR_FLAGS_B (e.g. --prune-bar incumbent), each
# on a GPU of its own and pinned to 16 CPUs of its own (taskset: a one-GPU machine's 16 cores, which
# the build's nvcc count follows, evo.toolchain.build.cpus), with its own database and build cache;
# beside them `pytest -m "gpu and not quiet"` on the third GPU and, on a fourth,
# `scripts/profile_eval.py --prime`. Two calls on one warm machine (what they share stays in
# /tmp/tp-pair while it is warm):
#
#   1. carry [".whl"]: EVO_GIT_SHA=... PAIR_FLAGS_B="--prune-bar incumbent" scripts/gpu-throughput-pair.sh run
#      (TP_BUDGET 560 s each, no check; about 590 s)
#   2. carry [".whl"]: EVO_GIT_SHA=... scripts/gpu-throughput-pair.sh check   (TP_CHECK_S 150 s each)
#
# Out: $OUT/A-<phase>.tgz and $OUT/B-<phase>.tgz (each arm's logs, run.json, throughput.json where
# checked, its database gzipped), $OUT/pytest-gpu.log and $OUT/profile-prime.log (phase run): the
# device tool brings back at most 8 files. The arms share the host's memory, PCIe and power
# supply; each GPU's own power limit and clocks are its own.
set -uo pipefail
source scripts/gpu-stages.sh
KEEP=/tmp/tp-pair
phase=${1:-}
case $phase in run|check) ;; *) echo "usage: scripts/gpu-throughput-pair.sh run|check"; exit 2 ;; esac

arm() {  # arm NAME GPU CPUS FLAGS: one gpu-throughput.sh of this phase, its output tarred into $OUT
  local name=$1 gpu=$2 cpus=$3 flags=$4 out=$KEEP/$1/$phase
  mkdir -p "$out"
  if [ "$phase" = run ]; then
    OUT=$out EVO_HOME=$KEEP/$name/home CUDA_VISIBLE_DEVICES=$gpu TP_FLAGS=$flags TP_BUDGET=${TP_BUDGET:-560} \
      TP_CHECK_S=0 taskset -c "$cpus" scripts/gpu-throughput.sh > "$out/script.log" 2>&1
    cp "$out/run.json" "$KEEP/$name/run.json" 2>/dev/null
  else
    OUT=$out EVO_HOME=$KEEP/$name/home CUDA_VISIBLE_DEVICES=$gpu TP_BUDGET=0 TP_CHECK_S=${TP_CHECK_S:-150} \
      TP_SUMMARY=$KEEP/$name/run.json taskset -c "$cpus" scripts/gpu-throughput.sh > "$out/script.log" 2>&1
  fi
  tar czf "$OUT/$name-$phase.tgz" -C "$out" .
}

if [ "$phase" = run ] && [ -d "$KEEP" ]; then echo "this machine already ran phase run ($KEEP)"; exit 1; fi
if [ "$phase" = check ] && [ ! -d "$KEEP" ]; then echo "no phase run on this machine ($KEEP): it was given back"; exit 1; fi
arm A 0 0-15 "" &
arm B 1 16-31 "${PAIR_FLAGS_B:---prune-bar incumbent}" &
if [ "$phase" = run ]; then
  CUDA_VISIBLE_DEVICES=2 stage pytest-gpu 560 taskset -c 32-47 python3 -m pytest -m "gpu and not quiet" -n 12 -q \
    -p no:cacheprovider &
  [ "$(nvidia-smi -L | wc -l)" -ge 4 ] && CUDA_VISIBLE_DEVICES=3 stage profile-prime 200 taskset -c 48-63 \
    python3 scripts/profile_eval.py --prime &
fi
wait

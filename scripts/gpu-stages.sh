# Sourced by the time-boxed GPU scripts (gpu-short.sh, gpu-decode.sh, gpu-llm.sh): the carried wheels installed,
# the environment set, stage(), which runs one command under its own time limit, stored_params(), env_stage() and bundle().
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
# once per script tree: scripts that another sourced this for (gpu-throughput-pair.sh's arms) must not reinstall the
# wheels under a process that is importing them (a concurrent --upgrade left sqlalchemy half-written for one)
if [ -z "${EVO_WHEELS_READY:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export EVO_WHEELS_READY=1
fi
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1  # keeps a staged FlashAttention-4's paths
EVO="python3 -m evo"

# stage NAME SECONDS COMMAND...: COMMAND's output to $OUT/NAME.log, a hang aborted with Python's
# faulthandler traceback, the worker processes it left killed (its process group alone); the summary line to $OUT/summary.log and the
# log's last $TAIL lines (25) to the terminal.
stage() {
  local name=$1 limit=$2; shift 2
  echo "=== $name (limit ${limit}s, $(date +%T)${EVO_GIT_SHA:+, git $EVO_GIT_SHA})" | tee -a "$OUT/summary.log"
  local t0; t0=$(date +%s)
  timeout -s ABRT -k 10 "$limit" "$@" > "$OUT/$name.log" 2>&1 &
  local pid=$!
  wait "$pid"
  local rc=$?
  kill -9 -- "-$pid" 2>/dev/null   # what it left running (its GPU workers): timeout leads a process group of its own,
                                   # so stages run at once (scripts/gpu-throughput-pair.sh) never end each other's
  echo "--- $name rc=$rc in $(( $(date +%s) - t0 ))s" | tee -a "$OUT/summary.log"
  tail -"${TAIL:-25}" "$OUT/$name.log"
}

# stored_params DB ID: the genes of the stored candidate ID (an id prefix) in the SQLite file DB, as
# evo's -p KEY=VALUE options, so that a variant built from them differs in the genes named after them alone
stored_params() {
  python3 -c "
import json, sqlite3, sys
row = sqlite3.connect(sys.argv[1]).execute('select params from evo_candidates where id like ?', (sys.argv[2] + '%',)).fetchone()
print(' '.join(f'-p {k}={v}' for k, v in json.loads(row[0]).items()))" "$1" "$2"
}

# env_stage: the GPU, its clocks and power limit, torch, CUDA and cuDNN, and FlashAttention-4's version where
# staged, into $OUT/env.log (the facts a benchmark's numbers are read against)
env_stage() {
  stage env 30 bash -c 'nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
    python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())"
    python3 -c "from flash_attn.cute import flash_attn_func; import importlib.metadata as m; print(\"fa4\", m.version(\"flash-attn-4\"))"'
}

# bundle NAME: the call's files under $OUT, less databases (*.sqlite.gz) and archives (*.tgz), moved into
# $OUT/NAME.tgz: the device returns at most 8 files a call (2026-11-28q lost llm5.json and its log so)
bundle() {
  (cd "$OUT" && find . -type f ! -name '*.sqlite.gz' ! -name '*.tgz' -print0 | sort -z \
    | tar czf "$1.tgz" --null -T - --remove-files && find . -mindepth 1 -type d -empty -delete)
}

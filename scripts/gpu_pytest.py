"""`pytest -m gpu` in shards, so that the whole GPU suite fits the device's 600 s calls.

Usage (on the GPU machine, from the repo root, PYTHONPATH set as scripts/gpu-stages.sh sets it):
    python3 scripts/gpu_pytest.py [--shards N] [--shard K] [--out DIR] [--timeout S]

The suite took 570 s and more on one H200 at 2026-11-28q, past what one call allows beside anything
else. The GPU tests are collected, their files dealt into N shards (largest first, each to the shard
with the fewest tests so far: a file's tests share its module fixtures, so a file is never split),
and then either shard K alone runs (one call per shard on a one-GPU machine), or every shard runs at
once, each pinned to its own GPU with CUDA_VISIBLE_DEVICES (N GPUs). Each shard writes
``pytest-gpu-K.log`` (``-rA``: a line per test) and ``pytest-gpu-K.xml`` (JUnit) under ``--out``, and
the script prints each shard's summary line; it exits 1 if any shard failed or was stopped.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

PYTEST = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "--continue-on-collection-errors"]


def shard_files(node_ids: Sequence[str], shards: int) -> list[list[str]]:
    """The test files of ``node_ids`` dealt into ``shards`` lists: files by decreasing test count
    (then name), each to the shard with the fewest tests so far (then the lowest index); every file
    in exactly one shard, the same split for the same ids."""
    if shards < 1:
        raise ValueError("shards must be at least 1")
    counts = Counter(n.split("::", 1)[0] for n in node_ids)
    out: list[list[str]] = [[] for _ in range(shards)]
    load = [0] * shards
    for name, n in sorted(counts.items(), key=lambda fc: (-fc[1], fc[0])):
        k = min(range(shards), key=lambda i: (load[i], i))
        out[k].append(name)
        load[k] += n
    return out


def collect(tests: str) -> list[str]:
    """The node ids of the GPU tests under ``tests`` (collection errors of modules whose imports
    this machine lacks are left to the shards' own runs)."""
    done = subprocess.run([*PYTEST, "--collect-only", "-q", tests], capture_output=True, text=True, check=False)
    return [line.strip() for line in done.stdout.splitlines() if "::" in line]


def command(files: Sequence[str], out: Path, k: int) -> list[str]:
    """Shard ``k``'s pytest command line over ``files``."""
    return [*PYTEST, "-rA", "--durations=15", f"--junitxml={out / f'pytest-gpu-{k}.xml'}", *files]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=0, help="how many shards (default: one per visible GPU)")
    ap.add_argument("--shard", type=int, default=0, help="run shard K (1-based) alone; default: all at once")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/evo-out")))
    ap.add_argument("--timeout", type=float, default=560.0, help="seconds each shard may run")
    ap.add_argument("--tests", default="tests")
    args = ap.parse_args()
    import torch

    gpus = torch.cuda.device_count()
    shards = args.shards or max(gpus, 1)
    if not 0 <= args.shard <= shards:
        print(f"gpu_pytest: --shard {args.shard} is not one of 1..{shards}", file=sys.stderr)
        return 2
    if args.shard == 0 and shards > max(gpus, 1):
        print(f"gpu_pytest: {shards} shards at once need {shards} GPUs, and {gpus} are visible: "
              "run them one at a time with --shard K", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    split = shard_files(collect(args.tests), shards)
    chosen = [args.shard] if args.shard else list(range(1, shards + 1))
    running = []
    for k in chosen:
        env = dict(os.environ)
        if not args.shard:
            env["CUDA_VISIBLE_DEVICES"] = str(k - 1)
        log = (args.out / f"pytest-gpu-{k}.log").open("w")
        print(f"shard {k} of {shards}: {' '.join(split[k - 1])}", file=log, flush=True)
        running.append((k, log, subprocess.Popen(command(split[k - 1], args.out, k), env=env, stdout=log,
                                                 stderr=subprocess.STDOUT)))
    failed = False
    for k, log, proc in running:
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
            print(f"shard {k}: stopped at its {args.timeout:.0f} s limit", file=log, flush=True)
        log.close()
        lines = (args.out / f"pytest-gpu-{k}.log").read_text().splitlines()
        print(f"shard {k} (rc {rc}): {lines[-1] if lines else 'no output'}")
        failed |= rc != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""`pytest -m gpu` spread over the visible GPUs, file by file, so that the whole GPU suite fits the
device's 600 s calls.

Usage (on the GPU machine, from the repo root, PYTHONPATH set as scripts/gpu-stages.sh sets it):
    python3 scripts/gpu_pytest.py [--lanes N] [--shards N --shard K] [--done DIR] [--out DIR] [--timeout S]

The suite took 570 s and more on one H200 at 2026-11-28q, past what one call allows beside anything
else. The GPU tests are collected and their files (a file's tests share its module fixtures, so a file
is never split) put in one queue, most tests first. Each lane, one per visible GPU and pinned to it
with CUDA_VISIBLE_DEVICES, takes the next file as soon as its last one ends, so the lanes finish
together whatever each file costs. (At 2026-11-28r two shards dealt by test count ran 110 s and past
345 s on an x2 machine: a head-dims test compiles kernels, a gate test does not.)

On a one-GPU machine, where the suite needs two calls (about 620 s on one H200), the first call runs the
queue until its ``--timeout`` and the second, given the first's output folder as ``--done``, runs only
the files that have no JUnit file there (the one stopped at the limit starts again, whole) and reports
the totals of both calls. ``--shards N --shard K`` instead runs only the files of shard K of a fixed
split (largest first, each to the shard with the fewest tests so far), the same split in every call:
test count is a poor proxy for time, so the halves can differ several fold. Each file writes its
JUnit XML under ``--out``/junit; each lane appends its files' output (``-rA``: a line per test) to
``pytest-gpu-<lane>.log``. At ``--timeout`` seconds a running file is stopped and no other starts.
The script prints a line per file and the totals; it exits 1 if a test failed or erred, or a file
was stopped or never started.
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

PYTEST = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "--continue-on-collection-errors"]
COUNTS = ("tests", "failures", "errors", "skipped")


def test_counts(node_ids: Sequence[str]) -> Counter[str]:
    """Tests per file of ``node_ids``."""
    return Counter(n.split("::", 1)[0] for n in node_ids)


def queue_order(node_ids: Sequence[str]) -> list[str]:
    """The test files of ``node_ids``, most tests first (then by name): the order lanes take them in."""
    return [name for name, _ in sorted(test_counts(node_ids).items(), key=lambda fc: (-fc[1], fc[0]))]


def shard_files(node_ids: Sequence[str], shards: int) -> list[list[str]]:
    """The test files of ``node_ids`` dealt into ``shards`` lists: in queue order, each to the shard
    with the fewest tests so far (then the lowest index); every file in exactly one shard, the same
    split for the same ids."""
    if shards < 1:
        raise ValueError("shards must be at least 1")
    counts = test_counts(node_ids)
    out: list[list[str]] = [[] for _ in range(shards)]
    load = [0] * shards
    for name in queue_order(node_ids):
        k = min(range(shards), key=lambda i: (load[i], i))
        out[k].append(name)
        load[k] += counts[name]
    return out


def collect(tests: str) -> list[str]:
    """The node ids of the GPU tests under ``tests`` (collection errors of modules whose imports
    this machine lacks are left to the files' own runs)."""
    done = subprocess.run([*PYTEST, "--collect-only", "-q", tests], capture_output=True, text=True, check=False)
    return [line.strip() for line in done.stdout.splitlines() if "::" in line]


def junit_path(out: Path, test_file: str) -> Path:
    """Where ``test_file``'s JUnit XML goes under ``out``."""
    return out / "junit" / (Path(test_file).stem + ".xml")


def command(test_file: str, out: Path) -> list[str]:
    """The pytest command line of one file: a line per test, the slowest ones, a JUnit file."""
    return [*PYTEST, "-rA", "--durations=10", f"--junitxml={junit_path(out, test_file)}", test_file]


def counts_text(c: Counter[str]) -> str:
    """``N passed, N failed, N errors, N skipped`` of JUnit counts (passed: the tests none of the others)."""
    passed = c["tests"] - c["failures"] - c["errors"] - c["skipped"]
    return f"{passed} passed, {c['failures']} failed, {c['errors']} errors, {c['skipped']} skipped"


def junit_suites(path: Path) -> list[ET.Element]:
    """The testsuite elements of one JUnit file (the root itself when it is one)."""
    return list(ET.parse(path).getroot().iter("testsuite"))


def suite_totals(suites: Sequence[ET.Element]) -> Counter[str]:
    """tests, failures, errors and skipped summed over ``suites``."""
    return Counter({k: sum(int(s.get(k, 0)) for s in suites) for k in COUNTS})


def junit_totals(path: Path) -> Counter[str]:
    """tests, failures, errors and skipped summed over the suites of one JUnit file."""
    return suite_totals(junit_suites(path))


@dataclass
class FileRun:
    """What became of one test file: its lane (0: run by an earlier call), its seconds, its counts,
    or why it has none."""

    name: str
    lane: int
    seconds: float
    counts: Counter[str] = field(default_factory=Counter)
    problem: str = ""      # "stopped at the limit", "no JUnit file (rc N)", or "" when it ran out

    def line(self) -> str:
        where = f"lane {self.lane}" if self.lane else "an earlier call"
        return f"{self.name} ({where}, {self.seconds:.0f} s): {self.problem or counts_text(self.counts)}"


def earlier_runs(done: Path, files: Sequence[str], out: Path) -> list[FileRun]:
    """The files of ``files`` that an earlier call ran out (a JUnit file under ``done``/junit), each as
    a FileRun of lane 0 with its counts and seconds; their JUnit files are copied under ``out``/junit so
    that one folder holds the whole suite's."""
    runs = []
    (out / "junit").mkdir(parents=True, exist_ok=True)
    for f in files:
        xml = junit_path(done, f)
        if not xml.is_file():
            continue
        suites = junit_suites(xml)
        runs.append(FileRun(f, 0, sum(float(s.get("time", 0)) for s in suites), suite_totals(suites)))
        if junit_path(out, f).resolve() != xml.resolve():
            shutil.copyfile(xml, junit_path(out, f))
    return runs


def run_file(test_file: str, lane: int, gpu: str | None, out: Path, log: IO[str], deadline: float) -> FileRun:
    """Run one file on one lane until it ends or ``deadline`` (time.monotonic) passes."""
    env = dict(os.environ)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    print(f"=== {test_file} (lane {lane}{'' if gpu is None else f', GPU {gpu}'})", file=log, flush=True)
    start = time.monotonic()
    proc = subprocess.Popen(command(test_file, out), env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        rc = proc.wait(timeout=max(deadline - start, 0.0))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        print(f"=== {test_file}: stopped at the limit", file=log, flush=True)
        return FileRun(test_file, lane, time.monotonic() - start, problem="stopped at the limit")
    seconds = time.monotonic() - start
    xml = junit_path(out, test_file)
    if not xml.is_file():
        return FileRun(test_file, lane, seconds, problem=f"no JUnit file (rc {rc})")
    return FileRun(test_file, lane, seconds, junit_totals(xml))


def run_lanes(files: Sequence[str], gpus: Sequence[str | None], out: Path, timeout: float) -> tuple[list[FileRun], list[str]]:
    """Every file of ``files`` run by the first free lane (one lane per entry of ``gpus``) until
    ``timeout`` seconds have passed; the runs in the order they ended, and the files never started."""
    (out / "junit").mkdir(parents=True, exist_ok=True)
    todo: queue.Queue[str] = queue.Queue()
    for f in files:
        todo.put(f)
    deadline = time.monotonic() + timeout
    done: list[FileRun] = []
    lock = threading.Lock()

    def lane(k: int, gpu: str | None) -> None:
        with (out / f"pytest-gpu-{k}.log").open("a") as log:
            while time.monotonic() < deadline:
                try:
                    f = todo.get_nowait()
                except queue.Empty:
                    return
                run = run_file(f, k, gpu, out, log, deadline)
                with lock:
                    done.append(run)

    threads = [threading.Thread(target=lane, args=(k, gpu)) for k, gpu in enumerate(gpus, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    left: list[str] = []
    while not todo.empty():
        left.append(todo.get_nowait())
    return done, left


def report(done: Sequence[FileRun], left: Sequence[str]) -> tuple[str, bool]:
    """The totals line, and whether everything ran and passed."""
    total = sum((r.counts for r in done), Counter())
    stopped = [r.name for r in done if r.problem]
    line = f"{counts_text(total)} in {len(done) - len(stopped)} files"
    if stopped:
        line += f"; stopped or without results: {' '.join(stopped)}"
    if left:
        line += f"; never started: {' '.join(left)}"
    ok = not stopped and not left and total["failures"] == 0 and total["errors"] == 0
    return line, ok


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lanes", type=int, default=0, help="files run at once, one per GPU (default: every visible GPU)")
    ap.add_argument("--shards", type=int, default=1, help="a fixed split of the files, for --shard")
    ap.add_argument("--shard", type=int, default=0, help="run only shard K (1-based) of --shards")
    ap.add_argument("--done", type=Path, help="an earlier call's --out: its files with a JUnit file are not run again")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/evo-out")))
    ap.add_argument("--timeout", type=float, default=560.0, help="seconds the whole run may take")
    ap.add_argument("--tests", default="tests")
    args = ap.parse_args()
    import torch

    gpus = torch.cuda.device_count()
    lanes = args.lanes or max(gpus, 1)
    if not 0 <= args.shard <= args.shards or (args.shards > 1 and args.shard == 0):
        print(f"gpu_pytest: --shard {args.shard} is not one of 1..{args.shards}", file=sys.stderr)
        return 2
    if lanes > max(gpus, 1):
        print(f"gpu_pytest: {lanes} lanes need {lanes} GPUs, and {gpus} are visible", file=sys.stderr)
        return 2
    ids = collect(args.tests)
    files = shard_files(ids, args.shards)[args.shard - 1] if args.shard else queue_order(ids)
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    pins: list[str | None] = [(visible[i] if visible else str(i)) for i in range(lanes)] if lanes > 1 else [None]
    args.out.mkdir(parents=True, exist_ok=True)
    earlier = earlier_runs(args.done, files, args.out) if args.done else []
    files = [f for f in files if f not in {r.name for r in earlier}]
    done, left = run_lanes(files, pins, args.out, args.timeout)
    done = earlier + done
    for r in done:
        print(r.line())
    line, ok = report(done, left)
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

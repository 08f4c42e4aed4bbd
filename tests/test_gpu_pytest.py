"""scripts/gpu_pytest.py deals the GPU test files into shards: whole files, every file once, balanced."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("gpu_pytest", Path(__file__).resolve().parents[1] / "scripts" / "gpu_pytest.py")
assert SPEC and SPEC.loader
SHARDS = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(SHARDS)


def _ids(counts: dict[str, int]) -> list[str]:
    return [f"tests/{name}::test_{i}" for name, n in counts.items() for i in range(n)]


def test_files_are_dealt_whole_largest_first_to_the_lightest_shard() -> None:
    ids = _ids({"test_gate_gpu.py": 60, "test_head_dims_gpu.py": 50, "test_worker_gpu.py": 4,
                "test_decode_gpu.py": 30, "test_runtime_gpu.py": 25})
    split = SHARDS.shard_files(ids, 2)
    assert split == [["tests/test_gate_gpu.py", "tests/test_runtime_gpu.py"],                 # 85 tests
                     ["tests/test_head_dims_gpu.py", "tests/test_decode_gpu.py", "tests/test_worker_gpu.py"]]  # 84
    assert sorted(f for s in split for f in s) == sorted({i.split("::")[0] for i in ids})   # each file once
    assert SHARDS.shard_files(list(reversed(ids)), 2) == split                                # order-free


def test_one_shard_holds_every_file_and_more_shards_than_files_leave_some_empty() -> None:
    ids = _ids({"a.py": 2, "b.py": 1})
    assert SHARDS.shard_files(ids, 1) == [["tests/a.py", "tests/b.py"]]
    assert SHARDS.shard_files(ids, 3) == [["tests/a.py"], ["tests/b.py"], []]


def test_a_shard_runs_its_files_with_a_line_per_test_and_a_junit_file(tmp_path: Path) -> None:
    cmd = SHARDS.command(["tests/a.py"], tmp_path, 2)
    assert cmd[-1] == "tests/a.py" and "-rA" in cmd and f"--junitxml={tmp_path / 'pytest-gpu-2.xml'}" in cmd
    assert cmd[cmd.index("-m", 3) + 1] == "gpu"

"""scripts/gpu_pytest.py: the GPU test files run whole, most tests first, by whichever lane is free
(or dealt into fixed shards for a one-GPU machine), with every file's counts read back from JUnit and
a stopped or never-started file reported as such."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("gpu_pytest", Path(__file__).resolve().parents[1] / "scripts" / "gpu_pytest.py")
assert SPEC and SPEC.loader
SHARDS = importlib.util.module_from_spec(SPEC)
sys.modules.setdefault("gpu_pytest", SHARDS)   # its dataclasses look their module up
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


def test_a_file_runs_with_a_line_per_test_and_a_junit_file_of_its_own(tmp_path: Path) -> None:
    cmd = SHARDS.command("tests/test_a.py", tmp_path)
    assert cmd[-1] == "tests/test_a.py" and "-rA" in cmd
    assert f"--junitxml={tmp_path / 'junit' / 'test_a.xml'}" in cmd
    assert cmd[cmd.index("-m", 3) + 1] == "gpu"
    assert SHARDS.queue_order(_ids({"b.py": 1, "a.py": 1, "c.py": 3})) == ["tests/c.py", "tests/a.py", "tests/b.py"]


def _write(path: Path, body: str) -> str:
    path.write_text("import time\nimport pytest\npytestmark = pytest.mark.gpu\n" + body)
    return str(path)


def test_lanes_take_the_next_file_and_the_totals_come_from_each_files_junit(tmp_path: Path) -> None:
    """Three files on two lanes: every file runs once, and the report counts what JUnit says,
    a failure included, so it is not ok."""
    files = [_write(tmp_path / "test_one.py", "def test_a():\n    pass\ndef test_b():\n    pytest.skip('x')\n"),
             _write(tmp_path / "test_two.py", "def test_c():\n    assert 1 == 2\n"),
             _write(tmp_path / "test_three.py", "def test_d():\n    pass\n")]
    out = tmp_path / "out"
    done, left = SHARDS.run_lanes(files, [None, None], out, timeout=120)
    assert sorted(r.name for r in done) == sorted(files) and left == []
    assert {r.lane for r in done} <= {1, 2}
    line, ok = SHARDS.report(done, left)
    assert line.startswith("2 passed, 1 failed, 0 errors, 1 skipped in 3 files"), line
    assert not ok
    logs = (out / "pytest-gpu-1.log").read_text() + (out / "pytest-gpu-2.log").read_text()
    assert all(f"=== {f}" in logs for f in files)


def test_a_file_past_the_limit_is_stopped_and_the_rest_never_start(tmp_path: Path) -> None:
    slow = _write(tmp_path / "test_slow.py", "def test_s():\n    time.sleep(60)\n")
    later = _write(tmp_path / "test_later.py", "def test_l():\n    pass\n")
    done, left = SHARDS.run_lanes([slow, later], [None], tmp_path / "out", timeout=8)
    assert [(r.name, r.problem) for r in done] == [(slow, "stopped at the limit")] and left == [later]
    line, ok = SHARDS.report(done, left)
    assert f"stopped or without results: {slow}" in line and f"never started: {later}" in line and not ok


def test_junit_totals_sum_every_suite(tmp_path: Path) -> None:
    xml = tmp_path / "r.xml"
    xml.write_text('<testsuites><testsuite tests="5" failures="1" errors="0" skipped="2"/>'
                   '<testsuite tests="3" failures="0" errors="1" skipped="0"/></testsuites>')
    assert SHARDS.junit_totals(xml) == {"tests": 8, "failures": 1, "errors": 1, "skipped": 2}


def test_a_second_call_runs_only_what_the_first_did_not_finish_and_reports_both(tmp_path: Path) -> None:
    """The first call stops inside its slow file; the second, given the first's folder, skips the
    file that has a JUnit file there, runs the stopped one again and the never-started one, and
    its totals hold all three files."""
    quick = _write(tmp_path / "test_quick.py", "def test_q():\n    pass\ndef test_r():\n    pass\n")
    flag = tmp_path / "second"
    slow = _write(tmp_path / "test_slow.py", f"import os\ndef test_s():\n    if not os.path.exists({str(flag)!r}):\n"
                                              "        time.sleep(60)\n")
    later = _write(tmp_path / "test_later.py", "def test_l():\n    pass\n")
    first = tmp_path / "first"
    done, left = SHARDS.run_lanes([quick, slow, later], [None], first, timeout=15)
    assert [r.problem for r in done] == ["", "stopped at the limit"] and left == [later]
    flag.touch()
    second = tmp_path / "second-out"
    earlier = SHARDS.earlier_runs(first, [quick, slow, later], second)
    assert [(r.name, r.lane, r.counts["tests"]) for r in earlier] == [(quick, 0, 2)]
    assert (second / "junit" / "test_quick.xml").is_file()
    rest, left = SHARDS.run_lanes([slow, later], [None], second, timeout=60)
    line, ok = SHARDS.report(earlier + rest, left)
    assert line == "4 passed, 0 failed, 0 errors, 0 skipped in 3 files" and ok, line
    assert "an earlier call" in earlier[0].line()

"""The device scripts (scripts/*.sh) on this machine: each one parses, and a stage of
scripts/gpu-stages.sh ends what its command left running and nothing else. A broken script
costs a GPU call of the session's budget before it says so; these cost a second here."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).parents[1] / "scripts").glob("*.sh"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_device_script_parses(script: Path) -> None:
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def test_a_stage_ends_its_commands_leftovers_and_not_a_neighbours(tmp_path: Path) -> None:
    stages = Path(__file__).parents[1] / "scripts" / "gpu-stages.sh"
    left = tmp_path / "left.pid"
    neighbour = subprocess.Popen(["sleep", "60"])          # another stage's worker, say
    try:
        script = (f"cd {stages.parents[1]} && source {stages} && "
                  f"stage leftover 20 bash -c 'sleep 60 & echo $! > {left}; sleep 0.2'")
        env = os.environ | {"OUT": str(tmp_path), "EVO_WHEELS_READY": "1"}
        done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert "--- leftover rc=0" in (tmp_path / "summary.log").read_text()
        pid = int(left.read_text())
        deadline = time.monotonic() + 5
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid)
        assert neighbour.poll() is None
    finally:
        neighbour.kill()
        neighbour.wait()


def test_bundle_moves_a_calls_files_into_one_archive_and_leaves_the_database(tmp_path: Path) -> None:
    """The device returns at most 8 files a call: bundle puts the rest in one archive."""
    import tarfile

    stages = Path(__file__).parents[1] / "scripts" / "gpu-stages.sh"
    for name in ("a.log", "b.json", "benchmarks/c.json", "evo.sqlite.gz", "pkg.tgz"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    env = os.environ | {"OUT": str(tmp_path), "EVO_WHEELS_READY": "1"}
    done = subprocess.run(["bash", "-c", f"cd {stages.parents[1]} && source {stages} && bundle search"],
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evo.sqlite.gz", "pkg.tgz", "search.tgz"]
    with tarfile.open(tmp_path / "search.tgz") as tar:
        assert sorted(tar.getnames()) == ["./a.log", "./b.json", "./benchmarks/c.json"]

"""The repository stays lean: the tracked tree fits well inside what one GPU call carries (64 MiB,
with a baseline such as FlashAttention-4 beside it), and BENCHMARKS.md stays a page, not a log."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TREE_LIMIT = 15 * 1000 * 1000       # bytes of tracked files
BENCHMARKS_LINES = 400


def tracked() -> list[Path]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [REPO / name for name in out.decode().split("\0") if name]


def test_the_tracked_tree_is_under_15_mb() -> None:
    sizes = {p: p.stat().st_size for p in tracked() if p.is_file()}
    largest = sorted(sizes, key=sizes.__getitem__, reverse=True)[:5]
    assert sum(sizes.values()) < TREE_LIMIT, [f"{p.relative_to(REPO)}: {sizes[p]}" for p in largest]


def test_no_database_is_tracked() -> None:
    databases = [p for p in tracked() if ".sqlite" in p.name or p.suffix in (".db", ".sqlite3")]
    assert databases == [], "run databases stay in git history (dev/gpu-runs/DATABASES.md)"


def test_benchmarks_md_is_a_page() -> None:
    assert len((REPO / "BENCHMARKS.md").read_text().splitlines()) < BENCHMARKS_LINES

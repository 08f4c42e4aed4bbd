"""evo/vocab.py: the status subsets partition the taxonomy as the design says, each name and
formatter is defined once in evo/, and provenance names commits and GPUs one way."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evo.family import backends

from evo import vocab
from evo.results import Shape
from evo.vocab import (BUILD_FAILED, COMPILED, EVALUATED, FAILED, GATED, PASSED, WORKER_FAILED, Status,
                       assignment_text, gpu_slug, short_sha, value_text)

EVO_DIR = Path(vocab.__file__).parent


def test_subsets_follow_the_taxonomy() -> None:
    assert GATED | FAILED | {Status.BUILT} == set(Status) and not GATED & FAILED
    assert PASSED | {Status.PRUNED} == GATED and Status.PRUNED not in PASSED   # a pruned one is never shipped
    assert GATED | WORKER_FAILED | {Status.RED} == EVALUATED
    assert BUILD_FAILED | WORKER_FAILED | {Status.RED, Status.INVALID} == FAILED
    assert set(Status) - {Status.INVALID, Status.COMPILE_FAILED} == COMPILED
    assert [s for s in Status if s.failed] == [s for s in Status if s in FAILED]


def test_kernel_backends_are_the_ones_evo_can_run() -> None:
    assert set(backends.BACKENDS) == set(vocab.KERNEL_BACKENDS)
    assert vocab.DEFAULT_BASELINE in vocab.SDPA_BACKENDS and vocab.EVO not in vocab.SDPA_BACKENDS


@pytest.mark.parametrize(("value", "text"), [(True, "true"), (False, "false"), (64, "64"), ("exp2", "exp2")])
def test_values_are_written_one_way(value: object, text: str) -> None:
    assert value_text(value) == text and assignment_text("EXP2", value) == f"EXP2={text}"


@pytest.mark.parametrize(("name", "slug"), [("NVIDIA H100 80GB HBM3", "h100-80gb-hbm3"), ("NVIDIA H200", "h200"),
                                            ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("NVIDIA-A100-SXM4", "a100-sxm4"),
                                            ("", "gpu")])
def test_gpu_slug(name: str, slug: str) -> None:
    assert gpu_slug(name) == slug


def test_short_sha() -> None:
    assert short_sha("0123456789abcdef") == "0123456" and short_sha(None) == "unknown"


def test_shapes_round_trip_through_their_dict() -> None:
    s = Shape("F3", 32, 8, 128, 64, True, "bf16")
    assert Shape.from_dict(s.as_dict()) == s
    assert Shape.from_dict({k: v for k, v in s.as_dict().items() if k != "dtype"}).dtype == "fp16"


def _top_level_names(path: Path) -> set[str]:
    """Names a module binds at its top level by assignment, def or class (not by import)."""
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


def test_each_word_of_the_vocabulary_is_defined_once_in_evo() -> None:
    words = {"Status", "PASSED", "BUILD_FAILED", "WORKER_FAILED", "EVALUATED", "FAILED", "COMPILED", "EVO",
             "SDPA_BACKENDS", "KERNEL_BACKENDS", "DEFAULT_BASELINE", "value_text", "gpu_slug", "short_sha",
             "git_sha", "geomean", "shape_to_json", "shape_doc", "CANDIDATE", "BACKENDS", "BUILT", "PROMOTABLE",
             "BASELINE"}
    homes: dict[str, list[str]] = {}
    for path in sorted(EVO_DIR.rglob("*.py")):
        for name in _top_level_names(path) & words:
            homes.setdefault(name, []).append(str(path.relative_to(EVO_DIR)))
    twice = {name: where for name, where in homes.items() if len(where) > 1}
    allowed = {"BACKENDS": ["backends.py"]}  # the Backend records, keyed by vocab.KERNEL_BACKENDS
    assert {k: v for k, v in twice.items() if allowed.get(k) != v} == {}
    assert homes["git_sha"] == ["paths.py"] and homes["geomean"] == ["scoring.py"]


def _copy_of_evo(dest: Path) -> Path:
    """The package, pyproject.toml and a templates/ folder: enough for paths.source_tree()."""
    shutil.copytree(EVO_DIR, dest / "evo", ignore=shutil.ignore_patterns("__pycache__", "_resources"))
    shutil.copy(EVO_DIR.parent / "pyproject.toml", dest / "pyproject.toml")
    (dest / "templates").mkdir()
    return dest


def _sha_seen_by(tree: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "EVO_GIT_SHA"} | {"PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", "from evo import paths; print(paths.git_sha())"], cwd=tree,
                         env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _git(folder: Path, *args: str) -> str:
    ident = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", *ident, "-C", str(folder), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None or not (EVO_DIR.parent / "pyproject.toml").is_file(),
                    reason="needs git and evo imported from a checkout (not a wheel)")
def test_a_copy_inside_another_repository_has_no_sha_of_its_own(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    outer.mkdir()
    _git(outer, "init", "-q")
    copy = _copy_of_evo(outer / "copy")
    _git(outer, "add", "-A")
    _git(outer, "commit", "-qm", "outer")
    assert _sha_seen_by(copy) == "None"
    _git(copy, "init", "-q")
    _git(copy, "add", "-A")
    _git(copy, "commit", "-qm", "its own")
    assert _sha_seen_by(copy) == _git(copy, "rev-parse", "HEAD")

"""The Python-module backend (backend = "triton"): manifest, render, build cache, load, launch.

Runs on CPU with the test-only family ``pytiny`` (tests/fixtures/templates): plain torch in a
rendered module, so nothing here needs Triton or a GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from evo.family import backends
from evo.toolchain.build import build_batch, build_id_for, load_cached
from evo.errors import EvoError, LaunchRejected
from evo.gpu.gate import check_case
from evo.family.manifest import load_family, load_family_dir
from evo.gpu.pykernels import ModuleKernels
from evo.family.render import render
from evo.results import Shape, Status
from evo.gpu.kernels import load_kernels
from evo.family.space import make_candidate
from evo.gpu.suites import green_settings

FIXTURES = Path(__file__).parent / "fixtures" / "templates"


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "cache"))


def built(**params: object):
    rendered = render(make_candidate("pytiny", params))
    (result,) = build_batch([rendered], arch="sm_90a")
    return rendered, result


def test_manifest_reads_backend_successors_and_search_default() -> None:
    fam = load_family("seed_naive")
    assert (fam.backend, fam.successors, fam.search_default) == ("cuda", ("seed_online",), False)
    assert load_family("flash_mma").search_default and load_family("pytiny").backend == "triton"


@pytest.mark.parametrize("line, problem", [
    ('backend = "opencl"', "backend = 'opencl'"),
    ('successors = ["pytiny"]', "successors must be a list of other families"),
    ("successors = [3]", "successors must be a list of other families"),
])
def test_manifest_refuses_bad_backend_fields(tmp_path: Path, line: str, problem: str) -> None:
    folder = tmp_path / "pytiny"
    folder.mkdir()
    text = (FIXTURES / "pytiny" / "manifest.toml").read_text().replace('backend = "triton"', line)
    (folder / "manifest.toml").write_text(text)
    with pytest.raises(EvoError, match=problem):
        load_family_dir(folder)


def test_a_module_source_starts_with_python_comments() -> None:
    source = render(make_candidate("pytiny")).source
    assert source.startswith("# evo family=pytiny") and backends.module_problem(source) == ""


def test_build_caches_the_module_as_the_artifact() -> None:
    rendered, result = built()
    assert result.status is Status.BUILT and not result.cached
    assert Path(result.cubin_path or "").name == "kernel.py"
    assert Path(result.cubin_path or "").read_text() == rendered.source
    meta = json.loads((Path(result.cubin_path or "").parent / "meta.json").read_text())
    assert meta["artifact"] == "kernel.py" and meta["key"]["compiler"] == backends.triton_identity()
    again = load_cached(result.build_id)
    assert again is not None and again.cached and again.cubin_path == result.cubin_path


def test_the_build_id_names_the_installed_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    rendered = render(make_candidate("pytiny"))
    before = build_id_for(rendered, "sm_90a")
    monkeypatch.setattr(backends, "triton_identity", lambda: "triton 99.0; torch 9.9")
    assert build_id_for(rendered, "sm_90a") != before


@pytest.mark.parametrize("fault, status, reason", [
    ("syntax", Status.COMPILE_FAILED, "python: kernel.py:"),
    ("no_launch", Status.COMPILE_FAILED, "defines no top-level launch"),
])
def test_a_broken_module_fails_its_build(fault: str, status: Status, reason: str) -> None:
    _, result = built(FAULT=fault)
    assert result.status is status and reason in result.reason


def test_a_launch_no_gpu_can_set_up_is_resource_rejected() -> None:
    _, result = built(WARPS=64)
    assert result.status is Status.RESOURCE_REJECTED and "2048 threads" in result.reason


def test_load_kernels_picks_the_loader_by_artifact() -> None:
    rendered, result = built()
    kernels = load_kernels(result.cubin_path or "", rendered.entries, device="cpu")  # type: ignore[arg-type]
    assert isinstance(kernels, ModuleKernels)


def test_a_module_candidate_passes_green_on_cpu() -> None:
    rendered, result = built()
    kernels = ModuleKernels(result.cubin_path or "", rendered.entries, device="cpu")
    for causal in (False, True):
        check = check_case(kernels, Shape("T", 1, 2, 33, 64, causal), 0, green_settings(), device="cpu")
        assert check.passed, check.reason


def test_launch_refuses_what_the_entries_lack() -> None:
    rendered, result = built()
    kernels = ModuleKernels(result.cubin_path or "", rendered.entries, device="cpu")
    q = torch.randn(1, 1, 8, 128, dtype=torch.float16)
    with pytest.raises(EvoError, match="no kernel for D=128 fp16"):
        kernels.launch(q, q, q, torch.empty_like(q), causal=False)


def test_a_kernel_that_does_not_fit_is_launch_rejected() -> None:
    rendered, result = built(FAULT="refuse")
    kernels = ModuleKernels(result.cubin_path or "", rendered.entries, device="cpu")
    q = torch.randn(1, 1, 8, 64, dtype=torch.float16)
    with pytest.raises(LaunchRejected, match="OutOfResources: out of resource: shared memory"):
        kernels.launch(q, q, q, torch.empty_like(q), causal=False)

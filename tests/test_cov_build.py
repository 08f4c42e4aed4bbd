"""evo/toolchain/build.py's edges with stand-in tools: an nvcc that exits 0 without a cubin or without a
ptxas report, a ninja that dies before building, tools found (or not) where the docs say,
nvcc's version text, the family's arches, and which GPU picks the arch."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
from test_build import _env, tiny  # noqa: F401  (_env: the autouse fixture, the tiny family's templates and a private cache)

from evo.toolchain import build
from evo.toolchain.build import build_batch, load_cached
from evo.errors import EvoError
from evo.family.render import render
from evo.results import Status
from evo.family.space import make_candidate

LAST_TWO_ARGS = 'for a; do o=$n; n=$a; done'  # $o: the cubin nvcc is asked to write (-o FILE SOURCE)


def tool(folder: Path, name: str, body: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / name
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


@pytest.fixture
def fake_nvcc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # noqa: ANN201 - a factory
    def make(body: str) -> str:
        path = tool(tmp_path / "nvcc-bin", "nvcc", body)
        monkeypatch.setenv("EVO_NVCC", path)
        monkeypatch.setattr(build, "_nvcc_version", lambda p: ("0.0", "fake nvcc"))
        return path
    return make


def test_an_nvcc_that_succeeds_without_a_cubin_is_failed_and_not_cached(fake_nvcc) -> None:  # noqa: ANN001
    fake_nvcc("echo 'ptxas info: nothing'; exit 0")
    (result,) = build_batch([tiny()], arch="sm_90a")
    assert (result.status, result.reason) == (Status.COMPILE_FAILED, "nvcc succeeded but wrote no cubin")
    assert "ptxas info: nothing" in result.log and result.cubin_path is None
    assert load_cached(result.build_id) is None  # a retry compiles again


def test_a_cubin_without_the_ptxas_report_of_every_entry_is_failed_and_cached(fake_nvcc) -> None:  # noqa: ANN001
    fake_nvcc(f'{LAST_TWO_ARGS}; printf "\\177ELF" > "$o"; exit 0')
    item = tiny()
    (result,) = build_batch([item], arch="sm_90a")
    names = ", ".join(e.name for e in item.entries)
    assert result.status is Status.COMPILE_FAILED
    assert result.reason == f"kernel entries missing from the ptxas report: {names}"
    cached = load_cached(result.build_id)
    assert cached is not None and (cached.status, cached.reason) == (result.status, result.reason)


def test_a_ninja_that_dies_before_building_leaves_every_item_interrupted(fake_nvcc, monkeypatch: pytest.MonkeyPatch,  # noqa: ANN001
                                                                         tmp_path: Path) -> None:
    fake_nvcc("exit 0")
    tool(tmp_path / "ninja-bin", "ninja", 'echo "ninja: fatal: chdir: no such file"; echo; exit 1')
    monkeypatch.setenv("PATH", f"{tmp_path / 'ninja-bin'}:{Path(sys.executable).parent}:/usr/bin:/bin")
    results = build_batch([tiny(), tiny(ROWS=32)], arch="sm_90a")
    assert [r.reason for r in results] == ["build interrupted (ninja exited with 1: ninja: fatal: chdir: no such file)"] * 2
    assert all(r.status is Status.COMPILE_FAILED and load_cached(r.build_id) is None for r in results)
    assert not list((tmp_path / "candidates" / ".tmp").iterdir())  # the batch folder is removed


def test_nvcc_is_found_under_cuda_home_when_not_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("EVO_NVCC", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    nvcc = tool(tmp_path / "cuda" / "bin", "nvcc", "exit 0")
    assert build.nvcc_path() == nvcc
    Path(nvcc).chmod(0o644)  # there but not executable: not an nvcc
    with pytest.raises(EvoError, match="nvcc not found"):
        build.nvcc_path()


def test_ninja_is_the_python_packages_binary_when_not_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import ninja  # type: ignore[import-untyped]

    monkeypatch.setenv("PATH", str(tmp_path))
    assert build.ninja_path() == str(Path(ninja.BIN_DIR) / "ninja")
    monkeypatch.setitem(sys.modules, "ninja", None)  # not installed either
    with pytest.raises(EvoError, match="ninja not found; pip install ninja or put ninja on PATH"):
        build.ninja_path()


def test_nvccs_version_and_identity_come_from_its_version_text(tmp_path: Path) -> None:
    real = tool(tmp_path / "a", "nvcc", 'printf "nvcc: NVIDIA (R) Cuda compiler driver\\n'
                                       'Cuda compilation tools, release 13.0, V13.0.88\\n'
                                       'Build cuda_13.0.r13.0/compiler.36424714_0\\n"')
    assert build._nvcc_version(real) == ("13.0.88", "Cuda compilation tools, release 13.0, V13.0.88; "
                                                    "Build cuda_13.0.r13.0/compiler.36424714_0")
    odd = tool(tmp_path / "b", "nvcc", 'printf "some compiler\\nversion seven\\n"')
    assert build._nvcc_version(odd) == ("version seven", "some compiler; version seven")
    silent = tool(tmp_path / "c", "nvcc", "exit 0")
    assert build._nvcc_version(silent) == ("unknown", "unknown")
    broken = tmp_path / "d" / "nvcc"
    broken.parent.mkdir()
    broken.write_bytes(b"\x7fELF not a program")
    broken.chmod(0o755)
    with pytest.raises(EvoError, match=f"cannot run {broken} --version: "):
        build._nvcc_version(str(broken))


def test_a_family_is_built_only_for_the_arches_its_manifest_lists() -> None:
    with pytest.raises(EvoError, match="family flash_wgmma does not support sm_80; it supports sm_90a"):
        build_batch([render(make_candidate("flash_wgmma"))], arch="sm_80")


@pytest.mark.parametrize(("caps", "torch_major", "major"), [
    (["8.6"], None, 8),            # nvidia-smi's answer, without touching CUDA
    (["9.0", "8.0"], None, 9),     # the first GPU
    (["N/A"], None, None),         # unreadable, and torch sees no GPU
    (None, 9, 9),                  # no nvidia-smi: torch's answer
])
def test_the_gpu_major_is_nvidia_smis_else_torchs(monkeypatch: pytest.MonkeyPatch, caps: list[str] | None,
                                                  torch_major: int | None, major: int | None) -> None:
    import torch

    monkeypatch.setattr(build.smi, "query", lambda field: caps if field == "compute_cap" else None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: torch_major is not None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (torch_major, 0))
    assert build._gpu_major() == major
    assert build.default_arch() == ("sm_80" if major == 8 else "sm_90a")


def test_no_nvidia_smi_and_no_torch_is_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build.smi, "query", lambda field: None)
    monkeypatch.setitem(sys.modules, "torch", None)
    assert build._gpu_major() is None


def test_a_batch_runs_as_many_compiles_as_the_cpus_it_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 3, 5}, raising=False)
    assert build.cpus() == 3
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 7)
    assert build.cpus() == 7

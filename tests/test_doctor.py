"""evo doctor's findings on machines this one is not: GPUs of several kinds, nvidia-smi absent
or failing, cuda-python present, an unreadable database, a home that cannot be written, family
manifests that do not load and family folders shadowed by a family of the same name."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from evo import paths
from evo.errors import EvoError
from evo.family.manifest import load_family
from evo.products import doctor

BUILTIN = paths.root() / "templates"


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    caps = {0: (9, 0), 1: (12, 0)}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: caps[i])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: f"GPU{i}")
    monkeypatch.setattr(doctor.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(doctor.smi, "query", lambda what: ["580.65.06", "580.65.06"])


def test_each_gpu_is_named_with_the_arch_evo_builds_for_it(two_gpus: None) -> None:
    gpus = doctor._gpus()
    assert [g.name for g in gpus] == ["gpu 0", "gpu 1"] and all(g.ok for g in gpus)
    assert "compute 9.0 -> sm_90a" in gpus[0].detail and "driver 580.65.06" in gpus[0].detail
    assert "sm_120 (unsupported: use sm_90a/sm_80)" in gpus[1].detail


@pytest.mark.parametrize(("which", "answer", "said"), [(None, None, "nvidia-smi not found"),
                                                       ("/usr/bin/nvidia-smi", None, "nvidia-smi failed"),
                                                       ("/usr/bin/nvidia-smi", [], "reports no GPU")])
def test_the_driver_line_says_why_it_is_missing(monkeypatch: pytest.MonkeyPatch, which: str | None,
                                                answer: list[str] | None, said: str) -> None:
    monkeypatch.setattr(doctor.shutil, "which", lambda name: which)
    monkeypatch.setattr(doctor.smi, "query", lambda what: answer)
    assert said in doctor._driver()


def test_cuda_python_is_found_with_its_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor.importlib.util, "find_spec", lambda name: SimpleNamespace(name=name))
    versions = {"cuda-python": "13.0.1", "cuda-core": "1.2.0"}
    monkeypatch.setattr(doctor.importlib.metadata, "version", lambda d: versions[d])
    found = doctor._cuda_python()
    assert found.ok and found.detail == "cuda-python 13.0.1, cuda-core 1.2.0"


def test_an_unreadable_database_is_a_required_failure(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a database" * 200)
    found = doctor._database(f"sqlite:///{bad}")
    assert not found.ok and found.required and "cannot open database" in found.detail


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_a_home_that_cannot_be_written_says_to_set_evo_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    monkeypatch.setenv("EVO_HOME", str(locked / "home"))
    found = doctor._home()
    assert not found.ok and "set EVO_HOME" in found.detail


def test_a_home_is_probed_where_it_would_be_created(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVO_HOME", str(tmp_path / "not" / "yet"))
    found = doctor._home()
    assert found.ok and found.detail == str(tmp_path / "not" / "yet")


def family_folder(root: Path, name: str, manifest: str) -> Path:
    (root / name).mkdir(parents=True)
    (root / name / "manifest.toml").write_text(manifest)
    return root / name


def test_a_family_whose_manifest_does_not_load_is_a_required_failure_with_its_error(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    family_folder(tmp_path, "mine", '[family]\nname = "mine"\nversion = 1\n')
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(tmp_path))
    found = {f.name: f for f in doctor._families(True)}
    broken = found["family mine"]
    assert not broken.ok and broken.required  # evo doctor fails
    assert broken.detail == f"broken manifest: {tmp_path / 'mine' / 'manifest.toml'}: [family] lacks template"
    assert found["families"].ok and "mine" not in found["families"].detail.split(", ")
    assert "flash_mma" in found["families"].detail.split(", ")


def test_a_manifest_error_is_reported_on_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    family_folder(tmp_path, "mine", '[family]\nname = "mine"\nversion = "one"\ntemplate = "k.cu.j2"\n'
                                    '[launch]\nthreads = "32"\nrows_per_cta = "1"\nsmem_bytes = "0"\n')
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(tmp_path))
    (broken,) = [f for f in doctor._families(True) if f.name == "family mine"]
    assert "\n" not in broken.detail and "malformed manifest (ValueError: invalid literal" in broken.detail


def test_a_broken_copy_of_a_builtin_family_is_reported_and_refused_not_passed_over(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    copy = family_folder(tmp_path, "flash_scalar", "[family\n")
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(tmp_path))
    with pytest.raises(EvoError) as info:
        load_family("flash_scalar")
    said = str(info.value)
    assert f"cannot read manifest {copy / 'manifest.toml'}" in said
    assert f"shadowed by {BUILTIN / 'flash_scalar'}" in said and "\n" not in said
    (broken,) = [f for f in doctor._families(True) if f.name == "family flash_scalar"]
    assert not broken.ok and broken.required and broken.detail == "broken manifest: " + said


def test_a_working_copy_of_a_builtin_family_is_said_to_be_shadowed(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    copy = tmp_path / "flash_scalar"
    copy.mkdir()
    (copy / "manifest.toml").write_text((BUILTIN / "flash_scalar" / "manifest.toml").read_text())
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(tmp_path))
    assert load_family("flash_scalar").path == BUILTIN / "flash_scalar"  # the first on the path is used
    (note,) = [f for f in doctor._families(True) if f.name == "family flash_scalar"]
    assert not note.ok and not note.required  # said, without failing the check
    assert note.detail == f"{copy} is shadowed by {BUILTIN / 'flash_scalar'}, which is used instead"

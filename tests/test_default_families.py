"""Which families `evo run` searches when ``--families`` names none: by arch, less the superseded."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evo.errors import EvoError
from evo.family.manifest import default_families, load_family, load_family_dir


def test_on_hopper_flash_wgmma_supersedes_flash_mma() -> None:
    assert load_family("flash_mma").superseded_by == ("flash_wgmma",)
    assert default_families("sm_90a") == ["flash_wgmma"]


def test_on_ampere_flash_mma_is_searched_and_a_hopper_only_family_is_not() -> None:
    chosen = default_families("sm_80")
    assert chosen == ["flash_mma"]
    assert "sm_80" not in load_family("flash_wgmma").arches


def test_opt_in_families_stay_out_on_every_arch() -> None:
    for arch in ("sm_80", "sm_90a"):
        assert not {"seed_naive", "flash_scalar", "flash_decode", "triton_flash"} & set(default_families(arch))


@pytest.mark.parametrize("value", ['["flash_mma"]', '"flash_wgmma"', "[3]"])
def test_a_manifest_refuses_a_bad_superseded_by(tmp_path: Path, value: str) -> None:
    folder = tmp_path / "flash_mma"
    shutil.copytree(load_family("flash_mma").path, folder)
    text = (folder / "manifest.toml").read_text()
    (folder / "manifest.toml").write_text(text.replace('superseded_by = ["flash_wgmma"]', f"superseded_by = {value}"))
    with pytest.raises(EvoError, match="superseded_by must be a list of other families"):
        load_family_dir(folder)

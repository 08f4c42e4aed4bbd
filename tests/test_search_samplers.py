"""``--sampler`` names."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from evo.cli import main
from evo.errors import EvoError
from evo.family.manifest import load_family
from evo.search.sampler_evo import EvoSampler
from evo.search.sampler_gp import GpSampler
from evo.search.samplers import SAMPLERS, make_sampler
from synthetic_sweep import make_recording


def test_every_name_builds_a_sampler_and_evo_is_the_evolutionary_one() -> None:
    fams = [load_family("flash_scalar")]
    for name in SAMPLERS:
        assert make_sampler(name, fams, 0) is not None
    evo = make_sampler("evo", fams, 0)
    assert isinstance(evo, EvoSampler) and evo.warm is True
    gp = make_sampler("evo-gp", fams, 0, warm=False)
    assert isinstance(gp, GpSampler) and gp.warm is False
    assert make_sampler("evo", fams, 0, warm=False).warm is False  # type: ignore[attr-defined]


def test_an_unknown_name_is_refused() -> None:
    with pytest.raises(EvoError, match="unknown sampler"):
        make_sampler("annealing", [load_family("flash_scalar")])


def test_evo_gp_without_scikit_learn_is_one_line_before_any_database_is_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn now raises ImportError
    with pytest.raises(EvoError, match=r"needs scikit-learn: pip install 'evo-kernels\[gp\]'"):
        make_sampler("evo-gp", [load_family("flash_scalar")])
    rec = make_recording(tmp_path / "sweep-synthetic.json.gz", seed=1)
    db = tmp_path / "evo.sqlite"
    assert main(["run", "--sampler", "evo-gp", "--replay", str(rec), "--db", str(db), "--trials", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evo: error: the evo-gp sampler needs scikit-learn") and err.count("\n") == 1
    assert not db.exists()


def test_optunas_gp_without_scipy_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "scipy", None)
    with pytest.raises(EvoError, match=r"needs scipy: pip install 'evo-kernels\[gp\]'"):
        make_sampler("gp", [load_family("flash_scalar")])

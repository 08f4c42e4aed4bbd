"""flash_wgmma's Q_IN_REGS and LAZY_D64 / LAZY_D128 genes: what the manifest admits and what
the compiled kernels contain.

Q_IN_REGS holds Q as wgmma A-operand registers (ldmatrix once per tile), so S = Q K^T reads only K
from shared memory; at D=128 with BLOCK_N 128 it does not fit the consumers' registers (ptxas
spilled 104 bytes), and the manifest must say so before a build is spent. LAZY_* skip O *= alpha
with a warp vote. Build tests need nvcc (and cuobjdump for the SASS) and skip without them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from evo.build import build_batch
from evo.errors import EvoError
from evo.manifest import load_family
from evo.ptxas import parse_ptxas
from evo.render import render
from evo.results import Status
from evo.space import is_valid, make_candidate

FAMILY = load_family("flash_wgmma")


def point(**genes: object) -> dict[str, object]:
    return FAMILY.defaults() | genes


def test_q_in_registers_is_refused_where_the_count_says_it_spills() -> None:
    assert not is_valid(FAMILY, point(Q_IN_REGS=True, BLOCK_N_D128=128))
    assert not is_valid(FAMILY, point(Q_IN_REGS=True, BLOCK_N_D128=176))
    assert is_valid(FAMILY, point(Q_IN_REGS=True, BLOCK_N_D128=96))
    assert is_valid(FAMILY, point(Q_IN_REGS=False, BLOCK_N_D128=128))


def test_conditional_rescaling_is_off_by_default_at_both_head_dims() -> None:
    # it costs accuracy (the manifest's comment says how much): the search may turn it on
    assert FAMILY.defaults()["LAZY_D64"] is False and FAMILY.defaults()["LAZY_D128"] is False


def sass_by_function(genes: dict[str, object], cache: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Build one candidate into a private cache; its SASS per kernel function (ptxas checked)."""
    if shutil.which("nvcc") is None or shutil.which("cuobjdump") is None:
        pytest.skip("nvcc or cuobjdump not available")
    monkeypatch.setenv("EVO_CANDIDATES", str(cache))
    try:
        (result,) = build_batch([render(make_candidate("flash_wgmma", genes))], arch="sm_90a")
    except EvoError as err:
        pytest.skip(str(err))
    assert result.status is Status.BUILT, result.reason
    cubin = Path(result.cubin_path)
    for name, res in parse_ptxas((cubin.parent / "ptxas.log").read_text()).items():
        assert res.spill_stores == 0 and res.spill_loads == 0, name
    sass = subprocess.run(["cuobjdump", "--dump-sass", str(cubin)], check=True, capture_output=True, text=True).stdout
    return {body.split()[0]: body for body in re.split(r"\n\s*Function : ", sass)[1:]}


def test_q_in_registers_feeds_s_from_registers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    genes = {"Q_IN_REGS": True, "BLOCK_N_D128": 96}
    functions = sass_by_function(genes, tmp_path, monkeypatch)
    assert len(functions) == 8
    for name, body in functions.items():
        n = 96 if "_d128_" in name else 128
        assert "LDSM" in body, name                                  # Q by ldmatrix
        # S = Q K^T: A from registers (R..), B from a descriptor; no HGMMA of that N reads A from shared memory
        assert re.search(rf"HGMMA\.64x{n}x16\.F32\S* R\d+, R\d+, gdesc", body), name
        assert not re.search(rf"HGMMA\.64x{n}x16\.F32\S* R\d+, gdesc", body), name
        assert "HMMA" not in body.replace("HGMMA", ""), name


def test_conditional_rescaling_votes_only_where_it_is_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    functions = sass_by_function({"LAZY_D128": True}, tmp_path, monkeypatch)
    assert len(functions) == 8
    for name, body in functions.items():
        assert ("VOTE.ANY" in body) == ("_d128_" in name), name

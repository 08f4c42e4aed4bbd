"""A manifest's ``reads`` (which kernels read a gene) is a claim about machine code, checked by compiling:
a kernel the expression says does not read a gene compiles to the same code whatever the gene's value.
The search leaves such genes alone in a study of those kernels (evo.search.sampler_evo), so a wrong
claim would hide a region of the space from it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evo.errors import InvalidCandidate
from evo.family.manifest import load_family
from evo.family.render import Kernel, render
from evo.family.space import Candidate, make_candidate
from evo.toolchain.build import build_batch
from evo.toolchain.machine_code import kernel_digests

KERNELS: list[Kernel] = [(64, "bf16", False), (128, "bf16", True), (96, "fp16", True), (256, "bf16", True)]
BASE = {"BLOCK_N_D64": 64, "BLOCK_N_D96": 64, "BLOCK_N_D128": 64, "BLOCK_N_D256": 48}   # room for a third stage


def changed(family_name: str, gene: str) -> Candidate:
    """:data:`BASE` with ``gene`` at its first other value that keeps every constraint."""
    family = load_family(family_name)
    base = make_candidate(family, BASE).p
    for value in family.params[gene].values:
        if value != base[gene]:
            try:
                return make_candidate(family, base | {gene: value})
            except InvalidCandidate:
                continue
    raise AssertionError(f"{gene}: no other value keeps {BASE} valid")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_a_kernel_that_does_not_read_a_gene_compiles_alike_at_any_of_its_values(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVO_HOME", str(tmp_path))
    family = load_family("flash_wgmma")
    claims = [(g, next(k for k in KERNELS if not family.read_by(g, [k])))
              for g, p in family.params.items() if p.reads]
    assert len(claims) == 14                      # the per-head-dim tile genes (WGS, BLOCK_N, STAGES, EXP_EMU, PAD_PV)
    base = make_candidate(family, BASE)
    items = [render(base, family, [k]) for k in KERNELS]
    items += [render(changed("flash_wgmma", g), family, [k]) for g, k in claims]
    built = build_batch(items, "sm_90a")
    assert all(b.cubin_path for b in built), [b.reason for b in built if not b.cubin_path]
    code = [kernel_digests(Path(b.cubin_path or ""), portable=True) for b in built]
    at_base = dict(zip(KERNELS, code[:len(KERNELS)], strict=True))
    differs = [g for (g, k), c in zip(claims, code[len(KERNELS):], strict=True) if c != at_base[k]]
    assert differs == []

"""flash_wgmma's head dims 96 and 256 (family version 12): what the manifest admits and what the
compiled kernels contain.

D=96 rows take D=128's room in shared memory (two 64-column TMA boxes, the second half zeros)
and compute 96 columns: S = Q K^T in 6 k-steps, O += P V with N = 96. D=256 rows are four boxes;
its O alone is 128 registers a consumer thread, so it has neither a persistent O tile nor Q in
registers (those genes change nothing there). The manifest's shared-memory constraint and its
[launch] smem_bytes are written apart, and the kernel asserts the latter at compile time: the
CPU tests hold the two formulas to each other over every tile point of both head dims, the build
tests compile the defaults and a seeded sample (nvcc and cuobjdump; skipped without them) and
read the SASS for wgmma shapes, TMA boxes and register hand-over. Nothing here runs a kernel:
tests/test_wgmma_head_dims_gpu.py checks the results on a GPU.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import re
import shutil
from pathlib import Path

import pytest

from evo.errors import EvoError
from evo.family.manifest import Family, load_family
from evo.family.render import render
from evo.family.space import is_valid, launch_config, make_candidate, random_candidates
from evo.results import Status
from evo.toolchain.build import build_batch
from evo.toolchain.ptxas import parse_ptxas
from evo.toolchain.sass import cuobjdump, dump_sass

FAMILY = load_family("flash_wgmma")
NEW = (96, 256)
SMEM_LIMIT = 232448          # 227 KB: what a Hopper CTA may have
SAMPLE = 1                   # random valid points compiled besides the default and PADDED (seeded; test_templates_cpu.py draws more)
PADDED = {"PAD_PV_D96": True, "ROWSUM_MMA": True, "PACK_GQA": True, "PRODUCER_REGS": 32}


def test_the_family_serves_four_head_dims_with_valid_defaults() -> None:
    assert FAMILY.head_dims == (64, 96, 128, 256)
    cand = make_candidate(FAMILY)
    names = {e.head_dim for e in render(cand, FAMILY).entries}
    assert names == {64, 96, 128, 256}


@pytest.mark.parametrize("d", NEW)
def test_each_new_head_dim_has_tile_genes_of_its_own(d: int) -> None:
    for gene in ("WGS", "BLOCK_N", "STAGES", "LAZY"):
        assert f"{gene}_D{d}" in FAMILY.params
    cand = make_candidate(FAMILY, {f"BLOCK_N_D{d}": 64, f"WGS_D{d}": 1, "PINGPONG": True})
    launch = launch_config(FAMILY, cand, d)
    assert (launch.threads, launch.rows_per_cta, launch.tma_rows) == (256, 64, (64, 64, 64, 64))


def _tile_points(d: int) -> list[dict[str, object]]:
    """Every (WGS, BLOCK_N, STAGES) of head dim d, with and without the row sums' ones and a
    persistent grid, the other genes at their defaults."""
    genes = [f"WGS_D{d}", f"BLOCK_N_D{d}", f"STAGES_D{d}", "ROWSUM_MMA", "PERSISTENT"]
    return [FAMILY.defaults() | dict(zip(genes, combo, strict=True))
            for combo in itertools.product(*(FAMILY.params[g].values for g in genes))]


def _smem_constraint(family: Family) -> str:
    (expr,) = [c.expr for c in family.constraints if "232448" in c.expr]
    return expr


@pytest.mark.parametrize("d", NEW)
def test_the_smem_constraint_admits_exactly_the_launches_that_fit(d: int) -> None:
    # the constraint (every head dim) and [launch] smem_bytes (this one) are separate formulas
    only_smem = dataclasses.replace(FAMILY, constraints=tuple(
        c for c in FAMILY.constraints if c.expr == _smem_constraint(FAMILY)))
    fits = admitted = 0
    for params in _tile_points(d):
        cand = make_candidate(dataclasses.replace(only_smem, constraints=()), params)
        fit = launch_config(FAMILY, cand, d).smem_bytes <= SMEM_LIMIT
        others_fit = all(launch_config(FAMILY, cand, o).smem_bytes <= SMEM_LIMIT for o in FAMILY.head_dims if o != d)
        if others_fit:
            assert is_valid(only_smem, params) == fit, params
            fits += fit
            admitted += 1
    assert 0 < fits < admitted          # the sweep crosses the limit both ways


def test_d256_is_never_persistent_and_d96_takes_d128s_room() -> None:
    cand = make_candidate(FAMILY, {"PERSISTENT": True, "WGS_D96": 2, "BLOCK_N_D96": 96, "STAGES_D96": 2,
                                   "WGS_D128": 2, "BLOCK_N_D128": 96, "STAGES_D128": 2})
    d96, d128, d256 = (launch_config(FAMILY, cand, d) for d in (96, 128, 256))
    assert d96.persistent and d128.persistent and not d256.persistent
    assert d96.smem_bytes == d128.smem_bytes
    alone = make_candidate(FAMILY, {"PERSISTENT": False})
    assert launch_config(FAMILY, alone, 256).smem_bytes == d256.smem_bytes   # PERSISTENT changes nothing at D=256


def test_q_in_registers_is_not_held_against_d256() -> None:
    # at D=256 Q stays in shared memory (O's 128 registers leave no room), so the gene stays open
    assert is_valid(FAMILY, FAMILY.defaults() | {"Q_IN_REGS": True, "BLOCK_N_D128": 96})
    assert not is_valid(FAMILY, FAMILY.defaults() | {"Q_IN_REGS": True, "WGS_D96": 3, "BLOCK_N_D96": 112})
    assert is_valid(FAMILY, FAMILY.defaults() | {"Q_IN_REGS": False, "WGS_D96": 3, "BLOCK_N_D96": 112})


def test_a_drifted_smem_formula_fails_to_compile_not_to_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the template asserts [launch] smem_bytes against its own layout, per head dim
    launch = dict(FAMILY.launch) | {"smem_bytes": FAMILY.launch["smem_bytes"] + " + (16 if D == 96 else 0)"}
    drifted = dataclasses.replace(FAMILY, launch=launch)
    source = render(make_candidate(drifted), drifted).source
    sizes = {int(d): int(n) for d, n in re.findall(r"Traits<(\d+)>::BYTES == (\d+)u", source)}
    truth = {d: launch_config(FAMILY, make_candidate(FAMILY), d).smem_bytes for d in FAMILY.head_dims}
    assert sizes == truth | {96: truth[96] + 16}
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not available")
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path))
    (result,) = build_batch([render(make_candidate(drifted), drifted)], arch="sm_90a")   # stops in the front end
    assert result.status is Status.COMPILE_FAILED
    assert "differs from the kernel's layout at D=96" in result.log
    assert "at D=64" not in result.log and "at D=128" not in result.log


# ---- builds ----------------------------------------------------------------------------------

def _points() -> list[dict[str, object]]:
    """The default, P V over D=96's whole second box (with the row sums and packed GQA rows) and
    SAMPLE seeded valid points (what changes at D=96 and D=256 is drawn too)."""
    drawn = random_candidates(FAMILY, SAMPLE, random.Random(1206))
    return [FAMILY.defaults(), FAMILY.defaults() | PADDED, *(c.p for c in drawn)]


def _functions(params: dict[str, object], cache: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Build the D=96 and D=256 kernels of ``params`` (the family less its other head dims, which
    tests/test_templates_cpu.py builds) into ``cache``; its SASS by kernel, after checking that
    ptxas spilled nothing and kept every wgmma asynchronous."""
    if shutil.which("nvcc") is None or cuobjdump() is None:
        pytest.skip("nvcc or cuobjdump not available")
    monkeypatch.setenv("EVO_CANDIDATES", str(cache))
    family = dataclasses.replace(FAMILY, head_dims=NEW)
    try:
        (result,) = build_batch([render(make_candidate(family, params), family)], arch="sm_90a")
    except EvoError as err:
        pytest.skip(str(err))
    assert result.status is Status.BUILT, result.reason
    cubin = Path(str(result.cubin_path))
    resources = parse_ptxas((cubin.parent / "ptxas.log").read_text())
    assert len(resources) == 8
    for name, res in resources.items():
        assert res.spill_stores == res.spill_loads == res.stack_frame == 0, name
        assert res.wgmma_serialized == "", name
    return {body.split()[0]: body for body in re.split(r"\n\s*Function : ", dump_sass(cubin))[1:]}


def _head_dim(name: str) -> int:
    match = re.search(r"_d(\d+)_", name)
    assert match, name
    return int(match.group(1))


@pytest.mark.slow
@pytest.mark.parametrize("index", range(SAMPLE + 2), ids=["default", "padded", *(f"sample{i}" for i in range(SAMPLE))])
def test_new_head_dims_compile_to_the_wgmma_and_tma_they_mean(index: int, build_cache: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    params = _points()[index]
    functions = _functions(params, build_cache, monkeypatch)
    assert {_head_dim(n) for n in functions} == set(NEW)
    for name, body in functions.items():
        d = _head_dim(name)
        block_n, wgs, producer = (int(str(params[g])) for g in (f"BLOCK_N_D{d}", f"WGS_D{d}", "PRODUCER_REGS"))
        # S = Q K^T: N = BLOCK_N, K-major B (no transpose); O += P V: N = D (PAD_PV_D96: 128 at
        # D=96), V MN-major (tnspB), beside it (ROWSUM_MMA) P against the ones, N = 8
        rowsum = {"8"} if params["ROWSUM_MMA"] else set()
        n_o = 128 if d == 96 and params["PAD_PV_D96"] else d
        shapes = set(re.findall(r"HGMMA\.64x(\d+)x16\.F32\S*", body))
        pv = set(re.findall(r"HGMMA\.64x(\d+)x16\.F32\S* R\d+, R\d+, gdesc\[\w+\]\.tnspB", body))
        assert pv == {str(n_o)} | rowsum, name
        assert shapes == {str(block_n), str(n_o)} | rowsum, name
        # one TMA store per 64-column box of O's rows (D=96: two, the second clipped to 32 columns)
        if not params["PACK_GQA"]:
            assert len(re.findall(r"UTMASTG", body)) == (d + 63) // 64, name
        assert re.search(r"UTMALDG", body), name
        alloc = re.findall(r"USETMAXREG\.TRY_ALLOC\.CTAPOOL \w+, (0x[0-9a-f]+)", body)
        dealloc = re.findall(r"USETMAXREG\.DEALLOC\.CTAPOOL (0x[0-9a-f]+)", body)
        if wgs == 1:
            assert not alloc and not dealloc, name
        else:   # the consumers take what the producer gives back of the CTA's pool
            pool = 65536 // (128 * (wgs + 1)) // 8 * 8
            assert {int(x, 16) for x in dealloc} == {producer}, name
            (up,) = {int(x, 16) for x in alloc}
            assert producer + wgs * up <= (wgs + 1) * pool, name

"""flash_wgmma's register hand-over (setmaxnreg) fits the CTA's pool, for every producer share.

setmaxnreg moves registers only within the pool a CTA was launched with: (WGS + 1) warpgroups at
the per-thread count ptxas chose. Consumers that ask for more than the producer gave back wait
in ``setmaxnreg.inc`` forever. Candidate d76408673dd9 (WGS_D128 = 2, PRODUCER_REGS = 32) did,
on an H100: 32 + 2 x 240 registers against a pool of 3 x 168. These tests build the kernels with
nvcc (skipped without it), refuse any spill (a spilling build is resource_rejected, not built),
and check the pool the template assumes against ptxas's count, and, where cuobjdump is at hand,
the amounts the SASS really asks for.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest

from evo.toolchain.build import build_batch
from evo.toolchain.sass import cuobjdump, dump_sass
from evo.errors import EvoError
from evo.toolchain.ptxas import parse_ptxas
from evo.family.manifest import load_family
from evo.family.render import render
from evo.results import Status
from evo.family.space import make_candidate

# (genes, consumer warpgroups per head dim): every PRODUCER_REGS value with two and three consumers
CASES = [
    ({"WGS_D64": 1, "WGS_D128": 2, "PRODUCER_REGS": 32, "PERSISTENT": True, "BLOCK_N_D128": 96}, {64: 1, 128: 2}),
    ({"WGS_D64": 2, "WGS_D128": 2, "PRODUCER_REGS": 40}, {64: 2, 128: 2}),
    ({"WGS_D64": 3, "BLOCK_N_D64": 64, "WGS_D128": 2, "PRODUCER_REGS": 24}, {64: 3, 128: 2}),
    ({"WGS_D64": 3, "BLOCK_N_D64": 64, "WGS_D128": 1, "PRODUCER_REGS": 32, "PINGPONG": False}, {64: 3, 128: 1}),
    # spilled 52-108 B until the epilogue's addresses and the tile count stopped living across the loop
    # (at BLOCK_N_D64 128; since family version 10's idle warpgroups that one spills 4 B in its causal
    # kernels again, and BLOCK_N_D64 96 is what the three-consumer winners use)
    ({"WGS_D64": 3, "BLOCK_N_D64": 96, "PRODUCER_REGS": 24, "PERSISTENT": True}, {64: 3, 128: 2}),
    # and Q in registers at D=128 with BLOCK_N 128 (spilled then; the manifest admits it now)
    ({"Q_IN_REGS": True, "BLOCK_N_D128": 128, "PRODUCER_REGS": 24}, {64: 2, 128: 2}),
]


HEAD_DIMS = (64, 128)   # the kernels whose genes CASES vary


def pool_regs(wgs: int) -> int:
    """Registers a thread gets at launch under __launch_bounds__(128 * (wgs + 1), 1)."""
    return 65536 // (128 * (wgs + 1)) // 8 * 8


def built(genes: dict[str, object], cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Build the D=64 and D=128 kernels of one candidate into ``cache`` (the session's, shared by
    both tests) and return its cubin (the other head dims: tests/test_wgmma_head_dims.py)."""
    monkeypatch.setenv("EVO_CANDIDATES", str(cache))
    family = dataclasses.replace(load_family("flash_wgmma"), head_dims=HEAD_DIMS)
    rendered = render(make_candidate(family, genes), family)
    try:
        (result,) = build_batch([rendered], arch="sm_90a")
    except EvoError as err:
        pytest.skip(str(err))
    assert result.status is Status.BUILT, result.reason
    return Path(result.cubin_path)


@pytest.mark.parametrize(("genes", "wgs"), CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_ptxas_gives_each_thread_the_pool_the_template_assumes(
        genes: dict[str, object], wgs: dict[int, int], build_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not available")
    cubin = built(genes, build_cache, monkeypatch)
    entries = parse_ptxas((cubin.parent / "ptxas.log").read_text())
    assert len(entries) == 8
    for name, res in entries.items():
        n = wgs[64 if "_d64_" in name else 128]
        if n > 1:        # with one consumer nothing is handed over
            assert res.registers == pool_regs(n), name


@pytest.mark.parametrize(("genes", "wgs"), CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_the_sass_asks_for_no_more_than_the_producer_gives_back(
        genes: dict[str, object], wgs: dict[int, int], build_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("nvcc") is None or cuobjdump() is None:
        pytest.skip("nvcc or cuobjdump not available")
    cubin = built(genes, build_cache, monkeypatch)
    sass = dump_sass(cubin)
    functions = re.split(r"\n\s*Function : ", sass)[1:]
    assert len(functions) == 8
    for body in functions:
        name = body.split()[0]
        n = wgs[64 if "_d64_" in name else 128]
        alloc = [int(x, 16) for x in re.findall(r"USETMAXREG\.TRY_ALLOC\.CTAPOOL \w+, (0x[0-9a-f]+)", body)]
        dealloc = [int(x, 16) for x in re.findall(r"USETMAXREG\.DEALLOC\.CTAPOOL (0x[0-9a-f]+)", body)]
        if n == 1:
            assert not alloc and not dealloc, name
            continue
        assert len(set(alloc)) == 1 and len(set(dealloc)) == 1, name
        assert dealloc[0] == genes["PRODUCER_REGS"], name
        assert dealloc[0] + n * alloc[0] <= (n + 1) * pool_regs(n), name

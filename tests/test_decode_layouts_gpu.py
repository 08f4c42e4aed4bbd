"""flash_decode's _lens and _paged entries on the GPU (docs/kernel-abi.md, "Ragged and paged
caches"): right against the float64 reference in both dtypes on small versions of the decode
suite's ragged batch and on edges (sequences of 0 and 1 keys, pages of 1 to 256 keys, causal at each
sequence's bottom right), green on GREEN's layout draws, bit-identical to the contiguous entry where
every sequence fills the cache, timed by FAST with its outputs checked beside padded SDPA; and the
planted page-table fault of tests/templates/faulty_decode red on every paged draw. Promote's checks of a
layout route (evo.products.verify.cases_for on a lens or paged bucket) pass, and catch that fault."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest
import torch

from evo.family.render import Entry
from evo.gpu.draws import LAYOUT_KINDS, drawn_cases, verified_heads
from evo.gpu.gate import check_case, make_inputs, run_green, verdict
from evo.gpu.layouts import cache_args, to_pages
from evo.gpu.margin import TOLERANCE_SHARE
from evo.gpu.suites import GreenCase, green_settings
from evo.gpu.timing import time_case
from evo.products.verify import Bucket, cases_for
from evo.results import Shape, Status
from test_decode_gpu import Built, load_configs

pytestmark = pytest.mark.gpu

CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "default": ("flash_decode", {}),
    "wide": ("flash_decode", {"BLOCK_M": 32, "BLOCK_N": 128, "NUM_WARPS": 8, "STAGES": 2, "SPLIT_MIN": 256,
                              "WAVES": 4}),
    "page_off_by_one": ("faulty_decode", {"DECODE_FAULT": "page_off_by_one"}),
}
# (B, Hq, Hkv, Lq, Lk, D, causal, lens_min, page_size): a small ragged batch as D6/D7, speculative
# rows at each sequence's bottom right, sequences of 0 and 1 keys, pages of one key, an odd size,
# pages longer than a split
PROBLEMS = [(16, 32, 8, 1, 16000, 128, False, 100, 16), (8, 32, 8, 4, 4096, 128, True, 0, 16),
            (5, 8, 2, 16, 1000, 64, True, 0, 1), (6, 16, 4, 3, 3000, 64, False, 0, 48),
            (3, 4, 1, 2, 20000, 128, True, 1, 256), (4, 8, 8, 1, 37, 64, False, 0, 16)]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return load_configs(CONFIGS, tmp_path_factory)


def _shape(problem: tuple[Any, ...], dtype: str, layout: str, seed: int = 5) -> Shape:
    B, Hq, Hkv, Lq, Lk, D, causal, shortest, page = problem
    return Shape("Y", B, Hq, Lq, D, causal, dtype, Hkv, Lk, "bottom_right", layout, shortest, seed,
                 page if layout == "paged" else 0)


def _layout_draws(entries: tuple[Entry, ...], salt: int) -> list[GreenCase]:
    draws = green_settings().draws
    assert draws is not None
    keys = {(e.head_dim, e.dtype, e.causal) for e in entries}
    return drawn_cases(replace(draws, kinds=tuple(LAYOUT_KINDS)), keys, salt, {"lens", "paged"})


@pytest.mark.parametrize("config", ["default", "wide"])
@pytest.mark.parametrize("layout", ["lens", "paged"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: "x".join(map(str, p[:6])) + ("c" if p[6] else "")
                         + f"-p{p[8]}")
def test_the_layout_entries_match_the_reference(built: Built, config: str, layout: str, dtype: str,
                                                problem: tuple[Any, ...]) -> None:
    shape = _shape(problem, dtype, layout)
    r = check_case(built[config][0], GreenCase(shape, std=2.0, spike=50.0, inputs="spikes"), 0, green_settings())
    assert r.passed, r.reason


@pytest.mark.parametrize("config", ["default", "wide"])
def test_green_over_the_layout_draws(built: Built, config: str) -> None:
    kernels, entries = built[config]
    settings = green_settings()
    for salt in (random.getrandbits(31) for _ in range(4)):
        status, reason = verdict(run_green(kernels, _layout_draws(entries, salt), settings, salt))
        assert status is Status.GREEN, f"{reason} (salt {salt})"


def test_a_page_table_read_off_by_one_is_red_on_every_paged_draw(built: Built) -> None:
    kernels, entries = built["page_off_by_one"]
    settings = green_settings()
    for salt in (random.getrandbits(31) for _ in range(4)):
        cases = [c for c in _layout_draws(entries, salt) if c.shape.layout == "paged"]
        for case in cases:                                       # each paged check alone is red
            status, reason = verdict(run_green(kernels, [case], settings, salt))
            assert status is Status.RED and ("max|err|" in reason or "in output" in reason), f"{reason} (salt {salt})"
        lens = [c for c in _layout_draws(entries, salt) if c.shape.layout == "lens"]
        assert verdict(run_green(kernels, lens, settings, salt))[0] is Status.GREEN   # the fault is the pages'


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
def test_full_sequences_give_the_contiguous_entrys_bits(built: Built, dtype: str, causal: bool) -> None:
    """Every sequence at the capacity: the same plan, the same arithmetic, the same bits."""
    kernels = built["default"][0]
    B, Hq, Hkv, Lq, Lk, D = 4, 32, 8, 2, 4992, 128        # whole pages: one capacity, one plan
    plain = Shape("Z", B, Hq, Lq, D, causal, dtype, Hkv, Lk, "bottom_right")
    paged = Shape("Z", B, Hq, Lq, D, causal, dtype, Hkv, Lk, "bottom_right", "paged", Lk, 3, 16)
    assert paged.seqlens() == [Lk] * B
    q, k, v = make_inputs(plain, 0, 0, "cuda", std=2.0)
    want = torch.empty_like(q)
    kernels(q, k, v, want, causal, 0.1, Lk - Lq)
    args = cache_args(paged, "cuda")
    for extra, (kk, vv) in (({"seqlens": args["seqlens"]}, (k, v)), (args, (to_pages(k, paged), to_pages(v, paged)))):
        got = torch.full_like(q, float("nan"))
        kernels(q, kk, vv, got, causal, 0.1, 0, **extra)
        assert torch.equal(got, want), sorted(extra)


def test_a_kernel_without_the_layout_refuses_it(built: Built) -> None:
    kernels = built["default"][0]
    q = torch.zeros(2, 4, 1, 96, dtype=torch.float16, device="cuda")    # no D=96 entry at all
    assert not kernels.supports(q, False, "paged")
    q = q[..., :64].contiguous()
    assert kernels.supports(q, False, "lens") and kernels.supports(q, True, "paged")


@pytest.mark.parametrize("layout", ["lens", "paged"])
def test_fast_times_a_ragged_batch_and_checks_its_outputs(built: Built, layout: str) -> None:
    kernels = built["default"][0]
    shape = _shape((16, 32, 8, 1, 4000, 128, False, 100, 16), "bf16", layout)
    cache = cache_args(shape, "cuda")

    def cand(q: Any, k: Any, v: Any, o: Any) -> None:
        kernels.launch(q, k, v, o, causal=shape.causal, shift=shape.shift, **cache)

    got = time_case(cand, shape, ("sdpa_default", "fa4"), rounds=2, reps=3, check=green_settings())
    assert not got.output_failure, got.output_failure
    assert got.outputs_checked > 0
    assert [t.backend for t in got.timings][:2] == ["evo", "sdpa_default"]   # SDPA padded to the longest, masked
    timed = {t.backend for t in got.timings}
    assert ("fa4" in timed) != ("fa4" in got.unavailable)        # FA4 timed, or why not: never dropped silently


@pytest.mark.parametrize("layout", ["lens", "paged"])
def test_promotes_checks_of_a_layout_route_pass_and_catch_the_page_fault(built: Built, layout: str) -> None:
    """What promote runs before it routes calls with seqlens (and a block table) to a kernel: its
    checks of a layout route's bucket of capacities (ragged batches over the bucket's edges and ragged
    capacities, pages of 1, 16, 48 and 256 keys, the route's heads), at promote's share of GREEN's
    tolerance. Green on the kernel; a paged route's checks are red on the planted page fault."""
    bucket = Bucket((128, "bf16", True), 1, 4096, (4000,), verified_heads(1, 128), layout, (16,) if layout == "paged" else ())
    cases = cases_for([bucket], 11)
    settings = green_settings().share(TOLERANCE_SHARE)
    status, reason = verdict(run_green(built["default"][0], cases, settings, 11))
    assert status is Status.GREEN, reason
    if layout == "paged":
        assert verdict(run_green(built["page_off_by_one"][0], cases, settings, 11))[0] is Status.RED

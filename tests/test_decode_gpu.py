"""flash_decode on the GPU: its default and two other configurations are right on small versions of
the decode suite and on GREEN's decode draws, the default passes the whole GREEN suite as a search
would gate it, the planted combine faults of tests/templates/faulty_decode are red on the decode
draws, and the split-KV workspace is left ready for the next launch, under CUDA graph replay too."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from evo.family.render import Entry, render
from evo.family.space import make_candidate, split_plan
from evo.gpu.draws import DECODE_KINDS, drawn_cases
from evo.gpu.gate import check_case, make_inputs, run_green, verdict
from evo.gpu.runtime import CandidateKernels
from evo.gpu.suites import GreenCase, green_cases, green_settings
from evo.results import Shape, Status
from evo.toolchain.build import build_batch, default_arch

pytestmark = pytest.mark.gpu

CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "default": ("flash_decode", {}),
    "wide": ("flash_decode", {"BLOCK_M": 32, "BLOCK_N": 128, "NUM_WARPS": 8, "STAGES": 2, "SPLIT_MIN": 256,
                              "WAVES": 4}),
    "narrow": ("flash_decode", {"BLOCK_N": 32, "NUM_WARPS": 2, "STAGES": 4, "SPLIT_MIN": 2048, "WAVES": 1}),
    "none": ("faulty_decode", {"DECODE_FAULT": "none"}),
    "one_max": ("faulty_decode", {"DECODE_FAULT": "one_max"}),
    "drop_last": ("faulty_decode", {"DECODE_FAULT": "drop_last"}),
}
HONEST = ("default", "wide", "narrow")
# small versions of acceptance/decode.toml (B, Hq, Hkv, Lq, Lk, D, causal) and edges: one key, a
# cache shorter than the queries under a bottom-right mask (rows that see no key: zeros)
SHAPES = [(1, 32, 8, 1, 32768, 128, False), (1, 32, 8, 1, 32768, 128, True), (16, 32, 8, 1, 2048, 128, False),
          (4, 64, 8, 1, 8192, 128, False), (2, 32, 32, 1, 4096, 128, False), (4, 32, 8, 4, 4096, 128, True),
          (2, 8, 2, 16, 1000, 64, True), (1, 16, 1, 3, 1, 64, False), (3, 4, 4, 5, 3, 64, True)]
Built = dict[str, tuple[CandidateKernels, tuple[Entry, ...]]]


def load_configs(configs: dict[str, tuple[str, dict[str, Any]]], factory: pytest.TempPathFactory) -> Built:
    """Each named (family, genes) point, the test families included, built into a fresh cache and
    loaded on the current device with its entries; a point that does not build fails the caller."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVO_CANDIDATES", str(factory.mktemp("candidates")))
        mp.setenv("EVO_TEMPLATE_PATH", str(Path(__file__).parent / "templates"))
        rendered = [render(make_candidate(f, p)) for f, p in configs.values()]
        results = build_batch(rendered, default_arch())
    device = torch.cuda.current_device()
    loaded = {}
    for name, r, x in zip(configs, results, rendered, strict=True):
        assert r.status is Status.BUILT and r.cubin_path, f"{name}: {r.reason}\n{r.log[-3000:]}"
        loaded[name] = (CandidateKernels(r.cubin_path, x.entries, device), x.entries)
    return loaded


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return load_configs(CONFIGS, tmp_path_factory)


def _decode_draws(entries: tuple[Entry, ...], salt: int) -> list[GreenCase]:
    draws = green_settings().draws
    assert draws is not None
    keys = {(e.head_dim, e.dtype, e.causal) for e in entries}
    return drawn_cases(replace(draws, kinds=DECODE_KINDS), keys, salt)


@pytest.mark.parametrize("config", HONEST)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("problem", SHAPES, ids=lambda p: "x".join(map(str, p[:6])) + ("c" if p[6] else ""))
def test_the_decode_suite_small(built: Built, config: str, dtype: str, problem: tuple[Any, ...]) -> None:
    B, Hq, Hkv, Lq, Lk, D, causal = problem
    shape = Shape("D", B, Hq, Lq, D, causal, dtype, Hkv, Lk, "bottom_right")
    r = check_case(built[config][0], GreenCase(shape, std=2.0), 0, green_settings())
    assert r.passed, r.reason


@pytest.mark.parametrize("config", [*HONEST, "none"])
def test_green_over_the_decode_draws(built: Built, config: str) -> None:
    kernels, entries = built[config]
    settings = green_settings()
    for salt in (random.getrandbits(31) for _ in range(3)):
        status, reason = verdict(run_green(kernels, _decode_draws(entries, salt), settings, salt))
        assert status is Status.GREEN, f"{reason} (salt {salt})"


def test_the_default_passes_the_whole_green_suite(built: Built) -> None:
    kernels, entries = built["default"]
    settings = green_settings()
    assert settings.draws is not None
    keys = {(e.head_dim, e.dtype, e.causal) for e in entries}
    salt = random.getrandbits(31)
    cases = [GreenCase(s) for s in green_cases() if (s.D, s.dtype, s.causal) in keys]
    status, reason = verdict(run_green(kernels, cases + drawn_cases(settings.draws, keys, salt), settings, salt))
    assert status is Status.GREEN, f"{reason} (salt {salt})"


@pytest.mark.parametrize(("fault", "reasons"), [("one_max", ("in output",)), ("drop_last", ("max|err|", "in output"))])
def test_a_broken_combine_is_red_on_the_decode_draws(built: Built, fault: str, reasons: tuple[str, ...]) -> None:
    kernels, entries = built[fault]
    settings = green_settings()
    for salt in (random.getrandbits(31) for _ in range(3)):
        status, reason = verdict(run_green(kernels, _decode_draws(entries, salt), settings, salt))
        assert status is Status.RED and any(r in reason for r in reasons), f"{reason} (salt {salt})"


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_a_plan_with_more_tiles_after_one_with_fewer(built: Built, dtype: str) -> None:
    """The workspace is shared: a plan of few tiles (8: its parts begin right after 256 bytes of
    counters) lays its parts where the next plan's 108 tiles keep their counters. The first H100
    run found those tiles never combined (o left unwritten) until the host zeroed the counters
    before each launch."""
    kernels = built["default"][0]
    few = Shape("few", 1, 32, 1, 128, False, dtype, 8, 32768, "bottom_right")
    many = Shape("many", 3, 64, 9, 128, True, dtype, 2, 11276, "top_left")
    for shape in (few, many, few, many):
        r = check_case(kernels, GreenCase(shape, std=1.5), 0, green_settings())
        assert r.passed, f"{shape.case}: {r.reason}"


def test_the_workspace_is_ready_again_after_launches_and_graph_replays(built: Built) -> None:
    kernels, entries = built["default"]
    shape = Shape("W", 1, 32, 1, 128, False, "bf16", 8, 32768)
    entry = next(e for e in entries if (e.head_dim, e.dtype, e.causal) == (128, "bf16", False))
    assert entry.launch.split is not None
    plan = split_plan(entry.launch.split, entry.launch.rows_per_cta, 1, 32, 8, 1, 32768,
                      torch.cuda.get_device_properties(0).multi_processor_count)
    assert plan.splits >= 2                                    # the combine runs
    q, k, v = make_inputs(shape, 0, 0, "cuda")
    eager = torch.empty_like(q)
    kernels(q, k, v, eager, False, 128 ** -0.5)
    counters = kernels._scratch[-1][: 4 * plan.groups]
    assert int(counters.count_nonzero()) == 0
    replayed = torch.full_like(q, float("nan"))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):                            # an eager launch first, as the timer's warm-up
        kernels(q, k, v, replayed, False, 128 ** -0.5)
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        for _ in range(3):
            kernels(q, k, v, replayed, False, 128 ** -0.5)
    torch.cuda.current_stream().wait_stream(stream)
    for _ in range(2):
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(replayed, eager)
    assert int(counters.count_nonzero()) == 0

"""Loading and launching built candidates through cuda.core (GPU), and the errors without it (CPU)."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from evo.toolchain.build import build_batch, default_arch
from evo.errors import EvoError
from evo.family.render import Entry, Rendered, render
from evo.results import Status
from evo.gpu.runtime import CandidateKernels
from evo.family.space import make_candidate

FAMILIES = ("flash_scalar", "flash_mma", "flash_wgmma")
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
LOOSE = {"fp16": 5e-3, "bf16": 3e-2}  # plumbing checks only; the gate owns correctness


def test_missing_cubin_is_an_evo_error(tmp_path: Path) -> None:
    with pytest.raises(EvoError, match="cubin not found"):
        CandidateKernels(tmp_path / "absent.cubin", [])


def test_missing_cuda_python_is_an_evo_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"\0")
    entry = render(make_candidate("flash_scalar")).entries[0]
    for name in ("cuda", "cuda.bindings", "cuda.bindings.driver", "cuda.core", "cuda.core.experimental"):
        monkeypatch.setitem(sys.modules, name, None)  # None in sys.modules makes the import fail
    with pytest.raises(EvoError, match="cuda-python is not installed"):
        CandidateKernels(cubin, [entry])


def _build(rendered: list[Rendered], cache: Path) -> list[str]:
    """Each of ``rendered`` compiled for this GPU into the private cache ``cache``: its cubin path."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVO_CANDIDATES", str(cache))
        results = build_batch(rendered, default_arch())
    for r in results:
        assert r.status is Status.BUILT and r.cubin_path, f"{r.reason}\n{r.log[-3000:]}"
    return [str(r.cubin_path) for r in results]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[str, tuple[Entry, ...]]]]:
    """Each family's default candidate, compiled for this GPU into a private cache."""
    rendered = [render(make_candidate(f)) for f in FAMILIES]
    cubins = _build(rendered, tmp_path_factory.mktemp("candidates"))
    yield {f: (c, x.entries) for f, c, x in zip(FAMILIES, cubins, rendered, strict=True)}


@pytest.fixture(scope="module", params=FAMILIES)
def kernels(request: pytest.FixtureRequest, built: dict) -> CandidateKernels:  # type: ignore[type-arg]
    cubin, entries = built[request.param]
    return CandidateKernels(cubin, entries, torch.cuda.current_device())


def _qkvo(B: int, H: int, L: int, D: int, dtype: str) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(device="cuda").manual_seed(B * 1000 + L)
    q, k, v = (torch.randn(B, H, L, D, device="cuda", generator=gen).to(DTYPES[dtype]) for _ in range(3))
    return q, k, v, torch.full_like(q, math.nan)


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, scale=scale)


@pytest.mark.gpu
def test_kernel_attributes_cover_every_entry(kernels: CandidateKernels) -> None:
    attrs = kernels.kernel_attributes()
    assert set(attrs) == {e.name for e in kernels.entries}
    for e in kernels.entries:
        assert attrs[e.name]["num_regs"] > 0
        assert attrs[e.name]["max_threads_per_block"] >= e.launch.threads


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("D", [64, 128])
def test_launch_computes_attention(kernels: CandidateKernels, D: int, dtype: str, causal: bool) -> None:
    q, k, v, o = _qkvo(2, 3, 201, D, dtype)
    assert kernels.supports(q, causal)
    kernels.launch(q, k, v, o, causal=causal)
    err = (o.float() - _reference(q, k, v, causal, 1 / math.sqrt(D))).abs().max().item()
    assert err < LOOSE[dtype]


@pytest.mark.gpu
def test_launch_honours_an_explicit_scale(kernels: CandidateKernels) -> None:
    q, k, v, o = _qkvo(1, 2, 130, 64, "fp16")
    kernels(q, k, v, o, False, 0.3)
    assert (o.float() - _reference(q, k, v, False, 0.3)).abs().max().item() < LOOSE["fp16"]


@pytest.mark.gpu
def test_launch_on_a_side_stream_and_in_a_cuda_graph(kernels: CandidateKernels) -> None:
    q, k, v, o = _qkvo(1, 4, 300, 128, "fp16")
    kernels.launch(q, k, v, o, causal=True)
    eager = o.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        o.fill_(math.nan)
        kernels.launch(q, k, v, o, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(o, eager)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernels.launch(q, k, v, o, causal=True)
    o.fill_(math.nan)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(o, eager)


@pytest.mark.gpu
def test_supports_only_what_was_built(kernels: CandidateKernels) -> None:
    assert not kernels.supports(torch.empty(1, 1, 8, 80, device="cuda", dtype=torch.float16), False)   # no family has D=80
    assert not kernels.supports(torch.empty(1, 1, 8, 64, device="cuda", dtype=torch.float32), False)


def _bad_inputs() -> list[tuple[str, str]]:
    return [("float32", "float16 or bfloat16"), ("cpu", "is on cpu"), ("transposed", "not contiguous"),
            ("short_k", "k and v \\(B, Hkv, Lk, D\\), k and v alike"), ("three_d", "need q and o \\(B, Hq, Lq, D\\)"),
            ("groups", "3 query heads are not a multiple of 2 key/value heads"),
            ("mixed", "the same for q, k, v, o"), ("d80", "no kernel for D=80"),
            ("misaligned", "16-byte aligned")]


@pytest.mark.gpu
@pytest.mark.parametrize(("case", "message"), _bad_inputs())
def test_launch_rejects_bad_inputs(kernels: CandidateKernels, case: str, message: str) -> None:
    q, k, v, o = _qkvo(1, 2, 64, 64, "fp16")
    if case == "float32":
        q, k, v, o = (t.float() for t in (q, k, v, o))
    elif case == "cpu":
        o = o.cpu()
    elif case == "transposed":
        q = q.transpose(1, 2).contiguous().transpose(1, 2)
    elif case == "short_k":                          # a shorter key cache is fine; v must match it
        k = k[:, :, :32].contiguous()
    elif case == "groups":
        q, o = (torch.zeros(1, 3, 64, 64, device="cuda", dtype=torch.float16) for _ in range(2))
    elif case == "three_d":
        q, k, v, o = (t[0] for t in (q, k, v, o))
    elif case == "mixed":
        v = v.to(torch.bfloat16)
    elif case == "d80":
        q, k, v, o = _qkvo(1, 2, 64, 80, "fp16")
    elif case == "misaligned":  # contiguous, but starts one element into its storage
        q = torch.randn(q.numel() + 1, device="cuda", dtype=q.dtype)[1:].view(q.shape)
    with pytest.raises(EvoError, match=message):
        kernels.launch(q, k, v, o, causal=False)


@pytest.fixture(scope="module")
def dynamic(tmp_path_factory: pytest.TempPathFactory) -> CandidateKernels:
    """flash_wgmma with TILE_SCHED dynamic (its D=128 causal kernels only: the persistent ones that take
    a tile counter), compiled for this GPU into a private cache."""
    if default_arch() != "sm_90a":
        pytest.skip("flash_wgmma needs sm_90a")
    cand = make_candidate("flash_wgmma", {"TILE_SCHED": "dynamic", "PRODUCER_REGS": 32})
    rendered = render(cand, kernels=[(128, "fp16", True), (128, "bf16", True)])
    assert all(e.launch.tile_counter for e in rendered.entries)
    (cubin,) = _build([rendered], tmp_path_factory.mktemp("candidates-dynamic"))
    return CandidateKernels(cubin, rendered.entries, torch.cuda.current_device())


@pytest.mark.gpu
def test_a_tile_counter_deals_every_tile_once_launch_after_launch_and_stream_by_stream(dynamic: CandidateKernels) -> None:
    """TILE_SCHED dynamic on 512 tiles for 132-odd CTAs: each launch takes every tile exactly once (o starts
    as NaN: a tile never taken stays NaN, and a counter a launch did not set back to zero skips the next
    launch's first tiles), on the default stream, on a side stream (a word of its own), in a graph captured
    on a stream that had no launch before (no word: the static deal) and in one captured after a warm-up
    on its stream (the word baked into the graph); every schedule gives the same bits."""
    q, k, v, _ = _qkvo(4, 16, 1000, 128, "bf16")
    k, v = k[:, :4].contiguous(), v[:, :4].contiguous()           # 16 query heads on 4 K/V heads
    o = torch.full_like(q, math.nan)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, enable_gqa=True)
    dynamic.launch(q, k, v, o, causal=True)
    eager = o.clone()
    assert (eager.float() - ref).abs().max().item() < LOOSE["bf16"]
    for _ in range(3):
        o.fill_(math.nan)
        dynamic.launch(q, k, v, o, causal=True)
        assert torch.equal(o, eager)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            o.fill_(math.nan)
            dynamic.launch(q, k, v, o, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert torch.equal(o, eager)
    for warm in (False, True):
        capture = torch.cuda.Stream()
        if warm:
            capture.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(capture):
                dynamic.launch(q, k, v, o, causal=True)
            torch.cuda.current_stream().wait_stream(capture)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=capture):
            dynamic.launch(q, k, v, o, causal=True)
        for _ in range(2):
            o.fill_(math.nan)
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(o, eager), f"graph captured {'after' if warm else 'without'} a warm-up"

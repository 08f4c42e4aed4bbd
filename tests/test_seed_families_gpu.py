"""The seed families on a real GPU, through the worker exactly as a search runs them: the CUDA
ladder kernels pass GREEN (both head dims, causal and not, the drawn cases), and a Triton-backend
candidate passes GREEN and is timed by FAST (CUDA-graph capture of Triton launches included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.results import Shape, Status

pytestmark = pytest.mark.gpu

CUDA_SEEDS = [("seed_naive", {}), ("seed_online", {}), ("seed_wmma", {}),
              ("seed_wmma", {"PV": "wmma", "LOADER": "cp_async_producer"})]
TRITON_SEEDS = [("triton_flash", {"TMA": True}), ("seed_pipeline", {})]


def evaluate(family: str, params: dict, fast: tuple[Shape, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    from evo.toolchain.build import build_batch, default_arch
    from evo.family.render import render
    from evo.family.space import make_candidate
    from evo.gpu.worker import EvalRequest, Worker

    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "cache"))
    rendered = render(make_candidate(family, params))
    (built,) = build_batch([rendered], arch=default_arch())
    assert built.status is Status.BUILT, built.reason
    with Worker(0) as worker:
        return worker.evaluate(EvalRequest(built.build_id, built.cubin_path or "", rendered.entries, green=True,
                                           fast_cases=fast, options={"quick": True, "salt": 7}), timeout_s=300)


@pytest.mark.parametrize("family, params", CUDA_SEEDS, ids=lambda x: x if isinstance(x, str) else
                         ",".join(f"{k}={v}" for k, v in x.items()) or "default")
def test_cuda_seed_kernels_pass_green(family: str, params: dict, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    ev = evaluate(family, params, (), tmp_path, monkeypatch)
    assert ev.status is Status.GREEN, ev.reason


@pytest.mark.quiet   # FAST refuses a timing whose spread stays wide, as it does beside other GPU work
@pytest.mark.parametrize("family, params", TRITON_SEEDS, ids=["triton_flash-tma", "seed_pipeline"])
def test_triton_backend_candidates_pass_green_and_are_timed(family: str, params: dict, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    case = Shape("F1", 1, 8, 512, 64, True)
    ev = evaluate(family, params, (case,), tmp_path, monkeypatch)
    assert ev.status is Status.FAST, ev.reason
    evo = [t for t in ev.timings if t.backend == "evo"]
    assert len(evo) == 1 and evo[0].median_us > 0 and not evo[0].flagged

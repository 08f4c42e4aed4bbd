"""FAST timing: statistics and plausibility rules on CPU; graph timing itself on a GPU."""

from __future__ import annotations

import pytest

from evo.results import Shape, Timing
from evo.timing import (
    BACKENDS, RECHECK_FAILED, Stats, floor_us, implausible, io_bytes, make_timing, recheck_failed,
)

F1 = Shape("F1", 1, 8, 512, 64, False)
F3 = Shape("F3", 32, 8, 128, 64, False)
F8 = Shape("F8", 4, 32, 4096, 128, False)


def baseline(shape: Shape, backend: str, us: float) -> Timing:
    return Timing(shape, backend, us, us, us)


@pytest.mark.parametrize(("samples", "median", "p20", "p80"), [
    ([5.0], 5.0, 5.0, 5.0),
    ([1.0, 2.0, 3.0, 4.0, 5.0], 3.0, 1.8, 4.2),
    ([4.0, 1.0, 3.0, 2.0], 2.5, 1.6, 3.4),
])
def test_stats(samples: list[float], median: float, p20: float, p80: float) -> None:
    s = Stats.of(samples)
    assert (s.median, s.p20, s.p80, s.n) == pytest.approx((median, p20, p80, len(samples)))
    assert s.spread == pytest.approx(p80 - p20)


def test_stats_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        Stats.of([])


def test_make_timing_keeps_raw_samples() -> None:
    t = make_timing(F1, "evo", [3.0, 1.0, 2.0], "note")
    assert (t.median_us, t.samples_us, t.flagged, t.backend) == (2.0, [3.0, 1.0, 2.0], "note", "evo")


@pytest.mark.parametrize(("shape", "floor"), [
    (F3, 4 * 32 * 8 * 128 * 64 * 2 / 5e12 * 1e6),       # memory-bound: bytes / 5 TB/s
    (F8, 4.0 * 4 * 32 * 4096 ** 2 * 128 / 1e15 * 1e6),  # compute-bound: FLOPs / 1000 TFLOP/s
])
def test_floor_is_the_slower_roof(shape: Shape, floor: float) -> None:
    assert floor_us(shape) == pytest.approx(floor)


def test_io_bytes_counts_q_k_v_and_o() -> None:
    assert io_bytes(F1) == 4 * 1 * 8 * 512 * 64 * 2


@pytest.mark.parametrize(("median", "baselines", "expect"), [
    (5.0, [baseline(F1, "sdpa_flash", 9.0)], ""),
    (4.0, [baseline(F1, "sdpa_flash", 9.0), baseline(F1, "sdpa_cudnn", 12.0)], "2.2x faster than sdpa_flash"),
    (4.0, [baseline(F8, "sdpa_flash", 9.0)], ""),               # another shape's baseline does not count
    (0.1, [], "below the roofline floor"),
])
def test_implausible(median: float, baselines: list[Timing], expect: str) -> None:
    why = implausible(F1, median, baselines)
    assert (expect in why) if expect else why == ""


@pytest.mark.parametrize(("flagged", "failed"), [
    ("", False), ("implausible: x; re-check passed", False), (f"implausible: x; {RECHECK_FAILED}: nan", True)])
def test_recheck_failed(flagged: str, failed: bool) -> None:
    assert recheck_failed(Timing(F1, "evo", 1, 1, 1, flagged=flagged)) is failed


@pytest.mark.gpu
def test_time_graph_sdpa_is_positive_and_steady() -> None:
    import torch

    from evo.timing import Rotation, make_inputs, sdpa_op, time_graph

    fn = Rotation(sdpa_op("sdpa_default", False), make_inputs(F1, seed=0))
    s = Stats.of(time_graph(fn, reps=30))
    torch.cuda.synchronize()
    assert 0.5 < s.median < 1000
    assert s.spread < 0.2 * s.median


@pytest.mark.gpu
def test_time_case_interleaves_candidate_and_backends() -> None:
    import torch

    from evo.timing import time_case

    def candidate(q, k, v, o):  # SDPA written into o: as fast as the default backend, plausible
        o.copy_(torch.nn.functional.scaled_dot_product_attention(q, k, v))

    out = time_case(candidate, F1, rounds=2, reps=5)
    assert out[0].backend == "evo" and {t.backend for t in out[1:]} <= set(BACKENDS)
    assert "sdpa_default" in {t.backend for t in out}
    assert all(t.median_us > 0 and len(t.samples_us) == 10 for t in out)
    assert out[0].flagged == ""


@pytest.mark.gpu
def test_gemm_rate_is_a_hopper_rate() -> None:
    from evo.timing import gemm_tflops

    assert 100 < gemm_tflops() < 1500

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


class FakeTimer:
    """Stands in for GraphTimer: answers a fixed time per (op name, input seed), logs samples."""

    log: list[str] = []
    us: dict[tuple[str, int], float] = {}

    def __init__(self, fn, *, warmup: int) -> None:
        self.name, self.seed = fn.op.name, fn.sets[0]
        self.replay_ms = 1.0

    def affordable(self, reps: int, budget_ms: float) -> int:
        return reps

    def sample(self, reps: int) -> list[float]:
        FakeTimer.log.append(self.name)
        return [FakeTimer.us[(self.name, self.seed)]] * reps

    def close(self) -> None:
        pass


def named(name: str):
    def op(q, k, v, o):
        return None
    op.name = name
    return op


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> type[FakeTimer]:
    monkeypatch.setattr("evo.timing.make_inputs", lambda shape, seed: [seed])
    monkeypatch.setattr("evo.timing.GraphTimer", FakeTimer)
    monkeypatch.setattr("evo.timing.sdpa_op", lambda backend, causal: named(backend))
    monkeypatch.setattr("evo.timing.runs", lambda op, inputs: op.name != "sdpa_cudnn")
    FakeTimer.log = []
    FakeTimer.us = {("evo", 0): 6.0, ("sdpa_flash", 0): 9.0, ("sdpa_default", 0): 8.0}
    return FakeTimer


def test_time_case_interleaves_rounds_and_skips_refusing_backends(fake_gpu: type[FakeTimer]) -> None:
    from evo.timing import time_case

    out = time_case(named("evo"), F1, ("sdpa_flash", "sdpa_cudnn", "sdpa_default"), rounds=3, reps=2)
    assert [t.backend for t in out] == ["evo", "sdpa_flash", "sdpa_default"]
    assert fake_gpu.log == ["evo", "sdpa_flash", "sdpa_default", "sdpa_flash", "sdpa_default", "evo",
                            "sdpa_default", "evo", "sdpa_flash"]
    assert [len(t.samples_us) for t in out] == [6, 6, 6] and out[0].flagged == ""


@pytest.mark.parametrize(("recheck", "note"), [(None, "re-check not run"), (lambda s: "", "re-check passed"),
                                               (lambda s: "NaN in output", f"{RECHECK_FAILED}: NaN in output")])
def test_implausible_candidate_is_remeasured_on_fresh_inputs_and_rechecked(fake_gpu: type[FakeTimer], recheck,
                                                                          note: str) -> None:
    from evo.timing import time_case

    fake_gpu.us |= {("evo", 0): 2.0, ("evo", 1): 3.0}   # 4x faster than flash; fresh inputs (seed 1): 3 us
    out = time_case(named("evo"), F1, ("sdpa_flash",), rounds=1, reps=3, recheck=recheck)
    assert out[0].median_us == 3.0 and out[0].samples_us == [3.0, 3.0, 3.0]
    assert out[0].flagged.startswith("implausible: 4.5x faster than sdpa_flash") and out[0].flagged.endswith(note)


def test_known_baselines_count_for_plausibility(fake_gpu: type[FakeTimer]) -> None:
    from evo.timing import time_case

    fake_gpu.us |= {("evo", 1): 6.0}
    out = time_case(named("evo"), F1, (), rounds=1, reps=1, known=[baseline(F1, "sdpa_default", 20.0)])
    assert [t.backend for t in out] == ["evo"] and "faster than sdpa_default" in out[0].flagged

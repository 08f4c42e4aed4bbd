"""FAST timing: statistics and plausibility rules on CPU; graph timing itself on a GPU."""

from __future__ import annotations

import math

import pytest

from evo.results import Fidelity, Shape, Timing
from evo.vocab import SDPA_BACKENDS
from evo.gpu.timing import (
    RECHECK_FAILED, Stats, disagrees, fidelity_of, floor_us, implausible, io_bytes, make_timing,
    narrowest, recheck_failed, too_wide,
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
@pytest.mark.quiet
def test_time_graph_sdpa_is_positive_and_steady() -> None:
    import torch

    from evo.gpu.timing import Rotation, make_inputs, sdpa_op, time_graph

    fn = Rotation(sdpa_op("sdpa_default", F1), make_inputs(F1, seed=0))
    s = Stats.of(time_graph(fn, reps=30))
    torch.cuda.synchronize()
    assert 0.5 < s.median < 1000
    assert s.spread < 0.2 * s.median


@pytest.mark.gpu
def test_time_case_interleaves_candidate_and_backends_checks_and_profiles() -> None:
    import torch

    from evo.gpu.suites import green_settings
    from evo.gpu.timing import time_case

    def candidate(q, k, v, o):  # SDPA written into o: as fast as the default backend, plausible
        o.copy_(torch.nn.functional.scaled_dot_product_attention(q, k, v))

    got = time_case(candidate, F1, rounds=2, reps=5, check=green_settings(), fidelity=True)
    out = got.timings
    assert out[0].backend == "evo" and {t.backend for t in out[1:]} <= set(SDPA_BACKENDS)
    assert "sdpa_default" in {t.backend for t in out}
    assert all(t.median_us > 0 and len(t.samples_us) == 10 for t in out)
    assert "implausible" not in out[0].flagged
    assert got.outputs_checked >= 1 and got.output_failure == ""
    assert all(t.fidelity is not None and min(t.fidelity.median_us, t.fidelity.busy_us, t.fidelity.events_us) > 0
               for t in out), \
        "torch.profiler gave no usable CUDA activity (none, or not in whole replays)"


@pytest.mark.gpu
def test_a_timed_output_that_goes_wrong_is_caught() -> None:
    """Right on its first launches (warm-up, capture), wrong in every replay: the output check
    names the replays; an op that stops writing is caught by the replay into poisoned outputs."""
    import torch

    from evo.gpu.suites import green_settings
    from evo.gpu.timing import time_case

    calls = [0]

    def goes_wrong(q, k, v, o):
        calls[0] += 1
        o.copy_(torch.nn.functional.scaled_dot_product_attention(q, k, v))
        if calls[0] > 4:            # captured from here on: every replay adds one
            o.add_(1.0)

    got = time_case(goes_wrong, F1, (), rounds=1, reps=3, check=green_settings(), remeasure=0)
    assert got.output_failure.startswith("after the timed replays, set 0 of"), got.output_failure
    assert "max|err|" in got.output_failure


@pytest.mark.gpu
def test_gemm_rate_is_a_hopper_rate() -> None:
    from evo.gpu.timing import gemm_tflops

    assert 100 < gemm_tflops() < 1500


class FakeTimer:
    """Stands in for GraphTimer: answers fixed samples per (op name, input seed, attempt), logs
    the order ops are sampled in. ``us`` values are a time or a list of samples."""

    log: list[str] = []
    us: dict[tuple[str, int, int], float | list[float]] = {}
    made: dict[str, int] = {}

    def __init__(self, fn, *, warmup: int) -> None:
        self.name, self.seed = fn.op.name, fn.sets[0]
        self.attempt = FakeTimer.made.get(self.name, 0)
        FakeTimer.made[self.name] = self.attempt + 1
        self.replay_ms, self.launches = 1.0, 1

    def affordable(self, reps: int, budget_ms: float) -> int:
        return reps

    def warm(self, ms: float) -> None:
        pass

    def sample(self, reps: int) -> list[float]:
        FakeTimer.log.append(self.name)
        us = FakeTimer.us.get((self.name, self.seed, self.attempt), FakeTimer.us.get((self.name, self.seed, 0)))
        return list(us) if isinstance(us, list) else [us] * reps

    def close(self) -> None:
        pass


class FakeInputs:
    def __init__(self, shape: Shape, seed: int) -> None:
        self.sets, self.guards = [seed], []


def named(name: str):
    def op(q, k, v, o):
        return None
    op.name = name
    return op


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> type[FakeTimer]:
    monkeypatch.setattr("evo.gpu.timing.InputSets", FakeInputs)
    monkeypatch.setattr("evo.gpu.timing.GraphTimer", FakeTimer)
    monkeypatch.setattr("evo.gpu.timing.sdpa_op", lambda backend, shape: named(backend))
    monkeypatch.setattr("evo.gpu.timing.refusal",
                        lambda op, inputs: "RuntimeError: no kernel" if op.name == "sdpa_cudnn" else "")
    monkeypatch.setattr("torch.cuda.empty_cache", lambda: None)
    FakeTimer.log, FakeTimer.made = [], {}
    FakeTimer.us = {("evo", 0, 0): 6.0, ("sdpa_flash", 0, 0): 9.0, ("sdpa_default", 0, 0): 8.0}
    return FakeTimer


def test_time_case_interleaves_rounds_and_skips_refusing_backends(fake_gpu: type[FakeTimer]) -> None:
    from evo.gpu.timing import time_case

    got = time_case(named("evo"), F1, ("sdpa_flash", "sdpa_cudnn", "sdpa_default"), rounds=3, reps=2)
    out = got.timings
    assert [t.backend for t in out] == ["evo", "sdpa_flash", "sdpa_default"]
    assert got.unavailable == {"sdpa_cudnn": "refused the case: RuntimeError: no kernel"}   # said, not dropped
    assert fake_gpu.log == ["evo", "sdpa_flash", "sdpa_default", "sdpa_flash", "sdpa_default", "evo",
                            "sdpa_default", "evo", "sdpa_flash"]
    assert [len(t.samples_us) for t in out] == [6, 6, 6] and out[0].flagged == ""


@pytest.mark.parametrize(("recheck", "note"), [(None, "re-check not run"), (lambda s: "", "re-check passed"),
                                               (lambda s: "NaN in output", f"{RECHECK_FAILED}: NaN in output")])
def test_implausible_candidate_is_remeasured_on_fresh_inputs_and_rechecked(fake_gpu: type[FakeTimer], recheck,
                                                                          note: str) -> None:
    from evo.gpu.timing import time_case

    fake_gpu.us |= {("evo", 0, 0): 2.0, ("evo", 1, 1): 3.0}   # 4x faster than flash; fresh inputs (seed 1): 3 us
    out = time_case(named("evo"), F1, ("sdpa_flash",), rounds=1, reps=3, recheck=recheck).timings
    assert out[0].median_us == 3.0 and out[0].samples_us == [3.0, 3.0, 3.0]
    assert out[0].flagged.startswith("implausible: 4.5x faster than sdpa_flash") and out[0].flagged.endswith(note)


def test_known_baselines_count_for_plausibility(fake_gpu: type[FakeTimer]) -> None:
    from evo.gpu.timing import time_case

    fake_gpu.us |= {("evo", 1, 1): 6.0}
    out = time_case(named("evo"), F1, (), rounds=1, reps=1, known=[baseline(F1, "sdpa_default", 20.0)]).timings
    assert [t.backend for t in out] == ["evo"] and "faster than sdpa_default" in out[0].flagged


WIDE = [8.0, 10.0, 12.0, 9.0, 11.0]
NARROW = [10.0, 10.1, 9.9, 10.0, 10.05]


def test_a_wide_spread_is_measured_again_not_recorded(fake_gpu: type[FakeTimer]) -> None:
    from evo.gpu.timing import time_case

    fake_gpu.us |= {("evo", 0, 0): WIDE, ("evo", 0, 1): NARROW}
    out = time_case(named("evo"), F1, ("sdpa_flash",), rounds=1, reps=5).timings
    assert fake_gpu.made == {"evo": 2, "sdpa_flash": 2}          # the whole case, again
    assert out[0].samples_us == NARROW and out[0].flagged == ""


def test_a_spread_that_stays_wide_is_recorded_narrowest_and_flagged(fake_gpu: type[FakeTimer]) -> None:
    from evo.gpu.timing import time_case

    wider = [5.0, 10.0, 15.0, 7.0, 13.0]
    fake_gpu.us |= {("evo", 0, 0): wider, ("evo", 0, 1): WIDE, ("evo", 0, 2): wider}
    out = time_case(named("evo"), F1, (), rounds=1, reps=5, remeasure=2).timings
    assert fake_gpu.made == {"evo": 3}
    assert out[0].samples_us == WIDE and out[0].flagged.startswith("spread 24% > 5% after 3 measurements")


def test_a_wrong_timed_output_stops_the_case(fake_gpu: type[FakeTimer], monkeypatch: pytest.MonkeyPatch) -> None:
    from evo.gpu.suites import green_settings
    from evo.gpu.timing import CaseRun, time_case

    monkeypatch.setattr(CaseRun, "check_outputs", lambda self, name, settings: (4, "set 2 of 4: NaN in output"))
    fake_gpu.us |= {("evo", 0, 0): WIDE}                       # would be measured again if it were right
    got = time_case(named("evo"), F1, (), rounds=1, reps=5, check=green_settings())
    assert (got.outputs_checked, got.output_failure) == (4, "set 2 of 4: NaN in output")
    assert fake_gpu.made == {"evo": 1}


def test_timed_outputs_are_counted_over_every_attempt(fake_gpu: type[FakeTimer], monkeypatch: pytest.MonkeyPatch) -> None:
    from evo.gpu.suites import green_settings
    from evo.gpu.timing import CaseRun, time_case

    seen = []
    monkeypatch.setattr(CaseRun, "check_outputs", lambda self, name, settings: (seen.append(name) or 3, ""))
    fake_gpu.us |= {("evo", 0, 0): WIDE, ("evo", 0, 1): NARROW}
    got = time_case(named("evo"), F1, ("sdpa_flash",), rounds=1, reps=5, check=green_settings())
    assert seen == ["evo", "evo"] and (got.outputs_checked, got.output_failure) == (6, "")


def test_profiled_timings_carry_fidelity_and_disagreement_is_flagged(fake_gpu: type[FakeTimer],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from evo.gpu.timing import time_case

    profiled = {"evo": Fidelity(6.1, 6.0, 6.2, 5.9, 10), "sdpa_flash": Fidelity(7.5, 7.4, 7.6, 7.0, 10)}
    monkeypatch.setattr("evo.gpu.timing.profile", lambda timer: profiled[timer.name])
    out = time_case(named("evo"), F1, ("sdpa_flash",), rounds=1, reps=2, fidelity=True).timings
    assert [t.fidelity for t in out] == [profiled["evo"], profiled["sdpa_flash"]]
    assert out[0].flagged == ""
    assert out[1].flagged == "FAST 9.00 us outside the profiler's 7.00 (kernels) to 7.50 us (span) by more than 5% (x1.200)"


def test_a_case_the_profiler_does_not_confirm_is_measured_again(fake_gpu: type[FakeTimer],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """First attempt: the profiler puts sdpa_flash's launches at 7.0-7.5 us, FAST at 9: measured
    again; the second attempt agrees, and that is the one recorded, unflagged."""
    from evo.gpu.timing import time_case

    answers = iter([Fidelity(6.1, 6.0, 6.2, 5.9, 10), Fidelity(7.5, 7.4, 7.6, 7.0, 10),
                    Fidelity(6.1, 6.0, 6.2, 5.9, 10), Fidelity(9.1, 9.0, 9.2, 8.8, 10)])
    monkeypatch.setattr("evo.gpu.timing.profile", lambda timer: next(answers))
    out = time_case(named("evo"), F1, ("sdpa_flash",), rounds=1, reps=2, fidelity=True).timings
    assert [t.fidelity.median_us for t in out if t.fidelity] == [6.1, 9.1]
    assert [t.flagged for t in out] == ["", ""]
    assert next(answers, None) is None                      # two attempts, no third


# ----------------------------------------------------------------------------- policies


@pytest.mark.parametrize(("samples", "wide"), [(NARROW, False), (WIDE, True), ([4.0] * 3, False)])
def test_too_wide(samples: list[float], wide: bool) -> None:
    assert bool(too_wide({"evo": samples})) is wide


def test_narrowest_attempt_prefers_the_smallest_widest_spread_then_the_latest() -> None:
    assert narrowest([{"a": WIDE, "b": NARROW}, {"a": NARROW, "b": NARROW}, {"a": WIDE}]) == 1
    assert narrowest([{"a": NARROW}, {"a": NARROW}]) == 1


def test_fidelity_groups_device_activity_by_replay() -> None:
    # 3 replays of 2 launches, each launch one 4 us kernel after a 1 us gap
    events = [(r * 100.0 + i * 5.0 + 1.0, r * 100.0 + i * 5.0 + 5.0) for r in range(3) for i in range(2)]
    f = fidelity_of(events[::-1], replays=3, launches=2)
    assert f is not None and (f.median_us, f.busy_us, f.replays) == pytest.approx((4.5, 4.0, 3))


@pytest.mark.parametrize(("events", "replays"), [([], 2), ([(0.0, 1.0)] * 3, 2)])
def test_fidelity_of_unusable_activity_is_none(events: list[tuple[float, float]], replays: int) -> None:
    assert fidelity_of(events, replays, 1) is None


@pytest.mark.parametrize(("profiled", "flag"), [(None, ""), (10.4, ""), (9.6, ""), (10.6, "x0.943"), (9.0, "x1.111")])
def test_disagreement(profiled: float | None, flag: str) -> None:
    fid = None if profiled is None else Fidelity(profiled, profiled, profiled, profiled, 5)
    why = disagrees(Timing(F1, "evo", 10.0, 10.0, 10.0, fidelity=fid))
    assert (flag in why) if flag else why == ""


@pytest.mark.parametrize(("fast", "flag"), [(10.0, ""), (8.1, ""), (12.3, ""), (7.9, "x0.940"), (12.5, "x1.059")])
def test_a_two_kernel_launch_is_checked_against_the_bracket_of_busy_and_span(fast: float, flag: str) -> None:
    """cuDNN's F1 on an H100: kernels busy 8.4 us, span 11.8 us under the profiler (each gap
    lengthened), FAST 10.1 us. FAST must lie in [busy, span], 5% either side."""
    fid = Fidelity(11.8, 11.7, 11.9, 8.4, 10, 11.8)
    why = disagrees(Timing(F1, "sdpa_cudnn", fast, fast, fast, fidelity=fid))
    assert (flag in why and "8.40 (kernels) to 11.80 us (span)" in why) if flag else why == ""


# ----------------------------------------------------------------------------- graph timing on a virtual GPU


class VirtualGpu:
    """torch.cuda's streams, events and graphs over a virtual clock: an op adds its cost in ms
    to the clock when it runs eagerly, to the graph being captured when it is captured; a
    replay adds the graph's cost. Event times are read off that clock, so GraphTimer's choices
    (launches per graph, recapture, warm-up, samples) are checked exactly, with no real time."""

    def __init__(self) -> None:
        import contextlib

        self.clock = 0.0
        self.capturing: VirtualGpu.Graph | None = None
        self.replays = 0
        gpu = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at = 0.0

            def record(self) -> None:
                self.at = gpu.clock

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, end: Event) -> float:
                return end.at - self.at

        class Graph:
            def __init__(self) -> None:
                self.cost = 0.0

            def replay(self) -> None:
                gpu.clock += self.cost
                gpu.replays += 1

            def reset(self) -> None:
                self.cost = 0.0

        @contextlib.contextmanager
        def graph(g: Graph, stream: object = None):  # noqa: ANN202 - torch.cuda.graph's shape
            gpu.capturing = g
            try:
                yield
            finally:
                gpu.capturing = None

        self.Event, self.Graph, self.graph = Event, Graph, graph

    def work(self, ms: float) -> None:
        if self.capturing is not None:
            self.capturing.cost += ms
        else:
            self.clock += ms

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import contextlib

        import torch

        stream = type("Stream", (), {"wait_stream": lambda self, other: None})
        monkeypatch.setattr(torch.cuda, "Stream", stream)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: stream())
        monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "Event", self.Event)
        monkeypatch.setattr(torch.cuda, "CUDAGraph", self.Graph)
        monkeypatch.setattr(torch.cuda, "graph", self.graph)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> VirtualGpu:
    v = VirtualGpu()
    v.install(monkeypatch)
    return v


def test_a_graph_holds_enough_launches_for_a_one_ms_replay(gpu: VirtualGpu) -> None:
    from evo.gpu.timing import GraphTimer

    timer = GraphTimer(lambda: gpu.work(0.004))  # 4 us a launch: 250 launches fill 1 ms
    assert timer.launches == 250 and timer.replay_ms == pytest.approx(1.0)
    assert timer.sample(5) == pytest.approx([4.0] * 5)


def test_a_replay_shorter_than_the_eager_guess_is_recaptured_with_more_launches(gpu: VirtualGpu) -> None:
    from evo.gpu.timing import GraphTimer

    calls = {"eager": 0}

    def op() -> None:  # host overhead makes the eager call look 10x longer than the launch
        if gpu.capturing is None:
            calls["eager"] += 1
            gpu.work(0.04)
        else:
            gpu.work(0.004)

    timer = GraphTimer(op, warmup=3)
    assert calls["eager"] == 3 and timer.launches == 300 and timer.replay_ms == pytest.approx(1.2)


def test_launches_round_up_to_whole_rotations_and_stop_at_the_maximum(gpu: VirtualGpu) -> None:
    from evo.gpu.timing import MAX_LAUNCHES, GraphTimer, Rotation

    sets = [(i, i, i, f"o{i}") for i in range(3)]
    rotation = Rotation(lambda q, k, v, o: gpu.work(0.004), sets)
    assert GraphTimer(rotation).launches == 252  # 250 rounded up to a multiple of 3 input sets
    assert GraphTimer(lambda: gpu.work(1e-7)).launches == MAX_LAUNCHES
    assert GraphTimer(lambda: gpu.work(0.01), launches=7).launches == 7


def test_sampling_warms_up_with_untimed_replays_first(gpu: VirtualGpu) -> None:
    from evo.gpu.timing import WARM_MS, GraphTimer, time_graph

    timer = GraphTimer(lambda: gpu.work(0.01))  # 1 ms replays
    before = gpu.replays
    timer.sample(4)
    assert gpu.replays - before == 4 + 4  # as long as the samples take (under WARM_MS), then the samples
    before = gpu.replays
    timer.sample(50)
    assert gpu.replays - before == round(WARM_MS) + 50
    assert timer.affordable(100, budget_ms=10.5 * timer.replay_ms) == 10 and timer.affordable(100, budget_ms=0) == 3
    assert time_graph(lambda: gpu.work(0.002), reps=3) == pytest.approx([2.0] * 3)


def _case_run(ops: dict[str, object], shape: Shape = F1, seed: int = 0) -> object:
    """A CaseRun over already-captured timers (the inputs of a real one need a GPU)."""
    from evo.gpu.timing import CaseRun

    run = CaseRun.__new__(CaseRun)
    run.timers, run.fidelity, run.shape, run.seed = dict(ops), {}, shape, seed  # type: ignore[attr-defined]
    return run


def test_the_cases_seed_picks_the_op_a_round_starts_with(gpu: VirtualGpu, monkeypatch: pytest.MonkeyPatch) -> None:
    """A search's full rung samples one round: the candidate goes first in half the cases, the
    paired baseline in the other half, so neither is always timed right after the other case."""
    import evo.gpu.timing
    from evo.gpu.timing import GraphTimer

    firsts = []
    for seed in range(4):
        notes: list[str] = []
        monkeypatch.setattr(evo.gpu.timing, "progress", notes.append)
        run = _case_run({name: GraphTimer(lambda: gpu.work(0.5)) for name in ("evo", "sdpa_cudnn")}, F8, seed)
        run.sample(rounds=1, reps=4, budget_ms=1000.0)  # type: ignore[attr-defined]
        firsts.append(notes[0].split()[2])
    assert firsts == ["evo", "sdpa_cudnn", "evo", "sdpa_cudnn"]


def test_sampling_a_case_reports_progress_after_each_ops_samples(gpu: VirtualGpu,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import evo.gpu.timing
    from evo.gpu.timing import GraphTimer

    notes: list[str] = []
    monkeypatch.setattr(evo.gpu.timing, "progress", notes.append)
    run = _case_run({name: GraphTimer(lambda: gpu.work(0.5)) for name in ("evo", "sdpa_cudnn")})
    run.sample(rounds=2, reps=4, budget_ms=1000.0)  # type: ignore[attr-defined]
    # the worker's stall limit sees a long case alive between ops, not only between cases
    assert notes == ["FAST F1-fp16 evo round 1/2", "FAST F1-fp16 sdpa_cudnn round 1/2",
                     "FAST F1-fp16 sdpa_cudnn round 2/2", "FAST F1-fp16 evo round 2/2"]


@pytest.mark.parametrize(("shape", "launch_ms", "ops", "expected"), [
    (F8, 0.5, 2, 3 * (300 + 4 + 4) + (4 + 4)),  # long, interleaved: an op settles unless it ran just
                                                # before (round 2 starts with the op that ended round 1)
    (F8, 0.5, 1, (300 + 4 + 4) + (4 + 4)),      # long, alone: it settles once
    (F8, 0.004, 1, (300 + 4 + 4) + (4 + 4)),    # a short launch in a long case settles all the same
    (F1, 0.5, 2, 2 * 2 * (4 + 4)),              # a long launch in a short case: the usual warm-up only
    (F1, 0.004, 2, 2 * 2 * (4 + 4)),
])
def test_a_long_case_times_each_op_in_its_own_steady_state(gpu: VirtualGpu, shape: Shape, launch_ms: float,
                                                           ops: int, expected: int) -> None:
    from evo.gpu.timing import STEADY_WARM_MS, GraphTimer

    assert STEADY_WARM_MS == 300.0
    run = _case_run({f"op{i}": GraphTimer(lambda: gpu.work(launch_ms)) for i in range(ops)}, shape)
    before = gpu.replays
    got = run.sample(rounds=2, reps=4, budget_ms=1000.0)  # type: ignore[attr-defined]
    assert gpu.replays - before == expected    # 1 ms replays: warm-ups counted in replays
    assert all(len(s) == 8 for s in got.values())


def test_a_burst_times_a_long_case_like_a_short_one(gpu: VirtualGpu) -> None:
    """`evo bench --clocks burst`: F8 sampled as F1 is, every op after its 20 ms warm-up only (the
    counts of the steady-state test above, less its 300 ms settles); an unknown protocol is refused
    before anything runs."""
    from evo.errors import EvoError
    from evo.gpu.timing import GraphTimer, time_case

    run = _case_run({f"op{i}": GraphTimer(lambda: gpu.work(0.5)) for i in range(2)}, F8)
    before = gpu.replays
    got = run.sample(rounds=2, reps=4, budget_ms=1000.0, clocks="burst")  # type: ignore[attr-defined]
    assert gpu.replays - before == 2 * 2 * (4 + 4)
    assert all(len(s) == 8 for s in got.values())
    with pytest.raises(EvoError, match="unknown clock protocol 'boost'"):
        time_case(None, F8, (), clocks="boost")
    assert gpu.replays - before == 2 * 2 * (4 + 4)


def test_the_clock_rule_is_the_cases_whatever_is_timed_beside_the_candidate() -> None:
    """F4-F8 are long cases and F1-F3 are not, causal or not: the rule reads the shape, so a
    candidate is timed the same way alone, beside one baseline or beside every backend (it once
    read the ops' launches, and promote's confirmation of F4c beside cuDNN alone ran at boost
    clocks where the bench's, beside the slow memory-efficient backend, ran in steady state)."""
    from evo.gpu.suites import fast_cases
    from evo.gpu.timing import steady_case

    got = {s.tag: steady_case(s) for s in fast_cases()}
    assert len(got) == 16
    assert {t for t, long in got.items() if long} == {f"F{i}{c}-fp16" for i in range(4, 9) for c in ("", "c")}


def test_a_rotation_cycles_the_input_sets_and_remembers_each_output() -> None:
    from evo.gpu.timing import Rotation

    sets = [(i, i, i, f"o{i}") for i in range(3)]
    seen: list[int] = []
    rot = Rotation(lambda q, k, v, o: seen.append(q) or (None if q == 1 else f"new{q}"), sets)
    for _ in range(4):
        rot()
    assert seen == [0, 1, 2, 0] and rot.period == 3
    assert rot.outputs == {0: "new0", 1: "o1", 2: "new2"}  # a returned tensor, else o itself


def test_input_sets_overflow_l2_within_bounds() -> None:
    from evo.gpu.timing import L2_FACTOR, MAX_INPUT_SETS, io_bytes, set_count

    l2 = 50 * 2**20
    assert set_count(F1, l2) == math.ceil(L2_FACTOR * l2 / io_bytes(F1))
    assert set_count(F8, l2) == 1 and set_count(Shape("t", 1, 1, 8, 8, False), l2) == MAX_INPUT_SETS


def test_sdpa_backends_that_refuse_the_inputs_are_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from evo.gpu.timing import refusal, runs, sdpa_op

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    inputs = tuple(torch.randn(1, 2, 16, 64) for _ in range(4))
    full, causal = Shape("t", 1, 2, 16, 64, False), Shape("t", 1, 2, 16, 64, True)
    assert runs(sdpa_op("sdpa_default", causal), inputs)
    assert not runs(sdpa_op("sdpa_cudnn", full), inputs)  # no cuDNN kernel for CPU tensors
    assert refusal(sdpa_op("sdpa_cudnn", full), inputs).startswith("RuntimeError: ")   # and why
    out = sdpa_op("sdpa_default", full)(*inputs)
    assert out.shape == inputs[0].shape

    def faulting(*args: object) -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    with pytest.raises(RuntimeError, match="CUDA error"):
        runs(faulting, inputs)


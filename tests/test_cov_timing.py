"""evo/gpu/timing.py's case runs on CPU: CaseRun over CPU input sets and a timer whose "replay"
runs the captured launches eagerly, so the checks of timed outputs (out-of-bounds writes, a
kernel that goes wrong or stops writing after many launches), the optional backends that
cannot be captured, the re-measure of an implausible result and the profiler's fidelity run
their real code on real tensors. tests/test_timing.py covers the statistics and the graph
timer on a virtual clock; the GPU tests cover CUDA graphs themselves."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from evo.gpu import timing
from evo.gpu.gate import GuardedOutput
from evo.results import Fidelity, Shape, Timing
from evo.gpu.suites import GreenSettings
from evo.gpu.timing import CaseRun, time_case

SHAPE = Shape("t", 1, 2, 24, 16, False)
SETTINGS = GreenSettings(seeds=(0,), multiplier=2.0, floors={"fp16": 5e-4, "bf16": 4e-3}, guard_elements=32)
SETS = 3
GUARD = 32


class CpuInputs:
    """timing.InputSets on CPU: ``SETS`` seeded (q, k, v) sets, each with its own poisoned,
    guarded output; :meth:`fresh` draws the same q, k, v again. Counts how many were made
    (one per attempt of a case)."""

    made = 0

    def __init__(self, shape: Shape, seed: int) -> None:
        CpuInputs.made += 1
        self.shape, self.seed = shape, seed
        self.guards = [GuardedOutput(shape, GUARD, "cpu") for _ in range(SETS)]
        for g in self.guards:
            g.poison()
        self.sets = [(q, k, v, g.out) for (q, k, v), g in zip(self.fresh(), self.guards, strict=True)]

    def fresh(self) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        gen = torch.Generator().manual_seed(self.seed)
        s = self.shape
        return [tuple(torch.randn(s.B, s.H, s.L, s.D, generator=gen).half() for _ in range(3))  # type: ignore[misc]
                for _ in range(SETS)]


class EagerTimer:
    """GraphTimer on CPU: warm-up calls, then a "graph" of one rotation period whose replay
    runs its launches eagerly. Samples are fixed per op (``US``), replays are counted."""

    US: dict[str, float] = {}
    fail: dict[str, Exception] = {}
    closed: list[str] = []

    def __init__(self, fn: Callable[[], Any], *, warmup: int) -> None:
        self.name = fn.op.__name__
        if self.name in EagerTimer.fail:
            raise EagerTimer.fail[self.name]
        self.fn, self.period = fn, fn.period
        for _ in range(warmup):
            fn()
        self.launches, self.replay_ms = self.period, 1.0
        self.replays = 0

    def replay(self, times: int = 1) -> None:
        for _ in range(times * self.period):
            self.fn()
        self.replays += times

    def warm(self, ms: float) -> None:
        pass

    def affordable(self, reps: int, budget_ms: float) -> int:
        return reps

    def sample(self, reps: int) -> list[float]:
        self.replay(reps)
        return [EagerTimer.US.get(self.name, 10.0)] * reps

    def _replays(self, reps: int) -> list[float]:
        self.replay(reps)
        return [self.replay_ms] * reps

    def close(self) -> None:
        EagerTimer.closed.append(self.name)


@pytest.fixture
def cpu_case(monkeypatch: pytest.MonkeyPatch) -> type[EagerTimer]:
    monkeypatch.setattr(timing, "InputSets", CpuInputs)
    monkeypatch.setattr(timing, "GraphTimer", EagerTimer)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    EagerTimer.US, EagerTimer.fail, EagerTimer.closed = {}, {}, []
    CpuInputs.made = 0
    return EagerTimer


def sdpa_into(o: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    o.copy_(torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float()).half())


def evo(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor) -> None:
    """An honest candidate: SDPA written into o."""
    sdpa_into(o, q, k, v)


def counting(after: int, then: Callable[..., None]) -> Callable[..., None]:
    """A candidate named evo that is honest for ``after`` calls, then does ``then``."""
    calls = [0]

    def evo(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor) -> None:
        calls[0] += 1
        if calls[0] <= after:
            sdpa_into(o, q, k, v)
        else:
            then(q, k, v, o)

    return evo


def test_the_timed_outputs_of_an_honest_kernel_pass_both_checks(cpu_case: type[EagerTimer]) -> None:
    run = CaseRun({"evo": evo}, SHAPE, optional=(), seed=5, warmup=2)
    try:
        samples = run.sample(rounds=2, reps=3, budget_ms=100.0)
        assert samples == {"evo": [10.0] * 6}
        before = run.timers["evo"].replays
        assert run.check_outputs("evo", SETTINGS) == (SETS, "")
        assert run.timers["evo"].replays == before + 1  # one more replay, into poisoned outputs
        assert all(g.unwritten() == 0 for g in run.inputs.guards)  # ... which it wrote again
    finally:
        run.close()
    assert cpu_case.closed == ["evo"] and run.timers == {} and run.inputs.sets == []


def test_a_kernel_that_goes_wrong_after_its_first_launches_is_named_with_its_set(cpu_case: type[EagerTimer]) -> None:
    def off_by_one(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor) -> None:
        sdpa_into(o, q, k, v)
        o.add_(1.0)

    run = CaseRun({"evo": counting(2, off_by_one)}, SHAPE, optional=(), seed=0, warmup=2)  # right while warming
    run.sample(rounds=1, reps=2, budget_ms=100.0)
    checked, why = run.check_outputs("evo", SETTINGS)
    run.close()
    assert checked == SETS
    assert why.startswith(f"after the timed replays, set 0 of {SETS}: max|err| 1.0e+00 > tol"), why


def test_a_kernel_that_stops_writing_is_caught_by_the_replay_into_poisoned_outputs(cpu_case: type[EagerTimer]) -> None:
    # 2 warm-up calls + 1 round of 2 replays of 3 launches: right for all of them, then silent
    run = CaseRun({"evo": counting(2 + 2 * SETS, lambda *qkvo: None)}, SHAPE, optional=(), seed=0, warmup=2)
    run.sample(rounds=1, reps=2, budget_ms=100.0)
    _, why = run.check_outputs("evo", SETTINGS)
    run.close()
    n = SHAPE.B * SHAPE.H * SHAPE.L * SHAPE.D
    assert why == f"after one more replay into poisoned outputs, set 0 of {SETS}: unwritten: {n} of {n} output elements"


def test_a_write_past_the_output_is_caught_before_anything_is_replayed_again(cpu_case: type[EagerTimer]) -> None:
    def spills(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor) -> None:
        sdpa_into(o, q, k, v)
        torch.as_strided(o, (o.numel() + 2,), (1,)).narrow(0, o.numel(), 2).zero_()  # two elements past the end

    run = CaseRun({"evo": counting(2, spills)}, SHAPE, optional=(), seed=0, warmup=2)
    run.sample(rounds=1, reps=1, budget_ms=100.0)
    replays = run.timers["evo"].replays
    why = run.check_outputs("evo", SETTINGS)
    run.close()
    assert why == (SETS, f"set 0 of {SETS}: wrote out of bounds while timed: 2 guard elements changed")
    assert run.timers == {} and replays == 1  # no replay into poisoned outputs was made


def sdpa_flash(q: Any, k: Any, v: Any, o: Any) -> Any:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def sdpa_cudnn(q: Any, k: Any, v: Any, o: Any) -> Any:
    raise RuntimeError("No available kernel. Aborting execution.")  # refuses the shape


def sdpa_efficient(q: Any, k: Any, v: Any, o: Any) -> Any:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def test_an_optional_backend_that_cannot_be_captured_is_left_out(cpu_case: type[EagerTimer]) -> None:
    cpu_case.fail = {"sdpa_efficient": RuntimeError("operation not permitted when stream is capturing")}
    ops = {"evo": evo, "sdpa_flash": sdpa_flash, "sdpa_cudnn": sdpa_cudnn, "sdpa_efficient": sdpa_efficient}
    run = CaseRun(ops, SHAPE, optional=("sdpa_flash", "sdpa_cudnn", "sdpa_efficient"), seed=0, warmup=1)
    assert list(run.timers) == list(run.rotations) == ["evo", "sdpa_flash"]
    assert set(run.sample(rounds=1, reps=1, budget_ms=10.0)) == {"evo", "sdpa_flash"}
    run.close()


def test_a_required_op_that_cannot_be_captured_frees_what_was_made_and_propagates(cpu_case: type[EagerTimer]) -> None:
    cpu_case.fail = {"evo": RuntimeError("CUDA error: an illegal memory access was encountered")}
    with pytest.raises(RuntimeError, match="illegal memory access"):
        CaseRun({"sdpa_flash": sdpa_flash, "evo": evo}, SHAPE, optional=("sdpa_flash",), seed=0, warmup=1)
    assert cpu_case.closed == ["sdpa_flash"]  # the backend's timer, made before the candidate failed


def test_a_case_no_op_can_run_samples_nothing(cpu_case: type[EagerTimer]) -> None:
    run = CaseRun({"sdpa_cudnn": sdpa_cudnn}, SHAPE, optional=("sdpa_cudnn",), seed=0, warmup=1)
    assert run.timers == {} and run.sample(rounds=3, reps=5, budget_ms=10.0) == {}
    run.close()


def test_a_wrong_output_during_the_remeasure_of_an_implausible_result_ends_the_case(cpu_case: type[EagerTimer]) -> None:
    def evo(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor) -> None:
        sdpa_into(o, q, k, v)
        if CpuInputs.made > 1:  # the second attempt (the fresh inputs of the re-measure): wrong
            o.mul_(2.0)

    cpu_case.US = {"evo": 1.0}   # 20x faster than a known baseline: implausible
    got = time_case(evo, SHAPE, (), rounds=1, reps=2, check=SETTINGS,
                    known=[Timing(SHAPE, "sdpa_default", 20.0, 20.0, 20.0)], recheck=lambda s: "")
    assert CpuInputs.made == 2 and got.outputs_checked == 2 * SETS
    assert got.output_failure.startswith(f"after the timed replays, set 0 of {SETS}: max|err|")
    ((t,),) = [got.timings]
    assert t.backend == "evo" and t.median_us == 1.0 and t.flagged == ""  # the first measurement, not a re-check note


def test_the_torch_dtype_of_each_gated_dtype() -> None:
    assert timing._torch_dtype("fp16") is torch.float16 and timing._torch_dtype("bf16") is torch.bfloat16
    with pytest.raises(KeyError):
        timing._torch_dtype("fp8")


# ----------------------------------------------------------------------------- the profiler's fidelity


class ProfiledGpu:
    """torch.cuda's events and a graph replay on a virtual clock, and torch.profiler's profile
    recording what a CUDA build's profiler records while it is active: each replay's kernel
    launches (CUDA), a stream synchronisation (CUDA, named ...Synchronize) and the host call (CPU)."""

    def __init__(self, launch_us: float, gap_us: float) -> None:
        self.clock_us = 0.0
        self.launch_us, self.gap_us = launch_us, gap_us
        self.recording: list[Any] | None = None
        gpu = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at = 0.0

            def record(self) -> None:
                self.at = gpu.clock_us

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, end: Event) -> float:
                return (end.at - self.at) / 1e3

        @contextlib.contextmanager
        def profile(activities: list[Any]) -> Iterator[Any]:
            assert [str(a) for a in activities] == ["ProfilerActivity.CUDA"]
            gpu.recording = []
            events = gpu.recording
            yield SimpleNamespace(events=lambda: events)
            gpu.recording = None

        self.Event, self.profile = Event, profile

    def _event(self, name: str, device: str, start: float, end: float) -> Any:
        from torch.autograd import DeviceType

        return SimpleNamespace(name=name, device_type=getattr(DeviceType, device),
                               time_range=SimpleNamespace(start=start, end=end))

    def replay(self, launches: int) -> None:
        start = self.clock_us
        for _ in range(launches):
            self.clock_us += self.gap_us
            if self.recording is not None:
                self.recording.append(self._event("evo_attn_d64_fp16_full", "CUDA", self.clock_us,
                                                  self.clock_us + self.launch_us))
            self.clock_us += self.launch_us
        if self.recording is not None:
            self.recording.append(self._event("cudaStreamSynchronize", "CUDA", self.clock_us, self.clock_us + 50))
            self.recording.append(self._event("cudaGraphLaunch", "CPU", start, start + 3))


def profiled_timer(monkeypatch: pytest.MonkeyPatch, launches: int) -> tuple[ProfiledGpu, timing.GraphTimer]:
    """A captured graph of ``launches`` 4 us launches 1 us apart, on a ProfiledGpu that stands
    in for CUDA events, streams and torch.profiler."""
    import torch.profiler

    gpu = ProfiledGpu(launch_us=4.0, gap_us=1.0)
    monkeypatch.setattr(torch.cuda, "Event", gpu.Event)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.profiler, "profile", gpu.profile)
    timer = timing.GraphTimer.__new__(timing.GraphTimer)
    timer.stream, timer.launches, timer.replay_ms = None, launches, launches * 5.0 / 1e3
    timer.graph = SimpleNamespace(replay=lambda: gpu.replay(timer.launches))
    return gpu, timer


def test_profiled_replays_give_per_launch_times_from_kernel_timestamps(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu, timer = profiled_timer(monkeypatch, launches=8)
    got = timing.profile(timer, replays=4)
    # per launch: first start to last end (4 us + the gaps between), kernels alone 4 us, events 5 us
    assert got == Fidelity(median_us=pytest.approx(39.0 / 8), p20_us=pytest.approx(39.0 / 8),
                           p80_us=pytest.approx(39.0 / 8), busy_us=pytest.approx(4.0), replays=4,
                           events_us=pytest.approx(5.0))
    assert gpu.recording is None


def test_a_profiler_that_saw_no_whole_replays_gives_no_fidelity(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu, timer = profiled_timer(monkeypatch, launches=3)
    lost = []

    def replay() -> None:  # CUPTI lost one kernel of the first profiled replay
        gpu.replay(timer.launches)
        if gpu.recording is not None and not lost:
            lost.append(gpu.recording.pop(0))

    timer.graph = SimpleNamespace(replay=replay)
    assert timing.profile(timer, replays=2) is None

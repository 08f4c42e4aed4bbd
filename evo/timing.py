"""FAST timing: device time per launch from CUDA-graph replays, candidate and SDPA alike.

Why this shape (DESIGN.md, FAST): host overhead must not count, so ``launches_per_graph``
calls are captured in one ``torch.cuda.CUDAGraph`` (after warm-up, on a side stream) and each
replay is bracketed by CUDA events; a sample is elapsed / launches, and a replay lasts at least
about 1 ms so event resolution does not matter. Small shapes would otherwise be timed with
their inputs resident in L2, so the captured launches rotate over several input sets whose
total is over twice the L2 size. The SDPA backends are timed by the same code on the same
inputs, and :func:`time_case` interleaves them with the candidate round by round so clock or
thermal drift hits every backend alike. A candidate that beats the roofline floor or the best
baseline by more than 2x is re-measured on fresh inputs and re-checked before it counts.

Everything that touches the GPU imports torch lazily, so the statistics and the plausibility
rules are usable (and tested) without one.
"""

from __future__ import annotations

import collections
import math
import statistics
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evo.results import Shape, Timing

if TYPE_CHECKING:
    import torch

BACKENDS = ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_default")
EVO = "evo"
PEAK_TFLOPS = 1000.0          # no Hopper part does dense fp16 attention above this
PEAK_TBPS = 5.0               # nor moves HBM bytes faster than this
IMPLAUSIBLE_SPEEDUP = 2.0     # faster than the best baseline by more than this is re-checked
TARGET_REPLAY_MS = 1.0        # one replay lasts at least this long
MAX_LAUNCHES = 4096           # launches captured in one graph, at most
MAX_INPUT_SETS = 64
LONG_REPLAY_MS = 5.0          # replays this long need no untimed warm-up replay
CASE_BUDGET_MS = 400.0        # replay time spent per op per case, about (slow kernels get fewer reps)
L2_FACTOR = 2.5               # rotated inputs total this many L2 sizes
RECHECK_FAILED = "re-check FAILED"
ELEMENT_BYTES = {"fp16": 2, "bf16": 2}

# A kernel under test: reads q, k, v (B, H, L, D), writes o or returns its own output.
Op = Callable[["torch.Tensor", "torch.Tensor", "torch.Tensor", "torch.Tensor"], Any]


# ----------------------------------------------------------------------------- statistics


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile of sorted data (numpy's default method)."""
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class Stats:
    """Median and 20th/80th percentiles of timing samples (microseconds)."""

    median: float
    p20: float
    p80: float
    n: int

    @property
    def spread(self) -> float:
        return self.p80 - self.p20

    @classmethod
    def of(cls, samples: Iterable[float]) -> Stats:
        ordered = sorted(samples)
        if not ordered:
            raise ValueError("no timing samples")
        return cls(statistics.median(ordered), _quantile(ordered, 0.2), _quantile(ordered, 0.8), len(ordered))


def make_timing(shape: Shape, backend: str, samples: Sequence[float], flagged: str = "") -> Timing:
    s = Stats.of(samples)
    return Timing(shape, backend, s.median, s.p20, s.p80, list(samples), flagged)


# ----------------------------------------------------------------------------- plausibility


def io_bytes(shape: Shape) -> float:
    """Bytes a forward pass must move at least: Q, K, V read once, O written once."""
    return 4.0 * shape.B * shape.H * shape.L * shape.D * ELEMENT_BYTES[shape.dtype]


def floor_us(shape: Shape) -> float:
    """The roofline floor: no kernel can be faster than this on any Hopper part."""
    return max(shape.flops / (PEAK_TFLOPS * 1e12), io_bytes(shape) / (PEAK_TBPS * 1e12)) * 1e6


def implausible(shape: Shape, median_us: float, baselines: Iterable[Timing]) -> str:
    """Why a candidate median is not believable as it stands ("" when it is)."""
    why = []
    floor = floor_us(shape)
    if median_us < floor:
        why.append(f"{median_us:.2f} us is below the roofline floor {floor:.2f} us")
    best = min((b for b in baselines if b.shape == shape), key=lambda b: b.median_us, default=None)
    if best is not None and median_us * IMPLAUSIBLE_SPEEDUP < best.median_us:
        why.append(f"{best.median_us / median_us:.1f}x faster than {best.backend} ({best.median_us:.2f} us)")
    return "; ".join(why)


def recheck_failed(timing: Timing) -> bool:
    """True when an implausible result also failed its correctness re-check (-> RED)."""
    return RECHECK_FAILED in timing.flagged


# ----------------------------------------------------------------------------- inputs


class Rotation:
    """A zero-argument callable that applies ``op`` to the next input set on every call.

    Outputs that ``op`` returns are kept alive for one period, so a backend that allocates
    its output writes to as many distinct buffers as a candidate writing into ``o``.
    """

    def __init__(self, op: Op, sets: Sequence[tuple[Any, Any, Any, Any]]):
        self.op = op
        self.sets = sets
        self.period = len(sets)
        self._next = 0
        self._keep: collections.deque[Any] = collections.deque(maxlen=self.period)

    def __call__(self) -> None:
        q, k, v, o = self.sets[self._next]
        self._next = (self._next + 1) % self.period
        self._keep.append(self.op(q, k, v, o))


def _torch_dtype(dtype: str) -> torch.dtype:
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]


def l2_bytes() -> int:
    import torch

    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size)


def make_inputs(shape: Shape, seed: int) -> list[tuple[Any, Any, Any, Any]]:
    """Random (q, k, v, o) sets on the current GPU, enough of them to overflow L2."""
    import torch

    n = max(1, min(MAX_INPUT_SETS, math.ceil(L2_FACTOR * l2_bytes() / io_bytes(shape))))
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dims = (shape.B, shape.H, shape.L, shape.D)
    dt = _torch_dtype(shape.dtype)
    sets = []
    for _ in range(n):
        q, k, v = (torch.randn(dims, generator=gen, device="cuda", dtype=dt) for _ in range(3))
        sets.append((q, k, v, torch.empty_like(q)))
    return sets


# ----------------------------------------------------------------------------- graph timing


class GraphTimer:
    """One captured graph of ``launches`` calls of ``fn``; :meth:`sample` replays it.

    Warm-up calls run eagerly on the capture stream first (lazy initialisation, workspace
    allocation); the last one is timed to pick ``launches`` when it is not given, and a replay
    that still comes out shorter than ``TARGET_REPLAY_MS`` is recaptured with more launches.
    """

    def __init__(self, fn: Callable[[], Any], *, launches: int | None = None, warmup: int = 3):
        import torch

        self.stream = torch.cuda.Stream()
        self.stream.wait_stream(torch.cuda.current_stream())
        self.period = getattr(fn, "period", 1)
        with torch.cuda.stream(self.stream):
            eager_ms = self._warm(fn, max(warmup, 1))
            self.launches = self._round(launches or math.ceil(TARGET_REPLAY_MS / max(eager_ms, 1e-4)))
            self.graph = self._capture(fn)
            self.replay_ms = self._replays(2)[-1]
            if launches is None and self.replay_ms < 0.9 * TARGET_REPLAY_MS and self.launches < MAX_LAUNCHES:
                more = math.ceil(self.launches * 1.2 * TARGET_REPLAY_MS / max(self.replay_ms, 1e-4))
                self.launches = self._round(more)
                self.graph.reset()
                self.graph = self._capture(fn)
                self.replay_ms = self._replays(2)[-1]
        torch.cuda.current_stream().wait_stream(self.stream)

    def _round(self, n: int) -> int:
        """Clamp to [1, MAX_LAUNCHES] and round up to whole input rotations."""
        n = max(1, min(n, MAX_LAUNCHES))
        return max(self.period, math.ceil(n / self.period) * self.period)

    def _warm(self, fn: Callable[[], Any], calls: int) -> float:
        """Run ``fn`` eagerly ``calls`` times; milliseconds of the last call (host overhead makes
        it err long for tiny kernels, which the recapture corrects)."""
        import torch

        for _ in range(calls - 1):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def _capture(self, fn: Callable[[], Any]) -> torch.cuda.CUDAGraph:
        import torch

        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self.stream):
            for _ in range(self.launches):
                fn()
        return graph

    def _replays(self, reps: int) -> list[float]:
        """Milliseconds of ``reps`` back-to-back replays (the queue stays full)."""
        import torch

        with torch.cuda.stream(self.stream):
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for _ in range(reps)]
            for start, end in events:
                start.record()
                self.graph.replay()
                end.record()
            events[-1][1].synchronize()
        return [start.elapsed_time(end) for start, end in events]

    def affordable(self, reps: int, budget_ms: float) -> int:
        """``reps`` cut so that sampling costs about ``budget_ms`` (at least 3)."""
        return max(3, min(reps, int(budget_ms / max(self.replay_ms, 1e-3))))

    def sample(self, reps: int) -> list[float]:
        """``reps`` samples of microseconds per launch (after an untimed replay when short)."""
        warm = 1 if self.replay_ms < LONG_REPLAY_MS else 0
        return [ms * 1e3 / self.launches for ms in self._replays(reps + warm)[warm:]]

    def close(self) -> None:
        self.graph.reset()


def time_graph(fn: Callable[[], Any], *, launches_per_graph: int | None = None,
               reps: int = 20, warmup: int = 3) -> list[float]:
    """Microseconds per launch of ``fn``, one sample per replay of a captured graph.

    ``launches_per_graph=None`` picks the count so one replay lasts at least ~1 ms.
    """
    timer = GraphTimer(fn, launches=launches_per_graph, warmup=warmup)
    try:
        return timer.sample(reps)
    finally:
        timer.close()


# ----------------------------------------------------------------------------- SDPA


def sdpa_op(backend: str, causal: bool) -> Op:
    """SDPA restricted to one backend ("sdpa_default": no restriction), returning its output."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    restrict = {
        "sdpa_flash": SDPBackend.FLASH_ATTENTION,
        "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
        "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
        "sdpa_default": None,
    }[backend]
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def op(q: Any, k: Any, v: Any, o: Any) -> Any:
        if restrict is None:
            return sdpa(q, k, v, is_causal=causal)
        with sdpa_kernel(restrict):
            return sdpa(q, k, v, is_causal=causal)

    return op


def runs(op: Op, inputs: tuple[Any, Any, Any, Any]) -> bool:
    """Whether ``op`` accepts these inputs (an SDPA backend refuses shapes it cannot do)."""
    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            op(*inputs)
        torch.cuda.synchronize()
    except RuntimeError as exc:
        if "CUDA error" in str(exc):
            raise
        return False
    return True


# ----------------------------------------------------------------------------- one case


def _measure(ops: dict[str, Op], shape: Shape, *, optional: Sequence[str], seed: int, rounds: int,
             reps: int, warmup: int, budget_ms: float) -> dict[str, list[float]]:
    """Samples per op on fresh inputs, interleaved round by round (the starting op rotates);
    an op whose replays are long gets fewer than ``reps`` per round, to stay near ``budget_ms``.

    Ops named in ``optional`` (the SDPA backends) are left out when they refuse the shape or
    cannot be captured in a graph; any other failure propagates.
    """
    import torch

    sets = make_inputs(shape, seed)
    timers: dict[str, GraphTimer] = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name, op in ops.items():
                if name not in optional:
                    timers[name] = GraphTimer(Rotation(op, sets), warmup=warmup)
                elif runs(op, sets[0]):
                    try:
                        timers[name] = GraphTimer(Rotation(op, sets), warmup=warmup)
                    except RuntimeError:
                        torch.cuda.synchronize()   # raises if the failure poisoned the context
        names = list(timers)
        if not names:
            return {}
        per_round = {n: timers[n].affordable(reps, budget_ms / rounds) for n in names}
        samples: dict[str, list[float]] = {n: [] for n in names}
        for r in range(rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                samples[name] += timers[name].sample(per_round[name])
        return samples
    finally:
        for t in timers.values():
            t.close()
        timers.clear()
        sets.clear()
        torch.cuda.empty_cache()


def time_case(candidate: Op | None, shape: Shape, backends: Sequence[str] = BACKENDS, *,
              rounds: int = 5, reps: int = 10, warmup: int = 3, seed: int = 0,
              budget_ms: float = CASE_BUDGET_MS, recheck: Callable[[Shape], str] | None = None,
              known: Sequence[Timing] = ()) -> list[Timing]:
    """Time ``candidate`` (if any) and each SDPA backend on ``shape``, interleaved.

    Returns the candidate's Timing first (backend "evo"), then one per backend that can run
    the shape (a backend that cannot is left out). ``known`` are baseline Timings measured
    earlier on this worker, used with the fresh ones for the plausibility check; ``recheck``
    runs the correctness checks for a shape and returns "" or why it failed.
    """
    ops: dict[str, Op] = {EVO: candidate} if candidate is not None else {}
    ops |= {b: sdpa_op(b, shape.causal) for b in backends}
    samples = _measure(ops, shape, optional=backends, seed=seed, rounds=rounds, reps=reps,
                       warmup=warmup, budget_ms=budget_ms)
    out = [make_timing(shape, name, s) for name, s in samples.items()]
    if candidate is None:
        return out
    why = implausible(shape, out[0].median_us, [*out[1:], *known])
    if why:
        again = _measure({EVO: candidate}, shape, optional=(), seed=seed + 1, rounds=rounds,
                         reps=reps, warmup=warmup, budget_ms=budget_ms)[EVO]
        if recheck is None:
            checked = "re-check not run"
        else:
            failure = recheck(shape)
            checked = f"{RECHECK_FAILED}: {failure}" if failure else "re-check passed"
        note = (f"implausible: {why}; first median {out[0].median_us:.2f} us; "
                f"re-measured on fresh inputs {Stats.of(again).median:.2f} us; {checked}")
        out[0] = make_timing(shape, EVO, again, note)
    return out


def gemm_tflops(n: int = 8192, reps: int = 20) -> float:
    """Dense fp16 n^3 matmul rate (TFLOP/s), timed like everything else: the GPU's yardstick."""
    import torch

    a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
    c = torch.empty_like(a)
    samples = time_graph(lambda: torch.mm(a, b, out=c), reps=reps)
    return 2.0 * n ** 3 / (Stats.of(samples).median * 1e-6) / 1e12

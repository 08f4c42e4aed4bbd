"""FAST timing: device time per launch from CUDA-graph replays, candidate and SDPA alike.

Why this shape (docs/design.md, FAST): host overhead must not count, so ``launches_per_graph``
calls are captured in one ``torch.cuda.CUDAGraph`` (after warm-up, on a side stream) and each
replay is bracketed by CUDA events; a sample is elapsed / launches, and a replay lasts at least
about 1 ms so event resolution does not matter. Small shapes would otherwise be timed with
their inputs resident in L2, so the captured launches rotate over several input sets whose
total is over twice the L2 size. The SDPA backends are timed by the same code on the same
inputs, and :func:`time_case` interleaves them with the candidate round by round so clock or
thermal drift hits every backend alike. FlashAttention-4 (``fa4``: :func:`fa4_op`), where
``flash_attn.cute`` is importable, is one more baseline timed the same way; a baseline that cannot
run a case (not importable, a mask it cannot express, a shape a backend refuses) is reported per
case with why (:attr:`CaseTiming.unavailable`), never dropped silently.

What makes the numbers trustworthy (docs/design.md, FAST and GREEN):

- Clocks: every op replays untimed before its samples in each round (as long as the samples
  take, up to ``WARM_MS``), so it is measured at the clocks its own load settles to, not the
  previous op's. In a long case (:func:`steady_case`) a GPU at its power limit clocks each
  kernel by its own draw, and the state it inherits lasts: on an H100 at F8 the same cuDNN
  graph measured 1729 us interleaved and 1987 us after 300 ms of itself. So there each op
  first runs ``STEADY_WARM_MS`` of its own replays whenever another op ran since its last
  samples: every op is timed in its own steady state, and a second measurement taken the same
  way agrees with the first (dev/perf-notes.md, 2026-11-23). Which cases are long is a
  property of the shape alone, never of the ops timed in it, so a candidate gets the same
  rule alone (a search), beside one baseline (promote's confirmation) or beside all of them
  (``evo bench``). ``evo bench --clocks burst`` times a long case like a short one instead
  (``clocks=BURST``): every op interleaved round by round after only its ``WARM_MS``, so
  near the boost clocks a GPU starts at, as harnesses that time a short burst of CUDA-graph
  launches do (Triton's ``do_bench``, FlashAttention's benchmarks). Ops do not lose alike when
  the clocks come down, so the two protocols can read the same ops in other ratios, even in
  another order (an H200 at git 86119a9, LLM case L7: evo 1.02x SDPA's default steady, 0.97x in
  bursts; dev/perf-notes.md, 2026-11-28 i); a search always uses the steady one.
- Spread: a case where any op's p80 - p20 exceeds ``SPREAD_LIMIT`` of its median is measured
  again (``remeasure`` times at most) instead of being recorded; if it stays wide, the
  narrowest attempt is recorded and flagged.
- Timed outputs: every input set has its own NaN-poisoned output between guard regions. After
  the timed replays the candidate's outputs are checked against the reference on the same
  inputs (regenerated from their seed), then poisoned, the timed graph is replayed once more
  and checked again: a kernel that goes wrong, or stops writing, after many launches is red.
- Fidelity (``evo bench``): in the last round, right after each op's samples (the same clock
  state), the same graph is replayed under torch.profiler and the CUPTI kernel timestamps give
  an independent per-launch time: the kernels' own durations (busy) and first start to last
  end (span). FAST must lie in [busy, span] within ``FIDELITY_LIMIT``: a case where it does
  not is measured again, like a wide one, and a timing still outside is flagged.
  Why a bracket and not span alone: the profiler lengthens every gap between kernels (by about
  0.8 us per kernel on an H100), which is a fifth of a 10 us two-kernel cuDNN launch; the
  kernels' own durations it does not change. A launch's true time is its kernels plus the
  real gaps, so it lies between the two; for one long kernel they coincide.
- A candidate that beats the roofline floor or the best baseline by more than 2x is
  re-measured on fresh inputs and re-checked before it counts.

Everything that touches the GPU imports torch lazily, so the statistics and the policies (spread,
fidelity, plausibility) are usable (and tested) without one.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import math
import statistics
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from evo.results import Fidelity, Shape, Timing
from evo.vocab import EVO, FA4, SDPA_BACKENDS, STEADY, clock_protocol
from evo.gpu.worker import progress

if TYPE_CHECKING:
    import torch

    from evo.gpu.suites import GreenSettings

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
WARM_MS = 20.0                # untimed replays before each op's samples, every round (at most)
STEADY_FLOOR_US = 20.0        # a case whose roofline floor is this long times each op in its own steady state:
STEADY_WARM_MS = 300.0        # this long of its own replays whenever another op ran since its last samples
SPREAD_LIMIT = 0.05           # (p80 - p20) / median above this: measure the case again
REMEASURE = 2                 # at most this many more attempts
FIDELITY_LIMIT = 0.05         # FAST / profiler further from 1 than this: flagged
PROFILE_REPLAYS = 10
GUARD_ELEMENTS = 4096         # NaN-filled elements either side of each timed output

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


def relative_spread(samples: Sequence[float]) -> float:
    """(p80 - p20) / median of ``samples``."""
    s = Stats.of(samples)
    return s.spread / s.median if s.median > 0 else math.inf


def too_wide(samples: Mapping[str, Sequence[float]], limit: float = SPREAD_LIMIT) -> dict[str, float]:
    """The ops whose relative spread is over ``limit``, with it (empty: the case can be recorded)."""
    return {name: r for name, s in samples.items() if (r := relative_spread(s)) > limit}


def narrowest(attempts: Sequence[Mapping[str, Sequence[float]]]) -> int:
    """Index of the attempt whose widest op is narrowest (the last one on ties)."""
    widest = [max((relative_spread(s) for s in a.values()), default=0.0) for a in attempts]
    return max(range(len(widest)), key=lambda i: (-widest[i], i))


def spread_note(spread: float, attempts: int, limit: float = SPREAD_LIMIT) -> str:
    return f"spread {spread:.0%} > {limit:.0%} after {attempts} measurement{'s' if attempts > 1 else ''}"


# ----------------------------------------------------------------------------- fidelity


def fidelity_of(events: Sequence[tuple[float, float]], replays: int, launches: int) -> Fidelity | None:
    """Per-launch times of ``replays`` replays of ``launches`` launches from device activity
    ``(start_us, end_us)``: every replay is the same graph, so the events, in start order, fall
    into ``replays`` equal groups. None when they do not (nothing recorded, or a stray event)."""
    if replays < 1 or launches < 1 or not events or len(events) % replays:
        return None
    ordered = sorted(events)
    per = len(ordered) // replays
    spans, busy = [], []
    for r in range(replays):
        group = ordered[r * per:(r + 1) * per]
        spans.append((max(e for _, e in group) - group[0][0]) / launches)
        busy.append(sum(e - s for s, e in group) / launches)
    st = Stats.of(spans)
    return Fidelity(st.median, st.p20, st.p80, statistics.median(busy), replays)


def fidelity_ratio(timing: Timing) -> float | None:
    """FAST median over the nearest point of the profiler's bracket [busy, span] for the same
    launches: 1 inside it, below 1 when FAST is faster than the kernels alone ran, above 1 when
    slower than they ran with the profiler's gaps (None: not measured)."""
    f = timing.fidelity
    if f is None or f.median_us <= 0:
        return None
    lo, hi = sorted((f.busy_us if f.busy_us > 0 else f.median_us, f.median_us))
    return timing.median_us / min(max(timing.median_us, lo), hi)


def disagrees(timing: Timing, limit: float = FIDELITY_LIMIT) -> str:
    """Why FAST and the profiler disagree on ``timing`` ("" when they agree or it was not profiled)."""
    ratio = fidelity_ratio(timing)
    if ratio is None or abs(ratio - 1.0) <= limit:
        return ""
    assert timing.fidelity is not None
    f = timing.fidelity
    return (f"FAST {timing.median_us:.2f} us outside the profiler's {f.busy_us:.2f} (kernels) to "
            f"{f.median_us:.2f} us (span) by more than {limit:.0%} (x{ratio:.3f})")


# ----------------------------------------------------------------------------- plausibility


def io_bytes(shape: Shape) -> float:
    """Bytes a forward pass must move at least: Q, K, V read once, O written once (K and V: each
    sequence's own keys, where they have lengths of their own)."""
    rows = 2 * shape.H * shape.L * shape.B + 2 * shape.Hkv * shape.kv_rows
    return float(rows * shape.D * ELEMENT_BYTES[shape.dtype])


def floor_us(shape: Shape) -> float:
    """The roofline floor: no kernel can be faster than this on any Hopper part."""
    return max(shape.flops / (PEAK_TFLOPS * 1e12), io_bytes(shape) / (PEAK_TBPS * 1e12)) * 1e6


def steady_case(shape: Shape) -> bool:
    """Whether ``shape`` is a long case, timed in each op's steady state (module docstring):
    its roofline floor is at least ``STEADY_FLOOR_US``. The rule reads the shape alone. It used
    to read the launches of the ops being timed (any at 200 us or more), so a case changed
    protocol with the company a candidate kept: promote's confirmation timed F4c beside
    cuDNN alone (both near 150 us: no steady state) and read 418c748103c2 at 141.6 us, the
    package bench timed it beside the 460 us memory-efficient backend (steady state) at 155.0 us
    on the same H100 (dev/perf-notes.md, "One clock rule per case"). The suite's F4-F8 have floors of
    51-1100 us (their SDPA launches take 150 us and more), F1-F3 of 0.4-4.3 us (under 20 us)."""
    return floor_us(shape) >= STEADY_FLOOR_US


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
    ``outputs[i]`` is where the latest call on set ``i`` left its result (``o``, or the tensor
    the op returned: during graph capture, the graph's own output), for the output checks.
    """

    def __init__(self, op: Op, sets: Sequence[tuple[Any, Any, Any, Any]]):
        self.op = op
        self.sets = sets
        self.period = len(sets)
        self._next = 0
        self._keep: collections.deque[Any] = collections.deque(maxlen=self.period)
        self.outputs: dict[int, Any] = {}

    def __call__(self) -> None:
        i = self._next
        q, k, v, o = self.sets[i]
        self._next = (i + 1) % self.period
        out = self.op(q, k, v, o)
        self._keep.append(out)
        self.outputs[i] = o if out is None else out


def _torch_dtype(dtype: str) -> torch.dtype:
    from evo.gpu.gate import TORCH_DTYPES   # imports torch: not at this module's import

    return TORCH_DTYPES[dtype]


def l2_bytes() -> int:
    import torch

    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size)


def set_count(shape: Shape, l2: int) -> int:
    """How many input sets make the rotation overflow L2 ``L2_FACTOR`` times over."""
    return max(1, min(MAX_INPUT_SETS, math.ceil(L2_FACTOR * l2 / io_bytes(shape))))


class InputSets:
    """Random (q, k, v, o) sets on the current GPU, enough of them to overflow L2; each ``o``
    is a NaN-poisoned view between guard regions. :meth:`fresh` draws the same q, k, v again
    from the seed, to check outputs against inputs nothing could have touched."""

    def __init__(self, shape: Shape, seed: int, guard: int = GUARD_ELEMENTS) -> None:
        from evo.gpu.gate import GuardedOutput

        self.shape, self.seed = shape, seed
        self.guards: list[Any] = []            # evo.gpu.gate.GuardedOutput
        self.sets: list[tuple[Any, Any, Any, Any]] = []
        for q, k, v in self._draw(set_count(shape, l2_bytes())):
            g = GuardedOutput(shape, guard, "cuda")
            g.poison()
            self.guards.append(g)
            self.sets.append((q, k, v, g.out))

    def _draw(self, n: int) -> Iterable[tuple[Any, Any, Any]]:
        import torch

        from evo.gpu.layouts import kv_dims

        gen = torch.Generator(device="cuda").manual_seed(self.seed)
        s = self.shape
        dims, dt = ((s.B, s.H, s.L, s.D), kv_dims(s), kv_dims(s)), _torch_dtype(s.dtype)   # k, v: a pool if paged
        for _ in range(n):
            yield tuple(torch.randn(d, generator=gen, device="cuda", dtype=dt) for d in dims)  # type: ignore[misc]

    def fresh(self) -> list[tuple[Any, Any, Any]]:
        return list(self._draw(len(self.sets)))


def make_inputs(shape: Shape, seed: int) -> list[tuple[Any, Any, Any, Any]]:
    """Random (q, k, v, o) sets on the current GPU, enough of them to overflow L2."""
    return InputSets(shape, seed).sets


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

    def replay(self, times: int = 1) -> None:
        """Untimed replays, queued on the timer's stream."""
        import torch

        with torch.cuda.stream(self.stream):
            for _ in range(times):
                self.graph.replay()

    def warm(self, ms: float) -> None:
        """Untimed replays for about ``ms`` (at least one), so clocks settle on this op's load."""
        self.replay(max(1, math.ceil(ms / max(self.replay_ms, 1e-3))))

    def affordable(self, reps: int, budget_ms: float) -> int:
        """``reps`` cut so that sampling costs about ``budget_ms`` (at least 3)."""
        return max(3, min(reps, int(budget_ms / max(self.replay_ms, 1e-3))))

    def sample(self, reps: int) -> list[float]:
        """``reps`` samples of microseconds per launch, after untimed replays as long as the
        samples will take, up to ``WARM_MS`` (at least one)."""
        self.warm(min(WARM_MS, reps * self.replay_ms))
        return [ms * 1e3 / self.launches for ms in self._replays(reps)]

    def close(self) -> None:
        self.graph.reset()


def time_graph(fn: Callable[[], Any], *, launches_per_graph: int | None = None,
               reps: int = 20, warmup: int = 3, warm_ms: float = 0.0) -> list[float]:
    """Microseconds per launch of ``fn``, one sample per replay of a captured graph, after
    ``warm_ms`` of untimed replays when given (an op timed in its own steady state).

    ``launches_per_graph=None`` picks the count so one replay lasts at least ~1 ms.
    """
    timer = GraphTimer(fn, launches=launches_per_graph, warmup=warmup)
    try:
        if warm_ms > 0:
            timer.warm(warm_ms)
        return timer.sample(reps)
    finally:
        timer.close()


def profile(timer: GraphTimer, replays: int = PROFILE_REPLAYS) -> Fidelity | None:
    """The independent measurement: ``replays`` replays of the timer's graph (after a warm-up)
    under torch.profiler, per-launch times from CUPTI's kernel timestamps, and from CUDA events
    around the same replays (to tell the profiler's own cost from a disagreement with FAST).
    None when the profiler recorded no usable device activity (no CUPTI on this host)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    timer.warm(WARM_MS)
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        events_ms = timer._replays(replays)
        torch.cuda.synchronize()
    activity = [(e.time_range.start, e.time_range.end) for e in prof.events()
                if e.device_type == DeviceType.CUDA and "sync" not in e.name.lower()]  # kernels, memsets
    found = fidelity_of(activity, replays, timer.launches)
    if found is None:
        return None
    return replace(found, events_us=statistics.median(events_ms) * 1e3 / timer.launches)


# ----------------------------------------------------------------------------- SDPA


def sdpa_op(backend: str, shape: Shape) -> Op:
    """SDPA on ``shape``'s problem (GQA heads, its causal mask: :func:`evo.gpu.gate.sdpa`)
    restricted to one backend ("sdpa_default": no restriction), returning its output."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from evo.gpu.gate import sdpa

    restrict = {
        "sdpa_flash": SDPBackend.FLASH_ATTENTION,
        "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
        "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
        "sdpa_default": None,
    }[backend]
    causal, shift = shape.causal, shape.shift
    if shape.layout != "contiguous":
        return padded_sdpa_op(restrict, shape)

    def op(q: Any, k: Any, v: Any, o: Any) -> Any:
        if restrict is None:
            return sdpa(q, k, v, causal=causal, shift=shift)
        with sdpa_kernel(restrict):
            return sdpa(q, k, v, causal=causal, shift=shift)

    return op


def padded_sdpa_op(restrict: Any, shape: Shape) -> Op:
    """SDPA on a problem whose sequences have lengths of their own, as a server without a ragged
    kernel runs it: the cache padded to the longest sequence and a boolean mask (B, 1, Lq, longest)
    letting sequence b's query i see its keys j < seqlens[b] with j <= i + seqlens[b] - Lq when
    causal (built once, outside the timed op), grouped heads by ``enable_gqa``; a paged cache is
    gathered back through its block table first, inside the op (SDPA reads no pages). A sequence of
    no keys is left as SDPA leaves it (its output is not checked)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    from evo.gpu.layouts import from_pages, page_index

    lens = torch.tensor(shape.seqlens(), device="cuda")
    longest = max(shape.seqlens())
    j, i = torch.arange(longest, device="cuda"), torch.arange(shape.L, device="cuda")
    mask = j[None, None, None, :] < lens[:, None, None, None]
    if shape.causal:
        mask &= j[None, None, None, :] <= i[None, None, :, None] + (lens - shape.L)[:, None, None, None]
    gqa = shape.Hkv != shape.H
    index = page_index(shape, "cuda") if shape.layout == "paged" else None   # no copy inside a graph capture

    def op(q: Any, k: Any, v: Any, o: Any) -> Any:
        k, v = (from_pages(t, shape, index)[:, :, :longest] for t in (k, v))
        with contextlib.nullcontext() if restrict is None else sdpa_kernel(restrict):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)

    return op


@functools.cache
def _fa4() -> tuple[Callable[..., Any] | None, str]:
    """FlashAttention-4's ``flash_attn_func`` and "", or None and why ``flash_attn.cute`` does not import."""
    try:
        from flash_attn.cute import flash_attn_func  # type: ignore[import-not-found]
    except Exception as exc:  # noqa: BLE001 - ImportError, or the CUTLASS DSL failing as it loads
        return None, f"flash_attn.cute is not importable: {one_line(exc)}"
    return flash_attn_func, ""


@functools.cache
def _fa4_varlen() -> tuple[Callable[..., Any] | None, str]:
    """FlashAttention-4's ``flash_attn_varlen_func`` (lengths per sequence through ``seqused_k``, a
    paged cache through ``page_table``) and "", or None and why it does not import."""
    try:
        from flash_attn.cute import flash_attn_varlen_func  # type: ignore[import-not-found]
    except Exception as exc:  # noqa: BLE001 - as _fa4
        return None, f"flash_attn.cute has no flash_attn_varlen_func: {one_line(exc)}"
    return flash_attn_varlen_func, ""


def fa4_unavailable(shape: Shape) -> str:
    """Why FlashAttention-4 cannot time ``shape`` ("" when it can): ``flash_attn.cute`` does not
    import, or the case's causal mask is at the top left with Lq != Lk (FA4 aligns a causal mask at
    the bottom right, so it serves a top-left mask only where the two corners coincide, Lq == Lk)."""
    _, why = _fa4()
    if why:
        return why
    if shape.layout != "contiguous":
        return _fa4_varlen()[1]
    if shape.causal and shape.align == "top_left" and shape.Lk != shape.L:
        return "FA4 aligns a causal mask at the bottom right; this case's is at the top left with Lq != Lk"
    return ""


def fa4_op(shape: Shape) -> Op:
    """FlashAttention-4 on ``shape``'s problem, returning its output: ``flash_attn_func`` takes
    (B, L, H, D) tensors, so it gets ``transpose(1, 2)`` views of our (B, H, L, D) inputs (no copy;
    the head dim stays contiguous), its own grouped heads, and ``causal`` (bottom-right aligned:
    :func:`fa4_unavailable` says which cases it cannot run)."""
    if shape.layout != "contiguous":
        return fa4_cache_op(shape)
    func, why = _fa4()
    if func is None:
        raise RuntimeError(why)
    causal = shape.causal

    def op(q: Any, k: Any, v: Any, o: Any) -> Any:
        out = func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal, softmax_scale=None)
        return out[0] if isinstance(out, tuple) else out   # (out, lse) in flash_attn.cute

    return op


def fa4_cache_op(shape: Shape) -> Op:
    """FlashAttention-4 on a problem with per-sequence lengths: ``flash_attn_varlen_func`` on
    (B, L, H, D) views with ``seqused_k`` (each sequence's keys, its causal mask at their bottom
    right, as ours) and, paged, ``page_table`` over the pool seen as (pages, page_size, Hkv, D)
    (``transpose(1, 2)`` of ours, no copy). The index tensors are made once, outside the timed op.
    A call FA4 refuses (a page size it does not take, say) makes the harness report it as unable
    to run the case."""
    from evo.gpu.layouts import cache_args

    func, why = _fa4_varlen()
    if func is None:
        raise RuntimeError(why)
    args = cache_args(shape, "cuda")
    seqused, table, causal = args["seqlens"], args.get("block_table"), shape.causal

    def op(q: Any, k: Any, v: Any, o: Any) -> Any:
        out = func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), seqused_k=seqused, page_table=table,
                   causal=causal, softmax_scale=None)
        return out[0] if isinstance(out, tuple) else out

    return op


def baseline_op(backend: str, shape: Shape) -> Op:
    """The op of one baseline backend on ``shape``: an SDPA backend (:func:`sdpa_op`) or ``fa4``."""
    return fa4_op(shape) if backend == FA4 else sdpa_op(backend, shape)


def baseline_unavailable(backend: str, shape: Shape) -> str:
    """Why ``backend`` cannot time ``shape``, known before it runs ("" when nothing is known:
    an SDPA backend that refuses a shape says so when it is tried, :func:`refusal`)."""
    return fa4_unavailable(shape) if backend == FA4 else ""


def one_line(exc: BaseException) -> str:
    """An exception as one line of at most 300 characters: its type and its message."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]


HEARTBEAT_S = 5.0    # progress while an optional baseline's first call runs (FA4 compiles its kernel then)


@contextlib.contextmanager
def heartbeat(note: str, every_s: float = HEARTBEAT_S) -> Iterator[None]:
    """Report ``note`` as progress every ``every_s`` while the body runs: FlashAttention-4's first
    call on a new problem JIT-compiles its kernel (tens of seconds), longer than the worker's stall
    limit. The thread is joined before the body's caller goes on, so it never sends beside it."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(every_s):
            progress(note)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def refusal(op: Op, inputs: tuple[Any, Any, Any, Any]) -> str:
    """Why ``op`` does not accept these inputs, or "" when it runs them (an SDPA backend refuses
    shapes it cannot do; FlashAttention-4 asserts on what it does not support). A CUDA error
    propagates: the context may be poisoned."""
    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            op(*inputs)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - an optional baseline's refusal, reported per case
        if "CUDA error" in str(exc):
            raise
        return one_line(exc)
    return ""


def runs(op: Op, inputs: tuple[Any, Any, Any, Any]) -> bool:
    """Whether ``op`` accepts these inputs (:func:`refusal` says why not)."""
    return not refusal(op, inputs)


# ----------------------------------------------------------------------------- one case


class CaseRun:
    """Captured graphs of several ops over one case's input sets, ready to sample, check and
    profile; :meth:`close` frees them.

    Ops named in ``optional`` (the baselines) are left out when they refuse the shape or cannot
    be captured in a graph, each with why in :attr:`unavailable`; any other failure propagates.
    """

    def __init__(self, ops: Mapping[str, Op], shape: Shape, *, optional: Sequence[str], seed: int,
                 warmup: int) -> None:
        import torch

        self.shape, self.seed = shape, seed
        self.timers: dict[str, GraphTimer] = {}
        self.rotations: dict[str, Rotation] = {}
        self.fidelity: dict[str, Fidelity | None] = {}
        self.unavailable: dict[str, str] = {}
        self.inputs = InputSets(shape, seed)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for name, op in ops.items():
                    rotation = Rotation(op, self.inputs.sets)
                    if name not in optional:
                        self.timers[name] = GraphTimer(rotation, warmup=warmup)
                    elif why := self._first_call(name, op):
                        self.unavailable[name] = f"refused the case: {why}"
                        continue
                    else:
                        try:
                            self.timers[name] = GraphTimer(rotation, warmup=warmup)
                        except RuntimeError as exc:
                            torch.cuda.synchronize()   # raises if the failure poisoned the context
                            self.unavailable[name] = f"cannot be captured in a CUDA graph: {one_line(exc)}"
                            continue
                    self.rotations[name] = rotation
        except BaseException:
            self.close()
            raise

    def _first_call(self, name: str, op: Op) -> str:
        """An optional op's first call, on the first input set: why it refuses the case, or ""."""
        with heartbeat(f"FAST {self.shape.tag} {name}: first call"):
            return refusal(op, self.inputs.sets[0])

    def sample(self, rounds: int, reps: int, budget_ms: float, *, fidelity: bool = False,
               clocks: str = STEADY) -> dict[str, list[float]]:
        """Samples per op, interleaved round by round (the starting op rotates, from one picked by
        the case's seed, so a one-round measurement does not always time the same op first); an op whose
        replays are long gets fewer than ``reps`` per round, to stay near ``budget_ms``. In a
        long case (:func:`steady_case`) an op first settles into its own steady state whenever
        another op ran since its last samples, unless ``clocks`` is :data:`~evo.vocab.BURST` (every case
        timed like a short one: module docstring). With ``fidelity``, each op is profiled right
        after its samples of the last round (into :attr:`fidelity`)."""
        names = list(self.timers)
        if not names:
            return {}
        steady = clocks == STEADY and steady_case(self.shape)
        per_round = {n: self.timers[n].affordable(reps, budget_ms / rounds) for n in names}
        samples: dict[str, list[float]] = {n: [] for n in names}
        last = None
        for r in range(rounds):
            shift = (r + self.seed) % len(names)
            for name in names[shift:] + names[:shift]:
                timer = self.timers[name]
                if steady and name != last:
                    timer.warm(STEADY_WARM_MS)
                samples[name] += timer.sample(per_round[name])
                if fidelity and r == rounds - 1:
                    self.fidelity[name] = profile(timer)
                progress(f"FAST {self.shape.tag} {name} round {r + 1}/{rounds}")  # alive, for the stall limit
                last = name
        return samples

    def check_outputs(self, name: str, settings: GreenSettings) -> tuple[int, str]:
        """Check what op ``name`` wrote in its timed replays, then poison every output, replay
        the timed graph once more and check again; (outputs checked, why wrong or "")."""
        import torch

        from evo.gpu.gate import POISON, check_outputs

        rotation = self.rotations[name]
        torch.cuda.synchronize()
        n = rotation.period
        for i, g in enumerate(self.inputs.guards):
            if g.guards_changed():
                return n, f"set {i} of {n}: wrote out of bounds while timed: {g.guards_changed()} guard elements changed"
        outputs = [rotation.outputs[i] for i in range(n)]
        timed = [o.clone() for o in outputs]
        for o in outputs:
            o.view(torch.int16).fill_(POISON[self.shape.dtype])
        torch.cuda.synchronize()
        self.timers[name].replay()
        torch.cuda.synchronize()
        live = [(q, k, v) for q, k, v, _ in self.inputs.sets]
        why = check_outputs([("after the timed replays", timed), ("after one more replay into poisoned outputs", outputs)],
                            self.inputs.fresh(), live, self.shape, self.shape.D ** -0.5, settings,
                            self.inputs.guards)
        return n, why

    def close(self) -> None:
        import torch

        for t in self.timers.values():
            t.close()
        self.timers.clear()
        self.rotations.clear()
        self.inputs.sets.clear()
        self.inputs.guards.clear()
        torch.cuda.empty_cache()


@dataclass
class CaseTiming:
    """What :func:`time_case` learned: Timings (candidate first), how many of the candidate's
    timed outputs were checked and why one was wrong ("" when none was), and the baselines asked
    for that could not time the case, with why."""

    timings: list[Timing]
    outputs_checked: int = 0
    output_failure: str = ""
    unavailable: dict[str, str] = field(default_factory=dict)


@dataclass
class Attempt:
    """One measurement of a case: samples per op and, with fidelity, the profiler's per op."""

    samples: dict[str, list[float]]
    fidelity: dict[str, Fidelity | None]


def unconfirmed(shape: Shape, samples: Mapping[str, Sequence[float]],
                fidelity: Mapping[str, Fidelity | None]) -> list[str]:
    """The ops whose FAST median the profiler does not confirm (:func:`disagrees`)."""
    return [name for name, s in samples.items()
            if disagrees(replace(make_timing(shape, name, s), fidelity=fidelity.get(name)))]


def pick_attempt(shape: Shape, attempts: Sequence[Attempt]) -> int:
    """The attempt to record: fewest ops the profiler does not confirm, then the narrowest."""
    misses = [len(unconfirmed(shape, a.samples, a.fidelity)) for a in attempts]
    fewest = [i for i, m in enumerate(misses) if m == min(misses)]
    return fewest[narrowest([attempts[i].samples for i in fewest])]


def _attempts(ops: Mapping[str, Op], shape: Shape, *, optional: Sequence[str], seed: int, rounds: int,
              reps: int, warmup: int, budget_ms: float, check: GreenSettings | None, fidelity: bool,
              remeasure: int, clocks: str, result: CaseTiming) -> tuple[Attempt, int]:
    """Measure the case until no op's spread is wide and, with ``fidelity``, the profiler
    confirms every op (``remeasure`` more times at most), checking the candidate's timed
    outputs every time (counted into ``result``; a wrong one ends it). Returns the attempt
    :func:`pick_attempt` picks and how many were made."""
    attempts: list[Attempt] = []
    for _ in range(remeasure + 1):
        run = CaseRun(ops, shape, optional=optional, seed=seed, warmup=warmup)
        result.unavailable.update(run.unavailable)
        try:
            samples = run.sample(rounds, reps, budget_ms, fidelity=fidelity, clocks=clocks)
            if check is not None and EVO in run.timers:
                checked, result.output_failure = run.check_outputs(EVO, check)
                result.outputs_checked += checked
        finally:
            run.close()
        attempts.append(Attempt(samples, dict(run.fidelity)))
        if result.output_failure or not (too_wide(samples) or unconfirmed(shape, samples, run.fidelity)):
            break
    return attempts[pick_attempt(shape, attempts)], len(attempts)


def _timings(shape: Shape, attempt: Attempt, tries: int) -> list[Timing]:
    """Timings of one attempt: flagged where the spread stayed wide or the profiler disagrees."""
    wide = too_wide(attempt.samples)
    out = []
    for name, samples in attempt.samples.items():
        t = make_timing(shape, name, samples, spread_note(wide[name], tries) if name in wide else "")
        t = replace(t, fidelity=attempt.fidelity.get(name))
        unconfirmed = disagrees(t)
        if unconfirmed:
            t.flagged = "; ".join(x for x in (t.flagged, unconfirmed) if x)
        out.append(t)
    return out


def time_case(candidate: Op | None, shape: Shape, backends: Sequence[str] = SDPA_BACKENDS, *,
              rounds: int = 5, reps: int = 10, warmup: int = 3, seed: int = 0,
              budget_ms: float = CASE_BUDGET_MS, recheck: Callable[[Shape], str] | None = None,
              known: Sequence[Timing] = (), check: GreenSettings | None = None,
              fidelity: bool = False, remeasure: int = REMEASURE, clocks: str = STEADY) -> CaseTiming:
    """Time ``candidate`` (if any) and each baseline backend on ``shape``, interleaved.

    The candidate's Timing comes first (backend "evo"), then one per backend that can run
    the shape (one that cannot is left out, and :attr:`CaseTiming.unavailable` says why). ``check`` (GREEN's settings) turns on the
    checks of the candidate's timed outputs; ``fidelity`` profiles every op right after its
    samples in the last round; a case with a wide spread, or one the profiler does not confirm,
    is measured again up to ``remeasure`` times. ``known`` are baseline Timings measured earlier
    on this worker, used with the fresh ones for the plausibility check;
    ``recheck`` runs the correctness checks for a shape and returns "" or why it failed;
    ``clocks`` is the clock protocol of a long case (:data:`CLOCKS`, module docstring).
    """
    clock_protocol(clocks)
    ops: dict[str, Op] = {EVO: candidate} if candidate is not None else {}
    result = CaseTiming([])
    for b in backends:
        why = baseline_unavailable(b, shape)
        if why:
            result.unavailable[b] = why
        else:
            ops[b] = baseline_op(b, shape)
    kw = dict(optional=backends, rounds=rounds, reps=reps, warmup=warmup, budget_ms=budget_ms,
              check=check, remeasure=remeasure, clocks=clocks, result=result)
    attempt, tries = _attempts(ops, shape, seed=seed, fidelity=fidelity, **kw)  # type: ignore[arg-type]
    result.timings = _timings(shape, attempt, tries)
    if candidate is None or result.output_failure or not result.timings:
        return result
    out = result.timings
    why = implausible(shape, out[0].median_us, [*out[1:], *known])
    if why:
        kw["optional"] = ()
        again, _ = _attempts({EVO: candidate}, shape, seed=seed + 1, fidelity=False, **kw)  # type: ignore[arg-type]
        if result.output_failure:
            return result
        if recheck is None:
            checked = "re-check not run"
        else:
            failure = recheck(shape)
            checked = f"{RECHECK_FAILED}: {failure}" if failure else "re-check passed"
        note = (f"implausible: {why}; first median {out[0].median_us:.2f} us; "
                f"re-measured on fresh inputs {Stats.of(again.samples[EVO]).median:.2f} us; {checked}")
        out[0] = make_timing(shape, EVO, again.samples[EVO], note)
    return result


def gemm_tflops(dtype: str = "fp16", n: int = 8192, reps: int = 20, warm_ms: float = 0.0) -> float:
    """Dense ``dtype`` n^3 matmul rate (TFLOP/s), timed like everything else: the GPU's yardstick.
    ``warm_ms`` of its own replays first (``STEADY_WARM_MS`` for a steady bench, whose long cases are
    timed in their own steady state: a GEMM timed cold after another load read 668 and 758 TFLOP/s
    in two benches of one H200 session, 2026-11-28r)."""
    import torch

    a, b = (torch.randn(n, n, device="cuda", dtype=_torch_dtype(dtype)) for _ in range(2))
    c = torch.empty_like(a)
    samples = time_graph(lambda: torch.mm(a, b, out=c), reps=reps, warm_ms=warm_ms)
    return 2.0 * n ** 3 / (Stats.of(samples).median * 1e-6) / 1e12

"""The GPU worker's side: gate (GREEN) then time (FAST) one built candidate per request.

:func:`serve` is the default :class:`evo.gpu.worker.Worker` target; it runs in a child process that
sees one GPU. For each :class:`~evo.gpu.worker.EvalRequest` it loads the cubin, runs GREEN (the
fixed core plus the cases drawn from the request's salt, or the request's own ``green_cases``),
and only if every gating check passed times the candidate on the requested FAST cases, with
the outputs of its timed launches checked by GREEN's rule (a wrong one makes it red). SDPA
baselines are measured in this same process by the same method: once per shape and again
every ``baseline_every`` evaluations (drift), or interleaved with the candidate when the
request asks (``evo eval``, ``evo bench``). A search's request names the backend it is scored
against (``paired``): on the full rung that one is timed beside the candidate, round by round,
every time, and only the others come from the cache, so the ratio a search scores is taken in one
clock state.
(On an H100 a candidate alone read 3-5 % faster than beside SDPA on the long FAST cases, and so
did SDPA itself: re-timed paired, 19 candidates' ratios moved by a median 0.96-1.03 per case,
but by up to 9 % one way or the other for one candidate; dev/perf-notes.md, 2026-11-26.) The
candidate's Timings come back together with the baseline Timings it was compared with, so both
are stored with the evaluation.

A search times in two rungs (``options["rung"]``, docs/design.md "Rungs"): a ``screen`` request
runs GREEN (stopping at its first failing check, ``first_failure``), then times the candidate
alone on the few cases it names, with :data:`SCREEN_SAMPLING` and no output checks, against the
scoring baseline measured the same way and cached for the worker (re-measured every
``screen_baseline_every`` screens); with ``screen_full`` its long cases are timed as the full rung
times them instead (:meth:`Plan.for_case`), for the full rung to reuse. It answers ``green``
(passed and screened: the parent decides whether the full rung follows). A ``full`` request is
the protocol above. Baselines measured for
a cache are named in the device info (``baselines_measured``) so the parent can share them
(:mod:`evo.gpu.baselines`). A ``prime`` request (:func:`prime`) loads no kernel: it measures its
rung's cache on its cases ahead of the first candidate, while the search's first batch builds.

The evaluation's device info records what makes the verdict reproducible and the timing
attributable: ``salt`` (the seed of GREEN's inputs and draws), ``green_drawn`` (how many cases
were drawn), ``unavailable`` (JSON: per FAST case, each baseline asked for that could not time it,
and why: FlashAttention-4 not importable, a backend that refused the case), ``cubin_sha256`` (the
cubin gated and timed, loaded once), ``kernel_sha256`` and ``kernel_code_sha256`` (JSON: per
kernel function, its machine code, plain and portable: :mod:`evo.toolchain.machine_code`; promote
refuses a kernel whose code failed GREEN under any candidate), ``fast_outputs_checked`` (timed
outputs compared with the reference).

A CUDA fault poisons the context for good, and an exception cannot tell reliably whether it
left one behind, so after any exception the worker replies ``crashed`` (with the exception as
the reason) and exits; the parent starts a fresh one. The exception is a launch the driver
refused to set up before any kernel ran (:class:`~evo.errors.LaunchRejected`): that is
``resource_rejected``, and the worker goes on serving.

Start-up (importing torch and cuda-python, creating the CUDA context, loading the libraries
SDPA uses) happens before the worker asks for its first request, so it never counts against a
request's budget; progress notes (each GREEN launch, each FAST case) let the parent tell a
kernel that never returned from a slow one.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import time
from pathlib import Path
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from evo.toolchain import smi
from evo.errors import EvoError, LaunchRejected
from evo.toolchain.machine_code import kernel_digests
from evo.family.render import Entry
from evo.results import Evaluation, Shape, Status, Timing
from evo.vocab import FULL, RUNGS, SCREEN, STEADY, clock_protocol
from evo.gpu.baselines import BaselineCache
from evo.gpu.worker import EvalRequest, progress

if TYPE_CHECKING:
    from evo.gpu.suites import GreenCase

# searches' full rung: one round (each op warmed once in a long case: two 300 ms steady-state
# warm-ups, not three; the case's seed picks which op goes first), 10 samples, one re-measure
QUICK = {"rounds": 1, "reps": 10, "remeasure": 1}
NORMAL = {"rounds": 3, "reps": 10, "remeasure": 2}
INTERLEAVED = {"rounds": 3, "reps": 10, "remeasure": 2}  # evo eval / evo bench: the numbers people quote
SCREEN_SAMPLING = {"rounds": 1, "reps": 5, "remeasure": 0}  # a search's screen: one look at each op
BASELINE_EVERY = 50          # full-rung evaluations between measurements of the cached baselines
SCREEN_BASELINE_EVERY = 16   # screens between measurements of the scoring baseline the screen compares with


@dataclass(frozen=True)
class Plan:
    """How to sample one request's FAST cases (from its options)."""

    rounds: int
    reps: int
    interleave: bool
    baseline_every: int
    backends: tuple[str, ...]
    salt: int
    remeasure: int = 2          # more attempts at a case whose spread is wide
    fidelity: bool = False      # profile every op after timing it (evo bench)
    paired: str | None = None   # not interleaved: the backend timed beside the candidate anyway
    rung: str = FULL            # a search's screen (the candidate alone, against a cached baseline) or full
    screen_every: int = SCREEN_BASELINE_EVERY
    first_failure: bool = False  # GREEN stops at its first failing check (a search)
    screen_full: bool = False    # a screen times its long cases as the full rung does (:meth:`for_case`)
    clocks: str = STEADY         # a long case's clock protocol (evo.vocab.CLOCKS; evo bench --clocks)

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> Plan:
        from evo.vocab import SDPA_BACKENDS

        interleave = bool(options.get("interleave", False))
        rung = str(options.get("rung", FULL))
        if rung not in RUNGS:
            raise EvoError(f"unknown rung {rung!r}; one of {', '.join(RUNGS)}")
        clocks = clock_protocol(str(options.get("clocks", STEADY)))
        if clocks != STEADY and not interleave:
            raise EvoError("only an interleaved measurement (evo bench, evo eval) takes another clock protocol")
        base = (SCREEN_SAMPLING if rung == SCREEN else INTERLEAVED if interleave
                else QUICK if options.get("quick") else NORMAL)
        return cls(rounds=int(options.get("rounds", base["rounds"])),
                   reps=int(options.get("reps", base["reps"])),
                   interleave=interleave,
                   baseline_every=int(options.get("baseline_every", BASELINE_EVERY)),
                   backends=tuple(options.get("backends", SDPA_BACKENDS)),
                   salt=int(options.get("salt", 0)),
                   remeasure=int(options.get("remeasure", base["remeasure"])),
                   fidelity=bool(options.get("fidelity", False)),
                   paired=str(options["paired"]) if options.get("paired") else None,
                   rung=rung, screen_every=int(options.get("screen_baseline_every", SCREEN_BASELINE_EVERY)),
                   first_failure=bool(options.get("first_failure", False)),
                   screen_full=bool(options.get("screen_full", False)), clocks=clocks)

    def for_case(self, shape: Shape) -> Plan:
        """How ``shape`` is timed in this request. A screen with ``screen_full`` times a long case
        (:func:`~evo.gpu.timing.steady_case`) with the full rung's protocol: beside the scoring
        baseline, :data:`QUICK` sampling, the timed outputs checked, the other backends from the
        full rung's cache; the search's full rung then reuses that case instead of timing it again.
        Why: a long case's time depends on what the GPU ran in the seconds before it, which the
        candidate's own warm-up does not undo, so the candidate alone against a baseline cached in
        another history read 1-3 % high there, and up to 8 % (dev/perf-notes.md, 2026-11-28 b);
        timed beside the baseline, both share the history. Every other case: this plan."""
        from evo.gpu.timing import steady_case

        if self.rung != SCREEN or not self.screen_full or not self.paired or not steady_case(shape):
            return self
        return replace(self, rung=FULL, rounds=QUICK["rounds"], reps=QUICK["reps"], remeasure=QUICK["remeasure"])

    def beside(self) -> tuple[str, ...]:
        """The backends timed round by round with the candidate: all of them when interleaved,
        none on a screen (the candidate alone), else the paired one (if any)."""
        if self.rung == SCREEN:
            return ()
        return self.backends if self.interleave else (self.paired,) if self.paired else ()


def _describe(exc: BaseException) -> str:
    """One line naming the failure (CUDA faults arrive as RuntimeError / AcceleratorError)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:1000]


def supported(shapes: Sequence[Shape], entries: Sequence[Entry]) -> list[Shape]:
    """The shapes the candidate has a kernel for (head dim, dtype, causal, and the cache layout:
    a lens or paged problem only where the entry exports that layout's kernel)."""
    have = {(e.head_dim, e.dtype, e.causal, x) for e in entries for x in ("contiguous", *e.launch.layouts)}
    return [s for s in shapes if (s.D, s.dtype, s.causal, s.layout) in have]


def layouts_of(entries: Sequence[Entry]) -> set[str]:
    """The cache layouts every one of ``entries`` exports (GREEN draws those kinds only for them)."""
    return set.intersection(*(set(e.launch.layouts) for e in entries)) if entries else set()


# ----------------------------------------------------------------------------- device facts


def _driver_version() -> str:
    versions = smi.query("driver_version")
    return versions[0] if versions else "unknown"


def device_info() -> dict[str, str]:
    """GPU name, compute capability and the software versions a measurement depends on."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "name": props.name,      # the store matches evaluations of one device by this key
        "gpu_uuid": smi.board(str(getattr(props, "uuid", ""))),   # the physical board (promote's recall)
        "sm": f"{props.major}{props.minor}",
        "l2_mb": f"{props.L2_cache_size / 2**20:.0f}",
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "cudnn": str(cudnn) if cudnn else "none",
        "driver": _driver_version(),
        "visible_device": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    }


# ----------------------------------------------------------------------------- the worker


class Session:
    """Per-process state: device facts and the baseline caches, one per rung (:mod:`evo.gpu.baselines`)."""

    def __init__(self) -> None:
        self.device = device_info()
        # the screen's scoring baseline is measured again early and often while the GPU warms up
        self.caches = {rung: BaselineCache(ramp=rung == SCREEN) for rung in RUNGS}

    def inherit(self, carried: Mapping[str, Sequence[Timing]]) -> None:
        """Baselines other workers measured on this GPU kind, per rung (:mod:`evo.gpu.worker`:
        a replaced worker's, or the host's through the store), for what this one has none of."""
        for rung, timings in carried.items():
            if rung in self.caches:
                self.caches[rung].inherit(timings)

    def start(self, plan: Plan) -> None:
        """A request that times against the cache of ``plan``'s rung: that cache is one use older."""
        self.caches[plan.rung].uses += 1

    def baselines(self, shape: Shape, plan: Plan) -> list[Timing]:
        """The cached baseline Timings a request that is not interleaved compares with on
        ``shape``: on a screen the scoring one (``paired``), measured again every
        ``screen_every`` screens; on the full rung every backend not timed beside the candidate,
        every ``baseline_every`` evaluations. Each is measured alone and sampled as its rung
        samples (:meth:`Plan.of`)."""
        from evo.gpu.timing import time_case

        backends: tuple[str, ...]
        if plan.rung == SCREEN:
            backends, every = ((plan.paired,) if plan.paired else ()), plan.screen_every
        else:
            backends, every = tuple(b for b in plan.backends if b not in plan.beside()), plan.baseline_every

        def measure(s: Shape, which: tuple[str, ...]) -> list[Timing]:
            return time_case(None, s, which, rounds=plan.rounds, reps=plan.reps, remeasure=plan.remeasure).timings

        return self.caches[plan.rung].get(shape, backends, every, measure)

    def measured(self, timings: Sequence[Timing]) -> dict[str, list[str]]:
        """Per rung, ``tag|backend`` of the baselines measured for the caches since the last call
        that are among ``timings`` (an evaluation's): what that evaluation names as measured."""
        stored = {(t.shape, t.backend) for t in timings}
        out = {rung: sorted(f"{t.shape.tag}|{t.backend}" for t in cache.drain() if (t.shape, t.backend) in stored)
               for rung, cache in self.caches.items()}
        return {rung: keys for rung, keys in out.items() if keys}


def cubin_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _candidate(request: EvalRequest, ev: Evaluation) -> tuple[Callable[..., Any] | None, Callable[..., Any],
                                                             list[Entry] | None]:
    """(GREEN launch or None, FAST op, entries or None) for a cubin or a promoted package.

    A cubin is hashed before and after it is loaded; the one loaded is then both gated and
    timed, so its hash (in the device info) names the kernel every number belongs to."""
    package = request.options.get("package")
    if package:
        from evo.gpu.timing import heartbeat

        module = importlib.import_module(str(package))
        # the package's first call builds its C++ launcher (a minute without a cached build): done
        # here, with progress, so the worker's stall limit does not take it for a hung kernel
        with heartbeat(f"package {package}: building and loading its launcher"):
            ev.device["package_kernels"] = str(bool(module.prepare()))
        attention = module.attention

        def package_op(q: Any, k: Any, v: Any, o: Any, *, causal: bool, shift: int, **cache: Any) -> Any:
            if cache:                            # a lens or paged cache: the mask at each sequence's bottom right
                return attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1],
                                 causal_align="bottom_right", **cache)
            if causal and shift not in (0, k.shape[2] - q.shape[2]):
                raise EvoError(f"the package op aligns a causal mask at a corner; shift {shift} is neither")
            align = "top_left" if shift == 0 else "bottom_right"
            return attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1], causal_align=align)

        return None, package_op, None
    from evo.gpu.kernels import load_kernels

    image = Path(request.cubin_path).read_bytes()
    before = hashlib.sha256(image).hexdigest()
    kernels = load_kernels(request.cubin_path, request.entries, device=0)  # a cubin or a Triton module
    if cubin_sha256(request.cubin_path) != before:
        raise EvoError(f"{request.cubin_path} changed while it was being loaded")
    ev.device["cubin_sha256"] = before
    digests = kernel_digests(image)
    if digests:   # device info holds strings; the portable digests match a kernel across kernel subsets
        ev.device["kernel_sha256"] = json.dumps(digests, sort_keys=True)
        ev.device["kernel_code_sha256"] = json.dumps(kernel_digests(image, portable=True), sort_keys=True)

    def kernel_op(q: Any, k: Any, v: Any, o: Any, *, causal: bool, shift: int, **cache: Any) -> None:
        kernels.launch(q, k, v, o, causal=causal, shift=shift, **cache)

    return kernels, kernel_op, list(request.entries)


def _reporting(launch: Callable[..., Any]) -> Callable[..., Any]:
    """``launch`` that first reports each call as progress (GREEN only: never a timed launch)."""
    calls = 0

    def report_then_launch(q: Any, k: Any, v: Any, o: Any, causal: bool, scale: float, shift: int,
                           **cache: Any) -> Any:
        nonlocal calls
        calls += 1
        kv = "" if k.shape == q.shape else f" on {'x'.join(map(str, k.shape))}"
        layout = f" {'paged' if 'block_table' in cache else 'lens'}" if cache else ""
        progress(f"GREEN launch {calls} ({'x'.join(map(str, q.shape))}{kv}{' causal' if causal else ''}{layout})")
        return launch(q, k, v, o, causal, scale, shift, **cache)

    return report_then_launch


def green_plan(request: EvalRequest, entries: Sequence[Entry], salt: int) -> tuple[list[GreenCase], int]:
    """The GREEN cases of one evaluation and how many of them were drawn: the request's own
    ``green_cases`` (promote's verification), else the fixed core the kernel has a kernel for
    plus the cases drawn for its (head dim, dtype, causal) keys from ``salt``."""
    from evo.gpu.draws import drawn_cases
    from evo.gpu.suites import GreenCase, green_cases, green_settings

    explicit = request.options.get("green_cases")
    if explicit is not None:
        return list(explicit), len(explicit)
    core = [GreenCase(s) for s in supported(green_cases(), entries)]
    draws = green_settings().draws
    keys = {(e.head_dim, e.dtype, e.causal) for e in entries}
    drawn = drawn_cases(draws, keys, salt, layouts_of(entries)) if draws is not None else []
    return core + drawn, len(drawn)


def _green(launch: Callable[..., Any], request: EvalRequest, entries: Sequence[Entry], plan: Plan,
           ev: Evaluation) -> bool:
    from evo.gpu.gate import run_green, verdict
    from evo.gpu.suites import green_settings

    settings = green_settings()
    share = float(request.options.get("tolerance_share", 1.0))
    if share != 1.0:                                     # promote's verification: a narrower tolerance
        settings = settings.share(share)
        ev.device["tolerance_share"] = f"{share:g}"
    cases, drawn = green_plan(request, entries, plan.salt)
    ev.device["green_drawn"] = str(drawn)
    t0 = time.perf_counter()
    ev.checks = run_green(_reporting(launch), cases, settings, plan.salt, first_failure=plan.first_failure)
    ev.green_seconds = time.perf_counter() - t0
    status, ev.reason = verdict(ev.checks, settings.gate_dtypes)
    ev.status = status
    return status is Status.GREEN


def _recheck(launch: Callable[..., Any] | None, salt: int) -> Callable[[Shape], str] | None:
    """The correctness re-check of an implausibly fast FAST case ("" when it passes)."""
    if launch is None:
        return None
    from evo.gpu.gate import run_green, verdict
    from evo.gpu.suites import green_settings

    settings = green_settings()

    def recheck(shape: Shape) -> str:
        status, reason = verdict(run_green(launch, [shape], settings, salt + 1))
        return "" if status is Status.GREEN else reason

    return recheck


def _fast(op: Callable[..., Any], recheck: Callable[[Shape], str] | None, cases: Sequence[Shape],
          plan: Plan, session: Session, ev: Evaluation) -> None:
    """Time every case (stopping at a wrong timed output: red, with the case and why); a screen
    times the candidate alone, checks no timed outputs and answers green (module docstring),
    except on the long cases :meth:`Plan.for_case` times as the full rung does (named in the
    device info's ``screen_full_cases``, for the full rung to reuse)."""
    from evo.gpu.layouts import cache_args
    from evo.gpu.suites import green_settings
    from evo.gpu.timing import recheck_failed, time_case

    screen = plan.rung == SCREEN
    settings = green_settings() if not screen or plan.screen_full else None   # a screen alone checks no outputs
    checked = 0
    unavailable: dict[str, dict[str, str]] = {}
    full_cases: list[str] = []
    if plan.beside():                            # the baselines timed beside the candidate
        ev.device["paired"] = ",".join(plan.beside())
    if plan.clocks != STEADY:                    # evo bench --clocks burst: not the search's protocol
        ev.device["clocks"] = plan.clocks
    if not plan.interleave:                      # interleaved (evo eval, evo bench): no cache at all
        session.start(plan)
    t0 = time.perf_counter()
    try:
        for i, shape in enumerate(cases):
            cache = cache_args(shape, "cuda")   # a lens or paged case's seqlens and block table, made once
            case_plan = plan.for_case(shape)
            if case_plan is not plan:
                full_cases.append(shape.tag)

            def cand(q: Any, k: Any, v: Any, o: Any, _causal: bool = shape.causal, _shift: int = shape.shift,
                     _cache: dict[str, Any] = cache) -> Any:
                return op(q, k, v, o, causal=_causal, shift=_shift, **_cache)

            progress(f"FAST {shape.tag}")
            known = [] if plan.interleave else session.baselines(shape, case_plan)
            got = time_case(cand, shape, case_plan.beside(), rounds=case_plan.rounds,
                            reps=case_plan.reps, seed=plan.salt + i, recheck=recheck, known=known,
                            check=None if case_plan.rung == SCREEN else settings, fidelity=plan.fidelity,
                            clocks=plan.clocks,
                            remeasure=case_plan.remeasure)
            checked += got.outputs_checked
            if got.unavailable:
                unavailable[shape.tag] = got.unavailable
            if got.output_failure:
                ev.status = Status.RED
                ev.reason = f"{shape.tag}: timed output wrong: {got.output_failure}"
                return
            ev.timings += got.timings + known
    finally:
        ev.fast_seconds = time.perf_counter() - t0
        ev.device["fast_outputs_checked"] = str(checked)
        if full_cases:       # the screen's cases timed as the full rung times them (evo.search.rungs reuses them)
            ev.device["screen_full_cases"] = ",".join(full_cases)
        measured = {} if plan.interleave else session.measured(ev.timings)
        if measured:         # the parent shares them with the host's other workers (evo.gpu.worker)
            ev.device["baselines_measured"] = json.dumps(measured, sort_keys=True)
        if unavailable:      # per case tag, the baselines asked for that could not time it, and why
            ev.device["unavailable"] = json.dumps(unavailable, sort_keys=True)
    failed = [t for t in ev.timings if recheck_failed(t)]
    if failed:
        ev.status, ev.reason = Status.RED, f"{failed[0].shape.tag}: {failed[0].flagged}"
        return
    ev.status = Status.GREEN if screen else Status.FAST
    full = f" ({len(full_cases)} of them as the full rung times them)" if full_cases else ""
    timed = f"screened on {len(cases)} FAST cases{full}" if screen else \
        f"timed on {len(cases)} FAST cases, {checked} timed outputs checked"
    ev.reason = f"{ev.reason}; {timed}" if ev.reason else timed


def prime(request: EvalRequest, plan: Plan, session: Session) -> Evaluation:
    """Measure the cache of ``plan``'s rung on the request's cases as that rung's first
    evaluations would, and nothing else (``options["prime"]``: :meth:`GpuEvaluator.prime
    <evo.search.evaluators.GpuEvaluator.prime>`). The timings come back named as measured, so the
    parent carries them to this worker's successors like any evaluation's. It is not a use of the
    cache: the entries age from the first candidate on."""
    ev = Evaluation(request.build_id, Status.GREEN, device=dict(session.device) | {"rung": plan.rung})
    t0 = time.perf_counter()
    for shape in request.fast_cases:       # a screen's full-protocol case takes the full rung's cache
        progress(f"prime {plan.rung} {shape.tag}")
        ev.timings += session.baselines(shape, plan.for_case(shape))
    ev.fast_seconds = time.perf_counter() - t0
    measured = session.measured(ev.timings)
    if measured:
        ev.device["baselines_measured"] = json.dumps(measured, sort_keys=True)
    ev.reason = f"primed: {len(ev.timings)} cached baseline timing(s) of the {plan.rung} rung"
    return ev


def evaluate(request: EvalRequest, session: Session) -> Evaluation:
    """GREEN then FAST for one request (exceptions propagate to :func:`serve`); a ``prime``
    request is :func:`prime`'s."""
    from evo.gpu.timing import STEADY_WARM_MS, gemm_tflops

    plan = Plan.of(request.options)
    session.inherit(request.options.get("carried_baselines", {}))
    if request.options.get("prime"):
        return prime(request, plan, session)
    ev = Evaluation(request.build_id, Status.GREEN, device=dict(session.device) | {"salt": str(plan.salt)})
    if "rung" in request.options:
        ev.device["rung"] = plan.rung
    launch, op, entries = _candidate(request, ev)
    progress("loaded")
    if request.options.get("gemm"):   # in the bench's dtype, and warmed as its long cases are
        dtype = str(request.options.get("gemm_dtype") or "fp16")
        warm = STEADY_WARM_MS if plan.clocks == STEADY else 0.0
        ev.device |= {"gemm_tflops": f"{gemm_tflops(dtype, warm_ms=warm):.1f}", "gemm_dtype": dtype}
    if request.options.get("read_bytes"):   # evo bench's decode report: the read ceiling (evo.gpu.bandwidth)
        from evo.gpu.bandwidth import read_ceiling

        progress("read bandwidth")
        try:
            ev.device["read_ceiling"] = json.dumps(read_ceiling(int(request.options["read_bytes"])).as_dict())
        except EvoError as exc:     # no nvcc, say: the report says why, the cases are timed all the same
            ev.device["read_ceiling_error"] = str(exc)
    if request.green and launch is not None and not _green(launch, request, entries or (), plan, ev):
        return ev
    cases = supported(request.fast_cases, entries) if entries is not None else list(request.fast_cases)
    if cases:
        _fast(op, _recheck(launch, plan.salt), cases, plan, session, ev)
    return ev


def _warm_up() -> None:
    """Create the CUDA context and load what requests use (cuda-python, every SDPA backend, the
    matmul library of GREEN's reference), so a fresh worker's first request is not charged for it."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from evo.gpu import gate  # noqa: F401 - imported here, not inside a request's budget
    from evo.gpu.runtime import import_cuda
    from evo.gpu.timing import runs, sdpa_op
    from evo.vocab import SDPA_BACKENDS

    import_cuda()
    x = torch.randn(1, 1, 16, 64, device="cuda", dtype=torch.float16)
    for backend in SDPA_BACKENDS:
        runs(sdpa_op(backend, Shape("warm", 1, 1, 16, 64, False)), (x, x, x, None))  # one that refuses is skipped
    with sdpa_kernel(SDPBackend.MATH):
        for wide in (torch.float32, torch.float64):
            F.scaled_dot_product_attention(x.to(wide), x.to(wide), x.to(wide))
    torch.cuda.synchronize()


def serve(conn: Connection) -> None:
    """Worker target: :func:`serve_requests` answering each request with :func:`evaluate`."""
    serve_requests(conn, evaluate)


def serve_requests(conn: Connection, answer: Callable[[EvalRequest, Session], Evaluation]) -> None:
    """Worker loop: one Evaluation per EvalRequest (from ``answer``) until ``None`` or a closed
    pipe; start-up first, before the first ``recv`` tells the parent this worker is ready. A
    launch refused before any kernel ran is ``resource_rejected`` and the worker serves on; any
    other failure is ``crashed`` and the worker stops (its context may be poisoned)."""
    import torch

    torch.cuda.set_device(0)
    _warm_up()
    session = Session()
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        try:
            result = answer(request, session)
        except LaunchRejected as exc:  # refused before any kernel ran: the context is intact
            conn.send(Evaluation(request.build_id, Status.RESOURCE_REJECTED, str(exc),
                                 device=dict(session.device)))
            continue
        except Exception as exc:  # noqa: BLE001 - reported as crashed; the context may be poisoned
            conn.send(Evaluation(request.build_id, Status.CRASHED, _describe(exc), device=dict(session.device)))
            return
        conn.send(result)

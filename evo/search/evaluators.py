"""Where a search's measurements come from, behind one small interface.

An :class:`Evaluator` builds a batch of rendered candidates and then gates and times the
built ones. Three implementations:

- :class:`GpuEvaluator`: nvcc via :func:`evo.toolchain.build.build_batch`, GREEN and FAST in crash-
  isolated GPU workers (:class:`evo.gpu.worker.WorkerPool`).
- :class:`ReplayEvaluator`: outcomes looked up in a recorded sweep (no nvcc, no GPU); a point
  the recording lacks is :class:`Unmeasured`, never invented.
- :class:`BuildOnlyEvaluator`: builds and resource-checks for real; GREEN and FAST need a GPU,
  so built candidates stay unevaluated (``not_evaluated`` says why).

``device`` names where evaluations come from; a stored evaluation is reused only when it was
made on the same device (replayed measurements carry a ``replay:`` prefix, so they are never
mistaken for this machine's). Only the GPU evaluator ``screens``: it times a job's ``screen`` rung
as a short screen (:mod:`evo.gpu.evaluate`); a recording holds one measurement per candidate, so
a replay answers every job from it, in full.
"""

from __future__ import annotations

import abc
import os
import secrets
import socket
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from evo.toolchain import smi
from evo.toolchain.build import build_batch, build_id_for, compile_flags, cpus
from evo.family.manifest import load_family
from evo.family.render import Rendered
from evo.store.recording import Record, Recording
from evo.results import BuildResult, Evaluation, Shape, Status, Timing
from evo.vocab import BUILD_FAILED, FULL, REPLAY_PREFIX, SCREEN
from evo.gpu.worker import DEFAULT_TARGET, EvalRequest, WorkerPool

PRIME_ID = "prime"   # the build id of a request that measures cached baselines and loads no kernel


@dataclass(frozen=True)
class Unmeasured:
    """A replayed candidate the recording cannot answer for (and why)."""

    reason: str


@dataclass(frozen=True)
class Job:
    """One built candidate to evaluate: GREEN unless it already passed on this device, then
    FAST on ``cases`` (the selected cases this device has no timings for yet, or a screen's),
    in ``rung`` (``screen`` or ``full``: docs/design.md, "Rungs")."""

    rendered: Rendered
    build: BuildResult
    green: bool
    cases: tuple[Shape, ...]
    rung: str = FULL


class Evaluator(abc.ABC):
    """Where a search's measurements come from: builds a batch of rendered candidates, then gates
    and times the built ones (see the module docstring for the three kinds).

    An extension point: a new measurement source subclasses this, sets ``name`` (the study's
    source), ``device`` (stored evaluations are reused only on the same device) and ``arch``, and
    implements :meth:`build` and :meth:`evaluate`, one result per input, in order."""

    name: str = ""
    device: str = ""
    arch: str = ""
    not_evaluated: str = ""  # non-empty when this evaluator cannot run GREEN/FAST (why)
    screens = False          # whether a screen job is timed as a screen (else as the full rung)
    overlaps_builds = False  # whether the next batch is built while this one is evaluated (nvcc beside a GPU)
    subsets = False          # whether candidates are rendered with only the kernels the study's cases run (nvcc builds)
    host = ""                # the host whose workers share cached baselines ("": none are shared)

    def build_id(self, item: Rendered) -> str:
        """The id ``item`` is stored and looked up under: its build id on this evaluator's arch."""
        return build_id_for(item, self.arch)

    @abc.abstractmethod
    def build(self, items: Sequence[Rendered]) -> list[BuildResult | Unmeasured]:
        """One result per item, in order."""

    @abc.abstractmethod
    def evaluate(self, jobs: Iterable[Job]) -> Iterator[Evaluation | Unmeasured]:
        """One result per job drawn, in order (nothing when ``not_evaluated``). Draw a job from
        ``jobs`` only when about to start it: the search stops handing out jobs once its time
        budget is spent, and gives the trials of those never drawn back for a later run."""

    def paired(self) -> str:
        """The baseline this evaluator times beside every candidate ("" when it compares with
        cached or recorded baseline timings): a stored passed evaluation is reused only when it
        was timed the same way."""
        return ""

    def prime(self, cases: Sequence[Shape], screen: Sequence[Shape]) -> None:  # noqa: B027 - optional
        """Measure now, ahead of any candidate, what the evaluations of ``cases`` (the full rung)
        and ``screen`` (the screen's cases; none when the search does not screen) will compare
        with: a search calls this as each batch starts building, and only the first call counts
        (nothing to do by default)."""

    def primed_seconds(self) -> float:
        """The GPU seconds the measurements :meth:`prime` asked for took, of those finished (0
        when it asks for none): GPU time no candidate's evaluation counts."""
        return 0.0

    def share(self, baselines: Mapping[str, Sequence[Timing]]) -> None:  # noqa: B027 - optional
        """Cached baselines (per rung) the host's other workers measured on this device kind
        (:meth:`evo.store.Store.measured_baselines`), for this evaluator's workers to use instead
        of measuring them again (nothing to do by default)."""

    def close(self) -> None:  # noqa: B027 - optional: most evaluators hold nothing to release
        """Release workers (nothing to release by default)."""


def gpu_name(index: int = 0) -> str:
    """The name nvidia-smi gives GPU ``index`` (``cuda`` when it cannot tell)."""
    return smi.gpu_name(index) or "cuda"


class GpuEvaluator(Evaluator):
    """Real builds, GREEN and FAST on the visible GPUs."""

    name = "gpu"
    gemm_pending = True  # the run's first request also measures the GEMM rate (evo report's roofline)
    primed = False       # whether the workers were asked to measure their cached baselines (prime)
    screens = overlaps_builds = subsets = True

    def __init__(self, arch: str, jobs: int | None = None, devices: Sequence[int] | None = None,
                 timeout_s: float = 300.0, options: dict[str, Any] | None = None,
                 target: str = DEFAULT_TARGET) -> None:
        self.arch, self.jobs, self.timeout_s = arch, jobs or cpus(), timeout_s
        self.options = dict(options or {})
        self.pool = WorkerPool(devices, target)
        self.primes: list[Future[Evaluation]] = []   # the prime requests' answers (prime)
        self.device = gpu_name(self.pool.workers[0].device)
        self.host = socket.gethostname()
        self.where = {"host": self.host, "gpu_index": str(self.pool.workers[0].device)}

    def pair(self, baseline: str) -> None:
        """Time ``baseline`` (the study's) beside every candidate, round by round, instead of
        comparing with a cached timing of it (:mod:`evo.gpu.evaluate`: a score is then one clock
        state's ratio, not a ratio of two states)."""
        self.options["paired"] = baseline

    def paired(self) -> str:
        return str(self.options.get("paired", ""))

    def build(self, items: Sequence[Rendered]) -> list[BuildResult | Unmeasured]:
        return list(build_batch(list(items), self.arch, self.jobs)) if items else []

    def evaluate(self, jobs: Iterable[Job]) -> Iterator[Evaluation | Unmeasured]:
        # requests are made as the pool draws them, when a worker is free to start one
        for ev in self.pool.map(map(self._request, jobs), self.timeout_s):  # which GPU of which host measured it
            ev.device.update(self.where)
            yield ev

    def prime(self, cases: Sequence[Shape], screen: Sequence[Shape]) -> None:
        """Queue one request per rung, ahead of every candidate's, that measures the worker's cached
        baselines (:func:`evo.gpu.evaluate.prime`): the screen's scoring baseline on ``screen``, the
        full rung's reported backends on ``cases``. The GPU is idle while the first batch builds,
        and the first screen and the first full rung would otherwise measure them (on an H100 about
        4 s and 30 s of a run's first minute for the 16 FAST cases); the worker's start-up moves
        into the build too. A pool of several workers hands each request to whichever is idle,
        and a worker measures what it still lacks as before. Nothing waits for the answers: the
        worker keeps what it measured, and a failure (a worker that cannot start) comes back on
        the first candidate's request as well. Later calls do nothing: the workers keep their caches."""
        if self.primed:
            return
        self.primed = True
        for rung, which in ((SCREEN, screen), (FULL, cases)):
            if which:
                request = EvalRequest(PRIME_ID, "", (), False, tuple(which),
                                      self.options | {"rung": rung, "prime": True})
                self.primes.append(self.pool.submit(request, self.timeout_s))

    def primed_seconds(self) -> float:
        return sum(f.result().fast_seconds for f in self.primes if f.done() and f.exception() is None)

    def share(self, baselines: Mapping[str, Sequence[Timing]]) -> None:
        self.pool.share(baselines)

    def _request(self, job: Job) -> EvalRequest:
        """The worker's request for ``job``, with a fresh salt: every candidate is gated on inputs
        of its own, so no kernel can pass by matching inputs it has seen (the salt is kept in the
        evaluation's device info), and its rung. The run's first request also asks for the GEMM rate."""
        options = self.options | {"salt": secrets.randbelow(2**31), "rung": job.rung}
        if self.gemm_pending:
            options["gemm"], self.gemm_pending = True, False
        return EvalRequest(job.build.build_id, job.build.cubin_path or "", job.rendered.entries, job.green,
                           job.cases, options)

    def close(self) -> None:
        self.pool.close()


class BuildOnlyEvaluator(Evaluator):
    """No GPU and no recording: compile and resource-check, leave GREEN/FAST undone."""

    name = "build-only"
    not_evaluated = "not evaluated: GREEN and FAST need a GPU (this machine has none)"
    subsets = True

    def __init__(self, arch: str, jobs: int | None = None) -> None:
        self.arch, self.jobs = arch, jobs or cpus()

    def build(self, items: Sequence[Rendered]) -> list[BuildResult | Unmeasured]:
        return list(build_batch(list(items), self.arch, self.jobs)) if items else []

    def evaluate(self, jobs: Iterable[Job]) -> Iterator[Evaluation | Unmeasured]:
        return iter(())


class ReplayEvaluator(Evaluator):
    """Outcomes from a recording, looked up by (family, params) and family version."""

    name = "replay"

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.arch = recording.arch
        self.device = REPLAY_PREFIX + recording.gpu
        self._info = {"name": self.device, "gpu": recording.gpu, "source": "replay",
                      "recording": recording.name, "host": socket.gethostname(), "pid": str(os.getpid())}

    def _record(self, item: Rendered) -> Record | Unmeasured:
        rec = self.recording.lookup(item.candidate)
        if rec is None:
            return Unmeasured(f"unmeasured: {item.candidate.label()} is not in {self.recording.name}")
        if rec.family_version != item.family_version:
            return Unmeasured(f"unmeasured: {self.recording.name} has {item.candidate.family} version "
                              f"{rec.family_version}, the templates are at version {item.family_version}")
        return rec

    def build_id(self, item: Rendered) -> str:
        """The recorded candidate's id (the build that was measured, under the id formula of its
        day), so replayed candidates keep the ids of the GPU host's database and no nvcc is
        needed; a record without an id, or a point the recording cannot answer for, gets one
        made from its source hash, cut to fit the store's 64-character ids (PostgreSQL enforces
        the length)."""
        rec = self._record(item)
        if isinstance(rec, Record) and rec.build_id:
            return rec.build_id
        return f"replay-{item.source_hash[:57]}"

    def build(self, items: Sequence[Rendered]) -> list[BuildResult | Unmeasured]:
        out: list[BuildResult | Unmeasured] = []
        for item in items:
            rec = self._record(item)
            if isinstance(rec, Unmeasured):
                out.append(rec)
                continue
            built = rec.status in BUILD_FAILED
            out.append(BuildResult(
                self.build_id(item), item.source_hash, self.arch,
                compile_flags(load_family(item.candidate.family)),
                rec.status if built else Status.BUILT, rec.reason if built else "",
                log=f"replayed from {self.recording.name}", cached=True))
        return out

    def evaluate(self, jobs: Iterable[Job]) -> Iterator[Evaluation | Unmeasured]:
        for job in jobs:
            rec = self._record(job.rendered)
            if isinstance(rec, Unmeasured):
                yield rec
                continue
            if rec.status is Status.FAST:
                missing = [s.tag for s in job.cases if "evo" not in rec.timings.get(s.tag, {})]
                if missing:
                    yield Unmeasured(f"unmeasured: {self.recording.name} has no timing of "
                                     f"{job.rendered.candidate.label()} on {', '.join(missing)}")
                    continue
            yield rec.evaluation(job.build.build_id, job.cases, self._info)

"""What the search loop and its collaborators pass around: a trial in flight, the outcome it is
told, the best trial so far, what a run did, and who hears about it.

They live apart from :mod:`evo.search.loop` so that the loop's collaborators (telling,
lineage parents, scoring, liveness) can share them without importing the loop;
:mod:`evo.search.loop` re-exports them, where callers have always found them.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import optuna
from optuna.trial import FrozenTrial

from evo.family.manifest import Family, Value
from evo.family.render import Rendered
from evo.family.space import Candidate
from evo.gpu.margin import GREEN_SHARE, over_share
from evo.scoring import geomean
from evo.search.params import CANDIDATE
from evo.search.sampler_evo import fitness

LABEL = "label"
REUSED = "reused"
BUILT_AS = "evo:built_as"   # a trial a twin answered: the candidate its parameters render to (evo.search.twins)
PRIME_PART = "prime"   # gpu_s's part for the cached baselines measured at a run's start (Evaluator.prime)
UNMEASURED = "unmeasured"
NOT_EVALUATED = "built"
GPU_SOURCE = "gpu"  # the source of a study measured on GPUs (GpuEvaluator.name), whose runs use GPU-hours

Parent = tuple[str, dict[str, list[Value]], str]  # (parent candidate id, mutation, edge kind)


@dataclass
class Outcome:
    """What a trial ended with."""

    status: str
    reason: str = ""
    values: list[float] | None = None
    candidate_id: str | None = None
    reused: bool = False
    speedups: dict[str, float] | None = None  # case tag -> speedup over the study's baseline
    shares: dict[int, float] | None = None    # head dim -> worst GREEN max|err| / tolerance (evo.gpu.margin)
    built_as: str | None = None               # answered by a twin (evo.search.twins): the candidate built, not timed


@dataclass
class Pending:
    """A trial asked and not yet told: its candidate as drawn, rendered, and its parents."""

    trial: optuna.Trial
    trial_id: int                      # the trial's id in the storage (heartbeats, claims)
    family: Family
    raw: dict[str, Value]
    candidate: Candidate | None = None
    invalid: str = ""
    rendered: Rendered | None = None
    build_id: str = ""
    parents: list[Parent] = field(default_factory=list)


@dataclass
class Best:
    """The best trial so far: its candidate and objective values (``score``: their geometric mean)
    and the head dims whose GREEN margin is above the share promote verifies at (``over``)."""

    number: int
    candidate_id: str
    label: str
    values: list[float]
    over: list[int] = field(default_factory=list)

    @property
    def score(self) -> float:
        return geomean(self.values)


@dataclass
class RunSummary:
    """What one ``evo run`` (or :func:`evo.run`) did: trials told by status, how they were
    answered, trials of dead workers it recovered, why it stopped, the best candidate, and how
    fast it went.

    ``counts`` (trials by status) add up to ``finished``, the trials this run told. ``reused``
    and ``waited`` are among them, each trial in one at most: answered from the store at once
    (measured before, or by another trial of the batch), or once another worker had measured
    its candidate; the rest this run handled itself. ``recovered`` and ``lost`` are not among
    them: trials of other, dead, workers this run failed as stale and re-queued, and trials of
    this run that were failed as stale before it could tell them (their retries are told as
    trials of their own). ``twins`` are among the ``reused``: candidates built whose kernels are
    machine code timed before, answered from those timings (:mod:`evo.search.twins`); they never
    become ``best``, which is what this run measured.

    Throughput: ``measured_ids`` are the candidates this run evaluated itself (``measured``:
    how many), each once however many trials told it: built and handed to the evaluator, which
    came back with an evaluation (fast, green, red, crashed or timeout; in a replay, looked up
    in the recording). Not counted: trials answered from the store (``reused``, ``waited``),
    invalid candidates (never built), build failures (nvcc's time, not the GPU's), candidates a
    recording lacks (``unmeasured``) and those the time budget left unevaluated. ``wall_s`` is
    the time from the start of the search loop (:meth:`Search.run <evo.search.loop.Search.run>`)
    to its end, ``workers`` the worker processes that ran it: each measures on a GPU of its own
    when ``source`` is ``gpu`` (:attr:`gpus`), on none in a replay or a build-only run.
    :func:`evo.search.fanout.merge` adds up several workers' summaries: their measured
    candidates (a set: the store's claims let one worker measure a candidate, and one measured
    twice would still count once) and their workers, over the slowest worker's wall time.

    Rungs (docs/design.md): ``screened`` candidates came back from their screen passed and
    screened, ``kept`` of them went on to the full protocol (the others are ``pruned`` in
    ``counts``); ``screen_errors`` holds, for each candidate this run timed on both rungs,
    screened score / full score - 1. ``gpu_s`` is the GPU worker's own time on this run's
    evaluations (their GREEN and FAST seconds) by part: ``GREEN``, ``screen`` and ``full``
    (FAST of each rung, cached baselines measured meanwhile included), and ``prime`` (:data:`PRIME_PART`:
    the cached baselines measured ahead of the first candidate, :meth:`Evaluator.prime
    <evo.search.evaluators.Evaluator.prime>`; a record made before this part was counted has none); wall time minus
    their sum is the GPU waiting (for nvcc, the database, the sampler, a worker starting).
    ``first_gpu_s``: how long after the loop's start the GPU began its first candidate (a worker's
    start, the first batch's builds and the priming before it; None when it measured none)."""

    study: str
    source: str
    run_id: Any
    requested: int
    finished: int = 0                 # trials this run told (the sum of counts)
    total: int = 0                    # trials of the study that count toward --trials
    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    reused: int = 0                   # of the finished: answered from the store at once
    recovered: int = 0                # not this run's: dead workers' stale trials this run failed and re-queued
    lost: int = 0                     # this run's trials failed as stale before it could tell them
    waited: int = 0                   # of the finished: answered from the store once another worker measured them
    twins: int = 0                    # of the reused: built, and answered from a twin's timings (evo.search.twins)
    stopped: str = ""
    best: Best | None = None
    metric_names: list[str] = field(default_factory=list)
    not_evaluated: str = ""
    interrupted: bool = False
    device: str = ""                  # where evaluations came from (a GPU's name, replay:<GPU>; "" building only)
    measured_ids: set[str] = field(default_factory=set)  # candidates this run evaluated itself
    wall_s: float = 0.0               # seconds from the start of the search loop to its end (the slowest worker's)
    workers: int = 1                  # worker processes that ran it (one GPU each when source is gpu)
    screened: int = 0                 # candidates screened (passed GREEN and timed on the screen)
    kept: int = 0                     # of the screened: went on to the full protocol
    screen_errors: list[float] = field(default_factory=list)  # screened / full score - 1, per candidate with both
    gpu_s: dict[str, float] = field(default_factory=dict)  # the GPU worker's seconds: GREEN, screen, full, prime
    first_gpu_s: float | None = None  # seconds from the loop's start until the GPU began its first candidate

    def spent(self, part: str, seconds: float) -> None:
        """Add ``seconds`` of the GPU worker's time to ``part`` (:attr:`gpu_s`)."""
        self.gpu_s[part] = self.gpu_s.get(part, 0.0) + seconds

    @property
    def measured(self) -> int:
        """How many candidates this run evaluated itself (``measured_ids``)."""
        return len(self.measured_ids)

    @property
    def gpus(self) -> int:
        """The GPUs this run measured on: one per worker on a GPU run, none in a replay or a
        build-only run."""
        return self.workers if self.source == GPU_SOURCE else 0

    def per_hour(self, n: int) -> float | None:
        """``n`` per hour of this run's wall time (its workers together); None before it ran."""
        return n / (self.wall_s / 3600) if self.wall_s > 0 else None

    def per_gpu_hour(self, n: int) -> float | None:
        """``n`` per GPU-hour: per hour of wall time on each of its GPUs (a run on two GPUs has
        used two GPU-hours in an hour); None without a GPU or before it ran."""
        rate = self.per_hour(n)
        return rate / self.gpus if rate is not None and self.gpus else None

    @property
    def candidates_per_gpu_hour(self) -> float | None:
        """Candidates measured (``measured``) per GPU-hour: the cost of a search on GPUs."""
        return self.per_gpu_hour(self.measured)

    @property
    def trials_per_gpu_hour(self) -> float | None:
        """Trials told (``finished``, the reused and the failed included) per GPU-hour."""
        return self.per_gpu_hour(self.finished)

    @property
    def busy_share(self) -> float | None:
        """The GPU workers' own time (``gpu_s``) over the GPU-time held (wall time x GPUs)."""
        held = self.wall_s * self.gpus
        return sum(self.gpu_s.values()) / held if held > 0 else None

    @property
    def candidates_per_busy_gpu_hour(self) -> float | None:
        """Candidates measured per hour of the GPU workers' own time (``gpu_s``): what the
        measurements cost, the GPU's waits for nvcc, the database and the sampler left out."""
        busy = sum(self.gpu_s.values())
        return self.measured / (busy / 3600) if busy > 0 and self.gpus else None


class Reporter(Protocol):
    """What a search tells about its progress (an extension point: the CLI's progress bar, the
    forwarder of a worker process, :class:`NullReporter`): ``start`` once with the study's
    target and the trials already counted, ``advance`` per trial told, ``note`` for a line of
    news (a recovered trial, failing heartbeats)."""

    def start(self, total: int, done: int) -> None: ...
    def advance(self, number: int, outcome: Outcome, best: Best | None) -> None: ...
    def note(self, text: str) -> None: ...


class NullReporter:
    """A :class:`Reporter` that says nothing (the API's default)."""

    def start(self, total: int, done: int) -> None:
        pass

    def advance(self, number: int, outcome: Outcome, best: Best | None) -> None:
        pass

    def note(self, text: str) -> None:
        pass


def best_trial(trials: Sequence[FrozenTrial]) -> Best | None:
    """The completed trial with the highest (geometric-mean) value."""
    done = [(f, t) for t in trials if (f := fitness(t)) is not None and CANDIDATE in t.user_attrs]
    if not done:
        return None
    _, t = max(done, key=lambda ft: (ft[0], -ft[1].number))
    return Best(t.number, t.user_attrs[CANDIDATE], t.user_attrs.get(LABEL, ""), list(t.values),
                over_share(t.user_attrs.get(GREEN_SHARE, {})))

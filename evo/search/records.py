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
SPEEDUPS = "speedups"
UNMEASURED = "unmeasured"
NOT_EVALUATED = "built"

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
    answered, trials of dead workers it recovered, why it stopped, and the best candidate.

    ``counts`` (trials by status) add up to ``finished``, the trials this run told. ``reused``
    and ``waited`` are among them, each trial in one at most: answered from the store at once
    (measured before, or by another trial of the batch), or once another worker had measured
    its candidate; the rest this run measured itself. ``recovered`` and ``lost`` are not among
    them: trials of other, dead, workers this run failed as stale and re-queued, and trials of
    this run that were failed as stale before it could tell them (their retries are told as
    trials of their own)."""

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
    stopped: str = ""
    best: Best | None = None
    metric_names: list[str] = field(default_factory=list)
    not_evaluated: str = ""
    interrupted: bool = False


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

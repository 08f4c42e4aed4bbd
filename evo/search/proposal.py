"""Samplers that pick a whole candidate at once, plus the exhaustive/random sweep samplers.

Optuna asks a sampler one parameter at a time; a sampler that thinks in candidates (a family
plus a full, valid point) picks the whole candidate in ``before_trial``, writes it to the
trial's system attrs (``evo:proposal``: family, params, op, parent trial numbers, mutation) and
then answers each ``sample_independent`` from it. Enqueued trials (retries) carry fixed params
and are left alone. Both sweep samplers draw only valid points that the study has not tried
(any state), so a sweep wastes no trial on an invalid point or a duplicate.
"""

from __future__ import annotations

import abc
import random
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from evo.family.manifest import Family, Value
from evo.store.recording import record_key
from evo.search.internals import enqueued_params, is_enqueued, set_trial_system_attr
from evo.search.memo import TrialMemo
from evo.search.params import FAMILY, from_trial_params, param_name
from evo.family.space import Candidate, all_candidates, listable, make_candidate, sample_valid

PROPOSAL = "evo:proposal"
RETRY_OF = "evo:retry_of"


@dataclass
class Proposal:
    """A whole candidate and how it was made (``op``: seed, immigrant, mutation, crossover, random, grid)."""

    candidate: Candidate
    op: str
    parents: list[int] = field(default_factory=list)          # trial numbers
    mutation: dict[str, list[Value]] = field(default_factory=dict)  # param -> [old, new]

    def to_json(self) -> dict[str, Any]:
        return {"family": self.candidate.family, "params": self.candidate.p, "op": self.op,
                "parents": self.parents, "mutation": self.mutation}


def drawn_params(t: FrozenTrial) -> dict[str, Any]:
    """The parameters a trial drew, else those it was enqueued with, else those of the proposal
    stored on it (a trial asked under the ask lock has its parameters written after the lock is
    released, :meth:`evo.search.loop.Search._ask`); empty when none of them is there."""
    params = enqueued_params(t)
    prop = t.system_attrs.get(PROPOSAL)
    if params or not prop:
        return params
    return {FAMILY: prop["family"]} | {param_name(prop["family"], n): v for n, v in prop["params"].items()}


def trial_key(t: FrozenTrial) -> str | None:
    """Record key of a trial's candidate (from its params, its fixed params if waiting, or its
    stored proposal: :func:`drawn_params`)."""
    params = drawn_params(t)
    got = from_trial_params(params)
    return record_key(*got) if got else None


def seen_keys(trials: Sequence[FrozenTrial]) -> set[str]:
    """Every candidate the study has tried, is trying, or will retry."""
    return {k for t in trials if (k := trial_key(t)) is not None}


def _running(number: int, proposal: dict[str, Any]) -> FrozenTrial:
    """A stand-in for trial ``number``, asked with ``proposal`` and running: what a draft is to
    the drafts after it, and an ask to the asks after it in a batch."""
    return FrozenTrial(number=number, state=TrialState.RUNNING, value=None, datetime_start=None,
                       datetime_complete=None, params={}, distributions={}, user_attrs={},
                       system_attrs={PROPOSAL: proposal}, intermediate_values={}, trial_id=-1)


class ProposalSampler(optuna.samplers.BaseSampler, abc.ABC):
    """Base: propose a candidate per trial in ``before_trial``; answer parameters from it."""

    def __init__(self, families: Sequence[Family], seed: int | None = None) -> None:
        self.families = list(families)
        self._rng = random.Random(seed)
        self._pool: dict[str, list[tuple[str, Candidate]]] = {}
        self._proposals: dict[int, dict[str, Any]] = {}
        self._key = TrialMemo(trial_key)
        self._batch: dict[int, FrozenTrial] | None = None  # the study as a batch of asks sees it: batch()
        self._unwritten: dict[int, dict[str, Any]] | None = None  # a batch's proposals left to its caller
        self._drafts: list[dict[str, Any]] = []               # proposals made ahead of the asks: draft()

    def seen(self, trials: Sequence[FrozenTrial]) -> set[str]:
        """:func:`seen_keys` of ``trials``, each finished trial's key read once (:class:`TrialMemo`)."""
        return {k for t in trials if (k := self._key(t)) is not None}

    @abc.abstractmethod
    def propose(self, study: optuna.Study, trials: Sequence[FrozenTrial]) -> Proposal | None:
        """A candidate for the next trial, or None to fall back to uniform choices."""

    def valid_points(self, fam: Family) -> list[tuple[str, Candidate]]:
        """Every valid point of ``fam`` with its record key, in manifest order (cached)."""
        if fam.name not in self._pool:
            self._pool[fam.name] = [(record_key(c.family, c.p), c) for c in all_candidates(fam)]
        return self._pool[fam.name]

    def random_unseen(self, seen: set[str], op: str, families: Sequence[Family] | None = None) -> Proposal | None:
        """A uniformly drawn family (of ``families``, default all) that still has untried valid
        points, then one of them."""
        fams = list(self.families if families is None else families)
        self._rng.shuffle(fams)
        for fam in fams:
            if not listable(fam):           # too many to list: drawn until one is untried
                drawn = sample_valid(fam, self._rng, lambda c: record_key(c.family, c.p) not in seen)
                if drawn is not None:
                    return Proposal(drawn, op)
                continue
            fresh = [c for k, c in self.valid_points(fam) if k not in seen]
            if fresh:
                return Proposal(self._rng.choice(fresh), op)
        return None

    def unseen_default(self, seen: set[str], families: Sequence[Family] | None = None) -> Proposal | None:
        """The first default (of ``families``, default all) not tried yet (op ``seed``), or None."""
        for fam in self.families if families is None else families:
            default = make_candidate(fam)
            if record_key(default.family, default.p) not in seen:
                return Proposal(default, "seed")
        return None

    def prepare(self, study: optuna.Study, trials: Sequence[FrozenTrial]) -> None:
        """Work that the next asks' proposals rely on and that may run before them, outside any
        lock the caller asks under, from ``trials`` (the study as the caller read it; the evo
        sampler fits its model here); none by default."""

    def draft(self, study: optuna.Study, trials: Sequence[FrozenTrial], n: int) -> None:
        """Propose the candidates of the next ``n`` asks now, from ``trials`` (the study as the
        caller read it), before the caller takes the lock its asks are made under: proposing was
        most of the time a worker held that lock, and four workers queued behind each other
        (issue 35). Each draft counts as running for the next, as each trial of a batch does for
        the next ask. The asks of the next :meth:`batch` take the drafts in order, each only if no
        trial the study holds by then has its candidate (another worker's, asked meanwhile), else
        they propose afresh; drafts a batch leaves are dropped."""
        held = {t.number: t for t in trials}
        number = max(held, default=-1) + 1
        self._drafts = []
        for _ in range(n):
            prop = self.propose(study, list(held.values()))
            if prop is None:
                break
            self._drafts.append(prop.to_json())
            held[number] = _running(number, self._drafts[-1])
            number += 1

    @contextmanager
    def batch(self, trials: Sequence[FrozenTrial], write: bool = True) -> Iterator[Mapping[int, FrozenTrial]]:
        """The asks made in the block propose from ``trials`` (the study as its caller read it
        under the ask lock that every ask of the study is made under) plus the trials they
        asked, instead of reading the whole study again for each ask (issue 35: the read
        reloads every running trial, a worker's batch of them or four workers' worth). No other
        worker adds a trial meanwhile, so every candidate the study holds is seen; a trial another
        worker finishes meanwhile counts as running until the next batch. The asks take the
        :meth:`draft` proposals first. Yields that view of the study by trial number, number order
        (each trial asked in the block as its next asks see it: a new one running with its
        proposal, a popped one as the ask read it), which the caller may keep after the block.
        ``write=False``: the asks do not store their proposals on their trials (a transaction each,
        under the caller's lock); :meth:`unwritten` hands them to the caller, which must store
        them before its lock is released (:func:`evo.search.internals.mark` writes a batch's in one)."""
        self._batch = {t.number: t for t in trials}
        self._unwritten = None if write else {}
        try:
            yield self._batch
        finally:
            self._batch, self._drafts, self._unwritten = None, [], None

    def unwritten(self) -> dict[int, dict[str, Any]]:
        """The proposals of the asks of a ``batch(write=False)`` not handed over yet, by the
        storage id of their trial (:data:`PROPOSAL` is the system attr they belong in)."""
        out, self._unwritten = self._unwritten or {}, None if self._unwritten is None else {}
        return out

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if is_enqueued(trial):
            self._note(trial)
            return
        trials = study.get_trials(deepcopy=False) if self._batch is None else list(self._batch.values())
        data = self._undrafted(trials)
        if data is None and (prop := self.propose(study, trials)) is not None:
            data = prop.to_json()
        if data is not None:
            if self._unwritten is None:
                set_trial_system_attr(study, trial, PROPOSAL, data)
            else:
                self._unwritten[trial._trial_id] = data
            self._proposals[trial.number] = data
            trial = _running(trial.number, data)  # as the next asks of the batch will read it
        self._note(trial)

    def _undrafted(self, trials: Sequence[FrozenTrial]) -> dict[str, Any] | None:
        """The next :meth:`draft` whose candidate no trial of ``trials`` holds (those before it
        are dropped), or None."""
        seen = self.seen(trials) if self._drafts else set()
        while self._drafts:
            data = self._drafts.pop(0)
            if record_key(data["family"], data["params"]) not in seen:
                return data
        return None

    def _note(self, trial: FrozenTrial) -> None:
        """Add a trial asked in a :meth:`batch` to the trials its next asks propose from."""
        if self._batch is not None:
            self._batch[trial.number] = trial

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return {}

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name_: str,
                           param_distribution: BaseDistribution) -> Any:
        prop = self._proposals.get(trial.number) or trial.system_attrs.get(PROPOSAL)
        if prop is not None:
            if param_name_ == FAMILY:
                return prop["family"]
            for n, v in prop["params"].items():
                if param_name(prop["family"], n) == param_name_:
                    return v
        return self._rng.choice(list(param_distribution.choices))  # type: ignore[attr-defined]

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self._proposals.pop(trial.number, None)


class SweepSampler(ProposalSampler):
    """Untried valid points: ``order="grid"`` walks every family's points in manifest order,
    families interleaved; ``order="random"`` draws uniformly (family first, then point)."""

    def __init__(self, families: Sequence[Family], seed: int | None = None, order: str = "random") -> None:
        super().__init__(families, seed)
        if order not in ("grid", "random"):
            raise ValueError(f"order must be grid or random, not {order!r}")
        self.order = order

    def propose(self, study: optuna.Study, trials: Sequence[FrozenTrial]) -> Proposal | None:
        seen = self.seen(trials)
        if self.order == "random":
            return self.random_unseen(seen, "random")
        pools = [self.valid_points(f) for f in self.families]
        for i in range(max(map(len, pools), default=0)):
            for pool in pools:
                if i < len(pool) and pool[i][0] not in seen:
                    return Proposal(pool[i][1], "grid")
        return None

"""The ask-and-tell search loop: batches of trials through validate, build, GREEN+FAST, store, tell.

One :class:`Search` is one worker's share of a study; any number of workers (processes, GPUs,
hosts) may run on one study at once (docs/scale-out.md). Dead workers are found on a schedule
of their own, whatever this one is doing (:class:`~evo.search.liveness.Liveness`: their stale
trials failed and enqueued again, their runs failed), and once more before each batch. Per
batch: ask K trials (each kept alive by an Optuna heartbeat); a candidate that violates its
manifest is stored as ``invalid`` and told FAIL at once; the rest are rendered, and a candidate
whose outcome the store already holds (same build id, same device, or a build failure for the
same arch) is answered from it -- never built or evaluated twice. A candidate another worker is
measuring on the same kind of device right now (it holds the store's claim on the build id and
device) is waited for and then answered from the store. What is left is built as one batch (a built
candidate whose kernels are machine code timed before, as another candidate's, is answered from that
candidate's timings: :mod:`evo.search.twins`); on
a GPU (:attr:`Evaluator.overlaps_builds <evo.search.evaluators.Evaluator.overlaps_builds>`) by
nvcc in a thread of its own while the GPU evaluates the batch before (the next batch is asked
for first: one batch of trials is in flight ahead of the GPU, whose outcomes the sampler has
not seen when it proposes it), build failures told once the batch is built; then the built candidates are gated and timed through the
:class:`~evo.search.evaluators.Evaluator`, in rungs where it screens (a short screen, the
pruner, then the full protocol for the candidates kept: :mod:`evo.search.rungs`), stored, and
told: COMPLETE with the objective values, PRUNED, or FAIL with ``status`` and ``reason`` in the
trial's user attrs (docs/search.md says why FAIL and not a made-up value). Before each batch
is evaluated, the cached baselines the host's workers measured on this kind of GPU since this
run began are handed to the evaluator's workers (:meth:`~evo.store.Store.measured_baselines`), and
as the first batch starts building the evaluator measures the baselines its first screen and full
rung will compare with (:meth:`Evaluator.prime <evo.search.evaluators.Evaluator.prime>`: the GPU
is otherwise idle until that batch is built). A COMPLETE trial also carries its GREEN margin, the worst
max|err| / tolerance per head dim (user attr ``green_share``, :mod:`evo.gpu.margin`), which the
evolutionary samplers read to keep what promote would refuse out of their elites. A worker with
nothing left to start waits while other workers' trials run, so a trial of a worker that dies
is still retried.

The time budget (``evo run --time-budget``) is checked before each batch and before each
request: once it is spent no request starts (one in progress finishes and is stored and told),
and the trials of the candidates left unevaluated (or screened and kept, but not yet timed in
full) are given back as Ctrl-C gives them back (FAIL ``abandoned``, enqueued again), so the next
run on the study starts with them (a stored screen is judged again, not timed again).

Lineage: the evolutionary sampler's parents and mutation come from its proposal; for every
other trial the parent is the nearest completed candidate of the same family in the study
(Hamming distance over params, ties to the better one), edge kind ``nearest``
(:mod:`evo.search.parents`). Edges are stored the first time a candidate appears in the study
(:mod:`evo.search.tell`).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from evo.errors import InvalidCandidate
from evo.family.manifest import Family, Value
from evo.family.render import render
from evo.family.space import Candidate, all_candidates, combinations, listable, make_candidate
from evo.results import BuildResult, Shape, Status
from evo.search import objective
from evo.search.evaluators import Evaluator, Unmeasured
from evo.search.internals import ask, mark, one_write, one_write_all, queue_empty, trial_id
from evo.search.liveness import Liveness
from evo.search.memo import TrialMemo
from evo.search.outcomes import Scoring
from evo.search.params import CANDIDATE, suggest
from evo.search.parents import parents
from evo.search.proposal import PROPOSAL, ProposalSampler, trial_key
from evo.search.records import (NOT_EVALUATED, PRIME_PART, UNMEASURED, Best, NullReporter, Outcome, Pending, Reporter,
                                RunSummary, best_trial)
from evo.search.resume import RUN, Heartbeat, Retry, counted, release
from evo.search.rungs import Ladder, Work
from evo.search.storeview import Known, known_outcome, known_outcomes
from evo.search.tell import Teller
from evo.search.twins import Twins
from evo.store.recording import record_key
from evo.vocab import GATED

__all__ = ["Best", "NullReporter", "Outcome", "Pending", "Reporter", "RunSummary", "Search",
           "best_trial"]


Asked = tuple[optuna.Trial, int, "tuple[Family, dict[str, Value]] | None"]  # trial, storage id, its draw if made


@dataclass
class Prepared:
    """A batch told what the store could answer, its candidates claimed and their builds under
    way: ``todo`` (build id -> trials) are this worker's to build and evaluate, with what the
    store held for each (``known``), ``others`` are another worker's to wait for."""

    todo: dict[str, list[Pending]]
    known: dict[str, Known | None]
    builds: Future[list[BuildResult | Unmeasured]] | None
    others: dict[str, list[Pending]] = field(default_factory=dict)


class Search:
    """One process's share of a study: run batches until a stop condition holds.

    Its collaborators: :class:`~evo.search.liveness.Liveness` (dead workers' trials and runs),
    :class:`~evo.search.outcomes.Scoring` (what a measurement scores), :class:`~evo.search.rungs.Ladder`
    (a batch through the rungs, ``screening`` new candidates first where the evaluator can),
    :class:`~evo.search.tell.Teller` (telling trials, the summary) and :func:`~evo.search.parents.parents`."""

    def __init__(self, study: optuna.Study, store: Any, evaluator: Evaluator, families: Sequence[Family],
                 cases: Sequence[Shape], baseline: str, objective_kind: str, run_id: Any, *,
                 storage: RDBStorage, retry: Retry, batch: int = 8, reporter: Reporter | None = None,
                 ask_lock: AbstractContextManager[Any] | None = None, poll_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, screening: bool = False) -> None:
        self.study, self.store, self.evaluator, self.rdb = study, store, evaluator, storage
        self.families = {f.name: f for f in families}
        self.run_id, self.batch, self.poll_s, self.clock = run_id, max(1, batch), poll_s, clock
        self.ask_lock = ask_lock or contextlib.nullcontext()
        self.reporter: Reporter = reporter or NullReporter()
        interval = storage.get_heartbeat_interval() or 30
        lease = storage.grace_period or 2 * interval  # the run's lease is a trial's grace (Optuna's default)
        self.heartbeat = Heartbeat(storage, interval, renew=functools.partial(store.renew_run, run_id, lease))
        self._valid_keys: set[str] | None = None
        self.key = TrialMemo(trial_key)  # a trial's record key, read by untried()
        self.time_budget_s: float | None = None
        self.started = 0.0                # the clock's reading when the time budget began
        self.began = 0.0                  # the clock's reading when the loop began (the summary's wall time)
        self.unstarted = 0                # trials given back because the time budget ran out
        self.summary = RunSummary(study.study_name, evaluator.name, run_id, 0,
                                  metric_names=objective.names(objective_kind, cases),
                                  not_evaluated=evaluator.not_evaluated, device=evaluator.device)
        screening = screening and evaluator.screens
        self.scoring = Scoring(cases, baseline, objective_kind, evaluator.paired, screening)
        self.liveness = Liveness(study, storage, retry, store, run_id, self.heartbeat, self.summary, self.reporter,
                                 period_s=interval / 2, ask_lock=self.ask_lock)
        self.teller = Teller(study, storage, store, run_id, self.heartbeat, self.summary, self.reporter,
                             functools.partial(running, storage))
        self.twins = Twins(store, evaluator.device)
        self.ladder = Ladder(study, storage, store, evaluator, self.scoring, self.summary, run_id, screening=screening,
                             finish=self._finish_all, out_of_time=self._out_of_time,
                             elapsed=lambda: self.clock() - self.began)
        self.builds = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evo-build")  # nvcc beside the GPU
        self.since = run_start(store, run_id)   # cached baselines are shared from then on

    def valid_keys(self) -> set[str]:
        """Every valid point of the listable families (:func:`evo.family.space.listable`), enumerated
        on first use, which :meth:`run` makes while the heartbeat renews the lease and before it
        takes the ask lock. A family too large to list is never counted as used up."""
        if self._valid_keys is None:
            self._valid_keys = {record_key(c.family, c.p) for f in self.families.values() if listable(f)
                                for c in all_candidates(f)}
        return self._valid_keys

    # ------------------------------------------------------------------ driving

    def run(self, trials: int, time_budget_s: float | None = None) -> RunSummary:
        """Run until the study holds ``trials`` counted trials, the time budget is spent, or
        every valid candidate has been tried. Ctrl-C / errors re-queue this run's open trials,
        and so does the time budget for trials whose evaluation it left unstarted."""
        s = self.summary
        s.requested, self.began = trials, self.clock()  # the summary's wall time runs from here to the end
        self.heartbeat.beat()             # this run's lease first: _recover fails the runs past theirs
        self.heartbeat.start()
        self.liveness.start()             # dead workers are found whatever this one is doing
        try:
            self._recover()
            s.best = best_trial(self.study.get_trials(deepcopy=False))
            self.valid_keys()
            self.time_budget_s, self.started = time_budget_s, self.clock()
            self.reporter.start(trials, counted(self.study.get_trials(deepcopy=False)))
            ahead: Prepared | None = None   # the batch built while the one before it is evaluated
            while True:
                self._recover()
                asked, why, view = ask_batch(self, trials)
                pending, seen = describe(asked, self, view)  # parameters written, rendering, lineage: no lock needed
                if not pending and ahead is not None:   # nothing new to build: finish the batch in flight
                    self._complete(ahead)
                    ahead = None
                    continue
                if not pending and why:
                    s.stopped = why
                    break
                if not pending:  # the rest is running in other workers: wait, and retry it if they die
                    time.sleep(self.poll_s)
                    continue
                after = self._prepare(pending, seen)    # its builds start now, in the background
                if ahead is not None:
                    self._complete(ahead)         # the GPU evaluates the batch before meanwhile
                ahead = after
                if not self.evaluator.overlaps_builds:   # nothing to overlap: each batch whole, in turn
                    self._complete(ahead)
                    ahead = None
        except BaseException as exc:
            n = self.liveness.mirror(release(self.study, self.rdb, self.heartbeat.owned(),
                                             f"run stopped: {type(exc).__name__}"), dead_runs=False)
            s.stopped = f"interrupted ({n} open trial(s) re-queued)"
            raise
        finally:
            self.builds.shutdown(wait=False, cancel_futures=True)
            self.liveness.stop()
            self.heartbeat.stop()
            trials_now = self.study.get_trials(deepcopy=False)
            s.total, s.best, s.wall_s = counted(trials_now), best_trial(trials_now), self.clock() - self.began
            if primed := self.evaluator.primed_seconds():   # the GPU's time on the cached baselines at the start
                s.spent(PRIME_PART, primed)
        return s

    def _recover(self) -> None:
        """The liveness check before a batch (its thread checks on its own schedule as well)."""
        self.liveness.check()

    def _next_batch_size(self, trials: int, all_trials: Sequence[FrozenTrial]) -> tuple[int, str]:
        """How many trials to ask now (the study holding ``all_trials``), or (0, why) to stop, or
        (0, "") to wait for other workers."""
        done = counted(all_trials)
        running = sum(t.state == TrialState.RUNNING for t in all_trials)
        waiting = sum(t.state == TrialState.WAITING for t in all_trials)
        if done >= trials:
            return 0, f"reached {trials} trials"
        if self._out_of_time():
            given_back = f" ({self.unstarted} unstarted trial(s) re-queued)" if self.unstarted else ""
            return 0, f"time budget of {self.time_budget_s:g} s spent{given_back}"
        left = untried(self, all_trials) + waiting
        if left == 0 and running == 0:
            return 0, f"search space exhausted: all {len(self.valid_keys())} valid candidates tried"
        return max(0, min(self.batch, trials - done - running, left)), ""

    def _out_of_time(self) -> bool:
        """Whether this run's time budget is spent (never, without one)."""
        return self.time_budget_s is not None and self.clock() - self.started >= self.time_budget_s

    # ------------------------------------------------------------------ one batch

    def _prepare(self, pending: list[Pending], seen: Sequence[FrozenTrial]) -> Prepared:
        """Tell what needs no GPU (invalid candidates, outcomes the store holds), claim the rest
        and start building this worker's share (:meth:`_start`); ``seen``: the study as
        :func:`describe` read it (its finished candidates are in the study's lineage already)."""
        self.teller.know(t.user_attrs[CANDIDATE] for t in seen if t.state.is_finished() and CANDIDATE in t.user_attrs)
        for p in pending:
            if p.candidate is None:
                cid = self.store.record_invalid(Candidate(p.family.name, tuple(p.raw.items())),
                                                p.invalid, self.run_id)
                self._finish(p, Outcome(Status.INVALID.value, p.invalid, candidate_id=cid))
        groups: dict[str, list[Pending]] = collections.defaultdict(list)
        for p in pending:
            if p.candidate is not None:
                groups[p.build_id].append(p)
        fresh: dict[str, list[Pending]] = {}
        for bid, known in known_outcomes(self.store, list(groups), self.evaluator.device).items():
            done = self.scoring.reuse(known)
            if done is None:
                fresh[bid] = groups[bid]
                continue
            for p in groups[bid]:
                self._finish(p, done)
        mine, others = self._claim_all(fresh)
        return self._start(mine, others)

    def _complete(self, prepared: Prepared) -> None:
        """Record the batch's builds, evaluate what built through the rungs (the trials of
        candidates the time budget left unfinished given back), then wait for other workers'."""
        builds = prepared.builds.result() if prepared.builds is not None else []
        if self.evaluator.overlaps_builds:
            reparent(self, prepared)
        works = self._built(prepared, builds)
        if works and self.evaluator.host:
            self.evaluator.share(self.store.measured_baselines(self.evaluator.device, self.evaluator.host, self.since))
        left = self.ladder.run(works)
        self._give_back([p for w in left for p in w.ps])
        self._await(prepared.others)

    def _claim_all(self, groups: dict[str, list[Pending]]) -> tuple[dict[str, list[Pending]], dict[str, list[Pending]]]:
        """Split candidates into those this worker now claims and those another one measures."""
        mine: dict[str, list[Pending]] = {}
        others: dict[str, list[Pending]] = {}
        for bid, ps in groups.items():
            (mine if self._claim(bid, ps[0]) else others)[bid] = ps
        return mine, others

    def _claim(self, bid: str, p: Pending) -> bool:
        """Take the claim on (bid, this device) for ``p``'s trial: free, or held by a trial that is
        no longer running (finished, or failed by the heartbeat check)."""
        dev, name, tid, number = self.evaluator.device, self.study.study_name, p.trial_id, p.trial.number
        holder, holder_study = self.store.claim(bid, dev, tid, name, number)
        if holder == tid:
            return True
        running = self.teller.running(holder)
        if running and holder_study != name:
            # a trial of another study, whose workers may all be gone: check its heartbeat here
            self.liveness.check_study(holder_study)
            running = self.teller.running(holder)
        return not running and self.store.take_over(bid, dev, holder, tid, name, number)

    def _await(self, groups: dict[str, list[Pending]]) -> None:
        """Wait for candidates other workers are measuring: answered from the store when they
        are done, measured here when their worker is gone (its trial failed as stale)."""
        while groups:
            time.sleep(self.poll_s)
            self._recover()
            for bid, ps in list(groups.items()):
                done = self.scoring.reuse(known_outcome(self.store, bid, self.evaluator.device))
                if done is not None:
                    for p in ps:
                        self._finish(p, done, waited=True)
                    del groups[bid]
            mine, groups = self._claim_all(groups)
            self._measure(mine)

    def _measure(self, groups: dict[str, list[Pending]]) -> None:
        """Build and evaluate, now, candidates this worker took over from a dead one."""
        self._complete(self._start(groups))

    def _start(self, groups: dict[str, list[Pending]], others: dict[str, list[Pending]] | None = None) -> Prepared:
        """Start building the candidates this worker claimed, reading the store once more first
        (a claim taken over from a finished trial may come with its outcome stored)."""
        known = known_outcomes(self.store, list(groups), self.evaluator.device)
        todo = {}
        for bid, ps in groups.items():
            done = self.scoring.reuse(known[bid])
            if done is None:
                todo[bid] = ps
                continue
            for p in ps:
                self._finish(p, done)
        items = [todo[b][0].rendered for b in todo]
        builds = self.builds.submit(self.evaluator.build, items) if todo else None  # type: ignore[arg-type]
        if todo:   # the GPU measures the cached baselines meanwhile (the first time: Evaluator.prime)
            self.evaluator.prime(self.scoring.cases, self.ladder.screen_cases)
        return Prepared(todo, known, builds, others or {})

    def _ask(self, queued: bool) -> Asked:
        """One trial asked under the ask lock, with its family and parameters when the sampler
        draws them one by one (and its first heartbeat written); a :class:`ProposalSampler` made its
        whole proposal in the ask, which :func:`ask_batch` stores on the trial with the batch's other
        system attrs (other workers' samplers see it there) after writing the batch's first heartbeats,
        so its parameters are written after the lock (:func:`describe`): a dozen writes per trial the
        other workers need not wait for.
        ``queued``: whether a WAITING trial may be left to pop (else Optuna's read of them is skipped)."""
        while True:
            queue = contextlib.nullcontext() if queued else queue_empty(self.study)
            with queue, warnings.catch_warnings():  # ask-and-tell keeps its own heartbeat (resume.Heartbeat)
                warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed")
                trial = ask(self.study)  # pops a WAITING trial (a retry) first, else a new one
            tid = trial_id(trial)
            if isinstance(self.study.sampler, ProposalSampler):
                return trial, tid, None  # its first heartbeat is written with its batch's (ask_batch)
            self.heartbeat.add(tid)
            try:
                with one_write(trial, self.rdb, tid):
                    drawn = suggest(trial, list(self.families.values()))
                return trial, tid, drawn
            except UpdateFinishedTrialError:  # failed as stale in that instant (beats that stalled): ask again
                self.heartbeat.discard(tid)

    def _built(self, prepared: Prepared, builds: Sequence[BuildResult | Unmeasured]) -> list[Work]:
        """Record the batch's builds; tell the build failures (building only, the built; and twins of
        kernels timed before, :mod:`evo.search.twins`); the rest, with what the store held of each (a
        passed GREEN, a screen), are to evaluate."""
        self.twins.refresh()   # once a batch: what this and other workers timed since the last one
        works = []
        for (bid, ps), res in zip(prepared.todo.items(), builds, strict=True):
            if isinstance(res, Unmeasured):
                self._finish_all(ps, Outcome(UNMEASURED, res.reason))
                continue
            cid = self.store.record_build(ps[0].rendered, res, self.run_id)
            if res.status is not Status.BUILT:
                self._finish_all(ps, Outcome(res.status.value, res.reason, candidate_id=cid))
                continue
            skip = self.evaluator.not_evaluated
            done = (Outcome(NOT_EVALUATED, skip, candidate_id=cid) if skip   # else a twin: its kernels timed before
                    else self.twins.answer(cid, res, ps[0].rendered, self.scoring))
            if done is not None:
                self._finish_all(ps, done)
                continue
            k = prepared.known[bid]
            works.append(Work(ps, cid, res, k if k is not None and k.status in GATED else None))
        return works

    def _give_back(self, ps: Sequence[Pending]) -> None:
        """Give up the trials of candidates built but never evaluated (the time budget ran out) as
        Ctrl-C does (:func:`~evo.search.resume.release`: FAIL ``abandoned``, enqueued again, the
        store's rows FAIL too), so that the next run on the study evaluates them first."""
        if not ps:
            return
        ids = [p.trial_id for p in ps]
        released = release(self.study, self.rdb, ids, "run stopped: time budget spent before its evaluation started")
        for tid in ids:
            self.heartbeat.discard(tid)
        self.unstarted += self.liveness.mirror(released, dead_runs=False)

    # ------------------------------------------------------------------ telling

    def _finish_all(self, ps: Sequence[Pending], outcome: Outcome) -> None:
        self.teller.finish_all(ps, outcome)
        self.liveness.report()

    def _finish(self, p: Pending, outcome: Outcome, waited: bool = False) -> None:
        """Tell ``p``'s trial (:meth:`Teller.finish <evo.search.tell.Teller.finish>`), then say
        what the liveness thread found meanwhile."""
        self.teller.finish(p, outcome, waited)
        self.liveness.report()


def running(rdb: RDBStorage, trial_id: int) -> bool:
    """Whether trial ``trial_id`` is RUNNING in ``rdb`` (not when its study was deleted)."""
    try:
        return rdb.get_trial(trial_id).state == TrialState.RUNNING
    except KeyError:
        return False


def untried(search: Search, all_trials: Sequence[FrozenTrial]) -> int:
    """Valid points no trial holds: exact over the listable families; a family too large to list
    counts all its combinations (an upper bound no search comes near). Each finished trial's record
    key is read once (:class:`~evo.search.memo.TrialMemo`): this runs twice a batch, over every trial."""
    unlisted = sum(combinations(f) for f in search.families.values() if not listable(f))
    return len(search.valid_keys() - {k for t in all_trials if (k := search.key(t)) is not None}) + unlisted


def ask_batch(search: Search, trials: int) -> tuple[list[Asked], str, list[FrozenTrial] | None]:
    """The next batch's trials (:meth:`Search._ask`), why none are left (``""`` while there
    are), and, where the sampler proposes whole candidates, the study as the batch's asks saw it
    (:meth:`ProposalSampler.batch <evo.search.proposal.ProposalSampler.batch>`; else None). An evo
    sampler fits its model and drafts the proposals first; then, under the ask lock (count and ask
    as one step: N workers stop at exactly ``trials``), one read of the study serves the batch's
    count, its sampler, and how many of its asks may pop a WAITING trial
    (:func:`~evo.search.internals.queue_empty`)."""
    view: Mapping[int, FrozenTrial] | None = None
    if isinstance(sampler := search.study.sampler, ProposalSampler):
        ahead = search.study.get_trials(deepcopy=False)  # one read for the costly parts before the lock:
        sampler.prepare(search.study, ahead)              # the model fit
        sampler.draft(search.study, ahead, search._next_batch_size(trials, ahead)[0])  # the proposals
    with search.ask_lock, contextlib.ExitStack() as reads:
        now = search.study.get_trials(deepcopy=False)
        k, why = search._next_batch_size(trials, now)
        if isinstance(sampler, ProposalSampler):
            view = reads.enter_context(sampler.batch(now, write=False))
        waiting = sum(t.state == TrialState.WAITING for t in now)  # the first asks pop them (queue_empty)
        asked: list[Asked] = []
        while len(asked) < k:  # each trial marked (_mark), else, failed as stale meanwhile, asked again
            more = [search._ask(len(asked) + i < waiting) for i in range(k - len(asked))]
            search.heartbeat.add_all([tid for _, tid, drawn in more if drawn is None])  # one write: Search._ask
            lost = _mark(search, more)
            asked += [a for a in more if a[1] not in lost]
        return asked, why, None if view is None else list(view.values())


def _mark(search: Search, more: Sequence[Asked]) -> list[int]:
    """Name the trials of ``more`` this run's and store their sampler's proposals, in one write
    (:func:`~evo.search.internals.mark`); the storage ids of those failed as stale meanwhile,
    which nothing was written to and which this worker no longer keeps alive."""
    sampler, run = search.study.sampler, {RUN: str(search.run_id)}
    proposals = sampler.unwritten() if isinstance(sampler, ProposalSampler) else {}
    lost = mark(search.rdb, {tid: run | ({PROPOSAL: proposals[tid]} if tid in proposals else {}) for _, tid, _ in more})
    for tid in lost:
        search.heartbeat.discard(tid)
    return lost


def describe(asked: Sequence[Asked], search: Search,
             view: list[FrozenTrial] | None = None) -> tuple[list[Pending], list[FrozenTrial]]:
    """The trials ``search`` asked, after the ask lock is released: parameters not drawn yet
    written from the proposals (the batch's in one write), then each candidate, its rendered source, build id and parents;
    and the study that served the whole batch's lineage (:meth:`Search._prepare` takes it too):
    ``view``, the study as the batch's asks saw it under the ask lock, where :func:`ask_batch`
    gives one, else a read of the study. Lineage needs the asked trials' proposals, the enqueued
    ones' user attrs and the finished trials, all in the view: a read more, of every running
    trial of every worker, was a twentieth of four workers' CPU (issue 35). A trial another
    worker finishes after the view is not among the nearest parents this batch considers, as one
    finished just after that read was not. A trial failed as stale meanwhile is dropped."""
    families = list(search.families.values())
    todo = [(trial, tid) for trial, tid, drawn in asked if drawn is None]
    with one_write_all(todo, search.rdb) as lost:  # the proposals' parameters, a dozen a trial: one transaction
        made = {tid: suggest(trial, families) for trial, tid in todo}
    for tid in lost:
        search.heartbeat.discard(tid)
    pending = [Pending(trial, tid, *(drawn or made[tid])) for trial, tid, drawn in asked if tid not in lost]
    trials = (search.study.get_trials(deepcopy=False) if view is None else view) if pending else []
    # an evaluator that builds compiles only the kernels the study's cases run (evo.family.render)
    kernels = {(s.D, s.dtype, s.causal) for s in search.scoring.cases} if search.evaluator.subsets else None
    for p in pending:
        try:
            p.candidate = make_candidate(p.family, p.raw)
        except InvalidCandidate as exc:
            p.invalid = str(exc)
            continue
        p.rendered = render(p.candidate, p.family, kernels)
        p.build_id = search.evaluator.build_id(p.rendered)
        p.parents = parents(p.trial.number, p.candidate, trials, search.families)
    return pending, trials


def run_start(store: Any, run_id: Any) -> datetime:
    """When the run ``run_id`` began (now, for a run the store does not know)."""
    run = store.get_run(run_id) if isinstance(run_id, int) else None
    return run.started if run is not None else datetime.now(UTC)


def reparent(search: Search, prepared: Prepared) -> None:
    """The lineage parents of a batch asked ahead (:func:`describe` gave them), read again: the
    batch before it has been told since, and its candidates may be the nearest."""
    trials = search.study.get_trials(deepcopy=False)
    for ps in (*prepared.todo.values(), *prepared.others.values()):
        for p in ps:
            if p.candidate is not None:
                p.parents = parents(p.trial.number, p.candidate, trials, search.families)

"""The ask-and-tell search loop: batches of trials through validate, build, GREEN+FAST, store, tell.

One :class:`Search` is one worker's share of a study; any number of workers (processes, GPUs,
hosts) may run on one study at once (docs/scale-out.md). Per batch: fail the study's stale
trials and enqueue them again (:func:`~evo.search.resume.recover`); ask K trials (each kept
alive by an Optuna heartbeat); a candidate that violates its manifest is stored as ``invalid``
and told FAIL at once; the rest are rendered, and a candidate whose outcome the store already
holds (same build id, same device, or a build failure for the same arch) is answered from it --
never built or evaluated twice. A candidate another worker is measuring on the same kind of
device right now (it holds the store's claim on the build id and device) is waited for and
then answered from the store. What is left is built as one batch ahead of the GPU (build
failures told at once), then gated and timed through the
:class:`~evo.search.evaluators.Evaluator`, stored, and told: COMPLETE with the objective values,
or FAIL with ``status`` and ``reason`` in the trial's user attrs (docs/search.md says why FAIL
and not a made-up value). A COMPLETE trial also carries its GREEN margin, the worst
max|err| / tolerance per head dim (user attr ``green_share``, :mod:`evo.gpu.margin`), which the
evolutionary samplers read to keep what promote would refuse out of their elites. A worker with
nothing left to start waits while other workers' trials run, so a trial of a worker that dies
is still retried.

The time budget (``evo run --time-budget``) is checked before each batch and before each
evaluation: once it is spent no evaluation starts (one in progress finishes and is stored and
told), and the trials of the batch's candidates left unevaluated are given back as Ctrl-C gives
them back (FAIL ``abandoned``, enqueued again), so the next run on the study starts with them.

Lineage: the evolutionary sampler's parents and mutation come from its proposal; for every
other trial the parent is the nearest completed candidate of the same family in the study
(Hamming distance over params, ties to the better one), edge kind ``nearest``. Edges are
stored the first time a candidate appears in the study.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from evo.errors import InvalidCandidate
from evo.gpu.margin import GREEN_SHARE, over_share, worst_shares
from evo.family.manifest import Family, Value
from evo.family.render import Rendered, render
from evo.store.recording import record_key
from evo.results import CheckResult, Evaluation, Shape, Status, Timing
from evo.scoring import geomean, speedups
from evo.search import objective
from evo.search.evaluators import Evaluator, Job, Unmeasured
from evo.search.params import CANDIDATE, IMPORTED_FROM, from_trial_params, suggest
from evo.search.proposal import seen_keys
from evo.search.resume import REASON, RUN, STATUS, Heartbeat, Retry, counted, recover, release
from evo.search.sampler_evo import fitness, proposal_of
from evo.search.storeview import Known, known_outcome
from evo.family.space import Candidate, all_candidates, combinations, diff, listable, make_candidate
from evo.vocab import FAILED, PASSED

LABEL = "label"
REUSED = "reused"
SPEEDUPS = "speedups"
UNMEASURED = "unmeasured"
NOT_EVALUATED = "built"


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
    parents: list[tuple[str, dict[str, list[Value]], str]] = field(default_factory=list)


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
    """What one ``evo run`` (or :func:`evo.run`) did: trials told by status, trials answered from
    the store or recovered from dead workers, why it stopped, and the best candidate."""

    study: str
    source: str
    run_id: Any
    requested: int
    finished: int = 0                 # trials this run told
    total: int = 0                    # trials of the study that count toward --trials
    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    reused: int = 0
    recovered: int = 0                # stale trials of dead workers this run failed and re-queued
    lost: int = 0                     # this run's trials failed as stale before it could tell them
    waited: int = 0                   # candidates another worker was measuring, answered from the store
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


def hamming(a: Candidate, b: Candidate) -> int:
    pb = b.p
    return sum(v != pb.get(k) for k, v in a.params)


def best_trial(trials: Sequence[FrozenTrial]) -> Best | None:
    """The completed trial with the highest (geometric-mean) value."""
    done = [(f, t) for t in trials if (f := fitness(t)) is not None and CANDIDATE in t.user_attrs]
    if not done:
        return None
    _, t = max(done, key=lambda ft: (ft[0], -ft[1].number))
    return Best(t.number, t.user_attrs[CANDIDATE], t.user_attrs.get(LABEL, ""), list(t.values),
                over_share(t.user_attrs.get(GREEN_SHARE, {})))


class Search:
    """One process's share of a study: run batches until a stop condition holds."""

    def __init__(self, study: optuna.Study, store: Any, evaluator: Evaluator, families: Sequence[Family],
                 cases: Sequence[Shape], baseline: str, objective_kind: str, run_id: Any, *,
                 storage: RDBStorage, retry: Retry, batch: int = 8, reporter: Reporter | None = None,
                 ask_lock: AbstractContextManager[Any] | None = None, poll_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.study, self.store, self.evaluator = study, store, evaluator
        self.families = {f.name: f for f in families}
        self.cases, self.baseline, self.objective = list(cases), baseline, objective_kind
        self.run_id, self.batch, self.poll_s, self.clock = run_id, max(1, batch), poll_s, clock
        self.rdb, self.retry = storage, retry
        self.ask_lock = ask_lock or contextlib.nullcontext()
        self.reporter: Reporter = reporter or NullReporter()
        interval = storage.get_heartbeat_interval() or 30
        lease = storage.grace_period or 2 * interval  # the run's lease is a trial's grace (Optuna's default)
        self.heartbeat = Heartbeat(storage, interval, renew=functools.partial(store.renew_run, run_id, lease))
        self.study_id = storage.get_study_id_from_name(study.study_name)
        self._valid_keys: set[str] | None = None
        self.in_study: set[str] = set()
        self.time_budget_s: float | None = None
        self.started = 0.0                # the clock's reading when run() began
        self.unstarted = 0                # trials given back because the time budget ran out
        self.summary = RunSummary(study.study_name, evaluator.name, run_id, 0,
                                  metric_names=objective.names(objective_kind, cases),
                                  not_evaluated=evaluator.not_evaluated)

    def valid_keys(self) -> set[str]:
        """Every valid point of the listable families (:func:`evo.family.space.listable`), enumerated
        on first use, which :meth:`run` makes while the heartbeat renews the lease and before it
        takes the ask lock. A family too large to list is never counted as used up."""
        if self._valid_keys is None:
            self._valid_keys = {record_key(c.family, c.p) for f in self.families.values() if listable(f)
                                for c in all_candidates(f)}
        return self._valid_keys

    def _untried(self, all_trials: Sequence[FrozenTrial]) -> int:
        """Valid points no trial holds: exact over the listable families; a family too large to
        list counts all its combinations (an upper bound no search comes near)."""
        unlisted = sum(combinations(f) for f in self.families.values() if not listable(f))
        return len(self.valid_keys() - seen_keys(all_trials)) + unlisted

    # ------------------------------------------------------------------ driving

    def run(self, trials: int, time_budget_s: float | None = None) -> RunSummary:
        """Run until the study holds ``trials`` counted trials, the time budget is spent, or
        every valid candidate has been tried. Ctrl-C / errors re-queue this run's open trials,
        and so does the time budget for trials whose evaluation it left unstarted."""
        s = self.summary
        s.requested = trials
        self.heartbeat.beat()             # this run's lease first: _recover fails the runs past theirs
        self.heartbeat.start()
        try:
            self._recover()
            s.best = best_trial(self.study.get_trials(deepcopy=False))
            self.valid_keys()
            self.time_budget_s, self.started = time_budget_s, self.clock()
            self.reporter.start(trials, counted(self.study.get_trials(deepcopy=False)))
            while True:
                self._recover()
                with self.ask_lock:  # count and ask as one step: N workers stop at exactly --trials
                    k, why = self._next_batch_size(trials)
                    pending = [self._ask() for _ in range(k)]
                if not pending and why:
                    s.stopped = why
                    break
                if not pending:  # the rest is running in other workers: wait, and retry it if they die
                    time.sleep(self.poll_s)
                    continue
                self._batch(pending)
        except BaseException as exc:
            n = self._mirror_abandoned(release(self.study, self.rdb, self.heartbeat.owned(),
                                               f"run stopped: {type(exc).__name__}"), dead_runs=False)
            s.stopped = f"interrupted ({n} open trial(s) re-queued)"
            raise
        finally:
            self.heartbeat.stop()
            trials_now = self.study.get_trials(deepcopy=False)
            s.total = counted(trials_now)
            s.best = best_trial(trials_now)
        return s

    def _mirror_abandoned(self, abandoned: Sequence[FrozenTrial], dead_runs: bool, study: str | None = None) -> int:
        """Mark given-up trials (of this study, or of ``study``) FAIL in the store too, and, for
        a dead worker, its run failed."""
        for t in abandoned:
            run = t.system_attrs.get(RUN)
            run_id = int(run) if run is not None and str(run).isdigit() else None
            self.store.record_trial(study or self.study.study_name, t.number, t.user_attrs.get(CANDIDATE), run_id,
                                    TrialState.FAIL.name, None)
            # also fail_expired_runs' job, but the lease can end a _recover later (renewed after the trial's beat, own grace)
            if dead_runs and run_id is not None and (view := self.store.get_run(run_id)) \
                    and view.status == "running":
                self.store.finish_run(run_id, "failed")
        return len(abandoned)

    def _recover(self) -> None:
        """Fail stale trials of dead workers and re-queue them (Optuna's heartbeat check), then
        the runs whose lease ran out (a worker that died holding no trial has no stale trial to
        give it away); say so when this worker's own heartbeats are failing."""
        if (why := self.heartbeat.failing()) is not None:
            self.reporter.note(why)
        n = self._mirror_abandoned(recover(self.study, self.rdb, self.retry), dead_runs=True)
        if n:
            self.summary.recovered += n
            self.reporter.note(f"re-queued {n} trial(s) of a worker whose heartbeat stopped")
        for run_id in self.store.fail_expired_runs():
            self.reporter.note(f"marked run {run_id} failed: its worker's heartbeat stopped")

    def _next_batch_size(self, trials: int) -> tuple[int, str]:
        """How many trials to ask now, or (0, why) to stop, or (0, "") to wait for other workers."""
        all_trials = self.study.get_trials(deepcopy=False)
        done = counted(all_trials)
        running = sum(t.state == TrialState.RUNNING for t in all_trials)
        waiting = sum(t.state == TrialState.WAITING for t in all_trials)
        if done >= trials:
            return 0, f"reached {trials} trials"
        if self._out_of_time():
            given_back = f" ({self.unstarted} unstarted trial(s) re-queued)" if self.unstarted else ""
            return 0, f"time budget of {self.time_budget_s:g} s spent{given_back}"
        left = self._untried(all_trials) + waiting
        if left == 0 and running == 0:
            return 0, f"search space exhausted: all {len(self.valid_keys())} valid candidates tried"
        return max(0, min(self.batch, trials - done - running, left)), ""

    def _out_of_time(self) -> bool:
        """Whether this run's time budget is spent (never, without one)."""
        return self.time_budget_s is not None and self.clock() - self.started >= self.time_budget_s

    # ------------------------------------------------------------------ one batch

    def _batch(self, pending: list[Pending]) -> None:
        self.in_study |= {t.user_attrs[CANDIDATE] for t in self.study.get_trials(deepcopy=False)
                          if t.state.is_finished() and CANDIDATE in t.user_attrs}
        for p in pending:
            if p.candidate is None:
                cid = self.store.record_invalid(Candidate(p.family.name, tuple(p.raw.items())),
                                                p.invalid, self.run_id)
                self._finish(p, Outcome(Status.INVALID.value, p.invalid, candidate_id=cid))
        groups: dict[str, list[Pending]] = collections.defaultdict(list)
        for p in pending:
            if p.candidate is not None:
                groups[p.build_id].append(p)
        fresh: dict[str, Known | None] = {}
        for bid, ps in groups.items():
            known = known_outcome(self.store, bid, self.evaluator.device)
            done = self._reuse(known)
            if done is not None:
                for p in ps:
                    self._finish(p, done)
            else:
                fresh[bid] = known
        mine, others = self._claim_all({bid: groups[bid] for bid in fresh})
        self._measure(mine)
        self._await(others)

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
        running = self._running(holder)
        if running and holder_study != name:
            # a trial of another study, whose workers may all be gone: check its heartbeat here
            other = optuna.load_study(study_name=holder_study, storage=self.rdb)
            self._mirror_abandoned(recover(other, self.rdb, self.retry), dead_runs=True, study=holder_study)
            running = self._running(holder)
        return not running and self.store.take_over(bid, dev, holder, tid, name, number)

    def _running(self, trial_id: int) -> bool:
        try:
            return self.rdb.get_trial(trial_id).state == TrialState.RUNNING
        except KeyError:  # its study was deleted
            return False

    def _await(self, groups: dict[str, list[Pending]]) -> None:
        """Wait for candidates other workers are measuring: answered from the store when they
        are done, measured here when their worker is gone (its trial failed as stale)."""
        while groups:
            time.sleep(self.poll_s)
            self._recover()
            for bid, ps in list(groups.items()):
                done = self._reuse(known_outcome(self.store, bid, self.evaluator.device))
                if done is not None:
                    self.summary.waited += len(ps)
                    for p in ps:
                        self._finish(p, done)
                    del groups[bid]
            mine, groups = self._claim_all(groups)
            self._measure(mine)

    def _measure(self, groups: dict[str, list[Pending]]) -> None:
        """Build and evaluate candidates this worker claimed, reading the store once more first
        (a claim taken over from a finished trial may come with its outcome stored)."""
        known = {bid: known_outcome(self.store, bid, self.evaluator.device) for bid in groups}
        todo = {}
        for bid, ps in groups.items():
            done = self._reuse(known[bid])
            if done is None:
                todo[bid] = ps
                continue
            for p in ps:
                self._finish(p, done)
        if todo:
            self._build_and_evaluate(todo, known)

    def _ask(self) -> Pending:
        while True:
            with warnings.catch_warnings():  # ask-and-tell keeps its own heartbeat (resume.Heartbeat)
                warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed")
                trial = self.study.ask()
            tid = self.rdb.get_trial_id_from_study_id_trial_number(self.study_id, trial.number)
            self.heartbeat.add(tid)
            try:
                self.rdb.set_trial_system_attr(tid, RUN, str(self.run_id))
                fam, raw = suggest(trial, list(self.families.values()))
                break
            except UpdateFinishedTrialError:  # failed as stale in that instant (beats that stalled): ask again
                self.heartbeat.discard(tid)
        p = Pending(trial, tid, fam, raw)
        try:
            p.candidate = make_candidate(fam, raw)
        except InvalidCandidate as exc:
            p.invalid = str(exc)
            return p
        p.rendered = render(p.candidate, fam)
        p.build_id = self.evaluator.build_id(p.rendered)
        p.parents = self._parents(trial, p.candidate)
        return p

    def _parents(self, trial: optuna.Trial, child: Candidate) -> list[tuple[str, dict[str, list[Value]], str]]:
        """(parent candidate id, mutation, kind) for the edges of this trial's candidate."""
        trials = self.study.get_trials(deepcopy=False)
        by_number = {t.number: t for t in trials}
        frozen = by_number.get(trial.number)
        if frozen is not None and IMPORTED_FROM in frozen.user_attrs:
            # its ancestry is its source study's; where today's template renders it differently
            # (a new id), an import edge ties it to the candidate it was (evo.search.warmstart)
            src = frozen.user_attrs[IMPORTED_FROM].get(CANDIDATE)
            return [(src, {}, "import")] if src else []
        prop = proposal_of(frozen, by_number) if frozen is not None else None
        if prop and prop.get("op") in ("mutation", "crossover"):
            out = []
            for n in prop["parents"]:
                parent = by_number.get(n)
                pc = self._candidate_of(parent) if parent is not None else None
                if pc is not None and CANDIDATE in parent.user_attrs:  # type: ignore[union-attr]
                    out.append((parent.user_attrs[CANDIDATE], _mutation(pc, child), prop["op"]))  # type: ignore[union-attr]
            return out
        best: tuple[int, float, str, Candidate] | None = None
        for t in trials:
            fit, pc = fitness(t), None
            if fit is None or CANDIDATE not in t.user_attrs:
                continue
            pc = self._candidate_of(t)
            if pc is None or pc.family != child.family or pc == child:
                continue
            d = hamming(pc, child)
            if best is None or (d, -fit) < (best[0], -best[1]):
                best = (d, fit, t.user_attrs[CANDIDATE], pc)
        return [] if best is None else [(best[2], _mutation(best[3], child), "nearest")]

    def _candidate_of(self, t: FrozenTrial) -> Candidate | None:
        got = from_trial_params(t.params)
        if got is None or got[0] not in self.families:
            return None
        try:
            return make_candidate(self.families[got[0]], got[1])
        except InvalidCandidate:
            return None

    def _reuse(self, known: Known | None) -> Outcome | None:
        """A final outcome from the store, or None when the candidate still needs work."""
        if known is None:
            return None
        if known.status in FAILED:
            return Outcome(known.status.value, known.reason, candidate_id=known.candidate_id, reused=True)
        if known.status in PASSED and known.timed_beside(self.evaluator.paired()) and not objective.missing_cases(
                known.timings, self.baseline, self.cases):
            return self._scored(known.candidate_id, known.timings, known.checks, reused=True)
        return None

    def _scored(self, cid: str, timings: Sequence[Timing], checks: Sequence[CheckResult],
                reused: bool = False) -> Outcome:
        missing = objective.missing_cases(timings, self.baseline, self.cases)
        if missing:
            return Outcome("unscored", "no timing on " + ", ".join(s.tag for s in missing),
                           candidate_id=cid, reused=reused)
        vals = objective.values(timings, self.baseline, self.cases, self.objective)
        per_case = speedups(timings, self.baseline)
        return Outcome(Status.FAST.value, values=vals, candidate_id=cid, reused=reused,
                       speedups={s.tag: per_case[s.tag] for s in self.cases if s.tag in per_case},
                       shares=worst_shares(checks))

    def _build_and_evaluate(self, groups: dict[str, list[Pending]], known: dict[str, Known | None]) -> None:
        bids = list(groups)
        builds = self.evaluator.build([groups[b][0].rendered for b in bids])  # type: ignore[misc]
        jobs: list[tuple[Job, str, Known | None]] = []
        for bid, res in zip(bids, builds, strict=True):
            ps = groups[bid]
            if isinstance(res, Unmeasured):
                self._finish_all(ps, Outcome(UNMEASURED, res.reason))
                continue
            cid = self.store.record_build(ps[0].rendered, res, self.run_id)
            if res.status is not Status.BUILT:
                self._finish_all(ps, Outcome(res.status.value, res.reason, candidate_id=cid))
                continue
            if self.evaluator.not_evaluated:
                self._finish_all(ps, Outcome(NOT_EVALUATED, self.evaluator.not_evaluated, candidate_id=cid))
                continue
            k = known[bid]
            prior = k if k is not None and k.status in PASSED else None
            if prior is not None and not prior.timed_beside(self.evaluator.paired()):
                prior = replace(prior, timings=[])   # timed another way: every case again, GREEN's checks kept
            need = objective.missing_cases(prior.timings, self.baseline, self.cases) if prior else self.cases
            jobs.append((Job(ps[0].rendered, res, prior is None, tuple(need)), cid, prior))  # type: ignore[arg-type]
        if not jobs:
            return
        told = 0
        for ev in self.evaluator.evaluate(self._in_time([j for j, _, _ in jobs])):
            job, cid, prior = jobs[told]
            self._finish_all(groups[job.build.build_id], self._evaluated(cid, ev, prior))
            told += 1
        self._give_back([p for job, _, _ in jobs[told:] for p in groups[job.build.build_id]])

    def _in_time(self, jobs: Sequence[Job]) -> Iterator[Job]:
        """``jobs`` in order until the time budget is spent. The evaluator draws a job only as it
        starts it, so no evaluation starts past the budget; one in progress finishes."""
        for job in jobs:
            if self._out_of_time():
                return
            yield job

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
        self.unstarted += self._mirror_abandoned(released, dead_runs=False)

    def _evaluated(self, cid: str, ev: Evaluation | Unmeasured, prior: Known | None) -> Outcome:
        """The outcome of an evaluation, on top of what the store held (``prior``: a passed
        evaluation whose timings FAST completes and whose GREEN checks count for the margin)."""
        if isinstance(ev, Unmeasured):
            return Outcome(UNMEASURED, ev.reason)
        self.store.record_evaluation(ev, self.run_id, device=self.evaluator.device)
        if ev.status is Status.FAST:
            before = prior or Known(cid, Status.FAST)
            return self._scored(cid, before.timings + list(ev.timings), before.checks + list(ev.checks))
        if ev.status is Status.GREEN:
            return Outcome(Status.GREEN.value, ev.reason or "passed GREEN, not timed", candidate_id=cid)
        return Outcome(ev.status.value, ev.reason, candidate_id=cid)

    # ------------------------------------------------------------------ telling

    def _lost(self, p: Pending, cid: str | None) -> None:
        """Our trial was failed as stale meanwhile (and re-queued): mirror FAIL, say so."""
        self.store.record_trial(self.study.study_name, p.trial.number, cid, self.run_id,
                                TrialState.FAIL.name, None)
        self.summary.lost += 1
        self.reporter.note(_lost_note(p.trial.number))

    def _finish_all(self, ps: Sequence[Pending], outcome: Outcome) -> None:
        for i, p in enumerate(ps):
            self._finish(p, outcome if i == 0 else Outcome(**{**outcome.__dict__, "reused": True}))

    def _finish(self, p: Pending, outcome: Outcome) -> None:
        trial, cid = p.trial, outcome.candidate_id
        label = (p.candidate or Candidate(p.family.name, tuple(p.raw.items()))).label()
        if cid is not None and cid not in self.in_study:
            for parent, mutation, kind in p.parents:
                if parent != cid:  # an import that renders as it did is the same candidate
                    self.store.add_edge(parent, cid, mutation, kind, self.run_id)
            self.in_study.add(cid)
        state = TrialState.COMPLETE if outcome.values is not None else TrialState.FAIL
        value = None if outcome.values is None else Best(0, "", "", outcome.values).score
        try:
            trial.set_user_attr(LABEL, label)
            if outcome.reason:
                trial.set_user_attr(REASON, outcome.reason)
            if cid is not None:
                trial.set_user_attr(CANDIDATE, cid)
            if outcome.reused:
                trial.set_user_attr(REUSED, True)
            if outcome.speedups:  # per case, where Optuna's tools look (optuna-dashboard, load_study)
                trial.set_user_attr(SPEEDUPS, outcome.speedups)
            if outcome.shares:    # JSON keys are strings
                trial.set_user_attr(GREEN_SHARE, {str(d): round(v, 4) for d, v in sorted(outcome.shares.items())})
            trial.set_user_attr(STATUS, outcome.status)  # last: a FAIL trial with a status is an outcome
            # the store first: if we die before tell, recovery marks both FAIL (see _recover)
            self.store.record_trial(self.study.study_name, trial.number, cid, self.run_id, state.name, value)
            if outcome.values is not None:
                self.study.tell(trial, outcome.values)
            else:
                self.study.tell(trial, state=TrialState.FAIL)
        except (UpdateFinishedTrialError, ValueError):  # ValueError: "Cannot tell a FAIL trial"
            if self._running(p.trial_id):
                raise
            self._lost(p, cid)
            return
        finally:
            self.heartbeat.discard(p.trial_id)
        s = self.summary
        s.finished += 1
        s.counts[outcome.status] += 1
        s.reused += outcome.reused
        if outcome.values is not None and (s.best is None or Best(0, "", "", outcome.values).score > s.best.score):
            s.best = Best(trial.number, cid or "", label, outcome.values, over_share(outcome.shares or {}))
        self.reporter.advance(trial.number, outcome, s.best)


def _lost_note(number: int) -> str:
    return (f"trial {number} was failed as stale by another worker before this one could tell it "
            "(its heartbeats stalled past the grace period); its retry is answered from the store")


def _mutation(parent: Candidate, child: Candidate) -> dict[str, list[Value]]:
    return {k: [old, new] for k, (old, new) in diff(parent, child).items()}

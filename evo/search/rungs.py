"""A batch's built candidates through the rungs: GREEN and the screen, the pruner, the full protocol.

A search whose evaluator screens (the GPU) evaluates each new candidate in two requests
(docs/design.md, "Rungs"), where the screen is fewer cases than the study's (a study of short
cases only, or of one case per bucket, is timed in full: its screen would cost as much). The first runs GREEN, stopping at its first failing check, then the
screen: the candidate on the study's :func:`~evo.search.screen.screen_cases`, alone with few
samples against the worker's cached scoring baseline, except the long cases a ``screen_full``
worker times as the full rung does (its ``screen_full_cases``: :meth:`evo.gpu.evaluate.Plan.for_case`),
which the full rung then reuses (:func:`reusable`). It comes back ``green``; it is stored at once (the
screened score in its device info), its screened values go on the trial (user attr ``screen``;
the screened score is the intermediate value of step 0 where the study has one objective), and
the study's pruner decides (``trial.should_prune()``). A pruned candidate's stored screen
becomes ``pruned`` and its trials are told PRUNED; a kept one goes straight on to the full
protocol (every case the screen did not time in full, the scoring baseline timed beside it; the
reused ones join its timings, ``reused_from_screen``), whose evaluation stores its
``screen_score`` beside its ``full_score`` (geometric means over the study's cases): what
``evo insights`` and the run summary read the screen's error from.

Resume: a stored screen whose candidate was neither pruned nor timed in full (the run stopped
in between) is judged again from the store when a later trial draws the candidate, never timed
again; a stored ``pruned`` is final while the search screens (``--full-only`` times it in full,
its GREEN checks kept). Without screens (``--full-only``, a replay) a candidate takes one request
as before: GREEN unless it passed, then the full protocol on the cases it lacks.

Jobs are drawn lazily, as the evaluator starts them (so the time budget can end a batch between
two requests), and a kept candidate's full rung goes ahead of the batch's next screen. The
evaluator draws a request before handing back the previous result, so the GPU is already on the
next screen while this process stores, prunes and tells.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError

from evo.errors import EvoError
from evo.results import BuildResult, Evaluation, Status, Timing
from evo.scoring import score
from evo.search.evaluators import Evaluator, Job, Unmeasured
from evo.search.internals import one_write
from evo.search.outcomes import Scoring
from evo.search.pruner import SCREEN_ATTR, SCREEN_STEP, EvoPruner, ScreenOnlyPruner
from evo.search.records import UNMEASURED, Outcome, Pending, RunSummary
from evo.search.screen import Screen, screen_cases, screened
from evo.search.storeview import Known, full_cases
from evo.vocab import FULL, PASSED, SCREEN

Step = Job | Outcome   # what a candidate does next: a request to the GPU, or the outcome it is told


@dataclass
class Work:
    """One claimed, built candidate on its way up the rungs: its trials (the first is told the
    outcome, the others reuse it), its id and build, what the store held for it (a passed GREEN,
    a screen), and once screened its :class:`~evo.search.screen.Screen` and stored screen's id."""

    ps: list[Pending]
    cid: str
    build: BuildResult
    prior: Known | None = None
    screen: Screen | None = None
    screen_id: int | None = None
    reused: list[Timing] = field(default_factory=list)   # the screen's cases timed as the full rung times them

    def job(self, green: bool, cases: Sequence[Any], rung: str) -> Job:
        assert self.ps[0].rendered is not None
        return Job(self.ps[0].rendered, self.build, green, tuple(cases), rung)


class Ladder:
    """Takes a batch's :class:`Work` through the rungs (module docstring) and tells each
    candidate's trials through ``finish``; ``screening``: whether new candidates get a screen."""

    def __init__(self, study: optuna.Study, rdb: optuna.storages.RDBStorage, store: Any, evaluator: Evaluator,
                 scoring: Scoring, summary: RunSummary, run_id: Any, *, screening: bool,
                 finish: Callable[[Sequence[Pending], Outcome], None], out_of_time: Callable[[], bool],
                 elapsed: Callable[[], float] = lambda: 0.0) -> None:
        self.study, self.rdb, self.store, self.evaluator, self.scoring = study, rdb, store, evaluator, scoring
        self.summary, self.run_id, self.finish, self.out_of_time = summary, run_id, finish, out_of_time
        self.elapsed = elapsed   # seconds since the search loop began (the summary's first_gpu_s)
        chosen = screen_cases(scoring.cases) if screening else []
        # a screen of every case (a study of short cases, or of one case per bucket) would cost
        # what the full rung costs: such a study is timed in full
        self.screen_cases = chosen if len(chosen) < len(scoring.cases) else []

    def run(self, works: Sequence[Work]) -> list[Work]:
        """Evaluate ``works`` until each is told or the time budget is spent; returns those it
        left unfinished (their trials are the caller's to give back)."""
        queue: collections.deque[tuple[Work, Job]] = collections.deque()
        for w in works:
            self._next(w, self.first(w), queue, ahead=False)
        drawn: collections.deque[tuple[Work, Job]] = collections.deque()

        def jobs() -> Iterator[Job]:
            while queue and not self.out_of_time():
                drawn.append(queue.popleft())
                yield drawn[-1][1]

        while queue and not self.out_of_time():   # a result may queue a full rung after the draws ran dry
            for ev in self.evaluator.evaluate(jobs()):
                w, job = drawn.popleft()
                self._next(w, self.after(w, job, ev), queue, ahead=True)
        return [w for w, _ in queue]

    def _next(self, w: Work, step: Step, queue: collections.deque[tuple[Work, Job]], ahead: bool) -> None:
        """Queue ``w``'s next request (``ahead`` of the batch's other candidates: a kept one's
        full rung), or tell its trials their outcome."""
        if not isinstance(step, Job):
            self.finish(w.ps, step)
        elif ahead:
            queue.appendleft((w, step))
        else:
            queue.append((w, step))

    # ------------------------------------------------------------------ the steps

    def first(self, w: Work) -> Step:
        """A candidate's first step: its screen, a judgement of the screen the store holds, or
        the full rung on the cases it lacks (GREEN only if it never passed)."""
        prior = w.prior
        if prior is None:
            if self.screen_cases:
                return w.job(True, self.screen_cases, SCREEN)
            return w.job(True, self.scoring.cases, FULL)
        if self.screen_cases and prior.rung == SCREEN and prior.status is Status.GREEN:
            w.screen = screened(prior.timings, self.scoring.baseline, self.scoring.cases)
            w.reused = reusable(prior.timings, prior.full_cases)
            w.screen_id, w.prior = prior.evaluation_id, replace(prior, timings=[])
            return self._judge(w)
        if prior.rung == SCREEN or not prior.timed_beside(self.scoring.paired()):
            prior = w.prior = replace(prior, timings=[])   # timed another way: every case again, GREEN's checks kept
        return w.job(False, self.scoring.missing(prior.timings), FULL)

    def after(self, w: Work, job: Job, ev: Evaluation | Unmeasured) -> Step:
        """What follows a request's result: stored (a screen with its screened score, a full
        rung after a screen with both scores), then judged (a screen) or scored (anything else)."""
        if isinstance(ev, Unmeasured):
            return Outcome(UNMEASURED, ev.reason)
        s = self.summary
        if s.first_gpu_s is None:            # when the GPU began it: now, less the GPU seconds it took
            s.first_gpu_s = max(0.0, self.elapsed() - ev.green_seconds - ev.fast_seconds)
        s.measured_ids.add(w.cid)
        ev.device["rung"] = job.rung        # what was asked, whether or not the worker target says so
        s.spent("GREEN", ev.green_seconds)
        s.spent(job.rung, ev.fast_seconds)
        if job.rung == SCREEN and ev.status in PASSED:
            ev.status = Status.GREEN    # a screen is never a full timing, whatever a worker target calls it
            w.screen = screened(ev.timings, self.scoring.baseline, self.scoring.cases)
            if w.screen is not None:
                ev.device["screen_score"] = f"{w.screen.score:.6f}"
            w.screen_id = self._store(ev)
            w.reused = reusable(ev.timings, full_cases(ev.device))
            w.prior = Known(w.cid, Status.GREEN, checks=list(ev.checks))   # GREEN's checks count for the margin
            s.screened += 1
            return self._judge(w)
        if w.reused and ev.status is Status.FAST:   # the screen's full-protocol cases complete the full rung
            ev.timings = [*w.reused, *ev.timings]
            ev.device["reused_from_screen"] = ",".join(sorted({t.shape.tag for t in w.reused}))
        outcome = self.scoring.evaluated(w.cid, ev, w.prior)
        if w.screen is not None and outcome.values is not None:
            full = self._full_score(ev)
            if full is not None:
                ev.device |= {"screen_score": f"{w.screen.score:.6f}", "full_score": f"{full:.6f}"}
                s.screen_errors.append(w.screen.score / full - 1.0)
        self._store(ev)
        return outcome

    def _judge(self, w: Work) -> Step:
        """The pruner's verdict on a screened candidate: PRUNED (its stored screen too), or the
        full rung. A candidate the screen could not score (a bucket without a timed case) is kept."""
        screen = w.screen
        reused = {t.shape.tag for t in w.reused}
        rest = [s for s in self.scoring.cases if s.tag not in reused]
        if screen is None:
            self.summary.kept += 1
            return w.job(False, rest, FULL)
        pruned, why = self._prune(w.ps[0], screen)
        if not pruned:
            self.summary.kept += 1
            return w.job(False, rest, FULL)
        if w.screen_id is not None:
            self.store.set_status(w.screen_id, Status.PRUNED, why)
        return Outcome(Status.PRUNED.value, why, candidate_id=w.cid)

    def _prune(self, p: Pending, screen: Screen) -> tuple[bool, str]:
        """Report ``screen`` on ``p``'s trial and ask the study's pruner (Optuna's interface where
        the study has one objective; the pruner itself for several, which Optuna's trials do not
        report): (pruned, why). A trial failed as stale meanwhile is kept (its retry reads the
        stored screen)."""
        pruner = self.study.pruner
        try:
            with one_write(p.trial, self.rdb, p.trial_id):
                p.trial.set_user_attr(SCREEN_ATTR, screen.attrs())
            if len(self.study.directions) == 1:
                p.trial.report(screen.score, SCREEN_STEP)
                pruned = p.trial.should_prune()
            else:
                pruned = pruner.prune(self.study, self.rdb.get_trial(p.trial_id))
        except UpdateFinishedTrialError:
            return False, ""
        why = pruner.why(p.trial.number) if isinstance(pruner, EvoPruner | ScreenOnlyPruner) else ""
        return pruned, why or f"{'pruned' if pruned else 'kept'} by {type(pruner).__name__} after its screen " \
                              f"(x{screen.score:.3f})"

    def _full_score(self, ev: Evaluation) -> float | None:
        """The full rung's geometric mean over the study's cases (what the screened score estimates)."""
        try:
            return score(ev.timings, self.scoring.baseline, self.scoring.cases)
        except EvoError:
            return None

    def _store(self, ev: Evaluation) -> int:
        return int(self.store.record_evaluation(ev, self.run_id, device=self.evaluator.device))


def reusable(timings: Sequence[Timing], tags: Sequence[str]) -> list[Timing]:
    """The timings of a screen's cases named in ``tags`` (its ``screen_full_cases``: timed as the
    full rung times them, beside the scoring baseline, outputs checked), which the full rung takes
    instead of timing those cases again."""
    wanted = set(tags)
    return [t for t in timings if t.shape.tag in wanted]

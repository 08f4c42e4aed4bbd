"""Run one Optuna sampler against a problem in memory, the way ``evo run --replay`` runs it.

The loop is :class:`evo.search.loop.Search`'s without the database: batches of ``batch``
trials are asked (each picks a family, then that family's parameters, through
:func:`evo.search.params.suggest`), then told in order: an invalid point FAIL with status
``invalid``; a timed point COMPLETE with its objective; anything else FAIL with its recorded
status (``unmeasured`` when the recording lacks it). A repeat is answered the same way and is
free. ``tests/test_bench_runners.py`` checks that the trials equal those of a real
``evo run --replay`` with the same sampler and seed.

Warm start: samplers that start from the manifest defaults themselves (``evo``) are told to;
for every other sampler the defaults are enqueued (``study.enqueue_trial``), so the first
trials evaluate them and the sampler sees their results.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import optuna
from optuna.trial import TrialState

from evo.samplerbench.problem import Problem, Tally, candidate_key
from evo.search.params import suggest, trial_params
from evo.search.resume import STATUS

SamplerFactory = Callable[[Problem, int, bool], optuna.samplers.BaseSampler]


@dataclass
class Trace:
    """What one run did: the tally (evaluations, target, best-so-far curve), trials asked,
    why it stopped, the keys it proposed in order (None: invalid) and its wall time."""

    tally: Tally
    trials: int = 0
    stopped: str = ""
    proposed: list[str | None] = field(default_factory=list)
    seconds: float = 0.0


def run_optuna(problem: Problem, make: SamplerFactory, seed: int, warm: bool, *, self_seeding: bool = False,
               batch: int = 8, budget: int | None = None, trial_cap: int | None = None,
               stop_at_target: bool = True) -> Trace:
    """One seeded run. Stops when the target is reached (unless ``stop_at_target`` is off), the
    evaluation budget is spent, every valid point was evaluated, or ``trial_cap`` trials were
    asked. ``self_seeding``: the sampler proposes the defaults itself when ``warm``."""
    t0 = time.perf_counter()
    budget = min(budget or problem.size, problem.size)
    cap = trial_cap if trial_cap is not None else 10 * problem.size
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = optuna.create_study(direction="maximize", sampler=make(problem, seed, warm))
        if warm and not self_seeding:
            for d in problem.defaults:
                study.enqueue_trial(trial_params(d))
    trace = Trace(Tally(problem, budget))
    tally, tried = trace.tally, set[object]()
    while True:
        if stop_at_target and tally.reached is not None:
            trace.stopped = "reached"
            break
        if tally.evaluations >= budget:
            trace.stopped = "budget"
            break
        if trace.trials >= cap:
            trace.stopped = "trial cap"
            break
        left = problem.size - len(tried)
        if left == 0:
            trace.stopped = "space exhausted"
            break
        k = min(batch, cap - trace.trials, left)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            asked = [(trial, *suggest(trial, problem.families)) for trial in (study.ask() for _ in range(k))]
        for trial, fam, raw in asked:
            trace.trials += 1
            key = candidate_key(fam, raw)
            trace.proposed.append(key)
            tally.propose(key)
            if key is not None:
                tried.add(key)
            out = "invalid" if key is None else problem.outcome(key)
            if isinstance(out, float):
                trial.set_user_attr(STATUS, "fast")
                study.tell(trial, out)
            else:
                trial.set_user_attr(STATUS, out)
                study.tell(trial, state=TrialState.FAIL)
    trace.seconds = time.perf_counter() - t0
    return trace

"""Run a sampler benchmark: every entrant x start mode x seed on one problem, in parallel.

A task is one seeded run; tasks go to a process pool (``jobs`` processes, each loading the
problem once), and come back as :class:`RunResult` rows in a fixed order, so a benchmark is
reproducible whatever the number of processes. Kernel Tuner's cache file is written once per
problem into a temporary folder.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import optuna

from evo.family.space import Pins
from evo.results import Shape
from evo.toolchain.build import cpus
from evo.samplerbench import kt_runner
from evo.samplerbench.entrants import Entrant
from evo.samplerbench.optuna_runner import Trace, run_optuna
from evo.samplerbench.problem import Problem



@dataclass(frozen=True)
class Spec:
    """How to build the problem in any process."""

    recording: str
    families: tuple[str, ...] | None
    cases: tuple[Shape, ...] | None
    baseline: str
    tolerance: float
    pins: Pins = field(default_factory=dict)   # --pin, per family: a sub-space (Problem.load)

    def load(self) -> Problem:
        return Problem.load(self.recording, self.families, self.cases, self.baseline, self.tolerance, self.pins)


@dataclass
class RunResult:
    """One run: evaluations to the target (None: not reached within its budget)."""

    sampler: str
    mode: str
    seed: int
    evaluations: int | None
    spent: int                      # evaluations spent in all
    trials: int
    stopped: str
    seconds: float
    curve: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["curve"] = [None if math.isinf(x) else round(x, 5) for x in self.curve]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunResult:
        return cls(**{**d, "curve": [-math.inf if x is None else x for x in d.get("curve", [])]})


@dataclass(frozen=True)
class Task:
    entrant: Entrant
    mode: str
    seed: int


_state: dict[str, Any] = {}


def _init(spec: Spec, cache: str | None, batch: int) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    problem = spec.load()
    _state.update(problem=problem, batch=batch, cache=cache,
                  space=kt_runner.Space(problem) if cache else None)


def _result(task: Task, trace: Trace) -> RunResult:
    t = trace.tally
    return RunResult(task.entrant.name, task.mode, task.seed, t.reached, t.evaluations, trace.trials,
                     trace.stopped, round(trace.seconds, 3), list(t.curve))


def run_task(task: Task) -> RunResult:
    """One seeded run in this process (after :func:`_init`)."""
    problem: Problem = _state["problem"]
    warm = task.mode == "warm"
    e = task.entrant
    if e.kind == "kt":
        trace = kt_runner.run_kt(_state["space"], Path(_state["cache"]), e.strategy, task.seed, warm)
    else:
        trace = run_optuna(problem, e.make, task.seed, warm, self_seeding=e.self_seeding,
                           batch=_state["batch"], trial_cap=e.trial_cap(problem))
    return _result(task, trace)


def tasks(entrants: Sequence[Entrant], modes: Sequence[str], seeds: Sequence[int]) -> list[Task]:
    """Every run, in report order; warm runs only for entrants that take a starting point."""
    return [Task(e, m, s) for e in entrants for m in modes if m == "cold" or e.warm for s in seeds]


def benchmark(spec: Spec, entrants: Sequence[Entrant], modes: Sequence[str], seeds: Sequence[int], *,
              batch: int = 1, jobs: int | None = None,
              progress: Callable[[RunResult], None] | None = None) -> tuple[list[RunResult], float]:
    """All runs of one problem and the wall time they took."""
    todo = tasks(entrants, modes, seeds)
    jobs = max(1, min(jobs or cpus(), len(todo)))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="evo-bench-") as tmp:
        cache = None
        if any(e.kind == "kt" for e in entrants):
            cache = str(Path(tmp) / "kt-cache.json")
            kt_runner.write_cache(spec.load(), Path(cache))
        out: list[RunResult | None] = [None] * len(todo)
        if jobs == 1:
            _init(spec, cache, batch)
            for i, t in enumerate(todo):
                out[i] = run_task(t)
                if progress:
                    progress(out[i])  # type: ignore[arg-type]
        else:
            with cf.ProcessPoolExecutor(jobs, initializer=_init, initargs=(spec, cache, batch)) as pool:
                futures = {pool.submit(run_task, t): i for i, t in enumerate(todo)}
                for fut in cf.as_completed(futures):
                    out[futures[fut]] = r = fut.result()
                    if progress:
                        progress(r)
    return [r for r in out if r is not None], time.perf_counter() - t0

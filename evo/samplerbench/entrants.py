"""The samplers a benchmark compares, by name, each with how it is run.

- evo's own samplers (``evo``, ``evo-gp``, ``random``): built by
  :func:`evo.search.samplers.make_sampler` exactly as ``evo run --sampler NAME`` builds them;
  they never propose an invalid or tried point, so their budget is the evaluation budget.
- Optuna's samplers (``tpe`` as ``evo run`` configures it, ``gp``: ``GPSampler``,
  ``optuna-random``: ``RandomSampler``): they may propose invalid and already-tried points
  (free under the counting rule) and can loop on them, so each also stops at a trial cap.
  ``gp`` needs scipy and costs seconds per trial, hence its small cap.
- Kernel Tuner's strategies (``kt:NAME``), in Kernel Tuner's simulation mode
  (:mod:`evo.samplerbench.kt_runner`); skipped with a message when it is not installed.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import optuna

from evo.errors import EvoError
from evo.vocab import BENCH_EVO_SAMPLERS, BENCH_OPTUNA_SAMPLERS, BENCH_SAMPLERS
from evo.search import surrogate
from evo.samplerbench import kt_runner
from evo.samplerbench.problem import Problem
from evo.search.samplers import make_sampler

# trial caps, as multiples of the number of valid points (None: a fixed number of trials)
TRIAL_CAP_FACTOR = {"tpe": 2, "optuna-random": 4}
GP_TRIALS = 48
KT_PREFIX = "kt:"


@dataclass(frozen=True)
class Entrant:
    """One sampler of the benchmark: ``kind`` is evo, optuna or kt; ``warm`` whether it can
    start from the manifest defaults."""

    name: str
    kind: str
    warm: bool = True

    @property
    def self_seeding(self) -> bool:
        """Whether the sampler proposes the defaults itself when warm (else they are enqueued)."""
        return self.name in ("evo", "evo-gp")

    @property
    def strategy(self) -> str:
        return self.name[len(KT_PREFIX):]

    def trial_cap(self, problem: Problem) -> int | None:
        """The most trials a run may ask (None: the evaluation budget alone stops it)."""
        if self.name == "gp":
            return GP_TRIALS
        factor = TRIAL_CAP_FACTOR.get(self.name)
        return None if factor is None else factor * problem.size

    def make(self, problem: Problem, seed: int, warm: bool) -> optuna.samplers.BaseSampler:
        """A fresh sampler for one run (Optuna-driven entrants only)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            if self.kind == "evo":
                return make_sampler(self.name, problem.families, seed, warm=warm)
            if self.name in ("tpe", "gp"):
                return make_sampler(self.name, problem.families, seed)
            if self.name == "optuna-random":
                return optuna.samplers.RandomSampler(seed=seed)
        raise EvoError(f"{self.name} is not driven through Optuna")


def gp_available() -> str | None:
    """None when Optuna's GPSampler can run here, else why not."""
    try:
        import scipy  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:
        return f"Optuna's GPSampler needs scipy and torch ({exc}); pip install 'evo-kernels[bench]'"
    return None


def resolve(names: Sequence[str], kt_strategies: Sequence[str] | None, note) -> list[Entrant]:
    """Entrants for the given sampler names plus Kernel Tuner's strategies (``kt_strategies``:
    None for the default set, empty for none); unavailable ones are skipped with a note."""
    out: list[Entrant] = []
    for n in names:
        if n in BENCH_EVO_SAMPLERS:
            if n == "evo-gp":
                try:
                    surrogate.require()
                except EvoError as exc:
                    note(f"skipping evo-gp: {exc}")
                    continue
            out.append(Entrant(n, "evo"))
        elif n in BENCH_OPTUNA_SAMPLERS:
            why = gp_available() if n == "gp" else None
            if why:
                note(f"skipping gp: {why}")
                continue
            out.append(Entrant(n, "optuna"))
        else:
            raise EvoError(f"unknown sampler {n!r}; choose from {', '.join(BENCH_SAMPLERS)} "
                           f"(Kernel Tuner's strategies go in --kt)")
    if kt_strategies is not None and not kt_strategies:
        return out
    why = kt_runner.available()
    if why:
        note(f"skipping Kernel Tuner: {why}")
        return out
    for s in kt_runner.names(kt_strategies):
        out.append(Entrant(KT_PREFIX + s, "kt", warm=s in kt_runner.TAKES_X0))
    return out

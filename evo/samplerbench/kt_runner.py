"""Kernel Tuner's strategies on a problem, in Kernel Tuner's own simulation mode.

Kernel Tuner (an optional dependency: ``pip install 'evo-kernels[bench]'``) tunes one kernel
over ``tune_params`` with restrictions; in simulation mode it reads every configuration's
result from a cache file instead of running it. :func:`write_cache` converts a problem into
such a file:

- ``tune_params``: a ``family`` index (when there are several families), then every family's
  parameters; numbers keep their values (Kernel Tuner's numeric strategies use them), any
  other value (booleans, names) becomes its index in the manifest domain. A point of one family
  holds the other families' parameters at their manifest defaults. A parameter with one value
  (a gene pinned by ``--pin``) is no tunable: Kernel Tuner walks the free genes of the
  sub-space only, in manifest order, as it walks a whole space.
- restrictions: exactly the problem's valid points, so Kernel Tuner's search space is evo's.
- ``time`` = 1 / objective for a timed point; a build rejection (``resource_rejected``,
  ``compile_failed``) is ``CompilationFailedConfig``; any other failure and an unrecorded point
  ``RuntimeFailedConfig``. Kernel Tuner counts each of them as one evaluation, as evo does.

:func:`run_kt` runs a strategy with ``max_fevals`` = the budget and feeds the configurations it
evaluated, in order, to the same :class:`~evo.samplerbench.problem.Tally` as every other
sampler (repeats free). Warm start: ``x0`` = the first family's defaults, for the strategies
that take a starting point (:data:`TAKES_X0`).

Same space, same order, same seed. Kernel Tuner's default constraint solver lists the valid
points in an order that depends on how the restriction is spelled (a Python function, or the
manifest's expression strings), and its strategies walk that list: the spelling alone moved
``bayes_opt`` from a median of 40 evaluations to 300 on flash_mma. Every run here builds the
space by brute force (:data:`SEARCHSPACE`: the Cartesian product of ``tune_params`` in order,
filtered), one order whatever the spelling. Kernel Tuner draws from Python's and numpy's global
generators, which are seeded per run, and ``bayes_opt`` draws its initial Latin hypercube from
scipy with fresh entropy, which :func:`seeded_qmc` seeds from the run's seed.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import random
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evo.errors import EvoError
from evo.family.manifest import Value
from evo.samplerbench.optuna_runner import Trace
from evo.samplerbench.problem import Problem, Tally
from evo.family.space import Candidate

# strategies that read strategy_options["x0"] (the others refuse it or ignore it)
TAKES_X0 = frozenset({"basinhopping", "diff_evo", "dual_annealing", "firefly_algorithm", "genetic_algorithm",
                      "greedy_ils", "greedy_mls", "minimize", "mls", "ordered_greedy_mls", "pso",
                      "simulated_annealing"})
# the strategies benchmarked by default: every built-in one that needs no extra package, but
# hybrid_vndx (90-450 s per run here, and far behind on flash_mma: --kt hybrid_vndx runs it)
STRATEGIES = ("adaptive_tabu_greywolf", "basinhopping", "bayes_opt", "diff_evo", "dual_annealing",
              "firefly_algorithm", "genetic_algorithm", "greedy_ils", "greedy_mls", "minimize",
              "mls", "ordered_greedy_mls", "pso", "random_sample", "simulated_annealing")
BUILD_FAILURES = ("resource_rejected", "compile_failed")
KERNEL = "evo_candidate"
# how Kernel Tuner builds the space (strategy_options["searchspace_construction_options"]): the
# product of tune_params in order, filtered by the restriction, whatever the restriction's spelling
SEARCHSPACE = {"framework": "bruteforce"}


def available() -> str | None:
    """None when Kernel Tuner can be imported, else why not (one line)."""
    try:
        import kernel_tuner  # noqa: F401
    except ImportError as exc:
        return f"Kernel Tuner is not installed ({exc}); pip install 'evo-kernels[bench]'"
    return None


class Space:
    """The problem spelled as Kernel Tuner parameters (see module docstring)."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.multi = len(problem.families) > 1
        self.domains: dict[str, list[Value]] = {}
        for fam in problem.families:
            for name, spec in fam.params.items():
                if name in self.domains and self.domains[name] != list(spec.values):
                    raise EvoError(f"parameter {name} has different domains in two families; "
                                   f"benchmark them separately (--families)")
                self.domains[name] = list(spec.values)
        self.tune_params: dict[str, list[Any]] = {"family": list(range(len(problem.families)))} if self.multi else {}
        for name, vals in self.domains.items():
            if len(vals) > 1:   # a pinned gene: the same in every configuration, so no tunable
                self.tune_params[name] = [self.encode(name, v) for v in vals]
        self.keys: dict[str, str] = {}  # Kernel Tuner cache key -> record key
        for key, cand in problem.points:
            self.keys[self.cache_key(self.config(cand))] = key

    def encode(self, name: str, v: Value) -> Any:
        numeric = isinstance(v, (int, float)) and not isinstance(v, bool)
        return v if numeric else self.domains[name].index(v)

    def config(self, cand: Candidate) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.multi:
            out["family"] = [f.name for f in self.problem.families].index(cand.family)
        for fam in self.problem.families:
            own = cand.p if fam.name == cand.family else fam.defaults()
            for name in fam.params:
                if name in self.tune_params:
                    out[name] = self.encode(name, own[name])
        return out

    def cache_key(self, config: dict[str, Any]) -> str:
        return ",".join(str(config[n]) for n in self.tune_params)

    def restriction(self, config: dict[str, Any] | None = None, **params: Any) -> bool:
        """Whether a configuration is one of the problem's valid points. Kernel Tuner passes it as
        one dict or, building its space by brute force, as keyword arguments."""
        return self.cache_key(params if config is None else config) in self.keys

    def cache(self) -> dict[str, Any]:
        entries = {}
        for ck, key in self.keys.items():
            cand = dict(self.problem.points)[key]
            entry: dict[str, Any] = dict(self.config(cand))
            out = self.problem.outcome(key)
            if isinstance(out, float):
                entry["time"] = 1.0 / out
            else:
                entry["time"] = "CompilationFailedConfig" if out in BUILD_FAILURES else "RuntimeFailedConfig"
            entries[ck] = entry
        return {"device_name": self.problem.recording.gpu, "kernel_name": KERNEL, "problem_size": [1, 1, 1],
                "tune_params_keys": list(self.tune_params), "tune_params": self.tune_params,
                "objective": "time", "cache": entries}


def write_cache(problem: Problem, path: Path) -> Space:
    """Write the Kernel Tuner cache file of ``problem`` to ``path`` (``.json``)."""
    space = Space(problem)
    path.write_text(json.dumps(space.cache()))
    return space


@contextlib.contextmanager
def seeded_qmc(seed: int) -> Iterator[None]:
    """Within the block, the Latin hypercube of Kernel Tuner's ``bayes_opt`` draws from ``seed``
    (scipy's default is fresh entropy, so a run could not be repeated)."""
    from kernel_tuner.strategies import bayes_opt
    from scipy.stats import qmc

    real = bayes_opt.LatinHypercube
    bayes_opt.LatinHypercube = functools.partial(qmc.LatinHypercube, rng=np.random.default_rng(seed))
    try:
        yield
    finally:
        bayes_opt.LatinHypercube = real


def run_kt(space: Space, cache: Path, strategy: str, seed: int, warm: bool, budget: int | None = None) -> Trace:
    """One seeded run of a Kernel Tuner strategy (see module docstring)."""
    import kernel_tuner

    problem = space.problem
    budget = min(budget or problem.size, problem.size)
    options: dict[str, Any] = {"max_fevals": budget, "searchspace_construction_options": dict(SEARCHSPACE)}
    if warm:
        if strategy not in TAKES_X0:
            raise EvoError(f"Kernel Tuner's {strategy} takes no starting point")
        x0 = space.config(problem.defaults[0])
        options["x0"] = [x0[n] for n in space.tune_params]
    random.seed(seed)
    np.random.seed(seed)
    t0 = time.perf_counter()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), seeded_qmc(seed):
        warnings.simplefilter("ignore")
        results, _ = kernel_tuner.tune_kernel(
            KERNEL, "/* simulated */", (1, 1, 1), [], space.tune_params, restrictions=space.restriction,
            strategy=strategy, strategy_options=options, cache=str(cache), simulation_mode=True, quiet=True)
    trace = Trace(Tally(problem, budget))
    for r in results:
        ck = space.cache_key(r)
        key = space.keys.get(ck)
        trace.proposed.append(key)
        trace.tally.propose(key)
    trace.trials = len(results)
    trace.stopped = "reached" if trace.tally.reached is not None else \
        "budget" if trace.tally.evaluations >= budget else "stopped by itself"
    trace.seconds = time.perf_counter() - t0
    return trace


def names(requested: Sequence[str] | None) -> list[str]:
    """The strategies to run: ``requested`` checked against Kernel Tuner's list, or the default set."""
    if not requested:
        return list(STRATEGIES)
    from kernel_tuner.interface import strategy_map
    bad = [s for s in requested if s not in strategy_map]
    if bad:
        raise EvoError(f"unknown Kernel Tuner strategy {', '.join(bad)}; known: {', '.join(sorted(strategy_map))}")
    return list(requested)

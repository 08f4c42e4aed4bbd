"""The ``evo-gp`` sampler: a Gaussian-process model of this study's measurements picks each candidate.

Needs scikit-learn (``pip install 'evo-kernels[gp]'``), imported only when this sampler is
made. It does not switch families (the ``successors`` of a manifest): the seed ladder is
climbed by the default sampler, :mod:`evo.search.sampler_evo`.

Start. Warm (as ``evo run`` always starts): each family's manifest default first (op ``seed``), then,
while fewer than ``min_timed`` points are timed, one-gene mutations of the best timed point
(op ``mutation``: local steps from a known-good kernel). Cold: uniformly random untried valid
points (op ``random``) until ``min_timed`` points are timed.

Then every candidate (op ``model``) maximizes expected improvement times the probability that
it does not fail. Model steps alternate between a global step, over the untried valid points
of the families (all of them, or, past ``pool_max`` points, a random sample plus every one-
and two-gene mutation of the best ``population`` timed points), and a local step, over the
untried points at most ``radius`` genes from the best timed point (a trust region; global
when it is exhausted). Local steps climb from a good kernel (the defaults, when warm) faster
than the model alone; global steps leave a local optimum.

- value: a GP of the standardized log fitness (mean log over objectives) over the encoded
  genes (:mod:`evo.search.encoding`, :func:`evo.search.surrogate.fit_value_model`), refit on
  every newly finished trial; its length scales are the genes' importances in this study.
- failure: :class:`evo.search.surrogate.FailureModel` over the points that were built (timed,
  or failed for a reason of their own: ``evo.search.sampler_evo.FAILURES``); ``unmeasured``,
  ``built`` and ``abandoned`` say nothing about the kernel and are left out. A point timed with
  a GREEN margin above the share promote verifies at (:func:`evo.search.sampler_evo.shippable`)
  counts as failed, and the value model leaves it out.
- pending trials of the same batch are added to the GP at its predicted mean (the "kriging
  believer"), which lowers the uncertainty around them, so a batch spreads out.

Ties are broken at random (the sampler's seed), never by manifest order. Nothing is learned
from outside the study: no priors, no starting points but the manifest defaults when warm.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from evo.errors import InvalidCandidate
from evo.family.manifest import Family
from evo.store.recording import record_key
from evo.search.encoding import Encoder
from evo.search.params import from_trial_params
from evo.search.proposal import Proposal, ProposalSampler, drawn_params, seen_keys
from evo.search.resume import STATUS
from evo.search import surrogate
from evo.search.sampler_evo import FAILURES, fitness, shippable
from evo.family.space import Candidate, make_candidate, mutations


def distance(a: Candidate, b: Candidate) -> int:
    """Genes that differ between two candidates of one family."""
    pb = b.p
    return sum(v != pb[k] for k, v in a.params)


class GpSampler(ProposalSampler):
    """Model-guided sampler over the candidate space (see module docstring)."""

    def __init__(self, families: Sequence[Family], seed: int | None = None, *, warm: bool = True,
                 min_timed: int = 3, population: int = 8, pool_max: int = 20000, radius: int = 2) -> None:
        surrogate.require()
        super().__init__(families, seed)
        self.warm, self.min_timed, self.population, self.pool_max = warm, min_timed, population, pool_max
        self.radius = radius
        self._steps = 0
        self.encoder = Encoder(self.families)
        self._by_name = {f.name: f for f in self.families}
        self._kernel_for: tuple[int, object] | None = None  # (finished trials, fitted kernel)

    def _candidate(self, t: FrozenTrial) -> Candidate | None:
        got = from_trial_params(drawn_params(t))
        if got is None or got[0] not in self._by_name:
            return None
        try:
            return make_candidate(self._by_name[got[0]], got[1])
        except InvalidCandidate:
            return None

    def observations(self, trials: Sequence[FrozenTrial]) -> tuple[dict[str, tuple[Candidate, float]],
                                                                   dict[str, tuple[Candidate, bool]],
                                                                   list[Candidate]]:
        """(timed: key -> (candidate, best fitness)), (built: key -> (candidate, failed)), pending."""
        timed: dict[str, tuple[Candidate, float]] = {}
        built: dict[str, tuple[Candidate, bool]] = {}
        pending: list[Candidate] = []
        for t in trials:
            cand = self._candidate(t)
            if cand is None:
                continue
            key = record_key(cand.family, cand.p)
            fit = fitness(t)
            if fit is not None and shippable(t):
                if key not in timed or fit > timed[key][1]:
                    timed[key] = (cand, fit)
                built[key] = (cand, False)
            elif fit is not None or (t.state == TrialState.FAIL and t.user_attrs.get(STATUS) in FAILURES):
                built.setdefault(key, (cand, True))   # timed but not shippable counts as failed
            elif t.state in (TrialState.RUNNING, TrialState.WAITING):
                pending.append(cand)
        return timed, built, pending

    def propose(self, study: optuna.Study, trials: Sequence[FrozenTrial]) -> Proposal | None:
        seen = seen_keys(trials)
        if self.warm and (seed := self.unseen_default(seen)) is not None:
            return seed
        timed, built, pending = self.observations(trials)
        if len(timed) < self.min_timed:
            if self.warm and timed:
                return self.local_step(max(timed.values(), key=lambda cf: cf[1])[0], seen) \
                    or self.random_point(seen)
            return self.random_point(seen)
        ranked = [c for c, _ in sorted(timed.values(), key=lambda cf: -cf[1])]
        pool = self.pool(seen, ranked[: self.population])
        if not pool:
            return None
        self._steps += 1
        if self._steps % 2 == 0:
            near = [c for c in pool if c.family == ranked[0].family and distance(c, ranked[0]) <= self.radius]
            pool = near or pool
        finished = sum(t.state.is_finished() for t in trials)
        return Proposal(self.choose(pool, list(timed.values()), list(built.values()), pending, finished), "model")

    def random_point(self, seen: set[str]) -> Proposal | None:
        """A uniformly random untried valid point of any family (every point equally likely)."""
        fresh = [c for f in self.families for k, c in self.valid_points(f) if k not in seen]
        return Proposal(self._rng.choice(fresh), "random") if fresh else None

    def local_step(self, parent: Candidate, seen: set[str]) -> Proposal | None:
        """A random untried one-gene mutation of ``parent``."""
        options = [(c, m) for c, m in mutations(self._by_name[parent.family], parent, 1)
                   if record_key(c.family, c.p) not in seen]
        if not options:
            return None
        child, mut = self._rng.choice(options)
        return Proposal(child, "mutation", [], {n: [a, b] for n, (a, b) in mut.items()})

    def pool(self, seen: set[str], elites: Sequence[Candidate]) -> list[Candidate]:
        """Untried valid points to score (see module docstring), in random order."""
        every = [(k, c) for f in self.families for k, c in self.valid_points(f)]
        if len(every) <= self.pool_max:
            out = [c for k, c in every if k not in seen]
        else:
            picked = {k: c for k, c in self._rng.sample(every, self.pool_max) if k not in seen}
            for e in elites:
                for genes in (1, 2):
                    for c, _ in mutations(self._by_name[e.family], e, genes):
                        k = record_key(c.family, c.p)
                        if k not in seen:
                            picked[k] = c
            out = list(picked.values())
        self._rng.shuffle(out)
        return out

    def choose(self, pool: Sequence[Candidate], timed: Sequence[tuple[Candidate, float]],
               built: Sequence[tuple[Candidate, bool]], pending: Sequence[Candidate], finished: int) -> Candidate:
        """The pool's point of highest expected improvement x P(no failure of its own)."""
        enc = self.encoder
        X = enc.matrix([c for c, _ in timed])
        y = surrogate.standardize(np.array([f for _, f in timed]))
        if self._kernel_for is not None and self._kernel_for[0] == finished:
            gp = surrogate.fit_value_model(X, y, self._kernel_for[1])  # type: ignore[arg-type]
        else:
            gp = surrogate.fit_value_model(X, y)
            self._kernel_for = (finished, gp.kernel_)
        if pending:
            P = enc.matrix(list(pending))
            gp = surrogate.fit_value_model(np.vstack([X, P]), np.concatenate([y, gp.predict(P)]), gp.kernel_)
        Z = enc.matrix(list(pool))
        mu, sd = gp.predict(Z, return_std=True)
        score = surrogate.expected_improvement(mu, sd, float(y.max()))
        score = score * surrogate.FailureModel(enc.matrix([c for c, _ in built]),
                                     np.array([f for _, f in built])).p_ok(Z)
        return pool[int(np.argmax(score))]

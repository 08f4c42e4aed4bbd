"""The evolutionary sampler: elites, one- or two-gene mutations, same-family crossover, immigrants,
and a Gaussian-process pre-screening of the children they breed.

Seeds: the first children of a study are the families' defaults (the hand-written starting
points, as EvoEngineer starts from seed kernels), so the search starts from known-good kernels
and what it finds is measured against them. A family that another selected family names among
its ``successors`` (manifest) is not seeded: it is reached by switching to it, so a study of
``seed_naive, seed_online, flash_scalar, seed_wmma`` starts from the naive kernel alone and its
lineage shows each step (immigrants, too, come only from the families that are seeded). Cold
(``warm=False``, for the sampler benchmark; ``evo run`` is always warm): no defaults, random
immigrants of those families first.

Population: the best ``population`` distinct completed trials (multi-objective: by the
geometric mean of their values) whose kernels promote would ship: a trial whose GREEN margin
(user attr ``green_share``, the worst max|err| / tolerance per head dim, :mod:`evo.gpu.margin`) is
above the share promote verifies at stays out of the population, and counts as a failed child
of its move. Without that the search bred from conditional-rescaling kernels it could not ship
(study wgmma8: 63 of 83 candidates). The evolutionary operators breed a child as

- a random immigrant (uniform over untried valid points) at rate ``immigrant_rate`` and
  whenever there is no elite yet;
- a uniform crossover of two elites of the same family at rate ``crossover_rate``, re-drawn
  when the child is invalid or already tried;
- otherwise a mutation of a rank-selected elite that changes one gene (two at rate
  ``two_gene_rate``), drawn from :func:`evo.family.space.mutations` so it is always valid; at rate
  ``switch_rate`` (and whenever no gene mutation is left) the mutation switches the elite to a
  successor family instead (:func:`evo.family.space.switch`: shared genes kept), recorded as the move
  ``family: old -> new`` so its measured effect weighs it like any other move. When no elite
  has a mutation or switch left, the completed candidates below the population are mutated
  (so a family entered by a switch is still entered that way); an immigrant of any family is
  the last resort.

Pre-screening (once ``screen_min`` distinct points are timed, and ``screen`` > 1): each trial
the operators breed up to ``screen`` distinct children, the pool gains every untried
neighbour of the best ``scan_elites`` elites (each valid one-gene mutation and each switch to
a successor: a local scan of the incumbents, which the model orders), and the child proposed
is the pool's one of highest expected improvement under a Gaussian process of this study's
timed points, those pruned after their screen at their screened score (:func:`observed`)
(:mod:`evo.search.prescreen`, numpy only; ``ard``: one length scale per gene
column, so the genes that move the value are told from those that do not), times the
smoothed share of its move's children that did not fail (:func:`ok_share`: the feasibility
record of build rejections, compile errors, wrong results, crashes, timeouts; 1 for
immigrants and crossovers); ties at random. Points of a batch still in flight enter the GP
at its own prediction (the "kriging believer"), so a batch spreads out. Evaluations are the
expensive part (a build and a GPU run), and breeding many children and scoring them is
cheap: the operators keep proposing what evolution would (the lineage is theirs: op,
parents, mutation), the model chooses which of them is worth a build. Before that (or with
``screen`` <= 1) the operators' child is proposed as it is. On the replay benchmark
(flash_mma of the H200 recording, docs/search.md) the pre-screening took the cold start's
median from 80 to 59 evaluations to the best point over seeds 1000-1099 (p = 0.0007); ARD
length scales and the neighbours of three elites then took it, seeds 0-49, from 64 to 45
(cold) and from 41.5 to 37.5 (warm).

The model's cost is bounded, whatever the study's size: it is fitted on a window of at most
192 timed points (the best and the most recent, :func:`evo.search.prescreen.window`). Where
the caller calls :meth:`EvoSampler.prepare` before asking (the search loop does, before it takes
the ask lock that serializes the workers' asks), the hyperparameter search -- the fit, dozens
of Cholesky factorizations -- happens there, once per new completed point, and an ask only
conditions the GP on its window with those hyperparameters (one factorization); without
``prepare`` each ask fits the model itself. What each finished trial says about its move
(:func:`move_outcomes`) is worked out once, and crossover checks each mix of two elites once.

A study's kernels (``kernels``: head dim, dtype and causal of its FAST cases; the search loop
passes them) bound the mutations: a gene whose manifest ``reads`` no kernel of the study is never
mutated, since the child would compile to its parent's machine code for every case the study times
(a twin, :mod:`evo.search.twins`). Study spec-l7 (L7 alone, 2026-11-29 c, before this) spent 168 of
its 207 trials on such children of its elites' D=96, D=128 and D=256 tiles, with its GPU idle 62 %
of the time while nvcc built them. A crossover takes such genes from its first parent; immigrants
still draw every gene.

Children equal to any tried point (complete, failed, running or queued) are never proposed.
Mutations are weighted by the measured record of their moves ``(param, old, new)`` in this
study's lineage (:func:`move_weights`): moves whose children beat their parents are drawn
more often, moves whose children failed (invalid, compile_failed, resource_rejected, red,
crashed, timeout) less often. Parents, op and mutation go to the trial's system attrs.
Nothing is learned from outside the study.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from evo.errors import InvalidCandidate
from evo.family.manifest import Family, Value
from evo.family.render import Kernel
from evo.gpu.margin import GREEN_SHARE, over_share
from evo.store.recording import record_key
from evo.search.encoding import Encoder
from evo.search.params import from_trial_params
from evo.search.prescreen import DEFAULT_NOISE, PRIOR_LENGTH, TinyGp, expected_improvement, window
from evo.search.memo import TrialMemo
from evo.search.proposal import PROPOSAL, RETRY_OF, Proposal, ProposalSampler, drawn_params
from evo.search.pruner import SCREEN_ATTR
from evo.search.screen import OVERALL
from evo.family.space import Candidate, make_candidate, mutations, switch

Move = tuple[str, Value, Value]
FAILURES = frozenset({"invalid", "compile_failed", "resource_rejected", "red", "crashed", "timeout"})


def fitness(t: FrozenTrial) -> float | None:
    """log of a completed trial's value (mean log over objectives); None when not complete."""
    if t.state != TrialState.COMPLETE or not t.values or min(t.values) <= 0:
        return None
    return sum(math.log(v) for v in t.values) / len(t.values)


def observed(t: FrozenTrial) -> float | None:
    """What the pre-screen's model and the move records learn from a trial: its :func:`fitness`,
    or for a trial pruned after its screen the log of its screened score (the screen times the
    candidate alone against a cached baseline, within a few percent of the full score: dev/perf-notes.md,
    2026-11-27 j). A search in rungs prunes most of its candidates; without them the model never saw
    a region, or a family, whose every candidate was pruned, and kept proposing it (flash_scalar's
    first eight candidates of an H100 run, 36 s of its 393). Pruned trials never become elites:
    parents are bred only from scores of the full protocol."""
    fit = fitness(t)
    if fit is not None or t.state != TrialState.PRUNED:
        return fit
    value = (t.user_attrs.get(SCREEN_ATTR) or {}).get(OVERALL)
    return math.log(value) if isinstance(value, (int, float)) and value > 0 else None


def shippable(t: FrozenTrial) -> bool:
    """Whether a trial's kernels kept within the share of GREEN's tolerance that promote verifies
    at, at every head dim (true where the trial records no margin: a replay, an older study)."""
    return not over_share(t.user_attrs.get(GREEN_SHARE, {}))


@dataclass
class MoveRecord:
    """What one move did in this study: log effects of measured children, failed children."""

    log_effects: list[float]
    failures: int = 0

    def weight(self, strength: float, shrink: float = 2.0) -> float:
        """exp(strength * shrunk mean log effect) times the smoothed share of children that
        did not fail; 1 for a move never tried, clipped to [0.05, 20]."""
        mean = sum(self.log_effects) / (len(self.log_effects) + shrink)
        return min(20.0, max(0.05, math.exp(strength * mean) * self.ok_share))

    @property
    def ok_share(self) -> float:
        """The smoothed share of children that did not fail, ``(n_ok + 1) / (n + 1)``."""
        return (len(self.log_effects) + 1) / (len(self.log_effects) + self.failures + 1)


def proposal_of(t: FrozenTrial, by_number: Mapping[int, FrozenTrial]) -> dict | None:
    """The sampler proposal behind a trial, following retries back to the original trial."""
    for _ in range(len(by_number) + 1):
        if PROPOSAL in t.system_attrs:
            return t.system_attrs[PROPOSAL]
        orig = t.user_attrs.get(RETRY_OF)
        if orig is None or orig not in by_number:
            return None
        t = by_number[orig]
    return None


def move_outcomes(t: FrozenTrial, by_number: Mapping[int, FrozenTrial]) -> list[tuple[Move, float | None]]:
    """What one trial says about the moves that made it: ``(move, log effect child / parent)``
    per move of a measured mutation child (timed in full, or screened and pruned: :func:`observed`),
    ``(move, None)`` per move of a child that failed for a reason of its own (not unmeasured, not
    abandoned); nothing for any other trial. Fixed once the trial is finished (its parent, an elite,
    was complete when the child was bred)."""
    prop = proposal_of(t, by_number)
    if not prop or prop.get("op") != "mutation" or not prop.get("parents"):
        return []
    parent = by_number.get(prop["parents"][0])
    child_fit, parent_fit = observed(t), parent and fitness(parent)
    failed = (t.state == TrialState.FAIL and t.user_attrs.get("status") in FAILURES) or not shippable(t)
    if not failed and (child_fit is None or parent_fit is None):
        return []
    effect = None if failed else child_fit - parent_fit  # type: ignore[operator]
    return [((name, old, new), effect) for name, (old, new) in prop["mutation"].items()]


def tally_moves(outcomes: Iterable[Sequence[tuple[Move, float | None]]]) -> dict[Move, MoveRecord]:
    """Per move, the record of the :func:`move_outcomes` of some trials."""
    out: dict[Move, MoveRecord] = {}
    for per_trial in outcomes:
        for move, effect in per_trial:
            rec = out.setdefault(move, MoveRecord([]))
            if effect is None:
                rec.failures += 1
            else:
                rec.log_effects.append(effect)
    return out


def move_records(trials: Sequence[FrozenTrial]) -> dict[Move, MoveRecord]:
    """Per move, the log effect (child / parent) of every measured mutation child and the count
    of children that failed for a reason of their own (not unmeasured, not abandoned)."""
    by_number = {t.number: t for t in trials}
    return tally_moves(move_outcomes(t, by_number) for t in trials)


def ok_share(prop: Proposal, records: Mapping[Move, MoveRecord]) -> float:
    """The chance that a mutation child does not fail, by the record of its move(s): the
    product of ``(n_ok + 1) / (n_ok + failures + 1)`` (1 for a move never made, and for any
    other op)."""
    if prop.op != "mutation":
        return 1.0
    out = 1.0
    for name, (old, new) in prop.mutation.items():
        rec = records.get((name, old, new))
        if rec is not None:
            out *= rec.ok_share
    return out


def move_weights(records: Mapping[Move, MoveRecord], strength: float = 8.0) -> dict[Move, float]:
    """Each recorded move's weight (:meth:`MoveRecord.weight`)."""
    return {m: r.weight(strength) for m, r in records.items()}


Point = tuple[float, str, Candidate]   # a trial's value, its candidate's record key, the candidate


def timed_point(t: FrozenTrial, families: Mapping[str, Family]) -> Point | None:
    """A trial's :func:`observed` value (its fitness where it completed), record key and
    candidate, or None where the trial has none, is of a family not in ``families`` or would not ship."""
    fit, got = observed(t), from_trial_params(t.params)
    if fit is None or got is None or got[0] not in families or not shippable(t):
        return None
    try:
        cand = make_candidate(families[got[0]], got[1])
    except InvalidCandidate:
        return None
    return fit, record_key(cand.family, cand.p), cand


def best_points(trials: Iterable[FrozenTrial], point: Callable[[FrozenTrial], Point | None]
                ) -> dict[str, tuple[float, FrozenTrial, Candidate]]:
    """Per distinct candidate among ``trials`` that ``point`` values, its best value and trial."""
    best: dict[str, tuple[float, FrozenTrial, Candidate]] = {}
    for t in trials:
        got = point(t)
        if got is None:
            continue
        fit, key, cand = got
        if key not in best or fit > best[key][0]:
            best[key] = (fit, t, cand)
    return best


class EvoSampler(ProposalSampler):
    """Evolutionary sampler over the candidate space (see module docstring)."""

    def __init__(self, families: Sequence[Family], seed: int | None = None, *, population: int = 8,
                 immigrant_rate: float = 0.1, crossover_rate: float = 0.2, two_gene_rate: float = 0.3,
                 switch_rate: float = 0.5, insight_strength: float = 8.0, warm: bool = True,
                 screen: int = 16, screen_min: int = 4, ard: bool = True,
                 scan_elites: int = 3, kernels: Collection[Kernel] | None = None) -> None:
        super().__init__(families, seed)
        self.kernels = tuple(kernels) if kernels else None   # the study's kernels: genes none reads are left alone
        self._unread = {f.name: frozenset(n for n in f.params if self.kernels and not f.read_by(n, self.kernels))
                        for f in families}
        self.ard = ard
        self.scan_elites = scan_elites
        self.warm = warm
        self.screen = screen
        self.screen_min = screen_min
        self._encoder: Encoder | None = None
        self._prepared = False                      # prepare() is called before asks: fit there only
        self._hyper: tuple[np.ndarray | float, float] | None = None  # (length, noise) prepare() fitted
        self._hyper_points = -1                     # how many timed points that fit saw
        self._point = TrialMemo(lambda t: timed_point(t, self._by_name))  # completed and pruned trials
        self._numbered: Mapping[int, FrozenTrial] = {}  # the trials of the current ask, by number
        self._moves = TrialMemo(lambda t: move_outcomes(t, self._numbered))  # each finished trial once
        self._made: dict[tuple[str, tuple[tuple[str, Value], ...]], tuple[Candidate, str] | None] = {}  # crossover's
        self._mutations: dict[tuple[Candidate, int], list[tuple[Candidate, Mapping[str, tuple[Value, Value]], str]]] = {}
        self.population = population
        self.immigrant_rate = immigrant_rate
        self.crossover_rate = crossover_rate
        self.two_gene_rate = two_gene_rate
        self.switch_rate = switch_rate
        self.insight_strength = insight_strength
        self._by_name = {f.name: f for f in self.families}
        reached = {s for f in self.families for s in f.successors if s in self._by_name and s != f.name}
        self.roots = [f for f in self.families if f.name not in reached] or list(self.families)

    def completed(self, trials: Sequence[FrozenTrial]) -> dict[str, tuple[float, FrozenTrial, Candidate]]:
        """Per distinct completed candidate of the selected families whose kernels promote would
        ship (:func:`shippable`): its best fitness and trial."""
        return best_points((t for t in trials if t.state == TrialState.COMPLETE), self._point)

    def measured(self, trials: Sequence[FrozenTrial]) -> dict[str, tuple[float, FrozenTrial, Candidate]]:
        """:meth:`completed` and the candidates pruned after their screen, at their screened score
        (:func:`observed`): the points the pre-screen's model is fitted on."""
        return best_points(trials, self._point)

    @staticmethod
    def ranked(done: Mapping[str, tuple[float, FrozenTrial, Candidate]]) -> list[tuple[FrozenTrial, Candidate]]:
        """The candidates of :meth:`completed`, best first (earlier trial first on ties)."""
        return [(t, c) for _, t, c in sorted(done.values(), key=lambda x: (-x[0], x[1].number))]

    def elites(self, trials: Sequence[FrozenTrial]) -> list[tuple[FrozenTrial, Candidate]]:
        """Best distinct completed candidates of the selected families, best first."""
        return self.ranked(self.completed(trials))[: self.population]

    def pending(self, trials: Sequence[FrozenTrial]) -> list[Candidate]:
        """Candidates of trials asked but not finished (a batch in flight, retries waiting)."""
        out = []
        for t in trials:
            if t.state not in (TrialState.RUNNING, TrialState.WAITING):
                continue
            got = from_trial_params(drawn_params(t))
            if got is None or got[0] not in self._by_name:
                continue
            try:
                out.append(make_candidate(self._by_name[got[0]], got[1]))
            except InvalidCandidate:
                continue
        return out

    def propose(self, study: optuna.Study, trials: Sequence[FrozenTrial]) -> Proposal | None:
        seen = self.seen(trials)
        if self.warm and (seed := self.unseen_default(seen, self.roots)) is not None:
            return seed
        self._numbered = {t.number: t for t in trials}
        records = tally_moves(self._moves(t) for t in trials)
        weights = move_weights(records, self.insight_strength)
        ranked = self.ranked(self.completed(trials))
        elites, rest = ranked[: self.population], ranked[self.population:]
        points = self.measured(trials)
        if elites and self.screen > 1 and len(points) >= self.screen_min:
            return self.screened(elites, weights, records, seen, self.timed(points), self.pending(trials), rest)
        return self.breed(elites, weights, seen, rest)

    @staticmethod
    def timed(done: Mapping[str, tuple[float, FrozenTrial, Candidate]]) -> list[tuple[Candidate, float]]:
        """The points of :meth:`measured` (or :meth:`completed`) with their value, oldest trial
        first (the order :func:`~evo.search.prescreen.window` reads recency from)."""
        return [(c, fit) for fit, _, c in sorted(done.values(), key=lambda x: x[1].number)]

    def prepare(self, study: optuna.Study, trials: Sequence[FrozenTrial]) -> None:
        """Fit the pre-screen's hyperparameters on the measured trials of ``trials`` (the study
        as it is now), unless no measured point came since the last fit (see module docstring):
        the costly part of an ask, done before the caller takes the lock its asks are made under.
        From the first call on, asks only condition the GP with what this fitted."""
        self._prepared = True
        if self.screen <= 1:
            return
        done = self.measured(trials)  # completed and pruned trials (observed is None for the others)
        if len(done) < self.screen_min or len(done) == self._hyper_points:
            return
        gp = TinyGp.fit(*self._window(self.timed(done)), ard=self.ard)
        self._hyper, self._hyper_points = (gp.length, gp.noise), len(done)

    def _window(self, timed: Sequence[tuple[Candidate, float]]) -> tuple[np.ndarray, np.ndarray]:
        """The encoded points and fitness values the GP is fitted on (:func:`window` of ``timed``)."""
        if self._encoder is None:
            self._encoder = Encoder(self.families)
        y = np.array([f for _, f in timed])
        keep = window(y)
        return self._encoder.matrix([timed[i][0] for i in keep]), y[keep]

    def _model(self, X: np.ndarray, y: np.ndarray) -> TinyGp:
        """The GP of ``X``, ``y``: when the caller prepares, conditioned with the hyperparameters
        :meth:`prepare` fitted (the prior's when the study reached ``screen_min`` points only
        since: another worker's trials), never fitted under the caller's lock; else fitted here."""
        if self._prepared:
            length, noise = self._hyper or (PRIOR_LENGTH, DEFAULT_NOISE)
            return TinyGp.fit(X, y, length=length, noise=noise)
        return TinyGp.fit(X, y, ard=self.ard)

    def breed(self, elites: Sequence[tuple[FrozenTrial, Candidate]], weights: Mapping[Move, float],
              seen: set[str], rest: Sequence[tuple[FrozenTrial, Candidate]] = ()) -> Proposal | None:
        """One child of the evolutionary operators: an immigrant, a crossover or a mutation.
        When no elite has an untried mutation or switch left, the completed candidates below
        the population (``rest``, best first) are mutated instead, so a family that is entered
        by a switch is still entered that way; an immigrant of any family is the last resort."""
        if not elites or self._rng.random() < self.immigrant_rate:
            found = self.random_unseen(seen, "immigrant", self.roots)
            if found is not None or not elites:  # roots used up before anything was measured: any family
                return found or self.random_unseen(seen, "immigrant")
        if self._rng.random() < self.crossover_rate:
            child = self.crossover(elites, seen)
            if child is not None:
                return child
        return self.mutant(elites, weights, seen) or (self.mutant(rest, weights, seen) if rest else None) \
            or self.random_unseen(seen, "immigrant")

    def pool(self, elites: Sequence[tuple[FrozenTrial, Candidate]], weights: Mapping[Move, float],
             seen: set[str], rest: Sequence[tuple[FrozenTrial, Candidate]] = ()) -> list[Proposal]:
        """The children the model chooses from: up to ``screen`` distinct children bred as
        :meth:`breed` breeds them, plus every untried neighbour of the best ``scan_elites``
        elites (one-gene mutations and switches, each with its elite as parent)."""
        children: dict[str, Proposal] = {}
        for _ in range(3 * self.screen):
            prop = self.breed(elites, weights, seen, rest)
            if prop is None:
                break
            children.setdefault(record_key(prop.candidate.family, prop.candidate.p), prop)
            if len(children) >= self.screen:
                break
        for parent_trial, parent in elites[: self.scan_elites]:
            for child, mut in self.neighbours(parent, seen):
                children.setdefault(record_key(child.family, child.p),
                                    Proposal(child, "mutation", [parent_trial.number], mut))
        return list(children.values())

    def screened(self, elites: Sequence[tuple[FrozenTrial, Candidate]], weights: Mapping[Move, float],
                 records: Mapping[Move, MoveRecord], seen: set[str], timed: Sequence[tuple[Candidate, float]],
                 pending: Sequence[Candidate] = (),
                 rest: Sequence[tuple[FrozenTrial, Candidate]] = ()) -> Proposal | None:
        """The pre-screened child (see module docstring): of the :meth:`pool`, the one of
        highest expected improvement under a GP of ``timed`` (oldest first; ARD length scales;
        ``pending`` points at the GP's own prediction), times the chance that its move does not
        fail (:func:`ok_share`)."""
        props = self.pool(elites, weights, seen, rest)
        if len(props) <= 1:
            return props[0] if props else None
        X, y = self._window(timed)
        assert self._encoder is not None
        gp = self._model(X, y)
        best = gp.standardized(float(y.max()))
        if pending:  # kriging believer: a batch in flight counts as measured at the mean, so the batch spreads
            P = self._encoder.matrix(list(pending))
            mu_p, _ = gp.predict(P)
            gp = TinyGp.fit(np.vstack([X, P]), np.concatenate([y, gp.unstandardized(mu_p)]),
                            length=gp.length, noise=gp.noise)
            best = gp.standardized(float(y.max()))
        mu, sd = gp.predict(self._encoder.matrix([p.candidate for p in props]))
        score = expected_improvement(mu, sd, best) * np.array([ok_share(p, records) for p in props])
        top = float(score.max())
        return self._rng.choice([p for p, x in zip(props, score, strict=True) if x >= top])

    def neighbours(self, parent: Candidate, seen: set[str]) -> list[tuple[Candidate, dict[str, list[Value]]]]:
        """``parent``'s untried neighbours, each with its move: every valid one-gene mutation,
        then every switch to a selected successor family (the move ``family: old -> new``)."""
        out = [(c, {n: [old, new] for n, (old, new) in m.items()})
               for c, m, key in self.mutations_of(self._by_name[parent.family], parent, 1) if key not in seen]
        return out + [(c, {"family": [parent.family, c.family]}) for c in self.switches(parent, seen)]

    def _rank_order(self, n: int) -> list[int]:
        """Indices 0..n-1 in a random order biased to low ranks (linear ranking, no repeats)."""
        left, order = list(range(n)), []
        while left:
            i = self._rng.choices(left, weights=[n - j for j in left])[0]
            left.remove(i)
            order.append(i)
        return order

    def mutant(self, elites: Sequence[tuple[FrozenTrial, Candidate]], weights: Mapping[Move, float],
               seen: set[str]) -> Proposal | None:
        for i in self._rank_order(len(elites)):
            parent_trial, parent = elites[i]
            fam = self._by_name[parent.family]
            if self._rng.random() < self.switch_rate:
                moved = self.switched(parent_trial, parent, weights, seen)
                if moved is not None:
                    return moved
            genes = (2, 1) if self._rng.random() < self.two_gene_rate else (1, 2)
            for g in genes:
                options = [(c, m) for c, m, key in self.mutations_of(fam, parent, g) if key not in seen]
                if not options:
                    continue
                w = [math.prod(weights.get((n, old, new), 1.0) for n, (old, new) in m.items())
                     for _, m in options]
                child, mut = self._rng.choices(options, weights=w)[0]
                return Proposal(child, "mutation", [parent_trial.number],
                                {n: [old, new] for n, (old, new) in mut.items()})
            moved = self.switched(parent_trial, parent, weights, seen)   # no gene mutation left
            if moved is not None:
                return moved
        return None

    def mutations_of(self, fam: Family, parent: Candidate,
                     genes: int) -> list[tuple[Candidate, Mapping[str, tuple[Value, Value]], str]]:
        """:func:`~evo.family.space.mutations` of ``parent`` that change only genes the study's
        kernels read (all of them when the sampler was given no kernels), with each child's record key, listed
        once per parent (a popular elite was otherwise re-enumerated and re-validated dozens of
        times per ask), kept by the parent itself (a candidate is canonical: equal candidates are
        one point), not by its record key, a JSON text made anew on each of those calls."""
        at = (parent, genes)
        if at not in self._mutations:
            self._mutations[at] = [(c, m, record_key(c.family, c.p)) for c, m in mutations(fam, parent, genes)
                                   if self._unread[fam.name].isdisjoint(m)]
        return self._mutations[at]

    def _checked(self, family: str, params: Mapping[str, Value]) -> tuple[Candidate, str] | None:
        """``make_candidate`` of ``params`` and its record key, None when invalid; each point checked
        and keyed once per sampler (crossover re-draws the same mixes of two elites many times over
        a study)."""
        at = (family, tuple(sorted(params.items())))
        if at not in self._made:
            try:
                child = make_candidate(self._by_name[family], params)
                self._made[at] = (child, record_key(child.family, child.p))
            except InvalidCandidate:
                self._made[at] = None
        return self._made[at]

    def switched(self, parent_trial: FrozenTrial, parent: Candidate, weights: Mapping[Move, float],
                 seen: set[str]) -> Proposal | None:
        """``parent`` switched to one of its family's selected successors (weighted by the
        record of each ``family`` move), or None when every such child has been tried."""
        options = self.switches(parent, seen)
        if not options:
            return None
        w = [weights.get(("family", parent.family, c.family), 1.0) for c in options]
        child = self._rng.choices(options, weights=w)[0]
        return Proposal(child, "mutation", [parent_trial.number], {"family": [parent.family, child.family]})

    def switches(self, parent: Candidate, seen: set[str]) -> list[Candidate]:
        """``parent`` switched to each selected successor of its family (shared genes kept),
        untried ones only."""
        out = []
        for name in self._by_name[parent.family].successors:
            if name in self._by_name and name != parent.family:
                child = switch(parent, self._by_name[name])
                if record_key(child.family, child.p) not in seen:
                    out.append(child)
        return out

    def crossover(self, elites: Sequence[tuple[FrozenTrial, Candidate]], seen: set[str],
                  tries: int = 20) -> Proposal | None:
        groups: dict[str, list[tuple[FrozenTrial, Candidate]]] = {}
        for e in elites:
            groups.setdefault(e[1].family, []).append(e)
        pairs = [g for g in groups.values() if len(g) >= 2]
        if not pairs:
            return None
        group = self._rng.choice(pairs)
        unread = self._unread[group[0][1].family]
        for _ in range(tries):
            (ta, a), (tb, b) = self._rng.sample(group, 2)
            pa, pb = a.p, b.p   # genes the study's kernels do not read come from a (else a twin of a mix)
            mixed = {n: (pa[n] if self._rng.random() < 0.5 or n in unread else pb[n]) for n in pa}
            got = self._checked(a.family, mixed)
            if got is None or got[0] in (a, b) or got[1] in seen:
                continue
            return Proposal(got[0], "crossover", [ta.number, tb.number])
        return None

"""The evo sampler's offspring pre-screening: the numpy GP, the pool, the pick and its lineage."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from evo.family.manifest import load_family
from evo.search.params import distributions, suggest, trial_params
from evo.search.prescreen import (ARD_FACTORS, ARD_SWEEPS, LENGTH_SCALES, NOISES, TinyGp, _log_prior,
                                  expected_improvement)
from evo.search.proposal import PROPOSAL, Proposal, seen_keys
from evo.search.sampler_evo import EvoSampler, MoveRecord, move_records, ok_share
from evo.family.space import diff, make_candidate, mutations

FAM = load_family("flash_mma")


@pytest.fixture(autouse=True)
def quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_gp_interpolates_and_is_unsure_far_from_data() -> None:
    rng = np.random.default_rng(0)
    X = rng.random((30, 3))
    y = np.sin(3 * X[:, 0]) + X[:, 1]
    gp = TinyGp.fit(X, y)
    mu, sd = gp.predict(X)
    assert np.allclose(gp.unstandardized(mu), y, atol=0.1)
    _, sd_far = gp.predict(np.full((1, 3), 5.0))
    assert sd_far[0] > 0.9 > sd.max()


def test_gp_with_given_hyperparameters_keeps_them() -> None:
    X = np.eye(4)
    gp = TinyGp.fit(X, np.arange(4.0), length=0.5, noise=0.1)
    assert (gp.length, gp.noise) == (0.5, 0.1)


def test_ard_gives_the_column_that_moves_the_value_the_shorter_length_scale() -> None:
    rng = np.random.default_rng(1)
    X = rng.random((25, 3))
    y = np.sin(4 * X[:, 0])  # only column 0 matters
    gp = TinyGp.fit(X, y, ard=True)
    length = np.asarray(gp.length)
    assert length.shape == (3,)
    assert length[0] < length[1] and length[0] < length[2]
    mu, _ = gp.predict(X)
    assert np.allclose(gp.unstandardized(mu), y, atol=0.1)
    again = TinyGp.fit(X, y, length=gp.length, noise=gp.noise)  # given hyperparameters are kept
    assert np.array_equal(np.asarray(again.length), length) and again.noise == gp.noise


def test_ard_skips_only_factorizations_whose_kernel_a_zero_column_leaves_unchanged(monkeypatch) -> None:
    """A step on a column that is zero in every row reuses the current factorization: the fit is
    bit for bit that of a search that factorizes every step, with fewer factorizations."""
    rng = np.random.default_rng(2)
    X = np.hstack([rng.random((20, 2)), np.zeros((20, 3))])
    y = np.sin(4 * X[:, 0]) + X[:, 1]
    ys = (y - y.mean()) / y.std()
    solve = TinyGp._solve
    grid = max(((solve(X, ys, np.full(5, ls), nz)[0] + _log_prior(np.full(5, ls)), ls, nz)
                for ls in LENGTH_SCALES for nz in NOISES), key=lambda g: g[0])
    score, length, noise = grid[0], np.full(5, grid[1]), grid[2]
    for _ in range(ARD_SWEEPS):  # the search as written before the shortcut: every step factorized
        for j in range(5):
            for f in ARD_FACTORS:
                trial = length.copy()
                trial[j] *= f
                if solve(X, ys, trial, noise)[0] + _log_prior(trial) > score + 1e-9:
                    score, length = solve(X, ys, trial, noise)[0] + _log_prior(trial), trial
    reference = TinyGp.fit(X, y, length=length, noise=noise)
    calls: list[int] = []
    monkeypatch.setattr(TinyGp, "_solve", staticmethod(lambda *a: calls.append(1) or solve(*a)))
    gp = TinyGp.fit(X, y, ard=True)
    assert np.array_equal(np.asarray(gp.length), length) and gp.noise == noise
    assert np.array_equal(gp.alpha, reference.alpha) and np.array_equal(gp.L, reference.L)
    assert len(calls) == len(LENGTH_SCALES) * len(NOISES) + ARD_SWEEPS * 2 * len(ARD_FACTORS)  # 2 moving columns


def test_expected_improvement_prefers_high_mean_then_high_uncertainty() -> None:
    ei = expected_improvement(np.array([0.0, 1.0, 0.0]), np.array([0.1, 0.1, 1.0]), best=0.5)
    assert ei[1] > ei[2] > ei[0] > 0


def test_ok_share_follows_the_moves_failures() -> None:
    records = {("STAGES", 2, 3): MoveRecord([], failures=3), ("EXP2", True, False): MoveRecord([0.1])}
    base = make_candidate(FAM)
    bad = Proposal(base, "mutation", [0], {"STAGES": [2, 3]})
    fine = Proposal(base, "mutation", [0], {"EXP2": [True, False]})
    assert ok_share(bad, records) == pytest.approx(1 / 4)
    assert ok_share(fine, records) == 1.0
    assert ok_share(Proposal(base, "immigrant"), records) == 1.0


def made_up(cand) -> float:
    """A smooth score over flash_mma's tile sizes and stages (the optimum is BLOCK_N=128, STAGES=3)."""
    p = cand.p
    return math.exp(-0.3 * (math.log2(p["BLOCK_N"]) - 7) ** 2 - 0.3 * (p["STAGES"] - 3) ** 2)


def study_with(points: list[dict], sampler: EvoSampler) -> optuna.Study:
    study = optuna.create_study(direction="maximize", sampler=sampler)
    dists = distributions([FAM])
    for raw in points:
        cand = make_candidate(FAM, raw)
        study.add_trial(optuna.trial.create_trial(params=trial_params(cand), distributions=dists,
                                                  value=made_up(cand)))
    return study


def test_the_pool_holds_every_untried_neighbour_of_the_best_elite() -> None:
    """The neighbours added to every pool are exactly the incumbent's valid one-gene mutations
    that the study has not tried (flash_mma has no selected successor, so no switch)."""
    points = [{"BLOCK_N": 32, "STAGES": 1}, {"BLOCK_N": 64, "STAGES": 1}, {"BLOCK_N": 32, "STAGES": 2},
              {"BLOCK_N": 64, "STAGES": 2}]
    best = make_candidate(FAM, points[-1])
    study = study_with(points, EvoSampler([FAM], seed=0))
    seen = seen_keys(study.trials)
    sampler = EvoSampler([FAM], seed=0)
    elites = sampler.elites(study.trials)
    assert elites[0][1] == best
    children = {c for c, _ in mutations(FAM, best, 1)} - {make_candidate(FAM, p) for p in points}
    neighbours = {c for c, _ in sampler.neighbours(best, seen)}
    assert neighbours == children


def test_the_pool_holds_the_neighbours_of_the_best_three_elites_only() -> None:
    points = [{"BLOCK_N": bn, "STAGES": st} for bn in (32, 64) for st in (1, 2)]
    study = study_with(points, EvoSampler([FAM], seed=0))
    seen = seen_keys(study.trials)
    sampler = EvoSampler([FAM], seed=0, screen=1)
    elites = sampler.elites(study.trials)
    assert len(elites) == 4 and sampler.scan_elites == 3
    pool = sampler.pool(elites, {}, seen)
    got = {p.candidate for p in pool}
    for rank, (trial, elite) in enumerate(elites):
        near = {c for c, _ in sampler.neighbours(elite, seen)}
        if rank < 3:
            assert near <= got
            assert all(p.parents == [trial.number] for p in pool if p.candidate in near - {
                c for t2, e2 in elites[:rank] for c, _ in sampler.neighbours(e2, seen)})
    assert len(got) == len(pool)  # distinct children


def test_screening_picks_the_child_the_model_favours() -> None:
    """Every proposal after the start is the highest-EI child of its pool, with its parent and
    move recorded (mutations: the diff to the parent)."""
    study = optuna.create_study(direction="maximize", sampler=EvoSampler([FAM], seed=4, warm=False))
    picked_mutations = 0
    for _ in range(25):
        t = study.ask()
        fam, raw = suggest(t, [FAM])
        study.tell(t, made_up(make_candidate(fam, raw)))
    by_number = {t.number: t for t in study.trials}
    for t in study.trials:
        prop = t.system_attrs[PROPOSAL]
        if prop["op"] == "mutation":
            picked_mutations += 1
            parent = by_number[prop["parents"][0]]
            assert parent.state == TrialState.COMPLETE and parent.number < t.number
            pc = make_candidate(FAM, {k.split(".", 1)[1]: v for k, v in parent.params.items() if "." in k})
            assert {k: list(v) for k, v in diff(pc, make_candidate(FAM, prop["params"])).items()} == prop["mutation"]
    assert picked_mutations > 5
    best = max(t.value for t in study.trials if t.value is not None)
    assert best == pytest.approx(1.0)  # the optimum of the made-up score is found within 25 trials
    assert move_records(study.trials)


def test_screened_returns_the_argmax_of_expected_improvement() -> None:
    points = [{"BLOCK_N": bn, "STAGES": st} for bn in (32, 64) for st in (1, 2)]
    sampler = EvoSampler([FAM], seed=1)
    study = study_with(points, sampler)
    trials = study.trials
    done = sampler.completed(trials)
    elites = sampler.elites(trials)
    records = move_records(trials)
    timed = [(c, f) for f, _, c in done.values()]
    prop = sampler.screened(elites, {}, records, seen_keys(trials), timed)
    assert prop is not None
    # the pick is at least as good, under the same model, as every untried neighbour of the best
    from evo.search.encoding import Encoder
    enc = Encoder([FAM])
    X = enc.matrix([c for c, _ in timed])
    y = np.array([f for _, f in timed])
    gp = TinyGp.fit(X, y, ard=True)
    others = [c for c, _ in sampler.neighbours(elites[0][1], seen_keys(trials))]
    mu, sd = gp.predict(enc.matrix([prop.candidate, *others]))
    ei = expected_improvement(mu, sd, gp.standardized(float(y.max())))
    assert ei[0] >= ei[1:].max() - 1e-12


def test_a_batch_in_flight_is_spread_by_the_kriging_believer() -> None:
    """A batch of eight trials asked before any is told (as ``evo run --batch 8`` asks them)
    is eight distinct points, and its pending trials enter the model: the sampler's pending
    list holds them."""
    sampler = EvoSampler([FAM], seed=2)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for _ in range(3):
        asked, cands = [], []
        for _ in range(8):
            t = study.ask()
            asked.append(t)
            cands.append(make_candidate(*suggest(t, [FAM])))
        assert len(set(cands)) == 8
        assert set(sampler.pending(study.trials)) == set(cands)
        for t, c in zip(asked, cands, strict=True):
            study.tell(t, made_up(c))

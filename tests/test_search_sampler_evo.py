"""The evolutionary sampler: valid, distinct children with recorded parents; insight-biased moves."""

from __future__ import annotations

import collections
import math

import optuna
import pytest
from optuna.trial import TrialState

from evo.family.manifest import load_family
from evo.gpu.margin import GREEN_SHARE
from evo.search.params import distributions, suggest, trial_params
from evo.search.proposal import PROPOSAL, seen_keys
from evo.search.sampler_evo import EvoSampler, MoveRecord, move_records, shippable
from evo.family.space import diff, make_candidate, mutations

FAMS = [load_family("flash_mma"), load_family("flash_scalar")]


def made_up(cand) -> float:
    """A smooth score with an optimum at BLOCK_N=64, STAGES=2 (flash_mma); scalar is slow."""
    p = cand.p
    if cand.family == "flash_scalar":
        return 0.3 + 0.01 * p["VEC"]
    return math.exp(-0.1 * (math.log2(p["BLOCK_N"]) - 6) ** 2 - 0.1 * (p["STAGES"] - 2) ** 2
                    + 0.05 * p["EXP2"])


def run_study(n: int, seed: int = 0, fail=lambda c: False, share=lambda c: 0.5) -> optuna.Study:
    """``n`` trials told the made-up score; ``fail``: told FAIL red; ``share``: the GREEN margin
    recorded at both head dims, as the search loop records it."""
    study = optuna.create_study(direction="maximize", sampler=EvoSampler(FAMS, seed=seed))
    for _ in range(n):
        t = study.ask()
        fam, raw = suggest(t, FAMS)
        cand = make_candidate(fam, raw)
        if fail(cand):
            t.set_user_attr("status", "red")
            study.tell(t, state=TrialState.FAIL)
        else:
            t.set_user_attr(GREEN_SHARE, {"64": 0.5, "128": share(cand)})
            study.tell(t, made_up(cand))
    return study


@pytest.fixture(autouse=True)
def quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_children_are_valid_and_distinct() -> None:
    study = run_study(80)
    keys = [(t.params["family"], tuple(sorted(t.params.items()))) for t in study.trials]
    assert len(set(keys)) == len(keys)  # make_candidate in run_study already proved validity


def test_mutation_children_record_parent_and_move() -> None:
    study = run_study(40, seed=3)
    by_number = {t.number: t for t in study.trials}
    muts = [t for t in study.trials if t.system_attrs[PROPOSAL]["op"] == "mutation"]
    assert muts
    for t in muts:
        prop = t.system_attrs[PROPOSAL]
        parent = by_number[prop["parents"][0]]
        assert parent.state == TrialState.COMPLETE and parent.number < t.number
        pc = make_candidate(parent.params["family"], _params(parent))
        cc = make_candidate(t.params["family"], _params(t))
        assert {k: list(v) for k, v in diff(pc, cc).items()} == prop["mutation"]
        assert 1 <= len(prop["mutation"]) <= 2


def _params(t) -> dict:
    fam = t.params["family"]
    return {k.split(".", 1)[1]: v for k, v in t.params.items() if k.startswith(fam + ".")}


def test_failed_points_are_never_proposed_again() -> None:
    failing = lambda c: c.family == "flash_mma" and c.p["STAGES"] == 3  # noqa: E731
    study = run_study(60, seed=1, fail=failing)
    seen = collections.Counter(tuple(sorted(t.params.items())) for t in study.trials)
    assert max(seen.values()) == 1
    assert any(t.state == TrialState.FAIL for t in study.trials)


def test_moves_whose_children_failed_are_weighted_down() -> None:
    failing = lambda c: c.family == "flash_mma" and c.p["STAGES"] == 3  # noqa: E731
    study = run_study(80, seed=2, fail=failing)
    recs = move_records(study.trials)
    to3 = [r for (name, _, new), r in recs.items() if name == "STAGES" and new == 3]
    assert to3 and all(r.failures > 0 and not r.log_effects for r in to3)
    assert all(r.weight(8.0) < 1.0 for r in to3)


def test_kernels_promote_would_refuse_are_neither_elites_nor_counted_as_wins() -> None:
    # the best region (BLOCK_N 64, made_up's optimum) passes GREEN only near the tolerance
    near = lambda c: 0.9 if c.family == "flash_mma" and c.p["BLOCK_N"] == 64 else 0.5  # noqa: E731
    study = run_study(60, seed=4, share=near)
    over = [t for t in study.trials if t.state == TrialState.COMPLETE and not shippable(t)]
    assert over, "the study never reached the region over the share"
    sampler = study.sampler
    assert isinstance(sampler, EvoSampler)
    elites = sampler.elites(study.trials)
    assert elites and all(shippable(t) for t, _ in elites)
    best = max((t for t in study.trials if t.state == TrialState.COMPLETE), key=lambda t: t.value)
    assert not shippable(best) and best.number not in {t.number for t, _ in elites}
    to64 = [r for (name, _, new), r in move_records(study.trials).items() if name == "BLOCK_N" and new == 64]
    assert to64 and all(r.failures > 0 and not r.log_effects for r in to64)


@pytest.mark.parametrize("effects,failures,direction", [
    ([0.1, 0.12, 0.09], 0, 1), ([-0.1, -0.2], 0, -1), ([], 2, -1), ([], 0, 0)])
def test_move_weight_follows_its_record(effects, failures, direction) -> None:
    w = MoveRecord(effects, failures).weight(8.0)
    assert (w > 1, w < 1, w == 1)[[1, -1, 0].index(direction)]


def test_better_moves_are_drawn_more_often() -> None:
    """A parent with a proven move (STAGES 1->2 won three times) gets that move far more often
    than a uniform choice among its one-gene neighbours would give it."""
    fam = FAMS[0]
    study = optuna.create_study(direction="maximize", sampler=EvoSampler([fam], seed=0, immigrant_rate=0,
                                                                        crossover_rate=0, two_gene_rate=0))
    dists = distributions([fam])
    base = make_candidate(fam, {"STAGES": 1, "BLOCK_N": 32})
    number = 0
    for bn in (32, 64, 128):  # three lineages where STAGES 1 -> 2 gave x1.3
        parent = make_candidate(fam, {"STAGES": 1, "BLOCK_N": bn, "EXP2": False})
        child = make_candidate(fam, {"STAGES": 2, "BLOCK_N": bn, "EXP2": False})
        study.add_trial(optuna.trial.create_trial(params=trial_params(parent), distributions=dists, value=1.0))
        study.add_trial(optuna.trial.create_trial(
            params=trial_params(child), distributions=dists, value=1.3,
            system_attrs={PROPOSAL: {"op": "mutation", "parents": [number], "mutation": {"STAGES": [1, 2]},
                                     "family": fam.name, "params": child.p}}))
        number += 2
    sampler: EvoSampler = study.sampler  # type: ignore[assignment]
    weights = {m: r.weight(8.0) for m, r in move_records(study.trials).items()}
    picks = collections.Counter()
    for _ in range(300):
        prop = sampler.mutant([(study.trials[0], base)], weights, seen_keys(study.trials))
        picks[str(prop.mutation)] += 1
    share = picks[str({"STAGES": [1, 2]})] / 300
    assert share > 2 / len(mutations(fam, base, 1))  # twice its share under a uniform choice


def test_a_fresh_study_starts_from_the_family_defaults() -> None:
    study = run_study(4)
    firsts = [t.system_attrs[PROPOSAL] for t in study.trials[:2]]
    assert [p["op"] for p in firsts] == ["seed", "seed"]
    assert {(p["family"], tuple(sorted(p["params"].items()))) for p in firsts} == {
        (f.name, tuple(sorted(make_candidate(f).p.items()))) for f in FAMS}
    assert all(t.system_attrs[PROPOSAL]["op"] != "seed" for t in study.trials[2:])


def test_a_pruned_trial_teaches_the_model_and_its_move_but_is_never_an_elite() -> None:
    """A search in rungs prunes most candidates after their screen: the model and the move records
    learn them at their screened score (``observed``), the population stays full-protocol scores."""
    from evo.search.pruner import SCREEN_ATTR
    from evo.search.sampler_evo import observed
    from evo.search.screen import OVERALL

    fam = FAMS[0]
    dists = distributions([fam])
    study = optuna.create_study(direction="maximize", sampler=EvoSampler([fam], seed=0))
    parent = make_candidate(fam, {"STAGES": 1, "BLOCK_N": 64})
    study.add_trial(optuna.trial.create_trial(params=trial_params(parent), distributions=dists, value=1.0))
    for bn in (32, 128):      # two mutation children of trial 0, pruned after screens of x0.5
        child = make_candidate(fam, {"STAGES": 1, "BLOCK_N": bn})
        study.add_trial(optuna.trial.create_trial(
            params=trial_params(child), distributions=dists, state=TrialState.PRUNED,
            user_attrs={SCREEN_ATTR: {OVERALL: 0.5, "D64": 0.5}},
            system_attrs={PROPOSAL: {"op": "mutation", "parents": [0], "mutation": {"BLOCK_N": [64, bn]},
                                     "family": fam.name, "params": child.p}}))
    unscreened = make_candidate(fam, {"STAGES": 2, "BLOCK_N": 64})  # pruned with no screen: learns nothing
    study.add_trial(optuna.trial.create_trial(params=trial_params(unscreened), distributions=dists,
                                              state=TrialState.PRUNED))
    trials = study.trials
    assert [observed(t) for t in trials] == [0.0, math.log(0.5), math.log(0.5), None]
    sampler: EvoSampler = study.sampler  # type: ignore[assignment]
    assert len(sampler.measured(trials)) == 3 and len(sampler.completed(trials)) == 1
    assert [t.number for t, _ in sampler.elites(trials)] == [0]
    records = move_records(trials)
    assert records[("BLOCK_N", 64, 32)].log_effects == [pytest.approx(math.log(0.5))]
    assert records[("BLOCK_N", 64, 32)].weight(8.0) < 1.0      # a move whose child screened slow is drawn less

"""Switching families: manifests' successors, the switch-family mutation, seeding only the roots."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from evo.family.manifest import load_family
from evo.search.driver import _defaults
from evo.search.evaluators import BuildOnlyEvaluator
from evo.search.params import suggest
from evo.search.proposal import PROPOSAL
from evo.search.sampler_evo import EvoSampler, move_records
from evo.family.space import make_candidate, switch

LADDER = [load_family(n) for n in ("seed_naive", "seed_online", "flash_scalar", "seed_wmma")]
SPEED = {"seed_naive": 0.01, "seed_online": 0.05, "flash_scalar": 0.3, "seed_wmma": 0.2}


@pytest.fixture(autouse=True)
def quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def run_ladder(n: int, seed: int) -> optuna.Study:
    """A study over the ladder where each later family is faster (a made-up score)."""
    study = optuna.create_study(direction="maximize", sampler=EvoSampler(LADDER, seed=seed))
    for _ in range(n):
        t = study.ask()
        fam, raw = suggest(t, LADDER)
        cand = make_candidate(fam, raw)
        study.tell(t, SPEED[cand.family] * (1 + 0.001 * sum(len(str(v)) for v in raw.values())))
    return study


def test_switch_keeps_shared_genes_the_target_allows() -> None:
    naive, online = load_family("seed_naive"), load_family("seed_online")
    moved = switch(make_candidate(naive, {"THREADS": 32}), online)
    assert moved.family == "seed_online" and moved.p == online.defaults() | {"THREADS": 32}


def test_switch_takes_defaults_for_a_value_the_target_lacks() -> None:
    naive, online = load_family("seed_naive"), load_family("seed_online")
    assert switch(make_candidate(naive, {"THREADS": 256}), online) == make_candidate(online)


def test_only_families_no_selected_family_reaches_are_seeded() -> None:
    study = run_ladder(12, seed=0)
    seeds = [t.system_attrs[PROPOSAL] for t in study.trials if t.system_attrs[PROPOSAL]["op"] == "seed"]
    assert [s["family"] for s in seeds] == ["seed_naive"]
    immigrants = {t.system_attrs[PROPOSAL]["family"] for t in study.trials
                  if t.system_attrs[PROPOSAL]["op"] == "immigrant"}
    assert immigrants <= {"seed_naive"}


def test_every_family_enters_by_a_recorded_switch_from_its_predecessor() -> None:
    study = run_ladder(40, seed=1)
    by_number = {t.number: t for t in study.trials}
    first: dict[str, dict] = {}
    for t in study.trials:
        first.setdefault(t.params["family"], t.system_attrs[PROPOSAL] | {"number": t.number})
    assert set(first) >= {"seed_naive", "seed_online", "seed_wmma"}
    for fam, prop in first.items():
        if fam == "seed_naive":
            continue
        parent = by_number[prop["parents"][0]]
        assert prop["op"] == "mutation" and prop["mutation"] == {"family": [parent.params["family"], fam]}
        assert fam in load_family(parent.params["family"]).successors


def test_a_switch_is_a_move_with_a_measured_effect() -> None:
    moves = move_records(run_ladder(40, seed=1).trials)
    effect = moves[("family", "seed_naive", "seed_online")].log_effects
    assert effect and min(effect) > 0  # online is faster than naive in the made-up score


def test_families_without_successors_are_all_seeded() -> None:
    fams = [load_family("flash_mma"), load_family("flash_scalar")]
    assert EvoSampler(fams).roots == fams


def test_seed_families_are_left_out_of_a_default_run() -> None:
    families = _defaults(BuildOnlyEvaluator("sm_90a"))["families"]
    assert families == ["flash_wgmma"] and _defaults(BuildOnlyEvaluator("sm_80"))["families"] == ["flash_mma"]
    assert not {"seed_naive", "seed_online", "seed_wmma", "seed_pipeline", "triton_flash"} & set(families)


def test_a_failed_trial_does_not_stop_the_ladder() -> None:
    sampler = EvoSampler(LADDER, seed=2)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for _ in range(30):
        t = study.ask()
        fam, raw = suggest(t, LADDER)
        cand = make_candidate(fam, raw)
        if cand.family == "seed_online" and cand.p["KV_TILE"] == 16:
            t.set_user_attr("status", "red")
            study.tell(t, state=TrialState.FAIL)
        else:
            study.tell(t, SPEED[cand.family])
    assert {"seed_online", "seed_wmma"} <= {t.params["family"] for t in study.trials}

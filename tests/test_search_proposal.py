"""Sweep samplers: valid, untried points only; grid visits each once; retries keep their params."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from evo.family.manifest import load_family
from evo.store.recording import record_key
from evo.search.params import suggest, trial_params
from evo.search.proposal import PROPOSAL, SweepSampler
from evo.family.space import all_candidates, make_candidate

SCALAR = load_family("flash_scalar")


@pytest.fixture(autouse=True)
def quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def drive(sampler, n: int, families=(SCALAR,)) -> list[str]:
    study = optuna.create_study(direction="maximize", sampler=sampler)
    keys = []
    for _ in range(n):
        t = study.ask()
        fam, raw = suggest(t, list(families))
        cand = make_candidate(fam, raw)
        keys.append(record_key(cand.family, cand.p))
        study.tell(t, 1.0)
    return keys


def test_grid_visits_every_valid_point_once_in_manifest_order() -> None:
    keys = drive(SweepSampler([SCALAR], order="grid"), 60)
    assert keys == [record_key(c.family, c.p) for c in all_candidates(SCALAR)]


@pytest.mark.parametrize("seed", [0, 1])
def test_random_draws_valid_points_without_repeats(seed: int) -> None:
    mma = load_family("flash_mma")
    keys = drive(SweepSampler([mma, SCALAR], seed=seed, order="random"), 40, (mma, SCALAR))
    assert len(set(keys)) == 40  # make_candidate in drive() already proved each one valid


def test_an_enqueued_retry_keeps_its_params_and_gets_no_proposal() -> None:
    study = optuna.create_study(direction="maximize", sampler=SweepSampler([SCALAR], order="grid"))
    retry = make_candidate(SCALAR, {"VEC": 2, "KV_TILE": 128})
    study.enqueue_trial(trial_params(retry))
    t = study.ask()
    fam, raw = suggest(t, [SCALAR])
    assert make_candidate(fam, raw) == retry and PROPOSAL not in study.trials[0].system_attrs
    study.tell(t, state=TrialState.FAIL)


def test_an_unlisted_space_is_drawn_from_without_being_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    """flash_wgmma's 1.9 million valid points are never listed: the random sweep draws them."""
    from evo.search import proposal

    def refuse(fam):  # type: ignore[no-untyped-def]
        raise AssertionError(f"listed {fam.name}")

    monkeypatch.setattr(proposal, "all_candidates", refuse)
    wgmma = load_family("flash_wgmma")
    keys = drive(SweepSampler([wgmma], seed=4, order="random"), 6, families=(wgmma,))
    assert len(set(keys)) == 6

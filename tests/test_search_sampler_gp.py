"""The model-guided evo-gp sampler on a synthetic recording (in memory, as evo run drives it)."""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path

import numpy as np
import optuna
import pytest

from evo.family.manifest import load_family
from evo.gpu.margin import GREEN_SHARE
from evo.store.recording import record_key
from evo.samplerbench.entrants import Entrant
from evo.samplerbench.optuna_runner import run_optuna
from evo.samplerbench.problem import Problem
from evo.search.encoding import Encoder
from evo.search.params import distributions, trial_params
from evo.search.sampler_gp import GpSampler, distance
from evo.search.surrogate import FailureModel, expected_improvement
from evo.family.space import all_candidates, make_candidate
from synthetic_sweep import make_recording


@pytest.fixture(scope="module")
def problem(tmp_path_factory: pytest.TempPathFactory) -> Problem:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rec = make_recording(tmp_path_factory.mktemp("rec") / "sweep-synthetic.json.gz", seed=5, drop=0.2)
    return Problem.load(rec, ["flash_mma"], tolerance=0.03)


def run(problem: Problem, name: str, seed: int, warm: bool, trials: int | None = None, batch: int = 2):
    e = Entrant(name, "evo")
    return run_optuna(problem, e.make, seed, warm, self_seeding=True, batch=batch, trial_cap=trials,
                      stop_at_target=trials is None)


def test_it_never_proposes_an_invalid_or_tried_point(problem: Problem) -> None:
    trace = run(problem, "evo-gp", 0, False, trials=40)
    assert None not in trace.proposed and len(set(trace.proposed)) == 40


def test_warm_it_climbs_from_the_default_one_gene_at_a_time_until_the_model_starts(tmp_path: Path) -> None:
    problem = Problem.load(make_recording(tmp_path / "sweep-full.json.gz", seed=5, drop=0.0), ["flash_mma"])
    trace = run(problem, "evo-gp", 1, True, trials=3, batch=1)
    points = dict(problem.points)
    assert isinstance(problem.outcome(trace.proposed[0]), float)  # type: ignore[arg-type]
    first, second = (points[k] for k in trace.proposed[:2])  # type: ignore[index]
    assert first == problem.defaults[0] and distance(first, second) == 1


def test_the_model_finds_a_top_point_sooner_than_random_search(problem: Problem) -> None:
    gp = [run(problem, "evo-gp", s, False).tally.reached for s in range(4)]
    rnd = [run(problem, "random", s, False).tally.reached for s in range(4)]
    assert None not in gp and statistics.median(gp) < statistics.median(rnd)  # type: ignore[arg-type,type-var]


def test_genes_are_encoded_by_kind() -> None:
    mma, scalar = load_family("flash_mma"), load_family("flash_scalar")
    enc = Encoder([mma, scalar])
    point = make_candidate(mma, {"BLOCK_M": 64, "NUM_WARPS": 4, "SWIZZLE": "none"})
    row = dict(zip(enc.columns, enc.row(point), strict=True))
    assert row["family=flash_mma"] == 1 and row["family=flash_scalar"] == 0
    assert row["flash_mma.BLOCK_M"] == 0.5            # log2 64 halfway between 32 and 128
    assert row["flash_mma.SWIZZLE"] == 0.0 and row["flash_scalar.VEC"] == 0.0
    assert enc.matrix(list(all_candidates(scalar))).shape == (60, enc.width)


def test_the_failure_model_learns_which_genes_fail() -> None:
    mma = load_family("flash_mma")
    enc = Encoder([mma])
    cands = list(all_candidates(mma))[:200]
    failed = np.array([c.p["STAGES"] == 3 for c in cands])
    model = FailureModel(enc.matrix(cands), failed)
    p = model.p_ok(enc.matrix(cands))
    assert p[failed].max() < p[~failed].min()
    assert (FailureModel(enc.matrix(cands), np.zeros(len(cands), bool)).p_ok(enc.matrix(cands[:3])) == 1).all()


def test_expected_improvement_prefers_a_higher_mean_and_more_doubt() -> None:
    ei = expected_improvement(np.array([0.0, 1.0, 0.0]), np.array([0.1, 0.1, 1.0]), best=0.5)
    assert ei[1] > ei[2] > ei[0] > 0


def test_a_point_timed_above_promotes_share_counts_as_failed_not_as_a_value() -> None:
    fam = load_family("flash_mma")
    a, b = itertools.islice(all_candidates(fam), 2)
    dists = {k: v for k, v in distributions([fam]).items() if k in trial_params(a)}

    def done(cand, share: float) -> optuna.trial.FrozenTrial:
        return optuna.trial.create_trial(params=trial_params(cand), distributions=dists, value=1.2,
                                         user_attrs={GREEN_SHARE: {"64": 0.5, "128": share}})

    timed, built, _ = GpSampler([fam], seed=0).observations([done(a, 0.5), done(b, 0.9)])
    key = lambda c: record_key(c.family, c.p)  # noqa: E731
    assert list(timed) == [key(a)]
    assert built[key(a)][1] is False and built[key(b)][1] is True

"""A benchmark problem from a recording, and the counting rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.errors import EvoError
from evo.store.recording import record_key
from evo.samplerbench.problem import UNMEASURED, Problem, Tally, candidate_key
from evo.family.space import all_candidates
from evo.family.manifest import load_family
from synthetic_sweep import make_recording


@pytest.fixture(scope="module")
def problem(tmp_path_factory: pytest.TempPathFactory) -> Problem:
    rec = make_recording(tmp_path_factory.mktemp("rec") / "sweep-synthetic.json.gz", seed=1, drop=0.3)
    return Problem.load(rec, ["flash_mma"])


def test_the_space_is_every_valid_point_recorded_or_not(problem: Problem) -> None:
    assert problem.size == sum(1 for _ in all_candidates(load_family("flash_mma")))
    assert any(problem.outcome(k) == UNMEASURED for k, _ in problem.points)


def test_the_target_is_the_best_point_or_those_within_tolerance(problem: Problem, tmp_path: Path) -> None:
    (best,) = problem.targets
    assert problem.outcome(best) == problem.best
    loose = Problem.load(problem.recording.path, ["flash_mma"], tolerance=0.05)  # type: ignore[arg-type]
    assert problem.targets < loose.targets
    assert all(loose.outcome(k) >= 0.95 * loose.best for k in loose.targets)  # type: ignore[operator]


def test_invalid_points_and_repeats_are_free_everything_else_costs_one(problem: Problem) -> None:
    t = Tally(problem, budget=problem.size)
    keys = [k for k, _ in problem.points if k not in problem.targets]
    unmeasured = next(k for k in keys if problem.outcome(k) == UNMEASURED)
    failed = next((k for k in keys if isinstance(problem.outcome(k), str) and k != unmeasured), unmeasured)
    timed = next(k for k in keys if isinstance(problem.outcome(k), float))
    for k in (None, timed, timed, unmeasured, failed, None, unmeasured):
        t.propose(k)
    assert (t.proposals, t.evaluations) == (7, 3 if failed != unmeasured else 2)
    assert t.curve[0] == problem.outcome(timed) and t.reached is None
    (best,) = problem.targets
    t.propose(best)
    assert t.reached == t.evaluations and t.curve[-1] == problem.best and t.done


def test_the_budget_ends_a_run(problem: Problem) -> None:
    t = Tally(problem, budget=2)
    for k, _ in problem.points[:5]:
        t.propose(k)
    assert t.evaluations == 2 and t.done and len(t.curve) == 2


def test_a_point_of_another_family_or_an_invalid_point_has_no_key(problem: Problem) -> None:
    fam = load_family("flash_mma")
    assert candidate_key(fam, {"BLOCK_M": 32, "NUM_WARPS": 8}) is None
    scalar = next(all_candidates(load_family("flash_scalar")))
    t = Tally(problem, budget=10)
    assert t.propose(record_key(scalar.family, scalar.p)) is None and t.evaluations == 0


def test_unknown_family_and_bad_tolerance_are_refused(problem: Problem) -> None:
    with pytest.raises(EvoError, match="holds no record of flash_wgmma"):
        Problem.load(problem.recording.path, ["flash_wgmma"])  # type: ignore[arg-type]
    with pytest.raises(EvoError, match="tolerance"):
        Problem.load(problem.recording.path, tolerance=1.5)  # type: ignore[arg-type]

"""The benchmark's in-memory runs are the real ``evo run --replay`` runs, and Kernel Tuner's
runs are counted by the same rule."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from evo.store.recording import record_key
from evo.samplerbench import kt_runner
from evo.samplerbench.entrants import Entrant
from evo.samplerbench.optuna_runner import run_optuna
from evo.samplerbench.problem import Problem
from evo.search.driver import RunOptions, run
from evo.search.loop import NullReporter
from evo.search.params import from_trial_params
from evo.family.space import make_candidate
from evo.gpu.suites import fast_cases
from synthetic_sweep import make_recording

CASES = ["F1", "F6"]
TRIALS = 20


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return make_recording(tmp_path_factory.mktemp("rec") / "sweep-synthetic.json.gz", seed=4, drop=0.3)


@pytest.fixture(scope="module")
def problem(recording: Path) -> Problem:
    return Problem.load(recording, cases=fast_cases(CASES))


def evo_run_keys(recording: Path, tmp_path: Path, sampler: str, seed: int) -> list[str | None]:
    """The record key of every trial of a real ``evo run --replay`` (None: an invalid point)."""
    db = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    run(RunOptions(replay=recording, db=db, study="s", batch=4, seed=seed, cases=CASES, trials=TRIALS,
                   sampler=sampler), NullReporter())
    study = optuna.load_study(study_name="s", storage=db)
    out: list[str | None] = []
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        fam, raw = from_trial_params(t.params)  # type: ignore[misc]
        out.append(None if t.user_attrs.get("status") == "invalid" else record_key(fam, raw))
    return out


@pytest.mark.parametrize("sampler,warm", [("evo", True), ("evo-gp", True), ("tpe", False), ("random", False)])
@pytest.mark.parametrize("seed", [0, 1])
def test_in_memory_runs_propose_what_evo_run_proposes(recording: Path, problem: Problem, tmp_path: Path,
                                                      sampler: str, warm: bool, seed: int) -> None:
    entrant = Entrant(sampler, "evo" if sampler != "tpe" else "optuna")
    trace = run_optuna(problem, entrant.make, seed, warm, self_seeding=entrant.self_seeding, batch=4,
                       trial_cap=TRIALS, stop_at_target=False)
    assert trace.proposed == evo_run_keys(recording, tmp_path, sampler, seed)


def test_warm_runs_start_from_the_defaults_and_cold_runs_do_not(problem: Problem) -> None:
    defaults = [record_key(d.family, d.p) for d in problem.defaults]
    for name in ("evo", "evo-gp", "random", "tpe"):
        e = Entrant(name, "evo" if name != "tpe" else "optuna")
        warm = run_optuna(problem, e.make, 3, True, self_seeding=e.self_seeding, batch=4, trial_cap=8,
                          stop_at_target=False)
        cold = run_optuna(problem, e.make, 3, False, self_seeding=e.self_seeding, batch=4, trial_cap=8,
                          stop_at_target=False)
        assert warm.proposed[: len(defaults)] == defaults, name
        assert cold.proposed[: len(defaults)] != defaults, name


def test_a_run_stops_at_the_target_and_counts_only_distinct_valid_points(problem: Problem) -> None:
    e = Entrant("optuna-random", "optuna")
    trace = run_optuna(problem, e.make, 0, False, batch=1, trial_cap=3000)
    valid = [k for k in trace.proposed if k is not None]
    assert trace.stopped == "reached" and trace.tally.reached == len(set(valid))
    assert trace.proposed[-1] in problem.targets and trace.trials == len(trace.proposed)
    assert len(valid) > len(set(valid)) or len(valid) < len(trace.proposed)  # repeats or invalid were free


kt = pytest.mark.skipif(kt_runner.available() is not None, reason="Kernel Tuner is not installed")


@kt
def test_the_kernel_tuner_cache_holds_every_valid_point_once(problem: Problem, tmp_path: Path) -> None:
    space = kt_runner.write_cache(problem, tmp_path / "c.json")
    cache = json.loads((tmp_path / "c.json").read_text())["cache"]
    assert sorted(space.keys.values()) == sorted(k for k, _ in problem.points) and len(cache) == problem.size
    key, cand = problem.points[0]
    entry = cache[space.cache_key(space.config(cand))]
    out = problem.outcome(key)
    assert entry["time"] == (1 / out if isinstance(out, float) else entry["time"])


@kt
@pytest.mark.parametrize("strategy", ["random_sample", "greedy_mls"])
def test_kernel_tuner_runs_are_seeded_and_counted_by_the_same_rule(problem: Problem, tmp_path: Path,
                                                                   strategy: str) -> None:
    space = kt_runner.write_cache(problem, tmp_path / "c.json")
    a = kt_runner.run_kt(space, tmp_path / "c.json", strategy, 5, False, budget=60)
    b = kt_runner.run_kt(space, tmp_path / "c.json", strategy, 5, False, budget=60)
    assert a.proposed == b.proposed
    distinct = list(dict.fromkeys(k for k in a.proposed if k is not None))
    assert a.tally.evaluations == min(len(distinct), 60)
    if a.tally.reached is not None:
        assert distinct[a.tally.reached - 1] in problem.targets


@kt
def test_bayes_opt_draws_its_initial_sample_from_the_seed(problem: Problem, tmp_path: Path) -> None:
    space = kt_runner.write_cache(problem, tmp_path / "c.json")
    runs = [kt_runner.run_kt(space, tmp_path / "c.json", "bayes_opt", seed, False, budget=8) for seed in (3, 3, 4)]
    assert runs[0].proposed == runs[1].proposed  # the Latin hypercube (its first points) is the seed's
    assert runs[0].proposed != runs[2].proposed


@kt
def test_the_space_kernel_tuner_walks_is_in_one_order_whatever_the_constraint_spelling(recording: Path) -> None:
    from kernel_tuner.searchspace import Searchspace

    problem = Problem.load(recording, ["flash_mma"], cases=fast_cases(CASES))
    space = kt_runner.Space(problem)
    exprs = [c.expr for c in problem.families[0].constraints]  # over numeric genes: Kernel Tuner's values
    assert exprs and not space.multi
    lists = [Searchspace(space.tune_params, r, 1024, **kt_runner.SEARCHSPACE).list
             for r in ([space.restriction], exprs)]
    assert lists[0] == lists[1]
    assert len(lists[0]) == problem.size


@kt
def test_a_warm_kernel_tuner_run_starts_at_the_default(problem: Problem, tmp_path: Path) -> None:
    space = kt_runner.write_cache(problem, tmp_path / "c.json")
    trace = kt_runner.run_kt(space, tmp_path / "c.json", "ordered_greedy_mls", 0, True, budget=5)
    d = problem.defaults[0]
    assert trace.proposed[0] == record_key(d.family, make_candidate(d.family, d.p).p)

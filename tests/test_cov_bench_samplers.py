"""The sampler benchmark's parts that need no optional package (evo/samplerbench/): Kernel
Tuner's search space and cache file (written without Kernel Tuner), which entrants run and
which are skipped with a note, how a run stops, serial and parallel runs agreeing, the plot's
curves, and the one-line refusals of bad options. tests/test_bench_runners.py runs Kernel
Tuner itself where it is installed."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest

from evo.errors import EvoError
from evo.family.manifest import Param, load_family
from evo.results import Shape
from evo.samplerbench import doc, entrants, kt_runner, plot, stats
from evo.samplerbench.entrants import Entrant, resolve
from evo.samplerbench.optuna_runner import run_optuna
from evo.samplerbench.problem import UNMEASURED, Problem, Tally
from evo.samplerbench.run import RunResult, Spec, benchmark
from evo.gpu.suites import fast_cases
from synthetic_sweep import make_recording

CASES = ["F1", "F6"]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return make_recording(tmp_path_factory.mktemp("rec") / "sweep-synthetic.json.gz", seed=7, drop=0.2)


@pytest.fixture(scope="module")
def both(recording: Path) -> Problem:
    return Problem.load(recording, cases=fast_cases(CASES))


@pytest.fixture(scope="module")
def scalar(recording: Path) -> Problem:
    return Problem.load(recording, ["flash_scalar"], cases=fast_cases(CASES))


# ----------------------------------------------------------------------------- Kernel Tuner's space


def test_two_families_are_one_space_with_a_family_index_and_the_other_at_its_defaults(both: Problem) -> None:
    space = kt_runner.Space(both)
    mma, sc = (f.name for f in both.families)
    assert (mma, sc) == ("flash_mma", "flash_scalar") and space.multi
    assert list(space.tune_params)[0] == "family" and space.tune_params["family"] == [0, 1]
    assert space.tune_params["BLOCK_M"] == [32, 64, 128]       # numbers keep their values
    assert space.tune_params["SWIZZLE"] == [0, 1]              # names and booleans become indices
    assert space.tune_params["EXP2"] == [0, 1] and space.tune_params["VEC"] == [2, 4, 8]
    point = next(c for _, c in both.points if c.family == "flash_scalar" and c.p["VEC"] == 8)
    config = space.config(point)
    defaults = both.families[0].defaults()
    assert config["family"] == 1 and config["VEC"] == 8
    assert config["BLOCK_M"] == defaults["BLOCK_M"]
    assert config["SWIZZLE"] == ["none", "xor"].index(defaults["SWIZZLE"])
    assert space.restriction(config)
    assert not space.restriction({**config, "BLOCK_M": next(v for v in (32, 64, 128) if v != defaults["BLOCK_M"])})
    assert sorted(space.keys.values()) == sorted(k for k, _ in both.points)  # every valid point, one key each


def test_the_cache_file_holds_every_point_with_its_time_or_kernel_tuners_failure_names(both: Problem,
                                                                                       tmp_path: Path) -> None:
    space = kt_runner.write_cache(both, tmp_path / "cache.json")
    data = json.loads((tmp_path / "cache.json").read_text())
    assert data == json.loads(json.dumps(space.cache()))
    assert (data["device_name"], data["kernel_name"], data["objective"]) == ("synthetic", kt_runner.KERNEL, "time")
    assert data["tune_params_keys"] == list(space.tune_params) and len(data["cache"]) == both.size
    seen = set()
    for ck, entry in data["cache"].items():
        out = both.outcome(space.keys[ck])
        if isinstance(out, float):
            assert entry["time"] == pytest.approx(1 / out)
            seen.add("timed")
        elif out in ("compile_failed", "resource_rejected"):
            assert entry["time"] == "CompilationFailedConfig"
            seen.add("build")
        else:
            assert entry["time"] == "RuntimeFailedConfig"
            seen.add("unmeasured" if out == UNMEASURED else "failed")
    assert seen == {"timed", "build", "unmeasured", "failed"}


def test_a_parameter_with_two_domains_cannot_be_one_kernel_tuner_parameter() -> None:
    mma = load_family("flash_mma")
    scalar = load_family("flash_scalar")
    clash = dataclasses.replace(scalar, params={**scalar.params, "STAGES": Param("STAGES", (1, 4), 1)})
    with pytest.raises(EvoError, match="parameter STAGES has different domains in two families"):
        kt_runner.Space(SimpleNamespace(families=[mma, clash], points=[]))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- entrants


def test_kernel_tuner_missing_is_a_note_and_the_other_entrants_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kt_runner, "available", lambda: "Kernel Tuner is not installed (No module named x)")
    notes: list[str] = []
    got = resolve(["evo", "tpe"], None, notes.append)
    assert got == [Entrant("evo", "evo"), Entrant("tpe", "optuna")]
    assert notes == ["skipping Kernel Tuner: Kernel Tuner is not installed (No module named x)"]


def test_kernel_tuners_default_strategies_join_warm_where_they_take_a_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kt_runner, "available", lambda: None)
    got = resolve(["random"], None, print)
    assert got[0] == Entrant("random", "evo")
    kt = got[1:]
    assert [e.name for e in kt] == [f"kt:{s}" for s in kt_runner.STRATEGIES] and {e.kind for e in kt} == {"kt"}
    assert {e.strategy for e in kt if e.warm} == set(kt_runner.STRATEGIES) & kt_runner.TAKES_X0
    assert not next(e for e in kt if e.strategy == "random_sample").warm
    with pytest.raises(EvoError, match="kt:pso is not driven through Optuna"):
        next(e for e in kt if e.strategy == "pso").make(None, 0, False)  # type: ignore[arg-type]


def test_samplers_whose_packages_are_missing_are_skipped_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_sklearn() -> None:
        raise EvoError("evo-gp needs scikit-learn")

    monkeypatch.setattr(entrants.surrogate, "require", no_sklearn)
    monkeypatch.setattr(entrants, "gp_available", lambda: "Optuna's GPSampler needs scipy")
    notes: list[str] = []
    assert resolve(["evo-gp", "gp", "optuna-random"], [], notes.append) == [Entrant("optuna-random", "optuna")]
    assert notes == ["skipping evo-gp: evo-gp needs scikit-learn", "skipping gp: Optuna's GPSampler needs scipy"]


def test_optunas_gp_sampler_needs_scipy(monkeypatch: pytest.MonkeyPatch, both: Problem) -> None:
    pytest.importorskip("scipy")
    assert entrants.gp_available() is None
    assert resolve(["gp"], [], print) == [Entrant("gp", "optuna")]
    assert Entrant("gp", "optuna").trial_cap(both) == entrants.GP_TRIALS
    assert Entrant("tpe", "optuna").trial_cap(both) == 2 * both.size and Entrant("evo", "evo").trial_cap(both) is None
    monkeypatch.setitem(sys.modules, "scipy", None)  # as if it were not installed
    assert "Optuna's GPSampler needs scipy and torch" in (entrants.gp_available() or "")


# ----------------------------------------------------------------------------- runs


def test_a_run_stops_when_its_evaluation_budget_is_spent(scalar: Problem) -> None:
    e = Entrant("random", "evo")
    trace = run_optuna(scalar, e.make, 0, False, batch=1, budget=3, stop_at_target=False)
    assert trace.stopped == "budget" and trace.tally.evaluations == 3
    assert len({k for k in trace.proposed if k is not None}) == 3


def test_a_run_past_its_target_ends_when_every_valid_point_was_proposed(scalar: Problem) -> None:
    e = Entrant("random", "evo")
    trace = run_optuna(scalar, e.make, 1, False, batch=8, stop_at_target=False)
    assert trace.stopped == "space exhausted"
    assert {k for k in trace.proposed if k is not None} == {k for k, _ in scalar.points}
    assert trace.tally.reached is not None and trace.tally.evaluations == trace.tally.reached  # nothing counted after
    assert trace.tally.seen(trace.proposed[0]) and not Tally(scalar, 5).seen(trace.proposed[0])


def test_parallel_runs_give_what_serial_runs_give(recording: Path) -> None:
    spec = Spec(str(recording), ("flash_scalar",), tuple(fast_cases(CASES)), "sdpa_default", 0.0)
    who = [Entrant("random", "evo"), Entrant("optuna-random", "optuna")]
    seen: list[RunResult] = []
    serial, _ = benchmark(spec, who, ["cold", "warm"], [0, 1], jobs=1)
    parallel, _ = benchmark(spec, who, ["cold", "warm"], [0, 1], jobs=2, progress=seen.append)

    def same(r: RunResult) -> tuple[object, ...]:
        return (r.sampler, r.mode, r.seed, r.evaluations, r.spent, r.trials, r.stopped, r.curve)

    assert [same(r) for r in parallel] == [same(r) for r in serial] and len(serial) == 8
    assert sorted(map(same, seen)) == sorted(map(same, serial))  # each run reported once, as it finished


def test_a_run_survives_its_json_including_the_points_before_the_first_timing() -> None:
    r = RunResult("evo", "cold", 3, None, 60, 75, "budget", 1.5, [-math.inf, -math.inf, 0.8, 1.1])
    d = json.loads(json.dumps(r.to_json()))
    assert d["curve"] == [None, None, 0.8, 1.1] and RunResult.from_json(d) == r
    assert RunResult.from_json({k: v for k, v in d.items() if k != "curve"}).curve == []


def test_a_problem_needs_cases_every_record_covers_and_a_timed_point(recording: Path, both: Problem) -> None:
    with pytest.raises(EvoError, match="no FAST case is covered by every timed record"):
        Problem.load(recording, cases=[])
    with pytest.raises(EvoError, match=r"has no point of flash_scalar timed on all of X-fp16"):
        Problem.load(recording, ["flash_scalar"], cases=[Shape("X", 1, 1, 64, 64, False)])
    loose = Problem.load(recording, cases=fast_cases(CASES), tolerance=0.02)
    assert both.describe_target() == f"the recording's best point (x{both.best:.3f})"
    assert loose.describe_target() == (f"any point within 2.0% of the recording's best x{loose.best:.3f} "
                                       f"({len(loose.targets)} point(s))")


# ----------------------------------------------------------------------------- the figure's curves


def test_the_best_so_far_is_the_median_over_runs_relative_to_the_best() -> None:
    runs = [RunResult("evo", "cold", s, e, 3, 3, "x", 0.0, c) for s, (e, c) in enumerate([
        (3, [-math.inf, 1.0, 2.0]),      # reached the best (2.0) at its 3rd evaluation
        (None, [0.5]),                   # stopped after one: keeps its last value
        (2, [1.0, 2.0]),
    ])]
    assert plot.best_so_far(runs, 4, 2.0) == [0.25, 0.5, 1.0, 1.0]
    assert plot.best_so_far([RunResult("evo", "cold", 0, None, 0, 0, "x", 0.0, [])], 2, 2.0) == [0.0, 0.0]
    assert plot.reached_share(runs, 4) == [0.0, pytest.approx(1 / 3), pytest.approx(2 / 3), pytest.approx(2 / 3)]


def test_no_matplotlib_is_said_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert (plot.available() or "").startswith("matplotlib is not installed")


# ----------------------------------------------------------------------------- the doc's options


@pytest.mark.parametrize(("changes", "message"), [
    ({"recordings": []}, "no recording: pass --recording FILE"),
    ({"seeds": 0}, "--seeds must be at least 1"),
    ({"batch": 0}, "--batch must be at least 1"),
    ({"samplers": [], "kt": []}, "no sampler to benchmark"),
    ({"recordings": ["{rec}:"]}, "--recording '.*:': no family after ':'"),
])
def test_bad_options_are_refused_before_anything_runs_or_is_written(recording: Path, tmp_path: Path,
                                                                   changes: dict, message: str) -> None:
    opts = doc.Options([str(recording)], seeds=1, samplers=["random"], kt=[], out=tmp_path / "b.md",
                       plot=None, results=tmp_path / "b.json")
    for k, v in changes.items():
        setattr(opts, k, [r.format(rec=recording) for r in v] if k == "recordings" else v)
    with pytest.raises(EvoError, match=message):
        doc.write(opts, print)
    assert list(tmp_path.iterdir()) == []


def test_the_command_line_names_every_option_off_its_default() -> None:
    opts = doc.Options(["a.json.gz", "b.json.gz:flash_mma"], seeds=5)
    assert doc.command_line(opts) == "evo bench-samplers --recording a.json.gz --recording b.json.gz:flash_mma --seeds 5"
    opts = doc.Options(["a.json.gz"], seeds=2, samplers=["evo", "tpe"], kt=[], modes=["warm"], tolerance=0.01, batch=4)
    assert doc.command_line(opts) == ("evo bench-samplers --recording a.json.gz --seeds 2 --samplers evo,tpe "
                                      "--kt none --modes warm --tolerance 0.01 --batch 4")
    assert doc.command_line(doc.Options(["a"], seeds=1, kt=["pso", "mls"])).endswith("--kt pso,mls")


# ----------------------------------------------------------------------------- statistics


def test_statistics_refuse_what_they_cannot_answer() -> None:
    with pytest.raises(ValueError, match="quantile of no values"):
        stats.quantile([], 0.5)
    with pytest.raises(ValueError, match=r"quantile 1.5 is outside \[0, 1\]"):
        stats.quantile([1.0], 1.5)
    with pytest.raises(ValueError, match="alternative must be two-sided, less or greater, not 'fewer'"):
        stats.mann_whitney([1.0], [2.0], "fewer")
    with pytest.raises(ValueError, match="needs two non-empty samples"):
        stats.mann_whitney([], [2.0])

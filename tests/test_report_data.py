"""What the report reads: progress per study and sampler, reach, failures, cases, files."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from evo.errors import EvoError
from evo.report import data
from evo.store import Store, open_store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(f"sqlite:///{tmp_path / 'evo.sqlite'}")


def trial(state: TrialState, value: float | None = None, run: int | None = None, **attrs: object) -> optuna.trial.FrozenTrial:
    return create_trial(state=state, value=value, user_attrs=dict(attrs),
                        system_attrs={} if run is None else {"evo:run": str(run)})


def test_progress_counts_evaluations_and_keeps_the_best_so_far(store: Store) -> None:
    run = store.start_run("evo run", study="s", options={"sampler": "tpe"})
    ts = [trial(TrialState.COMPLETE, 0.5, run, status="fast", candidate="a"),
          trial(TrialState.FAIL, None, run, status="invalid"),                      # free: never built
          trial(TrialState.COMPLETE, 0.5, run, status="fast", candidate="a", reused=True),  # free: answered
          trial(TrialState.FAIL, None, run, status="red", candidate="b"),
          trial(TrialState.COMPLETE, 0.9, run, status="fast", candidate="c"),
          trial(TrialState.COMPLETE, 0.7, run, status="fast", candidate="d")]
    (series,) = data.progress(store, {"s": ts})
    assert (series["study"], series["sampler"]) == ("s", "tpe")
    pts = series["points"]
    assert [p["evaluations"] for p in pts] == [1, 1, 1, 2, 3, 4]
    assert [p["best"] for p in pts] == [0.5, 0.5, 0.5, 0.5, 0.9, 0.9]
    assert [p["value"] for p in pts] == [0.5, None, 0.5, None, 0.9, 0.7]


def test_a_study_resumed_with_another_sampler_is_split_but_shares_its_best(store: Store) -> None:
    first = store.start_run("evo run", study="s", options={"sampler": "random"})
    second = store.start_run("evo run", study="s", options={"sampler": "evo"})
    ts = [trial(TrialState.COMPLETE, 0.8, first, status="fast"), trial(TrialState.COMPLETE, 0.6, second, status="fast")]
    a, b = data.progress(store, {"s": ts})
    assert (a["sampler"], b["sampler"]) == ("random", "evo")
    assert b["points"][0]["best"] == 0.8  # the study's best, found by the first sampler
    assert b["points"][0]["evaluations"] == 2


def test_a_trial_without_a_run_stamp_has_an_unknown_sampler(store: Store) -> None:
    (series,) = data.progress(store, {"s": [trial(TrialState.COMPLETE, 1.0, status="fast")]})
    assert series["sampler"] == "?"


def test_reach_is_the_evaluation_where_a_study_came_within_two_percent() -> None:
    series = [{"study": "fast", "sampler": "evo", "points": [
                  {"value": 0.5, "best": 0.5, "evaluations": 1}, {"value": 0.985, "best": 0.985, "evaluations": 7}]},
              {"study": "slow", "sampler": "random", "points": [
                  {"value": 1.0, "best": 1.0, "evaluations": 30}]},
              {"study": "never", "sampler": "tpe", "points": [{"value": 0.9, "best": 0.9, "evaluations": 50}]}]
    r = data.reach(series)
    assert r["best"] == 1.0 and r["target"] == pytest.approx(0.98)
    assert {row["study"]: row["reached_at"] for row in r["rows"]} == {"fast": 7, "slow": 30, "never": None}


def test_alike_failures_share_a_reason_class() -> None:
    a = data.reason_class("evo_attn_d64_fp16_causal spills (12 B stores, 12 B loads)")
    b = data.reason_class("evo_attn_d64_fp16_causal spills (4 B stores, 8 B loads)")
    assert a == b == "evo_attn_d64_fp16_causal spills (N B stores, N B loads)"
    assert data.reason_class("unmeasured: flash_mma(BLOCK_M=64, STAGES=2) is not in sweep-h200.json.gz") == \
        "unmeasured: <candidate> is not in sweep-h200.json.gz"
    assert data.reason_class("x; x") == "x" and data.reason_class("") == "(no reason stored)"


def test_cases_sort_in_suite_order() -> None:
    tags = ["F10-fp16", "F2c-fp16", "F1c-fp16", "F2-fp16", "F1-fp16", "F1-bf16"]
    assert sorted(tags, key=data.case_key) == ["F1-bf16", "F1-fp16", "F1c-fp16", "F2-fp16", "F2c-fp16", "F10-fp16"]


def test_unknown_study_is_a_one_line_error(store: Store) -> None:
    with pytest.raises(EvoError, match="no study 'x'"):
        data.study_trials(data.optuna_storage(store), "x")


def test_a_database_without_optuna_tables_is_read_without_creating_them(store: Store) -> None:
    assert data.optuna_storage(store) is None
    assert data.study_trials(None, None) == {}
    assert data.optuna_storage(store) is None  # still none: reading created nothing


def test_bench_records_are_read_newest_first_and_bad_ones_refused(tmp_path: Path) -> None:
    for name, created in (("old.json", "2026-01-01T00:00:00+00:00"), ("new.json", "2026-02-01T00:00:00+00:00")):
        (tmp_path / name).write_text(json.dumps({"gpu": "G", "created": created, "cases": []}))
    assert [b.name for b in data.load_bench([tmp_path])] == ["new.json", "old.json"]
    (tmp_path / "bad.json").write_text('{"gpu": "G"}')
    with pytest.raises(EvoError, match="not an evo bench record"):
        data.load_bench([tmp_path / "bad.json"])
    with pytest.raises(EvoError, match="no benchmark file"):
        data.load_bench([tmp_path / "missing.json"])


def test_seeds_records_in_a_folder_are_passed_over_and_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "bench.json").write_text(json.dumps({"gpu": "G", "created": "2026", "cases": []}))
    (tmp_path / "seeds.json").write_text(json.dumps({"kind": "seeds", "gpu": "G", "rows": []}))
    assert [b.name for b in data.load_bench([tmp_path])] == ["bench.json"]
    with pytest.raises(EvoError, match="a seeds record"):
        data.load_bench([tmp_path / "seeds.json"])


def test_the_sampler_table_counts_unreached_runs_past_the_budget(tmp_path: Path) -> None:
    path = tmp_path / "sb.json"

    def runs(sampler: str, mode: str, evals: list[int | None]) -> list[dict[str, object]]:
        return [{"sampler": sampler, "mode": mode, "seed": s, "evaluations": e, "spent": e or 100, "trials": 10,
                 "stopped": "reached" if e else "budget", "seconds": 0.1} for s, e in enumerate(evals)]

    sec = {"recording": "data/r.json.gz", "families": ["f"], "gpu": "G", "best": 1.0, "size": 100,
           "runs": runs("evo", "cold", [10, 20, None]) + runs("random", "cold", [5, 6, 7, 8])
           + runs("evo", "warm", [None, None, 3])}
    path.write_text(json.dumps({"schema": "evo.sampler-benchmark/2", "git_sha": "abc", "seeds": 4, "batch": 1,
                                "tolerance": 0.0, "recordings": [sec]}))
    (got,) = data.load_sampler_benchmark(path)["sections"]
    assert got["modes"] == ["cold", "warm"] and [r["sampler"] for r in got["rows"]] == ["random", "evo"]
    evo = got["rows"][1]["cells"]
    assert evo["cold"] == {"runs": 3, "reached": 2, "median": "20", "iqr": "10-> budget"}  # order statistics
    assert evo["warm"] == {"runs": 3, "reached": 1, "median": "> budget", "iqr": "3-> budget"}
    assert "warm" not in got["rows"][0]["cells"]
    path.write_text('{"budget": 100, "runs": []}')  # the old single-table format
    with pytest.raises(EvoError, match="cannot read sampler benchmark"):
        data.load_sampler_benchmark(path)
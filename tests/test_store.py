"""The lineage store on SQLite files: migrations, round trips, atomic writes, clear errors."""

from __future__ import annotations

import math
from collections.abc import Iterator
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from store_fixture import F1, F1C, FIXTURES, built, copied_store, evaluation, migrated, populate, timings, tiny  # noqa: F401 (migrated: fixture)

from evo.errors import EvoError
from evo.results import CheckResult, Resources, Shape, Status, Timing
from evo.family.space import make_candidate
from evo.store import NewInsight, Store, invalid_id, open_store, short_id
from evo.store.engine import HEAD


@pytest.fixture(autouse=True)
def _templates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'evo.sqlite'}"


@pytest.fixture
def store(migrated: Path, tmp_path: Path) -> Iterator[Store]:  # noqa: F811
    yield from copied_store(migrated, tmp_path)


@pytest.fixture
def lineage(store: Store) -> dict:
    return populate(store)


def test_fresh_file_is_migrated_to_head(url: str, tmp_path: Path) -> None:
    open_store(url).close()
    db = sqlite3.connect(tmp_path / "evo.sqlite")
    assert db.execute("select version_num from evo_alembic_version").fetchall() == [(HEAD,)]
    assert db.execute("pragma journal_mode").fetchone() == ("wal",)


def test_reopening_keeps_rows(url: str, store: Store, lineage: dict) -> None:
    with open_store(url) as again:
        assert again.get(lineage["child"]).candidate.status is Status.FAST


def test_round_trip_of_a_small_lineage(store: Store, lineage: dict) -> None:
    rec = store.get("ab")
    assert rec.candidate.params == {"ROWS": 32, "SMEM_KB": 1, "FAULT": "none"}
    assert rec.builds[0].resources["evo_attn_d64_fp16_full"] == Resources(40, 0, 0, 0, 0, 1024)
    assert [e.mutation for e in rec.parents] == [{"ROWS": (64, 32)}]
    assert rec.trials[0].value == 2.5 and rec.trials[0].number == 0
    ev = rec.evaluations[0]
    assert ev.device == "NVIDIA H200" and ev.device_info["cc"] == "9.0"
    assert ev.timings == timings(4.0)
    assert ev.checks[0] == CheckResult(F1, 0, True, 1e-3, 1e-3, 3e-3)


def test_nan_error_comes_back_as_nan(store: Store, lineage: dict) -> None:
    assert math.isnan(store.get(lineage["child"]).evaluations[0].checks[1].max_abs_err)


def test_children_and_parents_mirror(store: Store, lineage: dict) -> None:
    assert [e.child_id for e in store.children(lineage["parent"])] == [lineage["child"]]
    assert store.parents(lineage["parent"]) == []


def test_best_orders_by_score(store: Store, lineage: dict) -> None:
    ranked = store.best(baseline="sdpa_default", cases=[F1, F1C])
    assert [(c.id, round(s, 6)) for c, s in ranked] == [(lineage["child"], 2.5), (lineage["parent"], 2.0)]


def test_best_skips_candidates_missing_a_case(store: Store, lineage: dict) -> None:
    assert store.best(cases=[F1, Shape("F9", 1, 1, 1, 64, False)]) == []


def test_newer_timings_replace_older_on_the_same_device(store: Store, lineage: dict) -> None:
    store.record_evaluation(replace(evaluation(lineage["parent"], 1.0), checks=[]))
    assert store.best(n=1)[0][0].id == lineage["parent"]


def test_timings_are_per_device(store: Store, lineage: dict) -> None:
    store.record_evaluation(evaluation(lineage["child"], 1.0), device="replay:NVIDIA H200")
    assert {t.median_us for t in store.timings_for(lineage["child"], "NVIDIA H200")} == {4.0, 10.0}
    assert {t.median_us for t in store.timings_for(lineage["child"])} == {1.0, 10.0}


@pytest.mark.parametrize(("query", "expected"), [
    ({"study": "s1"}, ["parent", "child"]),
    ({"study": "other"}, []),
    ({"status": Status.FAST}, ["parent", "child"]),
    ({"status": ["built", "red"]}, []),
    ({"family": "tiny", "limit": 1}, ["parent"]),
])
def test_find_candidates_filters(store: Store, lineage: dict, query: dict, expected: list[str]) -> None:
    assert [c.id for c in store.find_candidates(**query)] == [lineage[k] for k in expected]


def test_record_evaluation_is_all_or_nothing(store: Store, lineage: dict) -> None:
    before = store.counts()
    broken = evaluation(lineage["child"])
    broken.timings.append(Timing(None, "evo", 1.0, 1.0, 1.0))  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        store.record_evaluation(broken)
    assert store.counts() == before
    assert store.get(lineage["child"]).candidate.status is Status.FAST


def test_evaluation_of_unknown_candidate_is_an_error(store: Store) -> None:
    with pytest.raises(EvoError, match="record its build first"):
        store.record_evaluation(evaluation("f" * 64))


def test_rebuild_keeps_evaluated_status_and_adds_no_cached_row(store: Store, lineage: dict) -> None:
    item = tiny(ROWS=32)
    store.record_build(item, built(item, lineage["child"], cached=True))
    rec = store.get(lineage["child"])
    assert rec.candidate.status is Status.FAST and len(rec.builds) == 1


def test_a_candidate_keeps_the_kernel_subset_it_was_rendered_with(store: Store) -> None:
    from evo.family.render import render

    every = tiny(ROWS=64)
    part = render(make_candidate("tiny", {"ROWS": 64}), kernels={(64, "fp16", True)})
    for item, bid in ((every, "a" * 64), (part, "b" * 64)):
        store.record_build(item, built(item, bid))
    assert store.get("a" * 64).candidate.kernels is None
    assert store.get("b" * 64).candidate.kernels == frozenset({(64, "fp16", True)})


def test_invalid_candidate_is_stored_with_its_reason(store: Store) -> None:
    point = make_candidate("tiny", {})
    cid = store.record_invalid(point, "constraint violated: x")
    assert cid == invalid_id(point) and cid.startswith("invalid-") and len(cid) == 48
    assert short_id(cid) == cid[:16]
    assert (store.get(cid).candidate.status, store.get(cid).candidate.reason) == (Status.INVALID, "constraint violated: x")


def test_edges_are_idempotent_and_checked(store: Store, lineage: dict) -> None:
    store.add_edge(lineage["parent"], lineage["child"], {"ROWS": (64, 32)})
    assert len(store.edges()) == 1
    with pytest.raises(EvoError, match="no candidate"):
        store.add_edge(lineage["parent"], "e" * 64)


def test_a_childs_lineage_is_written_once_per_study(store: Store, lineage: dict) -> None:
    """A second worker of the same study that drew the child from another parent writes nothing;
    a run of another study records its own edges."""
    nearest = [(lineage["parent"], None, "nearest")]
    other_worker = store.start_run("evo run", study="s1")
    assert not store.add_lineage(lineage["child"], nearest, other_worker, "s1")
    assert [(e.kind, e.run_id) for e in store.edges()] == [("mutation", lineage["run"])]
    elsewhere = store.start_run("evo run", study="s2")
    assert store.add_lineage(lineage["child"], nearest, elsewhere, "s2")
    assert [(e.kind, e.run_id) for e in store.edges()] == [("mutation", lineage["run"]), ("nearest", elsewhere)]
    with pytest.raises(EvoError, match="no candidate"):
        store.add_lineage("e" * 64, nearest, elsewhere, "s2")


def test_trial_is_updated_in_place(store: Store, lineage: dict) -> None:
    store.record_trial("s1", 0, lineage["child"], None, "FAIL", math.nan)
    (trial,) = store.get(lineage["child"]).trials
    assert (trial.state, trial.value) == ("FAIL", None)


@pytest.mark.parametrize(("prefix", "message"), [("a", "ambiguous"), ("zz", "no candidate"), ("", "empty")])
def test_bad_ids_are_clear_errors(store: Store, lineage: dict, prefix: str, message: str) -> None:
    with pytest.raises(EvoError, match=message):
        store.get(prefix)


def test_insights_are_replaced_per_study(store: Store) -> None:
    store.replace_insights("s1", [NewInsight("move", "ROWS 64->32", "x1.25", {"median": 1.25}, 3)])
    store.replace_insights("s1", [NewInsight("move", "ROWS 32->64", "x0.8", support=2)])
    assert [i.key for i in store.insights("s1")] == ["ROWS 32->64"]


def test_finish_run_marks_the_run(store: Store, lineage: dict) -> None:
    run = store.get_run(lineage["run"])
    assert run is not None and run.status == "done" and run.finished is not None and run.study == "s1"


@pytest.mark.parametrize("content", [b"this is not a database, just some bytes" * 100, None])
def test_unusable_database_is_one_line_error(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "bad.sqlite"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    with pytest.raises(EvoError, match="cannot open database") as info:
        open_store(f"sqlite:///{path}")
    assert "\n" not in str(info.value)


def test_bad_url_is_one_line_error() -> None:
    with pytest.raises(EvoError, match="cannot use database URL"):
        open_store("nosuchdialect://x")


def test_optuna_tables_share_the_file_and_are_not_migrated(url: str) -> None:
    import optuna
    from alembic import command

    from evo.store.engine import alembic_config

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.create_study(study_name="s1", storage=url)
    with open_store(url) as store:
        cfg = alembic_config()
        with store.engine.connect() as conn:
            cfg.attributes["connection"] = conn
            command.check(cfg)  # raises if autogenerate would touch any table
    assert optuna.load_study(study_name="s1", storage=url).study_name == "s1"


def test_head_constant_matches_the_migrations() -> None:
    from alembic.script import ScriptDirectory

    from evo.store.engine import HEAD, alembic_config

    assert ScriptDirectory.from_config(alembic_config()).get_heads() == [HEAD]


def test_database_from_a_newer_evo_is_one_line_error(url: str, tmp_path: Path) -> None:
    open_store(url).close()
    db = sqlite3.connect(tmp_path / "evo.sqlite")
    db.execute("update evo_alembic_version set version_num = '9999'")
    db.commit()
    with pytest.raises(EvoError, match="cannot migrate database"):
        open_store(url)

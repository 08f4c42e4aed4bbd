"""Insights: move effects per shape bucket, resource co-occurrence, importances; stored with evidence."""

from __future__ import annotations

import math
import random
from pathlib import Path

import optuna
import pytest

from evo.toolchain.build import build_id_for
from evo.cli import main
from evo.analysis.insights import compute, importances, resource_stats, save
from evo.family.render import render
from evo.results import BuildResult, Evaluation, Shape, Status, Timing
from evo.search.params import distributions, trial_params
from evo.family.space import make_candidate, random_candidates
from evo.family.manifest import load_family
from evo.store import Store, open_store

D64 = Shape("F1", 1, 8, 512, 64, False)
D128 = Shape("F6", 1, 12, 4096, 128, False)


def add(store: Store, params: dict, status: Status = Status.FAST, reason: str = "",
        us: tuple[float, float] = (10.0, 10.0)) -> str:
    r = render(make_candidate("flash_mma", params))
    bid = build_id_for(r, "sm_90a")
    built = status if status in (Status.COMPILE_FAILED, Status.RESOURCE_REJECTED) else Status.BUILT
    store.record_build(r, BuildResult(bid, r.source_hash, "sm_90a", ("-O3",), built, reason))
    if built is Status.BUILT:
        timings = [t for shape, u in zip((D64, D128), us, strict=True) for t in
                   (Timing(shape, "evo", u, u, u), Timing(shape, "sdpa_default", 10.0, 10.0, 10.0))]
        store.record_evaluation(Evaluation(bid, status, reason, device={"name": "NVIDIA H200"},
                                           timings=timings if status is Status.FAST else []))
    return bid


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """STAGES 1->2 three times: x1.2 on D=64, x0.9 on D=128; STAGES 2->3 once, child red."""
    s = open_store(f"sqlite:///{tmp_path / 'evo.sqlite'}")
    for bn in (32, 64, 128):
        parent = add(s, {"STAGES": 1, "BLOCK_N": bn})
        child = add(s, {"STAGES": 2, "BLOCK_N": bn}, us=(10 / 1.2, 10 / 0.9))
        s.add_edge(parent, child, {"STAGES": [1, 2]}, "mutation")
    red = add(s, {"STAGES": 3, "BLOCK_N": 32}, Status.RED, "mismatch")
    s.add_edge(add(s, {"STAGES": 2, "BLOCK_N": 32}, us=(10 / 1.2, 10 / 0.9)), red, {"STAGES": [2, 3]}, "mutation")
    add(s, {"STAGES": 3, "BLOCK_N": 128}, Status.RESOURCE_REJECTED, "evo_attn_d128_fp16_full needs 300000 B "
        "shared memory (0 static + 300000 dynamic) > 232448 B on sm_90a")
    return s


def move(report, param, old, new, bucket):
    (m,) = [m for m in report.moves if (m.param, m.old, m.new, m.bucket) == (param, old, new, bucket)]
    return m


@pytest.mark.parametrize("bucket,effect,wins", [("d64-full", 1.2, 1.0), ("d128-full", 0.9, 0.0),
                                                 ("all", math.sqrt(1.2 * 0.9), 1.0)])
def test_move_effects_are_split_by_bucket(store: Store, bucket: str, effect: float, wins: float) -> None:
    m = move(compute(store), "STAGES", 1, 2, bucket)
    assert (m.n, m.win_rate) == (3, wins)
    assert m.median_effect == pytest.approx(effect)
    assert len(m.evidence) == 3


def test_a_failed_child_counts_against_its_move(store: Store) -> None:
    m = move(compute(store), "STAGES", 2, 3, "all")
    assert (m.n, m.failed) == (0, 1)
    assert "1 child(ren) failed" in m.text()


def test_resource_rejections_are_counted_per_param_value(store: Store) -> None:
    rows = {(r.param, r.value): r for r in resource_stats(store.find_candidates())}
    stages3 = rows[("STAGES", 3)]
    assert (stages3.built, stages3.smem_over, stages3.spills, stages3.rejected) == (2, 1, 0, 1)
    assert stages3.rate == 0.5 and rows[("STAGES", 1)].rate == 0.0


def test_insights_are_stored_with_support_and_evidence(store: Store) -> None:
    save(store, None, compute(store))
    rows = {i.key: i for i in store.insights(kind="move")}
    row = rows["flash_mma:STAGES:1->2:d64-full"]
    assert (row.support, len(row.evidence)) == (3, 3)
    assert "median x1.200" in row.text and "100% wins" in row.text


def study_with(n: int) -> optuna.Study:
    fam = load_family("flash_mma")
    study = optuna.create_study(direction="maximize")
    for cand in random_candidates(fam, n, random.Random(0)):
        value = 1.0 + 0.5 * (cand.p["STAGES"] == 2)
        study.add_trial(optuna.trial.create_trial(params=trial_params(cand), distributions=distributions([fam]),
                                                  value=value))
    return study


def test_importances_need_enough_trials() -> None:
    (imp,) = importances(study_with(4))
    assert imp.skipped.startswith("too few completed trials (4")


def test_importances_rank_the_parameter_that_matters() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    (imp,) = importances(study_with(60))
    assert not imp.skipped and max(imp.values, key=imp.values.get) == "STAGES"


def test_the_command_prints_the_tables(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["insights", "--db", store.url]) == 0
    out = capsys.readouterr().out
    assert "STAGES 1->2" in out and "resources" in out

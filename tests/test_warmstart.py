"""``evo run --start-from``: a new study's first trials are the best of earlier studies."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from evo.errors import EvoError
from evo.family.manifest import load_family
from evo.search import loop
from evo.search.driver import RunOptions, run
from evo.search.loop import NullReporter
from evo.search.params import distributions, from_trial_params
from evo.search.sampler_evo import fitness, shippable
from evo.search.warmstart import IMPORTED_FROM, STARTED_FROM, best_trials
from evo.store import open_store
from synthetic_sweep import make_recording

CASES = ["F1", "F6"]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return make_recording(tmp_path_factory.mktemp("rec") / "sweep-synthetic.json.gz", seed=3)


def search(db: str, rec: Path, study: str, **kw) -> None:
    run(RunOptions(**({"replay": rec, "db": db, "study": study, "batch": 4, "seed": 0, "cases": CASES,
                       "families": ["flash_mma"]} | kw)), NullReporter())


def trials(db: str, study: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=study, storage=db).get_trials(deepcopy=False)


def ranked_keys(ts: list[optuna.trial.FrozenTrial]) -> list[tuple]:
    """The distinct candidates of completed, shippable trials, best first."""
    out: list[tuple] = []
    for t in sorted((t for t in ts if fitness(t) is not None and shippable(t)), key=lambda t: (-fitness(t), t.number)):
        key = tuple(sorted(t.params.items()))
        if key not in out:
            out.append(key)
    return out


def test_the_first_trials_are_the_sources_best_and_keep_their_values(recording: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    search(db, recording, "a", trials=16)
    search(db, recording, "b", trials=8, start_from=["a"], start_top=3)
    src, new = trials(db, "a"), trials(db, "b")
    imported = [t for t in new if IMPORTED_FROM in t.user_attrs]
    top = [t for t in imported if "bucket" not in t.user_attrs[IMPORTED_FROM]]
    leaders = [t for t in imported if "bucket" in t.user_attrs[IMPORTED_FROM]]
    assert [t.number for t in imported] == list(range(len(imported))) and [t.number for t in top] == [0, 1, 2]
    assert [tuple(sorted(t.params.items())) for t in top] == ranked_keys(src)[:3]
    for bucket, tag in (("d64-full", "F1-fp16"), ("d128-full", "F6-fp16")):   # one FAST case each here
        timed = [t for t in src if fitness(t) is not None and shippable(t) and tag in t.user_attrs.get("speedups", {})]
        best = max(timed, key=lambda t: (t.user_attrs["speedups"][tag], -t.number))
        mine = [t for t in leaders if t.user_attrs[IMPORTED_FROM]["bucket"] == bucket]
        assert best.params in [t.params for t in top + mine]            # the bucket's leader came in
        assert len(mine) <= 1 and all(t.params == best.params for t in mine)
    by_number = {t.number: t for t in src}
    for t in imported:
        origin = by_number[t.user_attrs[IMPORTED_FROM]["trial"]]
        assert t.user_attrs[IMPORTED_FROM]["study"] == "a" and t.params == origin.params
        assert t.state == TrialState.COMPLETE and t.values == origin.values  # the same recording answers
    assert optuna.load_study(study_name="b", storage=db).user_attrs[STARTED_FROM] == {
        "sources": {"a": 3}, "top": 3, "bucket_leaders": len(leaders)}
    # the search went on past the imports, and an import got no lineage edge of its own in b
    assert leaders and len(new) == 8 and any(IMPORTED_FROM not in t.user_attrs for t in new)
    imported_ids = {t.user_attrs["candidate"] for t in imported}
    store = open_store(db)
    b_runs = {r.id for r in store.runs("b")}
    assert b_runs and not [e for e in store.edges("b") if e.child_id in imported_ids and e.run_id in b_runs]

def test_an_import_that_renders_differently_now_gets_an_import_edge(recording: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    search(db, recording, "a", trials=8)
    real = loop.render

    def changed(cand, fam, kernels=None):  # today's template: one more line, so every candidate gets a new id
        r = real(cand, fam, kernels)
        return dataclasses.replace(r, source=r.source + "// changed\n", source_hash="0" + r.source_hash[1:])

    monkeypatch.setattr(loop, "render", changed)
    search(db, recording, "b", trials=4, start_from=["a"], start_top=2)
    src = {t.number: t for t in trials(db, "a")}
    imported = [t for t in trials(db, "b") if IMPORTED_FROM in t.user_attrs]
    store = open_store(db)
    b_runs = {r.id for r in store.runs("b")}
    for t in imported:
        was = src[t.user_attrs[IMPORTED_FROM]["trial"]].user_attrs["candidate"]
        assert t.user_attrs[IMPORTED_FROM]["candidate"] == was != t.user_attrs["candidate"]
        edges = [e for e in store.parents(t.user_attrs["candidate"]) if e.run_id in b_runs]
        assert [(e.parent_id, e.kind, e.mutation) for e in edges] == [(was, "import", {})]


def test_continuing_imports_nothing_more_and_other_sources_are_refused(recording: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    search(db, recording, "a", trials=8)
    search(db, recording, "c", trials=4)
    search(db, recording, "b", trials=6, start_from=["a"], start_top=2)
    search(db, recording, "b", trials=10, start_from=["a"], start_top=2)
    assert sum(IMPORTED_FROM in t.user_attrs and "bucket" not in t.user_attrs[IMPORTED_FROM]
               for t in trials(db, "b")) == 2
    assert len(trials(db, "b")) == 10
    with pytest.raises(EvoError, match="started from a; leave --start-from out"):
        search(db, recording, "b", trials=12, start_from=["c"])


def test_refusals_name_the_reason(recording: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    search(db, recording, "a", trials=4)
    search(db, recording, "b", trials=2)
    with pytest.raises(EvoError, match="no study named 'nope'"):
        search(db, recording, "n", trials=4, start_from=["nope"])
    with pytest.raises(EvoError, match="cannot start from itself"):
        search(db, recording, "c", trials=4, start_from=["c"])
    with pytest.raises(EvoError, match="already has trials"):
        search(db, recording, "a", trials=6, start_from=["b"])
    assert len(trials(db, "a")) == 4  # nothing was enqueued by the refused runs
    assert {s.study_name for s in optuna.get_all_study_summaries(db)} == {"a", "b"}  # nor a study created


def test_a_candidate_todays_manifest_rejects_is_skipped_not_imported() -> None:
    fam = load_family("flash_mma")
    dists = distributions([fam])
    good = {"family": "flash_mma"} | {f"flash_mma.{n}": p.default for n, p in fam.params.items()}
    gone = dict(good) | {"flash_mma.BLOCK_N": 48}  # a value that has left the domain
    wider = dists | {"flash_mma.BLOCK_N": CategoricalDistribution(list(fam.params["BLOCK_N"].values) + [48])}
    mk = optuna.trial.create_trial
    ts = [mk(params=gone, distributions=wider, values=[2.0]), mk(params=good, distributions=dists, values=[1.5]),
          mk(params=good, distributions=dists, values=[1.4])]
    for i, t in enumerate(ts):
        t.number = i
    got = best_trials(ts, [fam])
    assert [(t.number, bool(p)) for t, p in got] == [(0, False), (1, True)]  # rejected, then one per candidate
    assert from_trial_params(got[1][1]) == ("flash_mma", {n: p.default for n, p in fam.params.items()})

"""``evo run --start-from``: a new study's first trials are the best of earlier studies, or
stored candidates named by id."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from evo.errors import EvoError
from evo.family.manifest import load_family
from evo.family.render import render
from evo.family.space import make_candidate
from evo.results import BuildResult, Status
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


def search(db: str, rec: Path, study: str, note: Callable[[str], None] | None = None, **kw) -> None:
    run(RunOptions(**({"replay": rec, "db": db, "study": study, "batch": 4, "seed": 0, "cases": CASES,
                       "families": ["flash_mma"]} | kw)), NullReporter(), note)


def stored(db: str, cid: str, family: str = "flash_mma", **params) -> str:
    """Store a built candidate under the made-up id ``cid``, as a run outside any study would."""
    r = render(make_candidate(family, params))
    open_store(db).record_build(r, BuildResult(cid, r.source_hash, "sm_90a", ("-O3",), Status.BUILT))
    return cid


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


def test_an_id_prefix_enqueues_that_stored_candidates_params(recording: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    cid = stored(db, "ee" * 32, BLOCK_N=32, STAGES=3)  # built and measured outside any study
    notes: list[str] = []
    search(db, recording, "b", notes.append, trials=3, start_from=[cid[:10].upper()])
    new = trials(db, "b")
    assert [t.number for t in new if IMPORTED_FROM in t.user_attrs] == [0]
    assert new[0].user_attrs[IMPORTED_FROM] == {"candidate": cid}
    assert from_trial_params(new[0].params) == ("flash_mma",
                                                make_candidate("flash_mma", {"BLOCK_N": 32, "STAGES": 3}).p)
    assert optuna.load_study(study_name="b", storage=db).user_attrs[STARTED_FROM] == {
        "sources": {f"candidate {cid[:12]}": 1}, "top": 8, "bucket_leaders": 0}
    assert f"study b: enqueued 1 from candidate {cid[:12]}" in notes
    edges = open_store(db).parents(new[0].user_attrs["candidate"])  # replayed under another id: an import edge
    assert [(e.parent_id, e.kind) for e in edges] == [(cid, "import")]
    search(db, recording, "b", trials=4, start_from=[cid])  # the whole id names the same source: continued
    assert len(trials(db, "b")) == 4


def test_a_study_and_a_candidate_id_mix_each_counted_as_a_source(recording: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    search(db, recording, "a", trials=16)
    src = trials(db, "a")
    best = dict(ranked_keys(src)[0])
    cid = stored(db, "ef" * 32, **from_trial_params(best)[1])  # a's best, stored under an id of its own
    notes: list[str] = []
    search(db, recording, "b", notes.append, trials=6, start_from=[cid[:8], "a"], start_top=2)
    top = [t for t in trials(db, "b") if IMPORTED_FROM in t.user_attrs and "bucket" not in t.user_attrs[IMPORTED_FROM]]
    assert [t.user_attrs[IMPORTED_FROM].get("study") for t in top] == [None, "a", "a"]
    assert [tuple(sorted(t.params.items())) for t in top] == ranked_keys(src)[:3]  # a's best came first, by id
    assert optuna.load_study(study_name="b", storage=db).user_attrs[STARTED_FROM]["sources"] == {
        f"candidate {cid[:12]}": 1, "a": 2}
    assert notes[-1].startswith(f"study b: enqueued 1 from candidate {cid[:12]}, 2 from a")
    assert notes[-1].endswith("(skipped 1 already imported)")


def test_an_unknown_id_or_an_ambiguous_prefix_is_one_line_and_a_study_name_comes_first(
        recording: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    search(db, recording, "a", trials=4)
    stored(db, "abcdef12" + "0" * 56)
    stored(db, "abcdef12" + "1" * 56, STAGES=3)
    for item, message in (("deadbeef00", "'deadbeef00' names no study, and no candidate with id 'deadbeef00'"),
                          ("abcdef12", "'abcdef12' names no study, and candidate id prefix 'abcdef12' is ambiguous"),
                          ("abcdef1", "no study named 'abcdef1' in this database"),  # 7 hex digits: too short
                          ("abcdef12000", "names candidate abcdef120000 twice")):
        with pytest.raises(EvoError, match=message) as got:
            search(db, recording, "n", trials=2, start_from=["a", item, "abcdef120000"])
        assert "\n" not in str(got.value)
    assert {s.study_name for s in optuna.get_all_study_summaries(db)} == {"a"}  # nothing was created
    search(db, recording, "abcdef12", trials=2)
    search(db, recording, "n", trials=2, start_from=["abcdef12"])  # the study, not the ambiguous prefix
    origins = [t.user_attrs[IMPORTED_FROM] for t in trials(db, "n") if IMPORTED_FROM in t.user_attrs]
    assert origins and all(o["study"] == "abcdef12" for o in origins)


def test_a_candidate_of_a_family_not_searched_or_outside_the_manifest_is_skipped_and_counted(
        recording: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    scalar = stored(db, "cd" * 32, "flash_scalar")
    outside = stored(db, "ce" * 32, BLOCK_N=128)
    notes: list[str] = []
    search(db, recording, "p", notes.append, trials=2, pins=["flash_mma.BLOCK_N=64"], start_from=[scalar, outside])
    assert not [t for t in trials(db, "p") if IMPORTED_FROM in t.user_attrs]
    assert notes[-1] == ("study p: enqueued 0 from candidate cdcdcdcdcdcd, 0 from candidate cececececece (skipped 1 "
                         "that today's manifests reject and 1 of a family this study does not search)")

"""The lineage graph: scores, effects, and the tree / DOT / JSON renderings."""

from __future__ import annotations

import json

import pytest
from rich.console import Console
from store_fixture import CHILD, FIXTURES, PARENT, built, evaluation, populate, tiny

from evo.analysis.lineage import build_lineage
from evo.results import Status
from evo.store import Store, open_store

OTHER = "ac" + "0" * 62  # a sibling of CHILD (ROWS 64->128, 8 us) that also leads to CHILD ("nearest")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """Read-only for every test here, so built once."""
    path = tmp_path_factory.mktemp("db") / "evo.sqlite"
    with pytest.MonkeyPatch.context() as mp, open_store(f"sqlite:///{path}") as s:
        mp.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))
        populate(s)
        item = tiny(ROWS=128)
        s.record_build(item, built(item, OTHER))
        s.record_evaluation(evaluation(OTHER, 8.0))
        s.add_edge(PARENT, OTHER, {"ROWS": (64, 128)})
        s.add_edge(OTHER, CHILD, {"ROWS": (128, 32)}, "nearest")
        yield s


def test_scores_are_speedups_over_the_baseline(store: Store) -> None:
    lin = build_lineage(store)
    assert {k: round(n.score, 6) for k, n in lin.nodes.items()} == {PARENT: 2.0, CHILD: 2.5, OTHER: 1.25}


def test_effects_are_child_over_parent(store: Store) -> None:
    effects = {(link.parent, link.child): round(link.effect, 6) for link in build_lineage(store).links}
    assert effects == {(PARENT, CHILD): 1.25, (PARENT, OTHER): 0.625, (OTHER, CHILD): 2.0}


def test_unknown_baseline_leaves_scores_empty(store: Store) -> None:
    lin = build_lineage(store, baseline="sdpa_cudnn")
    assert all(n.score is None for n in lin.nodes.values()) and all(x.effect is None for x in lin.links)


def test_study_selects_its_candidates_and_their_parents(store: Store) -> None:
    lin = build_lineage(store, study="s1")  # OTHER is outside s1 but is a parent of CHILD
    assert list(lin.nodes) == [PARENT, CHILD, OTHER] and lin.roots() == [PARENT, OTHER]
    assert build_lineage(store, study="nope").nodes == {}


def test_tree_draws_a_node_with_two_parents_once(store: Store) -> None:
    console = Console(width=200, record=True)
    console.print(build_lineage(store).tree())
    text = console.export_text()
    assert text.count("tiny(ROWS=32,") == 1 and "(shown above)" in text and "effect x1.250" in text


def test_dot_has_every_node_and_edge(store: Store) -> None:
    dot = build_lineage(store).dot()
    assert dot.startswith("digraph lineage {") and dot.count(" -> ") == 3 and dot.count("[label=") == 6


def test_json_is_plain_data(store: Store) -> None:
    data = json.loads(json.dumps(build_lineage(store).document()))
    assert {n["status"] for n in data["nodes"]} == {Status.FAST.value}
    assert {tuple(e["mutation"]["ROWS"]) for e in data["edges"]} == {(64, 32), (64, 128), (128, 32)}

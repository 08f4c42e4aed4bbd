"""The lineage layout of the report: a tidy tree over primary parents, safe on any edge set."""

from __future__ import annotations

from evo.analysis.lineage import Lineage, Link, Node
from evo.report.graph import layout, primary_parents
from evo.results import Status


def lineage(ids: list[str], edges: list[tuple[str, str, str]]) -> Lineage:
    nodes = {i: Node(i, f"fam(X={i})", "fam", Status.FAST, "", 1.0, "gpu") for i in ids}
    return Lineage(None, "sdpa_default", nodes, [Link(p, c, k, {"X": (p, c)}, None) for p, c, k in edges])


def test_a_mutation_is_preferred_over_nearest_as_the_primary_parent() -> None:
    links = lineage(["a", "b", "c"], [("a", "c", "nearest"), ("b", "c", "mutation")]).links
    assert primary_parents(["a", "b", "c"], links) == {"c": "b"}


def test_a_parent_created_after_its_child_never_becomes_primary() -> None:
    # two studies each picked the other's candidate as nearest: a cycle in the edges
    lin = lineage(["a", "b"], [("a", "b", "nearest"), ("b", "a", "nearest")])
    pos = layout(lin)
    assert pos.primary == {"b": "a"}
    assert (pos.x["a"], pos.x["b"]) == (0.0, 1.0)


def test_every_subtree_has_its_own_rows_and_parents_sit_between_their_children() -> None:
    #   r -> a -> (a1, a2);  r -> b;  s (second root) ;  a2 is also a crossover child of b
    lin = lineage(["r", "a", "b", "a1", "a2", "s"],
                  [("r", "a", "mutation"), ("r", "b", "mutation"), ("a", "a1", "mutation"),
                   ("a", "a2", "crossover"), ("b", "a2", "crossover")])
    pos = layout(lin)
    assert pos.x == {"r": 0.0, "a": 1.0, "b": 1.0, "a1": 2.0, "a2": 2.0, "s": 0.0}
    leaves = ["a1", "a2", "b", "s"]
    assert [pos.y[n] for n in leaves] == [0.0, 1.0, 2.0, 3.0] and pos.rows == 4
    assert pos.y["a"] == 0.5 and pos.y["r"] == (pos.y["a"] + pos.y["b"]) / 2
    assert len({(pos.x[n], pos.y[n]) for n in lin.nodes}) == len(lin.nodes)  # no two nodes on one spot


def test_a_deep_chain_is_laid_out_without_recursion() -> None:
    ids = [f"n{i}" for i in range(5000)]
    pos = layout(lineage(ids, [(a, b, "mutation") for a, b in zip(ids, ids[1:], strict=False)]))
    assert pos.x["n4999"] == 4999.0 and pos.rows == 1

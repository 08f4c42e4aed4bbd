"""The lineage graph of a study: candidates (status, score) joined by the moves that made them.

Nodes are the study's candidates plus any parent they came from; a node's score is its
geometric-mean speedup over the baseline on its stored timings, an edge's effect is child
score / parent score over the cases both were timed on, on the same device (docs/design.md,
Lineage). The graph renders as a rich Tree (``evo lineage``), Graphviz DOT, or a JSON document.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rich.markup import escape
from rich.tree import Tree

from evo.analysis.jsondoc import clean
from evo.errors import EvoError
from evo.results import Shape, Status
from evo.scoring import edge_effect, score
from evo.store import Store, short_id
from evo.vocab import DEFAULT_BASELINE, value_text

STATUS_STYLE = {
    Status.FAST: "bold green", Status.GREEN: "green", Status.PRUNED: "dim green", Status.BUILT: "cyan", Status.RED: "red",
    Status.CRASHED: "magenta", Status.TIMEOUT: "magenta", Status.COMPILE_FAILED: "dim red",
    Status.RESOURCE_REJECTED: "dim yellow", Status.INVALID: "dim",
}


@dataclass(frozen=True)
class Node:
    """One candidate of the graph: its status and its score against the baseline (None: not timed)."""

    id: str
    label: str
    family: str
    status: Status
    reason: str
    score: float | None
    device: str | None


@dataclass(frozen=True)
class Link:
    """One edge: the move (``kind``, ``mutation`` old -> new per parameter) that made ``child``
    from ``parent``, and its effect (child score / parent score; None unless both were timed on
    one device)."""

    parent: str
    child: str
    kind: str
    mutation: dict[str, tuple[Any, Any]]
    effect: float | None


@dataclass(frozen=True)
class Lineage:
    """A study's search tree (:func:`build_lineage`): nodes by id in creation order, and links."""

    study: str | None
    baseline: str
    nodes: dict[str, Node]  # in creation order
    links: list[Link]

    def roots(self) -> list[str]:
        children = {link.child for link in self.links if link.parent in self.nodes}
        return [n for n in self.nodes if n not in children]

    def tree(self) -> Tree:
        """A rich Tree: roots at the top, each child under its parent with the move and its
        effect. A node with several parents is drawn in full once and referenced elsewhere."""
        title = f"lineage of {self.study}" if self.study else "lineage (all candidates)"
        tree = Tree(f"[bold]{escape(title)}[/] [dim]({len(self.nodes)} candidates, score vs {self.baseline})[/]")
        below: dict[str, list[Link]] = {}
        for link in self.links:
            below.setdefault(link.parent, []).append(link)
        drawn: set[str] = set()

        def grow(branch: Tree, cid: str) -> None:
            drawn.add(cid)
            for link in below.get(cid, []):
                child = self.nodes.get(link.child)
                if child is None:
                    continue
                move = f"[italic]{link.kind}: {escape(mutation_text(link.mutation))}[/]"
                effect = f" effect [bold]{_ratio(link.effect)}[/]" if link.effect is not None else ""
                if link.child in drawn:
                    branch.add(f"{move}{effect} -> [dim]{short_id(link.child)} (shown above)[/]")
                else:
                    grow(branch.add(f"{move}{effect} -> {_node_text(child)}"), link.child)

        for root in self.roots():
            if root not in drawn:
                grow(tree.add(_node_text(self.nodes[root])), root)
        return tree

    def dot(self) -> str:
        """Graphviz DOT: one box per candidate, edges labelled with the move and its effect."""
        colors = {Status.FAST: "darkgreen", Status.GREEN: "green", Status.RED: "red", Status.BUILT: "blue"}
        lines = ["digraph lineage {", "  rankdir=LR;", '  node [shape=box, fontname="monospace"];']
        for n in self.nodes.values():
            label = "\\n".join(_dot_escape(x) for x in (short_id(n.id), n.label,
                                                          f"{n.status.value} {_ratio(n.score)}".strip()))
            lines.append(f'  "{n.id}" [label="{label}", color="{colors.get(n.status, "gray")}"];')
        for link in self.links:
            label = "\\n".join(_dot_escape(x) for x in (mutation_text(link.mutation), _ratio(link.effect)) if x)
            style = "" if link.kind == "mutation" else ", style=dashed"
            lines.append(f'  "{link.parent}" -> "{link.child}" [label="{label}"{style}];')
        lines.append("}")
        return "\n".join(lines) + "\n"

    def document(self) -> dict[str, Any]:
        """Plain JSON-ready data: ``{schema, study, baseline, nodes: [...], edges: [...]}``."""
        return clean({
            "schema": "evo.lineage/1",
            "study": self.study,
            "baseline": self.baseline,
            "nodes": [asdict(n) | {"status": n.status.value} for n in self.nodes.values()],
            "edges": [asdict(link) | {"mutation": {k: list(v) for k, v in link.mutation.items()}}
                      for link in self.links],
        })


def build_lineage(store: Store, study: str | None = None, baseline: str = DEFAULT_BASELINE,
                  cases: Sequence[Shape] | None = None, device: str | None = None) -> Lineage:
    """Read the graph of ``study`` (every candidate when None) from the store and score it."""
    cands = {c.id: c for c in store.find_candidates(study=study)}
    edges = store.edges(study)
    for cid in dict.fromkeys(e.parent_id for e in edges if e.parent_id not in cands):
        cands[cid] = store.get(cid).candidate
    timed = store.latest_timings([c.id for c in cands.values() if c.status is Status.FAST], device)
    nodes = {}
    for c in cands.values():
        dev, timings = timed.get(c.id, (None, []))
        try:
            value = score(timings, baseline, cases) if timings else None
        except EvoError:
            value = None
        nodes[c.id] = Node(c.id, c.label, c.family, c.status, c.reason, value, dev)
    links = []
    for e in edges:
        parent, child = timed.get(e.parent_id), timed.get(e.child_id)
        effect = (edge_effect(parent[1], child[1], baseline, cases)
                  if parent and child and parent[0] == child[0] else None)
        links.append(Link(e.parent_id, e.child_id, e.kind, e.mutation, effect))
    return Lineage(study, baseline, nodes, links)


def mutation_text(mutation: dict[str, tuple[Any, Any]]) -> str:
    return ", ".join(f"{k} {value_text(old)}->{value_text(new)}" for k, (old, new) in mutation.items()) or "(no change)"


def _ratio(x: float | None) -> str:
    return "" if x is None else f"x{x:.3f}"


def _node_text(node: Node) -> str:
    """A node as the tree draws it: id, label, status in its colour, score, why it failed."""
    style = STATUS_STYLE.get(node.status, "")
    extra = f" [bold]{_ratio(node.score)}[/]" if node.score is not None else ""
    why = f" [dim]{escape(node.reason[:80])}[/]" if node.reason and node.status.failed else ""
    return f"[dim]{short_id(node.id)}[/] {escape(node.label)} [{style}]{node.status.value}[/]{extra}{why}"


def _dot_escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')

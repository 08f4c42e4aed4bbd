"""Where each lineage node sits in the report's graph: a tidy tree, roots on the left.

Every node keeps one *primary* parent (the first edge that reached it from a node created
before it: mutation before crossover before nearest), so the primary edges form a forest
and no cycle can arise even when a database holds edges both ways between two candidates
(two studies may pick each other's candidates as nearest). The forest is laid out as a
dendrogram: x is the depth along primary parents, leaves take consecutive rows in creation
order, and a parent sits midway between its first and last child, so every subtree occupies
a band of rows of its own. Other edges (a crossover's second parent, a later nearest) are
drawn too, without moving anyone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evo.analysis.lineage import Lineage, Link

KIND_RANK = {"mutation": 0, "crossover": 1, "nearest": 2, "import": 3}


@dataclass(frozen=True)
class Layout:
    """Positions by node id, the primary parent of each node (absent for roots), and the
    number of rows the tree needs (for the figure's height)."""

    x: dict[str, float]
    y: dict[str, float]
    primary: dict[str, str]
    rows: int


def primary_parents(order: Sequence[str], links: Sequence[Link]) -> dict[str, str]:
    """Child -> the parent it hangs from in the tree (only parents created before it)."""
    index = {n: i for i, n in enumerate(order)}
    best: dict[str, tuple[int, int, str]] = {}
    for i, link in enumerate(links):
        if link.parent not in index or link.child not in index or index[link.parent] >= index[link.child]:
            continue
        key = (KIND_RANK.get(link.kind, len(KIND_RANK)), i, link.parent)
        if link.child not in best or key < best[link.child]:
            best[link.child] = key
    return {child: key[2] for child, key in best.items()}


def layout(lin: Lineage) -> Layout:
    """The tidy-tree positions of every node of ``lin`` (nodes in creation order)."""
    order = list(lin.nodes)
    primary = primary_parents(order, lin.links)
    children: dict[str, list[str]] = {n: [] for n in order}
    for n in order:  # creation order, so siblings are laid out oldest first
        if n in primary:
            children[primary[n]].append(n)
    x: dict[str, float] = {}
    y: dict[str, float] = {}
    row = 0
    for root in (n for n in order if n not in primary):
        # iterative post-order: a node is placed after all its children are
        stack: list[tuple[str, int, bool]] = [(root, 0, False)]
        while stack:
            node, depth, expanded = stack.pop()
            kids = children[node]
            if not kids:
                x[node], y[node] = float(depth), float(row)
                row += 1
            elif expanded:
                x[node], y[node] = float(depth), (y[kids[0]] + y[kids[-1]]) / 2
            else:
                stack.append((node, depth, True))
                stack.extend((k, depth + 1, False) for k in reversed(kids))
    return Layout(x, y, primary, row)

"""The package's layers (docs/design.md, "Layers"): every import of an evo module, at module level,
inside a function or under TYPE_CHECKING, points to its own package or to a lower layer, and no
set of modules imports itself round a cycle."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "evo"

LAYERS: tuple[tuple[str, ...], ...] = (  # lowest first; a module may import its own layer's package or below
    ("evo.errors", "evo.version", "evo.vocab", "evo.paths", "evo.results", "evo.scoring"),
    ("evo.family",),
    ("evo.toolchain",),
    ("evo.store",),
    ("evo.gpu",),
    ("evo.search",),
    ("evo.analysis", "evo.samplerbench"),
    ("evo.products", "evo.report"),
    ("evo",),  # the package itself and its API, evo.api
    ("evo.cli",),
    ("evo.__main__",),
)
CORE = LAYERS[0]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "_resources" not in p.parts}


def imported(path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """Every evo module ``path`` imports, wherever the import statement sits, with its line."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from evo.gpu import worker`` imports the module evo.gpu.worker; ``from evo.gpu.worker
            # import Worker`` imports evo.gpu.worker
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                     for a in node.names]
        else:
            continue
        for name in names:
            if name == "evo" or name.startswith("evo."):
                yield name, node.lineno


def unit(name: str) -> str:
    """The package a layer is made of: a core module stands for itself, else its subpackage."""
    if name in ("evo", "evo.api"):
        return "evo"
    if name in CORE or name == "evo.__main__":
        return name
    return ".".join(name.split(".")[:2])


def layer(name: str) -> int:
    u = unit(name)
    for i, members in enumerate(LAYERS):
        if u in members:
            return i
    raise AssertionError(f"{name} belongs to no layer: add its package to LAYERS and to docs/design.md")


def graph() -> dict[str, dict[str, int]]:
    mods = modules()
    known = set(mods)
    return {m: {t: line for t, line in imported(p, known) if t != m} for m, p in mods.items()}


def test_every_module_has_a_layer() -> None:
    for name in modules():
        layer(name)


def test_the_top_of_the_package_holds_at_most_ten_modules() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 10, top


def test_imports_point_only_down_or_within_their_package() -> None:
    upward = []
    for src, targets in graph().items():
        for dst, line in targets.items():
            same_package = unit(src) == unit(dst) or (unit(src) in CORE and unit(dst) in CORE)
            if not same_package and layer(dst) >= layer(src):
                upward.append(f"{src}:{line} imports {dst} (layer {layer(dst)} from layer {layer(src)})")
    assert not upward, "\n".join(upward)


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_round_a_cycle() -> None:
    assert cycles(graph()) == []


@pytest.mark.parametrize(("edges", "expected"), [
    ({"a": {"b": 1}, "b": {"a": 2}}, [["a", "b"]]),
    ({"a": {"b": 1}, "b": {"c": 1}, "c": {}}, []),
    ({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}, [["a", "b", "c"]]),
])
def test_the_cycle_finder_finds_cycles(edges: dict[str, dict[str, int]], expected: list[list[str]]) -> None:
    assert cycles(edges) == expected


def test_a_function_level_import_counts(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from evo.gpu import worker\n\nif False:\n    import evo.store\n")
    assert sorted(imported(src, {"evo.gpu.worker"})) == [("evo.gpu.worker", 2), ("evo.store", 5)]

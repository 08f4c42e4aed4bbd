"""Complexity limits of the package (issue 38): no function or method of evo/ above cyclomatic
complexity 25 (radon's measure, as ``radon cc`` reports it) and no class above 300 lines. A
function past the limit is split along its seams (docs/design.md, "Layers", says where the
pieces go); the messages name every offender with its place."""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class, Function

PACKAGE = Path(__file__).resolve().parent.parent / "evo"
MAX_COMPLEXITY = 25
MAX_CLASS_LINES = 300


def sources() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if "_resources" not in p.parts]


def functions(source: str) -> list[Function]:
    """Every function and method radon finds in ``source``: closures and the methods of nested
    classes included, each once."""
    found: dict[tuple[int, int], Function] = {}
    pending: list[Function | Class] = list(cc_visit(source))
    while pending:
        block = pending.pop()
        if isinstance(block, Class):
            pending += block.methods + block.inner_classes
        elif (block.lineno, block.col_offset) not in found:
            found[(block.lineno, block.col_offset)] = block
            pending += block.closures
    return list(found.values())


def long_classes(source: str) -> Iterator[tuple[ast.ClassDef, int]]:
    """Each class of ``source`` longer than the limit, with its length (``class`` line to last line)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_CLASS_LINES:
                yield node, lines


def test_no_function_is_above_the_complexity_limit() -> None:
    over = [f"{p.relative_to(PACKAGE.parent)}:{f.lineno} {f.fullname} ({f.complexity})"
            for p in sources() for f in functions(p.read_text()) if f.complexity > MAX_COMPLEXITY]
    assert not over, f"cyclomatic complexity above {MAX_COMPLEXITY}: " + "; ".join(sorted(over))


def test_no_class_is_longer_than_the_limit() -> None:
    over = [f"{p.relative_to(PACKAGE.parent)}:{n.lineno} {n.name} ({lines} lines)"
            for p in sources() for n, lines in long_classes(p.read_text())]
    assert not over, f"classes above {MAX_CLASS_LINES} lines: " + "; ".join(sorted(over))


def test_the_limits_see_what_they_limit() -> None:
    """Methods, closures and the methods of nested classes are measured, and a class's length
    runs from its ``class`` line to its last line, so a limit cannot pass by not looking."""
    branchy = "    if x:\n        x = 1\n" * MAX_COMPLEXITY
    code = (f"class A:\n    def m(self, x):\n        def inner(x):\n{textwrap.indent(branchy, '        ')}"
            f"        return inner(x)\n    class B:\n        def q(self, x):\n{textwrap.indent(branchy, '        ')}")
    assert {f.fullname: f.complexity for f in functions(code)} == {
        "A.m": 1, "inner": MAX_COMPLEXITY + 1, "B.q": MAX_COMPLEXITY + 1}
    long = "class C:\n" + "    x = 1\n" * MAX_CLASS_LINES
    assert [(n.name, lines) for n, lines in long_classes(long)] == [("C", MAX_CLASS_LINES + 1)]
    assert not list(long_classes("class D:\n" + "    x = 1\n" * (MAX_CLASS_LINES - 1)))

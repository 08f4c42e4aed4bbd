"""A tiny, safe evaluator for the arithmetic/boolean expressions written in manifests.

Manifests state constraints (``BLOCK_M % (16 * NUM_WARPS) == 0``) and launch formulas
(``smem_bytes = 2 * (BLOCK_M + 2 * STAGES * BLOCK_N) * D``) as Python expression strings.
Only literals, names, arithmetic, comparisons, boolean operators, conditional expressions and
``min``/``max`` are allowed, so a manifest cannot run arbitrary code.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping
from typing import Any

from evo.errors import EvoError

_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Div, ast.Pow)
_CMPOPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn)
_FUNCS = {"min": min, "max": max}


def evaluate(expression: str, names: Mapping[str, Any]) -> Any:
    """Evaluate ``expression`` with ``names`` bound; raise EvoError on anything unsupported.

    The expression is parsed and checked once (every node must be one ``_eval`` supports), then
    runs as compiled Python with no builtins but ``min``/``max``: enumerating a large space
    evaluates the same few constraints hundreds of thousands of times.
    """
    code, used = _compiled(expression)
    missing = used - names.keys() - _FUNCS.keys()
    if missing:
        raise EvoError(f"manifest expression {expression!r} uses unknown name {sorted(missing)[0]!r}")
    try:
        return eval(code, {"__builtins__": {}}, {**_FUNCS, **names})  # noqa: S307 - checked tree
    except (TypeError, ValueError, ZeroDivisionError, ArithmeticError) as exc:
        raise EvoError(f"manifest expression {expression!r}: {exc}") from None


def names_in(expression: str) -> frozenset[str]:
    """The names ``expression`` reads (min/max included when called); EvoError if it is not a
    valid manifest expression."""
    return _compiled(expression)[1]


@functools.cache
def _compiled(expression: str) -> tuple[Any, frozenset[str]]:
    """The checked, compiled expression and the names it reads (cached per expression)."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise EvoError(f"bad manifest expression {expression!r}: {exc.msg}") from None
    used = frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name))
    _check(tree, expression)
    return compile(tree, "<manifest>", "eval"), used


_NODES = (ast.Expression, ast.Constant, ast.Name, ast.Load, ast.BinOp, ast.UnaryOp, ast.Not, ast.USub,
          ast.BoolOp, ast.And, ast.Or, ast.Compare, ast.IfExp, ast.Tuple, ast.List, ast.Call,
          *_BINOPS, *_CMPOPS)


def _check(node: ast.AST, src: str) -> None:
    """Raise EvoError unless every node of the tree is a literal, a name, arithmetic, a
    comparison, a boolean operator, a conditional expression, a tuple/list or min/max."""
    for n in ast.walk(node):
        ok = isinstance(n, _NODES)
        if isinstance(n, ast.Constant):
            ok = isinstance(n.value, (int, float, str, bool))
        elif isinstance(n, ast.Call):
            ok = isinstance(n.func, ast.Name) and n.func.id in _FUNCS and not n.keywords
        if not ok:
            raise EvoError(f"manifest expression {src!r}: unsupported syntax {ast.dump(n)[:60]}")

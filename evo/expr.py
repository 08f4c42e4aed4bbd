"""A tiny, safe evaluator for the arithmetic/boolean expressions written in manifests.

Manifests state constraints (``BLOCK_M % (16 * NUM_WARPS) == 0``) and launch formulas
(``smem_bytes = 2 * (BLOCK_M + 2 * STAGES * BLOCK_N) * D``) as Python expression strings.
Only literals, names, arithmetic, comparisons, boolean operators, conditional expressions and
``min``/``max`` are allowed, so a manifest cannot run arbitrary code.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping
from typing import Any

from evo.errors import EvoError

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_CMPOPS = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_FUNCS = {"min": min, "max": max}


def evaluate(expression: str, names: Mapping[str, Any]) -> Any:
    """Evaluate ``expression`` with ``names`` bound; raise EvoError on anything unsupported."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise EvoError(f"bad manifest expression {expression!r}: {exc.msg}") from None
    return _eval(tree.body, names, expression)


def _eval(node: ast.AST, names: Mapping[str, Any], src: str) -> Any:
    match node:
        case ast.Constant(value=v) if isinstance(v, (int, float, str, bool)):
            return v
        case ast.Name(id=n):
            if n not in names:
                raise EvoError(f"manifest expression {src!r} uses unknown name {n!r}")
            return names[n]
        case ast.BinOp(left=l, op=op, right=r) if type(op) in _BINOPS:
            return _BINOPS[type(op)](_eval(l, names, src), _eval(r, names, src))
        case ast.UnaryOp(op=ast.Not(), operand=o):
            return not _eval(o, names, src)
        case ast.UnaryOp(op=ast.USub(), operand=o):
            return -_eval(o, names, src)
        case ast.BoolOp(op=ast.And(), values=vs):
            return all(_eval(v, names, src) for v in vs)
        case ast.BoolOp(op=ast.Or(), values=vs):
            return any(_eval(v, names, src) for v in vs)
        case ast.Compare(left=l, ops=ops, comparators=cs):
            left = _eval(l, names, src)
            for op, c in zip(ops, cs):
                if type(op) not in _CMPOPS:
                    break
                right = _eval(c, names, src)
                if not _CMPOPS[type(op)](left, right):
                    return False
                left = right
            else:
                return True
        case ast.IfExp(test=t, body=b, orelse=e):
            return _eval(b, names, src) if _eval(t, names, src) else _eval(e, names, src)
        case ast.Tuple(elts=es) | ast.List(elts=es):
            return tuple(_eval(e, names, src) for e in es)
        case ast.Call(func=ast.Name(id=f), args=args, keywords=[]) if f in _FUNCS:
            return _FUNCS[f](*(_eval(a, names, src) for a in args))
    raise EvoError(f"manifest expression {src!r}: unsupported syntax {ast.dump(node)[:60]}")

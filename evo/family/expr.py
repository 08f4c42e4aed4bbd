"""A tiny, safe evaluator for the arithmetic/boolean expressions written in manifests.

Manifests state constraints (``BLOCK_M % (16 * NUM_WARPS) == 0``) and launch formulas
(``smem_bytes = 2 * (BLOCK_M + 2 * STAGES * BLOCK_N) * D``) as Python expression strings.
Only literals, names, arithmetic, comparisons, boolean operators, conditional expressions and
``min``/``max`` are allowed, so a manifest cannot run arbitrary code. Nor can it run for ever or
fill the memory: a power or product whose integer result would exceed :data:`MAX_BITS` bits, a
sequence repeated past :data:`MAX_ITEMS` items, and ``%`` on a string (formatting, whose width
is unbounded) are refused with an EvoError naming the expression before the operation runs
(``9**9**9**9`` would otherwise never return). Shifts are not manifest syntax at all.
"""

from __future__ import annotations

import ast
import functools
import math
from collections.abc import Mapping
from typing import Any

from evo.errors import EvoError

_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Div, ast.Pow)
_CMPOPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn)
_FUNCS = {"min": min, "max": max}
MAX_BITS = 4096     # the largest integer a manifest expression may compute
MAX_ITEMS = 65536   # the longest string, tuple or list it may build by repetition


class _TooLarge(ArithmeticError):
    """An operation of a manifest expression whose result would be too large to compute."""


def _pow(a: Any, b: Any) -> Any:
    """``a ** b``, refused when an integer result would have more than :data:`MAX_BITS` bits."""
    if type(a) in (int, bool) and type(b) in (int, bool) and b > 0 and abs(a) > 1 \
            and b * math.log2(abs(a)) >= MAX_BITS:  # the result has floor(b log2|a|) + 1 bits
        raise _TooLarge(f"the power's result would exceed {MAX_BITS} bits")
    return a ** b


def _mul(a: Any, b: Any) -> Any:
    """``a * b``, refused past :data:`MAX_BITS` bits for integers and :data:`MAX_ITEMS` items for a
    repeated sequence."""
    if type(a) in (int, bool) and type(b) in (int, bool):
        if a.bit_length() + b.bit_length() - 1 > MAX_BITS:  # the product has at least that many bits
            raise _TooLarge(f"the product would exceed {MAX_BITS} bits")
    elif isinstance(a, (str, tuple, list)) or isinstance(b, (str, tuple, list)):
        seq, n = (a, b) if isinstance(a, (str, tuple, list)) else (b, a)
        if isinstance(n, int) and len(seq) * n > MAX_ITEMS:
            raise _TooLarge(f"the repeated sequence would exceed {MAX_ITEMS} items")
    return a * b


def _mod(a: Any, b: Any) -> Any:
    """``a % b`` for numbers; string formatting is refused."""
    if isinstance(a, str):
        raise _TooLarge("% on a string (formatting) is not manifest syntax")
    return a % b


_GUARDS = {ast.Pow: ("__evo_pow__", _pow), ast.Mult: ("__evo_mul__", _mul), ast.Mod: ("__evo_mod__", _mod)}
_GLOBALS = {"__builtins__": {}, **_FUNCS, **{name: f for name, f in _GUARDS.values()}}


class _Guard(ast.NodeTransformer):
    """Rewrites each guarded operator (``a ** b``, ``a * b``, ``a % b``) as a call of its guard."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        guard = _GUARDS.get(type(node.op))
        if guard is None:
            return node
        call = ast.Call(func=ast.Name(id=guard[0], ctx=ast.Load()), args=[node.left, node.right], keywords=[])
        return ast.copy_location(call, node)


def evaluate(expression: str, names: Mapping[str, Any]) -> Any:
    """Evaluate ``expression`` with ``names`` bound; raise EvoError on anything unsupported or
    too large to compute.

    The expression is parsed and checked once (every node must be one :func:`_check` allows),
    its powers, products and remainders routed through their guards, then it runs as compiled
    Python with no builtins but ``min``/``max``, reading ``names`` where they are (no copy per
    call): enumerating a large space evaluates the same few constraints millions of times, and
    the guards' calls cost no more than the copy did.
    """
    code, used = _compiled(expression)
    missing = used - names.keys() - _FUNCS.keys()
    if missing:
        raise EvoError(f"manifest expression {expression!r} uses unknown name {sorted(missing)[0]!r}")
    try:
        return eval(code, _GLOBALS, names)  # noqa: S307 - checked and guarded tree; names shadow min/max
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
    guarded = ast.fix_missing_locations(_Guard().visit(tree))
    return compile(guarded, "<manifest>", "eval"), used


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

"""The CLI is a thin layer over the Python API (docs/design.md, "Python API and CLI"): of evo, every
module of evo/cli imports only ``evo.api``, ``evo.errors``, ``evo.cli`` itself and the two leaf
modules of names (``evo.vocab``, ``evo.version``: they import nothing of evo), wherever the import
sits (module level, inside a function, under TYPE_CHECKING, through importlib), so that everything a
command does is a documented function of evo.api. And help, the version and usage errors never load
evo.api (nor optuna, SQLAlchemy or torch): the CLI starts in a fraction of the API's import time."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parent.parent / "evo" / "cli"
ALLOWED = ("evo.api", "evo.errors", "evo.cli", "evo.vocab", "evo.version")


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` names, a relative one resolved against ``package``."""
    if node.level == 0:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _dynamic(node: ast.Call) -> str | None:
    """The module an ``importlib.import_module("...")`` or ``__import__("...")`` call names."""
    func = node.func
    named = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if named not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def evo_imports(source: str, package: str = "evo.cli") -> Iterator[tuple[str, int]]:
    """Every evo module ``source`` (a module of ``package``) imports, with its line: ``from evo
    import api`` imports evo.api, ``from evo.gpu.worker import Worker`` evo.gpu.worker."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, package)
            names = [f"{module}.{a.name}" if module == "evo" else module for a in node.names]
        elif isinstance(node, ast.Call) and (found := _dynamic(node)) is not None:
            names = [found]
        else:
            continue
        yield from ((name, node.lineno) for name in names if name == "evo" or name.startswith("evo."))


def allowed(name: str) -> bool:
    return any(name == a or name.startswith(a + ".") for a in ALLOWED)


def violations(source: str) -> list[str]:
    return [f"line {line}: {name}" for name, line in evo_imports(source) if not allowed(name)]


def test_the_cli_has_modules_to_check() -> None:
    assert len(list(CLI.rglob("*.py"))) >= 5


def test_every_cli_module_imports_only_the_api_the_errors_and_itself() -> None:
    found = {str(p.relative_to(CLI.parent.parent)): v for p in sorted(CLI.rglob("*.py"))
             if (v := violations(p.read_text()))}
    assert found == {}


@pytest.mark.parametrize(("source", "expected"), [
    ("def f():\n    from evo.gpu import worker\n", ["line 2: evo.gpu"]),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from evo.store import Store\n", ["line 3: evo.store"]),
    ("from evo import api, paths\n", ["line 1: evo.paths"]),
    ("import evo\n", ["line 1: evo"]),
    ("import evo.search.loop as loop\n", ["line 1: evo.search.loop"]),
    ("from .. import paths\n", ["line 1: evo.paths"]),
    ("import importlib\nm = importlib.import_module('evo.report')\n", ["line 2: evo.report"]),
    ("from evo import api\nfrom evo.api import Status\nfrom evo.errors import EvoError\n", []),
    ("from evo.cli.output import console\nfrom .app import cli\nfrom . import output\n", []),
    ("import click\nfrom rich.table import Table\nimport evolution\n", []),
])
def test_the_checker_finds_imports_wherever_they_sit(source: str, expected: list[str]) -> None:
    assert violations(source) == expected


HEAVY = ("optuna", "sqlalchemy", "torch")   # what evo.api imports: loaded, it would show


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["run", "--help"], ["run", "--bogus"],
                                  ["run", "--trials", "0"], ["bench", "--dtype", "fp8"]])
def test_help_version_and_usage_errors_load_no_api(argv: list[str]) -> None:
    """In a fresh interpreter: after the command, none of the modules evo.api imports is loaded."""
    code = f"import sys\nfrom evo.cli import main\nrc = main({argv!r})\nprint(rc, [m for m in {HEAVY!r} if m in sys.modules])\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    rc, ran = out.stdout.strip().splitlines()[-1].split(" ", 1)
    assert ran == "[]", out.stdout + out.stderr
    assert int(rc) in (0, 2)


def test_a_command_that_runs_loads_the_api() -> None:
    """The lazy module is the real one once a command uses it (the help test is not vacuous)."""
    code = ("import sys\nfrom evo.cli import main\nrc = main(['render', 'flash_mma'])\n"
            "import evo.api\nprint(rc, hasattr(evo.api, 'render'), 'sqlalchemy' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stderr.strip().splitlines()[-1] == "0 True True", out.stderr

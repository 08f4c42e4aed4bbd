"""The smoke subset (tests/conftest.py SMOKE) names tests that exist: a renamed test would drop out
of CI's lowest-versions and wheel stages without a word."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import SMOKE

HERE = Path(__file__).parent


def test_every_named_smoke_test_is_defined_in_its_file() -> None:
    missing = []
    for file, names in SMOKE.items():
        tree = ast.parse((HERE / file).read_text())
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
        assert defined, f"{file} defines no tests"
        missing += [f"{file}::{name}" for name in sorted(names or ()) if name not in defined]
    assert missing == []

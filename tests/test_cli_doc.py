"""docs/cli.md is every command's current help (scripts/gen_cli_md.py writes it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gen_cli_md.py"


def test_the_cli_page_is_the_commands_help() -> None:
    spec = importlib.util.spec_from_file_location("gen_cli_md", SCRIPT)
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    page = gen.PAGE.read_text()
    if f"Written with click {gen.click_version()} " not in page:  # e.g. CI's lowest-versions stage
        pytest.skip(f"docs/cli.md was written with another click than {gen.click_version()}, which words help differently")
    assert page == gen.render(), "docs/cli.md is stale: run python scripts/gen_cli_md.py"
    assert "## evo run" in page and "## evo promote" in page and "--no-verify" in page

"""docs/api.md's notebook runs as written, on CPU: a small study, its lineage, a package.

The cells of the page's "A study from a notebook" section are executed in order in one
namespace, as a notebook would, with the first cell (the settings) replaced by the one the page
names: the test-only ``tiny`` family (real nvcc builds, about a second each) and the CPU
stand-in worker ``standins:serve_green`` (made-up GREEN checks and timings). Nothing else is
changed, so the page cannot drift from what the API does.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import optuna
import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
SETTINGS = 'FAMILY, TRIALS, TARGET = "tiny", 8, "standins:serve_green"'
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def notebook_cells() -> list[str]:
    """The ```python blocks of the section "A study from a notebook", in order."""
    text = (REPO / "docs" / "api.md").read_text()
    section = text.split("## A study from a notebook", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_page_names_the_settings_this_test_uses() -> None:
    page = (REPO / "docs" / "api.md").read_text()
    cells = notebook_cells()
    assert SETTINGS in page
    assert len(cells) == 5 and all(name in cells[0] for name in ("FAMILY =", "TRIALS =", "TARGET ="))


def test_the_notebook_runs_a_study_shows_its_lineage_and_promotes(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EVO_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES / "templates"))
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "candidates"))
    monkeypatch.delenv("EVO_DB", raising=False)
    monkeypatch.syspath_prepend(str(FIXTURES / "worker"))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cells = notebook_cells()
    namespace: dict[str, object] = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for cell in ["import evo\n" + SETTINGS + "\n", *cells[1:]]:
            exec(compile(cell, "docs/api.md", "exec"), namespace)  # noqa: S102 - the page's own code
    printed = out.getvalue()
    summary = namespace["summary"]
    assert summary.finished == 8 and not summary.interrupted  # type: ignore[attr-defined]
    assert "8 trials:" in printed and "against sdpa_default" in printed
    graph = namespace["graph"]
    assert graph.links and all(link.child in graph.nodes for link in graph.links)  # type: ignore[attr-defined]
    assert sum(" -> " in line for line in printed.splitlines()) == len(graph.links)  # type: ignore[attr-defined]
    assert "GREEN checks," in printed
    package = tmp_path / "dist" / "attn_demo"
    provenance = json.loads((package / "attn_demo" / "PROVENANCE.json").read_text())
    dispatch = json.loads((package / "attn_demo" / "dispatch.json").read_text())
    assert provenance["verification"] == {"verified": False} and provenance["study"] == "demo"
    shipped = namespace["package"].shipped  # type: ignore[attr-defined]
    assert shipped and {r["candidate"] for r in dispatch["routes"] if r["candidate"]} == set(shipped)
    assert all((package / "attn_demo" / "kernels" / f"{cid}.cubin").is_file() for cid in shipped)

"""docs/api.md's notebook runs as written, on CPU: a small study, its lineage, a package.

The cells of the page's "A study from a notebook" section run with the settings the page names
for a machine without a GPU: the test-only ``tiny`` family (real nvcc builds, about a second each)
and the CPU stand-in worker ``standins:serve_green`` (made-up GREEN checks and timings), whose
folders the page says to name in ``EVO_TEMPLATE_PATH`` and ``PYTHONPATH``. They run both ways the
page describes: in one namespace, as a notebook would, and as the script the page says to make
of them (the cells after the settings under ``if __name__ == "__main__":``), started as ``python
demo.py`` with nothing but that environment. Nothing else is changed, so the page cannot drift
from what the API does.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
SETTINGS = 'FAMILY, TRIALS, TARGET = "tiny", 8, "standins:serve_green"'
ENVIRONMENT = ("EVO_TEMPLATE_PATH=tests/fixtures/templates", "PYTHONPATH=tests/fixtures/worker")
GUARD = 'if __name__ == "__main__":'
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def page() -> str:
    return (REPO / "docs" / "api.md").read_text()


def notebook_cells() -> list[str]:
    """The ```python blocks of the section "A study from a notebook", in order."""
    section = page().split("## A study from a notebook", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def script() -> str:
    """The script the page says to make of the cells: the CPU settings at the top, every other
    cell under the ``__main__`` guard."""
    body = "".join(textwrap.indent(cell, "    ") for cell in notebook_cells()[1:])
    return f"import evo\n\n{SETTINGS}\n\n{GUARD}\n{body}"


def check_printed(printed: str) -> None:
    """What the cells print: the study's trials, its best candidate, one line per lineage link,
    the stored record, the package."""
    assert "8 trials:" in printed and "against sdpa_default" in printed
    assert any(" -> " in line for line in printed.splitlines())
    assert "GREEN checks," in printed and "ships [" in printed


def check_package(folder: Path, shipped: list[str] | None = None) -> None:
    """The package written, unverified, its dispatch table routing to the kernels it ships."""
    package = folder / "dist" / "attn_demo"
    provenance = json.loads((package / "attn_demo" / "PROVENANCE.json").read_text())
    dispatch = json.loads((package / "attn_demo" / "dispatch.json").read_text())
    assert provenance["verification"] == {"verified": False} and provenance["study"] == "demo"
    routed = {r["candidate"] for r in dispatch["routes"] if r["candidate"]}
    assert routed and routed == set(shipped if shipped is not None else routed)
    assert all((package / "attn_demo" / "kernels" / f"{cid}.cubin").is_file() for cid in routed)


def test_the_page_names_the_settings_environment_and_guard_this_test_uses() -> None:
    cells = notebook_cells()
    assert SETTINGS in page() and all(f"`{assignment}`" in page() for assignment in ENVIRONMENT)
    assert f"`{GUARD}`" in page()
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
    check_printed(printed)
    summary = namespace["summary"]
    assert summary.finished == 8 and not summary.interrupted  # type: ignore[attr-defined]
    graph = namespace["graph"]
    assert graph.links and all(link.child in graph.nodes for link in graph.links)  # type: ignore[attr-defined]
    assert sum(" -> " in line for line in printed.splitlines()) == len(graph.links)  # type: ignore[attr-defined]
    check_package(tmp_path, namespace["package"].shipped)  # type: ignore[attr-defined]


def test_the_notebook_runs_as_a_script_on_cpu(tmp_path: Path) -> None:
    """``python demo.py`` in a fresh process, with only the environment the page names (made
    absolute: the script runs in a folder of its own) and evo importable as it is here."""
    assert f"`{GUARD}`" in page() and all(f"`{assignment}`" in page() for assignment in ENVIRONMENT)
    demo = tmp_path / "demo.py"
    demo.write_text(script())
    named = {k: str(REPO / v) for k, v in (a.split("=", 1) for a in ENVIRONMENT)}
    importable = [p for p in (os.environ.get("PYTHONPATH", ""), str(REPO)) if p]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVO_")} | named | {
        "PYTHONPATH": os.pathsep.join([named["PYTHONPATH"], *importable]),
        "EVO_HOME": str(tmp_path / "home"), "EVO_CANDIDATES": str(tmp_path / "candidates")}
    proc = subprocess.run([sys.executable, demo.name], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_printed(proc.stdout)
    check_package(tmp_path)

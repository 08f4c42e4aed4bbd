"""``evo report`` on a small stored lineage: a self-contained page whose figures Plotly accepts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import plotly.graph_objects as go
import pytest
from store_fixture import CHILD, FIXTURES, PARENT, built, populate, tiny

from evo.cli import main
from evo.report import build
from evo.report.page import script_json
from evo.store import open_store


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "candidates"))
    url = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    with open_store(url) as store:
        populate(store)
    return url


def embedded(html: str, element_id: str) -> dict:
    m = re.search(rf'<script type="application/json" id="{element_id}">(.*?)</script>', html, re.S)
    assert m, element_id
    return json.loads(m.group(1))


def test_script_json_cannot_close_its_element() -> None:
    doc = {"label": "</script><script>alert(1)</script><!--"}
    text = str(script_json(doc))
    assert "<" not in text and json.loads(text) == doc


def test_the_page_needs_no_network(url: str) -> None:
    with open_store(url) as store:
        html = build(store)
    markup = re.sub(r"<script\b[^>]*>.*?</script>", "<script></script>", html, flags=re.S)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", markup, re.I)
    assert "<script src" not in markup and "<link" not in markup.lower() and "@import" not in markup
    assert "Plotly.newPlot" in html  # the plotting library is inlined, not fetched


def test_every_figure_is_valid_plotly(url: str) -> None:
    with open_store(url) as store:
        html = build(store)
    figures = embedded(html, "evo-figures")
    assert {"speedups", "heatmap", "roofline", "lineage"} <= figures.keys()
    for name, fig in figures.items():
        go.Figure(fig)  # raises on any property Plotly does not know
        assert any(t.get("x") or t.get("z") for t in fig["data"]), name


def test_the_graph_holds_every_candidate_with_its_record_and_source(url: str) -> None:
    with open_store(url) as store:
        graph = embedded(build(store), "evo-graph")
    assert {n["id"] for n in graph["nodes"]} == {PARENT, CHILD} == graph["details"].keys()
    (edge,) = graph["edges"]
    assert (edge["parent"], edge["child"], edge["move"], edge["effect"]) == (PARENT, CHILD, "ROWS 64->32", 1.25)
    child = graph["details"][CHILD]
    assert child["params"]["ROWS"] == 32 and len(child["evaluations"][0]["checks"]) == 2
    (case,) = [c for c in child["cases"] if c["tag"] == "F1-fp16"]
    assert case["us"] == {"evo": [4.0, 3.6, 4.4], "sdpa_default": [10.0, 9.0, 11.0]}  # no raw samples
    source = "\n".join(graph["lines"][i] for i in child["source"])
    assert "ROWS" in source and child["source_note"].startswith("rendered again")


def test_a_run_whose_worker_died_shows_its_expired_lease_and_stays_running(url: str) -> None:
    with open_store(url) as store:
        dead = store.start_run("evo run", study="s1", lease_s=1)  # its worker killed; no worker left to fail it
        item = tiny(ROWS=128)
        store.record_build(item, built(item, "ac" + "0" * 62), dead)
        time.sleep(2.3)  # SQLite's clock has 1 s resolution
        html = build(store)
        assert store.get_run(dead).status == "running"  # the report writes nothing
    (row,) = re.findall(rf"<tr><td class=\"num\">{dead}</td>.*?</tr>", html, re.S)
    assert re.search(r"<td>running \(lease expired [\d-]+ [\d:]+ UTC\)</td>", row)


def test_report_command_writes_the_file(capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the path is long under pytest-xdist: on one line
    out = tmp_path / "r.html"
    assert main(["report", "--db", url, "--out", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>") and f"wrote {out}" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["--study", "nope"], "no study 'nope'"),
    (["--out", "/nonexistent-folder/r.html"], "folder /nonexistent-folder does not exist"),
    (["--bench", "/nonexistent.json"], "no benchmark file or folder"),
])
def test_bad_requests_are_one_line(capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path,
                                   argv: list[str], message: str) -> None:
    code = main(["report", "--db", url, "--out", str(tmp_path / "r.html"), *argv] if "--out" not in argv
                else ["report", "--db", url, *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1 and not (tmp_path / "r.html").exists()


def test_an_unknown_baseline_is_a_usage_error(capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path) -> None:
    code = main(["report", "--db", url, "--out", str(tmp_path / "r.html"), "--baseline", "cudnn"])
    err = capsys.readouterr().err
    assert code == 2 and "'cudnn' is not one of" in err and "Traceback" not in err
    assert not (tmp_path / "r.html").exists()


def test_a_missing_database_is_refused_not_created(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    db = tmp_path / "none.sqlite"
    assert main(["report", "--db", f"sqlite:///{db}", "--out", str(tmp_path / "r.html")]) == 2
    assert "no database at" in capsys.readouterr().err and not db.exists()


def test_other_commands_do_not_need_plotly() -> None:
    """plotly is imported when a report is rendered, so a GPU host without it runs every other command."""
    code = "import sys, evo.cli; sys.exit(any(m.split('.')[0] == 'plotly' for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0

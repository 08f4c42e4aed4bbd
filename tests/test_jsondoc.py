"""``--json`` of ``evo show``, ``evo lineage`` and ``evo insights``: one document, stable keys."""

from __future__ import annotations

import json
import math
from datetime import datetime, UTC
from pathlib import Path

import pytest
from store_fixture import CHILD, FIXTURES, PARENT, populate

from evo.cli import main
from evo.analysis.jsondoc import clean
from evo.results import Status
from evo.store import open_store


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "candidates"))
    url = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    with open_store(url) as store:
        populate(store)
    return url


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)  # the whole of stdout is one JSON document


def test_clean_makes_any_record_json_safe() -> None:
    when = datetime(2026, 1, 2, tzinfo=UTC)
    assert clean({"a": (1, math.nan), "s": Status.FAST, 3: when, "inf": math.inf}) == \
        {"a": [1, None], "s": "fast", "3": "2026-01-02T00:00:00+00:00", "inf": None}
    assert json.loads(json.dumps(clean({"x": math.nan}), allow_nan=False)) == {"x": None}


def test_show_json_has_the_whole_record(capsys: pytest.CaptureFixture[str], url: str) -> None:
    doc = run_json(capsys, "show", CHILD[:6], "--json", "--db", url)
    assert doc["schema"] == "evo.candidate/1" and doc["id"] == CHILD and doc["status"] == "fast"
    assert doc["params"]["ROWS"] == 32 and doc["family"] == "tiny"
    assert doc["builds"][0]["resources"]["evo_attn_d64_fp16_full"]["registers"] == 40
    (ev,) = doc["evaluations"]
    assert [c["passed"] for c in ev["checks"]] == [True, False]
    assert ev["checks"][1]["max_abs_err"] is None  # NaN in the database, null in JSON
    assert ev["timings"][0]["samples_us"] == [4.0, 4.0]
    assert doc["scores"] == {"sdpa_default": 2.5} and doc["speedups"]["sdpa_default"] == {"F1-fp16": 2.5, "F1c-fp16": 2.5}
    assert doc["parents"] == [{"id": PARENT, "kind": "mutation", "mutation": {"ROWS": [64, 32]}, "effect": 1.25,
                               "status": "fast"}]
    assert doc["trials"] == [{"study": "s1", "number": 0, "state": "COMPLETE", "value": 2.5, "run_id": 1}]


def test_lineage_json_flag_is_the_json_format(capsys: pytest.CaptureFixture[str], url: str) -> None:
    doc = run_json(capsys, "lineage", "--json", "--db", url)
    assert doc == run_json(capsys, "lineage", "--format", "json", "--db", url)
    assert doc["schema"] == "evo.lineage/1" and {n["id"] for n in doc["nodes"]} == {PARENT, CHILD}
    assert doc["edges"][0]["effect"] == 1.25


def test_insights_json_lists_every_move_with_its_evidence(capsys: pytest.CaptureFixture[str], url: str) -> None:
    doc = run_json(capsys, "insights", "--json", "--db", url)
    assert doc["schema"] == "evo.insights/1" and doc["study"] is None and doc["baseline"] == "sdpa_default"
    move = next(m for m in doc["moves"] if m["bucket"] == "all")
    assert (move["param"], move["old"], move["new"], move["n"], move["median_effect"]) == ("ROWS", 64, 32, 1, 1.25)
    assert move["evidence"] == [f"{PARENT[:12]}>{CHILD[:12]}"]
    assert {r["param"] for r in doc["resources"]} >= {"ROWS"}

"""``evo report`` on PostgreSQL (many hosts share one study there): the same page as on SQLite."""

from __future__ import annotations

import json
import re
from pathlib import Path

import optuna
from pg_fixture import pg_url  # noqa: F401  (fixture)

from evo.report import build
from evo.search.driver import RunOptions, run
from evo.search.loop import NullReporter
from evo.store import open_store

RECORDING = Path(__file__).resolve().parent.parent / "data" / "sweep-h200.json.gz"


def test_a_report_from_postgresql(pg_url: str) -> None:  # noqa: F811
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    run(RunOptions(replay=RECORDING, trials=24, seed=1, db=pg_url, study="pg"), NullReporter())
    with open_store(pg_url) as store:
        html = build(store)
        count = len(store.find_candidates())
    graph = json.loads(re.search(r'id="evo-graph">(.*?)</script>', html, re.S).group(1))
    figures = json.loads(re.search(r'id="evo-figures">(.*?)</script>', html, re.S).group(1))
    assert len(graph["nodes"]) == count > 0
    assert {"progress", "speedups", "lineage"} <= figures.keys()
    assert "postgresql" in html and "evo_test_" in html  # the page names the database it read

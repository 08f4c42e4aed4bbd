"""The report and Optuna's tools on the replay database (what ``evo run`` writes without a GPU).

The report is opened in headless Chromium (Debian's ``chromium``, installed by ``.ci/run``;
:mod:`evo.report.browser` runs it with every host name unresolvable): the page must render
with no console error, every plot
must hold data points drawn as marks, and the lineage graph must hold every candidate of the
database. The screenshot is kept in the test's folder, and copied to ``$EVO_REPORT_ARTIFACTS``
when that names a folder. Optuna's API and optuna-dashboard (served in-process, no socket)
read evo's study from the same file, with each trial's candidate id and speedups.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sqlite3
import wsgiref.util
from pathlib import Path

import optuna
import optuna_dashboard
import pytest

from evo.cli import main
from evo.report import browser
from evo.scoring import geomean
from evo.search.driver import RunOptions, run
from evo.search.loop import NullReporter

REPO = Path(__file__).resolve().parent.parent
RECORDING = REPO / "data" / "sweep-h200.json.gz"
STUDY = "evo-replay"
PLOTS = ("progress", "samplers", "speedups", "heatmap", "roofline", "lineage", "importances", "failures")


@pytest.fixture(scope="module")
def replay_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A replayed evo search: 60 trials of the default sampler on the committed H200 recording."""
    url = f"sqlite:///{tmp_path_factory.mktemp('replay') / 'evo.sqlite'}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    run(RunOptions(replay=RECORDING, trials=60, seed=0, db=url, study=STUDY), NullReporter())
    return url


def candidate_ids(url: str) -> list[str]:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return [cid for (cid,) in conn.execute("SELECT id FROM evo_candidates ORDER BY id")]


def chromium() -> str:
    found = browser.find_browser()
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("headless Chromium is not installed (.ci/run installs Debian's chromium)")
        pytest.skip("needs Chromium (apt-get install chromium)")
    return found


def test_the_report_renders_in_headless_chromium(replay_db: str, tmp_path: Path) -> None:
    exe = chromium()
    out = tmp_path / "report.html"
    assert main(["report", "--db", replay_db, "--out", str(out), "--bench", str(REPO / "benchmarks"),
                 "--sampler-benchmark", str(REPO / "docs" / "sampler-benchmark.json")]) == 0

    check = browser.inspect(out, exe)
    assert check.console_errors == []
    assert check.summary is not None, "the page's script did not finish (no summary written)"
    assert check.summary["errors"] == []
    assert set(check.summary["plots"]) == set(PLOTS)
    for name, plot in check.summary["plots"].items():
        assert plot["traces"] > 0 and plot["points"] > 0 and plot["marks"] > 0, (name, plot)
    assert check.summary["lineage_nodes"] == check.summary["graph_nodes"] == len(candidate_ids(replay_db))
    best = check.summary["selected"]
    assert best and check.summary["panel"].startswith(best[:12]), "the best node is selected, its record shown"

    other = next(n for n in candidate_ids(replay_db) if n != best)
    linked = browser.inspect(out, exe, fragment=f"node={other[:12]}")  # what selecting a node writes
    assert linked.summary is not None and linked.summary["selected"] == other
    assert linked.summary["panel"].startswith(other[:12]) and linked.summary["errors"] == []

    shot = tmp_path / "report.png"
    assert browser.screenshot(out, shot, exe) == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
    keep = os.environ.get("EVO_REPORT_ARTIFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "report-replay.png")
        shutil.copy(out, Path(keep) / "report-replay.html")


def test_a_page_error_is_caught(tmp_path: Path) -> None:
    """The check above can fail: a page whose script throws is reported, summary or not."""
    exe = chromium()
    page = tmp_path / "broken.html"
    page.write_text('<output id="evo-report-summary"></output><script>undefinedFunction();</script>')
    check = browser.inspect(page, exe)
    assert check.summary is None and any("undefinedFunction" in line for line in check.console_errors)


def test_the_report_only_reads_the_database(replay_db: str, tmp_path: Path) -> None:
    def dump() -> list[str]:
        with sqlite3.connect(replay_db.removeprefix("sqlite:///")) as conn:
            return list(conn.iterdump())

    before = dump()
    assert main(["report", "--db", replay_db, "--out", str(tmp_path / "r.html")]) == 0
    assert dump() == before  # no insight saved, no Optuna table or row added


def test_optuna_loads_evo_study_with_candidate_and_speedups(replay_db: str) -> None:
    study = optuna.load_study(study_name=STUDY, storage=replay_db)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert done
    known = set(candidate_ids(replay_db))
    for t in done:
        assert t.user_attrs["candidate"] in known and t.user_attrs["status"] == "fast"
        speedups = t.user_attrs["speedups"]
        assert set(speedups) == set(study.user_attrs["evo:settings"]["cases"])
        assert t.value == pytest.approx(geomean(speedups.values()))  # the objective is their geomean


def test_optuna_dashboard_serves_evo_study(replay_db: str) -> None:
    app = optuna_dashboard.wsgi(replay_db)

    def get(path: str) -> dict:
        status: list[str] = []
        environ = {"PATH_INFO": path, "wsgi.errors": io.StringIO()}
        wsgiref.util.setup_testing_defaults(environ)
        body = b"".join(app(environ, lambda s, headers, exc_info=None: status.append(s)))
        assert status == ["200 OK"], (path, status, body[:300])
        return json.loads(body)

    (summary,) = [s for s in get("/api/studies")["study_summaries"] if s["study_name"] == STUDY]
    trials = get(f"/api/studies/{summary['study_id']}")["trials"]
    attrs = [{a["key"]: a["value"] for a in t["user_attrs"]} for t in trials if t["state"] == "Complete"]
    assert attrs and all(len(a["candidate"]) == 64 and json.loads(a["speedups"]) for a in attrs)

"""The ``evo`` executable's conventions, through a real subprocess (the installed console script,
or ``python -m evo`` where evo runs from a source tree): usage errors exit 2 with one
``Error:`` line and no traceback, and write nothing; ``--version``; ``evo`` alone prints help;
``--db`` takes a path or a URL; ``evo run`` says where the results are, how many candidates it
measured per GPU-hour (per hour in a replay; ``--summary-json`` writes it all) and what to run next."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evo import __version__, paths
from evo.cli.run_cmds import screens, throughput
from evo.search.records import RunSummary
from evo.store.recording import newest_recording
from synthetic_sweep import make_recording

SCRIPT = Path(sys.executable).with_name("evo")  # the console script pip installs beside python
EVO = [str(SCRIPT)] if SCRIPT.is_file() else [sys.executable, "-m", "evo"]  # a source tree on PYTHONPATH
TRIALS = 16  # a replayed run this short takes about two seconds


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` with its size and modification time, and every folder (by name
    only: SQLite's transient -wal/-shm files touch the folder of a database that is only read)."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else (0, 0)
            for p in folder.rglob("*")}


def evo(cwd: Path, *argv: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    """Run the installed ``evo`` in ``cwd`` with its data folder there too."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVO_")}
    env |= {"EVO_HOME": str(cwd / "home"), "COLUMNS": str(columns), "NO_COLOR": "1"}
    return subprocess.run([*EVO, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A folder whose EVO_HOME holds a short replayed study (replayed on a GPU host too), and
    that run's output."""
    cwd = tmp_path_factory.mktemp("replayed")
    recording = newest_recording(paths.root() / "data")
    assert recording is not None
    proc = evo(cwd, "run", "--trials", str(TRIALS), "--seed", "1", "--replay", str(recording))
    assert proc.returncode == 0, proc.stderr
    return cwd, proc


def test_an_installed_evo_is_tested_through_its_console_script() -> None:
    try:
        importlib.metadata.distribution("evo-kernels")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("evo runs from a source tree on PYTHONPATH: tested through python -m evo")
    assert SCRIPT.is_file() and [str(SCRIPT)] == EVO


NO_PSYCOPG = importlib.util.find_spec("psycopg") is None

USAGE_ERRORS = [
    (["run", "--bogus"], "--bogus"),
    (["frobnicate"], "No such command 'frobnicate'"),
    (["run", "--trials", "abc"], "'abc' is not a valid integer"),
    (["run", "--trials", "0"], "0 is not in the range x>=1"),
    (["run", "--batch", "0"], "0 is not in the range x>=1"),
    (["run", "--jobs", "0"], "0 is not in the range x>=1"),
    (["run", "--time-budget", "-1"], "-1.0 is not in the range x>0"),
    (["run", "--seed", "-3"], "-3 is not in the range"),
    (["run", "--sampler", "cmaes"], "cmaes is not offered: every evo parameter is categorical"),
    (["run", "--sampler", "annealing"], "'annealing' is not one of"),
    (["run", "--replay", "missing.json.gz"], "'missing.json.gz' does not exist"),
    (["insights", "--top", "-1"], "-1 is not in the range x>=1"),
    (["lineage", "--format", "svg"], "'svg' is not one of 'tree', 'dot', 'json'"),
    (["build", "--random", "0"], "0 is not in the range x>=1"),
    (["bench", "--best", "0"], "0 is not in the range x>=1"),
    (["eval", "flash_mma", "--timeout", "0"], "0.0 is not in the range x>0"),
    (["eval", "flash_mma", "--dtype", "fp8"], "'fp8' is not one of 'fp16', 'bf16'"),
    (["promote", "--name", "x", "--out", "o", "--min-speedup", "-1"], "is not in the range x>0"),
    (["promote", "--name", "x"], "Missing option '--out'"),
    (["show"], "Missing argument 'ID'"),
]


@pytest.mark.parametrize(("argv", "message"), USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS])
def test_usage_errors_exit_2_with_the_usage_line_and_write_nothing(tmp_path: Path, argv: list[str],
                                                                   message: str) -> None:
    before = snapshot(tmp_path)
    proc = evo(tmp_path, *argv)
    lines = proc.stderr.splitlines()
    errors = [line for line in lines if line.startswith("Error:")]
    assert proc.returncode == 2 and proc.stdout == ""
    assert lines[0].startswith("Usage: evo") and len(errors) == 1 and message in errors[0] and errors[0] == lines[-1]
    assert "Traceback" not in proc.stderr
    assert snapshot(tmp_path) == before


DOMAIN_ERRORS = [
    (["show", "abc", "--db", "typo.sqlite"], "no database at "),
    (["lineage", "--db", "sqlite:///typo.sqlite"], "no database at "),
    (["insights"], "no database at "),  # the default database does not exist yet
    (["export-sweep"], "no database at "),
    (["run", "--db", "no/such/folder/evo.sqlite"], "folder "),  # a named file's folder is not made for it
    (["run", "--summary-json", "no/such/folder/summary.json"], "folder no/such/folder does not exist"),
    (["run", "--summary-json", "."], ". is a folder, not a file"),
    (["promote", "--name", "x", "--out", "o"], "no database at "),
    (["run", "--db", "mysql+nodriver://u@h/db"], "cannot use database URL"),
    pytest.param(["run", "--db", "postgresql://evo@localhost/evo"],
                 "the postgresql driver 'psycopg' is not installed: pip install 'evo-kernels[postgres]'",
                 marks=pytest.mark.skipif(not NO_PSYCOPG, reason="psycopg is installed")),
    pytest.param(["show", "abc", "--db", "postgres://evo@localhost/evo"], "pip install 'evo-kernels[postgres]'",
                 marks=pytest.mark.skipif(not NO_PSYCOPG, reason="psycopg is installed")),
]


@pytest.mark.parametrize(("argv", "message"), DOMAIN_ERRORS)
def test_bad_databases_are_one_line_and_create_nothing(tmp_path: Path, argv: list[str], message: str) -> None:
    before = snapshot(tmp_path)
    proc = evo(tmp_path, *argv)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("evo: error: ") and message in proc.stderr and proc.stderr.count("\n") == 1
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(("source", "message"), [
    ("nope", "no study named 'nope' in this database"),
    ("deadbeef00", "'deadbeef00' names no study, and no candidate with id 'deadbeef00'"),  # an id prefix
])
def test_a_start_from_source_that_does_not_exist_is_one_line_and_creates_no_study(
        replayed: tuple[Path, subprocess.CompletedProcess[str]], source: str, message: str) -> None:
    cwd, _ = replayed
    before = snapshot(cwd)
    proc = evo(cwd, "run", "--study", "fresh", "--start-from", f"evo-replay,{source}", "--trials", "2",
               "--replay", str(newest_recording(paths.root() / "data")))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert message in proc.stderr
    assert snapshot(cwd) == before


def test_promote_after_a_replay_says_a_gpu_evaluation_comes_first(
        replayed: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    cwd, _ = replayed
    before = snapshot(cwd)
    proc = evo(cwd, "promote", "--study", "evo-replay", "--name", "evoattn", "--out", "pkg", "--no-verify")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert "replayed from a recording" in proc.stderr and "evo eval --id" in proc.stderr
    assert snapshot(cwd) == before


def test_evo_alone_prints_help_and_exits_0(tmp_path: Path) -> None:
    proc = evo(tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("Usage: evo [OPTIONS]") and proc.stderr == ""
    assert all(f"  {c} " in proc.stdout for c in ("run", "show", "lineage", "promote", "doctor"))


def test_version(tmp_path: Path) -> None:
    proc = evo(tmp_path, "--version")
    assert (proc.returncode, proc.stdout) == (0, f"evo {__version__}\n")


def test_help_metavars_read_like_click(tmp_path: Path) -> None:
    proc = evo(tmp_path, "run", "--help")
    assert proc.returncode == 0
    for shown in ("--trials N", "--time-budget SECONDS", "--db PATH|URL", "--replay FILE", "-h, --help",
                  "[evo|evo-gp|tpe|gp|random|grid]"):
        assert shown in proc.stdout
    assert "<bool>" not in proc.stdout and "<int>" not in proc.stdout and "cmaes" not in proc.stdout


def test_run_ends_with_the_results_the_speedups_in_words_and_what_next(
        replayed: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    cwd, proc = replayed
    out = proc.stdout
    best = next(line.split()[1] for line in out.splitlines() if line.startswith("best: "))
    assert f"results: {cwd / 'home' / 'db' / 'evo.sqlite'} (study evo-replay)" in out
    assert "vs sdpa_default" in out and ("slower than SDPA's default choice" in out
                                         or "faster than SDPA's default choice" in out)
    assert "above x1 evo is faster" in out
    for nxt in (f"evo show {best}", "evo lineage --study evo-replay", f"evo eval --id {best}"):
        assert nxt in out
    assert "evo promote" not in out  # a replayed study has no GPU-gated candidate to promote


def test_the_progress_bar_fits_80_columns(replayed: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    _, proc = replayed
    bar = next(line for line in proc.stdout.splitlines() if line.startswith("trials "))
    rate = "/s" in bar or "s/trial" in bar      # trials per second, or seconds per trial on a slow or busy machine
    assert len(bar) <= 80 and f"{TRIALS}/{TRIALS}" in bar and rate and "took" in bar and "best x" in bar


def test_show_wraps_at_80_columns_instead_of_cutting(replayed: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    cwd, proc = replayed
    best = next(line.split()[1] for line in proc.stdout.splitlines() if line.startswith("best: "))
    shown = evo(cwd, "show", best)
    assert shown.returncode == 0
    assert all(len(line.rstrip()) <= 80 for line in shown.stdout.splitlines())
    assert "…" not in shown.stdout
    assert all(b in shown.stdout for b in ("default", "cudnn", "flash", "efficient"))


def test_db_takes_a_plain_path_and_a_url_to_the_same_file(
        replayed: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    cwd, _ = replayed
    db = cwd / "home" / "db" / "evo.sqlite"
    by_path = evo(cwd, "lineage", "--db", "home/db/evo.sqlite", "--format", "json")
    by_url = evo(cwd, "lineage", "--db", f"sqlite:///{db}", "--format", "json")
    assert by_path.returncode == 0 and by_path.stdout == by_url.stdout and '"nodes"' in by_path.stdout


@pytest.mark.parametrize(("value", "url"), [
    ("evo.sqlite", "sqlite:///{cwd}/evo.sqlite"),
    ("sqlite:///x.sqlite", "sqlite:///x.sqlite"),
    ("postgresql://u@h/db", "postgresql+psycopg://u@h/db"),
    ("postgres://u@h/db", "postgresql+psycopg://u@h/db"),
    ("postgresql+psycopg2://u@h/db", "postgresql+psycopg2://u@h/db"),
])
def test_db_values_become_urls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str, url: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert paths.db_url(value) == url.format(cwd=tmp_path.resolve())


def test_user_data_goes_to_evo_home_else_the_checkout_else_xdg(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("EVO_HOME", str(tmp_path / "h"))
    assert paths.home() == tmp_path / "h"
    assert paths.default_db_url() == f"sqlite:///{tmp_path / 'h' / 'db' / 'evo.sqlite'}"
    monkeypatch.delenv("EVO_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    installed = paths.source_tree() is None
    assert paths.home() == (tmp_path / "xdg" / "evo" if installed else paths.root())


@pytest.fixture(scope="module")
def summarized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str], dict[str, Any]]:
    """A short replay of the synthetic recording that writes its summary with --summary-json: its
    folder, its output and the document."""
    cwd = tmp_path_factory.mktemp("summarized")
    recording = make_recording(cwd / "sweep.json.gz", seed=3)
    proc = evo(cwd, "run", "--trials", str(TRIALS), "--seed", "1", "--replay", str(recording),
               "--summary-json", "summary.json")
    assert proc.returncode == 0, proc.stderr
    return cwd, proc, json.loads((cwd / "summary.json").read_text())


def test_run_says_how_many_candidates_it_replayed_per_hour(
        summarized: tuple[Path, subprocess.CompletedProcess[str], dict[str, Any]]) -> None:
    _, proc, doc = summarized
    line = next(line for line in proc.stdout.splitlines() if line.startswith("throughput: "))
    shown = re.fullmatch(r"throughput: (\d+) candidates? replayed in \d+:\d\d = ([\d.]+) per hour \(replay: no GPU\)",
                         line)
    assert shown is not None, line
    assert int(shown[1]) == doc["measured"] > 0
    assert float(shown[2]) == pytest.approx(doc["measured"] / (doc["wall_s"] / 3600), abs=0.5)


def test_summary_json_holds_the_run_its_best_and_its_throughput(
        summarized: tuple[Path, subprocess.CompletedProcess[str], dict[str, Any]]) -> None:
    cwd, proc, doc = summarized
    assert (doc["study"], doc["source"], doc["device"]) == ("evo-replay", "replay", "replay:synthetic")
    assert doc["trials"] == sum(doc["counts"].values()) == doc["study_trials"] == TRIALS and not doc["interrupted"]
    assert (doc["workers"], doc["gpus"], doc["candidates_per_gpu_hour"], doc["trials_per_gpu_hour"]) == (1, 0, None, None)
    evaluated = sum(doc["counts"].get(s, 0) for s in ("fast", "green", "red", "crashed", "timeout"))
    assert 0 < doc["measured"] <= min(doc["trials"] - doc["reused"] - doc["waited"], evaluated)
    assert doc["candidates_per_hour"] == pytest.approx(doc["measured"] / (doc["wall_s"] / 3600))
    assert doc["trials_per_hour"] == pytest.approx(doc["trials"] / (doc["wall_s"] / 3600))
    best = next(line.split()[1] for line in proc.stdout.splitlines() if line.startswith("best: "))
    assert doc["best"]["candidate_id"].startswith(best) and "sdpa_default" in doc["best"]["speedups"]
    assert len(doc["best"]["values"]) == len(doc["best"]["metrics"])
    assert doc["git_sha"] is None or re.fullmatch(r"[0-9a-f]{40}", doc["git_sha"])
    assert [p.name for p in cwd.iterdir() if "summary" in p.name] == ["summary.json"]  # no temporary file left


def test_the_throughput_line_of_a_gpu_run_is_per_gpu_hour() -> None:
    two = RunSummary("s", "gpu", 1, 200, finished=150, measured_ids={str(i) for i in range(142)}, wall_s=600.0,
                     workers=2)
    assert throughput(two) == "throughput: 142 candidates measured in 10:00 on 2 GPUs = 426 per GPU-hour"
    one = RunSummary("s", "gpu", 1, 200, finished=3, measured_ids={"a"}, wall_s=3909.0)
    assert throughput(one) == "throughput: 1 candidate measured in 1:05:09 on 1 GPU = 0.92 per GPU-hour"
    built = RunSummary("s", "build-only", 1, 200, finished=3, wall_s=12.0)
    assert throughput(built) == "throughput: nothing measured in 0:12 (building only: no GPU, no recording)"


def test_a_run_in_rungs_says_how_busy_the_gpu_was_and_how_its_screens_fared() -> None:
    s = RunSummary("s", "gpu", 1, 200, finished=90, measured_ids={str(i) for i in range(80)}, wall_s=400.0,
                   screened=76, kept=6, screen_errors=[0.004, -0.012, 0.02], gpu_s={"GREEN": 80.0, "screen": 180.0,
                                                                                     "full": 100.0})
    assert throughput(s) == ("throughput: 80 candidates measured in 6:40 on 1 GPU = 720 per GPU-hour; "
                             "GPU busy 90% of it (GREEN 20%, screen 45%, full 25%) = 800 per busy GPU-hour")
    assert screens(s) == ("screens: 76 candidates screened, 6 kept for the full protocol; "
                          "screen vs full: median |error| 1.2%, worst +2.0% (n=3)")
    s.gpu_s["prime"], s.first_gpu_s = 20.0, 34.4
    assert throughput(s).endswith("GPU busy 95% of it (GREEN 20%, screen 45%, full 25%, prime 5%) = 758 per busy "
                                  "GPU-hour; the first candidate on the GPU 34 s after the start")


def test_full_only_asks_for_every_candidate_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from evo import api
    from evo.cli import cli

    asked: dict[str, Any] = {}

    def run(db: object, **kw: Any) -> None:
        asked.update(kw)
        raise api.EvoError("stop here")

    monkeypatch.setattr(api, "run", run)
    CliRunner().invoke(cli, ["run", "--full-only", "--trials", "1"])
    assert asked["screen"] is False and asked["screen_only"] is False
    CliRunner().invoke(cli, ["run", "--trials", "1"])
    assert asked["screen"] is True and asked["screen_only"] is False
    CliRunner().invoke(cli, ["run", "--screen-only", "--trials", "1"])
    assert asked["screen"] is True and asked["screen_only"] is True
    asked.clear()
    both = CliRunner().invoke(cli, ["run", "--screen-only", "--full-only", "--trials", "1"])
    assert both.exit_code == 2 and "exclude each other" in both.output and not asked
    CliRunner().invoke(cli, ["run", "--trials", "1"])
    assert asked["prune_bar"] == "screens"
    CliRunner().invoke(cli, ["run", "--prune-bar", "incumbent", "--trials", "1"])
    assert asked["prune_bar"] == "incumbent"
    asked.clear()
    bar = CliRunner().invoke(cli, ["run", "--prune-bar", "incumbent", "--full-only", "--trials", "1"])
    assert bar.exit_code == 2 and "--prune-bar sets what a screen must reach" in bar.output and not asked

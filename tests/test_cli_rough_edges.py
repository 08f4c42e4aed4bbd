"""Issue 37: what a new user hits on a machine without a GPU, each through the real ``evo``.

A second run of a finished study says how to continue it; a database on read-only storage is
one ``evo: error:`` line for the commands that write and opens read-only for those that read;
a missing EVO_HOME is created; bad input writes nothing; a replayed candidate is shown and
refused as replayed; ``evo run`` suggests only what can work here; ``evo insights`` without
``--study`` gives every study's importances or says why there are none.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_fixture import FIXTURES, populate
from test_cli import EVO, TRIALS, snapshot

from evo import api, paths
from evo.analysis import outcome
from evo.cli import main
from evo.errors import EvoError
from evo.search.loop import Best, RunSummary
from evo.store import open_store
from evo.store.engine import is_read_only
from evo.store.recording import newest_recording

RECORDING = newest_recording(paths.root() / "data")
WORKER = Path(__file__).parent / "fixtures" / "worker"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def evo(cwd: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The installed ``evo`` in ``cwd``, its data folder ``cwd/home`` (not made beforehand), with
    ``env`` added."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("EVO_")}
    base |= {"EVO_HOME": str(cwd / "home"), "COLUMNS": "80", "NO_COLOR": "1"} | env
    return subprocess.run([*EVO, *argv], cwd=cwd, env=base, capture_output=True, text=True, timeout=300)


def words(text: str) -> str:
    """``text`` with its line wrapping undone (the terminal is 80 columns)."""
    return " ".join(text.split())


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A folder whose EVO_HOME holds a short replayed study, and its best candidate's short id."""
    cwd = tmp_path_factory.mktemp("replayed")
    proc = evo(cwd, "run", "--trials", str(TRIALS), "--seed", "1", "--replay", str(RECORDING))
    assert proc.returncode == 0, proc.stderr
    best = next(line.split()[1] for line in proc.stdout.splitlines() if line.startswith("best: "))
    return cwd, best


# ----------------------------------------------------------------------------- 1. a finished study


def test_a_second_run_of_a_finished_study_says_it_has_its_trials_and_how_to_continue(
        replayed: tuple[Path, str]) -> None:
    cwd, _ = replayed
    proc = evo(cwd, "run", "--trials", str(TRIALS), "--replay", str(RECORDING))
    out = words(proc.stdout)
    assert proc.returncode == 0 and f"0 trial(s) this run, {TRIALS}/{TRIALS} in the study" in out
    assert f"study evo-replay already has {TRIALS} trials and --trials asks for {TRIALS}" in out
    assert f"`evo run --study evo-replay --trials M` with M > {TRIALS} continues it" in out


def test_a_run_that_added_trials_says_nothing_of_it() -> None:
    summary = RunSummary("s", "replay", 1, requested=20, finished=4, total=20)
    assert outcome.done_before(summary, "") == ""


# ----------------------------------------------------------------------------- 2. read-only storage


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """``folder`` as read-only storage for as long as the block runs.

    A test that runs as root cannot use chmod (root writes anyway), and a read-only bind mount
    needs privileges a container rarely has. So: chmod 0555 for an ordinary user; for root the
    folder's immutable attribute (``chattr +i``), which stops root too. Either way the kernel
    then refuses to create files in the folder, and ``os.access`` says so, as on a read-only
    mount. Where neither works (root on a filesystem without chattr) the test is skipped;
    ``test_the_storage_check_decides_read_only`` covers the decision there with os.access stubbed.
    """
    if os.geteuid() != 0:
        mode = folder.stat().st_mode
        folder.chmod(0o555)
        undo = ["chmod", oct(mode & 0o777)[2:], str(folder)]
    else:
        done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True, check=False) \
            if shutil.which("chattr") else None
        if done is None or done.returncode != 0:
            pytest.skip("no way to make a folder read-only for root here (chattr +i failed)")
        undo = ["chattr", "-i", str(folder)]
    try:
        if os.access(folder, os.W_OK):
            pytest.skip(f"{folder} stays writable here")
        yield
    finally:
        subprocess.run(undo, check=True)


@pytest.fixture
def stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small lineage (tests/store_fixture.py) in a database of its own folder."""
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "candidates"))
    monkeypatch.setenv("COLUMNS", "200")
    db = tmp_path / "ro" / "evo.sqlite"
    db.parent.mkdir()
    with open_store(f"sqlite:///{db}") as store:
        populate(store)
    return db


def test_commands_that_write_refuse_read_only_storage_in_one_line(replayed: tuple[Path, str],
                                                                  tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    shutil.copy(replayed[0] / "home" / "db" / "evo.sqlite", folder / "evo.sqlite")
    with read_only(folder):
        before = snapshot(tmp_path)
        proc = evo(tmp_path, "run", "--db", str(folder / "evo.sqlite"), "--replay", str(RECORDING),
                   "--trials", str(TRIALS + 2))
        assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1
        assert proc.stderr.startswith(f"evo: error: cannot write the database {folder / 'evo.sqlite'}: "
                                      "the storage there is read-only")
        assert snapshot(tmp_path) == before


def test_commands_that_read_open_a_database_on_read_only_storage(stored: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    folder, out = stored.parent, tmp_path / "out"
    out.mkdir()
    with read_only(folder):
        before = snapshot(folder)
        for argv, expected in [(["show", "ab"], "score vs sdpa_default: x2.500"),
                               (["lineage", "--format", "json"], '"edges"'),
                               (["insights"], "moves (child score / parent score)"),
                               (["export-sweep", "--out", str(out / "sweep.json.gz")], "measured on NVIDIA H200"),
                               (["report", "--out", str(out / "report.html")], "open it in a browser")]:
            code = main([*argv, "--db", str(stored)])
            captured = capsys.readouterr()
            assert code == 0 and expected in words(captured.out), (argv, captured.err)
        assert snapshot(folder) == before  # no -wal, no -shm, no migration, no stored insights


@needs_nvcc
def test_bench_reads_a_database_on_read_only_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "candidates"))
    monkeypatch.syspath_prepend(str(WORKER))
    db = tmp_path / "ro" / "evo.sqlite"
    db.parent.mkdir()
    done = api.evaluate_candidate("tiny", cases="F1", db=db, target="standins:serve_green")
    with read_only(db.parent):
        bench = api.benchmark(best=1, cases="F1", db=db, out=tmp_path / "benchmarks", target="standins:serve_bench")
    assert bench.problems == [] and {c["candidate_id"] for c in bench.record["cases"]} == {done.candidate_id}


def test_the_storage_check_decides_read_only(stored: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no folder can be made read-only (root without chattr), the kernel's answer is stubbed."""
    real = os.access
    monkeypatch.setattr("evo.store.engine.os.access",
                        lambda p, mode: mode != os.W_OK and real(p, mode) if Path(p) == stored.parent else real(p, mode))
    with api.open_db(stored, create=False) as store:
        assert is_read_only(store.url) and store.get("ab").candidate.id.startswith("ab")
    with pytest.raises(EvoError, match="the storage there is read-only"):
        api.open_db(stored)


# ----------------------------------------------------------------------------- 3. a new EVO_HOME


@needs_nvcc
def test_a_command_that_writes_creates_evo_home_and_its_db_folder(tmp_path: Path) -> None:
    home = tmp_path / "new" / "home"
    proc = evo(tmp_path, "build", "tiny", "--arch", "sm_90a", EVO_HOME=str(home),
               EVO_TEMPLATE_PATH=str(FIXTURES), EVO_CANDIDATES=str(tmp_path / "candidates"))
    assert proc.returncode == 0, proc.stderr
    assert (home / "db" / "evo.sqlite").is_file()


# ----------------------------------------------------------------------------- 4. bad input writes nothing


@pytest.mark.parametrize(("argv", "message"), [
    (["run", "--families", "nope"], "unknown family 'nope'"),
    (["run", "--families", "flash_mma", "--cases", "F99"], "F99"),
    (["run", "--families", "flash_mma", "--cases", "L3-L5"], "no family of this search (flash_mma) has a kernel for "
     "L4c-bf16, L5c-bf16 (head dim 256, 96): leave them out of --cases"),
    (["run", "--replay", str(RECORDING), "--cases", "F1-bf16"], "the recording does not cover F1-bf16"),
])
def test_bad_run_input_creates_no_database(tmp_path: Path, argv: list[str], message: str) -> None:
    proc = evo(tmp_path, *argv)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("evo: error: ") and message in proc.stderr
    assert snapshot(tmp_path) == {}


# ----------------------------------------------------------------------------- 6. replayed candidates


def test_show_says_a_replayed_candidates_checks_ran_elsewhere(replayed: tuple[Path, str]) -> None:
    cwd, best = replayed
    proc = evo(cwd, "show", best)
    out = words(proc.stdout)
    assert proc.returncode == 0 and "replayed: these results come from a recording made on NVIDIA H200" in out
    assert "not on this machine" in out and f"`evo eval --id {best}` gates and times it on a GPU" in out


def test_promote_of_a_replayed_study_says_why_and_what_to_do_without_no_verify(replayed: tuple[Path, str]) -> None:
    cwd, best = replayed
    before = snapshot(cwd)
    proc = evo(cwd, "promote", "--study", "evo-replay", "--name", "evoattn", "--out", "pkg")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--no-verify" not in proc.stderr
    assert "were replayed from a recording made on NVIDIA H200" in proc.stderr
    assert f"`evo eval --id {best}`" in proc.stderr and f"`evo promote --candidate {best}`" in proc.stderr
    assert snapshot(cwd) == before


def summary_of(source: str) -> RunSummary:
    return RunSummary("s", source, 1, requested=8, finished=8, total=8, best=Best(3, "c" * 64, "tiny()", [1.2]))


@pytest.mark.parametrize(("source", "gpus", "promote"), [
    ("replay", 1, None),
    ("build-only", 0, None),
    ("gpu", 1, "evo promote --study s --name NAME --out DIR"),
    ("gpu", 0, "evo promote --study s --name NAME --out DIR --no-verify"),
])
def test_run_suggests_promote_only_where_it_can_work(monkeypatch: pytest.MonkeyPatch, source: str, gpus: int,
                                                     promote: str | None) -> None:
    monkeypatch.setattr(outcome, "gpu_count", lambda: gpus)
    commands = [step.command for step in outcome.next_steps(summary_of(source), "")]
    assert [c for c in commands if c.startswith("evo promote")] == ([promote] if promote else [])
    assert ("evo eval --id cccccccccccc" in commands) == (source == "replay")


# ----------------------------------------------------------------------------- 7. insights of every study


def test_insights_without_a_study_gives_every_studys_importances(replayed: tuple[Path, str]) -> None:
    cwd, _ = replayed
    proc = evo(cwd, "insights")
    assert proc.returncode == 0 and "importances for flash_mma in study evo-replay" in words(proc.stdout)


def test_insights_of_a_database_without_studies_says_why_there_are_no_importances(
        stored: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["insights", "--db", str(stored)]) == 0
    assert ("parameter importances: no study in the database: importances are computed over the trials of a "
            "search") in words(capsys.readouterr().out)

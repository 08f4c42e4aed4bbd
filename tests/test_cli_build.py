"""``evo render``, ``evo build`` and ``evo doctor`` through the real entry point (evo.cli.main)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from store_fixture import FIXTURES, tiny

from evo.cli import main
from evo.results import Status
from evo.store import open_store

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "candidates"))
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "evo.sqlite"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def no_path_to_nvcc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", str(empty))
    for var in ("EVO_NVCC", "CUDA_HOME"):
        monkeypatch.delenv(var, raising=False)


def test_render_prints_the_source(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "render", "tiny", "-p", "ROWS=32")
    assert code == 0 and out == tiny(ROWS=32).source


def test_render_hash(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "render", "tiny", "--hash")
    assert code == 0 and out == tiny().source_hash + "\n"


@pytest.mark.parametrize(("argv", "message"), [
    (["render", "nope"], "unknown family 'nope'"),
    (["render", "tiny", "-p", "ROWS=7"], "parameter ROWS='7' is not allowed; allowed: 32, 64, 128"),
    (["render", "tiny", "-p", "NOPE=1"], "unknown parameter 'NOPE'"),
    (["render", "tiny", "-p", "ROWS"], "expected KEY=VALUE"),
    (["render", "tiny", "-p", "ROWS=128", "-p", "SMEM_KB=2"], "constraint violated"),
    (["build", "tiny", "--arch", "sm_75"], "unsupported arch 'sm_75'"),
    (["build", "nope"], "unknown family 'nope'"),
    (["build", "tiny", "--random", "2", "-p", "ROWS=128", "-p", "SMEM_KB=2"], "no valid candidate of tiny has"),
])
def test_bad_input_is_one_line_and_writes_nothing(capsys: pytest.CaptureFixture[str], db: Path,
                                                  argv: list[str], message: str) -> None:
    code, out, err = run(capsys, *argv, *(["--db", f"sqlite:///{db}"] if argv[0] == "build" else []))
    assert code == 2 and out == ""
    assert err.startswith("evo: error: ") and message in err and err.count("\n") == 1
    assert not db.exists()


def test_missing_nvcc_fails_before_the_database(capsys: pytest.CaptureFixture[str], db: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    no_path_to_nvcc(monkeypatch, tmp_path)
    code, _, err = run(capsys, "build", "tiny", "--arch", "sm_90a", "--db", f"sqlite:///{db}")
    assert code == 2 and err == "evo: error: nvcc not found; install the CUDA toolkit or put nvcc on PATH\n"
    assert not db.exists()


@needs_nvcc
def test_unreadable_database_is_one_line(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    db.write_bytes(b"not a database at all" * 64)
    code, _, err = run(capsys, "build", "tiny", "--arch", "sm_90a", "--db", f"sqlite:///{db}")
    assert code == 2 and err.startswith("evo: error: cannot open database") and err.count("\n") == 1


@needs_nvcc
def test_build_stores_and_reports_then_hits_the_cache(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    argv = ["build", "tiny", "-p", "FAULT=syntax", "--random", "2", "--seed", "3", "--arch", "sm_90a",
            "-j", "2", "--db", f"sqlite:///{db}"]
    code, out, _ = run(capsys, *argv)
    assert code == 0 and out.count("compile_failed") == 2 and "error" in out
    assert re.search(r"compiled 2 candidates in [\d.]+ s: [\d.]+ candidates/min \(2 jobs\)", out)
    with open_store(f"sqlite:///{db}") as store:
        assert len(store.find_candidates(status=Status.COMPILE_FAILED)) == 2
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "2 from cache" in out and "compiled 0 candidates" in out


@needs_nvcc
def test_doctor_reports_and_creates_no_database(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    code, out, _ = run(capsys, "doctor", "--db", f"sqlite:///{db}")
    assert code == 0 and "nvcc" in out and "not created yet" in out and "tiny" in out
    assert not db.exists()


@pytest.mark.parametrize("broken", ["nvcc", "database"])
def test_doctor_fails_when_something_required_is_missing(capsys: pytest.CaptureFixture[str], db: Path,
                                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        broken: str) -> None:
    if broken == "nvcc":
        no_path_to_nvcc(monkeypatch, tmp_path)
    else:
        db.write_bytes(b"garbage" * 200)
    code, out, err = run(capsys, "doctor", "--db", f"sqlite:///{db}")
    assert code == 2 and "MISSING" in out and err == f"evo: error: evo cannot build here: fix {broken}\n"


def test_python_m_evo_error_has_no_traceback(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "evo", "render", "tiny", "-p", "ROWS=7"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("evo: error: ") and proc.stderr.count("\n") == 1

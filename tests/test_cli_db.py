"""``evo show`` and ``evo lineage`` on a small stored lineage (no nvcc, no GPU)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from store_fixture import CHILD, FIXTURES, PARENT, evaluation, populate, tiny

from evo.cli import main
from evo.family.space import make_candidate
from evo.results import Status
from evo.store import open_store


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "candidates"))
    monkeypatch.setenv("COLUMNS", "200")
    url = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    with open_store(url) as store:
        populate(store)
        store.record_invalid(make_candidate("tiny", {"ROWS": 128}), "constraint violated: test")
    return url


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_show_prints_the_whole_record(capsys: pytest.CaptureFixture[str], url: str) -> None:
    code, out, _ = run_cli(capsys, "show", "ab", "--db", url)
    assert code == 0 and out.startswith(CHILD)
    for expected in ("tiny(ROWS=32, SMEM_KB=1, FAULT=none)", "evo_attn_d64_fp16_full", "GREEN checks",
                     "2.50x", "score vs sdpa_default: x2.500", "ROWS 64->32", "x1.250", "trial 0 of study s1"):
        assert expected in out


def test_show_labels_a_pruned_candidates_timings_as_its_screen(capsys: pytest.CaptureFixture[str], url: str) -> None:
    """A pruned candidate was timed only by the screen: its speedups say why it was dropped, and
    ``evo show`` must not print them as a FAST score (they were once under the FAST title)."""
    with open_store(url) as store:
        run = store.start_run("evo run", study="s1")
        screen = store.record_evaluation(evaluation(CHILD, 8.0), run)
        store.set_status(screen, Status.PRUNED, "screen x1.250 below the pruner's threshold")
        store.finish_run(run)
    code, out, _ = run_cli(capsys, "show", "ab", "--db", url)
    assert code == 0 and "pruned" in out and "FAST:" not in out
    assert "screen (why it was pruned" in out and "screen score vs sdpa_default: x1.250" in out
    code, out, _ = run_cli(capsys, "show", PARENT[:6], "--db", url)   # a FAST one keeps its title
    assert code == 0 and "FAST:" in out and "screen score" not in out


def test_show_source_renders_again_when_not_cached(capsys: pytest.CaptureFixture[str], url: str) -> None:
    code, out, _ = run_cli(capsys, "show", PARENT[:6], "--source", "--db", url)
    assert code == 0 and out == tiny().source


@pytest.mark.parametrize(("argv", "message"), [
    (["show", "zz"], "no candidate with id 'zz'"),
    (["show", "a"], "ambiguous"),
    (["show", "invalid-", "--source"], "was never rendered"),
    (["lineage", "--study", "nope"], "no candidates in study 'nope'"),
])
def test_bad_requests_are_one_line(capsys: pytest.CaptureFixture[str], url: str, argv: list[str],
                                   message: str) -> None:
    code, out, err = run_cli(capsys, *argv, "--db", url)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1 and "Traceback" not in err


def test_unreadable_database_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"\x00garbage" * 500)
    code, _, err = run_cli(capsys, "show", "ab", "--db", f"sqlite:///{bad}")
    assert code == 2 and err.startswith("evo: error: cannot open database") and err.count("\n") == 1


def test_lineage_tree(capsys: pytest.CaptureFixture[str], url: str) -> None:
    code, out, _ = run_cli(capsys, "lineage", "--study", "s1", "--db", url)
    assert code == 0 and "lineage of s1" in out and "mutation: ROWS 64->32 effect x1.250" in out


@pytest.mark.parametrize(("fmt", "check"), [
    ("dot", lambda out: out.startswith("digraph lineage {") and f'"{PARENT}" -> "{CHILD}"' in out),
    ("json", lambda out: len(json.loads(out)["nodes"]) == 3 and json.loads(out)["edges"][0]["effect"] == 1.25),
])
def test_lineage_formats(capsys: pytest.CaptureFixture[str], url: str, fmt: str,
                         check: Callable[[str], bool]) -> None:
    code, out, _ = run_cli(capsys, "lineage", "--format", fmt, "--db", url)
    assert code == 0 and check(out)


def test_output_follows_columns_as_it_is_when_a_command_runs(capsys: pytest.CaptureFixture[str], url: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Rich reads $COLUMNS when a console is made; main() reads it again, for callers that change it."""
    from evo.cli.output import console

    monkeypatch.setattr(console, "width", 80)
    monkeypatch.setenv("COLUMNS", "123")
    code, _, _ = run_cli(capsys, "lineage", "--db", url)
    assert code == 0 and console.width == 123

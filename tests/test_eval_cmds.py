"""evo eval / evo bench on a machine without a GPU: argument checks, the one-line error, and both
commands end to end with their worker swapped for a CPU stand-in."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from evo.cli import main
from evo.cli.eval_cmds import speed_table

NO_GPU = "evo: error: no CUDA GPU: GREEN and FAST need one (evo build compiles without)\n"


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("evo.gpu.worker.gpu_count", lambda: 0)


@pytest.mark.parametrize("argv", [["eval", "flash_mma"], ["eval", "flash_mma", "--cases", "F1"], ["bench"],
                                  ["bench", "--package", "evo_attn"]])
def test_gpu_commands_need_a_gpu(no_gpu: None, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err == NO_GPU


@pytest.mark.parametrize(("argv", "message"), [
    (["eval"], "give a FAMILY"),
    (["eval", "flash_mma", "--id", "abc"], "not both"),
    (["eval", "--id", "abc", "-p", "STAGES=2"], "-p applies to a FAMILY"),
    (["eval", "flash_mma", "--cases", "F99"], "unknown FAST case"),
    (["bench", "--package", "x", "--best", "2"], "choose one"),
])
def test_bad_arguments_are_one_line_errors(no_gpu: None, capsys: pytest.CaptureFixture[str], argv: list[str],
                                           message: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_speed_table_shows_speedups_and_missing_backends() -> None:
    case = {"case": "F1", "B": 1, "H": 8, "L": 512, "D": 64, "causal": True, "dtype": "fp16", "candidate_id": "c" * 64,
            "us": {"evo": 5.0, "sdpa_flash": 10.0, "sdpa_cudnn": None, "sdpa_efficient": 4.0, "sdpa_default": 5.0},
            "spread_us": {"evo": 0.2}, "tflops_evo": 53.7}
    console = Console(width=200, record=True)
    console.print(speed_table([case], "t", with_candidate=True))
    text = console.export_text()
    assert "cccccccccccc" in text and "F1c fp16" in text and "5.00 (0.20)" in text
    assert "2.00x" in text and "0.80x" in text and "1.00x" in text and "—" in text


def test_speed_table_names_grouped_uneven_problems_and_unavailable_baselines() -> None:
    case = {"case": "L3", "B": 1, "H": 32, "L": 512, "D": 128, "Hkv": 8, "Lk": 8192, "align": "bottom_right",
            "causal": True, "dtype": "bf16", "candidate_id": "c" * 64,
            "us": {"evo": 40.0, "sdpa_flash": 50.0, "fa4": None}, "spread_us": {"evo": 0.2}, "tflops_evo": 400.0,
            "unavailable": {"fa4": "flash_attn.cute is not importable: nope"}}
    console = Console(width=220, record=True)
    console.print(speed_table([case], "t"))
    text = console.export_text()
    assert "1,32/8,512/8192,128 br" in text and "1.25x" in text and "n/a" in text


def test_bench_times_the_llm_suite_beside_the_chosen_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    """evo bench --package NAME --cases llm --backends ...: each suite in its own dtype (llm: bf16)."""
    from evo import api

    asked: dict = {}

    def benchmark(ids, **kw):  # type: ignore[no-untyped-def]
        asked.update(kw, shapes=api.fast_shapes(kw["cases"], kw["dtype"]))
        raise api.EvoError("stop here")

    monkeypatch.setattr(api, "benchmark", benchmark)
    assert main(["bench", "--package", "pkg", "--cases", "llm", "--backends", "sdpa_cudnn,sdpa_flash,sdpa_default,fa4"]) == 2
    assert asked["backends"] == ["sdpa_cudnn", "sdpa_flash", "sdpa_default", "fa4"] and asked["dtype"] is None
    assert {s.dtype for s in asked["shapes"]} == {"bf16"} and "L3" in {s.case for s in asked["shapes"]}
    main(["bench", "--package", "pkg"])
    assert asked["backends"] == list(api.BASELINE_BACKENDS) and "fa4" in asked["backends"]
    assert asked["clocks"] == "steady"
    main(["bench", "--package", "pkg", "--clocks", "burst"])
    assert asked["clocks"] == "burst"


def test_bench_refuses_an_unknown_backend(no_gpu: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--package", "pkg", "--backends", "sdpa_flash,fa3"]) == 2
    assert "unknown baseline backend fa3" in capsys.readouterr().err


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """The commands' GPU worker swapped for a CPU stand-in (made-up timings), the tiny family."""
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES / "templates"))
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "candidates"))
    monkeypatch.setenv("COLUMNS", "200")  # paths are long under pytest-xdist: each on one line
    monkeypatch.syspath_prepend(str(FIXTURES / "worker"))
    targets = itertools.chain(["standins:serve_green"], itertools.repeat("standins:serve_bench"))
    monkeypatch.setattr("evo.api._target", lambda target: next(targets))
    return str(tmp_path / "evo.sqlite")


@needs_nvcc
def test_eval_then_bench_print_their_tables(standin: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evo.store import open_store

    assert main(["eval", "tiny", "-p", "ROWS=32", "--cases", "F1", "--db", standin]) == 0
    out = capsys.readouterr().out
    assert "tiny(ROWS=32" in out and "fast" in out and "F1 fp16" in out and "F1c fp16" in out
    with open_store(f"sqlite:///{standin}") as store:
        ((best, _),) = store.best(1)
    assert f"candidate {best.id[:12]};" in out   # the verdict names what was stored, for --id later
    assert main(["bench", "--id", best.id[:10], "--cases", "F1", "--db", standin,
                 "--out", str(tmp_path / "benchmarks")]) == 0
    out = capsys.readouterr().out
    assert "fidelity:" in out and "BENCHMARKS.md" in out and "burst clocks" not in out
    (record,) = (tmp_path / "benchmarks").glob("*.json")
    assert {c["candidate_id"] for c in json.loads(record.read_text())["cases"]} == {best.id}
    assert main(["bench", "--id", best.id[:10], "--cases", "F1", "--db", standin, "--clocks", "burst",
                 "--out", str(tmp_path / "benchmarks")]) == 0
    assert "burst clocks" in capsys.readouterr().out
    burst = json.loads(next((tmp_path / "benchmarks").glob("*-burst.json")).read_text())
    assert burst["clocks"] == "burst" and len(list((tmp_path / "benchmarks").glob("*.json"))) == 2

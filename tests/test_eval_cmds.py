"""evo eval / evo bench on a machine without a GPU: argument checks and the one-line error."""

from __future__ import annotations

import pytest
from rich.console import Console

from evo.cli import main
from evo.cli.eval_cmds import speed_table

NO_GPU = "evo: error: no CUDA GPU: GREEN and FAST need one (evo build compiles without)\n"


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("evo.worker.gpu_count", lambda: 0)


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

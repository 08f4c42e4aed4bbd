"""``evo bench-samplers`` end to end on a small synthetic recording."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evo.cli import main
from synthetic_sweep import make_recording


def test_the_command_writes_the_doc_and_every_run(tmp_path: Path, capsys) -> None:
    rec = make_recording(tmp_path / "sweep-synthetic.json.gz", seed=2)
    out, res = tmp_path / "bench.md", tmp_path / "bench.json"
    rc = main(["bench-samplers", "--recording", f"{rec}:flash_scalar", "--seeds", "2",
               "--samplers", "evo,random", "--kt", "none", "--jobs", "1", "--out", str(out),
               "--results", str(res), "--plot", str(tmp_path / "bench.png")])
    assert rc == 0
    text = out.read_text()
    assert "## `sweep-synthetic.json.gz`: flash_scalar" in text and "seeds 0..1 (2" in text.lower()
    data = json.loads(res.read_text())
    runs = data["recordings"][0]["runs"]
    assert {(r["sampler"], r["mode"]) for r in runs} == {(s, m) for s in ("evo", "random") for m in ("cold", "warm")}
    assert len(runs) == 8 and all(r["evaluations"] is None or r["evaluations"] <= 60 for r in runs)


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    assert main(["bench-samplers", "--recording", str(tmp_path / "none.json.gz")]) == 2
    assert "no recording at" in capsys.readouterr().err
    rec = make_recording(tmp_path / "sweep-synthetic.json.gz", seed=2)
    assert main(["bench-samplers", "--recording", str(rec), "--samplers", "nope", "--kt", "none"]) == 2
    assert "unknown sampler 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["--seeds", "0"], "0 is not in the range x>=1"),
    (["--batch", "0"], "0 is not in the range x>=1"),
    (["--jobs", "0"], "0 is not in the range x>=1"),
    (["--tolerance", "1"], "1.0 is not in the range 0<=x<1"),
    (["--baseline", "sdpa_nope"], "'sdpa_nope' is not one of"),
])
def test_out_of_range_options_are_usage_errors(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    assert main(["bench-samplers", "--out", str(tmp_path / "b.md"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Usage: evo bench-samplers") and message in err.splitlines()[-1]
    assert list(tmp_path.iterdir()) == []


def test_a_bad_start_mode_is_one_line(tmp_path: Path, capsys) -> None:
    rec = make_recording(tmp_path / "sweep-synthetic.json.gz", seed=2)
    assert main(["bench-samplers", "--recording", str(rec), "--modes", "hot", "--kt", "none",
                 "--out", str(tmp_path / "b.md")]) == 2
    assert capsys.readouterr().err == "evo: error: --modes takes cold and/or warm, not hot\n"
    assert not (tmp_path / "b.md").exists()

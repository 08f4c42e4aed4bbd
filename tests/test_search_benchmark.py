"""scripts/sampler_benchmark.py on a synthetic recording: runs every sampler and writes the table."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from synthetic_sweep import make_recording

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "sampler_benchmark.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("sampler_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["sampler_benchmark"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_writes_one_row_per_sampler(bench, tmp_path: Path) -> None:
    rec = make_recording(tmp_path / "sweep-synthetic.json.gz", seed=2)
    out = tmp_path / "bench.md"
    assert bench.main(["--recording", str(rec), "--seeds", "2", "--cases", "F1,F6", "--budget", "60",
                       "--out", str(out)]) == 0
    text = out.read_text()
    assert "`sweep-synthetic.json.gz` (synthetic" in text and "seeds 0..1 (2)" in text
    rows = [line.split(" | ")[0].lstrip("| ") for line in text.splitlines() if line.startswith("| ")][2:]
    assert rows == ["evo", "tpe", "random"]


def test_a_run_stops_at_the_target(bench, tmp_path: Path) -> None:
    rec = bench.load_recording(make_recording(tmp_path / "r.json.gz", seed=3))
    table = bench.score_table(rec, rec.shapes(), "sdpa_default")
    fams = [bench.load_family("flash_mma"), bench.load_family("flash_scalar")]
    easy = bench.run_one("random", 0, fams, table, target=0.0, budget=50, batch=4, max_trials=200)
    assert easy.evaluations is not None and easy.best >= 0.0
    impossible = bench.run_one("random", 0, fams, table, target=99.0, budget=20, batch=4, max_trials=200)
    assert (impossible.evaluations, impossible.trials >= 20) == (None, True)

"""The seed campaigns' record: rows from evaluations, BENCHMARKS.md sections, sweep plots (CPU)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from evo.products import seeds
from evo.products.bench import regenerate, render_benchmarks_md
from evo.results import CheckResult, Evaluation, Status, Timing
from evo.products.seedreport import heatmap, plot_names, section, sweep_table
from evo.family.space import make_candidate


def test_every_row_is_a_valid_candidate_of_a_seed_or_existing_family() -> None:
    for row in seeds.ROWS:
        assert make_candidate(row.family, row.params).family == row.family
        assert set(row.claimed_us) <= {s.case for s in row.shapes}


def test_the_ladder_is_the_stated_grid() -> None:
    assert [(s.B, s.H, s.L, s.D) for s in seeds.ladder_shapes()] == [(2, 12, n, 64) for n in (64, 128, 256, 512, 1024)]
    assert (seeds.WMMA_SHAPE.B, seeds.WMMA_SHAPE.H, seeds.WMMA_SHAPE.L, seeds.WMMA_SHAPE.D) == (1, 8, 512, 64)
    assert (seeds.PIPE_SHAPE.B, seeds.PIPE_SHAPE.H, seeds.PIPE_SHAPE.L, seeds.PIPE_SHAPE.D) == (1, 16, 1024, 64)


def test_the_trimmed_sweep_keeps_every_corner_of_the_grid() -> None:
    got = {(s.B, s.H, s.L, s.D) for s in seeds.sweep_shapes()}
    corners = {(b, h, L, d) for b in (1, 8) for h in (12, 24) for L in (512, 16384) for d in (64, 128, 256)}
    assert corners <= got and len(got) == 2 * 2 * 4 * 3


def evaluation(row: seeds.Row, evo_us: float) -> Evaluation:
    timings = []
    for s in row.shapes:
        timings += [Timing(s, "evo", evo_us, evo_us * 0.99, evo_us * 1.01), Timing(s, "sdpa_cudnn", 10.0, 9.9, 10.1),
                    Timing(s, "sdpa_default", 12.0, 11.9, 12.1)]
    check = CheckResult(row.shapes[0], 0, True, 1e-4, 1e-4, 3e-4)
    return Evaluation("b" * 64, Status.FAST, "all checks passed", checks=[check], timings=timings)


def record(tmp_path: Path | None = None) -> dict:
    rows = [seeds.row_record(r, "c" * 64, evaluation(r, 20.0)) for r in seeds.ROWS]
    points = [{"B": s.B, "H": s.H, "L": s.L, "D": s.D,
               "us": {"sdpa_flash": s.L / 10, "sdpa_cudnn": s.L / 12, "sdpa_default": s.L / 12}}
              for s in seeds.sweep_shapes()]
    points[0]["us"].pop("sdpa_flash")
    return {"kind": "seeds", "gpu": "NVIDIA H100 80GB HBM3", "git_sha": "abc1234", "created": "2026-11-24T10:00:00+00:00",
            "versions": {"torch": "2.11"}, "fast": {"rounds": 3, "reps": 5}, "rows": rows,
            "sweep": {"grid": {k: list(v) for k, v in seeds.SWEEP_GRID.items()}, "reps": 3,
                      "backends": ["sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_default"],
                      "points": points}}


def test_a_row_keeps_claims_beside_measurements() -> None:
    v0 = seeds.row_record(seeds.ROWS[0], "c" * 64, evaluation(seeds.ROWS[0], 250.0))
    by_case = {c["case"]: c for c in v0["cases"]}
    assert by_case["N64"]["claimed_us"] == 530.0 and by_case["N64"]["us"]["evo"] == 250.0
    assert by_case["N128"]["claimed_us"] is None and v0["claimed_on"] == "NVIDIA RTX 4090"
    assert v0["status"] == "fast" and v0["green_checks"] == 1


def test_the_section_shows_claim_gpu_measurement_and_speedup() -> None:
    text = section(record(), "seeds-x.json")
    assert "| ladder | V0 naive (`cccccccccc`) | 2,12,64,64 | 530.0 us (NVIDIA RTX 4090) | 20.00 us |" in text
    assert "| 0.500x | 0.600x | passed |" in text
    assert "| 26.40 us; 1.65 us/head (NVIDIA H100) | 20.00 us |" in text


def test_the_sweep_table_marks_the_fastest_and_refusals() -> None:
    table = sweep_table(record()["sweep"])
    assert "| 1,12,64 | 512 | refused | **42.67 us** | refused | 42.67 us | sdpa_cudnn |" in table


def test_plots_are_svg_with_one_panel_per_batch_and_heads(tmp_path: Path) -> None:
    rec = record()
    (tmp_path / "seeds-x.json").write_text(json.dumps(rec))
    (tmp_path / "plain.json").write_text(json.dumps({"gpu": "g", "created": "2026-11-20T00:00:00+00:00",
                                                     "git_sha": "s", "cases": []}))
    md = regenerate(tmp_path, tmp_path / "BENCHMARKS.md")
    names = plot_names("seeds-x.json", rec["sweep"])
    for n in names:
        root = ET.parse(tmp_path / "plots" / n).getroot()
        assert root.tag.endswith("svg")
    assert ET.fromstring(heatmap(rec["sweep"], "g")).tag.endswith("svg")
    text = md.read_text()
    assert text.index("Seed campaigns") < text.index("## g: candidates, no cases —")  # newest first, both kinds rendered
    assert "(benchmarks/plots/seeds-x-time-d64.svg)" in text


def test_a_failed_row_says_why() -> None:
    row = seeds.ROWS[1]
    rec = record() | {"rows": [seeds.row_record(row, "d" * 64, Evaluation("d" * 64, Status.RED, "G2 fp16 seed 0: NaN"))]}
    assert "| red: G2 fp16 seed 0: NaN |" in render_benchmarks_md([("s.json", rec)])


def test_unknown_group_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert seeds.main(["--only", "ladder,nope"]) == 2
    assert capsys.readouterr().err.strip() == "evo: error: unknown group nope; groups: ladder, wmma, pipeline, triton"

"""BENCHMARKS.md's search-throughput table (evo.products.throughput), from `evo run --summary-json` documents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evo.errors import EvoError
from evo.products import throughput
from evo.products.bench import regenerate, render_benchmarks_md

RUN = {"study": "tp", "device": "NVIDIA H100 80GB HBM3", "git_sha": "da5c8b5", "gpus": 1, "measured": 60,
       "wall_s": 393.4, "candidates_per_gpu_hour": 549.09, "candidates_per_busy_gpu_hour": 609.43,
       "gpu_s": {"GREEN": 22.0, "screen": 129.0, "full": 203.4}, "screened": 60, "kept": 13,
       "screen_errors": [0.01, -0.03, 0.002]}


def _write(folder: Path, name: str, doc: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(doc))


def test_a_row_gives_the_rate_where_the_gpu_went_the_keep_and_the_screen_error() -> None:
    text = throughput.table([("h100-20261127-da5c8b5-1gpu.json", RUN)])
    row = text.strip().splitlines()[-1]
    assert row == ("| 2026-11-27 | `da5c8b5` | NVIDIA H100 80GB HBM3 | 1 | 60 | 393 | **549** | 609 | "
                   "- / 22 / 129 / 203 | 60 / 13 | 1.0% (n=3) |  |")    # a record without a priming count


def test_a_full_only_run_a_note_and_a_name_without_a_date() -> None:
    full = dict(RUN, screened=0, kept=0, screen_errors=[], gpu_s={"GREEN": 45.0, "full": 208.0},
                note="a | b")
    row = throughput.table([("old.json", full)]).strip().splitlines()[-1]
    assert row.startswith("| ? |") and "| - / 45 / - / 208 | full only | - | a / b |" in row
    primed = dict(RUN, gpu_s={"prime": 21.4, "GREEN": 14.0, "screen": 392.0, "full": 117.0})
    assert "| 21 / 14 / 392 / 117 |" in throughput.table([("p.json", primed)])


def test_rows_newest_date_first() -> None:
    rows = throughput.table([("x-20261126-aaa-1gpu.json", RUN), ("x-20261127-bbb-1gpu.json", dict(RUN, gpus=2))])
    dates = [line.split("|")[1].strip() for line in rows.splitlines() if line.startswith("| 2026")]
    assert dates == ["2026-11-27", "2026-11-26"]


def test_no_records_no_section(tmp_path: Path) -> None:
    assert throughput.table([]) == "" and throughput.load(tmp_path) == []


def test_an_unreadable_record_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "throughput").mkdir()
    (tmp_path / "throughput" / "bad.json").write_text("{")
    with pytest.raises(EvoError, match="cannot read throughput record"):
        throughput.load(tmp_path)


def test_benchmarks_md_shows_the_section_and_bench_records_never_read_the_subfolder(tmp_path: Path) -> None:
    bench = tmp_path / "benchmarks"
    _write(bench / "throughput", "h100-20261127-da5c8b5-1gpu.json", RUN)
    assert "## Search throughput" in render_benchmarks_md([], throughput.load(bench))
    bench.mkdir(exist_ok=True)
    md = regenerate(bench)                  # no bench record: the throughput table alone
    text = md.read_text()
    assert "No benchmarks yet" in text and "| **549** |" in text


def test_parts_of_one_resumed_run_combine_into_one_record_with_the_rates_from_the_sums() -> None:
    one = dict(RUN, run_id=1, trials=70, wall_s=400.0, gpu_busy_share=0.8, counts={"pruned": 40, "fast": 13},
               stopped="time budget")
    two = dict(RUN, run_id=2, measured=30, trials=32, wall_s=200.0, gpu_busy_share=0.5, screened=30, kept=2,
               screen_errors=[0.02], counts={"pruned": 28, "red": 1}, gpu_s={"GREEN": 8.0, "screen": 50.0, "full": 20.0})
    got = throughput.combine([one, two])
    assert got["measured"] == 90 and got["trials"] == 102 and got["wall_s"] == 600.0
    assert got["candidates_per_gpu_hour"] == pytest.approx(540.0)                 # 90 in 600 s of one GPU
    assert got["gpu_busy_share"] == pytest.approx((320.0 + 100.0) / 600.0)
    assert got["candidates_per_busy_gpu_hour"] == pytest.approx(90 / 420.0 * 3600.0)
    assert got["counts"] == {"pruned": 68, "fast": 13, "red": 1} and got["gpu_s"]["full"] == pytest.approx(223.4)
    assert got["screened"] == 90 and got["kept"] == 15 and got["screen_errors"] == [0.01, -0.03, 0.002, 0.02]
    assert [p["run_id"] for p in got["parts"]] == [1, 2] and got["first_gpu_s"] is None   # older records: none
    starts = throughput.combine([dict(one, first_gpu_s=33.0), dict(two, first_gpu_s=31.0)])
    assert starts["first_gpu_s"] == 64.0                                             # each part pays its own start
    with pytest.raises(EvoError, match="differ in git_sha"):
        throughput.combine([one, dict(two, git_sha="other")])

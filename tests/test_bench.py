"""evo bench: the benchmark record, its file name, BENCHMARKS.md, and a run through a stand-in worker."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, UTC
from pathlib import Path

import pytest

from evo.products.bench import (
    COLUMNS, case_records, fidelity_summary, load_records, make_record, package_routes, regenerate,
    render_benchmarks_md, served_by,
    run_bench, write_record,
)
from evo.errors import EvoError
from evo.results import Evaluation, Shape, Status, Timing
from evo.gpu.worker import EvalRequest

FIXTURES = Path(__file__).parent / "fixtures"
SAMPLE = FIXTURES / "bench" / "nvidia-h100-80gb-hbm3-20261120-abc1234.json"
F1 = Shape("F1", 1, 8, 512, 64, False)
F3C = Shape("F3", 32, 8, 128, 64, True)
DEVICE = {"name": "NVIDIA H200", "torch": "2.11.0", "cuda": "13.0", "cudnn": "91300", "driver": "580.1", "sm": "90"}
CASE_KEYS = {"case", "B", "H", "L", "D", "causal", "dtype", "candidate_id", "us", "spread_us", "tflops_evo"}


def timing(shape: Shape, backend: str, median: float, p20: float | None = None, p80: float | None = None) -> Timing:
    return Timing(shape, backend, median, median if p20 is None else p20, median if p80 is None else p80, [median])


def fake_eval() -> Evaluation:
    ts = [timing(F1, "evo", 5.0, 4.9, 5.2), timing(F1, "sdpa_flash", 9.0), timing(F1, "sdpa_default", 8.0),
          timing(F3C, "sdpa_flash", 4.0), timing(F3C, "evo", 2.0)]
    return Evaluation("b" * 64, Status.FAST, timings=ts, device=DEVICE)


def test_case_records_fill_missing_backends_with_null() -> None:
    rows = case_records(fake_eval().timings, "cid")
    assert [r["case"] for r in rows] == ["F1", "F3"] and rows[1]["causal"] is True
    assert set(rows[0]) >= CASE_KEYS and set(rows[0]["us"]) == set(COLUMNS) == set(rows[0]["spread_us"])
    assert rows[0]["us"] == {"evo": 5.0, "sdpa_flash": 9.0, "sdpa_cudnn": None, "sdpa_efficient": None,
                             "sdpa_default": 8.0}
    assert rows[0]["spread_us"]["evo"] == pytest.approx(0.3)
    assert rows[0]["tflops_evo"] == pytest.approx(F1.flops / 5e-6 / 1e12)


def test_case_without_candidate_timing_is_left_out() -> None:
    assert case_records([timing(F1, "sdpa_flash", 9.0)], None) == []


def test_record_schema_and_file_name(tmp_path: Path) -> None:
    created = datetime(2026, 11, 21, 23, 30, tzinfo=UTC)
    record = make_record([("cid", fake_eval())], gemm_tflops=650.5, sha="deadbee", created=created)
    assert {"gpu", "versions", "git_sha", "created", "gemm_tflops", "cases"} <= set(record)
    assert record["versions"] == {"torch": "2.11.0", "cuda": "13.0", "cudnn": "91300", "driver": "580.1"}
    path = write_record(record, tmp_path / "benchmarks")
    assert path.name == "h200-20261121-deadbee.json"
    assert json.loads(path.read_text()) == record


def test_a_bf16_record_does_not_replace_the_fp16_one(tmp_path: Path) -> None:
    created = datetime(2026, 11, 21, 23, 30, tzinfo=UTC)
    fp16 = make_record([("cid", fake_eval())], gemm_tflops=650.5, sha="deadbee", created=created)
    bf16 = {**fp16, "package": "evoattn", "cases": [{**c, "dtype": "bf16"} for c in fp16["cases"]]}
    fp16 = {**fp16, "package": "evoattn"}
    paths = {write_record(r, tmp_path).name for r in (fp16, bf16)}
    assert paths == {"h200-20261121-deadbee-evoattn.json", "h200-20261121-deadbee-evoattn-bf16.json"}


def test_nothing_benchmarked_is_an_error() -> None:
    with pytest.raises(EvoError):
        make_record([], gemm_tflops=None, sha="x", created=datetime.now(UTC))


def test_benchmarks_md_from_sample_json() -> None:
    md = render_benchmarks_md(load_records(SAMPLE.parent))
    assert "## NVIDIA H100 80GB HBM3: candidates, fp16 — 2026-11-20, git abc1234" in md
    assert "torch 2.11.0+cu130 · CUDA 13.0 · cuDNN 91300 · driver 580.65.06 · dense fp16 GEMM 742 TFLOP/s" in md
    assert "| F1 | 1,8,512,64 | fp16 | `0123456789` | 5.00 (0.10) | 107.4 | 1.80x | 1.60x |" in md
    assert "| F7c | 2,16,8192,128 | fp16 | `0123456789` | 2000.0 (5.00) | 274.9 | 0.80x | 0.50x |" in md
    assert "| **geomean** | | | | | | 1.20x | 0.89x |" in md


def test_benchmarks_md_newest_first(tmp_path: Path) -> None:
    old = json.loads(SAMPLE.read_text())
    new = old | {"gpu": "NVIDIA H200", "created": "2026-11-21T08:00:00+00:00"}
    md = render_benchmarks_md([("a.json", old), ("b.json", new)])
    assert md.index("NVIDIA H200") < md.index("NVIDIA H100")


def test_benchmarks_md_without_records() -> None:
    assert "No benchmarks yet" in render_benchmarks_md([])


def test_regenerate_writes_beside_the_folder(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks"
    out.mkdir()
    shutil.copy(SAMPLE, out)
    md = regenerate(out)
    assert md == tmp_path / "BENCHMARKS.md" and "abc1234" in md.read_text()


def test_run_bench_through_a_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES / "worker"))
    monkeypatch.setattr("evo.paths.git_sha", lambda: "cafe1234567")
    targets = [(cid, EvalRequest(cid * 8, "x.cubin", (), fast_cases=(F1, F3C))) for cid in ("bad", "good", "also")]
    path, record, problems = run_bench(targets, out_dir=tmp_path / "benchmarks", target="standins:serve_bench")
    assert path.parent == tmp_path / "benchmarks" and path.name.endswith("-cafe123.json")
    assert [c["candidate_id"] for c in record["cases"]] == ["good", "good", "also", "also"]
    assert record["gemm_tflops"] == 700.0
    assert problems == ["bad: red: wrong answers"]
    assert "cafe123" in (tmp_path / "BENCHMARKS.md").read_text()


ROUTES = [
    {"head_dim": 64, "dtype": "fp16", "causal": False, "min_len": 1, "max_len": 724, "candidate": "abc123"},
    {"head_dim": 64, "dtype": "fp16", "causal": False, "min_len": 725, "max_len": None, "candidate": None},
]


@pytest.mark.parametrize("L,D,causal,want", [
    (512, 64, False, "abc123"), (724, 64, False, "abc123"), (725, 64, False, "sdpa"),
    (9000, 64, False, "sdpa"), (512, 64, True, "sdpa"), (512, 128, False, "sdpa")])
def test_package_rows_name_the_kernel_or_the_fallback(L: int, D: int, causal: bool, want: str) -> None:
    assert served_by(ROUTES, {"L": L, "D": D, "dtype": "fp16", "causal": causal}) == want


def test_package_routes_come_from_the_installed_dispatch_table(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "promoted_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    (pkg / "dispatch.json").write_text(json.dumps({"routes": ROUTES}))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert package_routes("promoted_pkg") == ROUTES
    with pytest.raises(EvoError, match="not installed"):
        package_routes("no_such_package_here")


def test_fallback_rows_are_labelled_in_benchmarks_md() -> None:
    record = json.loads(SAMPLE.read_text()) | {"package": "pkg"}
    record["cases"][0]["candidate_id"] = "sdpa"
    md = render_benchmarks_md([("x.json", record)])
    assert "SDPA (fallback)" in md and "not an evo kernel" in md


# ----------------------------------------------------------------------------- fidelity


def profiled_eval() -> Evaluation:
    from evo.results import Fidelity

    ts = [Timing(F1, "evo", 5.0, 4.9, 5.2, [5.0], fidelity=Fidelity(5.1, 5.05, 5.15, 4.6, 10, 5.12)),
          Timing(F1, "sdpa_flash", 9.0, 8.9, 9.1, [9.0], "FAST 9.00 us vs profiler 8.00 us (x1.125, over 5% apart)",
                 fidelity=Fidelity(8.0, 7.9, 8.1, 7.5, 10, 8.02)),
          Timing(F1, "sdpa_default", 8.0, 8.0, 8.0, [8.0])]
    return Evaluation("b" * 64, Status.FAST, timings=ts,
                      device=DEVICE | {"cubin_sha256": "c" * 64, "fast_outputs_checked": "63"})


def test_case_records_carry_fidelity_and_notes() -> None:
    (row,) = case_records(profiled_eval().timings, "cid")
    evo = row["fidelity"]["evo"]
    assert evo == {"fast_us": 5.0, "fast_spread_us": pytest.approx(0.3), "profiled_us": 5.1,
                   "profiled_spread_us": pytest.approx(0.1), "busy_us": 4.6, "replays": 10,
                   "events_under_profiler_us": 5.12, "ratio": pytest.approx(1.0)}   # 5.0 lies in [4.6, 5.1]
    assert row["fidelity"]["sdpa_default"] is None and "sdpa_cudnn" not in row["fidelity"]
    assert row["notes"] == {"sdpa_flash": "FAST 9.00 us vs profiler 8.00 us (x1.125, over 5% apart)"}


def test_record_names_the_cubin_and_the_checked_outputs() -> None:
    record = make_record([("cid", profiled_eval())], gemm_tflops=None, sha="x", created=datetime.now(UTC))
    assert record["candidates"] == [{"id": "cid", "cubin_sha256": "c" * 64, "fast_outputs_checked": 63}]


def test_fidelity_summary_counts_agreement_and_names_the_worst() -> None:
    record = make_record([("cid", profiled_eval())], gemm_tflops=None, sha="x", created=datetime.now(UTC))
    assert fidelity_summary(record) == ("fidelity: FAST within 5% of the profiler's [busy, span] on 1 of 2 timings "
                                        "(1 not profiled); worst x1.125 (F1 sdpa_flash)")
    assert "no profiler measurements" in fidelity_summary(json.loads(SAMPLE.read_text()))


def test_benchmarks_md_lists_the_timings_outside_the_fidelity_limit() -> None:
    record = make_record([("cid", profiled_eval())], gemm_tflops=None, sha="x",
                         created=datetime(2026, 11, 21, tzinfo=UTC))
    md = render_benchmarks_md([("x.json", record)])
    assert fidelity_summary(record) in md
    assert "| case | backend | FAST us (p80-p20) | span us (p80-p20) | FAST / [busy, span] | busy us | events us |" in md
    assert "| F1 | sdpa_flash | 9.00 (0.20) | 8.00 (0.20) | 1.125 ✗ | 7.50 | 8.02 |" in md
    assert "| F1 | evo |" not in md          # within the limit: counted in the summary line, not listed
    assert "FAST / [busy, span]" not in render_benchmarks_md(load_records(SAMPLE.parent))   # older records: none


def test_benchmarks_md_shows_the_newest_run_of_each_gpu_and_suite_and_indexes_all(tmp_path: Path) -> None:
    old = json.loads(SAMPLE.read_text())
    newer = old | {"created": "2026-11-21T08:00:00+00:00", "git_sha": "fedcba9"}
    package = old | {"package": "evoattn", "git_sha": "0a0a0a0"}
    md = render_benchmarks_md([("old.json", old), ("newer.json", newer), ("pkg.json", package)])
    latest, history = md.split("\n## History\n")
    assert "git fedcba9" in latest and "git abc1234" not in latest      # the older candidates run: indexed only
    assert "## NVIDIA H100 80GB HBM3: package `evoattn`, fp16" in latest
    for name in ("old.json", "newer.json", "pkg.json"):
        assert f"[{name}](benchmarks/{name})" in history
    assert history.index("fedcba9") < history.index("abc1234")       # newest first


def test_run_bench_asks_for_fidelity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES / "worker"))
    monkeypatch.setattr("evo.paths.git_sha", lambda: "cafe1234567")
    sent: list[dict] = []

    class Recorder:
        def __init__(self, device: int, target: str) -> None:
            pass

        def __enter__(self) -> Recorder:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def evaluate(self, request: EvalRequest, timeout_s: float) -> Evaluation:
            sent.append(dict(request.options))
            return profiled_eval()

    monkeypatch.setattr("evo.products.bench.Worker", Recorder)
    run_bench([("cid", EvalRequest("c" * 64, "x.cubin", (), fast_cases=(F1,)))], out_dir=tmp_path / "b")
    assert sent and sent[0]["fidelity"] is True and sent[0]["interleave"] is True

"""evo bench: the benchmark record, its file name, BENCHMARKS.md, and a run through a stand-in worker."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
import json
import shutil
from datetime import datetime, UTC
from pathlib import Path

import pytest

from evo.scoring import geomean
from evo.vocab import EVO
from evo.products.bench import (
    BURST_ROWS, COLUMNS, HISTORY_SESSIONS, NOT_RECORDED, case_records, fidelity_summary, kernel_records, load_records, make_record, package_dispatch,
    package_rules, regenerate, render_benchmarks_md, served_by, serving_route,
    run_bench, suite_of, write_record,
)
from evo.errors import EvoError
from evo.results import Evaluation, Shape, Status, Timing
from evo.gpu.worker import EvalRequest

FIXTURES = Path(__file__).parent / "fixtures"
SAMPLE = FIXTURES / "bench" / "nvidia-h100-80gb-hbm3-20261120-abc1234.json"
F1 = Shape("F1", 1, 8, 512, 64, False)
F3C = Shape("F3", 32, 8, 128, 64, True)
DEVICE = {"name": "NVIDIA H200", "torch": "2.11.0", "cuda": "13.0", "cudnn": "91300", "driver": "580.1", "sm": "90",
          "gpu_uuid": "5e" * 16}
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
                             "sdpa_default": 8.0, "fa4": None}
    assert rows[0]["spread_us"]["evo"] == pytest.approx(0.3)
    assert rows[0]["tflops_evo"] == pytest.approx(F1.flops / 5e-6 / 1e12)


def test_case_without_candidate_timing_is_left_out() -> None:
    assert case_records([timing(F1, "sdpa_flash", 9.0)], None) == []


def test_record_schema_and_file_name(tmp_path: Path) -> None:
    created = datetime(2026, 11, 21, 23, 30, tzinfo=UTC)
    record = make_record([("cid", fake_eval())], gemm_tflops=650.5, sha="deadbee", created=created)
    assert {"gpu", "versions", "git_sha", "created", "gemm_tflops", "cases"} <= set(record)
    assert record["board"] == "5e" * 16                         # the physical GPU the numbers came from
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
    assert "## NVIDIA H100 80GB HBM3: candidates, fast suite, fp16 — 2026-11-20, git abc1234" in md
    assert "torch 2.11.0+cu130 · CUDA 13.0 · cuDNN 91300 · driver 580.65.06 · dense fp16 GEMM 742 TFLOP/s" in md
    # TFLOP/s with its share of the run's dense GEMM rate (742): issue 33's "% of the dense GEMM rate per case"
    assert "| evo us (p80-p20) | TFLOP/s (% GEMM) |" in md
    assert "| F1 | 1,8,512,64 | fp16 | `0123456789` | 5.00 (0.10) | 107.4 (14%) | 1.80x | 1.60x |" in md
    assert "| F7c | 2,16,8192,128 | fp16 | `0123456789` | 2000.0 (5.00) | 274.9 (37%) | 0.80x | 0.50x |" in md
    assert "| **geomean** | | | | | | 1.20x | 0.89x |" in md


def test_benchmarks_md_newest_first(tmp_path: Path) -> None:
    old = json.loads(SAMPLE.read_text())
    new = old | {"gpu": "NVIDIA H200", "created": "2026-11-21T08:00:00+00:00"}
    md = render_benchmarks_md([("a.json", old), ("b.json", new)])
    assert md.index("NVIDIA H200") < md.index("NVIDIA H100")


def test_a_newer_package_record_supersedes_the_candidates_record_of_its_gpu_suite_and_dtype() -> None:
    cands = json.loads(SAMPLE.read_text())
    package = cands | {"package": "evoattn", "created": "2026-11-21T08:00:00+00:00"}
    heading = "## NVIDIA H100 80GB HBM3: candidates, fast suite, fp16"
    md = render_benchmarks_md([("c.json", cands), ("p.json", package)])
    assert heading not in md and "package `evoattn`, fast suite, fp16" in md
    assert "](benchmarks/c.json)" in md.split("## History")[1]                  # still indexed
    newer = cands | {"created": "2026-11-22T08:00:00+00:00"}                    # a search after the package
    assert heading in render_benchmarks_md([("c.json", newer), ("p.json", package)])
    other = {**package, "cases": [{**c, "dtype": "bf16"} for c in package["cases"]]}
    assert heading in render_benchmarks_md([("c.json", cands), ("p.json", other)])   # another dtype


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
    assert record["gemm_tflops"] == 700.0 and record["gemm_dtype"] == "fp16"
    assert problems == ["bad: red: wrong answers"]
    assert "cafe123" in (tmp_path / "BENCHMARKS.md").read_text()


def test_a_bf16_bench_measures_its_gemm_yardstick_in_bf16(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The % of the dense GEMM rate compares a case with a GEMM of its own dtype, and the page says which."""
    monkeypatch.syspath_prepend(str(FIXTURES / "worker"))
    monkeypatch.setattr("evo.paths.git_sha", lambda: "cafe1234567")
    cases = tuple(dataclasses.replace(s, dtype="bf16") for s in (F1, F3C))
    _, record, _ = run_bench([("good", EvalRequest("good" * 8, "x.cubin", (), fast_cases=cases))],
                             out_dir=tmp_path / "benchmarks", target="standins:serve_bench")
    assert record["gemm_dtype"] == "bf16"
    assert "dense bf16 GEMM 700 TFLOP/s" in (tmp_path / "BENCHMARKS.md").read_text()


ROUTES = [
    {"head_dim": 64, "dtype": "fp16", "causal": False, "min_len": 1, "max_len": 724, "candidate": "abc123"},
    {"head_dim": 64, "dtype": "fp16", "causal": False, "min_len": 725, "max_len": None, "candidate": None},
]
LIMITS = {"max_bh": 64, "max_group": 8, "cross": True}
V2_ROUTES = [
    {"head_dim": 128, "dtype": "bf16", "causal": True, "min_len": 1, "max_len": 1448, "candidate": "short",
     "aligns": ["top_left", "bottom_right"], **LIMITS},
    {"head_dim": 128, "dtype": "bf16", "causal": True, "min_len": 1449, "max_len": 16384, "candidate": "long",
     "aligns": ["bottom_right"], **LIMITS},
]


@pytest.mark.parametrize("L,D,causal,want", [
    (512, 64, False, "abc123"), (724, 64, False, "abc123"), (725, 64, False, "sdpa"),
    (9000, 64, False, "sdpa"), (512, 64, True, "sdpa"), (512, 128, False, "sdpa")])
def test_package_rows_name_the_kernel_or_the_fallback(L: int, D: int, causal: bool, want: str) -> None:
    assert served_by(ROUTES, {"B": 1, "H": 8, "L": L, "D": D, "dtype": "fp16", "causal": causal}) == want


@pytest.mark.parametrize("shape,want", [
    (Shape("L3", 1, 32, 512, 128, True, "bf16", 8, 8192, "bottom_right"), "long"),   # bucket of max(Lq, Lk)
    (Shape("L3", 1, 32, 512, 128, True, "bf16", 8, 8192), "sdpa"),                   # top left: not verified there
    (Shape("L8", 2, 32, 512, 128, True, "bf16", 8), "short"),
    (Shape("L8", 4, 32, 512, 128, True, "bf16", 8), "sdpa"),                         # B * Hq 128 > 64
    (Shape("L6", 1, 32, 512, 128, True, "bf16", 1), "sdpa"),                         # Hq / Hkv 32 > 8
    (Shape("X", 1, 8, 100, 128, True, "bf16", 8, 50, "bottom_right"), "short"),
    (Shape("X", 1, 8, 100, 128, True, "bf16", 8, 16385, "bottom_right"), "sdpa"),  # past the last top
])
def test_package_rows_follow_the_packages_v2_rule(shape: Shape, want: str) -> None:
    """What the package's launcher does (its _routes.py): bucket of the longer length, heads, group,
    and the causal alignment with Lq != Lk; a route that does not say serves equal lengths only."""
    case = case_records([timing(shape, "evo", 1.0)], None)[0]
    assert served_by(V2_ROUTES, case) == want
    assert served_by([{**r, "cross": False} for r in V2_ROUTES], case) == (want if shape.Lk == shape.L else "sdpa")


@pytest.mark.parametrize("shape,want", [
    (Shape("L3", 1, 32, 512, 128, True, "bf16", 8, 8192, "bottom_right"), "chunky"),   # a chunk: its own route
    (Shape("F7", 1, 16, 8192, 128, True, "bf16"), "long"),                           # equal lengths: the other
    (Shape("X", 1, 8, 2048, 128, True, "bf16", 8, 2048), "long"),                   # at max_lq, not a chunk here
    (Shape("X", 1, 8, 100, 128, True, "bf16", 8, 1000, "bottom_right"), "short"),   # below the chunk route's caches
])
def test_package_rows_try_a_chunk_route_before_the_others(shape: Shape, want: str) -> None:
    """A chunk route (at most max_lq query rows on caches from min_len) is tried before the key's
    other routes, after its decode routes; what it does not take falls through (the launcher's rule)."""
    chunk = {**V2_ROUTES[1], "candidate": "chunky", "chunk": True, "max_lq": 2048, "min_len": 2049}
    case = case_records([timing(shape, "evo", 1.0)], None)[0]
    assert served_by([*V2_ROUTES, chunk], case) == want


def test_package_routes_come_from_the_installed_dispatch_table(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "promoted_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    (pkg / "dispatch.json").write_text(json.dumps({"routes": ROUTES}))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert package_dispatch("promoted_pkg") == {"routes": ROUTES, "kernels": []}
    with pytest.raises(EvoError, match="not installed"):
        package_dispatch("no_such_package_here")


EVIDENCE = {"registers": 168, "stack_bytes": 0, "local_bytes": 0, "shared_bytes": 1024,
            "setmaxnreg": {"producer": [24], "consumer": [240]},
            "sass": {"HGMMA": 32, "HMMA": 0, "LDSM": 0, "UTMALDG": 24, "UTMASTG": 2, "LDGSTS": 0, "MUFU.EX2": 132,
                     "SYNCS": 96, "BAR": 27, "STL": 0, "LDL": 0, "instructions": 3608}}
DISPATCH = {"routes": [{**ROUTES[0], "kernel": 0}, ROUTES[1],
                       {**ROUTES[0], "causal": True, "kernel": 1},
                       {**ROUTES[0], "layout": "lens", "max_lq": 1, "cross": True, "kernel": 0}],
            "kernels": [{"id": "abc123", "smem_bytes": 49152}, {"id": "abc123", "smem_bytes": 65536}]}
FULL, CAUSAL = "evo_attn_d64_fp16_full", "evo_attn_d64_fp16_causal"


def test_kernel_records_carry_the_evidence_of_each_kernel_that_served() -> None:
    provenance = {"kernels": [{"id": "abc123", "evidence": {FULL: EVIDENCE, CAUSAL: {"unavailable": "why"}}}]}
    cases = [{"B": 1, "H": 8, "L": L, "D": 64, "dtype": "fp16", "causal": causal, **extra}
             for L, causal, extra in [(512, False, {}), (600, False, {}), (9000, False, {}), (512, True, {}),
                                      (1, False, {"layout": "lens", "Lk": 600})]]
    records = kernel_records(DISPATCH, provenance, [serving_route(DISPATCH["routes"], c) for c in cases])
    assert [(k["kernel"], k["layout"], k["smem_dynamic_bytes"]) for k in records] == [
        (FULL, "contiguous", 49152), (CAUSAL, "contiguous", 65536), (FULL + "_lens", "lens", 49152)]
    assert records[0] | {"evidence": None} == {"candidate": "abc123", "kernel": FULL, "head_dim": 64, "dtype": "fp16",
                                               "causal": False, "layout": "contiguous", "smem_dynamic_bytes": 49152,
                                               "evidence": None}
    assert [k["evidence"] for k in records] == [EVIDENCE, {"unavailable": "why"}, NOT_RECORDED]
    older = kernel_records(DISPATCH, {"kernels": [{"id": "abc123"}]},                # promoted before evidence
                           [serving_route(DISPATCH["routes"], cases[0])])
    assert older[0]["evidence"] == NOT_RECORDED


def test_a_package_bench_lists_the_kernels_that_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "promoted_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    (pkg / "dispatch.json").write_text(json.dumps(DISPATCH))
    (pkg / "PROVENANCE.json").write_text(json.dumps({"kernels": [{"id": "abc123", "evidence": {FULL: EVIDENCE}}]}))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(FIXTURES / "worker"))
    target = (None, EvalRequest("package:promoted_pkg", "", (), fast_cases=(F1, F3C), options={"package": "promoted_pkg"}))
    _, record, _ = run_bench([target], out_dir=tmp_path / "benchmarks", package="promoted_pkg",
                             target="standins:serve_bench")
    assert [c["candidate_id"] for c in record["cases"]] == ["abc123", "abc123"]
    assert [(k["candidate"], k["kernel"], k["evidence"]) for k in record["kernels"]] == [
        ("abc123", FULL, EVIDENCE), ("abc123", CAUSAL, NOT_RECORDED)]
    md = (tmp_path / "BENCHMARKS.md").read_text()
    assert "| D64 fp16 full | `abc123` | 168 | 24 / 240 | 0 | 1024 + 49152 | 32 | 0 | 24 | 132 | 3608 |" in md


def test_a_package_row_names_the_kernel_by_the_packages_own_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule is the one the installed package ships (its _routes.py, read without importing the
    package): a package whose rule sends everything to its last route is benched that way, and a
    package without the file is read by evo's copy, the text promote ships."""
    for name, rule in (("own_rule_pkg", "def route_for(routes, p):\n    return routes[-1], ''\n"
                                        "from typing import NamedTuple\n"
                                        "class Problem(NamedTuple):\n    B: int\n    Hq: int\n    Hkv: int\n"
                                        "    Lq: int\n    Lk: int\n    D: int\n    dtype: str\n    causal: bool\n"
                                        "    align: str\n    layout: str\n"), ("no_rule_pkg", None)):
        pkg = tmp_path / name
        pkg.mkdir()
        (pkg / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
        if rule:
            (pkg / "_routes.py").write_text(rule)
    monkeypatch.syspath_prepend(str(tmp_path))
    case = {"B": 1, "H": 8, "L": 512, "D": 64, "dtype": "fp16", "causal": False}
    routes = [*ROUTES, {**ROUTES[0], "candidate": "last"}]
    assert served_by(routes, case, package_rules("own_rule_pkg")) == "last"
    assert served_by(routes, case, package_rules("no_rule_pkg")) == served_by(routes, case) == "abc123"
    assert package_rules("no_rule_pkg") is package_rules()

def test_benchmarks_md_shows_a_package_records_kernels_under_its_table() -> None:
    kernel = {"candidate": "0123456789abcdef", "head_dim": 128, "dtype": "bf16", "causal": True, "layout": "contiguous",
              "smem_dynamic_bytes": 199680}
    spilled = {**EVIDENCE, "local_bytes": 8, "setmaxnreg": None, "sass": {**EVIDENCE["sass"], "STL": 2, "LDL": 3}}
    record = json.loads(SAMPLE.read_text()) | {"package": "pkg", "kernels": [
        kernel | {"evidence": EVIDENCE}, kernel | {"layout": "paged", "smem_dynamic_bytes": None, "evidence": spilled},
        kernel | {"causal": False, "evidence": NOT_RECORDED},
        kernel | {"head_dim": 64, "evidence": {"unavailable": "cuobjdump not found"}}]}
    md = render_benchmarks_md([("x.json", record)])
    table = md[md.index("Kernels served"):]
    assert md.index("| **geomean**") < md.index("Kernels served")
    assert ("| kernel | candidate | registers | setmaxnreg | spills | shared B | HGMMA | LDSM | UTMALDG | MUFU.EX2 "
            "| instructions |") in table
    assert "| D128 bf16 causal | `0123456789` | 168 | 24 / 240 | 0 | 1024 + 199680 | 32 | 0 | 24 | 132 | 3608 |" in table
    assert "| D128 bf16 causal paged | `0123456789` | 168 | — | 8 B, 2 STL / 3 LDL | 1024 | 32 |" in table
    assert "| D128 bf16 full | `0123456789` | not recorded | — | — | — | — | — | — | — | — |" in table
    assert "| D64 bf16 causal | `0123456789` | unavailable: cuobjdump not found | — |" in table
    assert "Kernels served" not in render_benchmarks_md([("x.json", json.loads(SAMPLE.read_text()) | {"package": "pkg"})])


def test_fallback_rows_are_labelled_in_benchmarks_md() -> None:
    record = json.loads(SAMPLE.read_text()) | {"package": "pkg"}
    assert "not an evo kernel" not in render_benchmarks_md([("x.json", record)])   # no fallback row, no note
    record["cases"][0]["candidate_id"] = "sdpa"
    md = render_benchmarks_md([("x.json", record)])
    assert "SDPA (fallback)" in md and "not an evo kernel" in md


def test_a_bench_sessions_kernels_are_listed_once_under_its_last_section() -> None:
    kernel = {"candidate": "0123456789abcdef", "head_dim": 128, "dtype": "fp16", "causal": True, "layout": "contiguous",
              "smem_dynamic_bytes": 199680, "evidence": EVIDENCE}
    fast = json.loads(SAMPLE.read_text()) | {"package": "pkg", "kernels": [kernel]}
    llm = fast | {"created": "2026-11-21T08:00:00+00:00", "cases": [{**c, "case": "L1"} for c in fast["cases"]],
                  "kernels": [kernel, kernel | {"head_dim": 64}]}
    md = render_benchmarks_md([("f.json", fast), ("l.json", llm)])
    assert md.count("Kernels served") == 1
    assert md.count("| D128 fp16 causal | `0123456789` |") == 1 and md.count("| D64 fp16 causal | `0123456789` |") == 1
    assert md.index("Kernels served") > md.index("f.json`")             # after the session's last (older) section


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
    assert "## NVIDIA H100 80GB HBM3: package `evoattn`, fast suite, fp16" in latest
    for name in ("old.json", "newer.json", "pkg.json"):
        assert f"](benchmarks/{name})" in history
    assert history.index("fedcba9") < history.index("abc1234")       # newest first


def test_the_history_gives_a_bench_session_one_row_and_each_record_a_link() -> None:
    fp16 = json.loads(SAMPLE.read_text()) | {"package": "evoattn", "git_sha": "0a0a0a0"}
    bf16 = fp16 | {"cases": [{**c, "dtype": "bf16"} for c in fp16["cases"]]}
    other = fp16 | {"git_sha": "1b1b1b1"}
    history = render_benchmarks_md([("f.json", fp16), ("b.json", bf16), ("o.json", other)]).split("## History")[1]
    rows = [line for line in history.splitlines() if line.startswith("| 20")]
    assert len(rows) == 2                                              # two commits, two sessions
    session = next(r for r in rows if "0a0a0a0" in r)
    assert "package `evoattn`" in session
    assert f"fast fp16, {len(fp16['cases'])}, " in session and "](benchmarks/f.json)" in session
    assert f"fast bf16, {len(bf16['cases'])}, " in session and "](benchmarks/b.json)" in session


def test_sessions_past_the_newest_share_a_row_per_day_and_gpu_and_every_record_stays_linked() -> None:
    """HISTORY_SESSIONS sessions keep a row each; the older ones, two days of them here, take one
    row per day (and GPU) whose links name their commits."""
    base = json.loads(SAMPLE.read_text())
    n = HISTORY_SESSIONS + 6
    records = [(f"r{i}.json", base | {"git_sha": f"{i:07x}", "created": f"2026-11-{10 + i // 4:02d}T0{i % 4}:00:00+00:00"})
               for i in range(n)]
    history = render_benchmarks_md(records).split("## History")[1]
    rows = [line for line in history.splitlines() if line.startswith("| 20")]
    old_days = {r[1]["created"][:10] for r in records[:6]}
    assert len(rows) == HISTORY_SESSIONS + len(old_days)
    assert all(f"](benchmarks/r{i}.json)" in history for i in range(n))
    folded = [r for r in rows if " sessions | " in r]
    assert len(folded) == len(old_days) and f"[{0:07x} fast fp16, " in folded[-1]



def recording_worker(sent: list[dict], answer: Callable[[], Evaluation]) -> type:
    """A stand-in for the GPU worker class: each request's options go to ``sent``, ``answer()`` back."""

    class Recorder:
        def __init__(self, device: int, target: str) -> None:
            pass

        def __enter__(self) -> Recorder:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def evaluate(self, request: EvalRequest, timeout_s: float) -> Evaluation:
            sent.append(dict(request.options))
            return answer()

    return Recorder


def test_run_bench_asks_for_fidelity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES / "worker"))
    monkeypatch.setattr("evo.paths.git_sha", lambda: "cafe1234567")
    sent: list[dict] = []

    monkeypatch.setattr("evo.products.bench.Worker", recording_worker(sent, profiled_eval))
    run_bench([("cid", EvalRequest("c" * 64, "x.cubin", (), fast_cases=(F1,)))], out_dir=tmp_path / "b")
    assert sent and sent[0]["fidelity"] is True and sent[0]["interleave"] is True


# ----------------------------------------------------------------------------- ABI v2 records, fa4


CHUNK = Shape("L3", 1, 32, 512, 128, True, "bf16", 8, 8192, "bottom_right")
TOP_LEFT = Shape("X1", 1, 32, 512, 128, True, "bf16", 8, 8192)


def llm_eval() -> Evaluation:
    """A bench evaluation of the llm suite where flash_attn was not importable."""
    why = "flash_attn.cute is not importable: ModuleNotFoundError: No module named 'flash_attn'"
    ts = [timing(CHUNK, "evo", 40.0), timing(CHUNK, "sdpa_flash", 50.0), timing(CHUNK, "sdpa_cudnn", 45.0)]
    unavailable = {CHUNK.tag: {"fa4": why, "sdpa_efficient": "refused the case: RuntimeError: No available kernel."}}
    return Evaluation("b" * 64, Status.FAST, timings=ts, device=DEVICE | {"unavailable": json.dumps(unavailable)})


def test_a_record_names_the_whole_problem_every_backends_time_and_tflops() -> None:
    record = make_record([("cid", llm_eval())], gemm_tflops=None, sha="x", created=datetime(2026, 11, 27, tzinfo=UTC),
                         backends=("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_default", "fa4"))
    (case,) = record["cases"]
    assert {k: case[k] for k in ("B", "Hq", "Hkv", "Lq", "Lk", "D", "dtype", "causal", "align", "candidate_id")} == \
        {"B": 1, "Hq": 32, "Hkv": 8, "Lq": 512, "Lk": 8192, "D": 128, "dtype": "bf16", "causal": True,
         "align": "bottom_right", "candidate_id": "cid"}
    assert case["us"] == {"evo": 40.0, "sdpa_flash": 50.0, "sdpa_cudnn": 45.0, "sdpa_efficient": None,
                          "sdpa_default": None, "fa4": None}
    assert CHUNK.visible_pairs == sum(7680 + i + 1 for i in range(512))   # row i sees keys j <= i + 7680
    assert case["tflops"]["evo"] == pytest.approx(4 * 32 * 128 * CHUNK.visible_pairs / 40e-6 / 1e12)
    assert case["tflops"]["sdpa_flash"] == pytest.approx(CHUNK.flops / 50e-6 / 1e12) and case["tflops"]["fa4"] is None
    assert record["backends"] == ["sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_default", "fa4"]


def test_a_baseline_that_could_not_time_a_case_says_so_in_the_record() -> None:
    """fa4 where flash_attn does not import: "fa4: unavailable (<why>)" per case, never dropped."""
    (case,) = make_record([("cid", llm_eval())], gemm_tflops=None, sha="x", created=datetime.now(UTC))["cases"]
    assert case["unavailable"]["fa4"].startswith("flash_attn.cute is not importable: ModuleNotFoundError")
    assert case["notes"]["fa4"] == f"unavailable ({case['unavailable']['fa4']})"
    assert case["notes"]["sdpa_efficient"] == "unavailable (refused the case: RuntimeError: No available kernel.)"
    md = render_benchmarks_md([("x.json", make_record([("cid", llm_eval())], gemm_tflops=None, sha="x",
                                                      created=datetime(2026, 11, 27, tzinfo=UTC)))])
    assert "| L3c | 1,32/8,512/8192,128 br | bf16 | `cid` | 40.00 (0.00) |" in md
    assert "| 1.25x | — | unavailable |" in md                      # vs sdpa_flash, sdpa_default, fa4
    assert "fa4: unavailable on L3c (flash_attn.cute is not importable" in md


def test_fa4_runs_only_the_masks_it_can_express(monkeypatch: pytest.MonkeyPatch) -> None:
    """FA4 aligns a causal mask at the bottom right: a top-left mask with Lq != Lk is reported, not
    timed against the wrong problem; where flash_attn does not import, that is the reason."""
    from evo.gpu import timing as t

    monkeypatch.setattr(t, "_fa4", lambda: (None, "flash_attn.cute is not importable: ModuleNotFoundError: x"))
    assert t.fa4_unavailable(CHUNK) == "flash_attn.cute is not importable: ModuleNotFoundError: x"
    assert t.baseline_unavailable("sdpa_flash", TOP_LEFT) == ""
    monkeypatch.setattr(t, "_fa4", lambda: (lambda *a, **k: None, ""))
    assert t.fa4_unavailable(CHUNK) == "" and t.fa4_unavailable(F1) == "" and t.fa4_unavailable(F3C) == ""
    assert "top left with Lq != Lk" in t.fa4_unavailable(TOP_LEFT)
    assert t.fa4_unavailable(Shape("X2", 1, 8, 512, 64, False, "fp16", 8, 1024)) == ""   # not causal: any lengths


def test_fa4_is_called_on_transposed_views_with_its_own_grouped_heads(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from evo.gpu import timing as t

    seen: list[tuple] = []

    def flash_attn_func(q, k, v, causal=False, softmax_scale=None):  # type: ignore[no-untyped-def]
        seen.append((tuple(q.shape), tuple(k.shape), q.stride(-1), causal, softmax_scale))
        return q.clone(), None

    monkeypatch.setattr(t, "_fa4", lambda: (flash_attn_func, ""))
    q, k = torch.zeros(1, 32, 512, 128), torch.zeros(1, 8, 8192, 128)
    out = t.baseline_op("fa4", CHUNK)(q, k, k, None)
    assert seen == [((1, 512, 32, 128), (1, 8192, 8, 128), 1, True, None)] and tuple(out.shape) == (1, 512, 32, 128)


def test_time_case_reports_unavailable_baselines_before_running_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    from evo.gpu import timing as t

    monkeypatch.setattr(t, "_fa4", lambda: (None, "flash_attn.cute is not importable: nope"))
    monkeypatch.setattr(t, "_attempts", lambda ops, shape, **kw: (t.Attempt({}, {}), 1))
    got = t.time_case(None, CHUNK, ("sdpa_flash", "fa4"))
    assert got.unavailable == {"fa4": "flash_attn.cute is not importable: nope"} and got.timings == []


def test_run_bench_asks_for_the_backends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("evo.paths.git_sha", lambda: "cafe1234567")
    sent: list[dict] = []

    monkeypatch.setattr("evo.products.bench.Worker", recording_worker(sent, llm_eval))
    _, record, _ = run_bench([("cid", EvalRequest("c" * 64, "x.cubin", (), fast_cases=(CHUNK,)))],
                             out_dir=tmp_path / "b", backends=("sdpa_cudnn", "sdpa_flash", "sdpa_default", "fa4"))
    assert sent[0]["backends"] == ["sdpa_cudnn", "sdpa_flash", "sdpa_default", "fa4"]
    assert record["backends"] == sent[0]["backends"] and "fa4" in record["cases"][0]["unavailable"]


def test_the_worker_hands_the_unavailable_baselines_to_the_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """evo.gpu.evaluate._fast stores what time_case could not time, per case tag, in the
    evaluation's device info; make_record reads it back per case."""
    from types import SimpleNamespace

    from evo.gpu import evaluate, timing as t

    def time_case(cand, shape, backends, **kw):  # type: ignore[no-untyped-def]
        return t.CaseTiming([timing(shape, "evo", 40.0), timing(shape, "sdpa_flash", 50.0)],
                            unavailable={"fa4": "flash_attn.cute is not importable: nope"})

    monkeypatch.setattr(t, "time_case", time_case)
    monkeypatch.setattr(evaluate, "progress", lambda note: None)
    ev = Evaluation("b" * 64, Status.GREEN, device=dict(DEVICE))
    plan = evaluate.Plan.of({"interleave": True, "backends": ["sdpa_flash", "fa4"]})
    evaluate._fast(lambda *a, **k: None, None, [CHUNK], plan, SimpleNamespace(), ev)
    assert ev.status is Status.FAST
    assert json.loads(ev.device["unavailable"]) == {CHUNK.tag: {"fa4": "flash_attn.cute is not importable: nope"}}
    (case,) = make_record([("cid", ev)], gemm_tflops=None, sha="x", created=datetime.now(UTC))["cases"]
    assert case["notes"]["fa4"] == "unavailable (flash_attn.cute is not importable: nope)"


def test_another_suites_record_does_not_replace_the_fast_ones(tmp_path: Path) -> None:
    """The LLM suite's fp16 run of a package on the same day and sha is a file of its own (the H100
    run of 762e355 wrote both suites' fp16 records to one name, the later replacing the earlier)."""
    created = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
    fast = {**make_record([("cid", fake_eval())], gemm_tflops=650.5, sha="deadbee", created=created),
            "package": "evoattn"}
    llm = {**fast, "cases": [{**c, "case": "L1"} for c in fast["cases"]]}
    llm_bf16 = {**llm, "cases": [{**c, "dtype": "bf16"} for c in llm["cases"]]}
    paths = {write_record(r, tmp_path).name for r in (fast, llm, llm_bf16)}
    assert paths == {"h200-20261127-deadbee-evoattn.json",
                     "h200-20261127-deadbee-evoattn-llm.json", "h200-20261127-deadbee-evoattn-llm-bf16.json"}


def test_a_burst_record_is_a_file_of_its_own_read_beside_its_steady_twin(tmp_path: Path) -> None:
    """`evo bench --clocks burst` of the same package on the same day neither replaces the steady
    record nor takes its place in BENCHMARKS.md: the steady one is shown in full, the burst one as
    a row of geometric means beside the steady one's."""
    created = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)
    steady = {**make_record([("cid", fake_eval())], gemm_tflops=650.5, sha="deadbee", created=created),
              "package": "evoattn"}
    burst = {**steady, "clocks": "burst", "created": "2026-11-28T09:05:00+00:00",
             "cases": [{**c, "us": {**c["us"], EVO: c["us"][EVO] and c["us"][EVO] * 0.9}} for c in steady["cases"]]}
    assert steady["clocks"] == "steady"
    names = [write_record(r, tmp_path).name for r in (steady, burst)]
    assert names == ["h200-20261128-deadbee-evoattn.json", "h200-20261128-deadbee-evoattn-burst.json"]
    assert suite_of(burst) == suite_of(steady) + " (burst clocks)"
    md = render_benchmarks_md([(names[0], steady), (names[1], burst)])
    assert md.count("## NVIDIA H200: package `evoattn`") == 1 and "## Steady and burst clocks" in md
    (row,) = [line for line in md.splitlines() if line.startswith("| NVIDIA H200 | deadbee | package")]
    before = geomean([c["us"]["sdpa_default"] / c["us"][EVO] for c in steady["cases"]
                      if c["us"]["sdpa_default"] and c["us"][EVO]])
    assert f"{before:.2f}x -> {before / 0.9:.2f}x" in row and names[1] in row


def test_the_clocks_table_keeps_the_newest_burst_records_and_history_every_one() -> None:
    """BENCHMARKS.md stays a page: the steady-and-burst table shows the newest BURST_ROWS burst records
    and says how many more History indexes; History links every one."""
    records = []
    for day in range(1, BURST_ROWS + 3):
        created = datetime(2026, 11, day, 9, 0, tzinfo=UTC)
        steady = {**make_record([("cid", fake_eval())], gemm_tflops=650.5, sha=f"{day:07x}", created=created),
                  "package": "evoattn"}
        burst = {**steady, "clocks": "burst", "created": created.replace(minute=5).isoformat()}
        records += [(f"s{day}.json", steady), (f"b{day}.json", burst)]
    md = render_benchmarks_md(records)
    table = md.split("## Steady and burst clocks")[1].split("\n## ")[0]
    shown = [line for line in table.splitlines() if line.startswith("| NVIDIA H200 |")]
    newest = range(BURST_ROWS + 2, 2, -1)
    assert [line.split(" | ")[1] for line in shown] == [f"{day:07x}" for day in newest]
    assert "the newest 4 burst records, 2 older ones under [History](#history)" in table
    history = md.split("## History")[1]
    assert all(f"(benchmarks/b{day}.json)" in history for day in range(1, BURST_ROWS + 3))


def test_run_bench_asks_for_the_clock_protocol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("evo.paths.git_sha", lambda: "cafe1234567")
    sent: list[dict] = []

    monkeypatch.setattr("evo.products.bench.Worker", recording_worker(sent, llm_eval))
    path, record, _ = run_bench([("cid", EvalRequest("c" * 64, "x.cubin", (), fast_cases=(CHUNK,)))],
                                out_dir=tmp_path / "b", clocks="burst")
    assert sent[0]["clocks"] == "burst" and record["clocks"] == "burst" and path.name.endswith("-burst.json")

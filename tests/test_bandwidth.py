"""The decode report's bandwidth (evo.gpu.bandwidth, evo bench; docs/decode.md, "GB/s") without a GPU:
the bytes each decode case must move (grouped-query heads read each K/V head once; ragged and paged
caches their own keys), the read buffers' sizes, the HBM peaks by GPU name, the bench record's
fields and BENCHMARKS.md's table, the read request run_bench sends to the worker; and, with nvcc and
cuobjdump, the read kernel's machine code: 16-byte loads and nothing else of note."""

from __future__ import annotations

import collections
import json
import re
import shutil
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

import pytest

from evo.gpu.bandwidth import (
    KERNEL, L2_FACTOR, MAX_READ_BYTES, MIB, MIN_READ_BYTES, UNROLL, build_reader, hbm_peak, kv_bytes, read_sizes,
)
from evo.errors import EvoError
from evo.gpu.suites import fast_cases
from evo.gpu.timing import io_bytes
from evo.gpu.worker import EvalRequest
from evo.products.bench import make_record, render_benchmarks_md, run_bench
from evo.results import Evaluation, Shape, Status, Timing
from evo.toolchain.sass import cuobjdump, dump_sass
from test_bench import recording_worker

H100 = {"name": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "cuda": "13.0", "cudnn": "91900", "driver": "580.1"}
H100_L2 = 50 * MIB
CEILING = {"gbps": 3100.0, "bytes": 2048 * MIB, "method": "evo_read_sum: a stand-in", "sizes": []}
DECODE = {s.case: s for s in fast_cases(["decode"])}
F1 = Shape("F1", 1, 8, 512, 64, False)


def timing(shape: Shape, backend: str, us: float) -> Timing:
    return Timing(shape, backend, us, us, us, [us])


# ----------------------------------------------------------------------------- bytes


@pytest.mark.parametrize("case,keys,heads", [
    ("D1", 1 * 131072, 8), ("D2", 64 * 2048, 8), ("D3", 32 * 8192, 8), ("D4", 8 * 4096, 32), ("D5", 16 * 4096, 8)])
def test_kv_bytes_are_two_tensors_of_the_kv_heads_only(case: str, keys: int, heads: int) -> None:
    """B x Hkv x Lk x D x 2 tensors x 2 bytes (bf16): D3's 64 query heads on 8 K/V heads read 8 heads' cache."""
    assert kv_bytes(DECODE[case]) == keys * heads * 128 * 2 * 2


def test_kv_bytes_of_the_suite() -> None:
    assert kv_bytes(DECODE["D1"]) == 512 * MIB and kv_bytes(DECODE["D3"]) == 1024 * MIB
    assert kv_bytes(DECODE["D5"]) == 256 * MIB
    assert kv_bytes(Shape("X", 2, 16, 1, 64, False, "fp16", 2, 1000)) == 2 * 2 * 1000 * 64 * 2 * 2


def test_ragged_and_paged_caches_count_each_sequences_own_keys() -> None:
    d6, d7 = DECODE["D6"], DECODE["D7"]
    own = sum(d6.seqlens())
    assert own < d6.B * d6.Lk                                        # not the capacity
    assert kv_bytes(d6) == kv_bytes(d7) == own * 8 * 128 * 2 * 2


def test_the_bytes_moved_add_q_read_and_o_written() -> None:
    d5 = DECODE["D5"]
    assert io_bytes(d5) - kv_bytes(d5) == 2 * 16 * 32 * 4 * 128 * 2


# ----------------------------------------------------------------------------- sizes and peaks


@pytest.mark.parametrize("largest", [0, 256 * MIB, kv_bytes(DECODE["D6"]), 5 << 30, 9 << 30])
def test_every_read_buffer_holds_the_largest_cache_and_overflows_l2(largest: int) -> None:
    sizes = read_sizes(largest, H100_L2)
    assert sizes and sizes == sorted(sizes) and all(s % MIB == 0 for s in sizes)
    assert all(s >= max(largest, L2_FACTOR * H100_L2, MIN_READ_BYTES) for s in sizes)
    assert all(s <= MAX_READ_BYTES for s in sizes[1:])


def test_read_sizes_of_the_decode_suite() -> None:
    first = 1884 * MIB                                                # D6's 1883.5 MiB, in whole MiB
    assert read_sizes(kv_bytes(DECODE["D6"]), H100_L2) == [first, 2 * first, 4 * first]
    assert read_sizes(0, H100_L2) == [256 * MIB, 512 * MIB, 1024 * MIB]
    assert read_sizes(5 << 30, H100_L2) == [5 << 30]                  # twice that is past the largest tried


@pytest.mark.parametrize("name,peak", [
    ("NVIDIA H100 80GB HBM3", 3350.0), ("NVIDIA H200", 4800.0), ("NVIDIA H100 PCIe", 2000.0),
    ("NVIDIA H100 NVL", 3900.0), ("NVIDIA A100-SXM4-80GB", 2039.0), ("NVIDIA A100-SXM4-40GB", 1555.0),
    ("NVIDIA GH200 480GB", None), ("NVIDIA GeForce RTX 4090", None)])
def test_hbm_peaks_by_gpu_name(name: str, peak: float | None) -> None:
    found = hbm_peak(name)
    assert (found and found["gbps"]) == peak
    if found:
        assert "datasheet" in found["source"] and "by GPU name" in found["source"]


# ----------------------------------------------------------------------------- the record


def decode_eval(device: dict[str, str] = H100) -> Evaluation:
    """A package bench over D1, D5 and a prefill case, fa4 not importable."""
    d1, d5 = DECODE["D1"], DECODE["D5"]
    ts = [timing(d1, "evo", 180.0), timing(d1, "sdpa_default", 176.0), timing(d1, "sdpa_flash", 300.0),
          timing(d5, "evo", 99.0), timing(d5, "sdpa_default", 415.0),
          timing(F1, "evo", 5.0), timing(F1, "sdpa_default", 8.0)]
    why = "flash_attn.cute is not importable"
    unavailable = {s.tag: {"fa4": why} for s in (d1, d5, F1)}
    return Evaluation("b" * 64, Status.FAST, timings=ts, device=device | {"unavailable": json.dumps(unavailable)})


def record_of(ceiling: dict[str, Any] | None = CEILING, device: dict[str, str] = H100) -> dict[str, Any]:
    return make_record([("cid", decode_eval(device))], gemm_tflops=None, sha="abc1234",
                       created=datetime(2026, 11, 27, 12, tzinfo=UTC), read_ceiling=ceiling,
                       backends=("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_default", "fa4"))


def test_a_decode_case_records_its_bytes_gbps_and_percentages() -> None:
    record = record_of()
    d1, d5, f1 = record["cases"]
    moved = io_bytes(DECODE["D1"])
    assert d1["kv_bytes"] == 512 * MIB and d1["io_bytes"] == moved
    assert d1["gbps"]["evo"] == pytest.approx(moved / 180e-6 / 1e9)
    assert d1["gbps"]["sdpa_default"] == pytest.approx(moved / 176e-6 / 1e9)
    assert d1["gbps"]["fa4"] is None and d1["gbps"]["sdpa_cudnn"] is None
    assert d1["pct_read_ceiling"]["evo"] == pytest.approx(100 * d1["gbps"]["evo"] / 3100.0)
    assert d1["pct_hbm_peak"]["evo"] == pytest.approx(100 * d1["gbps"]["evo"] / 3350.0)
    assert d1["pct_hbm_peak"]["fa4"] is None
    assert d5["gbps"]["evo"] == pytest.approx(io_bytes(DECODE["D5"]) / 99e-6 / 1e9)
    assert not {"kv_bytes", "io_bytes", "gbps", "pct_read_ceiling", "pct_hbm_peak"} & set(f1)   # prefill: TFLOP/s
    assert record["read_ceiling"] == CEILING
    assert record["hbm_peak"] == {"gbps": 3350.0, "source": "datasheet peak of the H100 SXM5 80 GB HBM3, by GPU name"}


def test_without_a_ceiling_or_a_known_peak_the_percentages_are_null() -> None:
    record = record_of(None, H100 | {"name": "NVIDIA GeForce RTX 4090"})
    assert record["read_ceiling"] is None and record["hbm_peak"] is None
    d1 = record["cases"][0]
    assert d1["gbps"]["evo"] is not None
    assert set(d1["pct_read_ceiling"].values()) == set(d1["pct_hbm_peak"].values()) == {None}


def test_a_record_without_decode_cases_is_as_before() -> None:
    ev = Evaluation("b" * 64, Status.FAST, timings=[timing(F1, "evo", 5.0)], device=H100)
    record = make_record([("cid", ev)], gemm_tflops=None, sha="x", created=datetime.now(UTC), read_ceiling=CEILING)
    assert "read_ceiling" not in record and "hbm_peak" not in record and "gbps" not in record["cases"][0]


def test_benchmarks_md_renders_the_decode_bandwidth() -> None:
    record = record_of()
    md = render_benchmarks_md([("h100-20261127-abc1234-decode-bf16.json", record)])
    d1 = record["cases"][0]
    evo, sdpa = d1["gbps"]["evo"], d1["gbps"]["sdpa_default"]
    assert (f"| D1 | 1,32/8,1/131072,128 | bf16 | `cid` | 180.0 (0.00) | {evo:.0f} GB/s | 1.67x | 0.98x | "
            "unavailable |") in md                                   # the rate cell of a decode case is GB/s
    assert "| F1 | 1,8,512,64 | fp16 | `cid` | 5.00 (0.00) | 107.4 |" in md      # a prefill case keeps TFLOP/s
    assert ("Read ceiling: **3100 GB/s**, measured in this run on a 2048 MiB buffer (evo_read_sum: a stand-in). "
            "HBM peak: 3350 GB/s (datasheet peak of the H100 SXM5 80 GB HBM3, by GPU name).") in md
    assert "| case | K+V MiB | evo GB/s | sdpa_default GB/s | fa4 GB/s |" in md
    assert (f"| D1 | 512 | {evo:.0f} ({100 * evo / 3100:.0f}% / {100 * evo / 3350:.0f}%) | "
            f"{sdpa:.0f} ({100 * sdpa / 3100:.0f}% / {100 * sdpa / 3350:.0f}%) | unavailable |") in md
    assert "| D5c | 256 |" in md and "| F1 | 0 |" not in md


def test_benchmarks_md_says_when_no_ceiling_was_measured() -> None:
    md = render_benchmarks_md([("x.json", record_of(None, H100 | {"name": "NVIDIA GeForce RTX 4090"}))])
    assert "Read ceiling: not measured in this run. HBM peak: unknown for this GPU." in md
    assert re.search(r"\| D1 \| 512 \| \d+ \(— / —\) \|", md)


# ----------------------------------------------------------------------------- run_bench


def test_run_bench_asks_the_first_request_for_the_ceiling_and_records_it(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first request reads buffers of at least the largest decode K+V (of all targets); once a
    ceiling came back, even from a request that then failed, no later request measures it again."""
    sent: list[dict[str, Any]] = []
    measured = json.dumps(CEILING)
    answers = iter([Evaluation("a" * 64, Status.RED, "wrong", device=H100 | {"read_ceiling": measured}),
                    decode_eval()])
    monkeypatch.setattr("evo.products.bench.Worker", recording_worker(sent, lambda: next(answers)))
    monkeypatch.setattr("evo.paths.git_sha", lambda: "cafe1234567")
    targets = [("bad", EvalRequest("a" * 64, "x.cubin", (), fast_cases=(DECODE["D1"],))),
               ("good", EvalRequest("b" * 64, "y.cubin", (), fast_cases=(DECODE["D6"], DECODE["D5"])))]
    _, record, problems = run_bench(targets, out_dir=tmp_path / "benchmarks")
    assert [o["read_bytes"] for o in sent] == [kv_bytes(DECODE["D6"]), 0]
    assert problems == ["bad: red: wrong"] and record["read_ceiling"] == CEILING


def test_a_ceiling_the_worker_could_not_measure_is_reported_with_why(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    why = "nvcc not found; install the CUDA toolkit or put nvcc on PATH"

    def unmeasured() -> Evaluation:
        ev = decode_eval()
        ev.device["read_ceiling_error"] = why
        return ev

    monkeypatch.setattr("evo.products.bench.Worker", recording_worker([], unmeasured))
    monkeypatch.setattr("evo.paths.git_sha", lambda: "cafe1234567")
    _, record, problems = run_bench([("c", EvalRequest("b" * 64, "x.cubin", (), fast_cases=(DECODE["D1"],)))],
                                    out_dir=tmp_path / "benchmarks")
    assert not problems and record["read_ceiling"] is None and record["read_ceiling_error"] == why
    assert record["cases"][0]["pct_hbm_peak"]["evo"] is not None
    assert f"Read ceiling: not measured in this run ({why}). HBM peak: 3350 GB/s" in (tmp_path / "BENCHMARKS.md").read_text()


def test_run_bench_without_decode_cases_asks_for_no_ceiling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr("evo.products.bench.Worker", recording_worker(
        sent, lambda: Evaluation("b" * 64, Status.FAST, timings=[timing(F1, "evo", 5.0)], device=H100)))
    monkeypatch.setattr("evo.paths.git_sha", lambda: "cafe1234567")
    _, record, _ = run_bench([("c", EvalRequest("b" * 64, "x.cubin", (), fast_cases=(F1,)))], out_dir=tmp_path)
    assert sent[0]["read_bytes"] == 0 and "read_ceiling" not in record


def test_the_worker_measures_the_ceiling_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """evo.gpu.evaluate.evaluate measures the ceiling on buffers of at least ``read_bytes`` (and only
    when asked) and hands it to the parent in the evaluation's device info, as JSON."""
    from types import SimpleNamespace

    from evo.gpu import bandwidth, evaluate

    asked: list[int] = []

    def ceiling(largest: int) -> bandwidth.ReadCeiling:
        asked.append(largest)
        return bandwidth.ReadCeiling("stand-in", (bandwidth.SizeReading(1024 * MIB, 400.0, 2.0),
                                                  bandwidth.SizeReading(2048 * MIB, 700.0, 3.0)))

    monkeypatch.setattr(bandwidth, "read_ceiling", ceiling)
    monkeypatch.setattr(evaluate, "progress", lambda note: None)
    monkeypatch.setattr(evaluate, "_candidate", lambda request, ev: (None, lambda *a, **k: None, []))
    session = SimpleNamespace(inherit=lambda carried: None, device={})
    for read in (0, 512 * MIB):
        ev = evaluate.evaluate(EvalRequest("p", "", (), green=False, options={"read_bytes": read}), session)  # type: ignore[arg-type]
        assert ("read_ceiling" in ev.device) is bool(read)
    assert asked == [512 * MIB]
    got = json.loads(ev.device["read_ceiling"])
    assert got["bytes"] == 2048 * MIB and got["gbps"] == pytest.approx(2048 * MIB / 700e-6 / 1e9)
    assert got["method"] == "stand-in" and [s["us"] for s in got["sizes"]] == [400.0, 700.0]

    def no_nvcc(largest: int) -> bandwidth.ReadCeiling:
        raise EvoError("nvcc not found")

    monkeypatch.setattr(bandwidth, "read_ceiling", no_nvcc)       # the evaluation goes on, and says why
    ev = evaluate.evaluate(EvalRequest("p", "", (), green=False, options={"read_bytes": 1}), session)  # type: ignore[arg-type]
    assert ev.device["read_ceiling_error"] == "nvcc not found" and "read_ceiling" not in ev.device


# ----------------------------------------------------------------------------- the kernel's machine code


OPCODE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9]+(?:\.[A-Z0-9_]+)*)")


@pytest.mark.skipif(shutil.which("nvcc") is None or cuobjdump() is None, reason="needs nvcc and cuobjdump")
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_the_read_kernel_is_16_byte_loads_and_one_atomic(arch: str, tmp_path: Path) -> None:
    """Every global load is 16 bytes wide (UNROLL of them in the main loop, one each in the tail), the
    only global write is the CTA's one reduction atomic, and nothing goes to local memory."""
    sass = dump_sass(build_reader(arch, tmp_path))
    assert f"Function : {KERNEL}" in sass
    ops = collections.Counter(m.group(1) for line in sass.splitlines() if (m := OPCODE.search(line)))
    loads = {op: n for op, n in ops.items() if op.startswith("LDG")}
    assert loads and all(".128" in op for op in loads) and sum(loads.values()) >= UNROLL
    assert sum(n for op, n in ops.items() if op.startswith(("RED", "ATOMG"))) == 1
    assert not any(op.startswith(("STG", "LDL", "STL")) for op in ops)

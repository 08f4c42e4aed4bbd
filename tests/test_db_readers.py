"""scripts/gene_pairs.py, scripts/remeasure_spread.py and scripts/twin_share.py read A/B pairs, re-measurements
and twins from a database made by evo's own store (its schema), with rows planted as a GPU run would leave them."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path
from collections.abc import Iterator
from types import ModuleType

import pytest

from evo.store import open_store

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
T0 = datetime(2026, 11, 29, 2, 0)


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def db(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    path = tmp_path / "evo.sqlite"
    open_store(f"sqlite:///{path}")
    conn = sqlite3.connect(path)
    yield conn
    conn.close()


def _candidate(db: sqlite3.Connection, cid: str, **params: object) -> None:
    db.execute("insert into evo_candidates (id, family, params, label, status, reason, created) "
               "values (?, 'flash_wgmma', ?, ?, 'fast', '', ?)", (cid, json.dumps(params), cid, T0.isoformat()))
    db.commit()


def _evaluation(db: sqlite3.Connection, cid: str, at: datetime, rung: str, times: dict[str, tuple[float, float]],
                board: str = "", kernels: dict[str, str] | None = None,
                code: dict[str, str] | None = None, run: int | None = None, status: str = "fast") -> None:
    """One evaluation of ``cid``: per case tag "L2c-bf16" (every case at D=128), (evo us, SDPA's default
    us); on ``board`` (a GPU UUID) and with ``kernels`` (entry -> the file-bound machine code hash) and
    ``code`` (entry -> the portable one) when given; of search run ``run``, with ``status``."""
    info = (({"rung": rung} if rung else {}) | ({"gpu_uuid": board} if board else {})
            | ({"kernel_sha256": json.dumps(kernels)} if kernels else {})
            | ({"kernel_code_sha256": json.dumps(code)} if code else {}))
    eid = db.execute("insert into evo_evaluations (candidate_id, run_id, device, device_info, status, reason, "
                     "green_seconds, fast_seconds, created) values (?, ?, 'NVIDIA H200', ?, ?, '', 0, 0, ?)",
                     (cid, run, json.dumps(info), status, at.isoformat())).lastrowid
    for tag, (evo, sdpa) in times.items():
        case, dtype = tag.split("-")
        for backend, us in (("evo", evo), ("sdpa_default", sdpa)):
            db.execute('insert into evo_timings (evaluation_id, "case", "B", "H", "L", "D", causal, dtype, backend, '
                       "median_us, p20_us, p80_us, samples_us, tflops, flagged) "
                       "values (?, ?, 1, 8, 2048, 128, ?, ?, ?, ?, ?, ?, '[]', 1.0, '')",
                       (eid, case.rstrip("c"), case.endswith("c"), dtype, backend, us, us, us))
    db.commit()


def _run(module: ModuleType, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert module.main(argv) == 0
    return capsys.readouterr().out


def test_a_gene_pair_reads_full_evaluations_case_by_case_and_names_the_genes_that_differ(
        db: sqlite3.Connection, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _candidate(db, "a" * 64)                                  # older than the gene: its default is read in
    _candidate(db, "b" * 64, TILE_SCHED="dynamic")
    _evaluation(db, "a" * 64, T0, "full", {"L2c-bf16": (100.0, 110.0), "L8c-fp16": (50.0, 60.0)})
    _evaluation(db, "b" * 64, T0, "full", {"L2c-bf16": (80.0, 110.0), "L8c-fp16": (50.0, 55.0)})
    _evaluation(db, "b" * 64, T0, "screen", {"L2c-bf16": (1.0, 110.0)})    # a screen's time is not the full one
    out = _run(_script("gene_pairs"), [str(tmp_path / "evo.sqlite"), "aaaa:bbbb"], capsys)
    assert out.splitlines()[0] == "aaaaaaaaaaaa -> bbbbbbbbbbbb: TILE_SCHED static -> dynamic"
    assert "L2c-bf16   A    100.0 us (x1.100)   B     80.0 us (x1.375)   A/B 1.250" in out
    assert "L8c-fp16   A     50.0 us (x1.200)   B     50.0 us (x1.100)   A/B 1.000" in out
    # geomean of 1.25 and 1.0; of the speedups 1.375/1.1 = 1.25 and 1.1/1.2
    assert "geomean A/B over 2 cases: 1.118; B's speedup over A's: 1.070" in out


def test_a_gene_pair_refuses_a_prefix_that_names_no_candidate(db: sqlite3.Connection, tmp_path: Path) -> None:
    _candidate(db, "a" * 64)
    module = _script("gene_pairs")
    with pytest.raises(SystemExit, match="'ffff' names 0 candidates, not one"):
        module.main([str(tmp_path / "evo.sqlite"), "aaaa:ffff"])


def test_re_measurements_split_by_session_and_copies_of_the_same_samples_are_not_counted(
        db: sqlite3.Connection, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _candidate(db, "c" * 64)
    _evaluation(db, "c" * 64, T0, "full", {"L2c-bf16": (100.0, 110.0)})
    _evaluation(db, "c" * 64, T0 + timedelta(minutes=1), "full", {"L2c-bf16": (100.0, 110.0)})   # carried up
    _evaluation(db, "c" * 64, T0 + timedelta(hours=1), "", {"L2c-bf16": (100.0, 121.0)})        # +10 %
    _evaluation(db, "c" * 64, T0 + timedelta(days=2), "", {"L2c-bf16": (110.0, 121.0)})
    out = _run(_script("remeasure_spread"), [str(tmp_path / "evo.sqlite")], capsys)
    # same session: T0 (its copy left out) -> +1 h: 10 %; across: 1.1 and 1.21 -> 1.1 two days on
    assert "same session, board unknown        1 pairs: median 10.0 %, 90th percentile 10.0 %, largest 10.0 %" in out
    assert "across sessions, board unknown     2 pairs: median 5.0 %, 90th percentile 10.0 %, largest 10.0 %" in out


def test_re_measurements_with_a_board_are_split_by_board_not_by_time(
        db: sqlite3.Connection, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _candidate(db, "d" * 64)
    _evaluation(db, "d" * 64, T0, "full", {"L8c-fp16": (100.0, 100.0)}, board="aa" * 16)
    _evaluation(db, "d" * 64, T0 + timedelta(days=3), "", {"L8c-fp16": (100.0, 102.0)}, board="aa" * 16)
    _evaluation(db, "d" * 64, T0 + timedelta(minutes=5), "", {"L8c-fp16": (100.0, 95.0)}, board="bb" * 16)
    out = _run(_script("remeasure_spread"), [str(tmp_path / "evo.sqlite")], capsys)
    assert "same board                         1 pairs: median 2.0 %" in out       # three days apart, one board
    assert "another board                      2 pairs: median 6.3 %, 90th percentile 7.4 %" in out


def test_a_gene_pair_reads_an_ab_timed_in_one_session_from_bench_records(
        db: sqlite3.Connection, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _candidate(db, "a" * 64)
    _candidate(db, "b" * 64, TILE_SCHED="dynamic")
    _evaluation(db, "a" * 64, T0, "full", {"L2c-bf16": (1.0, 1.0)})      # the database's times are not read
    rows = [{"case": "L2", "causal": True, "dtype": "bf16", "D": 128, "candidate_id": cid,
             "us": {"evo": evo, "sdpa_default": 120.0}} for cid, evo in (("a" * 64, 100.0), ("b" * 64, 96.0))]
    rows.append({"case": "L7", "causal": False, "dtype": "bf16", "D": 64, "candidate_id": "a" * 64,   # A alone
                 "us": {"evo": 50.0, "sdpa_default": 50.0}})
    (tmp_path / "ab.json").write_text(json.dumps({"cases": rows}))
    out = _run(_script("gene_pairs"), [str(tmp_path / "evo.sqlite"), "aaaa:bbbb", "--bench", str(tmp_path / "ab.json")],
               capsys)
    assert "L2c-bf16   A    100.0 us (x1.200)   B     96.0 us (x1.250)   A/B 1.042" in out
    assert "L7" not in out and "geomean A/B over 1 cases: 1.042; B's speedup over A's: 1.042" in out


def test_gene_finds_every_clean_pair_with_the_default_as_a(db: sqlite3.Connection, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A pair differs in the gene alone (a gene missing from a stored candidate is at its default); a
    candidate differing in another gene too, or never timed in full, makes no pair."""
    _candidate(db, "1" * 64, TILE_SCHED="dynamic")
    _candidate(db, "2" * 64)                                          # static by default: A of the pair
    _candidate(db, "3" * 64, TILE_SCHED="dynamic", PRODUCER_REGS=40)   # two genes off
    _candidate(db, "4" * 64, PRODUCER_REGS=40)                        # screened only
    for cid, evo in (("1", 90.0), ("2", 100.0), ("3", 95.0)):
        _evaluation(db, cid * 64, T0, "full", {"L2c-bf16": (evo, 110.0)})
    _evaluation(db, "4" * 64, T0, "screen", {"L2c-bf16": (80.0, 110.0)})
    out = _run(_script("gene_pairs"), [str(tmp_path / "evo.sqlite"), "--gene", "TILE_SCHED"], capsys)
    assert out.splitlines()[0] == "222222222222 -> 111111111111: TILE_SCHED static -> dynamic"
    assert out.splitlines()[-1] == ("TILE_SCHED: 1 clean pair(s) on NVIDIA H200; B's speedup over A's, geomean over "
                                    "their 1 cases: 1.111")


@pytest.mark.parametrize("name", ["gene_pairs", "remeasure_spread", "twin_share"])
def test_a_file_that_is_not_a_database_is_one_line_and_exit_2(name: str, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    dump = tmp_path / "evo.sqlite.gz"
    dump.write_bytes(b"\x1f\x8b\x08\x00")                   # a gzipped dump passed as it is
    with pytest.raises(SystemExit) as stop:
        _script(name).main([str(dump), *{"gene_pairs": ["a:b"], "twin_share": ["7"]}.get(name, [])])
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith("not an SQLite database (gunzip a .sqlite.gz first)")


def test_a_case_served_by_the_same_machine_code_in_a_and_b_is_a_control_not_the_genes(
        db: sqlite3.Connection, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """2026-11-29 w: TILE_SCHED's pair read 0.972 across two boards, and its byte-identical D=256 kernels 0.959:
    the boards, not the gene. A case whose entry hashes alike in both is printed as a control, apart."""
    _candidate(db, "a" * 64)
    _candidate(db, "b" * 64, TILE_SCHED="dynamic")
    causal = "evo_attn_d128_bf16_causal"
    _evaluation(db, "a" * 64, T0, "full", {"L2c-bf16": (100.0, 110.0), "L8c-fp16": (50.0, 55.0)},
                kernels={causal: "11" * 32, "evo_attn_d128_fp16_causal": "33" * 32})
    _evaluation(db, "b" * 64, T0, "full", {"L2c-bf16": (104.0, 110.0), "L8c-fp16": (55.0, 55.0)},
                kernels={causal: "22" * 32, "evo_attn_d128_fp16_causal": "33" * 32})
    out = _run(_script("gene_pairs"), [str(tmp_path / "evo.sqlite"), "aaaa:bbbb"], capsys)
    assert "L8c-fp16   A     50.0 us (x1.100)   B     55.0 us (x1.000)   A/B 0.909   same kernel: control" in out
    assert "geomean A/B over 1 cases: 0.962; B's speedup over A's: 0.962" in out
    assert "geomean A/B over 1 same-kernel controls: 0.909; B's speedup over A's: 0.909" in out


def test_two_candidates_whose_entry_compiled_alike_are_one_kernel_measured_twice(
        db: sqlite3.Connection, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A gene that touches another head dim leaves this case's machine code as it was: the two candidates'
    timings of it are a re-measurement; a screen's (a shorter protocol) is not counted."""
    causal = {"evo_attn_d128_bf16_causal": "11" * 32}
    _candidate(db, "e" * 64)
    _candidate(db, "f" * 64, BLOCK_N_D96=128)
    _evaluation(db, "e" * 64, T0, "full", {"L2c-bf16": (100.0, 110.0)}, kernels=causal)
    _evaluation(db, "f" * 64, T0 + timedelta(minutes=30), "full", {"L2c-bf16": (100.0, 121.0)}, kernels=causal)
    _evaluation(db, "f" * 64, T0 + timedelta(minutes=40), "screen", {"L2c-bf16": (50.0, 121.0)}, kernels=causal)
    out = _run(_script("remeasure_spread"), [str(tmp_path / "evo.sqlite")], capsys)
    assert "same session, board unknown        1 pairs: median 10.0 %, 90th percentile 10.0 %, largest 10.0 %" in out


def test_the_portable_digest_decides_the_same_kernel_where_the_file_bound_ones_differ(
        db: sqlite3.Connection, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """2026-11-29 c: one D=128 kernel built beside other D=96 kernels hashed apart by ``kernel_sha256`` (it
    carries the cubin's symbol indices) and alike by ``kernel_code_sha256``: both readers take the portable
    digest, so the case is a control of the pair and a re-measurement of the kernel."""
    causal = "evo_attn_d128_bf16_causal"
    _candidate(db, "a" * 64)
    _candidate(db, "b" * 64, WGS_D96=1)
    _evaluation(db, "a" * 64, T0, "full", {"L2c-bf16": (100.0, 110.0)},
                kernels={causal: "11" * 32}, code={causal: "77" * 32})
    _evaluation(db, "b" * 64, T0 + timedelta(minutes=30), "full", {"L2c-bf16": (100.0, 121.0)},
                kernels={causal: "22" * 32}, code={causal: "77" * 32})
    out = _run(_script("gene_pairs"), [str(tmp_path / "evo.sqlite"), "aaaa:bbbb"], capsys)
    assert "L2c-bf16   A    100.0 us (x1.100)   B    100.0 us (x1.210)   A/B 1.000   same kernel: control" in out
    out = _run(_script("remeasure_spread"), [str(tmp_path / "evo.sqlite")], capsys)
    assert "same session, board unknown        1 pairs: median 10.0 %" in out


def test_kernels_with_the_same_file_bound_digest_and_other_portable_ones_are_not_one_kernel(
        db: sqlite3.Connection, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Where both evaluations recorded portable digests, those alone decide: a file-bound match beside
    portable digests that differ is no control (the rule cannot be met by the weaker digest)."""
    causal = "evo_attn_d128_bf16_causal"
    _candidate(db, "a" * 64)
    _candidate(db, "b" * 64, TILE_SCHED="dynamic")
    _evaluation(db, "a" * 64, T0, "full", {"L2c-bf16": (100.0, 110.0)},
                kernels={causal: "11" * 32}, code={causal: "77" * 32})
    _evaluation(db, "b" * 64, T0, "full", {"L2c-bf16": (90.0, 110.0)},
                kernels={causal: "11" * 32}, code={causal: "88" * 32})
    out = _run(_script("gene_pairs"), [str(tmp_path / "evo.sqlite"), "aaaa:bbbb"], capsys)
    assert "control" not in out and "geomean A/B over 1 cases: 1.111" in out
    out = _run(_script("remeasure_spread"), [str(tmp_path / "evo.sqlite")], capsys)
    assert "same session, board unknown    no pairs" in out


def test_twin_share_counts_a_runs_screens_of_code_timed_in_full_before_and_of_code_screened_before(
        db: sqlite3.Connection, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Run 7 screens four candidates: one whose code another candidate timed in full (and passed) before, one
    whose code was only screened (pruned) before, one new, and one whose code the same candidate timed before
    (the candidate again, not a twin); the earlier study's evaluations held more kernels than the run's."""
    k, other = "evo_attn_d128_bf16_causal", "evo_attn_d96_bf16_causal"
    for c in "abcdefg":
        _candidate(db, c * 64)
    times = {"L8c-bf16": (100.0, 110.0)}
    _evaluation(db, "a" * 64, T0, "full", times, code={k: "11" * 32, other: "99" * 32}, run=6)
    _evaluation(db, "b" * 64, T0, "screen", times, code={k: "22" * 32}, run=6, status="pruned")
    _evaluation(db, "g" * 64, T0, "full", times, code={k: "44" * 32}, run=6)
    for c, digest in (("c", "11"), ("d", "22"), ("e", "33"), ("g", "44")):
        _evaluation(db, c * 64, T0 + timedelta(hours=1), "screen", times, code={k: digest * 32}, run=7)
    out = _run(_script("twin_share"), [str(tmp_path / "evo.sqlite"), "7"], capsys)
    assert out.strip() == ("run 7: 4 screens of 4 distinct codes of 1 kernel(s); twins of a kernel timed in full 1 (25%), "
                           "else of a screened one 1")

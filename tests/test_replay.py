"""Sweep recordings: the file format, lookups, and export from a database (merging, not mixing GPUs)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from evo.toolchain.build import build_id_for
from evo.errors import EvoError
from evo.family.render import render
from evo.store.recording import (Record, Recording, export_sweep, load_recording, new_header, newest_recording,
                        save_recording)
from evo.results import BuildResult, Evaluation, Shape, Status, Timing
from evo.family.space import make_candidate
from evo.store import Store, open_store

F1 = Shape("F1", 1, 8, 512, 64, False)
F1C = Shape("F1", 1, 8, 512, 64, True)
H200 = "NVIDIA H200"


def small_recording() -> Recording:
    rec = Recording(new_header(H200, "sm_90a", [F1, F1C], {"torch": "2.11"}))
    r = Record("flash_scalar", 1, make_candidate("flash_scalar").p, Status.FAST)
    r.timings[F1.tag] = {"evo": {"median_us": 10.0, "p20_us": 9.5, "p80_us": 10.5},
                         "sdpa_default": {"median_us": 9.0}}
    rec.add(r)
    rec.add(Record("flash_scalar", 1, make_candidate("flash_scalar", {"VEC": 2}).p, Status.RED, "mismatch"))
    return rec


@pytest.mark.parametrize("name", ["sweep.json.gz", "sweep.json"])
def test_a_recording_round_trips(tmp_path: Path, name: str) -> None:
    rec = small_recording()
    path = save_recording(rec, tmp_path / name)
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == name.endswith(".gz")
    back = load_recording(path)
    assert back.to_json() == rec.to_json()
    assert back.shapes() == [F1, F1C]


def test_lookup_is_by_family_and_params() -> None:
    rec = small_recording()
    assert rec.lookup(make_candidate("flash_scalar", {"VEC": 2})).status is Status.RED
    assert rec.lookup(make_candidate("flash_scalar", {"VEC": 4})) is None


def test_a_record_becomes_an_evaluation_of_the_requested_cases_only() -> None:
    rec = small_recording().lookup(make_candidate("flash_scalar"))
    ev = rec.evaluation("abc", [F1], {"name": "replay:" + H200})
    assert (ev.build_id, ev.status) == ("abc", Status.FAST)
    assert sorted((t.shape.tag, t.backend, t.median_us) for t in ev.timings) == \
        [(F1.tag, "evo", 10.0), (F1.tag, "sdpa_default", 9.0)]


@pytest.mark.parametrize("payload,message", [
    ({"format": "other"}, "not an evo sweep recording"),
    ({"format": "evo-sweep", "version": 99}, "format version 99"),
])
def test_foreign_files_are_refused(tmp_path: Path, payload: dict, message: str) -> None:
    path = tmp_path / "x.json.gz"
    path.write_bytes(gzip.compress(json.dumps(payload).encode()))
    with pytest.raises(EvoError, match=message):
        load_recording(path)


def test_newest_recording_is_the_most_recently_written(tmp_path: Path) -> None:
    for i, name in enumerate(["sweep-h100.json.gz", "sweep-h200.json.gz"]):
        save_recording(small_recording(), tmp_path / name)
        os.utime(tmp_path / name, (1000 + i, 2000 - i * 500))
    assert newest_recording(tmp_path).name == "sweep-h100.json.gz"
    assert newest_recording(tmp_path / "nothing") is None


# ---------------------------------------------------------------------------- export


def built(store: Store, params: dict, status: Status = Status.BUILT, reason: str = "") -> str:
    r = render(make_candidate("flash_scalar", params))
    bid = build_id_for(r, "sm_90a")
    store.record_build(r, BuildResult(bid, r.source_hash, "sm_90a", ("-O3",), status, reason))
    return bid


def timed(shape: Shape, evo_us: float) -> list[Timing]:
    return [Timing(shape, "evo", evo_us, evo_us * 0.9, evo_us * 1.1, [evo_us]),
            Timing(shape, "sdpa_default", 9.0, 8.9, 9.1, [9.0])]


def evaluated(store: Store, bid: str, device: str, status: Status, timings: list[Timing] = ()) -> None:
    store.record_evaluation(Evaluation(bid, status, status.value, timings=list(timings),
                                       device={"name": device, "torch": "2.11"}))


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = open_store(f"sqlite:///{tmp_path / 'evo.sqlite'}")
    evaluated(s, built(s, {"VEC": 8}), H200, Status.FAST, timed(F1, 10.0))
    evaluated(s, built(s, {"VEC": 4}), H200, Status.RED)
    evaluated(s, built(s, {"VEC": 2}), "replay:" + H200, Status.FAST, timed(F1, 5.0))
    evaluated(s, built(s, {"KV_TILE": 16}), H200, Status.GREEN)
    built(s, {"KV_TILE": 32}, Status.COMPILE_FAILED, "nvcc: error")
    return s


def statuses(rec: Recording) -> dict[tuple, str]:
    return {(r.params["VEC"], r.params["KV_TILE"]): r.status.value for r in rec.records.values()}


def test_export_writes_final_outcomes_of_real_gpu_evaluations(store: Store, tmp_path: Path) -> None:
    rec, added = export_sweep(store, tmp_path / "sweep-h200.json.gz")
    assert (rec.gpu, rec.arch, added) == (H200, "sm_90a", 3)
    assert statuses(rec) == {(8, 64): "fast", (4, 64): "red", (8, 32): "compile_failed"}
    fast = rec.lookup(make_candidate("flash_scalar", {"VEC": 8}))
    assert fast.timings == {F1.tag: {"evo": {"median_us": 10.0, "p20_us": 9.0, "p80_us": 11.0},
                                     "sdpa_default": {"median_us": 9.0}}}
    assert load_recording(tmp_path / "sweep-h200.json.gz").to_json() == rec.to_json()


def test_export_accumulates_into_an_existing_recording(store: Store, tmp_path: Path) -> None:
    out = tmp_path / "sweep-h200.json.gz"
    export_sweep(store, out)
    fresh = open_store(f"sqlite:///{tmp_path / 'second.sqlite'}")  # another GPU session's database
    evaluated(fresh, built(fresh, {"ROWS_PER_BLOCK": 8}), H200, Status.FAST, timed(F1C, 20.0))
    rec, added = export_sweep(fresh, out)
    assert added == 1 and len(rec.records) == 4
    assert {s.tag for s in rec.shapes()} == {F1.tag, F1C.tag}
    assert len(rec.header["sessions"]) == 2


def test_export_refuses_to_mix_gpus_in_one_file(store: Store, tmp_path: Path) -> None:
    out = tmp_path / "sweep.json.gz"
    save_recording(Recording(new_header("NVIDIA H100", "sm_90a", [], {})), out)
    with pytest.raises(EvoError, match="holds a sweep for gpu 'NVIDIA H100'"):
        export_sweep(store, out, gpu=H200)


def test_the_command_exports_and_reports(store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evo.cli import main

    out = tmp_path / "sweep-h200.json.gz"
    assert main(["export-sweep", "--out", str(out), "--db", store.url]) == 0
    assert "3 candidate(s) measured on NVIDIA H200 (3 new or updated)" in capsys.readouterr().out
    assert len(load_recording(out).records) == 3


def test_the_default_file_is_named_after_the_gpu(store: Store, monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("EVO_HOME", str(tmp_path))
    rec, _ = export_sweep(store)
    assert rec.path == tmp_path / "data" / "sweep-h200.json.gz" and rec.path.is_file()


def test_export_names_the_code_that_measured_not_the_exporter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVO_GIT_SHA", "aaaa111")
    s = open_store(f"sqlite:///{tmp_path / 'evo.sqlite'}")
    run = s.start_run("evo run", study="sweep")
    bid = built(s, {"VEC": 8})
    s.record_evaluation(Evaluation(bid, Status.FAST, "", timings=timed(F1, 10.0),
                                   device={"name": H200}), run_id=run)
    monkeypatch.setenv("EVO_GIT_SHA", "bbbb222")
    rec, _ = export_sweep(s, tmp_path / "sweep.json.gz")
    assert (rec.header["git_sha"], rec.header["exported_at_git_sha"]) == ("aaaa111", "bbbb222")


def test_the_default_cases_are_the_ones_every_timed_record_covers() -> None:
    rec = Recording(new_header(H200, "sm_90a", [F1, F1C], {}))
    both = Record("flash_scalar", 1, {"VEC": 8}, Status.FAST, "", "a",
                  {F1.tag: {"evo": {"median_us": 1.0}}, F1C.tag: {"evo": {"median_us": 1.0}}})
    one = Record("flash_scalar", 1, {"VEC": 4}, Status.FAST, "", "b", {F1.tag: {"evo": {"median_us": 1.0}}})
    rec.add(both)
    rec.add(one)
    assert [s.tag for s in rec.shapes()] == [F1.tag, F1C.tag]
    assert [s.tag for s in rec.common_shapes()] == [F1.tag]


def test_the_committed_sweep_replays_under_its_recorded_ids_without_nvcc(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Build ids now also key launch configs, compiler and headers; the recording's ids (older
    formula) stay the ids replayed candidates are stored under, and replay needs no nvcc."""
    from evo.family.manifest import load_family
    from evo.paths import root
    from evo.search.evaluators import ReplayEvaluator

    monkeypatch.setenv("PATH", str(tmp_path))
    for var in ("EVO_NVCC", "CUDA_HOME"):
        monkeypatch.delenv(var, raising=False)
    rec = load_recording(root() / "data" / "sweep-h200.json.gz")
    current = [r for r in rec.records.values() if r.family_version == load_family(r.family).version]
    built = ReplayEvaluator(rec).build([render(make_candidate(r.family, r.params)) for r in current])
    assert current  # records of today's family versions
    assert [b.build_id for b in built] == [r.build_id for r in current]
    failed = (Status.COMPILE_FAILED, Status.RESOURCE_REJECTED)
    assert [b.status for b in built] == [r.status if r.status in failed else Status.BUILT for r in current]


# ---------------------------------------------------------------------------- screen fidelity


def screened_eval(store: Store, bid: str, status: Status, timings: list[Timing]) -> None:
    store.record_evaluation(Evaluation(bid, status, status.value, timings=list(timings),
                                       device={"name": H200, "torch": "2.11", "rung": "screen"}))


@pytest.fixture
def searched(tmp_path: Path) -> Store:
    """A search's database: a pruned candidate, one screened then timed in full, one timed in
    full without a screen, one red at its screen's GREEN, a build failure."""
    s = open_store(f"sqlite:///{tmp_path / 'searched.sqlite'}")
    screened_eval(s, built(s, {"VEC": 8}), Status.PRUNED, timed(F1, 12.0))
    kept = built(s, {"VEC": 4})
    screened_eval(s, kept, Status.GREEN, timed(F1, 8.0))
    evaluated(s, kept, H200, Status.FAST, timed(F1, 8.5) + timed(F1C, 7.0))
    evaluated(s, built(s, {"VEC": 2}), H200, Status.FAST, timed(F1, 6.0))
    screened_eval(s, built(s, {"KV_TILE": 16}), Status.RED, [])
    built(s, {"KV_TILE": 32}, Status.COMPILE_FAILED, "nvcc: error")
    return s


def test_a_screen_recording_holds_every_screened_candidate_at_its_screen(searched: Store, tmp_path: Path) -> None:
    rec, added = export_sweep(searched, tmp_path / "s.json.gz", fidelity="screen")
    assert rec.fidelity == "screen" and load_recording(tmp_path / "s.json.gz").fidelity == "screen"
    assert statuses(rec) == {(8, 64): "fast", (4, 64): "fast", (8, 16): "red", (8, 32): "compile_failed"}
    kept = rec.lookup(make_candidate("flash_scalar", {"VEC": 4}))
    assert kept.timings == {F1.tag: {"evo": {"median_us": 8.0, "p20_us": 7.2, "p80_us": 8.8},
                                     "sdpa_default": {"median_us": 9.0}}}   # its screen, not its full rung
    assert rec.lookup(make_candidate("flash_scalar", {"VEC": 8})).timings[F1.tag]["evo"]["median_us"] == 12.0
    assert [s.tag for s in rec.common_shapes()] == [F1.tag] and added == 4


def test_a_full_recording_of_the_same_search_keeps_full_timings_only(searched: Store, tmp_path: Path) -> None:
    rec, _ = export_sweep(searched, tmp_path / "f.json.gz")
    assert rec.fidelity == "full"
    assert statuses(rec) == {(4, 64): "fast", (2, 64): "fast", (8, 16): "red", (8, 32): "compile_failed"}
    assert rec.lookup(make_candidate("flash_scalar", {"VEC": 4})).timings[F1C.tag]["evo"]["median_us"] == 7.0


def test_fidelities_never_mix_in_one_file(searched: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "f.json.gz"
    export_sweep(searched, out)
    with pytest.raises(EvoError, match="holds full timings, not screen ones"):
        export_sweep(searched, out, fidelity="screen")
    with pytest.raises(EvoError, match="unknown fidelity 'fast'"):
        export_sweep(searched, out, fidelity="fast")
    monkeypatch.setenv("EVO_HOME", str(tmp_path))
    rec, _ = export_sweep(searched, fidelity="screen")
    assert rec.path == tmp_path / "data" / "sweep-h200-screen.json.gz"


def test_bench_samplers_takes_a_screen_recording_and_says_so(searched: Store, tmp_path: Path) -> None:
    from evo.samplerbench.problem import Problem
    from evo.samplerbench.report import section

    rec, _ = export_sweep(searched, tmp_path / "s.json.gz", fidelity="screen")
    problem = Problem.load(tmp_path / "s.json.gz", ["flash_scalar"])
    assert [c.tag for c in problem.cases] == [F1.tag]
    assert problem.best == pytest.approx(9.0 / 8.0)              # the kept candidate's screen: x1.125
    text = section(problem, [], [], [0], 1, 1.0, "abc", None)
    assert "(F1-fp16; each point at its search screen)" in text


def test_bench_samplers_refuses_a_family_too_large_to_list(tmp_path: Path) -> None:
    """flash_wgmma's space spans about 3.8e14 combinations: listing it was an out-of-memory kill."""
    from evo.samplerbench.problem import Problem

    rec = Recording(new_header(H200, "sm_90a", [F1], {}))
    rec.add(Record("flash_wgmma", 1, make_candidate("flash_wgmma").p, Status.RED, "mismatch"))
    save_recording(rec, tmp_path / "w.json.gz")
    with pytest.raises(EvoError, match=r"flash_wgmma \(3\.8e\+14\): more points than the 250,000"):
        Problem.load(tmp_path / "w.json.gz", ["flash_wgmma"])

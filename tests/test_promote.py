"""evo promote: per-bucket winners from a database into an installable package, input errors.

The database is built through the store API with the ``tiny`` fixture family and fake but
complete records (builds, passing GREEN checks, FAST timings beside ``sdpa_default``); cubins are
placeholder bytes, which the CPU path of the package never loads. The package is installed
offline with pip into a folder and imported in a subprocess.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evo.toolchain.build import CUBIN, build_id_for, cache_dir
from evo.cli import main
from evo.errors import EvoError
from evo.toolchain.evidence import function_evidence
from evo.products import promote as promoting
from evo.products.promote import capability, check_name, promote, sanitize_url
from evo.gpu.draws import MAX_BUCKET_LEN, MAX_GRID_Y, bucket_top, route_length, verified_group, verified_heads
from evo.products.routes import (Bucket, Contender, Measured, Route, Shipped, length_buckets, measurements,
                                 plan_routes)
from evo.family.render import Rendered, entry_name, render
from evo.results import BuildResult, CheckResult, Evaluation, Shape, Status, Timing
from evo.family.space import launch_config, make_candidate
from evo.family.manifest import load_family
from evo.store import CandidateView, Store, open_store
from evo.gpu.suites import green_cases
from evo.gpu.timing import RECHECK_FAILED
from evo.products.verify import VerifyFailed, refusal

FIXTURES = Path(__file__).parent / "fixtures" / "templates"
BOARD = "8a2d" * 8                     # the stand-in GPU's UUID (evo.toolchain.smi.board)
DEVICE = {"name": "NVIDIA H200", "sm": "90", "torch": "2.11.0+cu130", "cuda": "13.0", "driver": "580.65.06",
          "gpu_uuid": BOARD}
SHORT = Shape("F3", 32, 8, 128, 64, False)
MID = Shape("F1", 1, 8, 512, 64, False)
MID_C = Shape("F1", 1, 8, 512, 64, True)
LONG = Shape("F5", 1, 12, 8192, 64, False)
QCHUNK = Shape("L9", 1, 8, 256, 64, False, "fp16", 8, 4096)      # a query chunk on a longer cache: a chunk route
BASE_US = {SHORT: 10.0, MID: 10.0, MID_C: 10.0, LONG: 100.0, QCHUNK: 10.0}
NAME = "attn_pkg"


@pytest.fixture(scope="module", autouse=True)
def _env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))
        mp.setenv("EVO_CANDIDATES", str(tmp_path_factory.mktemp("candidates")))
        yield


def tiny(**params: Any) -> Rendered:
    return render(make_candidate("tiny", params))


def timings(us: dict[Shape, float]) -> list[Timing]:
    out = []
    for s, t in us.items():
        out += [Timing(s, "evo", t, t, t), Timing(s, "sdpa_default", BASE_US[s], BASE_US[s], BASE_US[s])]
    return out


def add(store: Store, r: Rendered, run: int, status: Status, us: dict[Shape, float] | None = None, *,
        cubin_in_cache: bool = False, checks_pass: bool = True, source_hash: str | None = None) -> str:
    """Record a built candidate (placeholder cubin) and, unless BUILT, one evaluation of it."""
    bid = build_id_for(r, "sm_90a")
    folder = cache_dir(bid)
    folder.mkdir(parents=True, exist_ok=True)
    cubin = folder / (CUBIN if cubin_in_cache else "elsewhere.cubin")
    cubin.write_bytes(b"\x7fELF placeholder " + bid.encode())
    store.record_build(r, BuildResult(bid, source_hash or r.source_hash, "sm_90a", ("-O3", "-std=c++17"),
                                      Status.BUILT, cubin_path=None if cubin_in_cache else str(cubin)), run)
    if status is not Status.BUILT:
        checks = [CheckResult(Shape("G1", 1, 8, 512, 64, c), 0, checks_pass, 1e-4, 1e-4, 7e-4,
                              "" if checks_pass else "mismatch") for c in (False, True)]
        store.record_evaluation(Evaluation(bid, status, checks=checks, timings=timings(us or {}),
                                           device=DEVICE), run)
    return bid


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory, _env: None) -> dict[str, str]:
    """Studies: ``s`` (A wins short and long full + mid causal, B wins mid full, R is red),
    ``empty`` (only a built candidate), ``slow`` (slower than SDPA everywhere), ``stale``
    (stored source hash differs from today's render), ``liar`` (fast, but failed a check)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'evo.sqlite'}"
    with open_store(url) as store:
        s = store.start_run("test", study="s", device=DEVICE)
        ids = {
            "A": add(store, tiny(ROWS=32), s, Status.FAST, {SHORT: 5.0, MID: 12.0, MID_C: 9.0, LONG: 50.0,
                                                          QCHUNK: 4.0}),
            "B": add(store, tiny(ROWS=64), s, Status.FAST, {SHORT: 8.0, MID: 5.0, MID_C: 20.0, LONG: 80.0,
                                                          QCHUNK: 12.0}, cubin_in_cache=True),
            "R": add(store, tiny(ROWS=128), s, Status.RED, checks_pass=False),
            "E": add(store, tiny(ROWS=32, SMEM_KB=2), store.start_run("test", study="empty"), Status.BUILT),
            "S": add(store, tiny(ROWS=64, SMEM_KB=2), store.start_run("test", study="slow"), Status.FAST,
                     {MID: 20.0}),
            "T": add(store, tiny(ROWS=32, SMEM_KB=300), store.start_run("test", study="stale"), Status.FAST,
                     {MID: 5.0}, source_hash="0" * 64),
            "L": add(store, tiny(ROWS=64, SMEM_KB=300), store.start_run("test", study="liar"), Status.FAST,
                     {MID: 5.0}, checks_pass=False),
        }
    return {"url": url, **ids}


@pytest.fixture(scope="module")
def package(db: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("out")
    promote(NAME, out, db_url=db["url"], study="s", verify=False)
    return out / NAME


def _json(package: Path, name: str) -> Any:
    return json.loads((package / NAME / name).read_text())


# ----------------------------------------------------------------------------- planning


@pytest.mark.parametrize("lengths, expected", [
    ([512], [Bucket(1, None)]),
    ([8192, 128, 512, 512], [Bucket(1, 256), Bucket(257, 2048), Bucket(2049, None)]),
    ([1, 2], [Bucket(1, 1), Bucket(2, None)]),
])
def test_length_buckets_split_at_geometric_means(lengths: list[int], expected: list[Bucket]) -> None:
    assert length_buckets(lengths) == expected


def _contender(cid: str, speedups: dict[Shape, float]) -> Contender:
    view = CandidateView(cid, "tiny", 1, {}, cid, Status.FAST, "", None, "sm_90a", (), None, None)  # type: ignore[arg-type]
    return Contender(view, tuple(Measured(s, 10.0 / x, 10.0) for s, x in speedups.items()))


def test_plan_prefers_the_candidate_covering_more_of_the_bucket() -> None:
    other = Shape("F9", 2, 16, 512, 64, False)
    routes = plan_routes([_contender("wide", {MID: 1.5, other: 1.5}), _contender("narrow", {MID: 3.0})])
    assert [(r.bucket, r.winner) for r in routes] == [(Bucket(1, 1024), "wide")]   # closed at twice 512


def test_every_route_is_closed_at_the_longest_length_verified_in_it() -> None:
    """The open-ended top bucket ends at twice its longest measured length (at most
    MAX_BUCKET_LEN): past it the package calls SDPA, since nothing longer was checked."""
    routes = plan_routes([_contender("a", {SHORT: 2.0, LONG: 1.5})])
    assert all(r.bucket.hi is not None and r.top == r.bucket.hi for r in routes)
    assert routes[-1].top == min(2 * LONG.L, MAX_BUCKET_LEN) and routes[0].top == routes[1].bucket.lo - 1


def test_a_route_serves_the_heads_promote_checks_or_a_fast_case_ran() -> None:
    routes = plan_routes([_contender("a", {SHORT: 2.0, LONG: 1.5})])
    assert routes[0].max_bh == verified_heads(1, 64) == MAX_GRID_Y            # short: the grid's limit
    assert routes[1].max_bh == max(verified_heads(routes[1].bucket.lo, 64), LONG.B * LONG.H)


CHUNK = Shape("L3", 1, 32, 512, 128, True, "bf16", 8, 8192, "bottom_right")   # a query chunk on a long cache
GQA = Shape("L8", 16, 32, 512, 128, True, "bf16", 8)
SELF_LONG = Shape("L1", 1, 32, 4096, 128, True, "bf16", 8)


def test_a_route_is_bucketed_by_the_longer_of_its_query_and_key_lengths() -> None:
    """A query chunk of 512 on 8192 keys is a long problem: its bucket is that of 8192, not of 512,
    and its route serves both of its lengths (its top is past 8192); being a chunk, it has a chunk
    route of its own (at most 2048 query rows, caches from 2049), before the others."""
    routes = plan_routes([_contender("a", {GQA: 1.5, SELF_LONG: 1.2, CHUNK: 1.3})])
    assert [(r.bucket.lo, r.top, r.max_lq, r.chunk, [s.case for s in r.shapes]) for r in routes] == \
        [(2049, 16384, 2048, True, ["L3"]), (1, 1448, None, False, ["L8"]), (1449, 8192, None, False, ["L1"])]
    assert all(r.winner == "a" and r.cross and r.aligns == ("top_left", "bottom_right") for r in routes)


F7C = Shape("F7", 2, 16, 8192, 128, True, "bf16")


def test_a_chunk_and_a_prefill_of_one_bucket_get_a_kernel_each() -> None:
    """At 2026-11-28q L3 (512 queries on 8192 keys) and F7 (8192 on 8192) shared one route, and the
    kernel that won L3 by 2x served F7 slower than SDPA. Chunks are planned apart: each case goes to
    the kernel that won it, and the chunk route takes only fewer queries than keys."""
    routes = plan_routes([_contender("chunky", {CHUNK: 2.0, F7C: 0.95}), _contender("square", {CHUNK: 1.2, F7C: 1.1})])
    chunk, square = routes
    assert (chunk.winner, chunk.chunk, chunk.max_lq, chunk.bucket.lo, chunk.shapes) == ("chunky", True, 2048, 2049,
                                                                                       (CHUNK,))
    assert (square.winner, square.chunk, square.max_lq, square.shapes) == ("square", False, None, (F7C,))
    assert chunk.max_lq < chunk.bucket.lo and chunk.limits().startswith("Lq <= 2048, max(Lq, Lk) 2049..16384")
    assert chunk.max_bh == max(verified_heads(2049, 128), CHUNK.B * CHUNK.H)


def test_a_route_serves_the_groups_promote_checks_or_a_fast_case_ran() -> None:
    """max_group: the multi-query many-heads check of the route's B * Hq (every query head of a
    batch on one key/value head), or a FAST case's Hq / Hkv if more; a full route has no aligns."""
    full = Shape("L6", 8, 32, 2048, 128, False, "bf16", 1)
    routes = plan_routes([_contender("a", {full: 1.5, Shape("L7", 4, 16, 1024, 64, False, "bf16", 16, 4096): 1.2})])
    for r in routes:
        assert r.max_group == max([verified_group(r.max_bh), *(s.group for s in r.shapes)])
        assert r.aligns == () and r.cross
    few = Route((128, "bf16", False), Bucket(5793, 16384), (), max_bh=4, max_group=verified_group(4))
    assert few.max_group == 1 and "Hq/Hkv <= 1" in few.limits()


def test_plan_picks_the_fastest_per_bucket() -> None:
    routes = plan_routes([_contender("a", {SHORT: 2.0, LONG: 1.1}), _contender("b", {SHORT: 1.2, LONG: 1.9})])
    assert [(r.bucket.lo, r.winner, r.speedup) for r in routes] == [(1, "a", 2.0), (1025, "b", 1.9)]


def test_plan_prefers_a_kernel_that_beats_sdpa_on_every_case_of_the_bucket() -> None:
    """L2c and L6c share the D=128 causal bucket of 2048: a kernel at 1.30x and 0.98x (mean 1.13x)
    would serve L6c slower than SDPA; one at 1.10x and 1.05x serves both faster, and wins."""
    l2 = Shape("L2", 8, 64, 2048, 128, True, "bf16", 8)
    l6 = Shape("L6", 8, 32, 2048, 128, True, "bf16", 1)
    routes = plan_routes([_contender("uneven", {l2: 1.30, l6: 0.98}), _contender("even", {l2: 1.10, l6: 1.05})])
    assert [(r.winner, round(r.speedup or 0, 3)) for r in routes] == [("even", round((1.10 * 1.05) ** 0.5, 3))]
    alone = plan_routes([_contender("uneven", {l2: 1.30, l6: 0.98})])     # no even one: the mean decides
    assert [r.winner for r in alone] == ["uneven"]


def test_plan_leaves_a_bucket_to_sdpa_when_nothing_beats_min_speedup() -> None:
    routes = plan_routes([_contender("a", {SHORT: 2.0, LONG: 1.05})], min_speedup=1.1)
    assert routes[1].winner is None and routes[1].best == ("a", 1.05)


def test_plan_omits_keys_without_any_winner() -> None:
    routes = plan_routes([_contender("a", {SHORT: 2.0, MID_C: 0.5})])
    assert {r.key for r in routes} == {(64, "fp16", False)}


def test_measurements_drop_timings_that_failed_their_recheck() -> None:
    good = timings({SHORT: 5.0})
    bad = [Timing(MID, "evo", 1.0, 1.0, 1.0, flagged=f"{RECHECK_FAILED}: mismatch"),
           Timing(MID, "sdpa_default", 10.0, 10.0, 10.0)]
    assert [m.shape for m in measurements(good + bad)] == [SHORT]


@pytest.mark.parametrize("arch, cc", [("sm_90a", (9, 0)), ("sm_80", (8, 0)), ("sm_86", (8, 6)),
                                      ("sm_100a", (10, 0)), ("sm_120", (12, 0))])
def test_capability_of_an_arch(arch: str, cc: tuple[int, int]) -> None:
    assert capability(arch) == cc


@pytest.mark.parametrize("name", ["1abc", "class", "torch", "my-pkg", "", "evo"])
def test_bad_package_names_are_refused(name: str) -> None:
    with pytest.raises(EvoError, match="must be a Python identifier"):
        check_name(name)


def test_sanitized_url_hides_the_password() -> None:
    assert "secret" not in sanitize_url("postgresql://evo:secret@db.example:5432/evo")


# ----------------------------------------------------------------------------- the package


def _routes(package: Path) -> list[tuple[bool, int, str | None]]:
    return [(r["causal"], r["min_len"], r["candidate"]) for r in _json(package, "dispatch.json")["routes"]]


def test_dispatch_table_holds_each_buckets_winner(package: Path, db: dict[str, str]) -> None:
    a, b = db["A"], db["B"]
    assert _routes(package) == [(False, 1025, a),                      # the chunk route (L9) first
                                (False, 1, a), (False, 257, b), (False, 2049, a),
                                (True, 1, None), (True, 257, a), (True, 2049, None)]
    chunk = _json(package, "dispatch.json")["routes"][0]
    assert (chunk["chunk"], chunk["max_lq"], chunk["max_len"], chunk["cases"]) == (True, 1024, 8192, ["L9-fp16"])


def test_dispatch_routes_record_what_promote_checks(package: Path) -> None:
    """Each route carries the limits the launcher enforces: its bucket of max(Lq, Lk), B * Hq,
    Hq / Hkv, whether Lq != Lk is served and at which causal alignments."""
    for r in _json(package, "dispatch.json")["routes"]:
        assert 1 <= r["min_len"] <= r["max_len"] <= MAX_BUCKET_LEN and 1 <= r["max_bh"] <= MAX_GRID_Y
        assert r["max_group"] == verified_group(r["max_bh"]) and r["cross"] is True
        assert r["aligns"] == (["top_left", "bottom_right"] if r["causal"] else [])


def test_launch_parameters_come_from_the_family(package: Path, db: dict[str, str]) -> None:
    kernels = {(k["id"], k["entry"]): k for k in _json(package, "dispatch.json")["kernels"]}
    launch = launch_config(load_family("tiny"), make_candidate("tiny", {"ROWS": 64}), 64)
    got = kernels[(db["B"], "evo_attn_d64_fp16_full")]
    assert (got["threads"], got["rows_per_cta"], got["smem_bytes"]) == \
        (launch.threads, launch.rows_per_cta, launch.smem_bytes)
    assert all("tile_counter" not in k for k in kernels.values())   # none takes one: the table is as it was


def test_a_kernel_that_takes_a_tile_counter_says_so_in_the_table(tmp_path: Path) -> None:
    """``tile_counter`` is written for a kernel that takes one (the launcher passes it the stream's
    word), and left out for any other, which the launcher reads as False."""
    r = tiny()
    view = CandidateView("c" * 64, "tiny", 1, {}, "tiny", Status.FAST, "", r.source_hash, "sm_90a", (),
                         None, None)  # type: ignore[arg-type]
    full, causal = r.entries
    counted = dataclasses.replace(causal, launch=dataclasses.replace(causal.launch, tile_counter=True))
    shipped = Shipped(view, {(64, "fp16", False): full, (64, "fp16", True): counted}, tmp_path / "k.cubin", r.source,
                      {"timed_at_git_shas": []})
    ctx = promoting._context(NAME, "1.0", [shipped], [], [], {}, DEVICE["name"], (9, 0), "db", None, [], "sdpa", 1.0)
    assert [k.get("tile_counter") for k in ctx["kernels"]] == [None, True]


def test_only_winners_ship_with_cubin_and_source(package: Path, db: dict[str, str]) -> None:
    files = sorted(p.name for p in (package / NAME / "kernels").iterdir())
    assert files == sorted(f"{i}{ext}" for i in (db["A"], db["B"]) for ext in (".cu", ".cubin"))


@pytest.mark.parametrize("which", ["A", "B"])  # A: cubin_path in the build row; B: only in the cache
def test_cubins_are_copied_byte_for_byte(package: Path, db: dict[str, str], which: str) -> None:
    cid = db[which]
    assert (package / NAME / "kernels" / f"{cid}.cubin").read_bytes() == \
        b"\x7fELF placeholder " + cid.encode()


def test_sources_are_the_rendered_kernels(package: Path, db: dict[str, str]) -> None:
    assert (package / NAME / "kernels" / f"{db['A']}.cu").read_text() == tiny(ROWS=32).source


def test_provenance_names_sources_device_database_and_speedups(package: Path, db: dict[str, str]) -> None:
    prov = _json(package, "PROVENANCE.json")
    assert {k["id"]: k["source_hash"] for k in prov["kernels"]} == \
        {db["A"]: tiny(ROWS=32).source_hash, db["B"]: tiny(ROWS=64).source_hash}
    assert prov["device"]["driver"] == DEVICE["driver"] and prov["device"]["torch"] == DEVICE["torch"]
    assert prov["database"] == db["url"] and prov["study"] == "s" and prov["created"]
    served = {(c["case"], c["causal"]): (c["served_by"], c["speedup"]) for c in prov["cases"]}
    assert served[("F1", False)] == (db["B"], 2.0) and served[("F5", False)] == (db["A"], 2.0)


def test_provenance_holds_why_placeholder_cubins_have_no_evidence(package: Path) -> None:
    """Each shipped kernel's machine-code evidence is read from its cubin at promote
    (evo.toolchain.evidence); these cubins are placeholders, so each entry says why there is none."""
    for k in _json(package, "PROVENANCE.json")["kernels"]:
        assert list(k["evidence"]) == k["entries"]
        for why in k["evidence"].values():
            assert set(why) == {"unavailable"} and "cuobjdump" in why["unavailable"]


def test_provenance_records_the_evidence_of_the_entries_it_ships(tmp_path: Path, db: dict[str, str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    full, causal = entry_name(64, "fp16", False), entry_name(64, "fp16", True)
    read: list[str] = []

    mine = function_evidence({"registers": 40, "local_bytes": 0}, "/*0000*/  HMMA.16816.F32 R4, R8, R12, R4 ;")

    def from_cubin(cubin: Path) -> dict[str, dict[str, Any]]:
        read.append(Path(cubin).name)
        return {full: mine, "evo_attn_d128_fp16_full": mine | {"registers": 99}}

    monkeypatch.setattr("evo.toolchain.evidence.cubin_evidence", from_cubin)
    promote(NAME, tmp_path, db_url=db["url"], study="s", verify=False)
    kernels = {k["id"]: k["evidence"] for k in _json(tmp_path / NAME, "PROVENANCE.json")["kernels"]}
    assert kernels[db["B"]] == {full: mine}                                       # only the entries it ships
    assert kernels[db["A"]] == {full: mine, causal: {"unavailable": "no such kernel function in the cubin"}}
    assert read and set(read) <= {"elsewhere.cubin", CUBIN}
    readme = (tmp_path / NAME / "README.md").read_text()           # and the package's README shows it
    assert f"| {db['B'][:12]} | {full} | 40 | — | 0 | 0 | 1 | 0 | 0 | 0 | 1 |" in readme
    assert f"| {db['A'][:12]} | {causal} | no such kernel function in the cubin |" in readme


def test_readme_has_the_measured_table(package: Path, db: dict[str, str]) -> None:
    readme = (package / "README.md").read_text()
    assert f"| F1 | 1, 8, 512, 64 | no | fp16 | {db['B'][:12]} | 5.00 | 10.00 | x2.00 |" in readme


def test_green_suite_travels_with_the_package_tests(package: Path) -> None:
    suite = _json(package, "tests/green_suite.json")
    assert len(suite["cases"]) == len(green_cases()) and suite["multiplier"] > 0


def test_existing_folder_needs_force(package: Path, db: dict[str, str]) -> None:
    with pytest.raises(EvoError, match="pass --force"):
        promote(NAME, package.parent, db_url=db["url"], study="s", verify=False)


def test_force_replaces_only_a_folder_promote_wrote(tmp_path: Path, db: dict[str, str]) -> None:
    (tmp_path / NAME).mkdir()
    (tmp_path / NAME / "notes.txt").write_text("mine")
    with pytest.raises(EvoError, match="not a package promote wrote"):
        promote(NAME, tmp_path, db_url=db["url"], study="s", force=True, verify=False)
    assert (tmp_path / NAME / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("kwargs, message", [
    ({"study": "empty"}, "no green candidate in study 'empty'"),
    ({"candidate_ids": ["ffff"]}, "no candidate with id 'ffff'"),
    ({"candidate_ids": ["R"]}, "is red, not green"),
    ({"candidate_ids": ["E"]}, "is built, not green"),
    ({"study": "slow"}, "no candidate beats sdpa_default"),
    ({"study": "stale"}, "renders differently"),
    ({"study": "liar"}, "failed 2 GREEN checks"),
    ({"study": "s", "candidate_ids": ["A"]}, "not both"),
])
def test_input_errors_are_one_line(tmp_path: Path, db: dict[str, str], kwargs: dict[str, Any],
                                   message: str) -> None:
    ids = [db.get(i, i) for i in kwargs.pop("candidate_ids", [])]
    with pytest.raises(EvoError, match=message) as err:
        promote(NAME, tmp_path, db_url=db["url"], candidate_ids=ids, verify=False, **kwargs)
    assert "\n" not in str(err.value)
    assert not (tmp_path / NAME).exists()


def test_a_plan_over_the_database_leaves_out_candidates_of_older_template_text(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'mixed.sqlite'}"
    with open_store(url) as store:   # O was built from a text today's templates no longer render
        run = store.start_run("test", study="mixed", device=DEVICE)
        new = add(store, tiny(ROWS=32), run, Status.FAST, {MID: 5.0})
        old = add(store, tiny(ROWS=64), run, Status.FAST, {MID: 1.0}, source_hash="1" * 64)
    result = promote(NAME, tmp_path / "out", db_url=url, verify=False)
    assert result.stale == [old]                            # 5x faster than the other, and still left out
    assert {r.winner for r in result.routes} == {new}
    assert _json(tmp_path / "out" / NAME, "PROVENANCE.json")["excluded_stale_candidates"] == [old]
    with pytest.raises(EvoError, match="renders differently"):   # asked for by id: refused, not skipped
        promote(NAME, tmp_path / "named", db_url=url, candidate_ids=[old], verify=False)


def test_a_candidate_of_a_kernel_subset_renders_as_stored_and_ships_its_kernels(tmp_path: Path) -> None:
    """A search's candidate exports only its cases' kernels (render's ``kernels``): it is not
    stale, and its package ships the kernels it has."""
    url = f"sqlite:///{tmp_path / 'subset.sqlite'}"
    part = render(make_candidate("tiny", {"ROWS": 32}), kernels={(64, "fp16", False)})
    with open_store(url) as store:
        run = store.start_run("test", study="sub", device=DEVICE)
        cid = add(store, part, run, Status.FAST, {MID: 5.0})
    result = promote(NAME, tmp_path / "out", db_url=url, verify=False)
    assert result.stale == [] and {r.winner for r in result.routes} == {cid}
    kernels = _json(tmp_path / "out" / NAME, "dispatch.json")["kernels"]
    assert [k["entry"] for k in kernels] == [entry_name(64, "fp16", False)]


def test_cli_promotes_chosen_candidates(tmp_path: Path, db: dict[str, str],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["promote", "--name", NAME, "--out", str(tmp_path), "--db", db["url"],
                 "--candidate", db["B"][:16], "--no-verify"])
    assert code == 0, capsys.readouterr().err
    assert {r[2] for r in _routes(tmp_path / NAME)} == {db["B"]}  # B is slower than SDPA when causal


def test_cli_reports_an_input_error_in_one_line(tmp_path: Path, db: dict[str, str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["promote", "--name", NAME, "--out", str(tmp_path), "--db", db["url"], "--candidate", db["R"],
                 "--no-verify"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "not green" in err


# ----------------------------------------------------------------------------- verification


def test_without_a_gpu_promote_refuses_unless_told_not_to_verify(tmp_path: Path, db: dict[str, str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("evo.products.verify.gpu_count", lambda: 0)
    with pytest.raises(EvoError, match="--no-verify") as err:
        promote(NAME, tmp_path, db_url=db["url"], study="s")
    assert "\n" not in str(err.value) and not (tmp_path / NAME).exists()


def test_an_unverified_package_says_so(package: Path) -> None:
    assert _json(package, "PROVENANCE.json")["verification"] == {"verified": False}


def test_a_launcher_build_goes_ahead_past_the_lock_a_killed_build_left(package: Path, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's ``lock`` file, left in the build folder by a build killed mid-way, made every later
    process wait forever in its first call (an H100, 2026-11-28): the package's build takes an OS
    lock of its own, removes the stale file and builds, and holds that lock while torch builds."""
    import fcntl
    import importlib

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.syspath_prepend(str(package))
    try:
        launcher = importlib.import_module(f"{NAME}._launcher")
        folder = launcher.build_folder()
        folder.mkdir(parents=True)
        (folder / "lock").write_text("")
        seen: dict[str, Any] = {}

        def fake_load(**kwargs: Any) -> str:
            seen.update(kwargs, lock_left=(Path(kwargs["build_directory"]) / "lock").exists())
            with open(folder.with_name(folder.name + ".flock")) as other, pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return "built"

        monkeypatch.setattr("torch.utils.cpp_extension.load", fake_load)
        monkeypatch.setattr(launcher, "_cuda_include", lambda: str(tmp_path))
        assert launcher._build() == "built"
        assert seen["build_directory"] == str(folder) and seen["lock_left"] is False
        assert folder.parent == tmp_path and not (folder / "lock").exists()
    finally:
        for mod in [m for m in sys.modules if m == NAME or m.startswith(NAME + ".")]:
            del sys.modules[mod]


@pytest.fixture
def fake_gpu_verify(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A GPU that runs verify_kernels and the package tests as stand-ins, recording the calls."""
    seen: dict[str, Any] = {"kernels": [], "tests": []}
    monkeypatch.setattr("evo.products.verify.gpu_count", lambda: 1)

    def verify_kernels(kernels, seed, **kw):
        seen["kernels"] += kernels
        seen["calls"] = seen.get("calls", []) + [[cid for cid, *_ in kernels]]
        seen["seed"] = seed
        if seen.get("refuse"):
            raise EvoError(seen["refuse"])
        failing = seen.get("fail", set())
        failures = []
        for cid, *_ in kernels:
            if cid in failing:
                failing.discard(cid)
                check = CheckResult(Shape("P03 sc=0.0375 sd=3.0 spike", 2, 3, 600, 64, False), 0, False,
                                    2e-2, 1e-3, 2.5e-3, "max|err| 2.0e-02 > tol 2.5e-03")
                ev = Evaluation(cid, Status.RED, f"P03 fp16 seed 0: {check.reason}", checks=[check], device=DEVICE)
                failures.append((refusal(cid, ev), ev))
            elif kw.get("on_pass"):
                kw["on_pass"](cid, 7)
        if failures:
            raise VerifyFailed(failures)
        return {cid: 7 for cid, *_ in kernels}

    def run_package_tests(folder: Path, name: str) -> str:
        seen["tests"].append((folder, name, (folder / name / "dispatch.json").is_file()))
        return "42 passed in 9.0s"

    monkeypatch.setattr("evo.products.verify.verify_kernels", verify_kernels)
    monkeypatch.setattr("evo.products.verify.run_package_tests", run_package_tests)
    return seen


def test_verified_promote_checks_every_winner_over_its_buckets(tmp_path: Path, db: dict[str, str],
                                                               fake_gpu_verify: dict[str, Any]) -> None:
    result = promote(NAME, tmp_path, db_url=db["url"], study="s")
    kernels = {cid: (cubin, entries, buckets) for cid, cubin, entries, buckets in fake_gpu_verify["kernels"]}
    assert set(kernels) == set(result.shipped) == {db["A"], db["B"]}
    for cubin, entries, buckets in kernels.values():
        assert Path(cubin).is_file() and {(e.head_dim, e.dtype, e.causal) for e in entries} == {b[0] for b in buckets}
        assert all(b.lo <= b.top and all(b.lo <= n <= b.top for n in b.measured) for b in buckets)
    full, causal = (64, "fp16", False), (64, "fp16", True)   # buckets split at sqrt(128*512), sqrt(512*8192)
    heads = [verified_heads(lo, 64) for lo in (1, 2049, 257, 1025)]   # or a FAST case's B * H, if more
    plain = ("contiguous", ())                                        # no cache layout, no pages
    assert sorted(kernels[db["A"]][2]) == [(full, 1, 256, (128,), heads[0], *plain),
                                           (full, 1025, 8192, (4096,), heads[3], *plain),   # L9's chunk route
                                           (full, 2049, 16384, (8192,), heads[1], *plain),
                                           (causal, 257, 2048, (512,), heads[2], *plain)]
    assert kernels[db["B"]][2] == ((full, 257, 2048, (512,), heads[2], *plain),)  # the top bucket: twice F5's 8192
    (folder, name, had_files), = fake_gpu_verify["tests"]
    assert name == NAME and had_files and not folder.exists()       # ran in the scratch folder
    v = _json(tmp_path / NAME, "PROVENANCE.json")["verification"]
    assert v == {"verified": True, "seed": fake_gpu_verify["seed"], "checks": {db["A"]: 7, db["B"]: 7},
                 "package_tests": "42 passed in 9.0s"}


def test_a_refused_kernel_writes_nothing(tmp_path: Path, db: dict[str, str], fake_gpu_verify: dict[str, Any]) -> None:
    fake_gpu_verify["refuse"] = "refusing to promote abc: 3 of 20 checks over its dispatch buckets failed; first: x"
    with pytest.raises(EvoError, match="refusing to promote abc"):
        promote(NAME, tmp_path, db_url=db["url"], study="s")
    assert not (tmp_path / NAME).exists() and fake_gpu_verify["tests"] == []
    assert list(tmp_path.iterdir()) == []                             # no scratch folder left either


@pytest.fixture
def db_copy(tmp_path: Path, db: dict[str, str]) -> str:
    """A copy of the module's database, for a test that writes to it (the URL)."""
    copy = tmp_path / "evo.sqlite"
    shutil.copy(db["url"].removeprefix("sqlite:///"), copy)
    return f"sqlite:///{copy}"


def test_a_kernel_that_fails_verification_is_stored_red_and_the_table_planned_again(
        tmp_path: Path, db: dict[str, str], db_copy: str, fake_gpu_verify: dict[str, Any]) -> None:
    url = db_copy
    fake_gpu_verify["fail"] = {db["A"]}
    result = promote(NAME, tmp_path / "out", db_url=url, study="s")
    first, second = fake_gpu_verify["calls"]
    assert db["A"] in first and db["A"] not in second and result.shipped == [db["B"]] == second
    assert len(result.rejected) == 1 and result.rejected[0].startswith(f"refusing to promote {db['A'][:12]}")
    assert {r.winner for r in result.routes} <= {db["B"], None}        # A's buckets: B or SDPA
    assert _json(tmp_path / "out" / NAME, "PROVENANCE.json")["verification"]["rejected"] == result.rejected
    with open_store(url) as store:
        assert store.get(db["A"]).candidate.status is Status.RED
        newest = store.evaluations(db["A"])[-1]
        assert newest.status == Status.RED.value and [c.passed for c in newest.checks] == [False]
    with pytest.raises(EvoError, match="no green candidate|not green"):   # red for good: not promoted again
        promote(NAME, tmp_path / "again", db_url=url, candidate_ids=[db["A"]])


def test_when_no_kernel_survives_its_verification_nothing_is_written(
        tmp_path: Path, db: dict[str, str], db_copy: str, fake_gpu_verify: dict[str, Any]) -> None:
    url = db_copy
    fake_gpu_verify["fail"] = {db["A"], db["B"]}
    with pytest.raises(EvoError, match=r"^refusing to promote \w{12}: 1 of 1 checks .*; no other kernel wins a "
                                       r"bucket: nothing written$") as err:
        promote(NAME, tmp_path / "out", db_url=url, study="s")
    assert "\n" not in str(err.value) and not (tmp_path / "out").exists()
    assert len(fake_gpu_verify["calls"]) == 1               # both failed in one round, both left at once
    with open_store(url) as store:                          # both verdicts are kept
        assert {store.get(db[k]).candidate.status for k in "AB"} == {Status.RED}


def test_a_kernel_verified_over_the_same_buckets_is_not_verified_again(fake_gpu_verify: dict[str, Any]) -> None:
    from types import SimpleNamespace as NS

    from evo.products.promote import _verify

    def shipped(cid: str) -> NS:
        return NS(view=NS(id=cid), cubin=Path(f"{cid}.cubin"), entries={})

    def route(cid: str, lo: int, hi: int) -> NS:
        return NS(winner=cid, key=(64, "fp16", False), bucket=NS(lo=lo, hi=hi), top=hi,
                  shapes=[NS(L=lo, Lk=lo, page_size=0)], max_bh=64, layout="contiguous")

    passed: dict[str, Any] = {}
    first = _verify([shipped("a"), shipped("b")], [route("a", 1, 256), route("b", 257, 2048)], 9, passed)
    again = _verify([shipped("a"), shipped("b")], [route("a", 1, 256), route("b", 257, 4096)], 9, passed)
    assert fake_gpu_verify["calls"] == [["a", "b"], ["b"]]         # b's buckets changed, a's did not
    assert first == again == {"verified": True, "seed": 9, "checks": {"a": 7, "b": 7}}


def test_refusal_is_one_line_with_the_first_failure() -> None:
    from evo.results import Evaluation
    from evo.products.verify import refusal

    checks = [CheckResult(Shape("P00 sd=1.0", 1, 1, 1, 64, False), 0, False, 1.0, 1e-3, 3e-3, "max|err| 1.0e+00"),
              CheckResult(Shape("P01 sd=2.0", 1, 1, 2, 64, False), 0, True, 1e-4, 1e-3, 3e-3)]
    ev = Evaluation("abcdef0123456789", Status.RED, "P00 fp16 seed 0 ...: max|err| 1.0e+00", checks=checks)
    assert refusal("abcdef0123456789", ev) == ("refusing to promote abcdef012345: 1 of 2 checks over its dispatch "
                                               "buckets failed (at 0.75 of GREEN's tolerance); first: P00 fp16 seed 0 ...: "
                                               "max|err| 1.0e+00")
    crashed = Evaluation("abcdef0123456789", Status.CRASHED, "AcceleratorError: illegal address")
    assert "crashed while verified" in refusal("abcdef0123456789", crashed)


def test_verification_cases_cover_each_bucket_in_order() -> None:
    from evo.products.verify import Bucket, cases_for

    cases = cases_for([Bucket((64, "fp16", False), 1, 362), Bucket((64, "fp16", True), 725, 1448, (725, 1024))],
                      seed=3)
    names = [c.shape.case.split()[0] for c in cases]
    assert names == [f"P{i:02d}" for i in range(len(cases))]
    first = [c for c in cases if not c.shape.causal]
    assert min(c.shape.L for c in first) == 1 and max(c.shape.L for c in first) == 362
    assert {c.shape.L for c in cases if c.shape.causal} >= {725, 726, 1447, 1448}
    # the package's stress test at the measured lengths and one below (724 is outside the bucket)
    stress = [c for c in cases if c.shape.causal and (c.shape.B, c.shape.H, c.std) == (2, 3, 3.0) and c.spike]
    assert sorted({c.shape.L for c in stress}) == [725, 1023, 1024]
    assert sorted({round(c.scale * 8, 2) for c in stress if c.scale}) == [0.3, 2.5]   # x 1/sqrt(64)
    assert all(c.spike == round(200.0 / (c.scale * 8 * 9.0), 1) for c in stress if c.scale)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("lo", "hi", "measured"), [(1, 362, (128,)), (725, 1448, (725, 1024)),
                                                    (5793, None, (8192,))])
def test_a_route_serves_exactly_what_its_verification_checks(causal: bool, lo: int, hi: int | None,
                                                             measured: tuple[int, ...]) -> None:
    """The routing rule and promote's checks agree: every check of a route's bucket lies inside what
    the route serves, and the checks reach each of its limits: both ends of the bucket (of the
    longer length), B * Hq = max_bh, Hq / Hkv = max_group, Lq < Lk and Lq > Lk at the bucket's
    first and last lengths, with a causal mask at each of its aligns both ways."""
    from evo.products.verify import Bucket as Checked, cases_for

    key = (64, "bf16", causal)
    heads = verified_heads(lo, 64)
    route = Route(key, Bucket(lo, bucket_top(lo, hi, measured)), (), "a", 2.0, None,
                  max_bh=heads, max_group=verified_group(heads))
    cases = [c.shape for c in cases_for([Checked(key, lo, route.top, measured, route.max_bh)], seed=11)]
    lengths = sorted({route_length(s.L, s.Lk) for s in cases})
    assert lo <= lengths[0] and lengths[-1] <= route.top and {lo, route.top} <= set(lengths)
    assert max(s.B * s.H for s in cases) == route.max_bh and max(s.group for s in cases) == route.max_group
    assert all(s.H % s.Hkv == 0 for s in cases) and {s.group for s in cases} >= {1, route.max_group}
    uneven = [n for n in lengths if n > 1]          # the lengths with a shorter other length to draw
    for edge in (set(uneven[:2]), set(uneven[-2:])):
        at = [s for s in cases if route_length(s.L, s.Lk) in edge]
        chunk = {s.align for s in at if s.Lk > s.L}
        longer = {s.align for s in at if s.Lk < s.L}
        assert chunk and longer
        if causal:
            assert chunk == longer == set(route.aligns) == {"top_left", "bottom_right"}
    if not causal:                                  # Shape normalizes an alignment that means nothing
        assert {s.align for s in cases} == {"top_left"}


def test_grouped_checks_are_the_package_tests_grouped_problems() -> None:
    """The package's grouped-heads route test (templates/package/.../test_gpu.py.j2) at each
    measured length, as promote checks it first."""
    from evo.gpu.draws import grouped_cases, grouped_problems

    assert grouped_problems(1024, True) == [(256, 1024, "top_left"), (256, 1024, "bottom_right"),
                                            (1024, 342, "top_left"), (1024, 342, "bottom_right")]
    assert grouped_problems(1, False) == [(1, 1, "top_left"), (1, 1, "top_left")]
    cases = grouped_cases((64, "fp16", True), [1024], start=5)
    assert [(c.shape.case, c.shape.B, c.shape.H, c.shape.Hkv, c.shape.L, c.shape.Lk, c.shape.align) for c in cases] == \
        [("P05 sd=1.0", 1, 8, 2, 256, 1024, "top_left"),
         ("P06 sd=1.0", 1, 8, 2, 256, 1024, "bottom_right"),
         ("P07 sd=1.0", 1, 8, 2, 1024, 342, "top_left"),
         ("P08 sd=1.0", 1, 8, 2, 1024, 342, "bottom_right")]
    assert all(c.scale is None and c.std == 1.0 and not c.spike for c in cases)



def fake_worker(monkeypatch: pytest.MonkeyPatch, reply: Any) -> list[Any]:
    """evo.products.verify's GPU worker as a stand-in answering ``reply(request)``; the requests it got."""
    from evo.products import verify

    sent: list[Any] = []

    class FakeWorker:
        def __init__(self, device: int) -> None: ...
        def __enter__(self) -> FakeWorker: return self
        def __exit__(self, *exc: object) -> None: ...

        def evaluate(self, request, timeout_s):  # type: ignore[no-untyped-def]
            sent.append(request)
            return reply(request)

    monkeypatch.setattr(verify, "Worker", FakeWorker)
    return sent


def test_verification_asks_the_worker_for_a_share_of_the_tolerance(monkeypatch: pytest.MonkeyPatch) -> None:
    from evo.products import verify

    sent = fake_worker(monkeypatch, lambda request: Evaluation(request.build_id, Status.GREEN, checks=[],
                                                                 device=DEVICE))
    ran = verify.verify_kernels([("abc", Path("k.cubin"), [], [verify.Bucket((64, "fp16", False), 1, 362)])], seed=5)
    assert ran == {"abc": 0}
    assert sent[0].options["tolerance_share"] == verify.TOLERANCE_SHARE == 0.75
    assert sent[0].options["salt"] == 5 and sent[0].options["green_cases"]


@pytest.mark.parametrize(("body", "ok"), [("assert True", True), ("assert False", False)])
def test_package_tests_run_from_the_scratch_folder(tmp_path: Path, body: str, ok: bool) -> None:
    from evo.products.verify import run_package_tests

    tests = tmp_path / "pkgx" / "tests"
    tests.mkdir(parents=True)
    (tmp_path / "pkgx" / "__init__.py").write_text("VALUE = 1\n")
    (tests / "__init__.py").write_text("")
    (tests / "test_it.py").write_text(f"import pkgx\n\ndef test_it():\n    assert pkgx.VALUE == 1\n    {body}\n")
    if ok:
        assert run_package_tests(tmp_path, "pkgx").startswith("1 passed")
    else:
        with pytest.raises(EvoError, match=r"the package's own tests failed on this GPU \(1 failed in [0-9.]+s: "
                                          r"pkgx/tests/test_it.py::test_it - assert False\); nothing written") as err:
            run_package_tests(tmp_path, "pkgx")
        assert "\n" not in str(err.value)
    assert not list(tmp_path.rglob("__pycache__"))


# ----------------------------------------------------------------------------- installed


CHECK = textwrap.dedent("""
    import json, sys
    import torch, torch.nn.functional as F
    import pytest
    import {name} as pkg
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 40, 64, generator=gen).half() for _ in range(3))
    result = {{
        "file": pkg.__file__,
        "supports": [pkg.supports(q, k, v, is_causal=c) for c in (False, True)],
        "equal": [torch.equal(pkg.attention(q, k, v, is_causal=c), F.scaled_dot_product_attention(q, k, v, is_causal=c))
                  for c in (False, True)],
        "tests": int(pytest.main(["-q", "-p", "no:cacheprovider", "--pyargs", "{name}.tests"])),
    }}
    print("RESULT " + json.dumps(result))
""")


@pytest.fixture(scope="module")
def installed(package: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """pip-install the package offline into a folder, import it there in a fresh interpreter."""
    target = tmp_path_factory.mktemp("site")
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                          "--no-index", "--disable-pip-version-check", "-q", "--target", str(target),
                          str(package)], capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("EVO_TEMPLATE_PATH", "EVO_CANDIDATES")}
    env["PYTHONPATH"] = str(target)
    run = subprocess.run([sys.executable, "-c", CHECK.format(name=NAME)], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path_factory.mktemp("cwd"), env=env)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, run.stdout[-3000:] + run.stderr[-3000:]
    return {"target": target, "output": run.stdout, **json.loads(lines[-1][len("RESULT "):])}


def test_installed_package_is_imported_from_the_target(installed: dict[str, Any]) -> None:
    assert Path(installed["file"]).is_relative_to(installed["target"])


def test_installed_package_does_not_support_cpu_tensors(installed: dict[str, Any]) -> None:
    assert installed["supports"] == [False, False]


def test_installed_package_answers_cpu_calls_with_sdpa(installed: dict[str, Any]) -> None:
    assert installed["equal"] == [True, True]


def test_installed_package_passes_its_own_tests(installed: dict[str, Any]) -> None:
    assert installed["tests"] == 0, installed["output"][-3000:]


# ----------------------------------------------------------------------------- --confirm


@pytest.fixture
def fake_confirm(monkeypatch: pytest.MonkeyPatch, fake_gpu_verify: dict[str, Any]) -> dict[str, Any]:
    """The GPU's interleaved timing as a stand-in: ``now[(candidate, shape)]`` is the candidate's
    time beside SDPA (SDPA at BASE_US); a pair not listed times as the database had it."""
    seen: dict[str, Any] = {"calls": [], "now": {}}
    monkeypatch.setattr("evo.toolchain.smi.boards", lambda: frozenset({BOARD}))   # this host: the stand-in's board

    def confirm_speed(kernels, seed, **kw):
        seen["calls"].append({cid: sorted(s.tag for s in shapes) for cid, _, _, shapes in kernels})
        seen.setdefault("backends", []).append(tuple(kw.get("backends", ())))
        out = []
        for cid, cubin, entries, shapes in kernels:
            assert Path(cubin).is_file() and entries
            us = {s: seen["now"].get((cid, s), seen["db"][cid][s]) for s in shapes}
            out.append(Evaluation(cid, Status.FAST, timings=timings(us), device=dict(seen.get("device", DEVICE))))
            if kw.get("keep"):
                kw["keep"](out[-1])
        return out

    monkeypatch.setattr("evo.products.verify.confirm_speed", confirm_speed)
    return seen


DB_US = {"A": {SHORT: 5.0, MID: 12.0, MID_C: 9.0, LONG: 50.0, QCHUNK: 4.0},
         "B": {SHORT: 8.0, MID: 5.0, MID_C: 20.0, LONG: 80.0, QCHUNK: 12.0}}


def test_confirm_routes_on_numbers_timed_beside_sdpa(tmp_path: Path, db: dict[str, str], db_copy: str,
                                                     fake_confirm: dict[str, Any]) -> None:
    a, b = db["A"], db["B"]
    fake_confirm["db"] = {db[k]: v for k, v in DB_US.items()}
    fake_confirm["now"] = {(a, LONG): 120.0, (b, LONG): 90.0}   # A loses F5 to SDPA beside it; B still wins
    result = promote(NAME, tmp_path, db_url=db_copy, study="s", confirm=True)
    first, second = fake_confirm["calls"]
    assert first == {a: ["F1c-fp16", "F3-fp16", "F5-fp16", "L9-fp16"], b: ["F1-fp16"]}
    assert second == {b: ["F5-fp16"]}
    long_route, = [r for r in result.routes if LONG in r.shapes]
    assert long_route.winner == b and long_route.speedup == pytest.approx(100 / 90)
    assert result.confirmed[a]["F5-fp16"] == [pytest.approx(2.0), pytest.approx(100 / 120)]
    assert _json(tmp_path / NAME, "PROVENANCE.json")["confirmation"]["rounds"] == 2
    assert fake_confirm["backends"] == [("sdpa_default",)] * 2     # beside the baseline routed on, alone
    with open_store(db_copy) as store:                  # stored: the newest numbers for the next promotion
        newest = {(t.shape, t.backend): t.median_us for t in store.timings_for(a)}
        assert newest[(LONG, "evo")] == 120.0


def test_after_the_last_round_only_confirmed_numbers_route(tmp_path: Path, db: dict[str, str], db_copy: str,
                                                           fake_confirm: dict[str, Any],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("evo.products.confirm.ROUNDS", 1)
    a, b = db["A"], db["B"]
    fake_confirm["db"] = {db[k]: v for k, v in DB_US.items()}
    fake_confirm["now"] = {(a, LONG): 120.0}            # B would be next on F5, but no round is left
    result = promote(NAME, tmp_path, db_url=db_copy, study="s", confirm=True)
    assert len(fake_confirm["calls"]) == 1
    long_route, = [r for r in result.routes if LONG in r.shapes]
    assert long_route.winner is None                     # B's F5 number is the search's alone: SDPA serves it
    assert {r.winner for r in result.routes if LONG not in r.shapes} - {None} == {a, b}


def test_confirm_on_another_gpu_than_the_timings_is_refused(tmp_path: Path, db: dict[str, str], db_copy: str,
                                                            fake_confirm: dict[str, Any]) -> None:
    fake_confirm["db"] = {db[k]: v for k, v in DB_US.items()}
    fake_confirm["device"] = DEVICE | {"name": "NVIDIA H100 80GB HBM3"}
    with pytest.raises(EvoError, match=r"^--confirm times on this GPU \(NVIDIA H100 80GB HBM3\), but the timings "
                                       r"compared are from 'NVIDIA H200'"):
        promote(NAME, tmp_path, db_url=db_copy, study="s", confirm=True)
    with open_store(db_copy) as store:                  # nothing measured elsewhere was stored as this GPU's
        assert [t.median_us for t in store.timings_for(db["A"]) if t.shape == LONG and t.backend == "evo"] == [50.0]
    assert not (tmp_path / NAME).exists()


def test_a_second_confirm_times_only_what_the_first_did_not_store(tmp_path: Path, db: dict[str, str], db_copy: str,
                                                                   fake_confirm: dict[str, Any]) -> None:
    """Each confirmation is stored as it is measured and marked; a later promote (or one resumed
    after a kill) does not time a (winner, case) whose newest evaluation is one, and its record keeps
    both speedups."""
    a, b = db["A"], db["B"]
    fake_confirm["db"] = {db[k]: v for k, v in DB_US.items()}
    fake_confirm["now"] = {(a, LONG): 120.0, (b, LONG): 90.0}
    promote(NAME, tmp_path / "first", db_url=db_copy, study="s", confirm=True)
    with open_store(db_copy) as store:
        marks = [e.device_info.get("confirmed_beside") for e in store.evaluations(b)]
    assert marks[-1] == "sdpa_default"
    calls = len(fake_confirm["calls"])
    again = promote(NAME, tmp_path / "again", db_url=db_copy, study="s", confirm=True)
    assert len(fake_confirm["calls"]) == calls                  # nothing left to time
    long_route, = [r for r in again.routes if LONG in r.shapes]
    assert long_route.winner == b and long_route.speedup == pytest.approx(100 / 90)
    assert again.confirmed[a]["F5-fp16"] == [pytest.approx(2.0), pytest.approx(100 / 120)]


def test_a_confirmation_from_another_machine_is_timed_again(tmp_path: Path, db: dict[str, str], db_copy: str,
                                                           fake_confirm: dict[str, Any],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The same kernel's speedup moved 7 % between two H200 machines (dev/perf-notes.md, 2026-11-29 w):
    a later promote on another machine of the same kind times every winner again on its own board, and
    reads the earlier machine's confirmation as the number the database held, not as a confirmation."""
    a, b = db["A"], db["B"]
    fake_confirm["db"] = {db[k]: v for k, v in DB_US.items()}
    fake_confirm["now"] = {(a, LONG): 120.0, (b, LONG): 90.0}
    promote(NAME, tmp_path / "first", db_url=db_copy, study="s", confirm=True)
    first = len(fake_confirm["calls"])
    monkeypatch.setattr("evo.toolchain.smi.boards", lambda: frozenset({"77" * 16}))   # another machine
    fake_confirm["device"] = DEVICE | {"gpu_uuid": "77" * 16}
    again = promote(NAME, tmp_path / "again", db_url=db_copy, study="s", confirm=True)
    timed = {(cid, tag) for call in fake_confirm["calls"][first:] for cid, tags in call.items() for tag in tags}
    served = {(r.winner, s.tag) for r in again.routes if r.winner for s in r.shapes}
    assert timed == served                                   # every winner on every case it serves, here
    assert again.confirmed[b]["F5-fp16"] == [pytest.approx(100 / 90)] * 2   # the first machine's, then this one's


def test_a_confirmation_keeps_a_case_the_database_never_had_for_the_winner() -> None:
    """At 2026-11-28q promote timed L3's winner on F7c, a case of the same bucket the search had
    never timed it on (0.95x beside SDPA), and dropped the number: the plan went on reading the
    bucket as L3 alone, and PROVENANCE.json said F7c was served untimed."""
    from evo.products.confirm import Confirmation

    other = Shape("F9", 2, 8, 512, 64, False)                     # MID's bucket, never timed for w
    winner = _contender("w", {MID: 2.0})
    ev = Evaluation("w", Status.FAST, timings=[*timings({MID: 4.0}), Timing(other, "evo", 12.0, 12.0, 12.0),
                                               Timing(other, "sdpa_default", 10.0, 10.0, 10.0)], device=DEVICE)
    (out,) = Confirmation().take([winner], [("w", Path("w.cubin"), [], [MID, other])], [ev],
                                 lambda t: measurements(t, "sdpa_default"))
    assert {m.shape: m.speedup for m in out.cases} == {MID: 2.5, other: pytest.approx(10 / 12)}
    (route,) = plan_routes([out])
    assert route.shapes == (MID, other) and route.speedup == pytest.approx((2.5 * 10 / 12) ** 0.5)


def test_without_confirm_nothing_is_timed_again(tmp_path: Path, db: dict[str, str], fake_confirm: dict[str, Any]) -> None:
    promote(NAME, tmp_path, db_url=db["url"], study="s")
    assert fake_confirm["calls"] == []
    assert _json(tmp_path / NAME, "PROVENANCE.json")["confirmation"] == {"interleaved": False}


def test_confirm_speed_asks_the_worker_for_interleaved_fast_without_green(monkeypatch: pytest.MonkeyPatch) -> None:
    from evo.products import verify

    status = {"abc": Status.FAST, "red": Status.RED, "hung": Status.TIMEOUT}
    sent = fake_worker(monkeypatch, lambda request: Evaluation(request.build_id, status[request.build_id], "why",
                                                                 device=DEVICE))
    got = verify.confirm_speed([("abc", Path("k.cubin"), [], [LONG])], seed=5)
    assert [e.build_id for e in got] == ["abc"]
    assert not sent[0].green and sent[0].fast_cases == (LONG,)
    assert sent[0].options == {"interleave": True, "salt": 5}
    heard: list[str] = []
    verify.confirm_speed([("abc", Path("k.cubin"), [], [LONG])], seed=5, backends=("sdpa_default",), note=heard.append)
    assert sent[1].options == {"interleave": True, "salt": 5, "backends": ["sdpa_default"]}
    assert heard == [f"timing abc beside sdpa_default on {LONG.tag} (1 of 1)"]
    with pytest.raises(VerifyFailed, match="refusing to promote red: timed beside SDPA"):
        verify.confirm_speed([("red", Path("k.cubin"), [], [LONG])], seed=5)
    with pytest.raises(EvoError, match="refusing to promote hung: it timeout while timed beside SDPA"):
        verify.confirm_speed([("hung", Path("k.cubin"), [], [LONG])], seed=5)


def test_promote_compares_the_timings_of_the_gpu_it_verifies_on() -> None:
    """A database of two GPUs' studies: the GPU present wins over the one most candidates were
    timed on, when any candidate was timed on it; a named device wins over both."""
    from types import SimpleNamespace

    from evo.products.promote import choose_device

    newest: dict[str, tuple[str, list[Any]]] = {"a": ("NVIDIA H200", []), "b": ("NVIDIA H200", []),
                                                "c": ("NVIDIA H100 80GB HBM3", [])}
    store: Any = SimpleNamespace(latest_timings=lambda ids: {i: newest[i] for i in ids})
    ids = list(newest)
    assert choose_device(store, ids, None) == "NVIDIA H200"                        # no GPU here: the majority
    assert choose_device(store, ids, None, "NVIDIA H100 80GB HBM3") == "NVIDIA H100 80GB HBM3"
    assert choose_device(store, ids, None, "NVIDIA A100") == "NVIDIA H200"        # nothing timed on it
    assert choose_device(store, ids, "NVIDIA H200", "NVIDIA H100 80GB HBM3") == "NVIDIA H200"

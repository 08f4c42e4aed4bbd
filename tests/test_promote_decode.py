"""evo promote with a split-KV decode kernel (issue 34): decode cases are planned into routes of
their own, and the ragged and paged cases (D6, D7) into layout routes of theirs, won only where the
kernel beat SDPA's padded fallback on them; the package ships the flash_decode cubin with its split
configuration and evo's split-plan module, its dispatch rule sends decode problems to the decode
kernel, calls with seqlens / block_table to the _lens / _paged entry of their layout route and
prefill problems to their own routes, ``explain``'s text names the route and entry, promote verifies
a layout route on ragged and paged batches of its capacities, and the package's split plan is evo's
runtime's.

The database holds fake but complete records (as in tests/test_promote.py): a flash_decode
candidate timed on the decode suite and a flash_mma candidate timed on LLM prefill cases; cubins
are placeholder bytes, which nothing here loads.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from evo.family import splitkv
from evo.family.manifest import load_family
from evo.family.render import Rendered, render
from evo.family.space import SplitConfig, launch_config, make_candidate, split_plan
from evo.gpu.draws import DECODE_ROWS, DECODE_SCORES, MAX_BUCKET_LEN, PAGE_SIZES, verified_group
from evo.gpu.suites import fast_cases
from evo.products import promote as promoting
from evo.products.bench import served_by
from evo.products import verify as verifier
from evo.products.promote import promote
from evo.products.routes import Contender, Measured, Shipped, is_decode, plan_routes
from evo.results import BuildResult, CheckResult, Evaluation, Shape, Status, Timing
from evo.store import CandidateView, Store, open_store
from evo.toolchain.build import build_id_for, cache_dir

DEVICE = {"name": "NVIDIA H100 80GB HBM3", "sm": "90"}
NAME = "decode_pkg"
DECODE = fast_cases(["decode"])                       # D1-D7, bf16, D = 128
PREFILL = [Shape("L8", 16, 32, 512, 128, False, "bf16", 8), Shape("L1", 1, 32, 4096, 128, False, "bf16", 8),
           Shape("L8", 16, 32, 512, 128, True, "bf16", 8)]
BASE_US = 100.0


@pytest.fixture(scope="module", autouse=True)
def _env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVO_CANDIDATES", str(tmp_path_factory.mktemp("candidates")))
        yield


def _record(store: Store, r: Rendered, run: int, us: dict[Shape, float]) -> str:
    """A built (placeholder cubin), green, FAST-timed candidate."""
    bid = build_id_for(r, "sm_90a")
    cubin = cache_dir(bid) / "elsewhere.cubin"
    cubin.parent.mkdir(parents=True, exist_ok=True)
    cubin.write_bytes(b"\x7fELF placeholder " + bid.encode())
    store.record_build(r, BuildResult(bid, r.source_hash, "sm_90a", ("-O3",), Status.BUILT, cubin_path=str(cubin)), run)
    checks = [CheckResult(Shape("G1", 1, 8, 512, 64, c), 0, True, 1e-4, 1e-4, 7e-4) for c in (False, True)]
    timings = [t for s, x in us.items()
               for t in (Timing(s, "evo", x, x, x), Timing(s, "sdpa_default", BASE_US, BASE_US, BASE_US))]
    store.record_evaluation(Evaluation(bid, Status.FAST, checks=checks, timings=timings, device=DEVICE), run)
    return bid


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Study ``d``: flash_decode (``dec``) wins every decode case and loses the prefill ones;
    flash_mma (``pre``) wins the prefill cases and loses the decode ones."""
    url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'evo.sqlite'}"
    with open_store(url) as store:
        run = store.start_run("test", study="d", device=DEVICE)
        dec = _record(store, render(make_candidate("flash_decode")), run,
                      {s: 40.0 for s in DECODE} | {s: 300.0 for s in PREFILL})
        pre = _record(store, render(make_candidate("flash_mma")), run,
                      {s: 150.0 for s in DECODE} | {s: 60.0 for s in PREFILL})
    return {"url": url, "dec": dec, "pre": pre}


@pytest.fixture(scope="module")
def package(db: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("out")
    promote(NAME, out, db_url=db["url"], study="d", verify=False)
    return out / NAME


def _module(package: Path, name: str) -> ModuleType:
    """One of the package's pure-Python modules, loaded from its file (no torch, no install)."""
    spec = importlib.util.spec_from_file_location(f"{NAME}_{name}", package / NAME / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module       # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def _table(package: Path) -> dict[str, Any]:
    return json.loads((package / NAME / "dispatch.json").read_text())


# ----------------------------------------------------------------------------- planning


def _contender(cid: str, speedups: dict[Shape, float]) -> Contender:
    view = CandidateView(cid, "tiny", 1, {}, cid, Status.FAST, "", None, "sm_90a", (), None, None)  # type: ignore[arg-type]
    return Contender(view, tuple(Measured(s, 10.0 / x, 10.0) for s, x in speedups.items()))


def test_the_decode_suite_and_only_it_is_decode() -> None:
    assert DECODE and all(is_decode(s) for s in DECODE)
    assert not any(is_decode(s) for s in fast_cases(["fast", "llm"]))


def test_decode_cases_are_planned_into_routes_of_their_own() -> None:
    """The contiguous decode cases make decode routes (max_lq = DECODE_ROWS, buckets of their own
    cache lengths), D6 a lens route and D7 a paged one (bucketed by capacity, each sequence's causal
    mask at its bottom right); the prefill cases keep routes planned on them alone."""
    routes = plan_routes([_contender("dec", {s: 2.5 for s in DECODE} | {s: 0.3 for s in PREFILL}),
                          _contender("pre", {s: 0.7 for s in DECODE} | {s: 1.6 for s in PREFILL})])
    by = {layout: [r for r in routes if r.max_lq is not None and r.layout == layout]
          for layout in ("contiguous", "lens", "paged")}
    decode, rest = by["contiguous"], [r for r in routes if r.max_lq is None]
    assert decode and all(r.max_lq == DECODE_ROWS and r.winner == ("dec" if r.shapes else None) for r in decode)
    assert {s for r in decode for s in r.shapes} == {s for s in DECODE if s.layout == "contiguous"}
    for layout, case in (("lens", "D6"), ("paged", "D7")):
        (route,) = by[layout]
        assert [s.case for s in route.shapes] == [case] and route.winner == "dec" and route.max_lq == DECODE_ROWS
        assert (route.bucket.lo, route.top) == (1, MAX_BUCKET_LEN)   # twice D6's capacity, past promote's checks
        assert route.limits() == (f"Lq <= 16, max(Lq, Lk) 1..{MAX_BUCKET_LEN}, B*Hq <= 65535, "
                                  f"Hq/Hkv <= {verified_group(65535)}")
    assert rest and all(r.winner == ("pre" if r.shapes else None) for r in rest)
    assert {s for r in rest for s in r.shapes} == set(PREFILL)
    assert routes == decode + by["lens"] + by["paged"] + rest
    assert decode[0].limits().startswith("Lq <= 16, max(Lq, Lk) 1..")


def test_a_layout_route_is_the_kernels_only_where_it_beat_sdpas_padded_call() -> None:
    """The kernel that wins the contiguous decode cases but loses D7 to SDPA's gather-pad-and-mask
    (say, a slow paged entry) gets the lens route and no paged one (a key's routes of a layout are
    planned only where some kernel won one: the package then says no paged route was promoted for
    it); each layout is planned on its own cases, a causal one with each sequence's mask at its
    bottom right."""
    speed = {s: 2.5 for s in DECODE} | {s: 0.9 for s in DECODE if s.layout == "paged"}
    routes = plan_routes([_contender("dec", speed)])
    assert {r.layout: r.winner for r in routes if r.layout != "contiguous"} == {"lens": "dec"}
    assert all(r.winner == "dec" for r in routes if r.layout == "contiguous" and r.shapes)
    causal = [replace(s, case="D6c", causal=True) for s in DECODE if s.layout == "lens"]
    (route,) = plan_routes([_contender("dec", {s: 2.0 for s in causal})])
    assert route.aligns == ("bottom_right",) and route.limits().endswith("each sequence's causal mask at its bottom right")


def test_decode_routes_go_to_sdpa_where_no_kernel_beats_it() -> None:
    routes = plan_routes([_contender("pre", {s: 0.7 for s in DECODE} | {s: 1.6 for s in PREFILL})])
    assert all(r.winner is None and r.best is not None for r in routes if r.max_lq is not None)
    assert any(r.winner == "pre" for r in routes if r.max_lq is None)


# ----------------------------------------------------------------------------- the package


def test_promote_ships_the_decode_kernel_with_its_split_config(package: Path, db: dict[str, str]) -> None:
    kernels = [k for k in _table(package)["kernels"] if k["id"] == db["dec"]]
    assert kernels and all(k["abi"] == "split_kv" for k in kernels)
    launch = launch_config(load_family("flash_decode"), make_candidate("flash_decode"), 128)
    for k in kernels:
        assert launch.split is not None and k["head_dim"] == 128
        assert k["split"] == {"key_tile": launch.split.key_tile, "split_min": launch.split.split_min,
                              "waves": launch.split.waves, "ragged_splits": launch.split.ragged_splits}
        assert (k["threads"], k["rows_per_cta"], k["smem_bytes"]) == \
            (launch.threads, launch.rows_per_cta, launch.smem_bytes)
        assert k["layouts"] == ["lens", "paged"]                 # its _lens and _paged entries ship too
    assert all(k["split"] is None and k["layouts"] == [] for k in _table(package)["kernels"] if k["id"] == db["pre"])
    assert sorted(p.name for p in (package / NAME / "kernels").iterdir()) == \
        sorted(f"{i}{ext}" for i in (db["dec"], db["pre"]) for ext in (".cu", ".cubin"))


def test_the_table_routes_decode_to_the_decode_kernel_and_prefill_to_its_own(package: Path,
                                                                             db: dict[str, str]) -> None:
    routes = _table(package)["routes"]
    decode = [r for r in routes if r["max_lq"]]
    assert {(r["causal"], r["candidate"], r["max_lq"]) for r in decode if r["cases"]} == \
        {(False, db["dec"], 16), (True, db["dec"], 16)}
    assert all(r["candidate"] is None for r in routes if not r["cases"])     # buckets no case was timed in
    assert {r["candidate"] for r in routes if not r["max_lq"] and r["cases"]} == {db["pre"]}
    assert {(r["layout"], tuple(r["cases"])) for r in routes if r["layout"] != "contiguous"} == \
        {("lens", ("D6-bf16",)), ("paged", ("D7-bf16",))}
    assert {r["layout"] for r in routes if not r["max_lq"]} == {"contiguous"}


def test_the_package_copies_evos_split_plan_verbatim(package: Path) -> None:
    assert (package / NAME / "_splitkv.py").read_bytes() == Path(splitkv.__file__).read_bytes()


SERVED = [s for s in DECODE if s.Lk <= MAX_BUCKET_LEN]   # promote's checks stop at MAX_BUCKET_LEN


@pytest.mark.parametrize("shape", SERVED, ids=lambda s: s.tag)
def test_decode_problems_route_to_the_decode_kernel(package: Path, db: dict[str, str], shape: Shape) -> None:
    """D2-D5 go to the decode routes; D6 (seqlens) to the lens route and D7 (a block table too) to
    the paged one, whose kernel runs its _lens / _paged entry."""
    rules = _module(package, "_routes")
    p = rules.Problem(shape.B, shape.H, shape.Hkv, shape.L, shape.Lk, shape.D, shape.dtype, shape.causal, shape.align,
                      shape.layout)
    route, why = rules.route_for(_table(package)["routes"], p)
    assert why == "" and route["candidate"] == db["dec"] and route["max_lq"] == 16 and route["layout"] == shape.layout
    assert route["entry"] == f"evo_attn_d128_bf16_{'causal' if shape.causal else 'full'}"
    kind, entry = ("decode", route["entry"]) if shape.layout == "contiguous" else \
        (shape.layout, f"{route['entry']}_{shape.layout}")
    text = rules.served(route)
    assert text.startswith(f"kernel {entry} of candidate {db['dec'][:12]} (its {kind} route D=128 bf16 ")
    assert "serves Lq <= 16, max(Lq, Lk) " in text


def test_a_layout_call_takes_no_other_route(package: Path) -> None:
    """A ragged call of a key with no layout route of its layout is SDPA's, whatever the decode
    routes serve; a contiguous call never takes a layout route."""
    rules = _module(package, "_routes")
    routes = _table(package)["routes"]
    p = rules.Problem(16, 32, 8, 1, 4096, 128, "bf16", True, "bottom_right", "lens")      # D5c's bucket
    route, why = rules.route_for(routes, p)
    assert route is None and why == "no lens route was promoted for D=128 bf16 causal"
    route, _ = rules.route_for(routes, p._replace(layout="contiguous"))
    assert route is not None and route["layout"] == "contiguous"


def test_evo_bench_names_the_kernel_a_package_serves_each_decode_case_with(package: Path, db: dict[str, str]) -> None:
    """``evo bench --package`` labels each row with the kernel the package's rule picks: D6 and D7
    by their layout routes, a ragged case of a key with no layout route as SDPA's, D2-D5 by the
    decode routes (their query rows within max_lq), D1 past every route as SDPA's."""
    routes = _table(package)["routes"]
    for s in DECODE:
        want = "sdpa" if s.case == "D1" else db["dec"]
        assert served_by(routes, s.as_dict()) == want, s.case
    d6 = next(s for s in DECODE if s.layout == "lens")
    assert served_by(routes, replace(d6, causal=True).as_dict()) == "sdpa"      # no causal lens route
    assert served_by(routes, replace(next(s for s in DECODE if s.case == "D2"), L=17).as_dict()) != db["dec"]


def _shipped(cid: str) -> Shipped:
    view = CandidateView(cid, "flash_decode", 1, {}, cid, Status.FAST, "", None, "sm_90a", (), None, None)  # type: ignore[arg-type]
    return Shipped(view, {}, Path("k.cubin"), "", {})


def test_promote_verifies_a_layout_route_on_ragged_and_paged_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The buckets promote hands the GPU verification for the decode kernel hold its lens and paged
    routes (with D7's page size), and their checks are that layout's problems over each capacity of
    the bucket: 3-8 sequences of their own lengths (the capacity, 0 and 1 keys), 1-16 query rows (16
    at the top), pages of every size GREEN draws, within the reference's budget, and the route's
    heads and query heads per key/value head at its shortest capacity."""
    routes = plan_routes([_contender("dec", {s: 2.5 for s in DECODE})])
    seen: list[tuple[str, tuple[verifier.Bucket, ...]]] = []

    def verify_kernels(todo: list[tuple[str, Path, list[Any], tuple[verifier.Bucket, ...]]], seed: int,
                       on_pass: Callable[[str, int], None]) -> None:
        for cid, _, _, buckets in todo:
            seen.append((cid, buckets))
            on_pass(cid, 1)

    monkeypatch.setattr(verifier, "verify_kernels", verify_kernels)
    promoting._verify([_shipped("dec")], routes, 5, {})
    ((cid, buckets),) = seen
    layouts = {b.layout: b for b in buckets if b.layout != "contiguous"}
    assert cid == "dec" and set(layouts) == {"lens", "paged"} and layouts["paged"].pages == (16,)
    for layout, bucket in layouts.items():
        cases = verifier.cases_for([bucket], 5)
        shapes = [c.shape for c in cases]
        assert {s.layout for s in shapes} == {layout} and all(c.inputs == "spikes" for c in cases[:-2])
        assert {1, 2, MAX_BUCKET_LEN - 1, MAX_BUCKET_LEN} <= {s.Lk for s in shapes}
        assert all({0, 1, s.Lk} <= set(s.seqlens()) for s in shapes if s.B >= 3)
        assert max(s.L for s in shapes) == DECODE_ROWS and all(s.L <= DECODE_ROWS for s in shapes)
        assert all(s.B * s.H * s.L * s.Lk <= DECODE_SCORES for s in shapes[:-2])
        assert [(s.B * s.H, s.Lk, s.H // s.Hkv) for s in shapes[-2:]] == [(65535, 1, 1), (65535, 1, verified_group(65535))]
        if layout == "paged":
            assert {s.page_size for s in shapes} == set(PAGE_SIZES) | {1}


@pytest.mark.parametrize("shape", [*PREFILL, Shape("X", 8, 32, 17, 128, False, "bf16", 8, 4096)],
                         ids=lambda s: f"{s.tag}-{s.L}")
def test_prefill_problems_keep_their_routes(package: Path, db: dict[str, str], shape: Shape) -> None:
    """The LLM cases, and a problem one query row past what a decode route serves."""
    rules = _module(package, "_routes")
    p = rules.Problem(shape.B, shape.H, shape.Hkv, shape.L, shape.Lk, shape.D, shape.dtype, shape.causal, shape.align)
    route, why = rules.route_for(_table(package)["routes"], p)
    assert why == "" and route["candidate"] == db["pre"] and not route["max_lq"]
    assert rules.served(route).startswith(f"kernel {route['entry']} of candidate {db['pre'][:12]} (its route ")


def test_a_decode_problem_past_every_route_is_sdpa_and_says_why(package: Path) -> None:
    """Past the longest length promote verifies (every route stops at MAX_BUCKET_LEN or its bucket's
    bottom: D1's 131072 keys are past it), SDPA serves, and explain says why."""
    rules = _module(package, "_routes")
    routes = _table(package)["routes"]
    assert len(SERVED) == len(DECODE) - 1 and max(r["max_len"] for r in routes) < 131072
    longest = max(r["max_len"] for r in routes if not r["causal"])
    route, why = rules.route_for(routes, rules.Problem(1, 32, 8, 1, longest + 1, 128, "bf16", False))
    assert route is None and why == (f"max(Lq, Lk)={longest + 1} is past {longest}, the longest length promote "
                                     "verified for D=128 bf16 full")
    route, why = rules.route_for(routes, rules.Problem(1, 32, 8, 1, 4096, 64, "bf16", False))
    assert route is None and why == "no kernel was promoted for D=64 bf16 full"


GRID = list(itertools.product((1, 3, 64), ((8, 8), (32, 8), (64, 8), (32, 1), (6, 2)), (1, 4, 16, 17),
                              (1, 63, 512, 1025, 4096, 131072), (64, 128)))
SPLITS = [SplitConfig(64, 512, 2, 1), SplitConfig(32, 256, 1, 4), SplitConfig(128, 2048, 4, 8)]


@pytest.mark.parametrize("split", SPLITS, ids=str)
def test_the_packages_split_plan_is_the_runtimes(package: Path, split: SplitConfig) -> None:
    """For a grid of (B, Hq, Hkv, Lq, Lk, D), block rows and SM counts: the numbers the package's
    launcher gets from its ``_splitkv`` are the grid, split length, workspace and counter bytes
    evo/gpu/runtime.py launches with (:func:`evo.family.space.split_plan`)."""
    copied = _module(package, "_splitkv")
    for (B, (Hq, Hkv), Lq, Lk, D), rows, sms, ragged in itertools.product(GRID, (16, 32), (108, 132),
                                                                          (False, True)):
        plan = split_plan(split, rows, B, Hq, Hkv, Lq, Lk, sms, ragged)
        nbytes = plan.workspace_bytes(rows, D)
        want = (*plan.grid(B, Hkv)[:2], plan.split_len, nbytes, plan.counter_bytes() if nbytes else 0)
        assert copied.launch_numbers(split.key_tile, split.split_min, split.waves, split.ragged_splits, rows, D,
                                     B, Hq, Hkv, Lq, Lk, sms, ragged) == want


CHECK = """
import json, pytest, torch
import {name} as pkg
q = torch.randn(1, 32, 1, 128, dtype=torch.bfloat16)
k = torch.randn(1, 8, 4096, 128, dtype=torch.bfloat16)
result = {{"explain": pkg.explain(q, k, k, enable_gqa=True),
           "tests": int(pytest.main(["-q", "-p", "no:cacheprovider", "--pyargs", "{name}.tests"]))}}
print("RESULT " + json.dumps(result))
"""


def test_installed_package_passes_its_own_tests(package: Path, tmp_path: Path) -> None:
    """pip-installed offline, the package's CPU tests (its dispatch rule against this table with
    decode routes, the launcher's arguments, the split plan) pass, and a CPU call is SDPA's."""
    target = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                          "--disable-pip-version-check", "-q", "--target", str(target), str(package)],
                         capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("EVO_TEMPLATE_PATH", "EVO_CANDIDATES")}
    env["PYTHONPATH"] = str(target)
    run = subprocess.run([sys.executable, "-c", CHECK.format(name=NAME)], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path, env=env)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["tests"] == 0, run.stdout[-3000:]
    assert result["explain"] == "SDPA: not on a CUDA device"

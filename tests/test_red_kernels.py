"""A kernel red under one candidate is red under all: machine-code digests and what promote does.

The digests are checked on real flash_wgmma builds (nvcc; skipped without it): two candidates that
differ only in a D=64 gene share their D=128 kernels byte for byte, as the study wgmma3 pair did.
Promotion is checked on a database built through the store API (test_promote's way: the ``tiny``
fixture family, placeholder cubins), with the digests in the evaluations' device info.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evo.products import promote as promote_mod
from evo.toolchain.build import build_batch, build_id_for, cache_dir
from evo.errors import EvoError
from evo.toolchain.machine_code import kernel_digests
from evo.products.promote import promote
from evo.family.manifest import load_family
from evo.family.render import Rendered, entry_name, render
from evo.results import BuildResult, CheckResult, Evaluation, Shape, Status, Timing
from evo.family.space import make_candidate
from evo.store import Store, open_store

FIXTURES = Path(__file__).parent / "fixtures" / "templates"
DEVICE = {"name": "NVIDIA H100", "sm": "90"}
FULL, CAUSAL = entry_name(64, "fp16", False), entry_name(64, "fp16", True)
MID, MID_C = Shape("F1", 1, 8, 512, 64, False), Shape("F1", 1, 8, 512, 64, True)


def test_candidates_differing_in_d64_genes_share_their_d128_kernels(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not available")
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path))
    fam = dataclasses.replace(load_family("flash_wgmma"), head_dims=(64, 128))   # half the compile, same question
    pair = [render(make_candidate(fam, {"STAGES_D64": s}), fam) for s in (2, 4)]
    try:
        built = build_batch(pair, arch="sm_90a")
    except EvoError as err:
        pytest.skip(str(err))
    a, b = (kernel_digests(Path(r.cubin_path)) for r in built)
    assert len(a) == 8 and a.keys() == b.keys()
    for name in a:
        assert (a[name] == b[name]) == ("_d128_" in name), name


def test_a_kernel_built_in_a_subset_keeps_its_portable_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A search builds only its cases' kernels (render's ``kernels``): the same kernel then sits
    beside other functions, its plain digest may move with the file's symbol table, its portable
    one does not, and a red kernel is matched by either."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not available")
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path))
    fam = dataclasses.replace(load_family("flash_wgmma"), head_dims=(64, 128))
    cand = make_candidate(fam, {})
    pair = [render(cand, fam), render(cand, fam, kernels={(64, "fp16", False), (128, "fp16", True)})]
    try:
        full, part = build_batch(pair, arch="sm_90a")
    except EvoError as err:
        pytest.skip(str(err))
    assert full.build_id != part.build_id and len(pair[1].entries) == 2
    a, b = (kernel_digests(Path(r.cubin_path), portable=True) for r in (full, part))
    assert sorted(b) == sorted(e.name for e in pair[1].entries) and all(a[n] == b[n] for n in b)
    from evo.products.red_kernels import cubin_digests

    assert all(kernel_digests(Path(full.cubin_path))[n] in cubin_digests(full.cubin_path)[n] for n in a)


def test_what_is_not_an_elf_cubin_has_no_digests(tmp_path: Path) -> None:
    assert kernel_digests(b"\x7fELF placeholder") == {}
    (tmp_path / "k.py").write_text("import triton\n")
    assert kernel_digests(tmp_path / "k.py") == {}


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "candidates"))
    yield


def _add(store: Store, r: Rendered, run: int, *, digests: dict[str, str], failed: Shape | None = None,
         us: dict[Shape, float] | None = None) -> str:
    """A built candidate (placeholder cubin) with one evaluation: fast with ``us``, or red on ``failed``."""
    bid = build_id_for(r, "sm_90a")
    cache_dir(bid).mkdir(parents=True, exist_ok=True)
    (cache_dir(bid) / "kernel.cubin").write_bytes(b"\x7fELF placeholder " + bid.encode())
    store.record_build(r, BuildResult(bid, r.source_hash, "sm_90a", ("-O3",), Status.BUILT), run)
    checks = [CheckResult(Shape("G1", 1, 8, 512, 64, c), 0, failed is None or failed.causal != c, 1e-4, 1e-4, 7e-4,
                          "" if failed is None or failed.causal != c else "max|err| 9e-04 > tol 7e-04")
              for c in (False, True)]
    timings = [t for s, u in (us or {}).items()
               for t in (Timing(s, "evo", u, u, u), Timing(s, "sdpa_default", 10.0, 10.0, 10.0))]
    store.record_evaluation(Evaluation(bid, Status.RED if failed else Status.FAST, checks=checks, timings=timings,
                                       device=DEVICE | {"kernel_sha256": json.dumps(digests)}), run)
    return bid


@pytest.fixture
def db(tmp_path: Path) -> dict[str, Any]:
    """A (fast on both keys) and R (red on the full key) share the full kernel's machine code;
    B is slower than A but its own code."""
    url = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    with open_store(url) as store:
        run = store.start_run("test", study="s", device=DEVICE)
        ids = {
            "A": _add(store, render(make_candidate("tiny", {"ROWS": 32})), run,
                      digests={FULL: "same", CAUSAL: "a-causal"}, us={MID: 5.0, MID_C: 5.0}),
            "B": _add(store, render(make_candidate("tiny", {"ROWS": 64})), run,
                      digests={FULL: "b-full", CAUSAL: "b-causal"}, us={MID: 8.0, MID_C: 8.0}),
            "R": _add(store, render(make_candidate("tiny", {"ROWS": 128})), run,
                      digests={FULL: "same", CAUSAL: "r-causal"}, failed=Shape("G1", 1, 8, 512, 64, False)),
        }
    return {"url": url, **ids}


def test_a_kernel_red_under_a_sibling_serves_no_bucket(db: dict[str, Any], tmp_path: Path) -> None:
    got = promote("pkg", tmp_path / "out", db_url=db["url"], study="s", verify=False)
    winners = {r.key: r.winner for r in got.routes}
    assert winners[(64, "fp16", False)] == db["B"]       # A's full kernel is R's red one
    assert winners[(64, "fp16", True)] == db["A"]        # A's causal kernel is its own
    (x,) = got.excluded
    assert (x.candidate, x.entry, x.red.candidate) == (db["A"], FULL, db["R"])
    assert "failed GREEN as part of candidate" in x.line() and "G1-fp16 seed 0" in x.line()
    provenance = json.loads((tmp_path / "out" / "pkg" / "pkg" / "PROVENANCE.json").read_text())
    assert provenance["excluded_red_kernels"] == [x.as_dict()]


def test_without_the_shared_code_the_faster_kernel_wins(db: dict[str, Any], tmp_path: Path) -> None:
    with open_store(db["url"]) as store:          # R failed on a kernel of its own: nothing is kept out
        _add(store, render(make_candidate("tiny", {"ROWS": 32, "SMEM_KB": 2})), store.start_run("t", study="t"),
             digests={FULL: "t-full"}, us={MID: 4.0})
    got = promote("pkg", tmp_path / "out", db_url=db["url"], study="t", verify=False)
    assert not got.excluded and [r.winner for r in got.routes if r.winner]


def test_a_winner_whose_cubin_turns_out_red_loses_its_buckets(db: dict[str, Any], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # the stored digests miss it (a record from before they were kept, a cubin gone from the cache):
    # the winner's cubin, once found for shipping, does not
    monkeypatch.setattr(promote_mod, "candidate_digests", lambda store, cid, info=None: {})
    real = {db["A"]: {FULL: "same", CAUSAL: "a-causal"}, db["B"]: {FULL: "b-full", CAUSAL: "b-causal"}}
    monkeypatch.setattr(promote_mod, "cubin_digests",
                        lambda path: {k: {v} for k, v in next(d for cid, d in real.items() if cid in str(path)).items()})
    got = promote("pkg", tmp_path / "out", db_url=db["url"], study="s", verify=False)
    winners = {r.key: r.winner for r in got.routes}
    assert winners == {(64, "fp16", False): db["B"], (64, "fp16", True): db["A"]}
    assert [(x.candidate, x.entry) for x in got.excluded] == [(db["A"], FULL)]

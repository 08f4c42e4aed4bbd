"""Every kernel family renders every entry and compiles with nvcc for each arch it declares.

CPU only: nvcc compiles, nothing runs. Builds go through ``evo.toolchain.build.build_batch`` (ninja, in
parallel) into a temporary cache, so what is tested is what ``evo build`` and ``evo run`` do.
The default of each family must build clean (no spills) on every arch; the random valid
configurations must compile (every entry: both head dims, causal and not, fp16 and bf16) and
may be resource-rejected (spills), which is the search's job to learn, not a template bug.
The test-only families under ``tests/templates`` (the gate's negative controls) take part
through ``EVO_TEMPLATE_PATH``.
"""

from __future__ import annotations

import dataclasses

import random
import re
import shutil
from pathlib import Path

import pytest

from evo.family.manifest import Family, list_families, load_family
from evo.toolchain.build import build_batch
from evo.family.render import render
from evo.results import BuildResult, Status
from evo.family.space import Candidate, all_candidates as _all, listable, make_candidate, random_candidates

TEST_TEMPLATES = Path(__file__).parent / "templates"
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: cannot compile kernels")
RANDOM_CONFIGS = 8
SEED = 20240611


def _families() -> list[str]:
    """The CUDA families (tests/test_triton_families.py covers the Triton backend's)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVO_TEMPLATE_PATH", str(TEST_TEMPLATES))
        return [f for f in list_families() if load_family(f).backend == "cuda"]


FAMILIES = _families()


@pytest.fixture(autouse=True)
def _test_templates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(TEST_TEMPLATES))


def _family_with_template(name: str, arch: str | None = None) -> Family:
    fam = load_family(name)
    if not (fam.path / fam.template).is_file():
        pytest.skip(f"{name}: {fam.template} is not written yet")
    if arch is not None and arch not in fam.arches:
        pytest.skip(f"{name} is not built for {arch} (its manifest lists {', '.join(fam.arches)})")
    return fam


def _sample(fam: Family) -> list[Candidate]:
    """The default and up to RANDOM_CONFIGS other valid points (seeded, so runs repeat)."""
    default = make_candidate(fam)
    others = [c for c in random_candidates(fam, RANDOM_CONFIGS + 1, random.Random(SEED)) if c != default]
    return [default, *others[:RANDOM_CONFIGS]]


@pytest.mark.parametrize("family", FAMILIES)
def test_family_renders_every_entry(family: str) -> None:
    fam = _family_with_template(family)
    for cand in _sample(fam):
        rendered = render(cand, fam)
        missing = [e.name for e in rendered.entries
                   if not re.search(rf'extern "C" __global__[^;{{]*\b{e.name}\(', rendered.source)]
        assert not missing, f"{cand.label()} does not define {missing}"


def test_faulty_switches_change_the_kernel() -> None:
    fam = _family_with_template("faulty")
    bodies = {v: render(make_candidate(fam, {"FAULT": v}), fam).source.split("\n", 2)[2]
              for v in fam.params["FAULT"].values}
    assert len(set(bodies.values())) == len(bodies), "some FAULT values render the same kernel"


def test_faulty_decode_at_none_is_flash_decode_default_code() -> None:
    # the positive control is the family's own kernel: one machine code (its build compiles nothing)
    faulty, flash = load_family("faulty_decode"), load_family("flash_decode")
    assert render(make_candidate(faulty), faulty).body == render(make_candidate(flash), flash).body


def _build(cands: list[Candidate], fam: Family, arch: str, cache: Path,
           monkeypatch: pytest.MonkeyPatch) -> list[BuildResult]:
    monkeypatch.setenv("EVO_CANDIDATES", str(cache))
    return build_batch([render(c, fam) for c in cands], arch=arch)


def _entries_missing(cand: Candidate, fam: Family, result: BuildResult) -> list[str]:
    return sorted({e.name for e in render(cand, fam).entries} - set(result.resources))


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("family", FAMILIES)
def test_default_builds_clean(family: str, arch: str, build_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fam = _family_with_template(family, arch)
    cand = make_candidate(fam)
    (result,) = _build([cand], fam, arch, build_cache, monkeypatch)
    assert result.status is Status.BUILT, f"{cand.label()} {arch}: {result.reason}\n{result.log[-2000:]}"
    assert _entries_missing(cand, fam, result) == []
    assert all(r.spill_stores == r.spill_loads == 0 for r in result.resources.values())


def _random_pairs() -> list[tuple[str, str]]:
    """(family, arch) of the random-config sweep: each family at the first arch its manifest lists.
    The sweep tests the template over its genes; every arch's build of the default is
    test_default_builds_clean's, and compiling each random point twice doubled CI's longest test."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVO_TEMPLATE_PATH", str(TEST_TEMPLATES))
        return [(f, load_family(f).arches[0]) for f in FAMILIES]


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize(("family", "arch"), _random_pairs())
def test_random_configs_compile(family: str, arch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fam = _family_with_template(family, arch)
    cands = _sample(fam)[1:]
    # a space too large to list (flash_wgmma: 1.9 million valid points, 13 GB listed) is sampled: it has more than enough
    assert len(cands) == (min(RANDOM_CONFIGS, sum(1 for _ in _all(fam)) - 1) if listable(fam) else RANDOM_CONFIGS)
    narrowed = _one_bucket_each(fam, len(cands))
    if len(cands) >= len(fam.head_dims) * len(fam.dtypes):
        assert {(d, t) for f in narrowed for d in f.head_dims for t in f.dtypes} == \
            {(d, t) for d in fam.head_dims for t in fam.dtypes}
    if len(cands) > len(fam.launch.get("layouts", [])):
        assert {x for f in narrowed for x in f.launch.get("layouts", [])} == set(fam.launch.get("layouts", []))
    problems = []
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "cache"))
    results = build_batch([render(c, one) for c, one in zip(cands, narrowed, strict=True)], arch=arch)
    for cand, one, result in zip(cands, narrowed, results, strict=True):
        if result.status is Status.COMPILE_FAILED:
            problems.append(f"{cand.label()} {arch}: {result.log[-2000:]}")
        elif missing := _entries_missing(cand, one, result):
            problems.append(f"{cand.label()} {arch}: no ptxas report for {missing}")
    assert problems == []


def _one_bucket_each(fam: Family, n: int) -> list[Family]:
    """The family narrowed to one (head dim, dtype) per random point, in turn, both masks kept, and
    a split-KV family to at most one of its cache layouts ([launch] layouts: none, lens, paged in
    turn): each point's kernels of one bucket are compiled. Compiling all of a point's buckets
    multiplied CI's longest test by their number (4, flash_wgmma 8; flash_decode's layout entries
    tripled it again) while test_default_builds_clean compiles every bucket and layout of the
    default anyway. A space of fewer points than buckets (faulty_decode) covers what it can."""
    buckets = [(d, t) for d in fam.head_dims for t in fam.dtypes]
    layouts: list[dict[str, list[str]]] = [{}]
    if fam.launch.get("layouts"):
        layouts = [{"layouts": []}, *({"layouts": [x]} for x in fam.launch["layouts"])]
    return [dataclasses.replace(fam, head_dims=(buckets[i % len(buckets)][0],),
                                dtypes=(buckets[i % len(buckets)][1],),
                                launch=fam.launch | layouts[i % len(layouts)]) for i in range(n)]

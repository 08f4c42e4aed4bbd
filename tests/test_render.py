"""Rendering is deterministic, validated first, and strict about undefined template names."""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.errors import EvoError, InvalidCandidate
from evo.family.render import build_id, build_key, entry_name, render
from evo.family.space import Candidate, make_candidate

MANIFEST = """
[family]
name = "{name}"
version = 3
template = "k.cu.j2"
head_dims = [64, 128]
dtypes = ["fp16", "bf16"]
[params.TILE]
values = [16, 32]
default = 16
[params.FAST]
values = [false, true]
default = false
kind = "feature"
[launch]
threads = "TILE * 2"
rows_per_cta = "TILE"
smem_bytes = "TILE * D"
"""


def _family(root: Path, name: str, body: str) -> None:
    d = root / name
    d.mkdir(parents=True)
    (d / "manifest.toml").write_text(MANIFEST.format(name=name))
    (d / "k.cu.j2").write_text(body)


@pytest.fixture
def families(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    body = ('{% from "common/entries.cuh.j2" import export_entries %}\n'
            "// TILE={{ TILE }} FAST={{ FAST }}\n"
            "template<int D, typename T, bool CAUSAL> __device__ void body(const T*, const T*, const T*,"
            " T*, int, int, int, float) {}\n"
            "{{ export_entries(entries, 'body') }}")
    _family(tmp_path, "toy", body)
    _family(tmp_path, "broken", "{{ NOT_A_PARAM }}")
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(tmp_path))
    return tmp_path


def test_same_candidate_renders_byte_identical(families: Path) -> None:
    a, b = render(make_candidate("toy", {"TILE": 32})), render(make_candidate("toy", {"TILE": 32}))
    assert a.source == b.source and a.source_hash == b.source_hash


def test_different_params_change_the_hash(families: Path) -> None:
    assert render(make_candidate("toy")).source_hash != render(make_candidate("toy", {"FAST": True})).source_hash


def test_entries_cover_head_dims_dtypes_and_causal(families: Path) -> None:
    r = render(make_candidate("toy"))
    names = {e.name for e in r.entries}
    assert len(names) == 8 and entry_name(128, "bf16", True) in names
    assert f"{entry_name(64, 'fp16', False)}(const __half*" in r.source
    assert r.entry(128, "bf16", True).launch.smem_bytes == 16 * 128


def test_a_kernel_subset_exports_only_those_kernels_under_an_id_of_its_own(families: Path) -> None:
    """A search renders only its cases' kernels: fewer exports, another source and id; ``None``
    and a subset naming none of the family's kernels render every kernel, as before."""
    from evo.family.manifest import load_family
    from evo.family.render import subset

    cand, fam = make_candidate("toy"), load_family("toy")
    every = render(cand)
    part = render(cand, kernels={(64, "fp16", True), (128, "bf16", False), (256, "fp16", True)})
    assert [e.name for e in part.entries] == [entry_name(64, "fp16", True), entry_name(128, "bf16", False)]
    assert entry_name(64, "fp16", False) not in part.source and part.source_hash != every.source_hash
    assert render(cand, kernels=None).source == every.source == render(cand, kernels={(96, "fp16", True)}).source
    assert subset(fam, every.entries) is None
    assert subset(fam, part.entries) == [[64, "fp16", True], [128, "bf16", False]]
    assert render(cand, kernels={tuple(k) for k in subset(fam, part.entries) or []}).source == part.source


def test_undefined_template_name_is_a_clear_error(families: Path) -> None:
    with pytest.raises(EvoError, match="template error in broken.*NOT_A_PARAM"):
        render(make_candidate("broken"))


def test_invalid_candidate_is_rejected_before_rendering(families: Path) -> None:
    with pytest.raises(InvalidCandidate, match="TILE=8 is not allowed"):
        render(Candidate("toy", (("TILE", 8), ("FAST", False))))


def test_build_id_depends_on_flags_and_arch(families: Path) -> None:
    r = render(make_candidate("toy"))
    ids = {build_id(build_key(r, flags, arch, "nvcc 13.0", {}))
           for flags, arch in ((("-O3",), "sm_90a"), (("-O2",), "sm_90a"), (("-O3",), "sm_80"))}
    assert len(ids) == 3

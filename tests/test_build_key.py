"""The build id covers everything that defines a built candidate: the rendered source, and also
the evaluated launch configs, the compiler and the headers included from outside the toolkit,
none of which need appear in the source. Runs without nvcc (the compiler's identity is faked)
except where a test compiles."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from evo.toolchain import build
from evo.toolchain.build import build_batch, build_id_for, load_cached
from evo.errors import EvoError
from evo.family.render import Rendered, build_id, build_key, render
from evo.results import Status
from evo.family.space import LaunchConfig, make_candidate

TINY = Path(__file__).parent / "fixtures" / "templates" / "tiny"
NVCC = ("13.0.88", "Cuda compilation tools, release 13.0, V13.0.88; Build cuda_13.0.r13.0/compiler.36424714_0")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@pytest.fixture
def family(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the tiny fixture family (so tests can edit it), a private cache, and a
    fixed nvcc identity."""
    folder = tmp_path / "templates" / "tiny"
    shutil.copytree(TINY, folder)
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(folder.parent))
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "candidates"))
    monkeypatch.setattr(build, "_nvcc_version", lambda path: NVCC)
    monkeypatch.setattr(build, "nvcc_path", lambda: "/fake/nvcc")
    return folder


def edit(path: Path, old: str, new: str) -> None:
    """Replace text in a file and move its mtime on, so caches keyed by mtime see the edit."""
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def tiny() -> Rendered:
    return render(make_candidate("tiny"))


def ident() -> str:
    return build_id_for(tiny(), "sm_90a")


def test_an_unchanged_candidate_keeps_its_id(family: Path) -> None:
    assert ident() == ident()
    assert len(ident()) == 64


@pytest.mark.parametrize(("old", "new"), [
    ('smem_bytes = "SMEM_KB * 1024"', 'smem_bytes = "SMEM_KB * 1024 + 512"'),
    ('rows_per_cta = "ROWS"', 'rows_per_cta = "ROWS * 2"'),
])
def test_the_launch_section_alone_changes_the_id(family: Path, old: str, new: str) -> None:
    before, first = tiny(), ident()
    edit(family / "manifest.toml", old, new)
    assert tiny().source_hash == before.source_hash  # the source does not show the change ...
    assert ident() != first                          # ... the build id does


def test_the_compiler_alone_changes_the_id(family: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = ident()
    monkeypatch.setattr(build, "_nvcc_version", lambda path: ("13.0.89", NVCC[1].replace("88", "89")))
    assert ident() != first


def test_a_new_launch_config_field_is_keyed_without_naming_it(family: Path) -> None:
    """A family may evaluate more launch fields (tensor maps, a persistent grid): all are keyed."""

    @dataclasses.dataclass(frozen=True)
    class Wider(LaunchConfig):
        persistent: bool = False

    r = tiny()
    keys = [build_key(dataclasses.replace(r, entries=tuple(dataclasses.replace(
        e, launch=Wider(e.launch.threads, e.launch.rows_per_cta, e.launch.smem_bytes, flag))
        for e in r.entries)), ("-O3",), "sm_90a", NVCC[1], {}) for flag in (False, True)]
    assert build_id(keys[0]) != build_id(keys[1])


def test_a_tile_counter_is_keyed_only_where_an_entry_takes_one(family: Path) -> None:
    """An entry without a tile counter keys exactly as before the field existed (so every stored
    build keeps its id); one that takes a counter is another build."""
    r = tiny()
    key = build_key(r, ("-O3",), "sm_90a", NVCC[1], {})
    assert key["entries"][0] == {"name": "evo_attn_d64_fp16_full", "head_dim": 64, "dtype": "fp16", "causal": False,
                                 "launch": {"threads": 64, "rows_per_cta": 64, "smem_bytes": 1024, "abi": "ptr",
                                            "tma_rows": (), "persistent": False}}
    counted = dataclasses.replace(r, entries=tuple(
        dataclasses.replace(e, launch=dataclasses.replace(e.launch, tile_counter=True)) for e in r.entries))
    other = build_key(counted, ("-O3",), "sm_90a", NVCC[1], {})
    assert all(e["launch"]["tile_counter"] is True for e in other["entries"])
    assert build_id(other) != build_id(key)


# ---------------------------------------------------------------------------- headers


def fake_package(site: Path, version: str, header: str) -> None:
    """An installed distribution ``fakehdr`` at ``version`` whose header folder holds ``header``."""
    for old in site.glob("fakehdr-*.dist-info"):
        shutil.rmtree(old)
    info = site / f"fakehdr-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fakehdr\nVersion: {version}\n")
    (site / "fakehdr" / "include").mkdir(parents=True, exist_ok=True)
    (site / "fakehdr" / "include" / "fake.h").write_text(header)
    importlib.invalidate_caches()


@pytest.fixture
def packaged(family: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    fake_package(site, "1.0", "#define FAKE 1\n")
    monkeypatch.syspath_prepend(str(site))
    edit(family / "manifest.toml", "[launch]", '[build.packages]\nfakehdr = "fakehdr/include"\n\n[launch]')
    return site


def test_an_included_package_version_alone_changes_the_id(packaged: Path) -> None:
    first = ident()
    fake_package(packaged, "1.1", "#define FAKE 1\n")
    assert ident() != first


def test_an_included_package_header_edit_changes_the_id(packaged: Path) -> None:
    first = ident()
    edit(packaged / "fakehdr" / "include" / "fake.h", "FAKE 1", "FAKE 2")
    assert ident() != first


def test_a_missing_package_is_one_clear_error(packaged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(packaged)])
    importlib.invalidate_caches()
    with pytest.raises(EvoError, match="family tiny includes headers of fakehdr: pip install fakehdr"):
        ident()


def test_a_header_in_a_declared_include_dir_changes_the_id(family: Path) -> None:
    (family / "include").mkdir()
    (family / "include" / "tile.cuh").write_text("constexpr int TILE = 16;\n")
    edit(family / "manifest.toml", "[launch]", '[build]\ninclude_dirs = ["include"]\n\n[launch]')
    first = ident()
    edit(family / "include" / "tile.cuh", "16", "32")
    assert ident() != first


@pytest.mark.parametrize("section", ['include_dirs = "include"', 'include_dirs = ["nowhere"]'])
def test_a_bad_build_section_is_one_clear_error(family: Path, section: str) -> None:
    edit(family / "manifest.toml", "[launch]", f"[build]\n{section}\n\n[launch]")
    with pytest.raises(EvoError, match=r"manifest.toml: (\[build\] include_dirs must be|header folder)"):
        ident()


@pytest.fixture
def local_include(family: Path) -> Path:
    """The template includes helpers.cuh from the family folder, which includes more.cuh."""
    (family / "helpers.cuh").write_text('#pragma once\n#include "more.cuh"\n')
    (family / "more.cuh").write_text("#pragma once\nconstexpr int EVO_HELPER = 1;\n")
    (family / "notes.txt").write_text("not included\n")
    edit(family / "kernel.cu.j2", "#include <cuda_fp16.h>\n", '#include <cuda_fp16.h>\n#include "helpers.cuh"\n')
    return family


def test_a_local_include_is_followed_and_keyed(local_include: Path) -> None:
    first = ident()
    edit(local_include / "more.cuh", "= 1", "= 2")
    assert ident() != first


def test_a_file_the_source_does_not_include_is_not_keyed(local_include: Path) -> None:
    first = ident()
    edit(local_include / "notes.txt", "not", "still not")
    assert ident() == first


# ---------------------------------------------------------------------------- the real compiler


def fake_nvcc(tmp_path: Path, release: str) -> str:
    script = tmp_path / f"nvcc-{release}"
    script.write_text("#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
                      f"echo 'Cuda compilation tools, release 13.0, V{release}'\n"
                      "echo 'Build cuda_13.0.r13.0/compiler.36424714_0'\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_the_compiler_identity_is_its_release_and_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVO_NVCC", fake_nvcc(tmp_path, "13.0.88"))
    assert build.nvcc_version() == "13.0.88"
    assert build.compiler_identity() == ("Cuda compilation tools, release 13.0, V13.0.88; "
                                         "Build cuda_13.0.r13.0/compiler.36424714_0")


@needs_nvcc
def test_a_cached_build_is_hit_and_an_edited_launch_section_is_rebuilt(local_include: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """With the real nvcc: the local include compiles (nvcc gets -I for the family folder), a
    second build is a cache hit, and shared memory over the limit set in the manifest alone is
    caught by the resource check of a new build instead of reusing the cached verdict."""
    monkeypatch.undo()
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(local_include.parent))
    monkeypatch.setenv("EVO_CANDIDATES", str(local_include.parent.parent / "candidates"))
    (first,) = build_batch([tiny()], arch="sm_90a")
    assert first.status is Status.BUILT and not first.cached, first.reason
    (again,) = build_batch([tiny()], arch="sm_90a")
    assert again.cached and again.build_id == first.build_id
    meta = json.loads((build.cache_dir(first.build_id) / build.META).read_text())
    assert build_id(meta["key"]) == first.build_id and meta["key"]["compiler"] == build.compiler_identity()
    edit(local_include / "manifest.toml", 'smem_bytes = "SMEM_KB * 1024"', 'smem_bytes = "240 * 1024"')
    (edited,) = build_batch([tiny()], arch="sm_90a")
    assert edited.build_id != first.build_id and not edited.cached
    assert edited.status is Status.RESOURCE_REJECTED and "245760 dynamic" in edited.reason
    assert load_cached(first.build_id) is not None  # the old build stays, under its own id

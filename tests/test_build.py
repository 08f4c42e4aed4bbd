"""build_batch on the tiny fixture family: cache, compile errors, resource checks, atomicity."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from evo.toolchain import build
from evo.toolchain.build import build_batch, gencode, load_cached, resource_problems
from evo.errors import EvoError
from evo.family.render import Entry, Rendered, render
from evo.results import Resources, Status
from evo.family.space import LaunchConfig, make_candidate

FIXTURES = Path(__file__).parent / "fixtures" / "templates"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "candidates"))


def tiny(**params: object) -> Rendered:
    return render(make_candidate("tiny", params))  # type: ignore[arg-type]


def counting_nvcc(folder: Path) -> tuple[str, Path]:
    """An nvcc that writes a line to a log for each compile (not for --version) and runs the real one."""
    script, log = folder / "nvcc", folder / "compiles.log"
    script.write_text(f'#!/bin/sh\ncase "$*" in *-cubin*) echo "$*" >> {log} ;; esac\nexec {shutil.which("nvcc")} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script), log


def compiles(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.is_file() else 0


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One real batch shared by the module: default, a syntax error, a spilling kernel, a duplicate,
    and the default and the syntax error again with a launch-only gene changed (SMEM_KB: the same
    code, another launch)."""
    cache = tmp_path_factory.mktemp("candidates")
    nvcc, log = counting_nvcc(tmp_path_factory.mktemp("nvcc"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))
        mp.setenv("EVO_CANDIDATES", str(cache))
        if shutil.which("nvcc"):
            mp.setenv("EVO_NVCC", nvcc)
        items = [tiny(), tiny(FAULT="syntax"), tiny(FAULT="spill"), tiny(), tiny(SMEM_KB=2), tiny(FAULT="syntax", SMEM_KB=2)]
        done: list = []
        results = build_batch(items, arch="sm_90a", jobs=2, on_done=done.append)
    return {"cache": cache, "items": items, "results": results, "done": done, "compiles": compiles(log)}


@needs_nvcc
def test_built_candidate_has_cubin_and_resources(batch: dict) -> None:
    ok = batch["results"][0]
    assert ok.status is Status.BUILT and not ok.cached and ok.seconds > 0
    assert Path(ok.cubin_path).read_bytes()[:4] == b"\x7fELF"
    assert set(ok.resources) == {e.name for e in batch["items"][0].entries}
    assert all(r.smem_dynamic == 1024 and r.registers > 0 for r in ok.resources.values())


@needs_nvcc
def test_cache_folder_holds_source_cubin_log_and_meta(batch: dict) -> None:
    ok = batch["results"][0]
    folder = batch["cache"] / ok.build_id[:2] / ok.build_id
    assert sorted(p.name for p in folder.iterdir()) == ["kernel.cu", "kernel.cubin", "meta.json", "ptxas.log"]
    assert json.loads((folder / "meta.json").read_text())["status"] == "built"


@needs_nvcc
def test_second_build_is_answered_from_cache(batch: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVO_CANDIDATES", str(batch["cache"]))
    monkeypatch.setattr(build, "_compile", lambda *a, **k: pytest.fail("recompiled a cached build"))
    again = build_batch(batch["items"], arch="sm_90a")
    assert all(r.cached for r in again)
    assert [r.status for r in again] == [r.status for r in batch["results"]]


@needs_nvcc
def test_compile_error_is_failed_with_its_log(batch: dict) -> None:
    bad = batch["results"][1]
    assert bad.status is Status.COMPILE_FAILED and bad.cubin_path is None
    assert bad.reason.startswith("nvcc: kernel.cu(") and "error" in bad.log


@needs_nvcc
def test_spilling_kernel_is_resource_rejected(batch: dict) -> None:
    spill = batch["results"][2]
    assert spill.status is Status.RESOURCE_REJECTED
    assert "spills" in spill.reason and all(r.spill_stores > 0 for r in spill.resources.values())


@needs_nvcc
def test_duplicates_are_built_once_and_reported_once(batch: dict) -> None:
    assert batch["results"][3] == batch["results"][0]
    assert len(batch["done"]) == 5


@needs_nvcc
def test_builds_of_the_same_code_compile_once_and_keep_their_own_launch(batch: dict) -> None:
    first, other = batch["results"][0], batch["results"][4]
    assert batch["compiles"] == 3                   # default, syntax error, spill; not the two SMEM_KB=2 builds
    assert other.build_id != first.build_id and other.status is Status.BUILT and other.seconds == 0
    assert Path(other.cubin_path).read_bytes() == Path(first.cubin_path).read_bytes()
    assert {r.smem_dynamic for r in other.resources.values()} == {2048}    # checked against its own launch
    metas = [json.loads((Path(r.cubin_path).parent / "meta.json").read_text()) for r in (first, other)]
    assert metas[0]["code_id"] == metas[1]["code_id"] and [m["compiled_here"] for m in metas] == [True, False]
    failed, again = batch["results"][1], batch["results"][5]
    assert again.status is Status.COMPILE_FAILED and again.reason == failed.reason and again.log == failed.log
    failed_meta = json.loads((batch["cache"] / again.build_id[:2] / again.build_id / "meta.json").read_text())
    assert failed_meta["compiled_here"] is False                # nvcc ran once, for the other build


@needs_nvcc
def test_a_later_batch_takes_kept_code_without_compiling(batch: dict, monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    monkeypatch.setenv("EVO_CANDIDATES", str(batch["cache"]))
    nvcc, log = counting_nvcc(tmp_path)
    monkeypatch.setenv("EVO_NVCC", nvcc)
    (late,) = build_batch([tiny(SMEM_KB=300)], arch="sm_90a")
    assert compiles(log) == 0 and not late.cached
    assert late.status is Status.RESOURCE_REJECTED and "shared memory" in late.reason    # its launch, the kept code
    assert Path(late.cubin_path).read_bytes() == Path(batch["results"][0].cubin_path).read_bytes()


@needs_nvcc
def test_no_staging_files_are_left(batch: dict) -> None:
    assert list((batch["cache"] / ".tmp").iterdir()) == []


@needs_nvcc
def test_incomplete_cache_folder_is_rebuilt(tmp_path: Path) -> None:
    item = tiny(ROWS=32)
    bid = build.build_id_for(item, "sm_90a")
    stale = tmp_path / "candidates" / bid[:2] / bid
    stale.mkdir(parents=True)
    (stale / "kernel.cubin").write_bytes(b"\x7fEL")  # what a kill mid-write would leave, no meta.json
    assert load_cached(bid) is None
    result = build_batch([item], arch="sm_90a")[0]
    assert result.status is Status.BUILT and not result.cached
    assert Path(result.cubin_path).stat().st_size > 3


def fake_nvcc(tmp_path: Path, body: str) -> str:
    script = tmp_path / "nvcc"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


@pytest.mark.parametrize(("body", "reason"), [
    ('for a; do o=$n; n=$a; done; printf "\\177EL" > "$o"; kill -9 $$', "killed by signal 9"),
    ("sleep 30", "did not finish within 1 s"),
])
def test_killed_compile_is_failed_and_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 body: str, reason: str) -> None:
    monkeypatch.setenv("EVO_NVCC", fake_nvcc(tmp_path, body))
    monkeypatch.setattr(build, "_nvcc_version", lambda path: ("0.0", "fake nvcc"))
    result = build_batch([tiny()], arch="sm_90a", timeout_s=1)[0]
    assert result.status is Status.COMPILE_FAILED and reason in result.reason
    assert load_cached(result.build_id) is None
    assert not (tmp_path / "candidates" / result.build_id[:2]).exists()


def test_nvcc_runs_in_the_background_of_the_gpu_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Builds run at BUILD_NICENESS, so that a search's GPU worker (normal priority) is not slowed
    by the batch compiling beside it; the fake nvcc records the niceness it was started with."""
    seen = tmp_path / "niceness"
    monkeypatch.setenv("EVO_NVCC", fake_nvcc(tmp_path, f"nice > {seen}; exit 1"))
    monkeypatch.setattr(build, "_nvcc_version", lambda path: ("0.0", "fake nvcc"))
    build_batch([tiny()], arch="sm_90a", timeout_s=5)
    assert int(seen.read_text()) == min(19, os.nice(0) + build.BUILD_NICENESS)


def entry(threads: int = 128, smem: int = 0) -> Entry:
    return Entry("k", 64, "fp16", False, LaunchConfig(threads, 64, smem))


@pytest.mark.parametrize(("res", "ent", "arch", "needle"), [
    (Resources(64, 0, 8, 0, 8), entry(), "sm_90a", "spills"),
    (Resources(64, 0, 0, 4, 8), entry(), "sm_90a", "spills"),
    (Resources(64, 4096, 0, 0, 0), entry(smem=229376), "sm_90a", "shared memory"),
    (Resources(64, 0, 0, 0, 0), entry(smem=200000), "sm_80", "shared memory"),
    (Resources(255, 0, 0, 0, 0), entry(threads=512), "sm_90a", "registers"),
    (Resources(168, 0, 0, 0, 0, wgmma_serialized="insufficient register resources"), entry(), "sm_90a",
     "serialized its wgmma"),
])
def test_resource_problems_name_the_limit(res: Resources, ent: Entry, arch: str, needle: str) -> None:
    problems = resource_problems({"k": res}, [ent], arch)
    assert len(problems) == 1 and needle in problems[0]


def test_resources_within_limits_pass() -> None:
    assert resource_problems({"k": Resources(128, 0, 0, 0, 0)}, [entry(512, 200000)], "sm_90a") == []


@pytest.mark.parametrize(("arch", "flag"), [
    ("sm_90a", "arch=compute_90a,code=sm_90a"),
    ("sm_80", "arch=compute_80,code=sm_80"),
])
def test_gencode_targets_exactly_the_arch(arch: str, flag: str) -> None:
    assert gencode(arch) == ["-gencode", flag]


def test_unknown_arch_is_an_error() -> None:
    with pytest.raises(EvoError, match="unsupported arch 'sm_75'"):
        build_batch([tiny()], arch="sm_75")


def test_missing_nvcc_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    for var in ("EVO_NVCC", "CUDA_HOME"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(EvoError, match="nvcc not found; install the CUDA toolkit or put nvcc on PATH"):
        build_batch([tiny()], arch="sm_90a")


@pytest.mark.parametrize(("major", "arch"), [(9, "sm_90a"), (8, "sm_80"), (None, "sm_90a"), (10, "sm_90a")])
def test_default_arch_follows_the_gpu(monkeypatch: pytest.MonkeyPatch, major: int | None, arch: str) -> None:
    monkeypatch.setattr(build, "_gpu_major", lambda: major)
    assert build.default_arch() == arch


@needs_nvcc
def test_nvcc_version_is_dotted() -> None:
    assert all(part.isdigit() for part in build.nvcc_version().split("."))


@pytest.mark.parametrize(("launch", "needle"), [
    (LaunchConfig(0, 64, 0), "0 threads per CTA"),
    (LaunchConfig(2048, 64, 0), "2048 threads per CTA"),
    (LaunchConfig(128, 0, 0), "0 query rows"),
    (LaunchConfig(128, 64, -1), "-1 B of dynamic shared memory"),
])
def test_a_launch_that_cannot_be_set_up_is_a_resource_problem(launch: LaunchConfig, needle: str) -> None:
    problems = resource_problems({"k": Resources(32, 0, 0, 0, 0)}, [Entry("k", 64, "fp16", False, launch)], "sm_90a")
    assert len(problems) == 1 and needle in problems[0]


def test_an_entry_without_a_report_is_still_checked_for_shared_memory() -> None:
    (problem,) = resource_problems({}, [entry(smem=232449)], "sm_90a")
    assert "232449 B shared memory (0 static + 232449 dynamic) > 232448 B on sm_90a" in problem


def cached(bid: str, arch: str, static_smem: int = 0) -> None:
    """A cache folder for ``bid`` as a finished build leaves it (fake cubin, real layout)."""
    folder = build.cache_dir(bid)
    folder.mkdir(parents=True)
    (folder / build.CUBIN).write_bytes(b"\x7fELF")
    (folder / build.LOG).write_text("")
    resources = {"k": {"registers": 32, "smem_static": static_smem, "spill_stores": 0, "spill_loads": 0,
                       "stack_frame": 0}}
    (folder / build.META).write_text(json.dumps({"build_id": bid, "status": "built", "source_hash": "s",
                                                 "arch": arch, "flags": [], "resources": resources}))


@pytest.mark.parametrize(("arch", "static", "smem", "rejected"), [
    ("sm_80", 0, 166912, False), ("sm_80", 0, 166913, True),
    ("sm_90a", 0, 232448, False), ("sm_90a", 48, 232448 - 47, True),
])
def test_launch_problems_check_a_request_against_its_cached_build(arch: str, static: int, smem: int,
                                                                  rejected: bool) -> None:
    cached("ab" * 32, arch, static)
    problems = build.launch_problems("ab" * 32, [entry(smem=smem)])
    assert bool(problems) is rejected
    assert all(f"> {build.SMEM_LIMITS[arch]} B on {arch}" in p for p in problems)


def test_launch_problems_of_an_unknown_build_check_the_geometry_alone() -> None:
    assert build.launch_problems("not-built", [entry(smem=10**6)]) == []  # the device decides
    assert "2048 threads" in build.launch_problems("not-built", [entry(threads=2048)])[0]


@needs_nvcc
def test_a_build_that_cannot_be_installed_in_the_cache_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(src: object, dst: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(build.os, "rename", refuse)
    with pytest.raises(EvoError, match=r"cannot install build \w{12} into the cache at .*Permission denied"):
        build_batch([tiny(ROWS=32)], arch="sm_90a")


@needs_nvcc
def test_losing_the_install_race_to_an_equal_build_is_fine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (first,) = build_batch([tiny(ROWS=32)], arch="sm_90a")
    final = build.cache_dir(first.build_id)
    other = shutil.copytree(final, tmp_path / "other-process")
    shutil.rmtree(final)

    def lose(src: object, dst: object) -> None:  # another process installs the same build first
        shutil.copytree(other, Path(str(dst)))
        raise OSError(39, "Directory not empty")

    monkeypatch.setattr(build.os, "rename", lose)
    (again,) = build_batch([tiny(ROWS=32)], arch="sm_90a")
    assert again.status is Status.BUILT and again.cubin_path == str(final / build.CUBIN)

"""The split-KV launch (docs/kernel-abi.md, "The split-KV variant") on CPU: the split plan covers
every key once in whole key tiles and fills the GPU, the workspace matches the kernel's layout,
the manifest's split formulas are read and checked, and no other family's build id moves."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from evo.errors import EvoError
from evo.family.manifest import load_family, load_family_dir
from evo.family.render import build_key, render
from evo.family.space import WORKSPACE_ALIGN, SplitConfig, launch_config, make_candidate, split_plan

SPLIT = SplitConfig(key_tile=64, split_min=512, waves=2)
# the decode suite (B, Hq, Hkv, Lq, Lk) and a few edges: Lk of 1, below a tile, ragged
PROBLEMS = [(1, 32, 8, 1, 131072), (64, 32, 8, 1, 2048), (32, 64, 8, 1, 8192), (8, 32, 32, 1, 4096),
            (16, 32, 8, 4, 4096), (1, 1, 1, 1, 1), (2, 8, 2, 16, 63), (1, 64, 2, 16, 100003),
            (3, 12, 3, 7, 5000)]


@pytest.mark.parametrize("problem", PROBLEMS)
@pytest.mark.parametrize("rows", [16, 32])
def test_splits_cover_every_key_once_in_whole_tiles(problem: tuple[int, ...], rows: int) -> None:
    B, Hq, Hkv, Lq, Lk = problem
    plan = split_plan(SPLIT, rows, B, Hq, Hkv, Lq, Lk, 132)
    assert plan.split_len % SPLIT.key_tile == 0
    assert (plan.splits - 1) * plan.split_len < Lk <= plan.splits * plan.split_len   # none empty, none missing
    assert plan.m_tiles == math.ceil(Hq // Hkv * Lq / rows)
    assert plan.groups == B * Hkv * plan.m_tiles
    assert plan.grid(B, Hkv) == (plan.m_tiles * plan.splits, B * Hkv, 1)
    assert plan.splits == 1 or plan.split_len >= SPLIT.split_min


def test_a_long_cache_on_few_heads_is_split_to_fill_the_gpu() -> None:
    plan = split_plan(SPLIT, 16, 1, 32, 8, 1, 131072, 132)
    ctas = plan.groups * plan.splits
    assert ctas <= 2 * 132 < ctas + plan.groups                # as close to waves x SMs CTAs as fits
    assert split_plan(SPLIT, 16, 64, 32, 8, 1, 2048, 132).splits == 1   # 512 tiles already fill it


def test_a_grid_that_fills_the_gpu_is_not_split_past_it() -> None:
    """D5 of the decode suite, 128 tiles: on an H100 (dev/perf-notes.md) one split ran 93 us, the
    three the plan once chose (it rounded up past waves x SMs) 108 us."""
    one = SplitConfig(key_tile=64, split_min=512, waves=1)
    assert split_plan(one, 16, 16, 32, 8, 4, 4096, 132).splits == 1
    assert split_plan(SPLIT, 16, 16, 32, 8, 4, 4096, 132).splits == 2


def test_a_ragged_cache_is_split_at_least_ragged_splits_ways() -> None:
    """Lengths the host does not see (lens, paged: Lk is the capacity): the longest sequences are
    split even where the grid fills the GPU, never below split_min keys a split."""
    four = SplitConfig(key_tile=64, split_min=512, waves=1, ragged_splits=4)
    assert split_plan(four, 16, 64, 32, 8, 1, 16000, 132).splits == 1
    ragged = split_plan(four, 16, 64, 32, 8, 1, 16000, 132, ragged=True)
    assert ragged.splits == 4 and ragged.split_len == 4032
    assert split_plan(four, 16, 64, 32, 8, 1, 1500, 132, ragged=True).splits == 2   # 1500 // 512
    few = split_plan(four, 16, 1, 32, 8, 1, 131072, 132, ragged=True)           # the grid asks for more
    assert few.splits == split_plan(four, 16, 1, 32, 8, 1, 131072, 132).splits == 16


def test_short_caches_are_not_split() -> None:
    assert split_plan(SPLIT, 16, 1, 8, 1, 1, 2 * SPLIT.split_min - 1, 132).splits == 1
    assert split_plan(SPLIT, 16, 1, 8, 1, 1, 2 * SPLIT.split_min, 132).splits == 2


def test_workspace_holds_counters_then_parts_and_lse() -> None:
    plan = split_plan(SPLIT, 16, 1, 32, 8, 1, 131072, 132)
    counters = math.ceil(4 * plan.groups / WORKSPACE_ALIGN) * WORKSPACE_ALIGN
    assert plan.workspace_bytes(16, 128) == counters + 4 * plan.groups * plan.splits * 16 * 129
    assert split_plan(SPLIT, 16, 64, 32, 8, 1, 2048, 132).workspace_bytes(16, 128) == 0


@pytest.mark.parametrize("bad", [(0, 8, 8, 1, 10), (1, 12, 8, 1, 10), (1, 8, 8, 1, 0)])
def test_impossible_problems_have_no_plan(bad: tuple[int, ...]) -> None:
    with pytest.raises(EvoError, match="no split-KV plan"):
        split_plan(SPLIT, 16, *bad, 132)


def test_the_family_reads_its_split_formulas() -> None:
    fam = load_family("flash_decode")
    cand = make_candidate(fam, {"BLOCK_N": 128, "SPLIT_MIN": 1024, "WAVES": 4})
    launch = launch_config(fam, cand, 128)
    assert launch.abi == "split_kv" and launch.split == SplitConfig(128, 1024, 4, 4)
    key = build_key(render(cand, fam), ("-O3",), "sm_90a", "nvcc", {})
    assert key["entries"][0]["launch"]["split"] == {"key_tile": 128, "split_min": 1024, "waves": 4, "ragged_splits": 4}


@pytest.mark.parametrize("family", ["flash_mma", "flash_wgmma", "flash_scalar"])
def test_other_families_build_keys_carry_no_split(family: str) -> None:
    """Build ids are hashes of these keys: a new LaunchConfig field must not move existing ones."""
    fam = load_family(family)
    key = build_key(render(make_candidate(fam), fam), ("-O3",), "sm_90a", "nvcc", {})
    assert all("split" not in e["launch"] for e in key["entries"])
    assert set(key["entries"][0]["launch"]) == {"threads", "rows_per_cta", "smem_bytes", "abi", "tma_rows",
                                                "persistent"}


def test_a_split_kv_manifest_needs_its_split_formulas(tmp_path: Path) -> None:
    text = (Path(load_family("flash_decode").path) / "manifest.toml").read_text()
    folder = tmp_path / "flash_decode"
    folder.mkdir()
    (folder / "manifest.toml").write_text(text.replace('waves = "WAVES"\n', ""))
    with pytest.raises(EvoError, match="needs key_tile, split_min, waves"):
        load_family_dir(folder)
    (folder / "manifest.toml").write_text(text.replace('waves = "WAVES"', 'waves = "WAVES * Lk"'))
    with pytest.raises(EvoError, match="reads 'Lk'"):
        load_family_dir(folder)


def test_promote_ships_split_kv_families() -> None:
    """The package's launcher passes a workspace and a split length (docs/decode.md)."""
    from evo.products.promote import ships_cubin

    assert ships_cubin("flash_decode") and ships_cubin("flash_mma")


def test_faulty_decode_is_flash_decode_with_one_combine_line_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The controls' positive case is the family's own kernel; each fault differs from it in one line."""
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(Path(__file__).parent / "templates"))

    def body(family: str, params: dict[str, str]) -> list[str]:
        return render(make_candidate(family, params)).source.splitlines()[2:]   # past the header lines

    honest = body("flash_decode", {})
    assert body("faulty_decode", {"DECODE_FAULT": "none"}) == honest
    for fault in ("one_max", "drop_last"):
        planted = body("faulty_decode", {"DECODE_FAULT": fault})
        assert len(planted) == len(honest)
        changed = [line for a, line in zip(honest, planted, strict=True) if a != line]
        assert len(changed) == 1 and "planted fault" in changed[0]

"""The TMA launch ABI on the CPU: tensor-map geometry, launch configs of the Hopper family,
manifest validation of ``[launch] abi``, persistent grids and the tile counter."""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.errors import EvoError
from evo.family.manifest import load_family, load_family_dir
from evo.family.render import render
from evo.family.space import LaunchConfig, launch_config, make_candidate
from evo.gpu.tma import MapGeometry


def test_map_geometry_is_one_head_per_plane_with_64_column_boxes() -> None:
    geo = MapGeometry.of((2, 3, 1531, 128), rows=176)
    assert geo.dims == (128, 1531, 6)                  # innermost first: D, L, B*H
    assert geo.strides_bytes == (256, 1531 * 256)      # fp16 rows, then heads
    assert geo.box == (64, 176, 1)


def test_map_geometry_of_a_head_dim_of_one_and_a_half_boxes() -> None:
    # D=96: the second 64-column box reaches 32 columns past the tensor (TMA reads zeros there)
    geo = MapGeometry.of((1, 4, 300, 96), rows=64)
    assert (geo.dims, geo.strides_bytes, geo.box) == ((96, 300, 4), (192, 300 * 192), (64, 64, 1))


@pytest.mark.parametrize(("shape", "rows", "message"), [
    ((1, 1, 8, 100), 64, "multiple of 8"), ((1, 1, 8, 64), 0, "box rows"), ((1, 1, 8, 64), 257, "box rows")])
def test_map_geometry_refuses_what_tma_cannot_do(shape: tuple[int, int, int, int], rows: int, message: str) -> None:
    with pytest.raises(EvoError, match=message):
        MapGeometry.of(shape, rows)


def test_wgmma_entries_carry_the_tma_abi_per_head_dim() -> None:
    fam = load_family("flash_wgmma")
    cand = make_candidate(fam, {"WGS_D64": 1, "BLOCK_N_D64": 176, "WGS_D128": 2, "BLOCK_N_D128": 96,
                                "PINGPONG": True, "PERSISTENT": True})
    launches = {(e.head_dim, e.dtype, e.causal): e.launch for e in render(cand, fam).entries}
    d64, d128 = launches[(64, "fp16", False)], launches[(128, "bf16", True)]
    assert (d64.abi, d64.tma_rows, d64.threads, d64.rows_per_cta) == ("tma", (64, 176, 176, 64), 256, 64)
    assert (d128.abi, d128.tma_rows, d128.threads, d128.rows_per_cta) == ("tma", (64, 96, 96, 64), 384, 128)
    assert d64.persistent and d128.persistent


def test_plain_families_keep_the_pointer_abi() -> None:
    launch = render(make_candidate("flash_mma")).entries[0].launch
    assert (launch.abi, launch.tma_rows, launch.persistent) == ("ptr", (), False)


def test_persistent_grid_is_one_cta_per_sm_at_most_one_per_tile() -> None:
    cfg = LaunchConfig(threads=384, rows_per_cta=128, smem_bytes=0, persistent=True)
    assert cfg.grid(4, 32, 4096, sms=132) == (132, 1, 1)
    assert cfg.grid(1, 2, 100, sms=132) == (2, 1, 1)          # 2 tiles: 2 CTAs
    assert LaunchConfig(384, 128, 0).grid(4, 32, 4096) == (32, 128, 1)
    with pytest.raises(EvoError, match="SM count"):
        cfg.grid(1, 1, 64)


TMA_LAUNCH = 'abi = "tma"\ntma_rows = { q = "64", k = "64", v = "64", o = "64" }\n'


def manifest(folder: Path, launch: str) -> Path:
    """A family folder whose manifest has one switch DYN and the ``[launch]`` section plus ``launch``."""
    (folder / "manifest.toml").write_text(
        '[family]\nname = "x"\nversion = 1\ntemplate = "k.cu.j2"\nhead_dims = [64, 128]\n'
        '[params.DYN]\nvalues = [false, true]\ndefault = false\n'
        '[launch]\nthreads = "128"\nrows_per_cta = "64"\nsmem_bytes = "0"\n' + launch)
    return folder


@pytest.mark.parametrize(("launch", "message"), [
    ('abi = "cuda"\n', "abi = 'cuda'"),
    ('abi = "tma"\ntma_rows = { q = "64", k = "64" }\n', "needs tma_rows"),
    ('tile_counter = "DYN"\n', r"\[launch\] tile_counter is an argument of TMA kernels only"),
    ('abi = "split_kv"\nkey_tile = "64"\nsplit_min = "64"\nwaves = "1"\ntile_counter = "False"\n',
     "tile_counter is an argument of TMA kernels only"),
    (TMA_LAUNCH + 'tile_counter = "DYN and SMS > 100"\n', r"tile_counter 'DYN and SMS > 100' reads 'SMS'"),
    (TMA_LAUNCH + "tile_counter = true\n", r"tile_counter must be an expression in a string"),
])
def test_manifest_launch_abi_is_validated(tmp_path: Path, launch: str, message: str) -> None:
    with pytest.raises(EvoError, match=message):
        load_family_dir(manifest(tmp_path, launch))


def test_the_tile_counter_is_a_formula_of_the_genes_and_the_head_dim(tmp_path: Path) -> None:
    fam = load_family_dir(manifest(tmp_path, TMA_LAUNCH + 'tile_counter = "DYN and D == 64"\n'))
    on, off = make_candidate(fam, {"DYN": True}), make_candidate(fam)
    assert launch_config(fam, on, 64).tile_counter
    assert not launch_config(fam, on, 128).tile_counter and not launch_config(fam, off, 64).tile_counter
    plain = load_family_dir(manifest(tmp_path, TMA_LAUNCH))        # left out: no kernel takes one
    assert not launch_config(plain, make_candidate(plain, {"DYN": True}), 64).tile_counter

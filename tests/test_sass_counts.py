"""scripts/sass_counts.py: its table of each kernel's machine-code evidence (evo.toolchain.evidence, whose own
tests read the opcodes and setmaxnreg values) and its K/V step analysis; on a real build (nvcc and cuobjdump on
PATH) the flash_wgmma default shows the Hopper path."""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
from pathlib import Path

import pytest

from evo.toolchain.sass import cuobjdump

SPEC = importlib.util.spec_from_file_location(
    "sass_counts", Path(__file__).resolve().parents[1] / "scripts" / "sass_counts.py")
assert SPEC and SPEC.loader
SASS = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(SASS)

def test_a_kernels_evidence_reads_as_its_table_cells() -> None:
    found = {"registers": 168, "local_bytes": 0, "setmaxnreg": {"producer": [40], "consumer": [232]},
             "sass": dict.fromkeys(SASS.OPCODES, 0) | {"HGMMA": 2, "instructions": 9}}
    cells = SASS.evidence_cells(found, 193.1)
    assert cells[:3] == [168, 0, 193.1] and cells[-1] == "232 up, 40 down"
    assert dict(zip(SASS.OPCODES, cells[3:-1], strict=True))["HGMMA"] == 2
    assert SASS.evidence_cells(found | {"setmaxnreg": None})[-1] == "- up, - down"


@pytest.mark.skipif(shutil.which("nvcc") is None or cuobjdump() is None, reason="needs nvcc and cuobjdump")
def test_the_default_hopper_kernel_shows_wgmma_tma_and_mbarriers(build_cache: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from evo.toolchain.build import build_batch
    from evo.family.manifest import load_family
    from evo.family.render import render
    from evo.family.space import make_candidate

    monkeypatch.setenv("EVO_CANDIDATES", str(build_cache))
    fam = dataclasses.replace(load_family("flash_wgmma"), head_dims=(128,))   # the kernel read below
    built = build_batch([render(make_candidate(fam), fam)], "sm_90a")[0]
    assert built.cubin_path is not None, built.reason
    cells = SASS.evidence_cells(SASS.cubin_evidence(built.cubin_path)["evo_attn_d128_fp16_full"])
    c = dict(zip(SASS.OPCODES, cells[3:-1], strict=True))
    assert c["HGMMA"] > 0 and c["HMMA"] == 0 and c["UTMALDG"] > 0 and c["SYNCS"] > 0 and cells[1] == 0
    assert cells[-1] == "240 up, 24 down"  # two consumers, the producer at its default 24


def _sass(lines: list[str]) -> str:
    return "\n".join(f"        /*{16 * i:04x}*/                   {op} ;" for i, op in enumerate(lines))


def test_the_step_is_the_innermost_wgmma_loop_less_its_masking() -> None:
    inner = (["HGMMA.64x128x16.F32.BF16 R24, R152, gdesc[UR16], RZ", "HGMMA.64x128x16.F32.BF16 R88, R184, gdesc[UR20].tnspB, R88",
              "@!P0 BRA 0x{skip}"] + ["FSEL R24, R24, -INF, !P1"] * 20 +            # the masking, skipped
             ["FMNMX R2, R24, R25, !PT", "FFMA R24, R24, UR4, -R2", "MUFU.EX2 R24, R24", "FADD R3, R3, R24",
              "UIADD3 UR8, UR8, 0x1, URZ", "@!P2 BRA 0x{top}"])
    lines = ["MOV R0, RZ", "S2R R1, SR_TID.X"] + inner + ["@!P3 BRA 0x0000", "EXIT"]   # an outer loop around it
    top, skip = 16 * 2, 16 * (2 + 3 + 20)
    text = _sass([op.format(top=f"{top:x}", skip=f"{skip:x}") for op in lines])
    loop, path = SASS.step_path(text)
    assert loop == len(inner)                       # the inner loop, not the outer one
    assert len(path) == len(inner) - 20             # the FSEL region is off the unmasked path
    row = SASS.step_row(text, 128)
    assert row[:3] == [len(inner), len(inner) - 20, f"{(len(inner) - 20) / 128:.2f}"]
    assert dict(zip(SASS.STEP_OPCODES, row[3:-1], strict=True))["HGMMA"] == 2 and row[-1] == 1   # one uniform instruction


def test_no_wgmma_loop_reads_as_dashes() -> None:
    assert SASS.step_path(_sass(["MUFU.EX2 R1, R1", "EXIT"])) is None
    assert set(SASS.step_row(_sass(["EXIT"]), 128)) == {"-"}


@pytest.mark.skipif(shutil.which("nvcc") is None or cuobjdump() is None, reason="needs nvcc and cuobjdump")
def test_the_default_d128_step_issues_its_gemms_and_exponentials(build_cache: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from evo.toolchain.build import build_batch
    from evo.family.manifest import load_family
    from evo.family.render import render
    from evo.family.space import make_candidate

    monkeypatch.setenv("EVO_CANDIDATES", str(build_cache))
    fam = dataclasses.replace(load_family("flash_wgmma"), head_dims=(128,))
    built = build_batch([render(make_candidate(fam), fam)], "sm_90a")[0]
    assert built.cubin_path is not None, built.reason
    found = SASS.step_path(SASS.sass_functions(SASS.dump_sass(built.cubin_path))["evo_attn_d128_bf16_causal"])
    assert found is not None
    loop, path = found
    ops = [SASS._opcode(o) for o in path]
    # S = Q K^T and O += P V: 8 k-steps of 16 each at D=128 and BLOCK_N 128; 64 exponentials a thread
    # (two rows of 32 keys) and the rows' two rescale factors; the masking (an FSEL a score) is off
    # the path, which keeps only the selects of the rows' bases (a row that sees no key yet)
    assert ops.count("HGMMA") == 16 and ops.count("MUFU") == 66 and ops.count("FSEL") <= 4
    assert len(path) < loop


def test_the_step_order_folds_runs_and_spells_out_what_orders_a_step() -> None:
    path = ["BAR.SYNC.DEFER_BLOCKING R2, 0x100", "HGMMA.64x128x16.F32.BF16 R24, R152, gdesc[UR16], RZ",
            "HGMMA.64x128x16.F32.BF16 R24, R156, gdesc[UR20], R24", "WARPGROUP.DEPBAR.LE gsb0, 0x1",
            "FMNMX R2, R24, R25, !PT", "FMNMX R2, R2, R26, !PT", "MUFU.EX2 R24, R24", "@P0 FMUL R88, R88, R3",
            "FMUL R89, R89, R3", "FMUL R90, R90, R3", "MUFU.EX2 R25, R25", "@!P2 BRA 0x40"]
    assert SASS.step_order(path) == [
        "BAR.SYNC.DEFER_BLOCKING R2, 0x100", "HGMMA.64x128x16.F32.BF16 R24, R152, gdesc[UR16], RZ",
        "HGMMA.64x128x16.F32.BF16 R24, R156, gdesc[UR20], R24",   # two wgmma: each one written out
        "WARPGROUP.DEPBAR.LE gsb0, 0x1", "FMNMX x2", "MUFU", "FMUL x3", "MUFU", "@!P2 BRA 0x40"]


def test_a_cubin_built_elsewhere_is_read_and_its_step_listed(tmp_path: Path, build_cache: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("nvcc") is None or cuobjdump() is None:
        pytest.skip("needs nvcc and cuobjdump")
    from evo.toolchain.build import build_batch
    from evo.family.manifest import load_family
    from evo.family.render import render
    from evo.family.space import make_candidate

    monkeypatch.setenv("EVO_CANDIDATES", str(build_cache))
    fam = dataclasses.replace(load_family("flash_wgmma"), head_dims=(128,))
    built = build_batch([render(make_candidate(fam), fam)], "sm_90a")[0]
    assert built.cubin_path is not None, built.reason
    foreign = tmp_path / "other.cubin"            # as FlashAttention-4's: a cubin no candidate names
    foreign.write_bytes(Path(built.cubin_path).read_bytes())
    assert SASS.main(["--step", "--order", "--block-n", "128", "--cubin", str(foreign)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "evo_attn_d128_bf16_causal" in line and line.startswith("|"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[0] == "other.cubin" and cells[4] == f"{int(cells[3]) / 128:.2f}"
    listing = out.split("evo_attn_d128_bf16_causal (", 1)[1]
    assert listing.startswith(f"{cells[3]} instructions):") and "WARPGROUP.DEPBAR.LE gsb0, 0x0" in listing


def test_nothing_to_read_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exc:
        SASS.main([])
    assert exc.value.code == 2

"""evo.toolchain.evidence: registers, setmaxnreg and SASS opcode counts per kernel, read from a cubin.

The parsers run on cuobjdump's own output format; the build tests compile the default flash_wgmma
and flash_mma D=128 kernels (nvcc and cuobjdump needed: they skip without them) and check the
evidence against the template's register split and what each family is built from.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from evo.errors import EvoError
from evo.family.manifest import load_family
from evo.family.render import render
from evo.family.space import make_candidate
from evo.results import Status
from evo.toolchain.build import build_batch
from evo.toolchain.evidence import (cubin_evidence, entry_evidence, opcode_counts, resource_usage, sass_functions,
                                    setmaxnreg)
from evo.toolchain.ptxas import parse_ptxas
from evo.toolchain.sass import cuobjdump

RESOURCES = """
Resource usage:
 Common:
  GLOBAL:0
 Function evo_attn_d128_bf16_causal:
  REG:168 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:1148 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function evo_attn_d128_bf16_full:
  REG:255 STACK:16 SHARED:0 LOCAL:8 CONSTANT[0]:412 TEXTURE:0 SURFACE:0 SAMPLER:0
"""

SASS = """
\tcode for sm_90a
\t.target\tsm_90a

\t\tFunction : evo_attn_d128_bf16_causal
\t.headerflags\t@"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0280*/                   USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xf0 ;    /* 0x000000f0000079c8 */
                                                                               /* 0x000fe20008000000 */
        /*0290*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ; /* 0x0 */
        /*02a0*/               @P0 MUFU.EX2 R3, R3 ;                           /* 0x0 */
        /*02b0*/                   MUFU.RCP R4, R4 ;                           /* 0x0 */
        /*02c0*/              @!P1 BAR.SYNC.DEFER_BLOCKING 0x1, 0x100 ;        /* 0x0 */
        /*02d0*/                   BAR.ARV 0x2, 0x100 ;                        /* 0x0 */
        /*02e0*/                   USETMAXREG.DEALLOC.CTAPOOL 0x18 ;           /* 0x00000018000079c8 */
        /*02f0*/                   NOP;                                        /* 0x0 */
\t\t..........


\t\tFunction : evo_attn_d128_bf16_full
\t.headerflags\t@"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;       /* 0x0 */
        /*0010*/                   STL [R1], R2 ;                              /* 0x0 */
        /*0020*/                   EXIT ;                                      /* 0x0 */
"""


def test_resource_usage_per_function() -> None:
    assert resource_usage(RESOURCES) == {
        "evo_attn_d128_bf16_causal": {"registers": 168, "stack_bytes": 0, "local_bytes": 0, "shared_bytes": 1024},
        "evo_attn_d128_bf16_full": {"registers": 255, "stack_bytes": 16, "local_bytes": 8, "shared_bytes": 0}}


def test_opcodes_are_counted_by_their_dotted_prefix_without_guards() -> None:
    warp_specialised, plain = sass_functions(SASS).values()
    counts = opcode_counts(warp_specialised)
    assert counts["HGMMA"] == 1 and counts["HMMA"] == 0           # wgmma is not mma.sync
    assert counts["MUFU.EX2"] == 1                                 # guarded, and not the reciprocal
    assert counts["BAR"] == 2 and counts["instructions"] == 8     # every instruction, the padding NOP too
    counts = opcode_counts(plain)
    assert counts["HMMA"] == counts["STL"] == 1 and counts["HGMMA"] == 0 and counts["instructions"] == 3


def test_setmaxnreg_is_the_producers_and_the_consumers_register_count() -> None:
    warp_specialised, plain = sass_functions(SASS).values()
    assert setmaxnreg(warp_specialised) == {"producer": [24], "consumer": [240]}
    assert setmaxnreg(plain) is None


def test_without_cuobjdump_there_is_a_reason_and_no_number(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("evo.toolchain.sass.cuobjdump", lambda: None)
    assert entry_evidence(tmp_path / "kernel.cubin", ["a", "b"]) == {
        "a": {"unavailable": "cuobjdump not found"}, "b": {"unavailable": "cuobjdump not found"}}


def test_a_file_cuobjdump_cannot_read_says_so(tmp_path: Path) -> None:
    if cuobjdump() is None:
        pytest.skip("cuobjdump not available")
    fake = tmp_path / "kernel.cubin"
    fake.write_bytes(b"\x7fELF placeholder")
    (why,) = entry_evidence(fake, ["a"])["a"].values()
    assert why.startswith("cuobjdump could not read the cubin: ")


def built(name: str, arch: str, cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cubin of ``name``'s default candidate at D=128 only, built into ``cache``."""
    if shutil.which("nvcc") is None or cuobjdump() is None:
        pytest.skip("nvcc or cuobjdump not available")
    monkeypatch.setenv("EVO_CANDIDATES", str(cache))
    family = dataclasses.replace(load_family(name), head_dims=(128,))
    try:
        (result,) = build_batch([render(make_candidate(family, family.defaults()), family)], arch=arch)
    except EvoError as err:
        pytest.skip(str(err))
    assert result.status is Status.BUILT, result.reason
    return Path(result.cubin_path)


def consumer_registers(wgs: int, producer: int) -> int:
    """flash_wgmma's Traits: the registers per consumer thread after the producer's setmaxnreg."""
    pool = 65536 // (128 * (wgs + 1)) // 8 * 8
    return min(240, ((wgs + 1) * pool - producer) // wgs // 8 * 8)


def test_the_default_wgmma_kernels_evidence(build_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cubin = built("flash_wgmma", "sm_90a", build_cache, monkeypatch)
    defaults = load_family("flash_wgmma").defaults()
    producer, wgs = defaults["PRODUCER_REGS"], defaults["WGS_D128"]
    assert isinstance(producer, int) and isinstance(wgs, int)
    split = {"producer": [producer], "consumer": [consumer_registers(wgs, producer)]}
    assert split == {"producer": [24], "consumer": [240]}                     # two consumers at 240
    ptxas = parse_ptxas((cubin.parent / "ptxas.log").read_text())
    found = cubin_evidence(cubin)
    assert sorted(found) == [f"evo_attn_d128_{t}_{m}" for t in ("bf16", "fp16") for m in ("causal", "full")]
    for name, ev in found.items():
        assert ev["registers"] == ptxas[name].registers, name
        assert ev["setmaxnreg"] == split, name
        sass = ev["sass"]
        assert sass["HGMMA"] > 0 and sass["UTMALDG"] > 0 and sass["MUFU.EX2"] > 0 and sass["SYNCS"] > 0, name
        assert sass["HMMA"] == 0 and sass["LDGSTS"] == 0, name
        assert ev["local_bytes"] == ev["stack_bytes"] == sass["STL"] == sass["LDL"] == 0, name   # no spills
        assert sass["instructions"] > sum(v for k, v in sass.items() if k != "instructions"), name


def test_the_default_mma_kernels_evidence(build_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cubin = built("flash_mma", "sm_80", build_cache, monkeypatch)
    names = ["evo_attn_d128_fp16_causal", "evo_attn_d128_bf16_full"]
    for name, ev in entry_evidence(cubin, names).items():
        assert ev["setmaxnreg"] is None, name                        # no warp specialisation
        sass = ev["sass"]
        assert sass["HMMA"] > 0 and sass["LDSM"] > 0 and sass["LDGSTS"] > 0, name
        assert sass["HGMMA"] == sass["UTMALDG"] == 0, name


def test_a_cubin_is_read_once_as_long_as_it_stays_the_same(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import evo.toolchain.evidence as ev

    reads: list[str] = []
    monkeypatch.setattr(ev, "dump_resource_usage", lambda p: reads.append(str(p)) or "")
    monkeypatch.setattr(ev, "dump_sass", lambda p: "\n\tFunction : k\n        /*0000*/   EXIT ;")
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"one")
    first = ev.cubin_evidence(cubin)
    first["k"]["registers"] = 1                       # a caller's change stays its own
    assert ev.cubin_evidence(cubin) == {"k": ev.function_evidence({}, "/*0000*/   EXIT ;")} and len(reads) == 1
    cubin.write_bytes(b"other")                       # rebuilt: read again
    ev.cubin_evidence(cubin)
    assert len(reads) == 2

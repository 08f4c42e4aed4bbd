"""parse_ptxas on real ``nvcc -Xptxas -v`` logs (nvcc 13.0, sm_90a and sm_80).

The logs under tests/fixtures/ptxas/ were produced from mixed.cu next to them with
``nvcc -O3 -cubin -Xptxas -v -gencode arch=compute_90a,code=sm_90a mixed.cu`` (and 80).
sm_90a-wgmma-serialized.log is the ptxas log of a flash_wgmma build (LAZY_D128 and Q_IN_REGS at
the default tiles) under a variant of the template that kept packed P in the S accumulator
registers (tried and dropped on 2026-11-26): ptxas serialized the wgmma of its four D=128 entries.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.toolchain.ptxas import parse_ptxas
from evo.results import Resources

LOGS = Path(__file__).parent / "fixtures" / "ptxas"


@pytest.mark.parametrize(("log", "expected"), [
    ("sm_90a.log", {"plain": Resources(30, 4096, 0, 0, 0), "spilly": Resources(32, 0, 1432, 1464, 1168)}),
    ("sm_80.log", {"plain": Resources(29, 4096, 0, 0, 0), "spilly": Resources(32, 0, 840, 864, 600)}),
])
def test_entries_of_real_logs(log: str, expected: dict[str, Resources]) -> None:
    assert parse_ptxas((LOGS / log).read_text()) == expected


def test_serialized_wgmma_is_kept_per_entry() -> None:
    got = parse_ptxas((LOGS / "sm_90a-wgmma-serialized.log").read_text())
    assert len(got) == 8 and all(r.registers == 168 and r.spill_stores == 0 for r in got.values())
    serialized = {name for name, r in got.items() if r.wgmma_serialized}
    assert serialized == {f"evo_attn_d128_{t}_{c}" for t in ("fp16", "bf16") for c in ("full", "causal")}
    assert got["evo_attn_d128_fp16_full"].wgmma_serialized == \
        "insufficient register resources for the wgmma pipeline"


def test_device_function_properties_are_not_entries() -> None:
    assert "_Z6helperPKfi" not in parse_ptxas((LOGS / "sm_90a.log").read_text())


def test_cuda12_wording_without_barriers() -> None:
    log = ("ptxas info    : Compiling entry function 'k' for 'sm_80'\n"
           "ptxas info    : Function properties for k\n"
           "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 255 registers, 49152 bytes smem, 384 bytes cmem[0]\n")
    assert parse_ptxas(log) == {"k": Resources(255, 49152, 4, 4, 8)}


def test_compile_error_log_has_no_entries() -> None:
    log = 'kernel.cu(3): error: identifier "x" is undefined\n1 error detected in the compilation of "kernel.cu".\n'
    assert parse_ptxas(log) == {}

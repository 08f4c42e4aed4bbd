"""flash_decode compiled here (nvcc, no GPU): its default builds clean on sm_90a and sm_80, its
_lens and _paged entries too, and their machine code is the design's: K/V streamed by cp.async
(LDGSTS; a paged cache's rows gathered by it one by one), tensor-core MMAs (HMMA), one atomic per
CTA for the last-CTA combine, no local memory (no spills, no stack arrays); and a paged entry's key
loop finds its rows' pages without an integer division or a block-table load per row (the tile's
page numbers are loaded a tile ahead, issue 34's D7). The build is the one
tests/test_templates_cpu.py's test_default_builds_clean makes (one build cache per session).
tests/test_templates_cpu.py compiles a random sample of its other configurations with every family."""

from __future__ import annotations

import collections
import re
import shutil
from pathlib import Path

import pytest

from evo.family.manifest import load_family
from evo.family.render import Rendered, render
from evo.family.space import make_candidate
from evo.results import BuildResult, Status
from evo.toolchain.build import build_batch
from evo.toolchain.sass import cuobjdump, dump_sass

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None or cuobjdump() is None,
                                reason="needs nvcc and cuobjdump")
INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9]+)\S*\s*([^;]*);")


Sass = list[tuple[int, str, str]]   # (address, opcode, operands) of each instruction of a kernel


def _sass_by_kernel(cubin: str) -> dict[str, Sass]:
    out: dict[str, Sass] = {}
    name = ""
    for line in dump_sass(cubin).splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            name = m.group(1)
            out[name] = []
        elif name and (ins := INSTRUCTION.search(line)):
            out[name].append((int(ins.group(1), 16), ins.group(2), ins.group(3)))
    return out


def _key_loop(sass: Sass) -> collections.Counter[str]:
    """The opcodes of a kernel's key loop: the longest stretch that a backward branch closes and
    that holds tensor-core MMAs (each iteration streams one K/V tile and computes on another)."""
    loops: list[list[str]] = []
    for at, op, operands in sass:
        target = re.search(r"0x([0-9a-f]+)", operands)
        if op == "BRA" and target and int(target.group(1), 16) < at:
            body = [o for a, o, _ in sass if int(target.group(1), 16) <= a <= at]
            if "HMMA" in body:
                loops.append(body)
    assert loops, "no key loop found"
    longest = max(loops, key=lambda body: len(body))
    return collections.Counter(longest)


@pytest.fixture(scope="module", params=["sm_90a", "sm_80"])
def default(request: pytest.FixtureRequest, build_cache: Path) -> tuple[Rendered, BuildResult, dict[str, Sass]]:
    """flash_decode's default for one arch: what was rendered, the build and each kernel's SASS."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVO_CANDIDATES", str(build_cache))
        fam = load_family("flash_decode")
        rendered = render(make_candidate(fam), fam)
        built = build_batch([rendered], request.param)[0]
    assert built.status is Status.BUILT and built.cubin_path, built.reason
    return rendered, built, _sass_by_kernel(built.cubin_path)


def test_the_default_streams_kv_with_cp_async_and_combines_with_one_atomic(
        default: tuple[Rendered, BuildResult, dict[str, Sass]]) -> None:
    rendered, built, sass = default
    for e in rendered.entries:
        assert e.names == (e.name, f"{e.name}_lens", f"{e.name}_paged")   # docs/kernel-abi.md, "Ragged and paged caches"
        for name in e.names:
            r = built.resources[name]
            assert r.spill_stores == r.spill_loads == r.stack_frame == 0, name
            assert r.registers * e.launch.threads <= 65536
    assert set(sass) == {n for e in rendered.entries for n in e.names}
    for name, code in sass.items():                             # the paged kernels gather rows with LDGSTS too
        c = collections.Counter(op for _, op, _ in code)
        assert c["LDGSTS"] > 0 and c["HMMA"] > 0 and c["LDSM"] > 0, name
        assert c["ATOMG"] + c["RED"] >= 1, name                  # the tile's arrival counter
        assert c["LDL"] == c["STL"] == 0, name                   # no local memory


def test_a_paged_tile_finds_its_rows_without_a_division_or_a_table_load_per_row(
        default: tuple[Rendered, BuildResult, dict[str, Sass]]) -> None:
    """Per key tile the paged loop loads one block-table entry per lane slot (at most two: the
    pages of the tile after the next, issue 34) and no integer division (I2F / F2I / IABS, the
    reciprocal sequence of one), moves each row's page on by a shuffle, copies as many rows as the
    _lens loop, and is no longer than it. Before, it held a division and a table load in front of
    each of its 16 copies per thread (D7 at half the read ceiling on an H100)."""
    rendered, _, sass = default
    for e in rendered.entries:
        paged, lens = _key_loop(sass[f"{e.name}_paged"]), _key_loop(sass[f"{e.name}_lens"])
        assert paged["I2F"] == paged["F2I"] == paged["IABS"] == 0, (e.name, paged)
        assert 1 <= paged["LDG"] <= 2 and lens["LDG"] == 0, (e.name, paged)
        assert paged["LDGSTS"] == lens["LDGSTS"] and paged["SHFL"] > lens["SHFL"], (e.name, paged, lens)
        assert sum(paged.values()) <= sum(lens.values()), (e.name, sum(paged.values()), sum(lens.values()))

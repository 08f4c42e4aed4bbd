"""flash_decode compiled here (nvcc, no GPU): its default builds clean on sm_90a and sm_80, its
_lens and _paged entries too, and their machine code is the design's: K/V streamed by cp.async
(LDGSTS; a paged cache's rows gathered by it one by one), tensor-core MMAs (HMMA), one atomic per
CTA for the last-CTA combine, no local memory (no spills, no stack arrays).
tests/test_templates_cpu.py compiles a random sample of its other configurations with every family."""

from __future__ import annotations

import collections
import re
import shutil
from pathlib import Path

import pytest

from evo.family.manifest import load_family
from evo.family.render import render
from evo.family.space import make_candidate
from evo.results import Status
from evo.toolchain.build import build_batch
from evo.toolchain.sass import cuobjdump, dump_sass

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None or cuobjdump() is None,
                                reason="needs nvcc and cuobjdump")
OPCODE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9]+)")


def _opcodes_by_kernel(cubin: str) -> dict[str, collections.Counter[str]]:
    out: dict[str, collections.Counter[str]] = {}
    name = ""
    for line in dump_sass(cubin).splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            name = m.group(1)
            out[name] = collections.Counter()
        elif name and (op := OPCODE.search(line)):
            out[name][op.group(1)] += 1
    return out


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_the_default_streams_kv_with_cp_async_and_combines_with_one_atomic(
        arch: str, build_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVO_CANDIDATES", str(build_cache))
    fam = load_family("flash_decode")
    rendered = render(make_candidate(fam), fam)
    built = build_batch([rendered], arch)[0]
    assert built.status is Status.BUILT and built.cubin_path, built.reason
    for e in rendered.entries:
        assert e.names == (e.name, f"{e.name}_lens", f"{e.name}_paged")   # docs/kernel-abi.md, "Ragged and paged caches"
        for name in e.names:
            r = built.resources[name]
            assert r.spill_stores == r.spill_loads == r.stack_frame == 0, name
            assert r.registers * e.launch.threads <= 65536
    ops = _opcodes_by_kernel(built.cubin_path)
    assert set(ops) == {n for e in rendered.entries for n in e.names}
    for name, c in ops.items():                                  # the paged kernels gather rows with LDGSTS too
        assert c["LDGSTS"] > 0 and c["HMMA"] > 0 and c["LDSM"] > 0, name
        assert c["ATOMG"] + c["RED"] >= 1, name                  # the tile's arrival counter
        assert c["LDL"] == c["STL"] == 0, name                   # no local memory

"""Parse the resource report that ``nvcc -Xptxas -v`` prints for every kernel entry.

The build stage rejects candidates that spill or need more registers or shared memory than a
CTA may have, so it needs, per ``extern "C"`` entry: registers, static shared memory, spill
stores/loads and stack frame. ptxas reports them in three kinds of lines (CUDA 11 to 13,
sm_80 and sm_90a word them the same way up to optional fields)::

    ptxas info    : Compiling entry function 'evo_attn_d64_fp16_full' for 'sm_90a'
    ptxas info    : Function properties for evo_attn_d64_fp16_full
        0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem, 372 bytes cmem[0]

"Function properties" blocks also appear for non-inlined device functions; only entries
(functions named by a "Compiling entry function" line) are reported.

On sm_90a ptxas may also give up overlapping an entry's ``wgmma.mma_async`` instructions (every
one then waits for the one before: a Hopper kernel's main loop loses its point), said in an
info line of its own, which is kept as the entry's ``wgmma_serialized`` reason::

    ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized
    due to insufficient register resources for the wgmma pipeline in the function 'evo_attn_...'
"""

from __future__ import annotations

import re

from evo.results import Resources

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_SERIAL = re.compile(r"wgmma\.mma_async instructions are serialized due to (.+?) in the function '([^']+)'")


def parse_ptxas(log: str) -> dict[str, Resources]:
    """Resources of every kernel entry in an ``nvcc -Xptxas -v`` log, by entry name.

    Lines that are not part of the report (compiler errors, warnings, timings) are ignored;
    an entry whose "Used" line is missing gets zeros for registers and static smem.
    """
    entries: list[str] = []
    used: dict[str, tuple[int, int]] = {}
    frames: dict[str, tuple[int, int, int]] = {}
    serialized: dict[str, str] = {}
    current_entry: str | None = None
    props_for: str | None = None
    for line in log.splitlines():
        if m := _SERIAL.search(line):
            serialized[m.group(2)] = m.group(1)
        elif m := _ENTRY.search(line):
            current_entry = m.group(1)
            if current_entry not in entries:
                entries.append(current_entry)
            props_for = None
        elif m := _PROPS.search(line):
            props_for = m.group(1)
        elif m := _FRAME.search(line):
            if props_for is not None:
                frames[props_for] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
            props_for = None
        elif (m := _USED.search(line)) and current_entry is not None:
            smem = _SMEM.search(line)
            used[current_entry] = (int(m.group(1)), int(smem.group(1)) if smem else 0)
    out: dict[str, Resources] = {}
    for name in entries:
        registers, smem_static = used.get(name, (0, 0))
        stack, stores, loads = frames.get(name, (0, 0, 0))
        out[name] = Resources(registers=registers, smem_static=smem_static, spill_stores=stores,
                              spill_loads=loads, stack_frame=stack, wgmma_serialized=serialized.get(name, ""))
    return out

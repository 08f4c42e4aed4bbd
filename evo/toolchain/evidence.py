"""Machine-code evidence of a cubin's kernels, read from the cubin itself with cuobjdump.

What a package claims about its kernels (wgmma, TMA, warp specialisation with register
reallocation, no spills) is checked against the machine code that ships, not against the template
that made it: per kernel function, :func:`cubin_evidence` records

- ``registers``, ``stack_bytes``, ``local_bytes``, ``shared_bytes``: ``cuobjdump
  --dump-resource-usage`` (REG, STACK, LOCAL, SHARED): registers per thread at launch, the stack
  frame, local memory per thread (where spills go) and *static* shared memory (the dynamic shared
  memory is the launch's, not the cubin's);
- ``setmaxnreg``: the immediates of ``USETMAXREG.DEALLOC.CTAPOOL`` (``producer``: the warpgroup
  that gives registers back) and ``USETMAXREG.TRY_ALLOC.CTAPOOL`` (``consumer``: the warpgroups that
  take them), each a sorted list of the distinct values; None for a kernel without them (flash_mma);
- ``sass``: the count of each opcode of :data:`OPCODES` and ``instructions``, every instruction
  the disassembly lists (the end's padding included).

Without cuobjdump (and nvdisasm) there is no evidence: :func:`entry_evidence` records why instead,
and never a number it did not read.
"""

from __future__ import annotations

import copy
import functools
import re
import subprocess
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from evo.errors import EvoError
from evo.toolchain.sass import dump_resource_usage, dump_sass

# The opcodes that show what a kernel does (an instruction counts for a name when its mnemonic
# starts with the name's dotted parts: "BAR" counts BAR.SYNC and BAR.ARV, "MUFU.EX2" only exp2):
OPCODES: tuple[str, ...] = (
    "HGMMA",      # wgmma (sm_90 warpgroup MMA)
    "HMMA",       # mma.sync (warp MMA: sm_80 kernels)
    "LDSM",       # ldmatrix
    "UTMALDG",    # TMA load
    "UTMASTG",    # TMA store
    "LDGSTS",     # cp.async
    "MUFU.EX2",   # exp2, the softmax's exponentials
    "SYNCS",      # mbarrier operations
    "BAR",        # named barriers
    "STL",        # local stores (spills)
    "LDL",        # local loads (spills)
)
_RESOURCES = {"REG": "registers", "STACK": "stack_bytes", "LOCAL": "local_bytes", "SHARED": "shared_bytes"}
INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")   # one SASS instruction: (address, text)
_GUARD = re.compile(r"^@!?U?P\w+\s+")
_SETMAXNREG = re.compile(r"USETMAXREG\.(DEALLOC|TRY_ALLOC)\.CTAPOOL\s+(?:UP\w+,\s*)?(0x[0-9a-f]+|\d+)")


def resource_usage(text: str) -> dict[str, dict[str, int]]:
    """Function name -> registers and bytes (:data:`_RESOURCES`), from ``cuobjdump
    --dump-resource-usage`` output (``Function NAME:`` then ``REG:168 STACK:0 SHARED:1024 ...``)."""
    out: dict[str, dict[str, int]] = {}
    name = None
    for line in text.splitlines():
        if m := re.match(r"\s*Function (\S+):\s*$", line):
            name = m[1]
        elif name is not None and "REG:" in line:
            values = dict(re.findall(r"(\w+):(\d+)", line))
            out[name] = {key: int(values[field]) for field, key in _RESOURCES.items() if field in values}
            name = None
    return out


def sass_functions(text: str) -> dict[str, str]:
    """Function name -> its SASS, from ``cuobjdump --dump-sass`` output."""
    return {body.split()[0]: body for body in re.split(r"\n\s*Function : ", text)[1:]}


def mnemonic(instruction: str) -> str:
    """One instruction's mnemonic with its modifiers (``MUFU.EX2``), without its guard predicate."""
    return _GUARD.sub("", instruction).split()[0]


def _mnemonics(sass: str) -> list[str]:
    """Each instruction's :func:`mnemonic`."""
    return [mnemonic(ins) for _, ins in INSTRUCTION.findall(sass) if ins.strip()]


def opcode_counts(sass: str) -> dict[str, int]:
    """The count of each of :data:`OPCODES` in one function's SASS, and ``instructions`` in all."""
    mnemonics = Counter(_mnemonics(sass))
    counts = {name: sum(n for m, n in mnemonics.items() if m.split(".")[:name.count(".") + 1] == name.split("."))
              for name in OPCODES}
    return counts | {"instructions": sum(mnemonics.values())}


def setmaxnreg(sass: str) -> dict[str, list[int]] | None:
    """The register counts one function's SASS sets warpgroups to: ``producer`` (DEALLOC) and
    ``consumer`` (TRY_ALLOC), distinct values each; None when it never reallocates."""
    found = _SETMAXNREG.findall(sass)
    if not found:
        return None
    values = {kind: sorted({int(v, 0) for k, v in found if k == kind}) for kind in ("DEALLOC", "TRY_ALLOC")}
    return {"producer": values["DEALLOC"], "consumer": values["TRY_ALLOC"]}


def setmaxnreg_text(moves: dict[str, list[int]] | None) -> str:
    """A :func:`setmaxnreg` record as tables show it: ``producer / consumer`` (``24 / 240``), each
    side's distinct values joined by ``/``; ``—`` for a kernel (or a side) that sets none."""
    if moves is None:
        return "—"
    return " / ".join("/".join(map(str, moves[k])) or "—" for k in ("producer", "consumer"))


def function_evidence(resources: dict[str, int], sass: str) -> dict[str, Any]:
    """One kernel function's evidence (the module docstring) from its resource usage and SASS."""
    return {**resources, "setmaxnreg": setmaxnreg(sass), "sass": opcode_counts(sass)}


def cubin_evidence(cubin: str | Path) -> dict[str, dict[str, Any]]:
    """Function name -> its evidence, for every kernel function of ``cubin`` (EvoError: no
    cuobjdump; CalledProcessError: cuobjdump could not read the file). Read once per file as it
    stands (path, size, modification time): promote plans its table several times over the same
    cubins, and two cuobjdump runs take about 1.5 s a 16-kernel cubin."""
    path = Path(cubin).resolve()
    st = path.stat() if path.is_file() else None     # none: cuobjdump says what is wrong (not cached)
    return copy.deepcopy(_read(str(path), st.st_size if st else -1, st.st_mtime_ns if st else -1))


@functools.lru_cache(maxsize=128)
def _read(path: str, size: int, mtime_ns: int) -> dict[str, dict[str, Any]]:
    """:func:`cubin_evidence` of the file ``path`` at that size and time (the cache's key)."""
    resources = resource_usage(dump_resource_usage(path))
    functions = sass_functions(dump_sass(path))
    return {name: function_evidence(resources.get(name, {}), sass) for name, sass in sorted(functions.items())}


def entry_evidence(cubin: str | Path, names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Kernel name -> its evidence in ``cubin``, for each of ``names``; where there is none, the
    reason, as ``{"unavailable": why}`` (no cuobjdump, an unreadable cubin, no such function)."""
    try:
        found = cubin_evidence(cubin)
    except EvoError:
        found, why = {}, "cuobjdump not found"
    except (OSError, subprocess.CalledProcessError) as err:
        found, why = {}, f"cuobjdump could not read the cubin: {_last_line(err)}"
    else:
        why = "no such kernel function in the cubin"
    return {name: found.get(name) or {"unavailable": why} for name in names}


def _last_line(err: OSError | subprocess.CalledProcessError) -> str:
    """What a failed cuobjdump said last (its stderr), or the error itself."""
    said = (getattr(err, "stderr", None) or "").strip().splitlines()
    return said[-1].strip() if said else str(err)

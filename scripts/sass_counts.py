"""The SASS and ptxas evidence of stored candidates, per kernel entry, without a GPU.

Usage: python scripts/sass_counts.py [--db URL] [--arch sm_90a] ID [ID ...]

Each candidate (an id or unique prefix in the database) is rendered from today's templates,
built for ``--arch`` (the build cache answers one built before) and its cubin disassembled with
``cuobjdump --dump-sass``. One row per kernel entry: ptxas registers (the entry's count; the
warpgroups' own counts are the setmaxnreg values the template sets), spill bytes, dynamic shared
memory, and the count of the instructions issue 10 asks about: HGMMA (wgmma), HMMA (mma.sync:
should be 0), UTMALDG/UTMASTG (TMA loads/stores), SYNCS (mbarrier operations), USETMAXREG
(register reallocation), and the setmaxnreg values themselves (consumers up, producer down). A candidate whose stored source
differs from today's rendering is said so: its counts are of today's text.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import sys

from evo.toolchain.build import build_batch
from evo.store import open_store
from evo.toolchain.sass import cuobjdump, dump_sass

OPCODES = ("HGMMA", "HMMA", "UTMALDG", "UTMASTG", "SYNCS", "USETMAXREG")


def sass_by_kernel(cubin: str) -> dict[str, str]:
    """The SASS text of each kernel function in ``cubin``."""
    text = dump_sass(cubin)
    out: dict[str, list[str]] = collections.defaultdict(list)
    name = ""
    for line in text.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            name = m.group(1)
        elif name:
            out[name].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def counts(sass: str) -> dict[str, int | str]:
    """Opcode counts (an opcode is the first word of an instruction, before its modifiers) and
    the setmaxnreg values."""
    ops = collections.Counter(m.group(1) for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9]+)", sass))
    grown = sorted({int(v, 16) for v in re.findall(r"USETMAXREG\.TRY_ALLOC\S* \w+, (0x[0-9a-f]+)", sass)})
    shrunk = sorted({int(v, 16) for v in re.findall(r"USETMAXREG\.DEALLOC\S* (0x[0-9a-f]+)", sass)})
    regs = f"{'/'.join(map(str, grown)) or '-'} up, {'/'.join(map(str, shrunk)) or '-'} down"
    return {op: ops.get(op, 0) for op in OPCODES} | {"setmaxnreg": regs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ids", nargs="+")
    ap.add_argument("--db", default=None)
    ap.add_argument("--arch", default="sm_90a")
    args = ap.parse_args(argv)
    if cuobjdump() is None or shutil.which("nvcc") is None:
        print("needs nvcc and cuobjdump (the CUDA toolkit, or pip install 'evo-kernels[test]')", file=sys.stderr)
        return 2
    store = open_store(args.db) if args.db else open_store()
    header = ["candidate", "kernel", "regs", "spill B", "smem KB", *OPCODES, "setmaxnreg"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for ident in args.ids:
        view = store.get(ident).candidate
        rendered = view.rendered()
        if rendered.source_hash != view.source_hash:
            print(f"note: {ident}: today's template renders it differently from its stored source", file=sys.stderr)
        built = build_batch([rendered], args.arch)[0]
        if built.cubin_path is None:
            print(f"{ident}: {built.status.value}: {built.reason}", file=sys.stderr)
            return 1
        sass = sass_by_kernel(built.cubin_path)
        for entry, res in sorted(built.resources.items()):
            c = counts(sass.get(entry, ""))
            row = [ident[:12], entry, res.registers, res.spill_stores + res.spill_loads, round(res.smem_dynamic / 1024, 1),
                   *(c[o] for o in OPCODES), c["setmaxnreg"]]
            print("| " + " | ".join(map(str, row)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

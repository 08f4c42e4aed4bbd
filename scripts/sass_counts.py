"""The SASS and ptxas evidence of stored candidates, per kernel entry, without a GPU.

Usage: python scripts/sass_counts.py [--db PATH|URL] [--arch sm_90a] ID [ID ...]

Each candidate (an id or unique prefix in the database) is rendered from today's templates,
built for ``--arch`` (the build cache answers one built before) and its cubin read by
:mod:`evo.toolchain.evidence` (what a package records of each kernel it ships): one row per kernel
entry with registers at launch, local memory (spills), dynamic shared memory (a stored candidate's
launch), the counts of :data:`evo.toolchain.evidence.OPCODES` and the setmaxnreg values (consumers
up, producer down). A candidate whose stored source differs from today's rendering is said so: its
counts are of today's text.

With ``--step``, one row per kernel entry of the consumer's K/V step instead: the innermost loop
that holds wgmma (HGMMA) and exponentials (MUFU.EX2), and of it the instructions a step issues
on a tile that needs no mask (a forward branch over the masking, which sets scores by FSEL and
ISETP, or over the prescale's FMULs by a uniform register, taken), per key of the step where
the candidate has a BLOCK_N gene for the entry's head dim, with the opcode mix of that path.
With ``--order``, that path itself after the table, in issue order, runs of one opcode folded
(``FMUL x6``), with each wgmma, warpgroup wait, barrier, shuffle and branch written out: where the
waits sit among the exponentials is what the counts cannot show.

``--cubin PATH`` (repeatable) reads a cubin built elsewhere instead of a stored candidate, e.g.
FlashAttention-4's (scripts/fa4_cubin.py builds it on this machine); ``--block-n`` gives its K/V tile
for the per-key column.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import sys
from typing import Any

from evo.paths import db_url
from evo.store import open_store
from evo.toolchain.build import build_batch
from evo.toolchain.evidence import INSTRUCTION, OPCODES, cubin_evidence, mnemonic, sass_functions
from evo.toolchain.sass import cuobjdump, dump_sass


STEP_OPCODES = ("HGMMA", "MUFU", "FFMA", "FMUL", "FADD", "FMNMX", "F2FP", "SHFL", "BAR", "SYNCS")


def _opcode(instr: str) -> str:
    """An instruction's opcode: its mnemonic before the modifiers (``MUFU``)."""
    return mnemonic(instr).split(".")[0]


def evidence_cells(found: dict[str, Any], smem_kb: object = "-") -> list[object]:
    """The table's columns of one kernel's evidence (:func:`evo.toolchain.evidence.cubin_evidence`):
    registers, local bytes, ``smem_kb`` (a stored candidate's dynamic shared memory), each opcode's
    count, and the setmaxnreg values as ``up, down``."""
    moves = found["setmaxnreg"] or {"consumer": [], "producer": []}
    regs = (f"{'/'.join(map(str, moves['consumer'])) or '-'} up, "
            f"{'/'.join(map(str, moves['producer'])) or '-'} down")
    return [found.get("registers", "-"), found.get("local_bytes", "-"), smem_kb, *(found["sass"][o] for o in OPCODES),
            regs]


def step_path(sass: str) -> tuple[int, list[str]] | None:
    """(instructions in the loop, the unmasked path's instructions) of the innermost loop of
    ``sass`` holding HGMMA and MUFU.EX2 (the module docstring), or None where there is none."""
    ins = [(int(a, 16), op) for a, op in INSTRUCTION.findall(sass)]
    at = {a: i for i, (a, _) in enumerate(ins)}
    loops = []
    for i, (a, op) in enumerate(ins):
        m = re.search(r"BRA (?:!?U?P\w+, )?(0x[0-9a-f]+)$", op)
        top = at.get(int(m.group(1), 16)) if m and int(m.group(1), 16) < a else None
        if top is not None:
            body = [o for _, o in ins[top:i + 1]]
            if any(_opcode(o) == "HGMMA" for o in body) and any(o.startswith("MUFU.EX2") for o in body):
                loops.append((top, i))
    if not loops:
        return None
    lo, hi = min(loops, key=lambda x: x[1] - x[0])
    skipped: set[int] = set()
    for k in range(lo, hi):
        m = re.search(r"^@!?U?P\w+\s+BRA (?:!?U?P\w+, )?(0x[0-9a-f]+)$", ins[k][1])
        target = int(m.group(1), 16) if m else -1
        if target > ins[k][0] and target in at and at[target] <= hi:
            region = [o for _, o in ins[k + 1:at[target]]]
            masking = sum(_opcode(o) in ("FSEL", "ISETP") for o in region)
            prescale = sum(re.match(r"FMUL R\d+, R\d+, UR\d+$", o) is not None for o in region)
            if masking > 16 or prescale > 16:
                skipped.update(range(k + 1, at[target]))
    return hi - lo + 1, [ins[k][1] for k in range(lo, hi + 1) if k not in skipped]


def _step_cells(found: tuple[int, list[str]] | None, block_n: int | None) -> list[object]:
    """The ``--step`` columns of one kernel from its :func:`step_path`."""
    if found is None:
        return ["-"] * (4 + len(STEP_OPCODES))
    loop, path = found
    ops = collections.Counter(_opcode(o) for o in path)
    uniform = sum(n for op, n in ops.items() if op.startswith("U"))
    per_key = f"{len(path) / block_n:.2f}" if block_n else "-"
    return [loop, len(path), per_key, *(ops.get(o, 0) for o in STEP_OPCODES), uniform]


def step_row(sass: str, block_n: int | None) -> list[object]:
    """The ``--step`` columns of one kernel: loop size, unmasked step, per key, opcode mix."""
    return _step_cells(step_path(sass), block_n)


_SPELLED = ("HGMMA", "WARPGROUP", "BAR", "SYNCS", "SHFL", "BRA")


def step_order(path: list[str]) -> list[str]:
    """``path`` in issue order with runs of one opcode folded (``FMUL x6``); the instructions that
    order a step (wgmma, warpgroup waits, barriers, mbarrier operations, shuffles, branches) are
    written out whole."""
    out: list[tuple[str, int]] = []
    for instr in path:
        op = _opcode(instr)
        key = instr if op in _SPELLED else op
        if out and out[-1][0] == key and op not in _SPELLED:
            out[-1] = (key, out[-1][1] + 1)
        else:
            out.append((key, 1))
    return [f"{k} x{n}" if n > 1 else k for k, n in out]


def _step(label: str, name: str, sass: str, block_n: int | None) -> tuple[list[object], str | None]:
    """One kernel's ``--step`` table row and its step listed in issue order (None: no step), the
    SASS walked once for both."""
    found = step_path(sass)
    listing = (f"{label} {name} ({len(found[1])} instructions):\n  " + "\n  ".join(step_order(found[1]))
               if found else None)
    return [label, name, *_step_cells(found, block_n)], listing


def _cubin_rows(path: str, step: bool, block_n: int | None) -> list[tuple[list[object], str | None]]:
    """(table row, its step listing or None) of every kernel of one cubin."""
    label = path.rsplit("/", 1)[-1][:24]
    if not step:
        return [([label, name[:60], *evidence_cells(found)], None) for name, found in cubin_evidence(path).items()]
    return [_step(label, name[:60], sass, block_n) for name, sass in sorted(sass_functions(dump_sass(path)).items())]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ids", nargs="*")
    ap.add_argument("--db", default=None)
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--step", action="store_true", help="the consumer's K/V step per kernel (module docstring)")
    ap.add_argument("--order", action="store_true", help="with --step: each step's instructions in issue order")
    ap.add_argument("--cubin", action="append", default=[], help="a cubin built elsewhere (repeatable)")
    ap.add_argument("--block-n", type=int, default=None, help="the K/V tile of --cubin's kernels, for per key")
    args = ap.parse_args(argv)
    if not args.ids and not args.cubin:
        ap.error("name a stored candidate or a --cubin")
    if cuobjdump() is None or (args.ids and shutil.which("nvcc") is None):
        print("needs nvcc and cuobjdump (the CUDA toolkit, or pip install 'evo-kernels[test]')", file=sys.stderr)
        return 2
    header = (["candidate", "kernel", "loop", "step", "per key", *STEP_OPCODES, "uniform"] if args.step else
              ["candidate", "kernel", "regs", "local B", "smem KB", *OPCODES, "setmaxnreg"])
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    listings: list[str] = []
    for path in args.cubin:
        for row, listing in _cubin_rows(path, args.step, args.block_n):
            print("| " + " | ".join(map(str, row)) + " |")
            if args.order and listing:
                listings.append(listing)
    store = open_store(db_url(args.db) if args.db else None) if args.ids else None
    for ident in args.ids:
        assert store is not None
        view = store.get(ident).candidate
        rendered = view.rendered()
        if rendered.source_hash != view.source_hash:
            print(f"note: {ident}: today's template renders it differently from its stored source", file=sys.stderr)
        built = build_batch([rendered], args.arch)[0]
        if built.cubin_path is None:
            print(f"{ident}: {built.status.value}: {built.reason}", file=sys.stderr)
            return 1
        if args.step:
            sass = sass_functions(dump_sass(built.cubin_path))
        else:
            found = cubin_evidence(built.cubin_path)
        for entry, res in sorted(built.resources.items()):
            if args.step:
                dim = re.search(r"_d(\d+)_", entry)
                block_n = view.params.get(f"BLOCK_N_D{dim.group(1)}" if dim else "")
                row, listing = _step(ident[:12], entry, sass.get(entry, ""), block_n if isinstance(block_n, int) else None)
                print("| " + " | ".join(map(str, row)) + " |")
                if args.order and listing:
                    listings.append(listing)
                continue
            row = [ident[:12], entry, *evidence_cells(found[entry], round(res.smem_dynamic / 1024, 1))]
            print("| " + " | ".join(map(str, row)) + " |")
    if listings:
        print("\n" + "\n\n".join(listings))
    return 0


if __name__ == "__main__":
    sys.exit(main())

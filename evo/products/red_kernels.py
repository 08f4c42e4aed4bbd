"""A kernel that failed GREEN under any candidate is red under every candidate.

GREEN draws its inputs per candidate, and candidates that differ only in genes of another head dim
share kernels byte for byte (:mod:`evo.toolchain.machine_code`). So one kernel can be green as part of one
candidate and red as part of another: in study wgmma3 the best candidate's D=128 fp16 kernel had
failed a draw under a sibling. Promotion therefore collects, from every evaluation in the database
with a failed check, the machine-code digest of the kernel that failed, and keeps each such kernel
out of every bucket of its key, whichever candidate brings it; the winners' cubins are checked
against the same list again once they are found or rebuilt (a match loses its buckets).

A candidate's digests come from its evaluations' device info (``kernel_sha256``, JSON, recorded since
this rule exists, and ``kernel_code_sha256``, the portable digests that match one kernel across a
search's kernel subsets, since 2026-11-28) or, for older records, from its cubin if the build cache
still has it; a kernel whose digest cannot be known is not matched here (the winners' cubin check
still covers it). A kernel matches a red one by either digest.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from evo.toolchain import build
from evo.toolchain.machine_code import kernel_digests
from evo.family.render import entry_name
from evo.store import Store

Red = Mapping[tuple[str, str], "RedCheck"]


@dataclass(frozen=True)
class RedCheck:
    """Where a kernel failed: the candidate it was part of, the evaluation and the check."""

    candidate: str
    evaluation: int
    check: str


@dataclass(frozen=True)
class Excluded:
    """A kernel kept out of the package: ``candidate``'s ``entry`` is machine code that failed."""

    candidate: str
    entry: str
    red: RedCheck

    def line(self) -> str:
        who = "itself" if self.red.candidate == self.candidate else f"candidate {self.red.candidate[:12]}"
        return (f"{self.candidate[:12]} {self.entry}: the same machine code failed GREEN as part of {who} "
                f"(evaluation {self.red.evaluation}: {self.red.check})")

    def as_dict(self) -> dict[str, object]:
        return {"candidate": self.candidate, "entry": self.entry, "red_candidate": self.red.candidate,
                "red_evaluation": self.red.evaluation, "red_check": self.red.check}


Digests = dict[str, set[str]]   # kernel function -> its machine-code digests (plain and portable)
STORED = ("kernel_sha256", "kernel_code_sha256")   # the device info keys that hold them


def _stored(info: Mapping[str, object]) -> Digests:
    """The digests an evaluation's device info recorded (:data:`STORED`), or none."""
    out: Digests = {}
    for key in STORED:
        stored = info.get(key)
        if isinstance(stored, str) and stored:
            for name, digest in json.loads(stored).items():
                out.setdefault(str(name), set()).add(str(digest))
    return out


def cubin_digests(path: str | Path) -> Digests:
    """A cubin's plain and portable digests per kernel function (:mod:`evo.toolchain.machine_code`)."""
    out: Digests = {}
    data = Path(path).read_bytes()   # read once for both kinds of digest
    for portable in (False, True):
        for name, digest in kernel_digests(data, portable=portable).items():
            out.setdefault(name, set()).add(digest)
    return out


def candidate_digests(store: Store, candidate_id: str, device_info: Mapping[str, object] | None = None) -> Digests:
    """Kernel function -> machine-code digests for a candidate: from ``device_info`` or its newest
    evaluation that recorded them, else from its cubin in the build cache; empty if neither.
    The database is read only when ``device_info`` has none, and then once."""
    if device_info is not None and (digests := _stored(device_info)):
        return digests
    record = store.get(candidate_id)
    for ev in reversed(record.evaluations):
        if digests := _stored(ev.device_info):
            return digests
    paths = [Path(b.cubin_path) for b in reversed(record.builds) if b.cubin_path]
    paths.append(build.cache_dir(candidate_id) / build.CUBIN)
    for path in paths:
        if path.is_file():
            return cubin_digests(path)
    return {}


def red_kernels(store: Store) -> dict[tuple[str, str], RedCheck]:
    """(kernel function, digest) -> the first failed check of that machine code in the database."""
    out: dict[tuple[str, str], RedCheck] = {}
    for ev in store.failed_evaluations():
        digests = candidate_digests(store, ev.candidate_id, ev.device_info)
        for c in ev.checks:
            name = entry_name(c.shape.D, c.shape.dtype, c.shape.causal)
            if not c.passed:
                what = f"{c.shape.tag} seed {c.seed}: {c.reason or 'failed'}"
                for digest in sorted(digests.get(name, ())):
                    out.setdefault((name, digest), RedCheck(ev.candidate_id, ev.id, what))
    return out


def excluded_entries(candidate: str, digests: Mapping[str, Collection[str]], entries: Sequence[str],
                     red: Red) -> list[Excluded]:
    """Which of ``entries`` of ``candidate`` (kernel names) are machine code listed in ``red``
    (by any of their digests)."""
    out = []
    for name in entries:
        hits = [red[(name, d)] for d in sorted(digests.get(name, ())) if (name, d) in red]
        if hits:
            out.append(Excluded(candidate, name, hits[0]))
    return out

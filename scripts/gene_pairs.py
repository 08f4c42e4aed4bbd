"""A gene's A/B read from a database: for pairs of candidates, each one's full-protocol FAST time per case,
its speedup over SDPA's default timed beside it in the same process, and the time ratio A / B (above 1: B
is faster), with the genes in which the two differ (issue 33's TILE_SCHED measurement, dev/perf-notes.md w).

    python scripts/gene_pairs.py db/evo.sqlite 860b661f5aec:aef2cf22fafb [A:B ...] [--device "NVIDIA H200"]
    python scripts/gene_pairs.py db/evo.sqlite A:B --bench ab/benchmarks/*.json
    python scripts/gene_pairs.py db/evo.sqlite --gene EXP_EMU_D64     # every pair differing in that gene alone

From the database, the two of a pair may have been timed in different sessions (different machines of one
kind): the time ratio then carries the machines' difference too, the speedup column does not (each
against its own SDPA), so both are printed. With --bench the times are those of `evo bench --id A --id B`
records instead (`scripts/gpu-llm.sh ab`): both timed in one session, each beside its own SDPA; the
database then only names the genes.
"""

from __future__ import annotations

import argparse
import functools
import json
import sqlite3
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple

from evo.family.manifest import load_family
from evo.family.render import entry_name
from evo.store.engine import sqlite_header_error

STORED_CODE = "coalesce(json_extract(device_info, '$.kernel_code_sha256'), json_extract(device_info, '$.kernel_sha256'))"
TIMES = """select t."case", t.causal, t.dtype, t."D", t.backend, t.median_us
           from evo_timings t join evo_evaluations e on t.evaluation_id = e.id
           where e.candidate_id = ? and e.device = ? and json_extract(e.device_info, '$.rung') = 'full'"""


def full_id(db: sqlite3.Connection, prefix: str) -> str:
    """The one candidate id that starts with ``prefix`` (exit with a one-line error otherwise)."""
    ids = [r[0] for r in db.execute("select id from evo_candidates where id like ?", (prefix + "%",))]
    if len(ids) != 1:
        sys.exit(f"gene_pairs: {prefix!r} names {len(ids)} candidates, not one")
    return ids[0]


@functools.cache
def defaults(family: str) -> dict[str, object]:
    """The family's genes at their defaults (a stored candidate older than a gene lacks it)."""
    return {name: spec.default for name, spec in load_family(family).params.items()}


def params(db: sqlite3.Connection, cid: str) -> dict[str, object]:
    family, stored = db.execute("select family, params from evo_candidates where id = ?", (cid,)).fetchone()
    return defaults(family) | json.loads(stored)


class Case(NamedTuple):
    evo_us: float
    sdpa_us: float | None      # SDPA's default, timed beside it
    entry: str                 # the kernel entry that serves the case


def tag_entry(case: str, causal: bool, dtype: str, head_dim: int) -> tuple[str, str]:
    """A case's tag ("L2c-bf16") and the entry of the flash_wgmma ABI that serves it."""
    return f"{case}{'c' if causal else ''}-{dtype}", entry_name(head_dim, dtype, causal)   # as Shape.tag spells it


def per_case(db: sqlite3.Connection, cid: str, device: str) -> dict[str, Case]:
    """Case tag -> the candidate's median FAST us and SDPA's default's over its full evaluations."""
    got: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for case, causal, dtype, head_dim, backend, us in db.execute(TIMES, (cid, device)):
        got[tag_entry(case, bool(causal), dtype, head_dim)][backend].append(us)
    return {tag: Case(statistics.median(b["evo"]), statistics.median(b["sdpa_default"]) if b["sdpa_default"] else None,
                      entry) for (tag, entry), b in got.items() if b["evo"]}


def per_case_benched(records: list[dict[str, Any]], cid: str) -> dict[str, Case]:
    """Case tag -> the candidate's us and SDPA's default's in `evo bench` records."""
    out = {}
    for c in (c for r in records for c in r["cases"] if c.get("candidate_id") == cid and c["us"].get("evo")):
        tag, entry = tag_entry(c["case"], c["causal"], c["dtype"], c["D"])
        out[tag] = Case(c["us"]["evo"], c["us"].get("sdpa_default"), entry)
    return out


def kernel_hashes(db: sqlite3.Connection, cid: str) -> dict[str, str]:
    """Entry -> the SHA-256 of its machine code, as the candidate's newest evaluation that read them says:
    the portable digests (``kernel_code_sha256``) where recorded, since the file-bound ones
    (``kernel_sha256``) carry the cubin's symbol indices, so one kernel built beside other head dims'
    kernels reads as another (evo.toolchain.machine_code)."""
    row = db.execute("select " + STORED_CODE + " from evo_evaluations where candidate_id = ? and " + STORED_CODE
                     + " is not null order by id desc limit 1", (cid,)).fetchone()
    return dict(json.loads(row[0])) if row else {}


def clean_pairs(db: sqlite3.Connection, gene: str, device: str) -> list[tuple[str, str]]:
    """Every pair of candidates timed in full on ``device`` whose genes differ in ``gene`` alone: within each
    group of one family and otherwise equal genes, the candidate at the gene's default (else its first value
    stored) as A beside each at another value as B."""
    timed = db.execute("select distinct c.id, c.family from evo_candidates c join evo_evaluations e "
                       "on e.candidate_id = c.id where e.device = ? and json_extract(e.device_info, '$.rung') = 'full' "
                       "order by c.id", (device,)).fetchall()
    groups: dict[str, dict[str, str]] = defaultdict(dict)   # family and the other genes -> the gene's value -> one
    for cid, family in timed:
        p = params(db, cid)
        if gene in p:
            rest = json.dumps([family, {k: v for k, v in p.items() if k != gene}], sort_keys=True)
            groups[rest].setdefault(json.dumps(p[gene]), cid)
    pairs = []
    for rest, by_value in groups.items():
        default = json.dumps(defaults(json.loads(rest)[0]).get(gene))
        a = by_value.get(default) or min(by_value.items())[1]
        pairs += [(a, b) for b in sorted(by_value.values()) if b != a]
    return pairs


def show_pair(db: sqlite3.Connection, a: str, b: str, records: list[dict[str, Any]], device: str) -> list[float]:
    """Print the pair's genes that differ and its cases; return B's speedup over A's per case whose kernel
    differs. A case whose entry has the same machine code in A and B is a control: what it reads is the
    two measurements' own spread (another board, another day), printed apart, never counted as the gene's."""
    pa, pb = params(db, a), params(db, b)
    diff = {k: (pa.get(k), pb.get(k)) for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k)}
    print(f"{a[:12]} -> {b[:12]}: " + ", ".join(f"{k} {x} -> {y}" for k, (x, y) in diff.items()))
    if records:
        ta, tb = per_case_benched(records, a), per_case_benched(records, b)
    else:
        ta, tb = per_case(db, a, device), per_case(db, b, device)
    ha, hb = kernel_hashes(db, a), kernel_hashes(db, b)
    ratios: dict[bool, list[float]] = {False: [], True: []}   # keyed by "the same kernel in A and B"
    gains: dict[bool, list[float]] = {False: [], True: []}
    for tag in sorted(set(ta) & set(tb)):
        ca, cb = ta[tag], tb[tag]
        same = bool(ha.get(ca.entry)) and ha.get(ca.entry) == hb.get(cb.entry)
        xa = f"x{ca.sdpa_us / ca.evo_us:.3f}" if ca.sdpa_us else "   -  "
        xb = f"x{cb.sdpa_us / cb.evo_us:.3f}" if cb.sdpa_us else "   -  "
        ratios[same].append(ca.evo_us / cb.evo_us)
        if ca.sdpa_us and cb.sdpa_us:
            gains[same].append((cb.sdpa_us / cb.evo_us) / (ca.sdpa_us / ca.evo_us))
        print(f"  {tag:10} A {ca.evo_us:8.1f} us ({xa})   B {cb.evo_us:8.1f} us ({xb})   A/B {ca.evo_us / cb.evo_us:.3f}"
              + ("   same kernel: control" if same else ""))
    for same, what in ((False, "cases"), (True, "same-kernel controls")):
        if ratios[same]:
            print(f"  geomean A/B over {len(ratios[same])} {what}: {statistics.geometric_mean(ratios[same]):.3f}"
                  + (f"; B's speedup over A's: {statistics.geometric_mean(gains[same]):.3f}" if gains[same] else ""))
    if not ratios[False] and not ratios[True]:
        print(f"  no case timed for both in {'the bench records' if records else f'full on {device}'}")
    return gains[False]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db", help="an evo SQLite database")
    ap.add_argument("pairs", nargs="*", help="A:B, two candidate ids or unique prefixes")
    ap.add_argument("--gene", help="instead of pairs: every pair in the database that differs in this gene alone")
    ap.add_argument("--device", default="NVIDIA H200", help="the GPU whose timings are read")
    ap.add_argument("--bench", nargs="+", default=[], metavar="JSON", help="read the times from these bench records")
    args = ap.parse_args(argv)
    if bool(args.pairs) == bool(args.gene):
        ap.error("give pairs A:B or --gene NAME")
    try:
        records = [json.loads(Path(f).read_text()) for f in args.bench]
    except (OSError, ValueError) as exc:
        ap.error(f"--bench: {exc}")
    if problem := sqlite_header_error(Path(args.db)):
        ap.error(problem)
    db = sqlite3.connect(args.db)
    if args.gene:
        pairs = clean_pairs(db, args.gene, args.device)
    else:
        for pair in args.pairs:
            if pair.count(":") != 1:
                ap.error(f"{pair!r}: a pair is A:B")
        pairs = [(full_id(db, x), full_id(db, y)) for x, y in (p.split(":") for p in args.pairs)]
    gains = [g for a, b in pairs for g in show_pair(db, a, b, records, args.device)]
    if args.gene:
        print(f"{args.gene}: {len(pairs)} clean pair(s) on {args.device}"
              + (f"; B's speedup over A's, geomean over their {len(gains)} cases: "
                 f"{statistics.geometric_mean(gains):.3f}" if gains else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

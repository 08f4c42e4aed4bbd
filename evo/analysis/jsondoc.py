"""Plain-JSON documents of what the inspection commands show (``--json``) and the report embeds.

One function per document: a candidate's full record (``evo show ID --json``), an insights
report (``evo insights --json``); the lineage graph's document is :func:`evo.analysis.lineage.to_json`.
Keys are stable and spelled as the database spells them; numbers stay numbers (NaN becomes
null, since JSON has no NaN); times are ISO 8601 strings. Every document carries
``"schema": "evo.<kind>/1"`` so a script can tell what it reads and when its shape changes.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping
from dataclasses import asdict
from datetime import datetime
from typing import Any

from evo.errors import EvoError
from evo.analysis.insights import Report
from evo.results import CheckResult, Shape, Timing
from evo.vocab import DEFAULT_BASELINE, EVO
from evo.scoring import edge_effect, latest, score, speedups
from evo.store import CandidateRecord, Store
from evo.store.views import BuildView, EdgeView, EvaluationView

RECORD_SCHEMA = "evo.candidate/1"
INSIGHTS_SCHEMA = "evo.insights/1"
LOG_LINES = 40  # compile logs are cut to their first lines: enough to see the error


def dumps(doc: Any) -> str:
    """One JSON document as the CLI prints it: indented, NaN and inf written as null."""
    return json.dumps(clean(doc), indent=1, allow_nan=False) + "\n"


def clean(x: Any) -> Any:
    """``x`` with NaN/inf as None, tuples as lists and datetimes as ISO strings (JSON-safe)."""
    if isinstance(x, enum.Enum):
        return x.value
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, datetime):
        return x.isoformat()
    if isinstance(x, Mapping):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    return x


def shape_doc(s: Shape) -> dict[str, Any]:
    return {**s.as_dict(), "tag": s.tag, "flops": s.flops}


def timing_doc(t: Timing, samples: bool = True) -> dict[str, Any]:
    out = shape_doc(t.shape) | {"backend": t.backend, "median_us": t.median_us, "p20_us": t.p20_us,
                                "p80_us": t.p80_us, "tflops": t.tflops if t.median_us > 0 else None,
                                "flagged": t.flagged}
    if samples:
        out["samples_us"] = list(t.samples_us)
    return out


def check_doc(c: CheckResult) -> dict[str, Any]:
    return shape_doc(c.shape) | {"seed": c.seed, "passed": c.passed, "max_abs_err": c.max_abs_err,
                                 "ref_err": c.ref_err, "tolerance": c.tolerance, "reason": c.reason}


def build_doc(b: BuildView, log: bool = True) -> dict[str, Any]:
    out = {"id": b.id, "run_id": b.run_id, "status": b.status.value, "reason": b.reason, "seconds": b.seconds,
           "cached": b.cached, "cubin_path": b.cubin_path, "created": b.created,
           "resources": {name: asdict(r) for name, r in b.resources.items()}}
    if log:
        out["log"] = "\n".join(b.log.strip().splitlines()[:LOG_LINES])
    return out


def evaluation_doc(e: EvaluationView, samples: bool = True) -> dict[str, Any]:
    return {"id": e.id, "run_id": e.run_id, "device": e.device, "device_info": dict(e.device_info),
            "status": e.status.value, "reason": e.reason, "green_seconds": e.green_seconds,
            "fast_seconds": e.fast_seconds, "created": e.created,
            "checks": [check_doc(c) for c in e.checks],
            "timings": [timing_doc(t, samples) for t in e.timings]}


def scores(timings: list[Timing]) -> dict[str, float | None]:
    """Geometric-mean speedup against every baseline measured beside the candidate."""
    out: dict[str, float | None] = {}
    for backend in sorted({t.backend for t in timings if t.backend != EVO}):
        try:
            out[backend] = score(timings, backend)
        except EvoError:
            out[backend] = None
    return out


def edge_docs(store: Store, rec: CandidateRecord, baseline: str) -> dict[str, list[dict[str, Any]]]:
    """Parents and children with the move and its effect (child score / parent score)."""
    edges: list[tuple[str, EdgeView, str]] = ([("parents", e, e.parent_id) for e in rec.parents]
                                              + [("children", e, e.child_id) for e in rec.children])
    others = [oid for _, _, oid in edges]
    statuses = store.statuses(others)
    timed = store.latest_timings([rec.candidate.id, *others])
    out: dict[str, list[dict[str, Any]]] = {"parents": [], "children": []}
    for role, e, oid in edges:
        parent, child = timed.get(e.parent_id), timed.get(e.child_id)
        effect = (edge_effect(parent[1], child[1], baseline)
                  if parent and child and parent[0] == child[0] else None)
        st = statuses.get(oid)
        out[role].append({"id": oid, "kind": e.kind, "mutation": {k: list(v) for k, v in e.mutation.items()},
                          "effect": effect, "status": st.value if st else None})
    return out


def record_doc(store: Store, rec: CandidateRecord, baseline: str = DEFAULT_BASELINE, *,
               samples: bool = True, logs: bool = True) -> dict[str, Any]:
    """Everything stored about one candidate (what ``evo show`` prints), as plain data.

    ``timings`` are the latest per (case, backend) on the device of the newest timed
    evaluation, the ones scores are computed from; ``evaluations`` keep every measurement.
    """
    c = rec.candidate
    timings = store.timings_for(c.id)
    by = latest(timings)
    run = store.get_run(c.first_run_id) if c.first_run_id is not None else None
    return clean({
        "schema": RECORD_SCHEMA,
        "id": c.id, "family": c.family, "family_version": c.family_version, "label": c.label,
        "params": dict(c.params), "status": c.status.value, "reason": c.reason, "arch": c.arch,
        "flags": list(c.flags), "source_hash": c.source_hash, "created": c.created,
        "first_run": None if run is None else {"id": run.id, "command": run.command, "study": run.study,
                                               "host": run.host, "git_sha": run.git_sha},
        "builds": [build_doc(b, logs) for b in rec.builds],
        "evaluations": [evaluation_doc(e, samples) for e in rec.evaluations],
        "timings": [timing_doc(t, samples) for t in by.values()],
        "baseline": baseline,
        "speedups": {b: speedups(timings, b) for b in sorted({b for _, b in by if b != EVO})},
        "scores": scores(timings),
        **edge_docs(store, rec, baseline),
        "trials": [{"study": t.study, "number": t.number, "state": t.state, "value": t.value, "run_id": t.run_id}
                   for t in rec.trials],
    })


def insights_doc(report: Report, study: str | None, baseline: str) -> dict[str, Any]:
    """An insights report (moves, resources, importances) with each row's numbers and evidence."""
    return clean({
        "schema": INSIGHTS_SCHEMA,
        "study": study,
        "baseline": baseline,
        "moves": [{"family": m.family, "param": m.param, "old": m.old, "new": m.new, "bucket": m.bucket,
                   "n": m.n, "median_effect": m.median_effect, "win_rate": m.win_rate, "failed": m.failed,
                   "effects": list(m.effects), "text": m.text(), "evidence": list(m.evidence)}
                  for m in report.moves],
        "resources": [{"family": r.family, "param": r.param, "value": r.value, "built": r.built,
                       "rejected": r.rejected, "spills": r.spills, "smem_over": r.smem_over,
                       "registers": r.registers, "rate": r.rate, "text": r.text(), "evidence": list(r.evidence)}
                      for r in report.resources],
        "importances": [{"family": i.family, "trials": i.trials, "values": dict(i.values), "skipped": i.skipped}
                        for i in report.importances],
    })

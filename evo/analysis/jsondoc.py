"""Plain-JSON pieces of what the inspection commands show (``--json``) and the report embeds.

A candidate's full record (``evo show ID --json``) is :meth:`evo.analysis.candidate.CandidateReport.document`,
an insights report (``evo insights --json``) :meth:`evo.analysis.insights.Report.document`, the
lineage graph's :meth:`evo.analysis.lineage.Lineage.document`; they are made of the pieces here.
Keys are stable and spelled as the database spells them; numbers stay numbers (NaN becomes
null, since JSON has no NaN: :func:`clean`); times are ISO 8601 strings. Every document carries
``"schema": "evo.<kind>/1"`` so a script can tell what it reads and when its shape changes.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import asdict
from datetime import datetime
from typing import Any

from evo.errors import EvoError
from evo.results import CheckResult, Shape, Timing
from evo.scoring import score
from evo.store.views import BuildView, EvaluationView
from evo.vocab import EVO

RECORD_SCHEMA = "evo.candidate/1"
INSIGHTS_SCHEMA = "evo.insights/1"
LOG_LINES = 40  # compile logs are cut to their first lines: enough to see the error


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

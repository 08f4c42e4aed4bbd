"""Rows to views and records to rows: what the repository's parts share at the ORM boundary.

Reads hand out the frozen views of :mod:`evo.store.views` (and :mod:`evo.results` records for
checks and timings), never ORM objects; NaN, which databases store as NULL, goes in as NULL
and comes back as NaN.
"""

from __future__ import annotations

import math

from evo.results import CheckResult, Resources, Shape, Status, Timing
from evo.store.models import Build, Candidate, Check, Edge, EvaluationRow, Run, TimingRow, Trial
from evo.store.views import BuildView, CandidateView, EdgeView, EvaluationView, RunView, TrialView


def num(x: float) -> float | None:
    """A float as stored: NaN becomes NULL."""
    return None if math.isnan(x) else x


def nan(x: float | None) -> float:
    """A stored float as read: NULL becomes NaN."""
    return math.nan if x is None else x


def resources_dict(r: Resources) -> dict[str, int]:
    return {k: getattr(r, k) for k in Resources.__dataclass_fields__}


def shape(row: Check | TimingRow) -> Shape:
    return Shape(row.case, row.B, row.H, row.L, row.D, row.causal, row.dtype, row.Hkv or 0, row.Lk or 0,
                 row.align or "top_left", row.layout or "contiguous", row.lens_min or 0, row.lens_seed or 0,
                 row.page_size or 0)


def timing(t: TimingRow) -> Timing:
    return Timing(shape(t), t.backend, t.median_us, t.p20_us, t.p80_us, list(t.samples_us), t.flagged)


def run_view(r: Run, expired: bool | None) -> RunView:
    """The run's view; ``expired``: whether its lease has run out (:mod:`evo.store.runs`)."""
    return RunView(r.id, r.study, r.started, r.finished, r.status, r.command, dict(r.options), r.git_sha,
                   r.host, dict(r.device), r.alive_until, bool(expired))


def cand_view(c: Candidate) -> CandidateView:
    kernels = None if c.kernels is None else frozenset((int(d), str(dt), bool(cz)) for d, dt, cz in c.kernels)
    return CandidateView(c.id, c.family, c.family_version, dict(c.params), c.label, Status(c.status), c.reason,
                         c.source_hash, c.arch, tuple(c.flags or ()), c.created, c.first_run_id, kernels)


def build_view(b: Build) -> BuildView:
    return BuildView(b.id, b.run_id, Status(b.status), b.reason, b.seconds, b.cached, b.log,
                     {k: Resources(**v) for k, v in b.resources.items()}, b.cubin_path, b.created)


def edge_view(e: Edge) -> EdgeView:
    return EdgeView(e.parent_id, e.child_id, e.kind, {k: tuple(v) for k, v in e.mutation.items()},
                    e.run_id, e.created)


def trial_view(t: Trial) -> TrialView:
    return TrialView(t.study, t.trial_number, t.candidate_id, t.run_id, t.state, t.value)


def eval_view(e: EvaluationRow) -> EvaluationView:
    return EvaluationView(
        e.id, e.candidate_id, e.run_id, e.device, dict(e.device_info), Status(e.status), e.reason,
        e.green_seconds, e.fast_seconds, e.created,
        checks=[CheckResult(shape(c), c.seed, c.passed, nan(c.max_abs_err), nan(c.ref_err),
                            nan(c.tolerance), c.reason) for c in e.checks],
        timings=[timing(t) for t in e.timings],
    )

"""A benchmark problem made from a recording, and the counting rule every sampler is held to.

:class:`Problem`: the valid points of the selected families (from the manifests, so points the
recording lacks are part of the space), each point's recorded outcome (the objective, a
failure status, or ``unmeasured`` when the recording lacks it), the best recorded point and
the target set (points within ``tolerance`` of the best; tolerance 0 means the best point
itself), and the families' manifest defaults (the warm start). With ``pins`` (``--pin``) the
space is the sub-space those genes held at one value each leave (:func:`evo.family.space.pinned`):
a family too large to list may become listable, and the recording's points outside the
sub-space are left out (the best and the target are the sub-space's).

:class:`Tally` applies the replay rule to a sequence of proposals, whatever proposed them:

- an evaluation is the first proposal of a distinct valid point; it costs one whatever its
  outcome (timed, rejected by the build, failed, or unrecorded -- on a GPU each of them would
  have cost a build and usually a GPU run);
- an invalid point (one the manifest's domains or constraints forbid) and a repeat of a point
  already evaluated are free;
- a run reaches the target at the evaluation that first proposes a target point.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evo.errors import EvoError, InvalidCandidate
from evo.family.manifest import Family, Value, load_family
from evo.store.recording import Recording, load_recording, record_key
from evo.results import Shape, Status
from evo.search import objective
from evo.family.space import (LIST_UP_TO, Candidate, Pins, all_candidates, combinations, listable, make_candidate,
                              pinned)

UNMEASURED = "unmeasured"

Outcome = float | str  # the objective (geometric-mean speedup), or why there is none


def outcomes(rec: Recording, cases: Sequence[Shape], baseline: str) -> dict[str, Outcome]:
    """Per record key: the objective, or the recorded failure status (``unmeasured`` when a
    timed record lacks one of ``cases``)."""
    out: dict[str, Outcome] = {}
    for key, r in rec.records.items():
        if r.status is not Status.FAST:
            out[key] = r.status.value
            continue
        ev = r.evaluation("", cases, {})
        out[key] = UNMEASURED if objective.missing_cases(ev.timings, baseline, cases) else \
            objective.values(ev.timings, baseline, cases, "geomean")[0]
    return out


@dataclass
class Problem:
    """The space, the recorded outcomes and the target of one benchmark (see module docstring)."""

    recording: Recording
    families: list[Family]
    cases: list[Shape]
    baseline: str
    tolerance: float
    table: dict[str, Outcome]
    points: list[tuple[str, Candidate]]
    best: float
    targets: frozenset[str]
    defaults: list[Candidate] = field(default_factory=list)
    pins: Pins = field(default_factory=dict)   # the genes held at one value, per family (none: the whole space)

    @classmethod
    def load(cls, path: Path | str, families: Sequence[str] | None = None, cases: Sequence[Shape] | None = None,
             baseline: str = "sdpa_default", tolerance: float = 0.0,
             pins: Mapping[str, Mapping[str, Value]] | None = None) -> Problem:
        """The problem of the recording at ``path`` on ``families`` (default: every family it
        holds), ``pins`` applied to those of its families they name (the others' are ignored)."""
        rec = load_recording(path)
        names = section_families(rec, families)
        if not 0 <= tolerance < 1:
            raise EvoError(f"tolerance must be in [0, 1), not {tolerance}")
        held = {n: dict(pins[n]) for n in names if pins and pins.get(n)}
        fams = [pinned(load_family(n), held.get(n, {})) for n in names]
        huge = [f"{f.name} ({combinations(f):.3g})" for f in fams if not listable(f)]
        if huge:   # the replay lists every valid point: flash_wgmma's 2e12 were a kill by the OOM killer
            raise EvoError(f"{', '.join(huge)}: more points than the {LIST_UP_TO:,} bench-samplers can list "
                           "(its replay walks a family's whole valid space): pin genes (--pin) for a sub-space")
        cases = list(cases) if cases is not None else rec.common_shapes()
        if not cases:
            raise EvoError(f"{rec.name}: no FAST case is covered by every timed record")
        table = outcomes(rec, cases, baseline)
        points = [(record_key(c.family, c.p), c) for f in fams for c in all_candidates(f)]
        scores = {k: v for k, _ in points if not isinstance(v := table.get(k, UNMEASURED), str)}
        if not scores:
            raise EvoError(f"{rec.name} has no point of {', '.join(names)} timed on all of "
                           f"{', '.join(s.tag for s in cases)}")
        best = max(scores.values())
        targets = frozenset(k for k, v in scores.items() if v >= best * (1 - tolerance))
        return cls(rec, fams, cases, baseline, tolerance, table, points, best, targets,
                   [make_candidate(f) for f in fams], held)

    @property
    def size(self) -> int:
        """Valid points of the selected families: the most evaluations any run can spend."""
        return len(self.points)

    def outcome(self, key: str) -> Outcome:
        return self.table.get(key, UNMEASURED)

    def describe_target(self) -> str:
        if self.tolerance == 0:
            return f"the recording's best point (x{self.best:.3f})"
        return (f"any point within {self.tolerance:.1%} of the recording's best x{self.best:.3f} "
                f"({len(self.targets)} point(s))")


def section_families(rec: Recording, families: Sequence[str] | None = None) -> list[str]:
    """The families benchmarked on ``rec``: ``families`` (each must have records in it), or
    every family it holds."""
    recorded = sorted({r.family for r in rec.records.values()})
    names = list(families) if families else recorded
    missing = [n for n in names if n not in recorded]
    if missing:
        raise EvoError(f"{rec.name} holds no record of {', '.join(missing)}; it holds {', '.join(recorded)}")
    return names


@dataclass
class Tally:
    """The replay rule over one run's proposals (see module docstring).

    ``curve[i]``: the best objective found after ``i + 1`` evaluations (``-inf`` before the first
    timed point), for the plot of best-so-far against evaluations."""

    problem: Problem
    budget: int
    evaluations: int = 0
    proposals: int = 0
    reached: int | None = None
    curve: list[float] = field(default_factory=list)
    _seen: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._valid = {k for k, _ in self.problem.points}

    @property
    def done(self) -> bool:
        """Reached the target, or spent the evaluation budget."""
        return self.reached is not None or self.evaluations >= self.budget

    def propose(self, key: str | None) -> Outcome | None:
        """Count one proposal (``key`` None: not a valid point). Returns the outcome of a new
        evaluation; None when the proposal was free (invalid or a repeat) or the run is done."""
        self.proposals += 1
        if key is None or key not in self._valid or key in self._seen or self.done:
            return None
        self._seen.add(key)
        self.evaluations += 1
        out = self.problem.outcome(key)
        last = self.curve[-1] if self.curve else -math.inf
        self.curve.append(max(last, out) if isinstance(out, float) else last)
        if key in self.problem.targets:
            self.reached = self.evaluations
        return out

    def seen(self, key: str) -> bool:
        return key in self._seen


def candidate_key(fam: Family, params: Mapping[str, object]) -> str | None:
    """Record key of a family's point, or None when the point is not valid."""
    try:
        c = make_candidate(fam, params)  # type: ignore[arg-type]
    except InvalidCandidate:
        return None
    return record_key(c.family, c.p)

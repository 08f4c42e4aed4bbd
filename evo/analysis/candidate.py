"""One candidate as ``evo show`` presents it: the stored record, the run that first saw it, its
timings and scores, its parents and children with the move between them and its effect, the
source it was built from, and all of it as one JSON document (``evo show --json``, the report's
node details).

Scores and effects are computed here, once, for every reader: the terminal, the JSON document
and the report print the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evo.analysis.jsondoc import RECORD_SCHEMA, build_doc, clean, evaluation_doc, scores, timing_doc
from evo.analysis.lineage import mutation_text
from evo.errors import EvoError
from evo.results import Status, Timing
from evo.scoring import edge_effect, latest, score, speedups
from evo.store import CandidateRecord, CandidateView, RunView, Store, short_id
from evo.toolchain.build import SOURCE, cache_dir
from evo.vocab import EVO, replayed_on


@dataclass(frozen=True)
class Relative:
    """A parent or child of the candidate: the move between them (``kind``, and ``mutation``:
    old -> new per parameter), its effect (child score / parent score; None unless both were
    timed on one device) and the other candidate's status (None when it is not stored)."""

    role: str  # "parent" or "child"
    id: str
    kind: str
    mutation: dict[str, tuple[Any, Any]]
    effect: float | None
    status: Status | None

    @property
    def move_text(self) -> str:
        return mutation_text(self.mutation)

    def document(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "mutation": {k: list(v) for k, v in self.mutation.items()},
                "effect": self.effect, "status": self.status.value if self.status else None}


@dataclass(frozen=True)
class CandidateReport:
    """Everything stored about one candidate, with its scores against ``baseline``.

    ``timings`` are those of the device of its newest timed evaluation (:meth:`Store.timings_for
    <evo.store.Store.timings_for>`); :attr:`latest` keeps the newest per case and backend, the
    ones speedups and scores are computed from.
    """

    record: CandidateRecord
    baseline: str
    first_run: RunView | None
    timings: list[Timing]
    relatives: list[Relative]

    @property
    def candidate(self) -> CandidateView:
        return self.record.candidate

    @property
    def replayed_on(self) -> str | None:
        """The GPU a recorded sweep measured this candidate on, when every evaluation of it was
        replayed: its GREEN checks ran there, when the sweep was recorded, and none is stored."""
        gpus = [replayed_on(e.device) for e in self.record.evaluations]
        return gpus[0] if gpus and all(gpus) else None

    @property
    def latest(self) -> dict[tuple[str, str], Timing]:
        """The newest timing per (case tag, backend)."""
        return latest(self.timings)

    @property
    def backends(self) -> list[str]:
        """The SDPA backends timed beside the candidate, by name."""
        return sorted({b for _, b in self.latest if b != EVO})

    @property
    def speedups(self) -> dict[str, dict[str, float]]:
        """Per SDPA backend timed beside it: case tag -> that backend's time / the candidate's."""
        return {b: speedups(self.timings, b) for b in self.backends}

    @property
    def score(self) -> float | None:
        """The geometric-mean speedup against the baseline (None: not timed beside it)."""
        try:
            return score(self.timings, self.baseline)
        except EvoError:
            return None

    @property
    def scored_cases(self) -> int:
        """How many cases :attr:`score` is the geometric mean of."""
        return len(speedups(self.timings, self.baseline))

    def source(self) -> str:
        """The CUDA source it was built from: the build cache's copy, else rendered again from
        today's templates, which must render it to the stored hash."""
        c = self.candidate
        cached = cache_dir(c.id) / SOURCE
        if cached.is_file():
            return cached.read_text()
        if c.status is Status.INVALID:
            raise EvoError(f"{short_id(c.id)} is invalid and was never rendered: {c.reason}")
        rendered = c.rendered()
        if rendered.source_hash != c.source_hash:
            raise EvoError(f"{short_id(c.id)} is not in the build cache and today's {c.family} templates render it "
                           f"differently (hash {rendered.source_hash[:12]}, stored {(c.source_hash or '?')[:12]})")
        return rendered.source

    def document(self, *, samples: bool = True, logs: bool = True) -> dict[str, Any]:
        """Plain JSON-ready data (schema ``evo.candidate/1``); ``samples`` keeps every timing's raw
        samples, ``logs`` the first lines of each compile log."""
        c, run = self.candidate, self.first_run
        return clean({
            "schema": RECORD_SCHEMA,
            "id": c.id, "family": c.family, "family_version": c.family_version, "label": c.label,
            "params": dict(c.params), "status": c.status.value, "reason": c.reason, "arch": c.arch,
            "flags": list(c.flags), "source_hash": c.source_hash, "created": c.created,
            "first_run": None if run is None else {"id": run.id, "command": run.command, "study": run.study,
                                                   "host": run.host, "git_sha": run.git_sha},
            "builds": [build_doc(b, logs) for b in self.record.builds],
            "evaluations": [evaluation_doc(e, samples) for e in self.record.evaluations],
            "timings": [timing_doc(t, samples) for t in self.latest.values()],
            "baseline": self.baseline,
            "speedups": self.speedups,
            "scores": scores(self.timings),
            "parents": [r.document() for r in self.relatives if r.role == "parent"],
            "children": [r.document() for r in self.relatives if r.role == "child"],
            "trials": [{"study": t.study, "number": t.number, "state": t.state, "value": t.value, "run_id": t.run_id}
                       for t in self.record.trials],
        })


def describe(store: Store, rec: CandidateRecord, baseline: str) -> CandidateReport:
    """The report of a stored record: its first run, timings and relatives read from ``store``."""
    c = rec.candidate
    run = store.get_run(c.first_run_id) if c.first_run_id is not None else None
    return CandidateReport(rec, baseline, run, store.timings_for(c.id), relatives(store, rec, baseline))


def relatives(store: Store, rec: CandidateRecord, baseline: str) -> list[Relative]:
    """Parents, then children, each with the move and its measured effect."""
    edges = [("parent", e, e.parent_id) for e in rec.parents] + [("child", e, e.child_id) for e in rec.children]
    others = [oid for _, _, oid in edges]
    statuses = store.statuses(others)
    timed = store.latest_timings([rec.candidate.id, *others])
    out = []
    for role, e, oid in edges:
        parent, child = timed.get(e.parent_id), timed.get(e.child_id)
        effect = (edge_effect(parent[1], child[1], baseline)
                  if parent and child and parent[0] == child[0] else None)
        out.append(Relative(role, oid, e.kind, dict(e.mutation), effect, statuses.get(oid)))
    return out

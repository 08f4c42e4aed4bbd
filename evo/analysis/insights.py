"""Insights: statistics over lineage edges, builds and trials, stored with evidence and support.

- Moves: for every parameter move ``(param, old -> new)`` of an edge whose parent and child
  were both timed on the same device, the edge's effect (child score / parent score,
  :func:`evo.scoring.edge_effect`) over all shared cases and per shape bucket (head dim x
  causal); per move: count, median effect, win rate, and how many children failed. An edge
  that changes two parameters counts for both moves.
- Resources: per family, parameter and value, how many built candidates were rejected for
  spills, shared memory over the limit, or registers, and the rejection rate.
- Importances: Optuna's parameter importances over one family's completed trials of a study
  (skipped, with the reason, when there are too few); over every study when none is named.

Each becomes an insights-table row (kind ``move`` / ``resource`` / ``importance``) whose
evidence lists the edges (``parent>child``) or candidates behind it.
"""

from __future__ import annotations

import collections
import math
import statistics
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import optuna

from evo.analysis.jsondoc import INSIGHTS_SCHEMA, clean
from evo.errors import EvoError
from evo.family.manifest import Value
from evo.paths import default_db_url
from evo.results import Shape, Status, Timing
from evo.scoring import edge_effect, geomean
from evo.search.study import read_storage
from evo.store import NewInsight, Store
from evo.store.views import CandidateView, EdgeView
from evo.vocab import COMPILED, DEFAULT_BASELINE, FAILED, value_text

ALL = "all"
MIN_TRIALS_FOR_IMPORTANCE = 10


@dataclass
class MoveStat:
    """The measured effect of one move (a parameter changed from ``old`` to ``new``) in one family
    and bucket: child score / parent score per edge, and how many children of the move failed."""

    family: str
    param: str
    old: Value
    new: Value
    bucket: str
    effects: list[float] = field(default_factory=list)
    failed: int = 0
    evidence: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.effects)

    @property
    def median_effect(self) -> float:
        return statistics.median(self.effects) if self.effects else math.nan

    @property
    def win_rate(self) -> float:
        return sum(e > 1 for e in self.effects) / len(self.effects) if self.effects else math.nan

    @property
    def move_text(self) -> str:
        return f"{self.param} {value_text(self.old)}->{value_text(self.new)}"

    def text(self) -> str:
        where = "" if self.bucket == ALL else f" on {self.bucket}"
        if not self.effects:
            return f"{self.family} {self.move_text}: {self.failed} child(ren) failed, none timed"
        return (f"{self.family} {self.move_text}{where}: median x{self.median_effect:.3f}, n={self.n}, "
                f"{self.win_rate:.0%} wins" + (f", {self.failed} failed" if self.failed else ""))


@dataclass
class ResourceStat:
    """How often built candidates with ``param = value`` were rejected for resources (spills, or
    shared memory over the limit)."""

    family: str
    param: str
    value: Value
    built: int = 0
    spills: int = 0
    smem_over: int = 0
    registers: int = 0
    evidence: list[str] = field(default_factory=list)

    @property
    def rejected(self) -> int:
        return len(self.evidence)

    @property
    def rate(self) -> float:
        return self.rejected / self.built if self.built else 0.0

    def text(self) -> str:
        return (f"{self.family} {self.param}={value_text(self.value)}: {self.rejected}/{self.built} built rejected "
                f"({self.rate:.0%}; spills {self.spills}, smem over {self.smem_over}, registers {self.registers})")


@dataclass
class Importance:
    """One family's parameter importances over ``trials`` completed trials of ``study``, or why
    there are none."""

    family: str
    trials: int
    values: dict[str, float] = field(default_factory=dict)
    skipped: str = ""
    study: str = ""


@dataclass
class Report:
    """Everything ``evo insights`` shows: moves, resource failures and Optuna's importances, of
    ``study`` (every edge and study of the database when None), scored against ``baseline``.
    ``importances_note`` says why there are no importances, when there are none."""

    moves: list[MoveStat]
    resources: list[ResourceStat]
    importances: list[Importance]
    study: str | None = None
    baseline: str = DEFAULT_BASELINE
    importances_note: str = ""

    def document(self) -> dict[str, Any]:
        """Every row with its numbers and evidence, as plain data (schema ``evo.insights/1``)."""
        return clean({
            "schema": INSIGHTS_SCHEMA,
            "study": self.study,
            "baseline": self.baseline,
            "moves": [{"family": m.family, "param": m.param, "old": m.old, "new": m.new, "bucket": m.bucket,
                       "n": m.n, "median_effect": m.median_effect, "win_rate": m.win_rate, "failed": m.failed,
                       "effects": list(m.effects), "text": m.text(), "evidence": list(m.evidence)}
                      for m in self.moves],
            "resources": [{"family": r.family, "param": r.param, "value": r.value, "built": r.built,
                           "rejected": r.rejected, "spills": r.spills, "smem_over": r.smem_over,
                           "registers": r.registers, "rate": r.rate, "text": r.text(),
                           "evidence": list(r.evidence)}
                          for r in self.resources],
            "importances": [{"family": i.family, "trials": i.trials, "values": dict(i.values), "skipped": i.skipped,
                             "study": i.study}
                            for i in self.importances],
            "importances_note": self.importances_note,
        })


def bucket_of(s: Shape) -> str:
    return f"d{s.D}-{'causal' if s.causal else 'full'}"


def move_stats(edges: Iterable[EdgeView], cands: dict[str, CandidateView],
               timings: dict[str, tuple[str, list[Timing]]], baseline: str) -> list[MoveStat]:
    """Per (family, move, bucket) statistics over ``edges`` (deduplicated by parent, child)."""
    stats: dict[tuple, MoveStat] = {}
    seen: set[tuple[str, str]] = set()
    for e in edges:
        if (e.parent_id, e.child_id) in seen or e.child_id not in cands:
            continue
        seen.add((e.parent_id, e.child_id))
        child, ref = cands[e.child_id], f"{e.parent_id[:12]}>{e.child_id[:12]}"
        effects: dict[str, float] = {}
        pt, ct = timings.get(e.parent_id), timings.get(e.child_id)
        if pt and ct and pt[0] == ct[0]:
            shared = {t.shape.tag: t.shape for t in pt[1]}.keys() & {t.shape.tag: t.shape for t in ct[1]}.keys()
            shapes = [t.shape for t in ct[1] if t.shape.tag in shared and t.backend == "evo"]
            for bucket in [ALL, *sorted({bucket_of(s) for s in shapes})]:
                sel = shapes if bucket == ALL else [s for s in shapes if bucket_of(s) == bucket]
                eff = edge_effect(pt[1], ct[1], baseline, sel) if sel else None
                if eff is not None:
                    effects[bucket] = eff
        failed = child.status in FAILED
        for param, (old, new) in e.mutation.items():
            if failed:
                st = stats.setdefault((child.family, param, old, new, ALL),
                                      MoveStat(child.family, param, old, new, ALL))
                st.failed += 1
                st.evidence.append(ref)
            for bucket, eff in effects.items():
                st = stats.setdefault((child.family, param, old, new, bucket),
                                      MoveStat(child.family, param, old, new, bucket))
                st.effects.append(eff)
                st.evidence.append(ref)
    return sorted(stats.values(), key=lambda m: (-(m.n + m.failed), m.family, m.param, str(m.old),
                                                 str(m.new), m.bucket))


def resource_stats(cands: Iterable[CandidateView]) -> list[ResourceStat]:
    """Per (family, param, value): built candidates and those rejected for each resource."""
    stats: dict[tuple, ResourceStat] = {}
    for c in cands:
        if c.status not in COMPILED:
            continue
        rejected = c.status is Status.RESOURCE_REJECTED
        for param, value in c.params.items():
            st = stats.setdefault((c.family, param, value), ResourceStat(c.family, param, value))
            st.built += 1
            if rejected:
                st.spills += "spills" in c.reason
                st.smem_over += "shared memory" in c.reason
                st.registers += "registers" in c.reason
                st.evidence.append(c.id[:12])
    return sorted(stats.values(), key=lambda r: (-r.rate, -r.built, r.family, r.param, str(r.value)))


def importances(study: optuna.Study) -> list[Importance]:
    """Per family: Optuna parameter importances over its completed trials (or why not)."""
    out: list[Importance] = []
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    by_family: dict[str, list[optuna.trial.FrozenTrial]] = collections.defaultdict(list)
    for t in complete:
        if "family" in t.params:
            by_family[t.params["family"]].append(t)
    for fam, trials in sorted(by_family.items()):
        prefix = fam + "."
        varying = sorted({k for t in trials for k in t.params if k.startswith(prefix)
                          and len({u.params.get(k) for u in trials}) > 1})
        if len(trials) < MIN_TRIALS_FOR_IMPORTANCE or not varying:
            out.append(Importance(fam, len(trials), skipped=f"too few completed trials ({len(trials)}; "
                                  f"need {MIN_TRIALS_FOR_IMPORTANCE} with varying parameters)",
                                  study=study.study_name))
            continue
        sub = optuna.create_study(directions=study.directions)
        sub.add_trials(trials)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            imp = optuna.importance.get_param_importances(
                sub, params=varying, target=lambda t: geomean(t.values))
        out.append(Importance(fam, len(trials), {k[len(prefix):]: float(v) for k, v in imp.items()},
                              study=study.study_name))
    return out


def compute(store: Store, study: str | None = None, *, baseline: str = DEFAULT_BASELINE,
            db_url: str | None = None) -> Report:
    """All insights for one study, or for the whole database (its every edge and build, and the
    importances of each of its studies)."""
    cands = {c.id: c for c in store.find_candidates(study=study)}
    edges = store.edges(study)
    ids = {i for e in edges for i in (e.parent_id, e.child_id)}
    missing = ids - cands.keys()
    if missing:
        cands |= {c.id: c for c in store.find_candidates() if c.id in missing}
    timings = store.latest_timings([i for i in ids if cands.get(i) and cands[i].status is Status.FAST])
    imps, note = study_importances(db_url or default_db_url(), study)
    return Report(move_stats(edges, cands, timings, baseline), resource_stats(cands.values()), imps, study,
                  baseline, note)


def study_importances(url: str, study: str | None) -> tuple[list[Importance], str]:
    """The importances of ``study``'s families (of every study's, when None) and, when there are
    no studies to take them from, why."""
    rdb = read_storage(url)
    names = optuna.get_all_study_names(rdb) if rdb is not None else []
    if study is not None:
        if study not in names:
            raise EvoError(f"no study {study!r} in the database")
        names = [study]
    if rdb is None or not names:
        return [], "no study in the database: importances are computed over the trials of a search"
    out: list[Importance] = []
    for name in names:
        out += importances(optuna.load_study(study_name=name, storage=rdb))
    return out, ""


def save(store: Store, study: str | None, report: Report) -> None:
    """Replace the study's stored insights with this report's."""
    rows = [NewInsight("move", f"{m.family}:{m.param}:{value_text(m.old)}->{value_text(m.new)}:{m.bucket}", m.text(),
                       {"median_effect": None if math.isnan(m.median_effect) else m.median_effect,
                        "win_rate": None if math.isnan(m.win_rate) else m.win_rate,
                        "failed": m.failed, "bucket": m.bucket, "param": m.param,
                        "old": m.old, "new": m.new, "family": m.family},
                       m.n + m.failed, m.evidence)
            for m in report.moves]
    rows += [NewInsight("resource", f"{r.family}:{r.param}={value_text(r.value)}", r.text(),
                        {"built": r.built, "spills": r.spills, "smem_over": r.smem_over,
                         "registers": r.registers, "rate": r.rate}, r.built, r.evidence)
             for r in report.resources]
    for imp in report.importances:  # over the whole database, each study's importances keep its name
        scope, of = ("", "") if report.study is not None else (f"{imp.study}:", f" of study {imp.study}")
        rows += [NewInsight("importance", f"{scope}{imp.family}:{p}", f"{imp.family} {p}: importance {v:.3f} "
                            f"over {imp.trials} trials{of}", {"importance": v}, imp.trials, [])
                 for p, v in imp.values.items()]
    store.replace_insights(study, rows)


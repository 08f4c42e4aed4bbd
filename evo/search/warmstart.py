"""Start a new study from the best candidates of earlier ones (``evo run --start-from``).

A study refuses to continue once a manifest's domain has changed (its recorded distributions
would no longer match), so a gene that gains a value can only be searched by a new study. Without
help that study starts again from the manifest defaults and spends its first tens of trials
re-finding what the earlier study knew. ``--start-from`` gives it that knowledge the way Optuna's
``enqueue_trial`` and Kernel Tuner's ``x0`` do: the best ``top`` shippable candidates of each
source study (by the source's own objective, each source ranked on its own, since values of two
studies need not be comparable), read through today's manifests, are enqueued as the new
study's first trials, and after them each bucket's leader (the best on one head dim x causal
bucket's FAST cases, which promote would route that bucket to) where it is not among them.
Nothing is carried over but the parameters: each imported trial is
answered from the store when the same build was already measured on this kind of device (same
rendered source), and built, gated and timed like any other trial when it was not (a template
that changed since). The evolutionary samplers then take them as elites.

A source may also be one stored candidate, named by its id or a unique prefix of it (8 to 64
hex digits): its stored parameters are read and enqueued like a study's best, whatever its
status (it was asked for by name), and counted as a source of its own. An item that names a
study is that study, so a study whose name looks like an id is never taken for a candidate; an
item that names neither, or an id prefix that several candidates share, is refused.

A source candidate that today's manifest rejects (a value left the domain, a constraint that
tightened), or one named by id whose family the study does not search, is skipped and counted.
Imports happen once, when the study has no trials yet; the study records what it imported
(study user attr ``evo:started_from``) and each imported trial names its source (user attr
``evo:imported_from``: study, trial number and candidate id; only the id for a candidate named
by id). Its ancestry is the source's: an import that renders as it did is the same stored
candidate, with the edges it had; one that renders differently now (a new id) gets one edge of
kind ``import`` from the candidate it was.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from evo.errors import EvoError, InvalidCandidate
from evo.vocab import DEFAULT_TOP
from evo.family.manifest import Family, Value
from evo.store.recording import record_key
from evo.search import objective
from evo.search.objective import Bucket
from evo.search.params import CANDIDATE, IMPORTED_FROM, SPEEDUPS, from_trial_params, trial_params
from evo.search.sampler_evo import fitness, shippable
from evo.family.space import Candidate, make_candidate
from evo.store import CandidateView, Store, short_id
from evo.scoring import geomean
from evo.gpu.suites import fast_cases_by_tag

STARTED_FROM = "evo:started_from"
CANDIDATE_ID = re.compile(r"[0-9a-f]{8,64}", re.IGNORECASE)  # an item naming no study is this: a candidate id prefix


@dataclass(frozen=True)
class Source:
    """What one ``--start-from`` item names: a study, or one stored candidate (its row)."""

    label: str                              # the study's name, or ``candidate`` and the candidate's short id
    candidate: CandidateView | None = None


@dataclass
class Imported:
    """What :func:`start_from` did: trials enqueued per source, and candidates it skipped."""

    enqueued: dict[str, int] = field(default_factory=dict)
    invalid: int = 0        # rejected by today's manifest
    duplicates: int = 0     # already taken from an earlier source
    leaders: int = 0        # bucket leaders enqueued beyond the top ones
    elsewhere: int = 0      # candidates named by id whose family this study does not search
    already: bool = False   # the study had started from these sources before: nothing done

    def summary(self) -> str:
        if self.already:
            return "started from " + ", ".join(self.enqueued) + " before: nothing more imported"
        got = ", ".join(f"{n} from {s}" for s, n in self.enqueued.items())
        got += f", and {self.leaders} bucket leader{'s' if self.leaders != 1 else ''} not among them" if self.leaders else ""
        extra = [f"{self.invalid} that today's manifests reject"] if self.invalid else []
        extra += [f"{self.duplicates} already imported"] if self.duplicates else []
        extra += [f"{self.elsewhere} of a family this study does not search"] if self.elsewhere else []
        return f"enqueued {got}" + (f" (skipped {' and '.join(extra)})" if extra else "")


def bucket_fitness(bucket: Bucket) -> Callable[[FrozenTrial], float | None]:
    """A trial's mean log speedup over the FAST cases of one (head dim, causal) bucket (its
    ``speedups`` user attr), None when it was not timed there: whom promote would route that
    bucket to, where the study's own objective may be one mean over every bucket."""
    shapes = fast_cases_by_tag()

    def fit(t: FrozenTrial) -> float | None:
        mine = [v for tag, v in t.user_attrs.get(SPEEDUPS, {}).items()
                if tag in shapes and (shapes[tag].D, shapes[tag].causal) == bucket and v > 0]
        return math.log(geomean(mine)) if fitness(t) is not None and mine else None

    return fit


def buckets_timed(trials: Sequence[FrozenTrial]) -> list[Bucket]:
    """The (head dim, causal) buckets a study's trials were timed on."""
    shapes = fast_cases_by_tag()
    return objective.buckets([shapes[tag] for t in trials for tag in t.user_attrs.get(SPEEDUPS, {})
                              if tag in shapes])


def best_trials(trials: Sequence[FrozenTrial], families: Sequence[Family],
                score: Callable[[FrozenTrial], float | None] = fitness) -> list[tuple[FrozenTrial, dict[str, Value]]]:
    """A source study's completed, shippable trials of ``families``, best first by ``score``
    (default: the study's objective; earlier on ties), each with its Optuna params read through
    today's manifest; one per candidate. A trial whose candidate today's manifest rejects comes
    with an empty dict."""
    by_name = {f.name: f for f in families}
    scored = sorted(((fit, t) for t in trials if (fit := score(t)) is not None and shippable(t)),
                    key=lambda x: (-x[0], x[1].number))
    out: list[tuple[FrozenTrial, dict[str, Value]]] = []
    seen: set[str] = set()
    for _, t in scored:
        got = from_trial_params(t.params)
        if got is None or got[0] not in by_name:
            continue
        cand = todays_candidate(by_name[got[0]], got[1])
        if cand is None:
            out.append((t, {}))
            continue
        key = record_key(cand.family, cand.p)
        if key not in seen:
            seen.add(key)
            out.append((t, trial_params(cand)))
    return out


def todays_candidate(family: Family, params: Mapping[str, Value]) -> Candidate | None:
    """A stored candidate's ``params`` read through today's manifest of ``family``: genes the
    manifest dropped left out, genes it added at their defaults; None when it rejects them."""
    try:
        return make_candidate(family, {k: v for k, v in params.items() if k in family.params})
    except InvalidCandidate:
        return None


def check_sources(storage: optuna.storages.BaseStorage, store: Store, name: str, sources: Sequence[str],
                  top: int) -> list[Source]:
    """What each of ``sources`` names (see the module docstring), refusing, before the study is
    created, one that cannot seed study ``name``: unknown, an ambiguous id prefix, or named twice."""
    if top < 1:
        raise EvoError("--start-top must be at least 1")
    if name in sources:
        raise EvoError(f"study {name!r} cannot start from itself")
    names = {s.study_name for s in storage.get_all_studies()}
    missing = [s for s in sources if s not in names and not CANDIDATE_ID.fullmatch(s)]
    if missing:
        raise EvoError(f"no study named {', '.join(map(repr, missing))} in this database")
    out = [Source(s) if s in names else _stored(store, s) for s in sources]
    labels = [s.label for s in out]
    twice = [label for i, label in enumerate(labels) if label in labels[:i]]
    if twice:
        raise EvoError(f"--start-from names {twice[0]} twice")
    return out


def _stored(store: Store, item: str) -> Source:
    """The one stored candidate whose id starts with ``item`` (an item that names no study)."""
    try:
        row = store.get(item).candidate
    except EvoError as e:
        raise EvoError(f"--start-from {item!r} names no study, and {e}") from None
    return Source("candidate " + short_id(row.id), row)


def start_from(study: optuna.Study, storage: optuna.storages.BaseStorage, named: Sequence[Source],
               families: Sequence[Family], top: int = DEFAULT_TOP) -> Imported:
    """Enqueue the best ``top`` candidates of each study in ``named`` (what :func:`check_sources`
    resolved, before the study was created), and each candidate it names by id, as ``study``'s
    first trials (see the module docstring). Refused, with the reason, when the study already has
    trials or started from other sources."""
    before = study.user_attrs.get(STARTED_FROM)
    if before is not None:
        if sorted(before.get("sources", {})) != sorted(s.label for s in named):
            raise EvoError(f"study {study.study_name!r} started from {', '.join(before.get('sources', {}))}; "
                           f"leave --start-from out to continue it")
        return Imported(enqueued=dict(before["sources"]), already=True)
    if study.get_trials(deepcopy=False):
        raise EvoError(f"study {study.study_name!r} already has trials: --start-from only seeds a new study")
    done = Imported()
    taken: set[str] = set()
    for src in named:
        if src.candidate is None:
            done.enqueued[src.label] = _import_study(study, storage, src.label, families, top, taken, done)
        else:
            done.enqueued[src.label] = _import_candidate(study, src.candidate, families, taken, done)
    study.set_user_attr(STARTED_FROM, {"sources": done.enqueued, "top": top, "bucket_leaders": done.leaders})
    return done


def _import_study(study: optuna.Study, storage: optuna.storages.BaseStorage, src: str, families: Sequence[Family],
                  top: int, taken: set[str], done: Imported) -> int:
    """Enqueue study ``src``'s best ``top``, then each bucket's leader not among them (counted in
    ``done.leaders``); how many of the best were enqueued."""
    trials = optuna.load_study(study_name=src, storage=storage).get_trials(deepcopy=False)
    n = _enqueue(study, _origins(src, best_trials(trials, families)), top, taken, done)
    for b in buckets_timed(trials):
        done.leaders += _enqueue(study, _origins(src, best_trials(trials, families, bucket_fitness(b))), 1, taken,
                                 done, objective.bucket_name(b))
    return n


def _import_candidate(study: optuna.Study, row: CandidateView, families: Sequence[Family], taken: set[str],
                      done: Imported) -> int:
    """Enqueue one stored candidate's parameters, read through today's manifest (a family
    ``families`` lacks counted in ``done`` as skipped); how many were enqueued (0 or 1)."""
    fam = next((f for f in families if f.name == row.family), None)
    if fam is None:
        done.elsewhere += 1
        return 0
    cand = todays_candidate(fam, row.params)
    return _enqueue(study, [({CANDIDATE: row.id}, trial_params(cand) if cand else {})], 1, taken, done)


def _origins(src: str, ranked: Sequence[tuple[FrozenTrial, dict[str, Value]]]
             ) -> list[tuple[dict[str, Any], dict[str, Value]]]:
    """``ranked`` (study ``src``'s trials) with each trial as where its import comes from: study,
    trial number and candidate id."""
    return [({"study": src, "trial": t.number} | _candidate_of(t), params) for t, params in ranked]


def _candidate_of(t: FrozenTrial) -> dict[str, Any]:
    """The candidate id of trial ``t`` as a user attr, none when it has none."""
    return {CANDIDATE: t.user_attrs[CANDIDATE]} if CANDIDATE in t.user_attrs else {}


def _enqueue(study: optuna.Study, ranked: Sequence[tuple[dict[str, Any], dict[str, Value]]], limit: int,
             taken: set[str], done: Imported, bucket: str | None = None) -> int:
    """Enqueue the first ``limit`` of ``ranked`` (each: where from, and params) that today's
    manifest accepts and no earlier import took (counted in ``done`` as skipped); how many were
    enqueued."""
    n = 0
    for origin, params in ranked:
        if n >= limit:
            break
        if not params:
            done.invalid += 1
            continue
        key = record_key(*from_trial_params(params))  # type: ignore[misc]
        if key in taken:
            if bucket is not None:  # the bucket's best is imported already
                break
            done.duplicates += 1
            continue
        taken.add(key)
        study.enqueue_trial(params, user_attrs={IMPORTED_FROM: origin | ({"bucket": bucket} if bucket else {})},
                            skip_if_exists=False)
        n += 1
    return n

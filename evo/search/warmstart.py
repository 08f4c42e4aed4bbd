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

A source candidate that today's manifest rejects (a value left the domain, a constraint that
tightened) is skipped and counted. Imports happen once, when the study has no trials yet; the
study records what it imported (study user attr ``evo:started_from``) and each imported trial
names its source (user attr ``evo:imported_from``: study, trial number and candidate id). Its
ancestry is the source study's: an import that renders as it did is the same stored candidate,
with the edges it had; one that renders differently now (a new id) gets one edge of kind
``import`` from the candidate it was.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

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
from evo.family.space import make_candidate
from evo.scoring import geomean
from evo.gpu.suites import fast_cases_by_tag

STARTED_FROM = "evo:started_from"


@dataclass
class Imported:
    """What :func:`start_from` did: trials enqueued per source, and candidates it skipped."""

    enqueued: dict[str, int] = field(default_factory=dict)
    invalid: int = 0        # rejected by today's manifest
    duplicates: int = 0     # already taken from an earlier source
    leaders: int = 0        # bucket leaders enqueued beyond the top ones
    already: bool = False   # the study had started from these sources before: nothing done

    def summary(self) -> str:
        if self.already:
            return "started from " + ", ".join(self.enqueued) + " before: nothing more imported"
        got = ", ".join(f"{n} from {s}" for s, n in self.enqueued.items())
        got += f", and {self.leaders} bucket leader{'s' if self.leaders != 1 else ''} not among them" if self.leaders else ""
        extra = [f"{self.invalid} that today's manifests reject"] if self.invalid else []
        extra += [f"{self.duplicates} already imported"] if self.duplicates else []
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
        fam = by_name[got[0]]
        try:
            cand = make_candidate(fam, {k: v for k, v in got[1].items() if k in fam.params})
        except InvalidCandidate:
            out.append((t, {}))
            continue
        key = record_key(cand.family, cand.p)
        if key not in seen:
            seen.add(key)
            out.append((t, trial_params(cand)))
    return out


def check_sources(storage: optuna.storages.BaseStorage, name: str, sources: Sequence[str], top: int) -> None:
    """Refuse, before the study is created, sources that cannot seed study ``name``."""
    if top < 1:
        raise EvoError("--start-top must be at least 1")
    if name in sources:
        raise EvoError(f"study {name!r} cannot start from itself")
    names = {s.study_name for s in storage.get_all_studies()}
    missing = [s for s in sources if s not in names]
    if missing:
        raise EvoError(f"no study named {', '.join(map(repr, missing))} in this database")


def start_from(study: optuna.Study, storage: optuna.storages.BaseStorage, sources: Sequence[str],
               families: Sequence[Family], top: int = DEFAULT_TOP) -> Imported:
    """Enqueue the best ``top`` candidates of each study in ``sources`` as ``study``'s first
    trials (see the module docstring). Refused, with the reason, when the study already has
    trials or started from other sources (:func:`check_sources` comes first)."""
    check_sources(storage, study.study_name, sources, top)
    before = study.user_attrs.get(STARTED_FROM)
    if before is not None:
        if sorted(before.get("sources", {})) != sorted(sources):
            raise EvoError(f"study {study.study_name!r} started from {', '.join(before.get('sources', {}))}; "
                           f"leave --start-from out to continue it")
        return Imported(enqueued=dict(before["sources"]), already=True)
    if study.get_trials(deepcopy=False):
        raise EvoError(f"study {study.study_name!r} already has trials: --start-from only seeds a new study")
    done = Imported()
    taken: set[str] = set()
    for src in sources:
        trials = optuna.load_study(study_name=src, storage=storage).get_trials(deepcopy=False)
        n = _enqueue(study, src, best_trials(trials, families), top, taken, done)
        for b in buckets_timed(trials):
            done.leaders += _enqueue(study, src, best_trials(trials, families, bucket_fitness(b)), 1, taken, done,
                                     objective.bucket_name(b))
        done.enqueued[src] = n
    study.set_user_attr(STARTED_FROM, {"sources": done.enqueued, "top": top, "bucket_leaders": done.leaders})
    return done


def _enqueue(study: optuna.Study, src: str, ranked: Sequence[tuple[FrozenTrial, dict[str, Value]]], limit: int,
             taken: set[str], done: Imported, bucket: str | None = None) -> int:
    """Enqueue the first ``limit`` of ``ranked`` that today's manifest accepts and no earlier
    import took (counted in ``done`` as skipped); how many were enqueued."""
    n = 0
    for t, params in ranked:
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
        origin = {"study": src, "trial": t.number} | ({CANDIDATE: t.user_attrs[CANDIDATE]}
                                                      if CANDIDATE in t.user_attrs else {})
        study.enqueue_trial(params, user_attrs={IMPORTED_FROM: origin | ({"bucket": bucket} if bucket else {})},
                            skip_if_exists=False)
        n += 1
    return n

"""``evo run`` without the terminal: pick the measurement source, settle the study's settings,
open store and study, run the search, record the run.

Source: ``--replay FILE``; else the GPU when one is visible; else the newest
``data/sweep-*.json.gz`` (said on one line); else build-only. The study's settings (families,
FAST cases, baseline, objective, source) are fixed when it is created; options left out when
continuing a study are taken from it (:mod:`evo.search.study`). Opening the database, Optuna's
storage and the study happens under :func:`~evo.store.engine.schema_lock`, so any number of
workers may start on one database at once. One call is one worker with (at most) one GPU;
:mod:`evo.search.fanout` runs one per GPU. On a GPU a run screens new candidates and prunes
them with :class:`~evo.search.pruner.EvoPruner` (or ``RunOptions.pruner``) unless
``RunOptions.screen`` is off (``evo run --full-only``: every candidate in full, as before rungs).
``RunOptions.pins`` (``--pin``) searches a sub-space: those genes held at one value each
(:func:`evo.family.space.pinned`); the pins are a setting of the study like the others, except
that a study created without pins has none, so a run that gives other pins than its study's is
refused.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.pruners import BasePruner, NopPruner

from evo import paths
from evo.toolchain.build import default_arch
from evo.errors import EvoError
from evo.family.manifest import Family, default_families, list_families, load_family
from evo.family.space import Pins, parse_pins, pin_families, pins_text
from evo.store.recording import Recording, load_recording, newest_recording
from evo.results import Shape
from evo.search import objective
from evo.search.evaluators import BuildOnlyEvaluator, Evaluator, GpuEvaluator, ReplayEvaluator
from evo.search.loop import Reporter, RunSummary, Search
from evo.search.params import check_compatible
from evo.search.pruner import EvoPruner
from evo.search.resume import Retry
from evo.search.samplers import make_sampler
from evo.search.samplers import require as require_sampler
from evo.search.study import GRACE_S, HEARTBEAT_S, merge_settings, open_study, storage, stored_settings
from evo.search.warmstart import DEFAULT_TOP, check_sources, start_from
from evo.store import Store, open_store
from evo.store.engine import ProcessLock, describe, normalize_url, safe_url, schema_lock
from evo.gpu.suites import fast_cases, fast_cases_by_tag
from evo.gpu.worker import DEFAULT_TARGET, gpu_count

DEFAULT_STUDY = {"gpu": "evo", "replay": "evo-replay", "build-only": "evo-build-only"}
FLAGS = {"source": "a measurement source", "families": "--families", "cases": "--cases",
         "baseline": "--baseline", "objective": "--objective"}


@dataclass
class RunOptions:
    """Everything ``evo run`` accepts (None: not given)."""

    trials: int = 100
    time_budget_s: float | None = None
    families: list[str] | None = None
    cases: list[str] | None = None
    sampler: str = "evo"
    seed: int | None = None
    db: str | None = None
    study: str | None = None
    replay: Path | None = None
    batch: int = 8
    arch: str | None = None
    baseline: str | None = None
    objective: str | None = None
    jobs: int | None = None
    heartbeat_s: int = HEARTBEAT_S
    grace_s: int = GRACE_S
    gpu: int | None = None      # the GPU this worker evaluates on (None: the first visible one)
    target: str | None = None   # the worker process's "module:function" (None: the GPU worker, if a GPU is visible)
    start_from: list[str] | None = None  # a new study's first trials: these studies' best (evo.search.warmstart)
    start_top: int = DEFAULT_TOP          # how many from each
    screen: bool = True                   # screen new candidates, the full protocol only for those kept (GPU only)
    pruner: BasePruner | None = None      # what decides after a screen (None: EvoPruner)
    pins: list[str] | None = None         # --pin GENE=VALUE / FAMILY.GENE=VALUE: a sub-space (None: the study's)
    screen_alone: bool = False            # a screen times its long cases with the candidate alone (evo.gpu.evaluate)


SEARCH_OPTIONS = {"quick": True, "first_failure": True}   # a search's worker requests, on either rung


def choose_evaluator(opts: RunOptions, note: Callable[[str], None]) -> Evaluator:
    """The measurement source for this run (see module docstring)."""
    if opts.replay is not None:
        if opts.target is not None:
            raise EvoError("a worker target measures; --replay measures nothing (leave one out)")
        return ReplayEvaluator(_replay(opts.replay, opts.arch))
    if opts.target is not None or gpu_count() > 0:
        return GpuEvaluator(opts.arch or default_arch(), opts.jobs, devices=[opts.gpu or 0],
                            options=SEARCH_OPTIONS | {"screen_full": not opts.screen_alone},
                            target=opts.target or DEFAULT_TARGET)
    found = newest_recording(paths.root() / "data")
    if found is not None:
        rec = _replay(found, opts.arch)
        note(f"no GPU: replaying {found.name} (measured on {rec.gpu}); pass --replay FILE to choose another")
        return ReplayEvaluator(rec)
    note("no GPU and no recording under data/: building and resource-checking only")
    return BuildOnlyEvaluator(opts.arch or default_arch(), opts.jobs)


def _replay(path: Path, arch: str | None) -> Recording:
    rec = load_recording(path)
    if arch is not None and rec.arch and arch != rec.arch:
        raise EvoError(f"{path.name} was recorded for {rec.arch}, not {arch}")
    return rec


def _families(names: Sequence[str] | None) -> list[str] | None:
    if names is None:
        return None
    out = [n.strip() for s in names for n in s.split(",") if n.strip()]
    for n in out:
        load_family(n)
    if not out:
        raise EvoError("--families is empty")
    return out


def _given_pins(opts: RunOptions) -> Pins | None:
    """``--pin`` parsed against the families in view (those ``--families`` names, else those the
    pins name) and tried on them, so that bad pins are refused before any file is made; None
    when not given."""
    if opts.pins is None:
        return None
    named = _families(opts.families)
    view = [load_family(n) for n in named] if named is not None else None
    pins = parse_pins(opts.pins, view)
    pin_families(view if view is not None else [load_family(n) for n in pins], pins)
    return pins


def _study_pins(name: str, stored: dict[str, Any] | None, given: Pins | None) -> Pins:
    """The pins of this run: the given ones (none: the study's); an existing study's must be
    the ones given (a study created without pins has none)."""
    if stored is None:
        return given or {}
    before: Pins = stored.get("pins") or {}
    if given is not None and given != before:
        raise EvoError(f"study {name!r} was run with --pin {pins_text(before) or '(none)'}, not "
                       f"{pins_text(given) or '(none)'}; leave --pin out to continue it, or use another --study")
    return before


def _case_pool(ev: Evaluator) -> list[Shape]:
    """Every FAST case a study may score: the recording's, or the suite's in each dtype."""
    if isinstance(ev, ReplayEvaluator):
        return ev.recording.shapes()
    return list(fast_cases_by_tag().values())


def _select_cases(ev: Evaluator, select: Sequence[str] | None) -> list[str] | None:
    """Tags of the selected FAST cases; in replay they must be ones the recording covers."""
    if select is None:
        return None
    chosen = fast_cases(list(select))
    pool = _case_pool(ev)
    missing = [s.tag for s in chosen if s not in pool]
    if missing:
        raise EvoError(f"the recording does not cover {', '.join(missing)}; it covers "
                       f"{', '.join(s.tag for s in pool)}")
    return [s.tag for s in chosen]


def _defaults(ev: Evaluator) -> dict[str, Any]:
    if isinstance(ev, ReplayEvaluator):
        recorded = {r.family for r in ev.recording.records.values()}
        families = [f for f in list_families() if f in recorded]
    else:  # seed families (search_default = false) only when --families names them
        families = default_families(ev.arch)
    cases = ev.recording.common_shapes() if isinstance(ev, ReplayEvaluator) else fast_cases()
    return {"families": families, "cases": [s.tag for s in cases],
            "baseline": objective.BASELINES[0], "objective": objective.OBJECTIVES[0]}


def settle(opts: RunOptions, ev: Evaluator, rdb: optuna.storages.BaseStorage
           ) -> tuple[str, dict[str, Any], list[Family], list[Shape]]:
    """Study name, settings, families and FAST cases for this run."""
    name = opts.study or DEFAULT_STUDY[ev.name]
    given = {"source": ev.name, "families": _families(opts.families), "cases": _select_cases(ev, opts.cases),
             "baseline": opts.baseline, "objective": opts.objective}
    stored = stored_settings(rdb, name)
    settings = merge_settings(name, stored, given, FLAGS)
    settings = {k: (settings.get(k) if settings.get(k) is not None else v) for k, v in
                (_defaults(ev) | {"source": ev.name}).items()}
    objective.check(settings["objective"], settings["baseline"])
    settings["pins"] = _study_pins(name, stored, _given_pins(opts))
    families = pin_families([load_family(f) for f in settings["families"]], settings["pins"])
    pool = {s.tag: s for s in _case_pool(ev)}
    gone = [t for t in settings["cases"] if t not in pool]
    if gone:
        raise EvoError(f"study {name!r} was scored on {', '.join(gone)}, which "
                       f"{'the recording' if isinstance(ev, ReplayEvaluator) else 'the FAST suite'} no longer has")
    if not families or not settings["cases"]:
        raise EvoError("nothing to search: no families or no FAST cases")
    return name, settings, families, [pool[t] for t in settings["cases"]]


def _check_served(families: Sequence[Family], cases: Sequence[Shape]) -> None:
    """Refuse FAST cases no family has a kernel for: every trial would lack their timings, and
    none could be scored (a run over acceptance/llm.toml's D=96 and D=256 cases scored nothing)."""
    unserved = [s for s in cases if not any(s.D in f.head_dims for f in families)]
    if unserved:
        raise EvoError(f"no family of this search ({', '.join(f.name for f in families)}) has a kernel for "
                       f"{', '.join(s.tag for s in unserved)} (head dim {', '.join(sorted({str(s.D) for s in unserved}))}): "
                       "leave them out of --cases")


def run(opts: RunOptions, reporter: Reporter, note: Callable[[str], None] | None = None,
        store: Store | None = None) -> RunSummary:
    """Run (or continue) a search; the run is recorded as done, interrupted or failed
    (:meth:`Store.recording <evo.store.Store.recording>`). Ctrl-C returns the summary so far
    with ``interrupted`` set (open trials are re-queued). ``store``: an open store on the same
    database to record in (left open); by default one is opened and closed here."""
    note = note or reporter.note
    if opts.trials < 1:
        raise EvoError("--trials must be at least 1")
    if opts.heartbeat_s < 1 or opts.grace_s <= opts.heartbeat_s:
        raise EvoError("the heartbeat must be at least 1 s and the grace period longer than the heartbeat")
    require_sampler(opts.sampler)
    _families(opts.families)  # bad input is refused before any file is made (settle checks it again)
    _given_pins(opts)
    if opts.cases:
        chosen = fast_cases(list(opts.cases))
        if opts.families:  # before any file is made
            _check_served([load_family(f) for f in _families(opts.families) or ()], chosen)
    url = normalize_url(opts.db or paths.default_db_url())
    ev = choose_evaluator(opts, note)
    try:
        _select_cases(ev, opts.cases)
    except EvoError:
        ev.close()
        raise
    ask_lock = ProcessLock(url, "ask")
    owned: Store | None = None
    try:
        retry = Retry()
        with schema_lock(url):  # workers starting together set the database and study up in turn
            if store is None:
                store = owned = open_store(url)
            rdb = storage(url, opts.heartbeat_s, opts.grace_s, retry)
            name, settings, families, cases = settle(opts, ev, rdb)
            named = check_sources(rdb, store, name, opts.start_from, opts.start_top) if opts.start_from else []
            kind = settings["objective"]
            if isinstance(ev, GpuEvaluator):
                ev.pair(settings["baseline"])
            kernels = {(s.D, s.dtype, s.causal) for s in cases}   # the sampler mutates only genes these read
            study = open_study(rdb, name, make_sampler(opts.sampler, families, opts.seed, kernels=kernels), settings,
                               ["maximize"] * len(objective.names(kind, cases)), objective.names(kind, cases),
                               pruner=(opts.pruner or EvoPruner()) if opts.screen else NopPruner())
            check_compatible(study, families)
            if settings["pins"]:
                note(f"study {name}: a sub-space, --pin {pins_text(settings['pins'])}")
            if opts.start_from:
                imported = start_from(study, rdb, named, families, opts.start_top)
                note(f"study {name}: " + imported.summary())
        device = {"name": ev.device, "source": ev.name, "gpu": opts.gpu, "pid": os.getpid()}
        options = {"trials": opts.trials, "time_budget_s": opts.time_budget_s, "sampler": opts.sampler,
                   "seed": opts.seed, "batch": opts.batch, "screen": opts.screen and ev.screens, **settings}
        search: Search | None = None
        try:
            with store.recording("evo run", study=name, device=device, options=options,
                                 lease_s=opts.grace_s) as run_id:
                search = Search(study, store, ev, families, cases, settings["baseline"], kind, run_id,
                                storage=rdb, retry=retry, batch=opts.batch, reporter=reporter, ask_lock=ask_lock,
                                screening=opts.screen)
                return search.run(opts.trials, opts.time_budget_s)
        except KeyboardInterrupt:
            if search is None:
                raise
            search.summary.interrupted = True
            return search.summary
    except optuna.exceptions.StorageInternalError as exc:  # e.g. an SQLite file locked for too long
        raise EvoError(f"database error in {safe_url(url)}: {describe(exc)}") from None
    finally:
        ask_lock.close()
        ev.close()
        if owned is not None:
            owned.close()

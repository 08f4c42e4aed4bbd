"""evo's Python API: every workflow of the CLI as a plain function (docs/api.md).

The ``evo`` commands parse options, call these functions and print what they return; a
notebook or a script calls them directly::

    import evo
    db = evo.open_db("study.sqlite")
    summary = evo.run(db, families=["flash_mma"], cases=["F1", "F2"], trials=24)
    graph = evo.lineage_graph(db, summary.study)
    package = evo.promote_winners("attn", "dist", db=db, study=summary.study)

``__all__`` is the public surface: the functions, and the records, constants and vocabulary
helpers they take and return (re-exported from the modules that define them, so that a caller,
the CLI included, needs no other evo module). The names say what each function does and stay
clear of evo's modules of the same stem (``evo.toolchain.build``, ``evo.gpu.evaluate``,
``evo.products.bench``, ``evo.products.promote``, ``evo.analysis.lineage`` and ``evo.report``
are modules, so a function of that name on the package would be replaced by the module as soon
as it is imported).

- Databases: every function takes ``db``, an open :class:`~evo.store.Store` (from
  :func:`open_db`, left open), a SQLite file path or a SQLAlchemy URL (opened and closed
  around the call), or None for the default (``$EVO_DB``, else ``<EVO_HOME>/db/evo.sqlite``,
  whose folders are created when a function writes). Functions that only read refuse a SQLite
  file that does not exist, and open one on storage evo cannot write read-only; functions
  that write refuse such storage.
- Workers: GREEN and FAST run in a crash-isolated worker process (:mod:`evo.gpu.worker`).
  ``target`` names what that process runs, as ``"module:function"``; None is the GPU worker
  (:data:`evo.gpu.worker.DEFAULT_TARGET`) and needs a visible CUDA GPU. Another target (the CPU
  stand-ins of ``tests/fixtures/worker/``, for example) drives the same workflow without one.
- Runs: every function that writes records one run in ``evo_runs`` (:meth:`Store.recording
  <evo.store.Store.recording>`): ``done``, ``failed``, or ``interrupted`` on Ctrl-C.
- Errors: bad input is an :class:`~evo.errors.EvoError` with a one-line message, raised before
  anything is written.
"""

from __future__ import annotations

import os
import random as _random
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from evo import paths
from evo.analysis.candidate import CandidateReport, Relative
from evo.analysis.insights import Importance, MoveStat, ResourceStat
from evo.analysis.insights import Report as InsightsReport
from evo.analysis.lineage import STATUS_STYLE, Lineage, Link, Node
from evo.analysis.outcome import NextStep, RunReport
from evo.analysis.screening import ScreenErrors
from evo.errors import EvoError
from evo.family.manifest import Family, Value, list_families, load_family
from evo.family.render import Rendered, render
from evo.family.space import Candidate, all_candidates, listable, make_candidate, parse_assignments, random_candidates
from evo.products.bench import COLUMNS as BENCH_COLUMNS
from evo.products.bench import case_records, fidelity_summary
from evo.products.doctor import Finding
from evo.products.promote import Promoted
from evo.results import BuildResult, CheckResult, Evaluation, Shape, Status, Timing
from evo.samplerbench.run import RunResult as SamplerRun
from evo.search.loop import Best, Outcome, Reporter, RunSummary
from evo.store import CandidateRecord, CandidateView, EvaluationView, RunView, Store, open_store, short_id
from evo.store.engine import is_read_only, read_only_url, safe_url, writable
from evo.version import __version__
from evo.vocab import (
    BASELINE_BACKENDS, BASELINES, BENCH_SAMPLERS, CLOCKS, DEFAULT_BASELINE, DEFAULT_TOP, DTYPES, EVO, FULL,
    GRACE_S, HEARTBEAT_S, OBJECTIVES, PRUNE_BARS, SAMPLERS, SCREENS, SDPA_BACKENDS, START_MODES, STEADY,
    assignment_text, clock_protocol, replayed_on, value_text,
)

__all__ = [
    # workflows, one per command (docs/api.md)
    "bench_samplers", "benchmark", "benchmark_seeds", "build_candidates", "candidate", "doctor",
    "evaluate_candidate", "export_sweep", "fast_shapes", "lineage_graph", "load_candidate", "open_db", "promote_winners",
    "run",
    "run_report", "screen_errors", "show_candidate", "study_insights", "write_report",
    # what they return
    "Benchmarked", "Best", "BuildResult", "Built", "CandidateRecord", "CandidateReport", "CandidateView",
    "CheckResult", "Evaluated", "Evaluation", "EvaluationView",
    "Exported", "Finding", "Importance", "InsightsReport", "Lineage", "Link", "Loaded", "MoveStat", "NextStep", "Node",
    "Outcome", "Promoted", "Relative", "Rendered", "Reporter", "ResourceStat", "RunReport", "RunSummary", "RunView",
    "SamplerRun", "ScreenErrors", "Screenshot", "Shape", "Status", "Store", "Timing", "WrittenReport",
    # constants: the choices and defaults the functions take
    "BASELINES", "BASELINE_BACKENDS", "BENCH_COLUMNS", "BENCH_SAMPLERS", "CLOCKS", "DEFAULT_BASELINE", "DEFAULT_TOP",
    "DTYPES", "EVO", "GRACE_S", "HEARTBEAT_S", "OBJECTIVES", "PRUNE_BARS", "SAMPLERS", "SCREENS", "SDPA_BACKENDS",
    "START_MODES", "STATUS_STYLE", "STEADY",
    "__version__",
    # how evo writes ids and values
    "assignment_text", "short_id", "value_text",
]

DB = Store | str | os.PathLike[str] | None
Params = Mapping[str, Value] | Sequence[str] | None
POSTGRES_EXTRA = "pip install 'evo-kernels[postgres]'"


# ----------------------------------------------------------------------------- databases


def _check_driver(url: str) -> None:
    """EvoError unless SQLAlchemy knows the URL's dialect and its Python driver is installed."""
    try:
        dialect = make_url(url).get_dialect()
    except (ArgumentError, NoSuchModuleError, ValueError) as exc:
        raise EvoError(f"cannot use database URL {url!r}: {exc}") from None
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        hint = POSTGRES_EXTRA if dialect.name == "postgresql" else f"install the {dialect.driver} driver"
        raise EvoError(f"the {dialect.name} driver {exc.name or dialect.driver!r} is not installed: {hint}") from None


def _database_url(db: str | os.PathLike[str] | None) -> str:
    """A file path or URL as a SQLAlchemy URL, its driver checked (None: ``$EVO_DB``, else
    ``<EVO_HOME>/db/evo.sqlite``)."""
    url = paths.db_url(os.fspath(db)) if db is not None else paths.default_db_url()
    _check_driver(url)
    return url


def _for_reading(url: str) -> str:
    """``url`` for a workflow that only reads: a SQLite file must exist (a mistyped path is an
    error, not a new, empty database); on storage evo cannot write, it is opened read-only."""
    path = paths.sqlite_file(url)
    if path is None:
        return url
    if not path.is_file():
        raise EvoError(f"no database at {path}: `evo run` creates one; --db or $EVO_DB names another")
    return url if writable(path) else read_only_url(url)


def _for_writing(url: str, named: bool) -> str:
    """``url`` for a workflow that writes: a SQLite file on storage evo can write. The folders
    of the default file are created on first use; a file the caller ``named`` needs its folder."""
    path = paths.sqlite_file(url)
    if path is None:
        return url
    if named and not path.parent.is_dir():
        raise EvoError(f"folder {path.parent} does not exist (evo creates the database file, not its folder)")
    if not writable(path):
        raise EvoError(f"cannot write the database {path}: the storage there is read-only (evo writes the file and, "
                       f"beside it, its -wal and -shm files); --db or $EVO_DB names one evo can write")
    return url


def open_db(db: DB = None, *, create: bool = True) -> Store:
    """Open the lineage database, migrating it to the current schema.

    ``db``: a SQLite file path, a SQLAlchemy URL, or None for the default. With ``create`` the
    database is opened to be written: a missing SQLite file is created (its folder must exist,
    unless it is the default one, whose folders are created too), and storage evo cannot write
    is an EvoError. Without, a missing file is an EvoError and a file on read-only storage is
    opened read-only (reading works; a write is an EvoError). A :class:`~evo.store.Store` is
    returned as it is. The store is a context manager; ``close()`` releases its connections.
    """
    if isinstance(db, Store):
        return db
    url = _database_url(db)
    return open_store(_for_writing(url, db is not None) if create else _for_reading(url))


@contextmanager
def _opened(db: DB, create: bool = True) -> Iterator[Store]:
    """The store for one call: ``db`` itself when it is open, else one opened and closed here."""
    if isinstance(db, Store):
        yield db
        return
    with open_db(db, create=create) as store:
        yield store


# ----------------------------------------------------------------------------- candidates


def _assignments(fam: Family, params: Params) -> dict[str, Value]:
    """Parameter values checked against ``fam``'s domains: ``KEY=VALUE`` strings as the CLI
    takes them, or a mapping (a value may also be its text, as ``"true"`` for True)."""
    if params is None:
        return {}
    if isinstance(params, Mapping):
        out: dict[str, Value] = {}
        for key, value in params.items():
            if key not in fam.params:
                raise EvoError(f"unknown parameter {key!r} for family {fam.name}; "
                               f"parameters: {', '.join(fam.params)}")
            out[key] = fam.params[key].parse(str(value))
        return out
    return parse_assignments(fam, list(params))


def candidate(family: str, params: Params = None) -> Rendered:
    """One candidate of ``family`` (the manifest's defaults fill what ``params`` leaves out),
    validated and rendered to source."""
    fam = load_family(family)
    return render(make_candidate(fam, _assignments(fam, params)), fam)


def _points(fam: Family, fixed: dict[str, Value], count: int | None, rng: _random.Random) -> list[Candidate]:
    """The given point (defaults fill the rest), or ``count`` random valid points that keep ``fixed``."""
    if count is None:
        return [make_candidate(fam, fixed)]
    if listable(fam):
        pool = [c for c in all_candidates(fam) if all(c.p[k] == v for k, v in fixed.items())]
    else:                                   # too many to list: drawn, and these are all there are to draw from
        pool = random_candidates(fam, count, rng, fixed)
    if not pool:
        shown = ", ".join(f"{k}={v}" for k, v in fixed.items())
        raise EvoError(f"no valid candidate of {fam.name} has {shown}")
    return rng.sample(pool, min(count, len(pool)))


# ----------------------------------------------------------------------------- build


@dataclass(frozen=True)
class Built:
    """What :func:`build_candidates` compiled: one result per distinct build, in order."""

    arch: str
    jobs: int
    run_id: int
    results: list[BuildResult]
    rendered: dict[str, Rendered]  # build id -> the candidate it compiles
    seconds: float                 # wall time of the batch

    @property
    def compiled(self) -> list[BuildResult]:
        """The builds nvcc ran for (not answered from the cache)."""
        return [r for r in self.results if not r.cached]


def build_candidates(families: Sequence[str] = (), params: Params = None, *, random: int | None = None,
                     seed: int = 0, arch: str | None = None, jobs: int | None = None, db: DB = None,
                     on_start: Callable[[int], None] | None = None,
                     on_done: Callable[[BuildResult], None] | None = None) -> Built:
    """Compile candidates with nvcc (cached by content) and store their ptxas reports.

    One candidate per family of ``families`` (default: every family) with ``params`` (the
    manifest's defaults fill the rest), or ``random`` valid points per family that keep
    ``params``, drawn with ``seed``. ``arch``: default the visible GPU's, else sm_90a.
    ``on_start(n)`` is told how many distinct builds there are, once the input is checked;
    ``on_done(result)`` is called as each one is known (cache hits first).
    """
    from evo.toolchain import build

    names = list(families) or list_families()
    if not names:
        raise EvoError("no kernel families found")
    arch = arch or build.default_arch()
    build.smem_limit(arch)
    rng = _random.Random(seed)
    items: list[Rendered] = []
    for name in names:
        fam = load_family(name)
        if arch not in fam.arches:
            raise EvoError(f"family {fam.name} does not support {arch}; it supports {', '.join(fam.arches)}")
        items += [render(c, fam) for c in _points(fam, _assignments(fam, params), random, rng)]
    build.nvcc_path()
    jobs = jobs or build.cpus()
    by_id = {build.build_id_for(r, arch): r for r in items}
    shown = params if params is None or isinstance(params, Mapping) else list(params)
    options = {"families": names, "params": _jsonable(shown), "random": random, "seed": seed, "arch": arch,
               "jobs": jobs}
    with _opened(db) as store, store.recording("evo build", options=options) as run_id:
        if on_start is not None:
            on_start(len(by_id))

        def done(result: BuildResult) -> None:
            store.record_build(by_id[result.build_id], result, run_id)
            if on_done is not None:
                on_done(result)

        start = time.perf_counter()
        results = build.build_batch(items, arch=arch, jobs=jobs, on_done=done)
        wall = time.perf_counter() - start
    distinct = list({r.build_id: r for r in results}.values())
    return Built(arch, jobs, run_id, distinct, by_id, wall)


@dataclass(frozen=True)
class Loaded:
    """What :func:`load_candidate` built and loaded: the build id (the stored id, or the id the
    source builds under today), the rendered source, and its launchable kernels
    (``kernels.launch(q, k, v, o, causal=..., shift=...)``)."""

    build_id: str
    rendered: Rendered
    kernels: Any


def load_candidate(source: str | Rendered, *, db: DB = None, arch: str | None = None,
                   device: int | str = 0) -> Loaded:
    """One candidate's kernels built (the build cache answers one built before) and loaded on GPU
    ``device``, for a script that times or profiles them outside the GREEN / FAST workers (Nsight
    Compute, a power probe). ``source``: a stored candidate's id or unique prefix, rendered from
    today's templates for the arch it was built for; or a :class:`Rendered` (:func:`candidate`),
    built for ``arch`` (default: the visible GPU's). ``device``: a CUDA device index (a Python-module
    family's kernels also run on ``"cpu"`` tensors). Nothing is stored: it is not an evaluation."""
    from evo.gpu.kernels import load_kernels
    from evo.toolchain import build

    if isinstance(source, str):
        with _opened(db, create=False) as store:
            _, rendered, stored_arch = _stored(store, source)
        arch = arch or stored_arch
    else:
        rendered, arch = source, arch or build.default_arch()
    (built,) = build.build_batch([rendered], arch=arch)
    if built.status is not Status.BUILT or not built.cubin_path:
        raise EvoError(f"{built.build_id[:12]} did not build for {arch}: {built.status.value} ({built.reason})")
    return Loaded(built.build_id, rendered, load_kernels(built.cubin_path, rendered.entries, device=device))


def _jsonable(params: Any) -> Any:
    return None if params is None else {k: v for k, v in params.items()} if isinstance(params, Mapping) else params


# ----------------------------------------------------------------------------- evaluate


@dataclass(frozen=True)
class Evaluated:
    """One candidate gated and timed by :func:`evaluate_candidate`, as stored."""

    rendered: Rendered
    build: BuildResult
    evaluation: Evaluation
    run_id: int
    asked: str | None = None  # the stored id asked for, when today's build of it has another id

    @property
    def candidate_id(self) -> str:
        return self.build.build_id

    @property
    def cases(self) -> list[dict[str, Any]]:
        """Per FAST case timed: the candidate's median and spread, TFLOP/s and every SDPA
        backend's median, as :func:`benchmark`'s record lists them."""
        return case_records(self.evaluation.timings, self.candidate_id)


def fast_shapes(cases: str | Sequence[str] | None = None, dtype: str | None = "fp16") -> tuple[Shape, ...]:
    """FAST cases by name (``"F1,F3c,F5-F8"``, ``"llm"`` or a list of such names; None: the whole
    default suite) in ``dtype`` (None: each suite's own)."""
    from evo.gpu.suites import fast_cases

    select = [cases] if isinstance(cases, str) else list(cases) if cases is not None else None
    return tuple(fast_cases(select, dtype))


def _target(target: str | None) -> str:
    """The worker target to run: ``target``, else the GPU worker, which needs a visible GPU."""
    from evo.gpu.worker import DEFAULT_TARGET, require_gpu

    if target is None:
        require_gpu()
        return DEFAULT_TARGET
    return target


def _stored(store: Store, cid: str) -> tuple[str, Rendered, str]:
    """(full id, rendered source, arch) of a stored candidate, rendered from today's templates."""
    view = store.get(cid).candidate
    if view.arch is None:
        raise EvoError(f"candidate {view.id[:12]} was never built ({view.status.value}: {view.reason})")
    return view.id, view.rendered(), view.arch


def _new_id_note(old: str, new: str) -> str:
    """Why a stored candidate is evaluated under a new build id."""
    return (f"note: {old[:12]} builds under a new id today (templates, launch config, compiler or headers changed, "
            f"or it predates build key v2); evaluating the new build {new[:12]}")


def evaluate_candidate(family: str | None = None, params: Params = None, *, candidate_id: str | None = None,
                       cases: str | Sequence[str] | None = None, dtype: str = "fp16", db: DB = None,
                       arch: str | None = None, timeout_s: float = 1800.0, target: str | None = None,
                       device: int = 0, note: Callable[[str], None] | None = None) -> Evaluated:
    """Gate (GREEN) and time (FAST) one candidate in a worker process, and store the result.

    The candidate is ``family`` with ``params``, or the stored ``candidate_id`` (an id or a
    unique prefix), rendered from today's templates and built (or taken from the build cache);
    a candidate that does not build is an EvoError. FAST times ``cases`` (default: the whole
    suite) interleaved with every SDPA backend. ``note`` hears what is about to be measured
    before the worker starts. The evaluation's status is in ``result.evaluation.status``
    (``fast`` when it passed GREEN and was timed).
    """
    from evo.toolchain.build import build_batch, default_arch
    from evo.gpu.worker import EvalRequest, Worker

    if (family is None) == (candidate_id is None):
        raise EvoError("give a FAMILY (with -p KEY=VALUE ...) or --id ID, not both" if family
                       else "give a FAMILY (with -p KEY=VALUE ...) or --id ID")
    if candidate_id is not None and params:
        raise EvoError("-p applies to a FAMILY; --id evaluates a stored candidate as it is")
    shapes = fast_shapes(cases, dtype)
    worker_target = _target(target)
    say = note or (lambda _text: None)
    with _opened(db, create=family is not None) as store:
        if family is not None:
            rendered, old_id, arch = candidate(family, params), None, arch or default_arch()
        else:
            old_id, rendered, stored_arch = _stored(store, candidate_id or "")
            arch = arch or stored_arch
        salt = secrets.randbelow(2**31)
        options = {"cases": [s.tag for s in shapes], "arch": arch, "salt": salt, "target": worker_target}
        with store.recording("evo eval", options=options) as run_id:
            (built,) = build_batch([rendered], arch=arch)
            store.record_build(rendered, built, run_id)
            if built.status is not Status.BUILT:
                raise EvoError(f"{rendered.candidate.label()} ({built.build_id[:12]}): "
                               f"{built.status.value}: {built.reason}")
            if old_id is not None and built.build_id != old_id:
                say(_new_id_note(old_id, built.build_id))
            say(f"{rendered.candidate.label()}  {built.build_id[:12]} {arch}{' (cached)' if built.cached else ''}")
            request = EvalRequest(built.build_id, built.cubin_path or "", rendered.entries, green=True,
                                  fast_cases=shapes, options={"interleave": True, "salt": salt})
            with Worker(device, worker_target) as worker:
                ev = worker.evaluate(request, timeout_s)
            store.record_evaluation(ev, run_id)
    return Evaluated(rendered, built, ev, run_id, old_id if old_id != built.build_id else None)


# ----------------------------------------------------------------------------- bench


@dataclass(frozen=True)
class Benchmarked:
    """What :func:`benchmark` wrote: the record's path, the record, and one line per target
    that failed (the others are in the record)."""

    path: Path
    record: dict[str, Any]
    problems: list[str]

    @property
    def fidelity(self) -> str:
        """One line: on how many timings FAST agrees with the profiler, and the worst."""
        return fidelity_summary(self.record)


def benchmark(candidate_ids: Sequence[str] = (), *, best: int | None = None, package: str | None = None,
              cases: str | Sequence[str] | None = None, dtype: str | None = None,
              out: str | os.PathLike[str] | None = None, db: DB = None, timeout_s: float = 1800.0,
              target: str | None = None, device: int = 0,
              backends: Sequence[str] = BASELINE_BACKENDS, clocks: str = STEADY) -> Benchmarked:
    """Time stored candidates (``candidate_ids``, else the ``best`` N FAST ones, default 1) or an
    installed promoted ``package`` on the FAST ``cases`` (in ``dtype``; default each suite's own:
    ``fast`` fp16, ``llm`` bf16) against the baseline ``backends`` (default every SDPA backend and
    FlashAttention-4, ``fa4``: a baseline that cannot time a case is recorded as unavailable with
    why), with the profiler's fidelity check, the long cases in each op's steady state (``clocks``
    ``steady``) or near boost clocks as short-burst harnesses time them (``burst``: docs/design.md,
    FAST); writes ``benchmarks/<gpu>-<day>-<sha>.json`` under
    ``out`` (default ``<EVO_HOME>/benchmarks``) and BENCHMARKS.md beside it. A stored candidate is
    rebuilt from today's templates and must build under its stored id."""
    from evo.products.bench import run_bench
    from evo.toolchain.build import build_batch
    from evo.gpu.worker import EvalRequest

    if package and (candidate_ids or best):
        raise EvoError("--package times a package; --id / --best time stored candidates: choose one")
    if candidate_ids and best:
        raise EvoError("give --id or --best, not both")
    clock_protocol(clocks)
    unknown = [b for b in backends if b not in BASELINE_BACKENDS]
    if unknown or not backends:
        raise EvoError(f"unknown baseline backend {', '.join(unknown) or '(none given)'}; "
                       f"choose from {', '.join(BASELINE_BACKENDS)}")
    shapes = fast_shapes(cases, dtype)
    out_dir = Path(out) if out is not None else paths.home() / "benchmarks"
    worker_target = _target(target)
    targets: list[tuple[str | None, EvalRequest]] = []
    if package:
        targets.append((None, EvalRequest(f"package:{package}", "", (), green=False, fast_cases=shapes,
                                          options={"package": package})))
    else:
        with _opened(db, create=False) as store:
            chosen = [store.resolve(i) for i in candidate_ids] or [c.id for c, _ in store.best(best or 1)]
            if not chosen:
                raise EvoError(f"no FAST candidates in {store.url}; run `evo run` or `evo eval` first")
            for cid in chosen:
                full, rendered, arch = _stored(store, cid)
                (built,) = build_batch([rendered], arch=arch)
                if built.build_id != full:
                    raise EvoError(f"{full[:12]} builds under a new id today (templates, launch config, compiler "
                                   f"or headers changed, or it predates build key v2; now "
                                   f"{built.build_id[:12]}); `evo eval --id {full[:12]}` evaluates the new build")
                if built.status is not Status.BUILT:
                    raise EvoError(f"{full[:12]}: {built.status.value}: {built.reason}")
                targets.append((full, EvalRequest(full, built.cubin_path or "", rendered.entries, green=False,
                                                  fast_cases=shapes)))
    path, record, problems = run_bench(targets, out_dir=out_dir, package=package, timeout_s=timeout_s,
                                       device=device, target=worker_target, backends=tuple(backends),
                                       clocks=clocks)
    return Benchmarked(path, record, problems)


def benchmark_seeds(out: str | os.PathLike[str] | None = None, *, seeds: bool = True, sweep: bool = False,
                    timeout_s: float = 1800.0, note: Callable[[str], None] | None = None) -> Path:
    """Time the seed campaigns' rows (``seeds``: each claim beside evo's GREEN and FAST figures)
    and/or SDPA's backends over the sweep grid (``sweep``) on the GPU (``evo bench --seeds /
    --sweep``; :mod:`evo.products.seeds`); writes ``benchmarks/seeds-<gpu>-<day>-<sha>.json``
    under ``out`` (default ``<EVO_HOME>/benchmarks``) and BENCHMARKS.md beside it, and returns
    the record's path. ``note`` hears each line of progress."""
    from evo.products.seeds import GROUPS
    from evo.products.seeds import run as run_seeds

    out_dir = Path(out) if out is not None else paths.home() / "benchmarks"
    return run_seeds(out_dir, GROUPS if seeds else (), sweep, timeout_s=timeout_s, log=note or (lambda _line: None))


# ----------------------------------------------------------------------------- search


def run(db: DB = None, *, trials: int = 100, families: Sequence[str] | None = None,
        cases: Sequence[str] | None = None, sampler: str = "evo", seed: int | None = None,
        study: str | None = None, replay: str | os.PathLike[str] | None = None, batch: int = 8,
        arch: str | None = None, baseline: str | None = None, objective: str | None = None,
        jobs: int | None = None, gpus: str | None = None, heartbeat_s: int | None = None,
        grace_s: int | None = None, time_budget_s: float | None = None, target: str | None = None,
        start_from: Sequence[str] | None = None, start_top: int | None = None,
        reporter: Reporter | None = None, screen: bool = True, pruner: Any = None,
        pins: Sequence[str] | None = None, screen_only: bool = False, screen_alone: bool = False,
        prune_bar: str = SCREENS) -> RunSummary:
    """Start or continue a search (``evo run``); returns its :class:`~evo.search.loop.RunSummary`.

    Measurements come from ``replay`` (a recorded sweep), else the worker ``target`` when one is
    given, else the visible GPU(s) (``gpus``: ``all`` or indices like ``0,1``; one worker process
    each), else the newest recording under ``data/``, else builds only. The study (``study``,
    default by source) keeps the families, FAST cases, baseline and objective it was created
    with; a later run continues it up to ``trials`` (a study that already has them runs none:
    :func:`run_report` says so). ``reporter`` hears progress (:class:`~evo.search.loop.Reporter`;
    default: silent). Ctrl-C stops the search: open trials are re-queued, the run is recorded
    ``interrupted``, and the summary so far comes back with ``interrupted`` set. ``start_from``:
    a new study's first trials are the best ``start_top`` (default 8) candidates of each of
    these studies, and each stored candidate named by a unique id prefix of 8 hex digits or more
    (an item that names a study is that study; :mod:`evo.search.warmstart`). Families, FAST cases and sampler are checked
    before any database file is made. On a GPU each new candidate is screened first and timed
    in full only if ``pruner`` (an Optuna pruner; default :class:`~evo.search.pruner.EvoPruner`)
    keeps it; ``screen=False`` times every candidate in full (docs/design.md, "Rungs"), and
    ``screen_only`` none (:class:`~evo.search.pruner.ScreenOnlyPruner`: a run that records screens). A screen
    times its long cases as the full rung does, beside the scoring baseline, and the full rung reuses
    them; ``screen_alone`` times them with the candidate alone against a cached baseline (cheaper, and
    1-3 % high there: :meth:`evo.gpu.evaluate.Plan.for_case`). ``prune_bar`` (:data:`~evo.vocab.PRUNE_BARS`) is
    the default pruner's overall bar: the highest screen seen, or ``incumbent``, the screen of the best
    candidate timed in full (:class:`~evo.search.pruner.EvoPruner`). ``pins``:
    ``GENE=VALUE`` or ``FAMILY.GENE=VALUE`` texts (``evo run --pin``): search the sub-space with
    those genes held at one value each; a study keeps the pins it was created with (a run giving
    others is refused; none given: the study's).
    """
    from evo.search.driver import RunOptions
    from evo.search.fanout import start
    from evo.search.loop import NullReporter
    from evo.search.pruner import EvoPruner, ScreenOnlyPruner

    if gpus is not None and target is not None:
        raise EvoError("gpus chooses GPU workers; a target names another worker (leave one out)")
    if screen_only and (not screen or pruner is not None):
        raise EvoError("screen_only stops every candidate after its screen: it takes no pruner and needs screens")
    if prune_bar not in PRUNE_BARS:
        raise EvoError(f"unknown pruning bar {prune_bar!r}; one of {', '.join(PRUNE_BARS)}")
    if prune_bar != SCREENS and (pruner is not None or screen_only or not screen):
        raise EvoError("prune_bar sets the default pruner's bar: it takes no pruner of its own, screens and a full rung")
    if screen_only:
        pruner = ScreenOnlyPruner()
    elif prune_bar != SCREENS:
        pruner = EvoPruner(bar=prune_bar)
    url = db.url if isinstance(db, Store) else _for_writing(_database_url(db), db is not None)
    opts = RunOptions(trials=trials, time_budget_s=time_budget_s, families=list(families) if families else None,
                      cases=list(cases) if cases else None, sampler=sampler, seed=seed, db=url,
                      study=study, replay=Path(replay) if replay is not None else None, batch=batch, arch=arch,
                      baseline=baseline, objective=objective, jobs=jobs,
                      heartbeat_s=HEARTBEAT_S if heartbeat_s is None else heartbeat_s,
                      grace_s=GRACE_S if grace_s is None else grace_s, target=target,
                      start_from=list(start_from) if start_from else None,
                      start_top=DEFAULT_TOP if start_top is None else start_top, screen=screen, pruner=pruner,
                      pins=list(pins) if pins is not None else None, screen_alone=screen_alone)
    return start(opts, gpus, reporter or NullReporter())


def run_report(summary: RunSummary, db: DB = None) -> RunReport:
    """What ``evo run`` says once the search of ``summary`` stopped (:class:`~evo.analysis.outcome.RunReport`):
    where the results are, the best candidate's score against every SDPA backend timed beside
    it, why a run had nothing to do (the study already had the trials asked for), and the
    commands that can come next on this machine (``evo promote`` only where it can work: not
    for a replayed study, whose candidates carry no GREEN checks of their own)."""
    from evo.analysis.outcome import run_report as outcome

    with _opened(db, create=False) as store:
        return outcome(store, summary)


# ----------------------------------------------------------------------------- reading the store


def lineage_graph(db: DB = None, study: str | None = None, baseline: str = DEFAULT_BASELINE) -> Lineage:
    """The search tree of ``study`` (every candidate when None) as an :class:`evo.analysis.lineage.Lineage`:
    ``nodes`` (id -> label, status, score against ``baseline``) and ``links`` (parent, child,
    the move, its effect); ``tree()``, ``dot()`` and ``document()`` render it. A study is scored
    on the FAST cases it was created with."""
    from evo.analysis.lineage import build_lineage
    from evo.search.study import study_cases

    with _opened(db, create=False) as store:
        cases = study_cases(store.url, study) if study else None
        return build_lineage(store, study, baseline, cases)


def show_candidate(candidate_id: str, *, db: DB = None, baseline: str = DEFAULT_BASELINE) -> CandidateReport:
    """Everything stored about one candidate (``evo show``; an id or a unique prefix of one), as
    a :class:`~evo.analysis.candidate.CandidateReport`: its record (parameters, builds,
    evaluations with their checks, trials), first run, timings and scores against ``baseline``,
    its parents and children with each move's effect, ``replayed_on`` (the GPU of a recording it
    was replayed from: its checks ran there, not here), ``source()`` and ``document()``."""
    from evo.analysis.candidate import describe

    with _opened(db, create=False) as store:
        return describe(store, store.get(candidate_id), baseline)


def study_insights(db: DB = None, study: str | None = None, *,
                   baseline: str = DEFAULT_BASELINE) -> InsightsReport:
    """Which moves help, on which shapes, and what fails to build (``evo insights``): the
    :class:`~evo.analysis.insights.Report` of ``study``, or of the whole database (its every
    edge, and the parameter importances of each of its studies; ``importances_note`` says why
    there are none). The report replaces the stored insights, unless the database is read-only."""
    from evo.analysis import insights

    with _opened(db, create=False) as store:
        report = insights.compute(store, study, baseline=baseline, db_url=store.url)
        if not is_read_only(store.url):
            insights.save(store, study, report)
    return report


def screen_errors(db: DB = None, study: str | None = None) -> ScreenErrors:
    """How well the screens of ``study`` (every study when None) foretold the full scores of the
    candidates they kept (docs/design.md, "Rungs"): candidates screened and pruned, and per
    candidate timed on both rungs its screened and full score (:class:`~evo.analysis.screening.ScreenErrors`;
    ``.line()``, ``.document()``)."""
    from evo.analysis.screening import screen_errors as errors

    with _opened(db, create=False) as store:
        return errors(store, study)


@dataclass(frozen=True)
class Exported:
    """What :func:`export_sweep` wrote: the recording, its GPU, how many candidates it holds
    and how many of them this export added or changed."""

    path: Path
    gpu: str
    candidates: int
    added: int


def export_sweep(out: str | os.PathLike[str] | None = None, *, db: DB = None, gpu: str | None = None,
                 fidelity: str = FULL) -> Exported:
    """Write the database's GPU results (every candidate with a final status, any study) to a
    replayable recording (``evo export-sweep``), merged into the one at ``out`` (default
    ``<EVO_HOME>/data/sweep-<gpu>.json.gz``); ``gpu``: the device (default: the one with most
    evaluations); ``fidelity``: ``full`` timings, or each candidate's search ``screen``
    (:mod:`evo.store.recording`). Replayed evaluations are never exported."""
    from evo.store import recording

    if out is not None and not Path(out).parent.is_dir():
        raise EvoError(f"folder {Path(out).parent} does not exist")
    with _opened(db, create=False) as store:
        rec, added = recording.export_sweep(store, Path(out) if out is not None else None, gpu, fidelity)
    assert rec.path is not None  # saving the recording names the file it went to
    return Exported(rec.path, rec.gpu, len(rec.records), added)


@dataclass(frozen=True)
class Screenshot:
    """What headless Chromium drew of a report: whether the page's script ``finished``, its plots
    and lineage nodes, the plots drawn ``empty`` and the ``errors`` (console, screenshot, drawing)."""

    path: Path
    finished: bool
    plots: int = 0
    lineage_nodes: int = 0
    empty: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    @property
    def problems(self) -> list[str]:
        """Why the page did not draw cleanly (nothing when it did)."""
        return [*self.errors, *(f"plot {name} is empty" for name in self.empty)]


@dataclass(frozen=True)
class WrittenReport:
    """The HTML page :func:`write_report` wrote, its size, the database it shows and, when asked
    for, what a headless browser drew of it."""

    path: Path
    megabytes: float
    database: str
    screenshot: Screenshot | None = None


def write_report(out: str | os.PathLike[str] = "report.html", *, db: DB = None, study: str | None = None,
                 baseline: str = DEFAULT_BASELINE, bench: Sequence[str | os.PathLike[str]] = (),
                 sampler_benchmark: str | os.PathLike[str] | None = None,
                 screenshot: str | os.PathLike[str] | None = None) -> WrittenReport:
    """Write one self-contained HTML page about the database (``evo report``; :mod:`evo.report`):
    search progress, speedups per FAST case, TFLOP/s against the GEMM rate, the lineage graph,
    insights and failures, of ``study`` (default: every study). ``bench``: ``evo bench`` records,
    files or folders (default: ``<EVO_HOME>/benchmarks``, those of the database's GPU);
    ``sampler_benchmark``: its JSON (default: ``docs/sampler-benchmark.json`` when present).
    ``screenshot``: also open the page in headless Chromium, check what it drew and save a PNG
    there (:attr:`WrittenReport.screenshot`)."""
    from evo import report
    from evo.report import browser

    page, png = Path(out), Path(screenshot) if screenshot is not None else None
    for path in (page, png):
        if path is not None and not path.parent.is_dir():
            raise EvoError(f"folder {path.parent} does not exist")
    exe = browser.find_browser() if png else None
    if png is not None and exe is None:
        raise EvoError("--screenshot needs Chromium (Debian: apt-get install chromium)")
    default_bench = paths.home() / "benchmarks"
    default_samplers = paths.root() / "docs" / "sampler-benchmark.json"
    chosen = [Path(b) for b in bench] or ([default_bench] if default_bench.is_dir() else [])
    samplers = Path(sampler_benchmark) if sampler_benchmark else default_samplers if default_samplers.is_file() else None
    shown = safe_url(db.url if isinstance(db, Store) else _database_url(db))
    with _opened(db, create=False) as store:
        report.write(store, page, study=study, baseline=baseline, bench=chosen, same_gpu=not bench,
                     sampler_benchmark=samplers)
    shot = _screenshot(page, png, exe) if png is not None and exe is not None else None
    return WrittenReport(page, page.stat().st_size / 1e6, shown, shot)


def _screenshot(page: Path, png: Path, exe: str) -> Screenshot:
    """Load the page headless, count what it drew and save a screenshot from the top down to the
    end of the lineage section."""
    from evo.report import browser

    check = browser.inspect(page, exe)
    if check.summary is None:
        return Screenshot(png, False, errors=tuple(check.console_errors))
    height = check.summary["section_bottoms"].get("lineage", browser.SHOT_HEIGHT) + 20  # down to the graph
    errors = [*check.console_errors, *browser.screenshot(page, png, exe, height=height), *check.summary["errors"]]
    plots = check.summary["plots"]
    empty = tuple(name for name, p in plots.items() if not (p["points"] and p["marks"]))
    return Screenshot(png, True, len(plots), check.summary["lineage_nodes"], empty, tuple(errors))


def doctor(db: DB = None) -> list[Finding]:
    """What this machine has for evo (``evo doctor``): nvcc, ninja, GPUs, cuda-python, evo's
    files, the data folder and the database (which it does not create), one
    :class:`~evo.products.doctor.Finding` each; a required one that is not ``ok`` means evo
    cannot build here."""
    from evo.products.doctor import diagnose

    return diagnose(db.url if isinstance(db, Store) else _database_url(db))


# ----------------------------------------------------------------------------- sampler benchmark


def bench_samplers(recordings: Sequence[str] = (), *, seeds: int = 50, samplers: Sequence[str] | None = None,
                   kt: Sequence[str] | None = None, modes: Sequence[str] | None = None,
                   cases: str | Sequence[str] | None = None, baseline: str = BASELINES[0], tolerance: float = 0.0,
                   batch: int = 1, jobs: int | None = None, out: str | os.PathLike[str] | None = None,
                   plot: str | os.PathLike[str] | None = None, results: str | os.PathLike[str] | None = None,
                   note: Callable[[str], None] | None = None,
                   progress: Callable[[SamplerRun], None] | None = None, pins: Sequence[str] = ()) -> list[Path]:
    """Compare samplers on recorded sweeps (``evo bench-samplers``; :mod:`evo.samplerbench`):
    evaluations each needs to reach the best point, cold and warm, ``seeds`` runs per sampler
    and start mode; writes the markdown ``out`` (default ``<EVO_HOME>/docs/sampler-benchmark.md``),
    the figure ``plot`` and every run as JSON ``results`` (default: beside ``out``) and returns
    the files written. ``recordings``: ``PATH`` or ``PATH:fam1,fam2`` (default: the newest
    ``data/sweep-*.json.gz``); ``samplers`` (default :data:`BENCH_SAMPLERS`); ``kt``: Kernel
    Tuner's strategies (None: its built-in ones; empty: none); ``modes``: of :data:`START_MODES`;
    ``pins``: ``GENE=VALUE`` or ``FAMILY.GENE=VALUE`` texts (``--pin``), a sub-space: those genes
    held at one value each wherever their family is benchmarked (so a family too large to list
    may be benchmarked on a part of it). ``note`` hears progress lines, ``progress`` each finished run."""
    from evo.samplerbench.doc import Options, write
    from evo.store.recording import newest_recording

    chosen = list(recordings)
    if not chosen:
        found = newest_recording()
        if found is None:
            raise EvoError("no recording under data/: pass --recording FILE")
        chosen = [str(found)]
    md = Path(out) if out is not None else paths.home() / "docs" / "sampler-benchmark.md"
    opts = Options(recordings=chosen, seeds=seeds, samplers=list(samplers or BENCH_SAMPLERS),
                   kt=None if kt is None else list(kt), modes=list(modes or START_MODES),
                   cases=list(fast_shapes(cases)) if cases else None, baseline=baseline, tolerance=tolerance,
                   batch=batch, jobs=jobs, out=md, plot=Path(plot) if plot else md.with_suffix(".png"),
                   results=Path(results) if results else md.with_suffix(".json"), pins=list(pins))
    return write(opts, note=note or (lambda _line: None), progress=progress)


# ----------------------------------------------------------------------------- promote


def promote_winners(name: str, out: str | os.PathLike[str], *, db: DB = None, study: str | None = None,
                    candidate_ids: Sequence[str] = (), baseline: str = DEFAULT_BASELINE, device: str | None = None,
                    min_speedup: float = 1.0, version: str = "0.1.0", force: bool = False,
                    verify: bool = True, confirm: bool = False, note: Callable[[str], None] | None = None) -> Promoted:
    """Write the pip package ``out/name`` from the per-bucket winners (``evo promote``); returns
    :class:`evo.products.promote.Promoted`. The winners are first verified on the GPU over every bucket
    they serve and the package's tests run there; ``verify=False`` skips both (for a machine
    without a GPU) and the package's PROVENANCE.json says so. ``confirm``: route a bucket to a
    kernel only on a win timed beside SDPA (:mod:`evo.products.confirm`; needs the GPU); ``note`` hears of
    each winner as its timing starts. Candidates known only from a replayed recording carry no
    GREEN checks of their own and are refused first, whatever ``verify`` says: gate them on a
    GPU (:func:`evaluate_candidate`)."""
    from evo.products.promote import promote

    with _opened(db, create=False) as store:
        _require_gated(store, study, candidate_ids, baseline)
        url = store.url
    return promote(name, Path(out), db_url=url, study=study, candidate_ids=list(candidate_ids),
                   baseline=baseline, device=device, min_speedup=min_speedup, version=version, force=force,
                   verify=verify, confirm=confirm, note=note)


def _require_gated(store: Store, study: str | None, ids: Sequence[str], baseline: str) -> None:
    """EvoError when every candidate promote would choose from was replayed from a recording:
    none carries GREEN checks of its own, so no package can be made of them on any machine."""
    from evo.products.promote import select_candidates

    views = select_candidates(store, study, list(ids))
    gpus = set()
    for view in views:
        for evaluation in store.evaluations(view.id):
            gpu = replayed_on(evaluation.device)
            if gpu is None:  # measured by a worker: promote weighs its evidence
                return
            gpus.add(gpu)
    if not gpus:  # nothing evaluated at all: promote says what is missing
        return
    ranked = [c.id for c, _ in store.best(1, baseline=baseline, study=study)] if not ids else []
    best = short_id((ranked or [views[0].id])[0])
    which = (f"candidate {short_id(views[0].id)} was" if len(views) == 1
             else f"the {len(views)} green candidates{f' of study {study!r}' if study else ''} were")
    raise EvoError(f"{which} replayed from a recording made on {', '.join(sorted(gpus))}: GREEN ran there, "
                   f"not on this machine, and stored no checks, so promote cannot ship them; gate one on a GPU "
                   f"first, `evo eval --id {best}` (evaluate_candidate(candidate_id={best!r})), then promote it, "
                   f"`evo promote --candidate {best}` (candidate_ids=[{best!r}])")

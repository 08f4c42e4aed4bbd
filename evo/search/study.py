"""Open (or create) the Optuna study of a search in the evo database, and pin its settings.

The study lives in Optuna's RDB storage on the same SQLAlchemy URL as evo's own tables, with
heartbeats on and :class:`~evo.search.resume.Retry` as the stale-trial callback, so a trial
whose worker died is failed and retried (:mod:`evo.search.resume`). On SQLite every Optuna
transaction begins with ``BEGIN IMMEDIATE``: the sqlite3 module otherwise reads outside any
transaction, and two workers could both pop the same waiting trial or both finish one trial
(on PostgreSQL Optuna locks the row). What makes
trial values comparable -- families, FAST cases, baseline, objective, measurement source --
is stored in the study's user attrs when it is created; continuing the study with different
settings is refused (a changed option would silently mix incomparable values), and options
left out are taken from the study.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from sqlalchemy import create_engine, event, inspect
from sqlalchemy.exc import SQLAlchemyError

from evo.errors import EvoError
from evo.vocab import GRACE_S, HEARTBEAT_S
from evo.results import Shape
from evo.search.resume import Retry
from evo.paths import sqlite_file
from evo.store.engine import BUSY_TIMEOUT_MS, describe, is_sqlite, safe_url
from evo.gpu.suites import fast_cases_by_tag

SETTINGS = "evo:settings"
KEYS = ("source", "families", "cases", "baseline", "objective")


def storage(url: str, heartbeat_s: int = HEARTBEAT_S, grace_s: int = GRACE_S,
            retry: Retry | None = None) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage on ``url`` with heartbeats and ``retry`` (default :class:`Retry`)
    as the stale-trial callback. The first one on a fresh database creates Optuna's tables:
    callers that may start together hold :func:`evo.store.engine.schema_lock`."""
    sqlite = is_sqlite(url)
    kwargs: dict[str, Any] = {"connect_args": {"timeout": BUSY_TIMEOUT_MS / 1000}} if sqlite \
        else {"pool_pre_ping": True}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        try:
            rdb = optuna.storages.RDBStorage(url, engine_kwargs=kwargs, heartbeat_interval=heartbeat_s,
                                             grace_period=grace_s,
                                             heartbeat_stale_trial_callback=retry or Retry())
        except ImportError as exc:
            raise EvoError(f"cannot use database URL: {exc.__cause__ or exc} "
                           "(pip install 'evo-kernels[postgres]' for PostgreSQL)") from None
    if sqlite:
        event.listen(rdb.engine, "connect", _sqlite_connect)
        event.listen(rdb.engine, "begin", _sqlite_begin)
        rdb.engine.dispose()  # connections opened so far lack the settings
    return rdb


def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    """SQLAlchemy emits BEGIN itself (below); ``synchronous=NORMAL`` because the store put the
    file in WAL mode, where that loses nothing when a process dies (Optuna commits a dozen times
    per trial, and a full sync each costs ~5 ms)."""
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA synchronous = NORMAL")
    cur.close()


def _sqlite_begin(conn: Any) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def stored_settings(store: optuna.storages.BaseStorage, name: str) -> dict[str, Any] | None:
    """The settings a study was created with, or None when there is no such study."""
    try:
        sid = store.get_study_id_from_name(name)
    except KeyError:
        return None
    return dict(store.get_study_user_attrs(sid).get(SETTINGS, {}))


def read_storage(url: str) -> optuna.storages.RDBStorage | None:
    """Optuna's storage on ``url`` for reading: None when the database holds no Optuna tables
    (nothing but ``evo build`` or ``evo eval`` ever wrote to it), and never creating them, so a
    command that only reads leaves the database as it was. Any other failure to open it is an
    EvoError naming the database."""
    path = sqlite_file(url)
    if path is not None and not path.is_file():
        return None
    engine = create_engine(url)
    try:
        if not inspect(engine).has_table("studies"):
            return None
    except SQLAlchemyError as exc:
        raise EvoError(f"cannot read the studies in {safe_url(url)}: {describe(exc)}") from None
    finally:
        engine.dispose()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RDBStorage(url, skip_compatibility_check=True, skip_table_creation=True)


def study_cases(url: str, name: str) -> list[Shape] | None:
    """The FAST cases a study scores (its stored settings), so that a study's lineage shows the
    scores its search optimized; None when there is no such study or it names no cases."""
    rdb = read_storage(url)
    settings = stored_settings(rdb, name) if rdb is not None else None
    if not settings or not settings.get("cases"):
        return None
    known = fast_cases_by_tag()
    return [known[t] for t in settings["cases"] if t in known] or None


def merge_settings(name: str, stored: Mapping[str, Any] | None, given: Mapping[str, Any],
                   flags: Mapping[str, str]) -> dict[str, Any]:
    """Settings for this run: the study's where the user gave none; a different value given
    for an existing study is an error naming the option. ``given`` values may be None."""
    if not stored:
        return dict(given)
    out = dict(stored)
    for k in KEYS:
        v = given.get(k)
        if v is not None and k in stored and stored[k] != v:
            raise EvoError(f"study {name!r} was run with {flags[k]} {_show(stored[k])}, not {_show(v)}; "
                           f"leave {flags[k]} out to continue it, or use another --study")
    return out


def _show(v: Any) -> str:
    return ",".join(map(str, v)) if isinstance(v, list) else str(v)


def open_study(store: optuna.storages.RDBStorage, name: str, sampler: optuna.samplers.BaseSampler,
               settings: Mapping[str, Any], directions: Sequence[str], metric_names: Sequence[str],
               pruner: optuna.pruners.BasePruner | None = None) -> optuna.Study:
    """Create or load the study, with ``pruner`` (default: none, the full protocol for every
    candidate); a new one records ``settings`` and its metric names."""
    study = optuna.create_study(storage=store, study_name=name, sampler=sampler,
                                pruner=pruner or optuna.pruners.NopPruner(),
                                directions=[optuna.study.StudyDirection[d.upper()] for d in directions],
                                load_if_exists=True)
    if SETTINGS not in study.user_attrs:
        study.set_user_attr(SETTINGS, dict(settings))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(list(metric_names))
    elif len(study.directions) != len(directions):
        raise EvoError(f"study {name!r} has {len(study.directions)} objectives, this run "
                       f"{len(directions)}; use another --study")
    return study

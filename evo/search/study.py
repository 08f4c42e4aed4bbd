"""Open (or create) the Optuna study of a search in the evo database, and pin its settings.

The study lives in Optuna's RDB storage on the same SQLAlchemy URL as evo's own tables, with
heartbeats on, so a trial left RUNNING by a dead process is found and retried. What makes
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
from sqlalchemy import event

from evo.errors import EvoError
from evo.results import Shape
from evo.search.resume import stale_callback
from evo.suites import fast_cases

SETTINGS = "evo:settings"
HEARTBEAT_S = 20
GRACE_S = 60
KEYS = ("source", "families", "cases", "baseline", "objective")


def storage(url: str, heartbeat_s: int = HEARTBEAT_S, grace_s: int = GRACE_S) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage on ``url`` with heartbeats. SQLite: a generous busy timeout, and
    ``synchronous=NORMAL`` (the store put the file in WAL mode, where that loses nothing when a
    process dies; Optuna commits a dozen times per trial, and a full sync each costs ~5 ms)."""
    sqlite = url.startswith("sqlite")
    kwargs: dict[str, Any] = {"connect_args": {"timeout": 60}} if sqlite else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        rdb = optuna.storages.RDBStorage(url, engine_kwargs=kwargs, heartbeat_interval=heartbeat_s,
                                         grace_period=grace_s, heartbeat_stale_trial_callback=stale_callback)
    if sqlite:
        event.listen(rdb.engine, "connect", _sqlite_sync_normal)
        rdb.engine.dispose()  # connections opened so far lack the pragma
    return rdb


def _sqlite_sync_normal(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA synchronous = NORMAL")
    cur.close()


def stored_settings(store: optuna.storages.BaseStorage, name: str) -> dict[str, Any] | None:
    """The settings a study was created with, or None when there is no such study."""
    try:
        sid = store.get_study_id_from_name(name)
    except KeyError:
        return None
    return dict(store.get_study_user_attrs(sid).get(SETTINGS, {}))


def study_cases(url: str, name: str) -> list[Shape] | None:
    """The FAST cases a study scores (its stored settings), so that a study's lineage shows the
    scores its search optimized; None when there is no such study or it names no cases."""
    try:
        settings = stored_settings(optuna.storages.RDBStorage(url), name)
    except Exception:  # no Optuna tables yet (a database that never ran a search)
        return None
    if not settings or not settings.get("cases"):
        return None
    known = {s.tag: s for dtype in ("fp16", "bf16") for s in fast_cases(dtype=dtype)}
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
               settings: Mapping[str, Any], directions: Sequence[str], metric_names: Sequence[str]) -> optuna.Study:
    """Create or load the study; a new one records ``settings`` and its metric names."""
    study = optuna.create_study(storage=store, study_name=name, sampler=sampler,
                                directions=list(directions), load_if_exists=True)
    if SETTINGS not in study.user_attrs:
        study.set_user_attr(SETTINGS, dict(settings))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(list(metric_names))
    elif len(study.directions) != len(directions):
        raise EvoError(f"study {name!r} has {len(study.directions)} objectives, this run "
                       f"{len(directions)}; use another --study")
    return study

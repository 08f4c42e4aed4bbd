"""The few things evo needs from Optuna that its public API does not offer, in one place.

Everything else in evo goes through Optuna's public API (``Study``, ``Trial``, the storage's
public methods). These cannot, and ``tests/test_optuna_internals.py`` fails loudly, naming
the one that went, if an Optuna release changes any of them:

- :data:`FIXED_PARAMS`: ``Study.enqueue_trial`` keeps the enqueued parameters in the waiting
  trial's system attrs under this key until the trial draws them; a retried candidate whose
  trial died before drawing is re-enqueued from there, and samplers know a retry by it.
- :func:`set_trial_system_attr`: a sampler's ``before_trial`` hook gets the study and a frozen
  trial; storing the sampler's proposal on that trial needs the study's storage and the trial's
  storage id, neither of which is public.
- :func:`unbeaten`: Optuna's ``fail_stale_trials`` only sees trials that have a heartbeat row;
  a trial whose worker died before its first beat has none. Finding those reads the RDB
  storage's ``trials`` and ``trial_heartbeats`` tables (named with the few columns it reads, not
  through Optuna's private ORM models, and not reflected: reflecting them queried the database's
  catalog on every check, before each batch and on the liveness thread's schedule, a twentieth
  of a worker's CPU with four workers on PostgreSQL; issue 35).
- :func:`beat`: a batch's trials each got their first heartbeat from Optuna's
  ``record_heartbeat``, a transaction a trial under the ask lock; :func:`beat` writes them in one
  (the ``trial_heartbeats`` table by name, as above, at the database's time as Optuna writes it).
- :func:`queue_empty`: ``Study.ask`` first reads the study's WAITING trials (the queue that
  ``enqueue_trial`` fills) through ``Study._pop_waiting_trial_id``; the storage's read of them
  reloads every running trial too. A worker's read of the study under the ask lock, before its
  batch of asks, counts the WAITING trials; that many asks read the queue, and the rest skip
  that read. A trial enqueued after that read (a sweep retrying a dead worker's trial meanwhile)
  is popped by a later batch's ask, as one enqueued between Optuna's own read and its new trial
  is by a later ask. (A count of the ``trials`` table before each ask cost a query and a
  connection each, under the lock; issue 35.)
- :func:`one_write`: a trial's parameters (a dozen to thirty ``suggest`` calls) and its user
  attrs each cost Optuna's storage a transaction of their own; on a study of a thousand trials
  with four workers those writes were a fifth of a trial's time and most of the store's write
  contention. Inside ``one_write`` the trial's storage is a stand-in that keeps them, and they
  are written at the end in one transaction, into the RDB storage's ``trial_params`` and
  ``trial_user_attributes`` tables (by name, as above), with the distributions as Optuna's
  public ``distribution_to_json`` spells them. The trial object keeps them as ``suggest`` and
  ``set_user_attr`` always do. The trial must still be RUNNING then, as Optuna requires of each
  write (``UpdateFinishedTrialError`` otherwise; nothing is written).
- :func:`mark`: the system attrs of a batch's trials -- the one that names a trial's run
  (``evo:run``) and the proposal of a sampler that proposes whole candidates
  (``evo:proposal``) -- each cost Optuna's storage a transaction a trial under the ask lock;
  :func:`mark` writes them on the batch's trials in one, into the ``trial_system_attributes``
  table (by name, as above), each trial's row locked and checked RUNNING as Optuna's write does.
- :func:`tell`: ``Study.tell`` tells through ``optuna.study._tell._tell_with_warning`` (which
  reads the trial, checks it, calls the sampler's ``after_trial`` and stores its state and
  values) and then reads the trial once more, only to return a deep copy of it, which evo
  never uses. With four workers on PostgreSQL that last read was a twentieth of a worker's CPU
  (issue 35); :func:`tell` calls the same function and skips it. Its first read, too, is
  answered from the trial object (``Trial._get_latest_trial``, what Optuna hands a sampler
  while the trial runs: the params, user attrs and intermediate values set through it), not
  from the storage (six queries: the trial, then each of its five tables): the storage's write
  of the state checks the trial is still RUNNING, under a lock of its row, as it always did
  (see :func:`answering`).
- :func:`ask`: ``Study.ask`` builds its ``Trial``, whose ``__init__`` reads the trial from the
  storage (six queries again); for a trial the ask has just created, what the storage's
  ``_create_new_trial`` returned is that trial, and :func:`ask` answers the read with it. A
  WAITING trial the ask pops is read as before (it holds the params it was enqueued with).
- :func:`answering`: both of those go through the RDB storage that Optuna's cached storage
  wraps (``_CachedStorage._backend``): the cached storage reads an unfinished trial from it
  (``get_trial``) and creates trials through it (``_create_new_trial``). For the length of one
  ask or tell the backend is a stand-in that keeps what it is given and answers the calling
  thread's read of it once; every other call passes through.
- :func:`trial_id`: the storage id of a trial that ``Study.ask`` returned is its ``_trial_id``;
  looking it up by study and number instead cost a query per ask, under the ask lock.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, distribution_to_json
from optuna.exceptions import UpdateFinishedTrialError
from optuna.study._tell import _tell_with_warning
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy import Connection, String, TableClause, cast, column, delete, func, insert, select, table, update
from sqlalchemy.exc import IntegrityError

FIXED_PARAMS = "fixed_params"
TRIALS_TABLE, HEARTBEATS_TABLE = "trials", "trial_heartbeats"
PARAMS_TABLE, USER_ATTRS_TABLE, SYSTEM_ATTRS_TABLE = "trial_params", "trial_user_attributes", "trial_system_attributes"
# the columns unbeaten, one_write and mark read and fill (the ids are the database's)
_TRIALS = table(TRIALS_TABLE, column("trial_id"), column("study_id"), column("state"))
_BEATS = table(HEARTBEATS_TABLE, column("trial_id"), column("heartbeat"))
_PARAMS = table(PARAMS_TABLE, column("trial_id"), column("param_name"), column("param_value"),
                column("distribution_json"))
_ATTRS = table(USER_ATTRS_TABLE, column("trial_id"), column("key"), column("value_json"))
_SYSTEM_ATTRS = table(SYSTEM_ATTRS_TABLE, column("trial_id"), column("key"), column("value_json"))


def enqueued_params(t: FrozenTrial) -> dict[str, Any]:
    """The parameters a trial drew, else those it was enqueued with (empty when neither)."""
    return dict(t.params) if t.params else dict(t.system_attrs.get(FIXED_PARAMS, {}))


def is_enqueued(t: FrozenTrial) -> bool:
    """Whether the trial was made by ``Study.enqueue_trial`` (a retry, or a point given by hand)."""
    return FIXED_PARAMS in t.system_attrs


def set_trial_system_attr(study: optuna.Study, trial: FrozenTrial, key: str, value: Any) -> None:
    """Set a system attr on ``trial`` from inside a sampler hook (no public route exists)."""
    study._storage.set_trial_system_attr(trial._trial_id, key, value)


class _Kept:
    """The RDB storage behind a study's cached storage while :func:`answering` runs: the trials it
    is given, and a copy of a trial created through it as creating it returned it (the cached
    storage keeps the original), are kept, and the next read of each by the thread that set it
    up is answered with it; all else passes through."""

    def __init__(self, backend: optuna.storages.RDBStorage, kept: Sequence[FrozenTrial]) -> None:
        self._backend, self._thread = backend, threading.get_ident()
        self._kept = {t._trial_id: t for t in kept}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def _create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> FrozenTrial:
        made = self._backend._create_new_trial(study_id, template_trial)
        self._kept[made._trial_id] = copy.deepcopy(made)
        return made

    def get_trial(self, trial_id: int) -> FrozenTrial:
        kept = self._kept.pop(trial_id, None) if threading.get_ident() == self._thread else None
        return self._backend.get_trial(trial_id) if kept is None else kept


@contextmanager
def answering(study: optuna.Study, kept: Sequence[FrozenTrial] = ()) -> Iterator[None]:
    """In the block, the study's storage answers this thread's first read of each trial of
    ``kept`` (handed over as they are) and of each trial it creates from what it holds, without
    reading the database (a storage that is not Optuna's cached RDB storage reads as always)."""
    cached = study._storage
    backend = getattr(cached, "_backend", None)
    if not isinstance(backend, optuna.storages.RDBStorage):
        yield
        return
    cached._backend = _Kept(backend, kept)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        cached._backend = backend  # type: ignore[attr-defined]


def ask(study: optuna.Study) -> optuna.Trial:
    """``study.ask()``, less the read of the trial it creates (see :func:`answering`)."""
    with answering(study):
        return study.ask()


def tell(study: optuna.Study, trial: optuna.Trial, values: Sequence[float] | None = None,
         state: TrialState | None = None) -> None:
    """``study.tell(trial, values, state=state)``, less its two reads of the told trial: the one
    that only builds ``Study.tell``'s return value, and the one before it, answered from the
    trial object (see the module docstring). It raises as ``Study.tell`` does: ``ValueError``
    for a trial this process has read finished since, ``UpdateFinishedTrialError`` for one
    finished otherwise (nothing is written to either)."""
    with answering(study, [trial._get_latest_trial()]):
        _tell_with_warning(study=study, trial=trial, value_or_values=values, state=state)


def trial_id(trial: optuna.Trial) -> int:
    """The storage id of a trial ``Study.ask`` returned."""
    return trial._trial_id


def unbeaten(storage: optuna.storages.RDBStorage, study_id: int) -> list[int]:
    """Storage ids of the study's RUNNING trials that have no heartbeat row at all."""
    q = (select(_TRIALS.c.trial_id).outerjoin(_BEATS, _BEATS.c.trial_id == _TRIALS.c.trial_id)
         .where(_TRIALS.c.study_id == study_id,  # the state is an enum on PostgreSQL
                cast(_TRIALS.c.state, String) == TrialState.RUNNING.name, _BEATS.c.trial_id.is_(None)))
    with storage.engine.connect() as conn:
        return [int(tid) for tid in conn.scalars(q)]


def beat(rdb: optuna.storages.RDBStorage, trial_ids: Sequence[int]) -> None:
    """``rdb.record_heartbeat`` for each trial of ``trial_ids``, in one transaction: a new row at
    the database's current time, or the row a trial has moved to it. Where another process beat
    for one of them meanwhile (its check of the trials that never beat: unique row per trial), each
    is beaten as Optuna beats it."""
    if not trial_ids:
        return
    try:
        with rdb.engine.begin() as conn:
            have = set(conn.scalars(select(_BEATS.c.trial_id).where(_BEATS.c.trial_id.in_(trial_ids))))
            if have:
                conn.execute(update(_BEATS).where(_BEATS.c.trial_id.in_(have)).values(heartbeat=func.now()))
            if new := [{"trial_id": tid, "heartbeat": func.current_timestamp()} for tid in trial_ids if tid not in have]:
                conn.execute(insert(_BEATS).values(new))  # one statement (an executemany that fails logs its pipeline)
    except IntegrityError:
        for tid in trial_ids:
            rdb.record_heartbeat(tid)


class _Deferred:
    """A trial's storage while :func:`one_write` runs: parameter and user-attr writes are kept,
    everything else (reads, system attrs) goes to the storage."""

    def __init__(self, storage: optuna.storages.BaseStorage, trial_id: int) -> None:
        self._storage, self._trial_id = storage, trial_id
        self.params: dict[str, tuple[float, BaseDistribution]] = {}
        self.user_attrs: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    def set_trial_param(self, trial_id: int, name: str, internal: float, distribution: BaseDistribution) -> None:
        assert trial_id == self._trial_id
        self.params[name] = (internal, distribution)

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        assert trial_id == self._trial_id
        self.user_attrs[key] = value


@contextmanager
def one_write(trial: optuna.Trial, rdb: optuna.storages.RDBStorage, trial_id: int) -> Iterator[optuna.Trial]:
    """Within the block, ``trial``'s ``suggest_*`` and ``set_user_attr`` are written together at
    its end, in one transaction of ``rdb`` (the storage of ``trial_id``); an error in the block
    writes none of them, and neither does a trial no longer RUNNING (``UpdateFinishedTrialError``)."""
    with one_write_all([(trial, trial_id)], rdb) as lost:
        yield trial
    if lost:
        raise UpdateFinishedTrialError(f"trial {trial_id} is not RUNNING: its parameters were not written")


@contextmanager
def one_write_all(trials: Sequence[tuple[optuna.Trial, int]], rdb: optuna.storages.RDBStorage) -> Iterator[list[int]]:
    """:func:`one_write` for several trials (each with its storage id) at once: what the block
    sets on them is written at its end in one transaction, a batch's worth of parameters in one
    instead of a transaction a trial (issue 35). The list it yields then holds the storage ids of
    those no longer RUNNING, to which nothing was written."""
    real = [trial.storage for trial, _ in trials]
    kept = [_Deferred(storage, tid) for storage, (_, tid) in zip(real, trials, strict=True)]
    for (trial, _), deferred in zip(trials, kept, strict=True):
        trial.storage = deferred  # type: ignore[assignment]
    lost: list[int] = []
    try:
        yield lost
    finally:
        for (trial, _), storage in zip(trials, real, strict=True):
            trial.storage = storage
    lost += _write(rdb, [k for k in kept if k.params or k.user_attrs])


def _write(rdb: optuna.storages.RDBStorage, kept: Sequence[_Deferred]) -> list[int]:
    """Insert the parameters and user attrs (replacing attrs of the same keys) that ``kept`` hold
    for their trials, those still RUNNING, in one transaction, the trials' rows locked against a
    worker failing them meanwhile; the storage ids of the others, to which nothing was written."""
    if not kept:
        return []
    with rdb.engine.begin() as conn:
        running = _running(conn, [k._trial_id for k in kept])
        live = [k for k in kept if k._trial_id in running]
        params = [{"trial_id": k._trial_id, "param_name": n, "param_value": v, "distribution_json": distribution_to_json(d)}
                  for k in live for n, (v, d) in k.params.items()]
        if params:
            conn.execute(insert(_PARAMS), params)
        _replace(conn, _ATTRS, [(k._trial_id, key, v) for k in live for key, v in k.user_attrs.items()])
    return [k._trial_id for k in kept if k._trial_id not in running]


def _running(conn: Connection, trial_ids: Sequence[int]) -> set[int]:
    """Those of ``trial_ids`` that are RUNNING, their rows locked until the transaction ends."""
    rows = conn.execute(select(_TRIALS.c.trial_id, _TRIALS.c.state).where(_TRIALS.c.trial_id.in_(trial_ids))
                        .with_for_update())
    return {tid for tid, state in rows if state == TrialState.RUNNING.name}


def _replace(conn: Connection, attrs: TableClause, rows: Sequence[tuple[int, str, Any]]) -> None:
    """Write ``(trial id, key, value)`` rows into an attribute table, each replacing the row of the
    same trial and key (one delete for the trials that set the same keys)."""
    keys: dict[int, list[str]] = {}
    for t, k, _ in rows:
        keys.setdefault(t, []).append(k)
    trials_of: dict[tuple[str, ...], list[int]] = {}
    for t, names in keys.items():
        trials_of.setdefault(tuple(names), []).append(t)
    for same, ts in trials_of.items():
        conn.execute(delete(attrs).where(attrs.c.trial_id.in_(ts), attrs.c.key.in_(same)))
    if rows:
        conn.execute(insert(attrs), [{"trial_id": t, "key": k, "value_json": json.dumps(v)} for t, k, v in rows])


def mark(rdb: optuna.storages.RDBStorage, attrs: Mapping[int, Mapping[str, Any]]) -> list[int]:
    """Set the system attrs ``attrs[trial_id]`` (key -> value) on each of those trials that is
    still RUNNING, in one transaction of ``rdb`` (their rows locked against a worker failing them
    meanwhile), as ``set_trial_system_attr`` would one by one; returns the ids of the others, to
    which nothing was written (Optuna's write would have raised ``UpdateFinishedTrialError``)."""
    if not attrs:
        return []
    with rdb.engine.begin() as conn:
        running = _running(conn, list(attrs))
        _replace(conn, _SYSTEM_ATTRS, [(tid, k, v) for tid, kv in attrs.items() if tid in running for k, v in kv.items()])
    return [tid for tid in attrs if tid not in running]


@contextmanager
def queue_empty(study: optuna.Study) -> Iterator[None]:
    """``study.ask()`` in the block creates a new trial without reading the queue of WAITING
    trials (the caller knows of none left to pop)."""
    study._pop_waiting_trial_id = lambda: None  # type: ignore[method-assign]  # shadows the method
    try:
        yield
    finally:
        del study._pop_waiting_trial_id

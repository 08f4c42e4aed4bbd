"""Which trials are alive, and what happens to the trials of a worker that died: Optuna's heartbeat.

Any number of ``evo run`` processes (on one host or many) share a study, so a trial is never
judged by who asked it: a worker records an Optuna heartbeat for each of its trials the moment
it asks for it, and a :class:`Heartbeat` thread keeps recording one every ``heartbeat_interval``
seconds while it runs (the RDB storage's heartbeat table, the one ``Study.optimize`` uses;
ask-and-tell must beat for itself). Every half heartbeat interval, and before every batch, each
worker calls :func:`recover` (:mod:`evo.search.liveness`), which runs Optuna's
``fail_stale_trials``: a RUNNING trial whose last heartbeat is older than the
grace period, by the database server's clock, is marked FAIL by exactly one worker (the state
change is a locked row update), and the storage's stale-trial callback, :class:`Retry`,
enqueues its candidate again (``evo:retry_of``: the first trial of the chain; ``evo:retries``:
every trial it retries). A retried candidate already measured before its worker died is
answered from the store. A trial retried ``max_retry`` times in a row is given up.

A trial that never got its first heartbeat (its worker died in the milliseconds between
Optuna's ask and the first beat) is invisible to ``fail_stale_trials``; :func:`recover` records
one heartbeat for it, so it goes stale and is retried like any other once the grace period
passes, and a live owner is unaffected (its own thread keeps beating).

A worker's run (``evo_runs``) is judged the same way, so that a worker that dies holding no
trial is found too: it starts with a lease of one grace period, the :class:`Heartbeat` renews
it with every beat, and :meth:`~evo.store.Store.fail_expired_runs` (every worker, on the same
schedule) marks ``failed`` a run still ``running`` past its lease.

Ctrl-C or an error in a worker releases its own open trials at once (:func:`release`: FAIL,
status ``abandoned``, enqueued again). Trials given up this way or by the heartbeat, and
trials that were retried, do not count toward ``--trials`` (:func:`counted`).
"""

from __future__ import annotations

import functools
import logging
import threading
import warnings
from collections.abc import Callable, Iterable, Sequence

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from evo.search.internals import beat, unbeaten
from evo.search.params import IMPORTED_FROM
from evo.search.proposal import RETRY_OF, drawn_params

log = logging.getLogger("evo")

RUN = "evo:run"
RETRIES = "evo:retries"
STATUS = "status"
REASON = "reason"
ABANDONED = "abandoned"
MAX_RETRY = 3


def given_up(trials: Sequence[FrozenTrial]) -> set[int]:
    """Numbers of the FAIL trials that are not outcomes: released or failed by the heartbeat
    (no status of their own, or ``abandoned``), or retried by a later trial."""
    retried = {n for t in trials for n in t.user_attrs.get(RETRIES, ())}
    return {t.number for t in trials if t.state == TrialState.FAIL
            and (t.number in retried or t.user_attrs.get(STATUS, ABANDONED) == ABANDONED)}


def counted(trials: Sequence[FrozenTrial]) -> int:
    """How many trials count toward ``--trials``: finished (complete, pruned after their screen,
    or failed), and not given up."""
    gone = given_up(trials)
    return sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED)
               or (t.state == TrialState.FAIL and t.number not in gone) for t in trials)


def requeue(study: optuna.Study, t: FrozenTrial, max_retry: int = MAX_RETRY) -> bool:
    """Enqueue a failed trial's candidate again: its params, or those it was enqueued with (a
    retry that died before drawing them), or those of its stored proposal (a trial that died
    before writing them), and where an imported one came from (its lineage). False when it had
    proposed nothing yet, or when its chain of retries is ``max_retry`` long already."""
    params = drawn_params(t)
    chain = [*t.user_attrs.get(RETRIES, ()), t.number]
    if not params or len(chain) > max_retry:
        return False
    origin = {IMPORTED_FROM: t.user_attrs[IMPORTED_FROM]} if IMPORTED_FROM in t.user_attrs else {}
    study.enqueue_trial(params, user_attrs={RETRY_OF: chain[0], RETRIES: chain} | origin, skip_if_exists=False)
    return True


class Retry:
    """The storage's ``heartbeat_stale_trial_callback``: enqueue a stale trial's candidate
    again (:func:`requeue`), and keep the trial so that the worker that failed it can mark it
    failed in evo's store too (:meth:`drain`).

    Optuna's own ``RetryHeartbeatStaleTrialCallback`` copies the trial's params, user attrs
    and system attrs into the new trial; evo's samplers know a retry by its fixed params
    (``enqueue_trial``), and the dead trial's outcome attrs must not travel with it."""

    def __init__(self, max_retry: int = MAX_RETRY) -> None:
        self.max_retry = max_retry
        self._failed: list[tuple[str, FrozenTrial]] = []
        self._lock = threading.Lock()

    def __call__(self, study: optuna.Study, t: FrozenTrial) -> None:
        with self._lock:
            self._failed.append((study.study_name, t))
        requeue(study, t, self.max_retry)

    def drain(self, study_name: str) -> list[FrozenTrial]:
        """The trials of ``study_name`` this process failed as stale since the last call."""
        with self._lock:
            out = [t for name, t in self._failed if name == study_name]
            self._failed = [(name, t) for name, t in self._failed if name != study_name]
        return out


def recover(study: optuna.Study, storage: RDBStorage, retry: Retry) -> list[FrozenTrial]:
    """Fail the study's stale trials (Optuna's heartbeat check) and enqueue their candidates
    again; returns the trials this call failed. A RUNNING trial with no heartbeat at all gets
    one now, so that it goes stale after the grace period if nobody else beats for it."""
    for tid in unbeaten(storage, storage.get_study_id_from_name(study.study_name)):
        storage.record_heartbeat(tid)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    return retry.drain(study.study_name)


class Heartbeat:
    """Records an Optuna heartbeat for this process's running trials every ``interval_s``, and
    renews its run's lease with each beat (``renew``, e.g. :meth:`evo.store.Store.renew_run`):
    between trials too, so that a worker that dies holding none is still found dead.

    A beat that fails (the storage is unreachable or locked) is logged on the ``evo`` logger and
    retried at the next interval; while beats keep failing, :meth:`failing` says so, and the
    search reports it (its trials may meanwhile be failed as stale by another worker, which
    retries them: nothing is lost, but the run should not look healthy)."""

    def __init__(self, storage: optuna.storages.BaseStorage, interval_s: float,
                 renew: Callable[[], None] | None = None) -> None:
        self.storage, self.interval_s, self.renew = storage, interval_s, renew
        self._ids: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="evo-heartbeat", daemon=True)
        self._failures = 0            # beats failed in a row
        self._error: str | None = None

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def add(self, trial_id: int) -> None:
        """Beat for ``trial_id`` now and from now on."""
        with self._lock:
            self._ids.add(trial_id)
        self.storage.record_heartbeat(trial_id)  # type: ignore[attr-defined]

    def add_all(self, trial_ids: Sequence[int]) -> None:
        """:meth:`add` for several trials, their first beats in one write where the storage is an
        RDB storage (:func:`~evo.search.internals.beat`: a batch's asks took a transaction each)."""
        with self._lock:
            self._ids.update(trial_ids)
        if isinstance(self.storage, RDBStorage):
            beat(self.storage, trial_ids)
            return
        for tid in trial_ids:
            self.storage.record_heartbeat(tid)  # type: ignore[attr-defined]

    def discard(self, trial_id: int) -> None:
        with self._lock:
            self._ids.discard(trial_id)

    def owned(self) -> set[int]:
        with self._lock:
            return set(self._ids)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.beat()

    def beat(self) -> None:
        """One beat for every owned trial and for the run (the thread's step; callable directly)."""
        beats: list[tuple[str, Callable[[], None]]] = [
            (f"trial {tid}", functools.partial(self.storage.record_heartbeat, tid))  # type: ignore[attr-defined]
            for tid in self.owned()]
        if self.renew is not None:
            beats.append(("the run", self.renew))
        for what, record in beats:
            try:
                record()
            except Exception as exc:  # noqa: BLE001 - any storage error: logged, surfaced, retried
                with self._lock:
                    self._failures += 1
                    self._error = f"{type(exc).__name__}: {exc}"
                log.warning("heartbeat for %s failed (%d in a row): %s", what, self._failures, self._error)
            else:
                with self._lock:
                    self._failures, self._error = 0, None

    def failing(self) -> str | None:
        """Why heartbeats are failing now (None while they succeed)."""
        with self._lock:
            if not self._failures:
                return None
            return (f"{self._failures} heartbeat(s) in a row failed ({self._error}); if this lasts past the "
                    "grace period, other workers fail and retry this worker's trials and mark its run failed")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def release(study: optuna.Study, storage: optuna.storages.BaseStorage, trial_ids: Iterable[int], why: str,
            max_retry: int = MAX_RETRY) -> list[FrozenTrial]:
    """Give up this process's own unfinished trials (Ctrl-C, an error): FAIL, status
    ``abandoned`` with ``why``, candidate enqueued again. Returns the trials released."""
    out = []
    for tid in trial_ids:
        t = storage.get_trial(tid)
        if t.state != TrialState.RUNNING:
            continue
        try:
            storage.set_trial_user_attr(tid, STATUS, ABANDONED)
            storage.set_trial_user_attr(tid, REASON, why)
            if not storage.set_trial_state_values(tid, TrialState.FAIL):
                continue
        except UpdateFinishedTrialError:  # failed as stale by another worker meanwhile
            continue
        t = storage.get_trial(tid)
        requeue(study, t, max_retry)
        out.append(t)
    return out

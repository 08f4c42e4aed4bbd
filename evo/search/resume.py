"""Who owns a running trial, its heartbeat, and what happens to trials left by a dead process.

Every trial ``evo run`` asks for is stamped with its owner (host, pid, process start time)
and run id, and a background thread records an Optuna heartbeat for it while it runs. When a
run starts (or is interrupted), a RUNNING trial whose owner is gone -- its process no longer
exists on this host, or its heartbeat is older than the grace period (any host) -- is marked
FAIL with status ``abandoned`` and its params are enqueued again, so the candidate is retried
(and answered from the store if it was evaluated before the owner died). Abandoned trials do
not count toward ``--trials``.
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
import threading
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState

from evo.search.proposal import RETRY_OF

OWNER = "evo:owner"
RUN = "evo:run"
STATUS = "status"
REASON = "reason"
ABANDONED = "abandoned"


def _start_ticks(pid: int) -> str:
    """The process start time from /proc (Linux), so a recycled pid is not mistaken for ours."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19]


def me() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": _start_ticks(os.getpid())}


def owner_alive(owner: dict[str, Any]) -> bool | None:
    """True/False for an owner on this host; None when it ran elsewhere (heartbeat decides)."""
    if owner.get("host") != socket.gethostname():
        return None
    pid = int(owner.get("pid", -1))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    start = owner.get("start", "")
    return not start or _start_ticks(pid) in ("", start)


def counts(t: FrozenTrial) -> bool:
    """Whether a trial counts toward ``--trials``: finished and not abandoned."""
    if t.state == TrialState.COMPLETE:
        return True
    return t.state == TrialState.FAIL and t.user_attrs.get(STATUS, ABANDONED) != ABANDONED


def requeue(study: optuna.Study, t: FrozenTrial) -> None:
    """Enqueue an abandoned trial's params again: its own, or those it was enqueued with (a retry
    abandoned before it drew them); a trial with neither had proposed nothing yet."""
    params = t.params or t.system_attrs.get("fixed_params")
    if params:
        origin = t.user_attrs.get(RETRY_OF, t.number)
        study.enqueue_trial(params, user_attrs={RETRY_OF: origin}, skip_if_exists=False)


def abandon(study: optuna.Study, t: FrozenTrial, why: str) -> bool:
    """Mark one RUNNING trial FAIL/abandoned and re-enqueue it; False if someone else finished it."""
    storage = study._storage
    try:
        storage.set_trial_user_attr(t._trial_id, STATUS, ABANDONED)
        storage.set_trial_user_attr(t._trial_id, REASON, why)
        if not storage.set_trial_state_values(t._trial_id, TrialState.FAIL):
            return False
    except UpdateFinishedTrialError:
        return False
    requeue(study, t)
    return True


def recover(study: optuna.Study, grace_s: float, now: Callable[[], _dt.datetime] | None = None) -> list[FrozenTrial]:
    """Abandon and re-enqueue every RUNNING trial whose owner is dead; returns those trials.

    Owners on this host are checked by pid. A trial whose heartbeat is staler than the
    storage's grace period (any host) is failed by Optuna's ``fail_stale_trials`` and
    re-enqueued by the storage's stale-trial callback (:func:`stale_callback`). A trial with no
    owner and no params was killed between Optuna's ask and the owner stamp: it is abandoned at
    once (an asker still alive finds its trial failed and asks again, see ``Search._ask``); one
    with params but no owner (not asked by evo run) once it is older than ``grace_s``.
    """
    running = [t._trial_id for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    out = [t for t in map(study._storage.get_trial, running)
           if t.state == TrialState.FAIL and STATUS not in t.user_attrs]
    clock = now or (lambda: _dt.datetime.now())
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = t.system_attrs.get(OWNER)
        if owner is not None:
            if owner_alive(owner) is not False:
                continue
            why = f"left running by pid {owner.get('pid')} on {owner.get('host')}, which is gone"
        elif t.params:  # params but no owner: not asked by evo run; wait out the grace period
            started = t.datetime_start
            if started is None or (clock() - started).total_seconds() < grace_s:
                continue
            why = "left running with no owner"
        else:  # killed between ask and the owner stamp; a live asker finds it failed and re-asks
            why = "left running before its owner was stamped"
        if abandon(study, t, why):
            out.append(study._storage.get_trial(t._trial_id))
    return out


def stale_callback(study: optuna.Study, t: FrozenTrial) -> None:
    """RDBStorage ``heartbeat_stale_trial_callback``: re-enqueue a trial whose heartbeat stopped
    (it is already FAIL; its missing ``status`` attr marks it abandoned)."""
    requeue(study, t)


class Heartbeat:
    """Records an Optuna heartbeat for this process's running trials every ``interval_s``."""

    def __init__(self, storage: optuna.storages.BaseStorage, interval_s: float) -> None:
        self.storage, self.interval_s = storage, interval_s
        self._ids: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="evo-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def add(self, trial_id: int) -> None:
        with self._lock:
            self._ids.add(trial_id)
        self.storage.record_heartbeat(trial_id)  # type: ignore[attr-defined]

    def discard(self, trial_id: int) -> None:
        with self._lock:
            self._ids.discard(trial_id)

    def owned(self) -> set[int]:
        with self._lock:
            return set(self._ids)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            for tid in self.owned():
                try:
                    self.storage.record_heartbeat(tid)  # type: ignore[attr-defined]
                except Exception:  # noqa: BLE001 - a missed beat is retried next interval
                    pass

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def release(study: optuna.Study, trial_ids: Iterable[int], why: str) -> list[FrozenTrial]:
    """Abandon and re-enqueue this process's own unfinished trials (Ctrl-C, an error)."""
    out = []
    for tid in trial_ids:
        t = study._storage.get_trial(tid)
        if t.state == TrialState.RUNNING and abandon(study, t, why):
            out.append(study._storage.get_trial(tid))
    return out

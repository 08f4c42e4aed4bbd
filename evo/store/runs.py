"""Runs (``evo_runs``): every command that writes, how it ended, and the lease of a live worker.

A worker's run holds a lease, ``alive_until``, that its heartbeat keeps pushing ahead; a run
still ``running`` past its lease belongs to a dead worker (docs/scale-out.md). Leases are read
and written on the database server's clock, so hosts whose clocks differ compare alike.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, select, update
from sqlalchemy.orm import Session

from evo import paths
from evo.errors import EvoError
from evo.store.base import StoreBase
from evo.store.convert import run_view
from evo.store.models import Run, utcnow
from evo.store.views import RunView

RUN_STATUSES = ("running", "done", "failed", "interrupted")


class RunStore(StoreBase):
    """The runs part of :class:`evo.store.Store`."""

    def start_run(self, command: str, *, study: str | None = None, options: Mapping[str, Any] | None = None,
                  device: Mapping[str, Any] | None = None, lease_s: float | None = None) -> int:
        """Record the start of a command that writes; returns the run id. With ``lease_s`` the
        run holds a lease of that many seconds, which its worker's heartbeat keeps renewing
        (:meth:`renew_run`); past it, the run counts as dead (:meth:`fail_expired_runs`)."""
        with self._tx() as s:
            run = Run(study=study, command=command, options=dict(options or {}), git_sha=paths.git_sha(),
                      host=socket.gethostname(), device=dict(device or {}), status="running",
                      alive_until=None if lease_s is None else _lease_end(s, lease_s))
            s.add(run)
            s.flush()
            return run.id

    def finish_run(self, run_id: int, status: str = "done") -> None:
        if status not in RUN_STATUSES:
            raise EvoError(f"unknown run status {status!r}; one of {', '.join(RUN_STATUSES)}")
        with self._tx() as s:
            run = s.get(Run, run_id)
            if run is None:
                raise EvoError(f"no run {run_id}")
            run.status, run.finished = status, utcnow()

    def renew_run(self, run_id: int, lease_s: float) -> None:
        """Extend the run's lease to ``lease_s`` seconds from now (a worker's heartbeat)."""
        with self._tx() as s:
            s.execute(update(Run).where(Run.id == run_id).values(alive_until=_lease_end(s, lease_s)))

    def fail_expired_runs(self) -> list[int]:
        """Mark ``failed`` every run still ``running`` past its lease: its worker died without
        finishing it (killed, crashed, host lost), with or without a trial in flight. Returns
        the ids this call failed. Every worker calls this on its liveness schedule, so the write
        lock is taken only when a read found such a run."""
        with self._read() as s:
            if s.scalar(_expired_ids(server_now(s)).limit(1)) is None:
                return []
        with self._tx() as s:
            ids = list(s.scalars(_expired_ids(server_now(s))))
            if ids:
                s.execute(update(Run).where(Run.id.in_(ids)).values(status="failed", finished=utcnow()))
            return ids

    @contextmanager
    def recording(self, command: str, *, study: str | None = None, options: Mapping[str, Any] | None = None,
                  device: Mapping[str, Any] | None = None, lease_s: float | None = None) -> Iterator[int]:
        """Record one command as a run around the block (the one run-bookkeeping path of every
        command that writes): ``done`` when the block ends, ``interrupted`` on Ctrl-C
        (KeyboardInterrupt), ``failed`` on any other exception, which goes on up. ``lease_s``:
        see :meth:`start_run` (a process that is killed never reaches the end of the block)."""
        run_id = self.start_run(command, study=study, options=options, device=device, lease_s=lease_s)
        status = "failed"
        try:
            yield run_id
            status = "done"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            self.finish_run(run_id, status)

    def get_run(self, run_id: int) -> RunView | None:
        with self._read() as s:
            row = s.execute(_with_expiry(server_now(s)).where(Run.id == run_id)).first()
            return None if row is None else run_view(*row)

    def runs(self, study: str) -> list[RunView]:
        """The study's runs, oldest first (the server's clock read once for all of them)."""
        with self._read() as s:
            rows = s.execute(_with_expiry(server_now(s)).where(Run.study == study).order_by(Run.id))
            return [run_view(r, expired) for r, expired in rows]


def server_now(s: Session) -> datetime:
    """The database server's clock (as Optuna's heartbeats use it), so that leases written by
    hosts whose clocks differ compare alike. SQLite's is UTC, to the second."""
    now = s.scalar(select(func.now()))
    assert now is not None
    return now


def _lease_end(s: Session, lease_s: float) -> datetime:
    return server_now(s) + timedelta(seconds=lease_s)


def _lease_expired(now: datetime) -> Any:
    """The one rule for a dead run: still ``running`` and its lease ended before ``now`` (the
    server's clock, :func:`server_now`); NULL, read as not expired, for a run without a lease."""
    return and_(Run.status == "running", Run.alive_until < now)


def _expired_ids(now: datetime) -> Any:
    """Select of the ids of runs whose lease has expired by ``now``, oldest first."""
    return select(Run.id).where(_lease_expired(now)).order_by(Run.id)


def _with_expiry(now: datetime) -> Any:
    """Select of runs, each with whether its lease has expired by ``now``."""
    return select(Run, _lease_expired(now))

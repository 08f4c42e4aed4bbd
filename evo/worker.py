"""Crash-isolated GPU workers: one child process per GPU, supervised from a parent that never
touches CUDA (DESIGN.md, crash isolation).

A CUDA fault poisons a context for good, so GREEN and FAST run in a ``spawn``ed child that
sees exactly one GPU. The parent sends a picklable :class:`EvalRequest` over a pipe and waits
for the :class:`~evo.results.Evaluation`; a child that dies meanwhile yields ``crashed``, one
that does not answer in time is killed (SIGKILL) and yields ``timeout``, and either way a
fresh child takes its place. :class:`WorkerPool` runs one request per GPU at a time.

The child runs ``target`` ("module:function", default :func:`evo.evaluate.serve`) with its
end of the pipe after a ready handshake, so start-up time (importing torch) never counts
against a request's budget. A target loops: receive a request, send an Evaluation; ``None``
or a closed pipe means stop. Tests swap in CPU stand-ins as targets.
"""

from __future__ import annotations

import importlib
import multiprocessing
import multiprocessing.connection
import os
import queue
import subprocess
import sys
import traceback
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from evo import smi
from evo.errors import EvoError
from evo.render import Entry
from evo.results import Evaluation, Shape, Status

DEFAULT_TARGET = "evo.evaluate:serve"
START_TIMEOUT_S = 300.0      # importing torch and creating a context on a busy host
STOP_TIMEOUT_S = 5.0
_READY = "ready"
_FAILED = "failed"


@dataclass(frozen=True)
class EvalRequest:
    """What a worker needs to gate and time one built candidate (picklable, no torch).

    ``options`` (all optional): ``salt`` (int, mixed into GREEN's seeds), ``quick`` (bool,
    fewer rounds for searches), ``rounds`` / ``reps`` (FAST sampling), ``baseline_every``
    (re-measure cached SDPA baselines after this many evaluations), ``interleave`` (time the
    baselines alongside the candidate instead of using the cache), ``backends`` (SDPA
    backends to compare with), ``package`` (time an installed promoted package instead of
    the cubin), ``gemm`` (also measure the GEMM yardstick).
    """

    build_id: str
    cubin_path: str
    entries: tuple[Entry, ...]
    green: bool = True
    fast_cases: tuple[Shape, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)


def _child_env(device: int) -> str:
    """CUDA_VISIBLE_DEVICES for a child that should see only the parent's ``device``-th GPU."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return str(device)
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if not 0 <= device < len(ids):
        raise EvoError(f"GPU {device} is not visible (CUDA_VISIBLE_DEVICES={visible})")
    return ids[device]


def _bootstrap(target: str, conn: multiprocessing.connection.Connection, env: dict[str, str]) -> None:
    """Child entry point: set up the environment, import the target, say ready, serve."""
    os.environ.update(env)
    try:
        module, _, name = target.partition(":")
        serve = getattr(importlib.import_module(module), name)
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises it as EvoError
        conn.send((_FAILED, traceback.format_exc(limit=3)))
        return
    conn.send((_READY, os.getpid()))
    serve(conn)


def gpu_count() -> int:
    """Visible CUDA GPUs, counted without initialising CUDA in this process."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not visible.strip():
        return 0
    found = len(smi.query("index") or [])
    if found:
        ids = [v for v in (visible or "").split(",") if v.strip()]
        return min(found, len(ids)) if visible is not None else found
    probe = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
        return int(out.stdout.strip() or 0)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return 0


def require_gpu() -> int:
    """The number of visible GPUs, or a one-line EvoError when there is none."""
    n = gpu_count()
    if n == 0:
        raise EvoError("no CUDA GPU: GREEN and FAST need one (evo build compiles without)")
    return n


class Worker:
    """One supervised child process bound to one GPU."""

    def __init__(self, device: int, target: str = DEFAULT_TARGET, env: Mapping[str, str] | None = None):
        self.device = device
        self.target = target
        self.env = {"CUDA_VISIBLE_DEVICES": _child_env(device), **(env or {})}
        self.restarts = 0
        self._ctx = multiprocessing.get_context("spawn")
        self._proc: multiprocessing.process.BaseProcess | None = None
        self._conn: multiprocessing.connection.Connection | None = None
        self._ready = False
        self._start()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def _start(self) -> None:
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=_bootstrap, args=(self.target, child, self.env),
                                 name=f"evo-worker-gpu{self.device}", daemon=True)
        proc.start()
        child.close()  # the parent keeps only its end, so a dead child reads as EOF
        self._proc, self._conn, self._ready = proc, parent, False

    def _await_ready(self) -> None:
        """Wait for the handshake; a target that cannot even import is a setup error."""
        assert self._conn is not None and self._proc is not None
        ready = multiprocessing.connection.wait([self._conn, self._proc.sentinel], START_TIMEOUT_S)
        if self._conn in ready:
            try:
                kind, detail = self._conn.recv()
            except (EOFError, OSError):
                kind, detail = _FAILED, f"exit code {self._proc.exitcode}"
        else:
            kind, detail = _FAILED, ("exit code " + str(self._proc.exitcode)) if ready else "no answer"
        if kind != _READY:
            self._stop(kill=True)
            raise EvoError(f"GPU worker {self.device} ({self.target}) failed to start: "
                           f"{str(detail).strip().splitlines()[-1]}")
        self._ready = True

    def _restart(self) -> None:
        self._stop(kill=True)
        self.restarts += 1
        self._start()

    def _stop(self, kill: bool) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is None:
            return
        if not kill and conn is not None:
            try:
                conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            proc.join(STOP_TIMEOUT_S)
        if proc.is_alive():
            proc.kill()
            proc.join()
        if conn is not None:
            conn.close()
        proc.close()

    def evaluate(self, request: EvalRequest, timeout_s: float) -> Evaluation:
        """Run ``request`` in the child; CRASHED / TIMEOUT (and a fresh child) on failure."""
        if self._proc is None:
            self._start()
        if not self._ready:
            self._await_ready()
        assert self._conn is not None and self._proc is not None
        try:
            self._conn.send(request)
        except (OSError, BrokenPipeError):
            return self._lost(request, "worker died before the request")
        ready = multiprocessing.connection.wait([self._conn, self._proc.sentinel], timeout_s)
        if self._conn in ready:  # an answer wins over a death that follows it
            try:
                result = self._conn.recv()
            except (EOFError, OSError):
                return self._lost(request, "worker died")
            if result.status is Status.CRASHED:  # the child exits after a CUDA fault
                self._restart()
            return result
        if ready:
            return self._lost(request, "worker died")
        self._restart()
        return Evaluation(request.build_id, Status.TIMEOUT,
                          f"no answer within {timeout_s:g} s on GPU {self.device}; worker killed")

    def _lost(self, request: EvalRequest, what: str) -> Evaluation:
        assert self._proc is not None
        self._proc.join(STOP_TIMEOUT_S)
        code = self._proc.exitcode
        signal = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        self._restart()
        return Evaluation(request.build_id, Status.CRASHED, f"{what} ({signal}) on GPU {self.device}")

    def close(self) -> None:
        """Ask the child to stop, kill it if it does not."""
        self._stop(kill=False)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class WorkerPool:
    """One :class:`Worker` per GPU; requests go to whichever worker is idle."""

    def __init__(self, devices: Sequence[int] | None = None, target: str = DEFAULT_TARGET,
                 env: Mapping[str, str] | None = None):
        if devices is None:
            devices = range(require_gpu())
        if not devices:
            raise EvoError("a worker pool needs at least one GPU")
        self.workers = [Worker(d, target, env) for d in devices]
        self._idle: queue.SimpleQueue[Worker] = queue.SimpleQueue()
        for w in self.workers:
            self._idle.put(w)
        self._threads = ThreadPoolExecutor(max_workers=len(self.workers), thread_name_prefix="evo-worker")

    def __len__(self) -> int:
        return len(self.workers)

    def _run(self, request: EvalRequest, timeout_s: float) -> Evaluation:
        worker = self._idle.get()
        try:
            return worker.evaluate(request, timeout_s)
        finally:
            self._idle.put(worker)

    def submit(self, request: EvalRequest, timeout_s: float) -> Future[Evaluation]:
        """Queue ``request`` for the next idle worker."""
        return self._threads.submit(self._run, request, timeout_s)

    def map(self, requests: Iterable[EvalRequest], timeout_s: float) -> Iterator[Evaluation]:
        """Evaluate ``requests`` concurrently (one per worker), yielding results in input order."""
        futures = [self.submit(r, timeout_s) for r in requests]
        try:
            for f in futures:
                yield f.result()
        finally:
            for f in futures:
                f.cancel()

    def close(self) -> None:
        """Finish running requests, drop queued ones, stop every child."""
        self._threads.shutdown(wait=True, cancel_futures=True)
        for w in self.workers:
            w.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""Crash-isolated GPU workers: one child process per GPU, supervised from a parent that never
touches CUDA (docs/design.md, crash isolation).

A CUDA fault poisons a context for good, so GREEN and FAST run in a ``spawn``ed child that
sees exactly one GPU. The parent sends a picklable :class:`EvalRequest` over a pipe and waits
for the :class:`~evo.results.Evaluation`; a child that dies meanwhile yields ``crashed``, one
that does not answer in time is killed (SIGKILL) and yields ``timeout``, and either way a
fresh child takes its place. :class:`WorkerPool` runs one request per GPU at a time.

Before a request reaches a child, its launch configs are checked against its build
(:func:`evo.toolchain.build.launch_problems`): a launch that cannot be set up is ``resource_rejected``
with the reason, and no child is involved, let alone killed.

The child runs ``target`` ("module:function", default :func:`evo.gpu.evaluate.serve`) with its
end of the pipe. A target loops: receive a request, send an Evaluation; ``None`` or a closed
pipe means stop. The child tells the parent it is ready when the target first asks for a
request, so whatever the target does before that (importing torch, creating the CUDA context)
is start-up and never counts against a request's budget. While it works the child may report
:func:`progress`; a request that runs out of budget is then told apart as *stuck* (nothing
reported for at least half the budget: a launch that did not return) or *slow* (still
reporting when the budget ran out). A request that reports nothing for ``stall_s`` (default
``STALL_S``) is stuck whatever budget is left: a deadlocked kernel never returns, and waiting
out a search's five-minute budget for it stalled whole GPU searches (2026-11-23: one
flash_wgmma candidate held an H100 search for its last four minutes). Tests swap in CPU
stand-ins as targets.

A child is handed the cached baselines the parent knows for the request's cases
(``options["carried_baselines"]``, per rung: :mod:`evo.gpu.baselines`): those its predecessors
on this GPU measured (each answer names the ones it measured, ``baselines_measured``) and those
the host's other workers measured, which the search hands in through :meth:`Worker.share`. So a
crash or a stuck kernel costs the search a restart, not a re-measurement of every baseline
(about 50 s on an H100 for 16 cases), and the workers of a host measure each baseline once.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import json
import multiprocessing
import multiprocessing.connection
import os
import queue
import subprocess
import sys
import time
import traceback
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from evo.toolchain import smi
from evo.toolchain.build import launch_problems
from evo.errors import EvoError
from evo.family.render import Entry
from evo.results import Evaluation, Shape, Status, Timing
from evo.vocab import EVO

DEFAULT_TARGET = "evo.gpu.evaluate:serve"
START_TIMEOUT_S = 300.0      # importing torch and creating a context on a busy host
STOP_TIMEOUT_S = 5.0
STUCK_FRACTION = 0.5         # of the budget without progress: a step that did not return
STALL_S = 30.0               # this long without progress: stuck, whatever budget is left (FAST reports
                             # each op's samples in each round, GREEN each launch: seconds apart)
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
    the cubin), ``gemm`` (also measure the GEMM yardstick), ``read_bytes`` (also measure the read
    ceiling on buffers of at least this many bytes: :func:`evo.gpu.bandwidth.read_ceiling`),
    ``rung`` (a search's ``screen`` or ``full``: :mod:`evo.gpu.evaluate`), ``first_failure``
    (GREEN stops at its first failing check), ``screen_baseline_every``, ``prime`` (no candidate:
    measure the rung's cached baselines on ``fast_cases``, :func:`evo.gpu.evaluate.prime`),
    ``carried_baselines`` (set by :class:`Worker`).
    """

    build_id: str
    cubin_path: str
    entries: tuple[Entry, ...]
    green: bool = True
    fast_cases: tuple[Shape, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Progress:
    """A note the child sends while it works on a request (e.g. ``GREEN launch 3 ...``)."""

    note: str


class _Channel:
    """The child's end of the pipe as the target sees it: the first ``recv`` says ready, so
    everything the target did before asking for work is start-up; ``progress`` sends a note."""

    def __init__(self, conn: multiprocessing.connection.Connection) -> None:
        self._conn = conn
        self.ready = False

    def recv(self) -> Any:
        if not self.ready:
            self._conn.send((_READY, os.getpid()))
            self.ready = True
        return self._conn.recv()

    def send(self, obj: Any) -> None:
        self._conn.send(obj)

    def progress(self, note: str) -> None:
        if self.ready:  # during start-up the parent waits for the handshake alone
            self._conn.send(Progress(note))


_channel: _Channel | None = None  # set in a worker child only


def progress(note: str) -> None:
    """Tell the parent what this worker child is doing now (a no-op in any other process)."""
    if _channel is not None:
        _channel.progress(note)


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
    """Child entry point: set up the environment, import the target and serve; a failure
    before the target first asks for a request is reported as a start-up failure."""
    global _channel
    os.environ.update(env)
    channel = _channel = _Channel(conn)
    try:
        module, _, name = target.partition(":")
        serve = getattr(importlib.import_module(module), name)
        serve(channel)
    except BaseException:  # noqa: BLE001 - before ready: reported, and raised as EvoError
        if channel.ready:
            raise
        conn.send((_FAILED, traceback.format_exc(limit=3)))


# Device nodes of an NVIDIA driver (Linux; WSL's GPU is /dev/dxg): where none exists, CUDA can see
# no GPU, and a CPU machine's `evo run` skips the probe (a subprocess importing torch, 3-6 s each).
DRIVER_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")


def gpu_count() -> int:
    """Visible CUDA GPUs, counted without initialising CUDA in this process."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not visible.strip():
        return 0
    found = len(smi.query("index") or [])
    if found:
        ids = [v for v in (visible or "").split(",") if v.strip()]
        return min(found, len(ids)) if visible is not None else found
    if not any(Path(node).exists() for node in DRIVER_NODES):
        return 0   # no driver to talk to: the torch probe below would spend seconds to say so
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
        self._baselines: dict[tuple[str, Shape, str], Timing] = {}   # (rung, shape, backend) -> the latest one
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
            with contextlib.suppress(OSError):  # the child is gone already: the join below ends at once
                conn.send(None)
            proc.join(STOP_TIMEOUT_S)
        if proc.is_alive():
            proc.kill()
            proc.join()
        if conn is not None:
            conn.close()
        # multiprocessing reaps finished children from whichever thread starts a process (another
        # worker's restart in a pool): our poll may then have met ECHILD before that thread stored
        # the exit code, and close() takes the child for running. It is gone either way; in that
        # race the handle is left to the garbage collector.
        with contextlib.suppress(ValueError):
            proc.close()

    def evaluate(self, request: EvalRequest, timeout_s: float, stall_s: float = STALL_S) -> Evaluation:
        """Run ``request`` in the child within ``timeout_s`` (counted from when the started child
        receives it) and with progress at least every ``stall_s``: RESOURCE_REJECTED, with no
        child involved, for a launch that cannot be set up; CRASHED / TIMEOUT (and a fresh
        child) on failure."""
        problems = launch_problems(request.build_id, request.entries)
        if problems:
            return Evaluation(request.build_id, Status.RESOURCE_REJECTED, "; ".join(problems))
        if self._proc is None:
            self._start()
        if not self._ready:
            self._await_ready()
        assert self._conn is not None and self._proc is not None
        carried = self._carried(request.fast_cases)
        if carried:
            request = replace(request, options={**request.options, "carried_baselines": carried})
        try:
            self._conn.send(request)
        except (OSError, BrokenPipeError):
            return self._lost(request, "worker died before the request")
        start = heard = time.monotonic()
        reports, last = 0, None
        while (left := min(start + timeout_s, heard + stall_s) - time.monotonic()) > 0:
            ready = multiprocessing.connection.wait([self._conn, self._proc.sentinel], left)
            if not ready:
                break
            if self._conn not in ready:  # an answer wins over a death that follows it
                return self._lost(request, "worker died")
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                return self._lost(request, "worker died")
            if isinstance(message, Progress):
                heard = time.monotonic()
                reports, last = reports + 1, (heard - start, message.note)
                continue
            if message.status is Status.CRASHED:  # the child exits after a CUDA fault
                self._restart()
            else:
                self.share(measured_baselines(message))
            return message
        now = time.monotonic()
        elapsed = now - start
        self._restart()
        if elapsed < timeout_s:  # the stall limit, not the budget, ran out
            since = f", since {last[1]!r}" if last else ""
            return Evaluation(request.build_id, Status.TIMEOUT,
                              f"no progress for {now - heard:.0f} s on GPU {self.device} ({elapsed:.0f} s "
                              f"into a {timeout_s:g} s budget); worker killed; stuck{since}: a step that did not return")
        return Evaluation(request.build_id, Status.TIMEOUT,
                          f"no answer within {timeout_s:g} s on GPU {self.device}; worker killed; "
                          + timeout_kind(timeout_s, elapsed, reports, last))

    def share(self, baselines: Mapping[str, Sequence[Timing]]) -> None:
        """Cached baselines measured on this GPU kind (per rung), by this worker's children or by
        the host's other workers: handed to the child with the requests that time their cases."""
        self._baselines |= {(rung, t.shape, t.backend): t for rung, ts in baselines.items() for t in ts}

    def _carried(self, cases: Sequence[Shape]) -> dict[str, list[Timing]]:
        """The known baselines of ``cases``, per rung."""
        wanted = set(cases)
        out: dict[str, list[Timing]] = {}
        for (rung, shape, _), t in self._baselines.items():
            if shape in wanted:
                out.setdefault(rung, []).append(t)
        return out

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


def measured_baselines(ev: Evaluation) -> dict[str, list[Timing]]:
    """The baseline Timings an evaluation names as measured for a worker's cache, per rung
    (its device info's ``baselines_measured``: ``{rung: ["tag|backend", ...]}``)."""
    named = json.loads(ev.device.get("baselines_measured", "{}"))
    by_key = {f"{t.shape.tag}|{t.backend}": t for t in ev.timings if t.backend != EVO}
    return {rung: [by_key[k] for k in keys if k in by_key] for rung, keys in named.items()}


def timeout_kind(budget_s: float, elapsed_s: float, reports: int, last: tuple[float, str] | None) -> str:
    """Whether a request that ran out of budget was stuck or slow, from the child's progress
    reports (``last``: seconds into the request and note of the newest one)."""
    if last is None:
        return f"stuck: no progress reported in {elapsed_s:.1f} s"
    at, note = last
    quiet = elapsed_s - at
    if quiet >= STUCK_FRACTION * budget_s:
        return f"stuck: no progress in the last {quiet:.1f} s, since {note!r}: a step that did not return"
    return (f"slow: still progressing ({reports} progress reports, the last {quiet:.1f} s before "
            f"the limit: {note!r})")


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

    def share(self, baselines: Mapping[str, Sequence[Timing]]) -> None:
        """:meth:`Worker.share` for every worker of the pool."""
        for w in self.workers:
            w.share(baselines)

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
        """Evaluate ``requests`` concurrently (one per worker), yielding results in input order.
        A request is drawn from ``requests`` only when a worker is free to start it, so a lazy
        iterable decides at each start whether another one follows (``evo run``'s time budget
        ends its batch that way)."""
        todo = iter(requests)
        drawn: collections.deque[Future[Evaluation]] = collections.deque()  # not yet yielded, in input order
        more = True
        try:
            while more or drawn:
                running = [f for f in drawn if not f.done()]
                if more and len(running) < len(self.workers):
                    request = next(todo, None)
                    more = request is not None
                    if request is not None:
                        drawn.append(self.submit(request, timeout_s))
                elif drawn[0].done():
                    yield drawn.popleft().result()
                else:
                    wait(running, return_when=FIRST_COMPLETED)
        finally:
            for f in drawn:
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

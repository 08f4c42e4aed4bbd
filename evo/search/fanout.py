"""``evo run --gpus LIST``: one worker process per GPU, all feeding one study.

Each listed GPU gets a worker, a process that runs :func:`evo.search.driver.run` for that GPU
(with its own crash-isolated GPU child, :mod:`evo.gpu.worker`). The workers share the study and
the lineage tables through the database exactly as workers on other hosts do
(docs/scale-out.md): Optuna's heartbeats, retries of a dead worker's trials, and the store's
claims, so that a candidate is built and evaluated once per kind of GPU. This parent only
starts them, shows their progress as one bar with notes tagged by GPU, and adds up their
summaries. It never touches CUDA.

- ``all``: every visible GPU; ``0,1``: those two; a GPU may be listed twice (``0,0``: two
  workers on GPU 0, a cheap way to try the machinery on one GPU; their timings disturb each
  other, so do not keep such a study's numbers).
- nvcc: the host's compile capacity (``--jobs``, default its CPU count) is shared out between
  the workers, so that N workers never start more than that many nvcc processes together.
- Seeds: worker i samples with ``--seed`` + i, so that workers given one seed do not propose
  the same candidates in lockstep.
"""

from __future__ import annotations

import collections
import multiprocessing
import queue
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import optuna

from evo import paths
from evo.errors import EvoError
from evo.search.driver import RunOptions, run
from evo.search.loop import Best, Outcome, Reporter, RunSummary
from evo.store.engine import POSTGRES_HINT, SQLITE_WORKERS, is_sqlite
from evo.gpu.worker import gpu_count
from evo.toolchain.build import cpus

STOP_POLL_S = 0.5


def start(opts: RunOptions, gpus: str | None, reporter: Reporter) -> RunSummary:
    """``evo run``: one worker in this process (one GPU, a recording, or build-only), or one
    worker process per GPU of ``gpus`` (default: every visible GPU when there are several)."""
    if gpus is not None and opts.replay is not None:
        raise EvoError("--gpus chooses GPUs to measure on; --replay measures nothing (leave one out)")
    devices = parse_gpus(gpus) if gpus is not None else None
    if devices is None and opts.replay is None and (n := gpu_count()) > 1:
        devices = list(range(n))
    if devices is None or len(devices) == 1:
        return run(replace(opts, gpu=devices[0] if devices else None), reporter)
    if is_sqlite(opts.db or paths.default_db_url()) and len(devices) > SQLITE_WORKERS:
        reporter.note(f"{len(devices)} workers on one SQLite file: {POSTGRES_HINT}")
    return run_workers(opts, devices, reporter)


def parse_gpus(spec: str, visible: int | None = None) -> list[int]:
    """GPU indices from ``all`` or a comma-separated list (repeats allowed); EvoError when a
    listed GPU is not visible or there is none."""
    n = gpu_count() if visible is None else visible
    text = spec.strip().lower()
    if text == "all":
        if n == 0:
            raise EvoError("--gpus all: no CUDA GPU is visible")
        return list(range(n))
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise EvoError(f"--gpus takes 'all' or GPU indices like 0,1, not {spec!r}") from None
    if not out:
        raise EvoError("--gpus is empty")
    bad = [d for d in out if not 0 <= d < n]
    if bad:
        raise EvoError(f"--gpus {spec}: GPU {bad[0]} is not visible ({n} GPU(s) visible: 0..{n - 1})"
                       if n else f"--gpus {spec}: no CUDA GPU is visible")
    return out


def tags(devices: Sequence[int]) -> list[str]:
    """How each worker is named in notes: ``gpu1``, or ``gpu0.1`` when a GPU has several."""
    seen = collections.Counter(devices)
    k: collections.Counter[int] = collections.Counter()
    out = []
    for d in devices:
        out.append(f"gpu{d}" if seen[d] == 1 else f"gpu{d}.{k[d]}")
        k[d] += 1
    return out


def worker_options(opts: RunOptions, devices: Sequence[int]) -> list[RunOptions]:
    """Each worker's options: its GPU, its share of nvcc jobs, its seed."""
    jobs = max(1, (opts.jobs or cpus()) // len(devices))
    return [replace(opts, gpu=d, jobs=jobs, seed=None if opts.seed is None else opts.seed + i)
            for i, d in enumerate(devices)]


class _Forward:
    """A worker's reporter: every event goes to the parent, tagged with the worker's name."""

    def __init__(self, events: Any, tag: str) -> None:
        self.events, self.tag = events, tag

    def start(self, total: int, done: int) -> None:
        self.events.put(("start", self.tag, (total, done)))

    def advance(self, number: int, outcome: Outcome, best: Best | None) -> None:
        self.events.put(("advance", self.tag, (number, outcome, best)))

    def note(self, text: str) -> None:
        self.events.put(("note", self.tag, text))


def _worker(opts: RunOptions, tag: str, events: Any, verbosity: int) -> None:
    """Process entry: run one worker; its summary (or its one-line error) goes to the parent."""
    optuna.logging.set_verbosity(verbosity)  # as the parent has it (a spawned child starts afresh)
    try:
        events.put(("done", tag, run(opts, _Forward(events, tag))))
    except EvoError as exc:
        events.put(("error", tag, str(exc)))
    except KeyboardInterrupt:
        events.put(("error", tag, "interrupted before the search started"))
    except Exception as exc:  # noqa: BLE001 - an evo bug in one worker: said, the others go on
        events.put(("error", tag, f"internal error: {type(exc).__name__}: {exc}"))


def run_workers(opts: RunOptions, devices: Sequence[int], reporter: Reporter) -> RunSummary:
    """Run one worker per entry of ``devices`` on the study of ``opts``; the summaries added up.
    Ctrl-C reaches the workers too (one process group): each gives its open trials back, and
    the summary comes back with ``interrupted`` set."""
    ctx = multiprocessing.get_context("spawn")
    events = ctx.Queue()
    names = tags(devices)
    level = optuna.logging.get_verbosity()
    procs = {tag: ctx.Process(target=_worker, args=(o, tag, events, level), name=f"evo-run-{tag}")
             for tag, o in zip(names, worker_options(opts, devices), strict=True)}
    for p in procs.values():
        p.start()
    summaries: dict[str, RunSummary] = {}
    errors: dict[str, str] = {}
    started = interrupted = False
    while len(summaries) + len(errors) < len(procs):
        try:
            kind, tag, body = events.get(timeout=STOP_POLL_S)
        except queue.Empty:
            for tag, p in procs.items():  # a worker that died without a word (killed)
                if tag not in summaries and tag not in errors and not p.is_alive():
                    p.join()
                    errors[tag] = f"exited with code {p.exitcode}"
            continue
        except KeyboardInterrupt:
            interrupted = True
            continue
        if kind == "start" and not started:
            reporter.start(*body)
            started = True
        elif kind == "advance":
            reporter.advance(*body)
        elif kind == "note":
            reporter.note(f"{tag}: {body}")
        elif kind == "done":
            summaries[tag] = body
        elif kind == "error":
            errors[tag] = body
    for p in procs.values():
        p.join()
    for tag, why in errors.items():
        reporter.note(f"{tag}: worker failed: {why}")
    if not summaries:
        tag, why = next(iter(errors.items()))
        raise EvoError(f"every worker failed; {tag}: {why}")
    out = merge([summaries[t] for t in names if t in summaries])
    out.interrupted |= interrupted
    return out


def merge(parts: Sequence[RunSummary]) -> RunSummary:
    """One summary for several workers of one study: their trials (:func:`_merge_trials`) and
    their throughput (:func:`_merge_throughput`)."""
    out = replace(parts[0], counts=collections.Counter(), stopped="")
    _merge_trials(out, parts)
    _merge_throughput(out, parts)
    return out


def _merge_trials(out: RunSummary, parts: Sequence[RunSummary]) -> None:
    """Into ``out``: the workers' trials by status and how they ended, added up; the study's
    total as the last to count it saw it; the best of their bests; why each stopped, once each."""
    out.finished = sum(p.finished for p in parts)
    out.total = max(p.total for p in parts)
    for p in parts:
        out.counts.update(p.counts)
    out.reused, out.recovered = sum(p.reused for p in parts), sum(p.recovered for p in parts)
    out.lost, out.waited = sum(p.lost for p in parts), sum(p.waited for p in parts)
    out.twins = sum(p.twins for p in parts)
    out.stopped = "; ".join(dict.fromkeys(p.stopped for p in parts if p.stopped))
    bests = [p.best for p in parts if p.best is not None]
    out.best = max(bests, key=lambda b: b.score) if bests else None
    out.interrupted = any(p.interrupted for p in parts)


def _merge_throughput(out: RunSummary, parts: Sequence[RunSummary]) -> None:
    """Into ``out``: the candidates each measured (their union: the store's claims let one worker
    measure a candidate) and the workers add up, and the wall time is the slowest worker's, so
    that a GPU-hour is one GPU held for an hour whether its worker was busy or done; the devices
    are listed once each. Screens, the kept, the screen errors and the workers' GPU seconds add
    up; the first candidate on a GPU is the earliest of theirs."""
    out.measured_ids = set().union(*(p.measured_ids for p in parts))
    out.screened, out.kept = sum(p.screened for p in parts), sum(p.kept for p in parts)
    out.screen_errors = [x for p in parts for x in p.screen_errors]
    out.gpu_s = {}
    for p in parts:
        for part, seconds in p.gpu_s.items():
            out.spent(part, seconds)
    out.workers = sum(p.workers for p in parts)
    firsts = [p.first_gpu_s for p in parts if p.first_gpu_s is not None]
    out.first_gpu_s = min(firsts) if firsts else None
    out.wall_s = max(p.wall_s for p in parts)
    out.device = ", ".join(dict.fromkeys(p.device for p in parts if p.device))

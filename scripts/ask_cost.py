"""What an ask costs late in a study, with one worker and with several (issue 35).

Replays a recorded sweep (``evo run --replay`` through :func:`evo.api.run`) into a fresh study up
to ``--trials`` trials, once with one worker and once with ``--workers`` worker processes sharing
the study, on SQLite and, when a URL is given (``--pg`` or ``$EVO_TEST_PG``), on PostgreSQL. The
study's families (``--families``) include flash_wgmma, which the H200 recording lacks: its 780
valid points of flash_mma and flash_scalar end a study there, and flash_wgmma's trials (answered
``unmeasured``) carry it to trial 1000 and beyond.

Each worker times every ``Study.ask`` (the sampler's proposal included when it is made there),
how long it waited for the ask lock and held it, and how long the sampler took per trial to
draft its proposals before taking the lock (:meth:`evo.search.proposal.ProposalSampler.draft`):
what a worker spends to get a trial is that draft plus the ask. ``--pace S`` makes each replayed
evaluation take S seconds, as a GPU's would: a replay answers from a file, so on a host with
fewer cores than workers the unpaced workers are bound by the cores, not by each other; paced,
what four workers gain over one shows how much of each trial they still spend queued behind one
another (the lock, the store).

The report, per backend and worker count: the median and 90th percentile of ms per ask and the
median ms per drafted trial over the last tenth of the study's trials (around trial
``--trials``), the study's trials per minute over that last tenth and over the whole run, the
share of the workers' time spent waiting for the ask lock and holding it, the wall time, and the
CPU seconds per trial: the workers' own (each process's user + system time) and the host's (every
core's busy time from ``/proc/stat`` over the run, the database server's included, and whatever
else the host runs). ``--profile DIR`` writes each worker's cProfile to ``DIR/<study>-<i>.prof``,
timed in the process's CPU seconds (its threads' included), not wall time: where the CPU goes,
which on a host with fewer cores than workers is what bounds them (the profiler's own cost is in
that run's numbers). It is written as JSON under ``dev/ask-cost/``
(``ask-cost-cpu-<date>-<git sha>[-paced<S>s].json``; not benchmarks/, whose records are evo
bench's) with the host's CPU count and load, since the numbers depend on what else the host runs.

    python scripts/ask_cost.py --trials 1000 --workers 4 [--pace 0.3] [--pg postgresql+psycopg://...]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LATE = 0.9  # asks of trial numbers from this share of --trials on count as "at trial N"


def worker(url: str, study: str, trials: int, seed: int, replay: str, batch: int, log: str,
           families: list[str], pace_s: float = 0.0, profile: str | None = None) -> None:
    """One ``evo run --replay`` worker that appends ``[trial number, seconds in ask, end time]``
    per ask to ``log`` and ``[seconds waiting for the ask lock, seconds holding it]`` per batch to
    ``log + ".lock"`` (a JSON line each), and writes its CPU seconds to ``log + ".cpu"`` at the end
    (and its cProfile to ``profile``, when given)."""
    import optuna

    from evo import api
    from evo.store.engine import ProcessLock

    real_enter, real_exit = ProcessLock.__enter__, ProcessLock.__exit__
    since: dict[str, float] = {}

    def timed_enter(self: ProcessLock) -> ProcessLock:
        start = time.perf_counter()
        out = real_enter(self)
        since["wait"], since["held"] = time.perf_counter() - start, time.perf_counter()
        return out

    def timed_exit(self: ProcessLock, *exc: object) -> None:
        real_exit(self, *exc)
        if self.name == "ask":
            with open(log + ".lock", "a") as f:
                f.write(json.dumps([since["wait"], time.perf_counter() - since["held"]]) + "\n")

    ProcessLock.__enter__ = timed_enter  # type: ignore[method-assign]
    ProcessLock.__exit__ = timed_exit  # type: ignore[method-assign]

    real_ask = optuna.study.Study.ask

    def timed_ask(self: optuna.study.Study, *args: Any, **kwargs: Any) -> optuna.trial.Trial:
        start = time.perf_counter()
        trial = real_ask(self, *args, **kwargs)
        end = time.perf_counter()
        with open(log, "a") as f:
            f.write(json.dumps([trial.number, end - start, time.time()]) + "\n")
        return trial

    optuna.study.Study.ask = timed_ask  # type: ignore[method-assign]
    from evo.search.proposal import ProposalSampler

    real_draft = ProposalSampler.draft

    def timed_draft(self: ProposalSampler, study: Any, trials: Any, n: int) -> None:
        start = time.perf_counter()
        real_draft(self, study, trials, n)
        with open(log + ".draft", "a") as f:  # [first trial number drafted for, drafts, seconds]
            f.write(json.dumps([max((t.number for t in trials), default=-1) + 1, n, time.perf_counter() - start]) + "\n")

    ProposalSampler.draft = timed_draft  # type: ignore[method-assign]
    if pace_s:
        from evo.search.evaluators import ReplayEvaluator

        replayed = ReplayEvaluator.evaluate

        def paced(self: ReplayEvaluator, jobs: Any) -> Any:
            for ev in replayed(self, jobs):
                time.sleep(pace_s)
                yield ev

        ReplayEvaluator.evaluate = paced  # type: ignore[method-assign]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with cProfile.Profile(time.process_time) if profile else contextlib.nullcontext() as prof:
        api.run(url, trials=trials, replay=replay, study=study, seed=seed, batch=batch, families=families)
    if prof is not None and profile:
        prof.dump_stats(profile)
    use = resource.getrusage(resource.RUSAGE_SELF)
    Path(log + ".cpu").write_text(json.dumps(use.ru_utime + use.ru_stime))


def host_busy_s() -> float:
    """Seconds every core of the host has been busy since boot (``/proc/stat``: all but idle and
    iowait), to take the difference of over a run."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def replay(url: str, workers: int, trials: int, replay_file: str, batch: int, folder: Path,
           families: list[str], pace_s: float, profile: Path | None = None) -> dict[str, Any]:
    """Run ``workers`` processes on a fresh study of ``url`` to ``trials`` trials; its numbers."""
    study = f"ask-cost-{uuid.uuid4().hex[:8]}"
    logs = [folder / f"{study}-{i}.jsonl" for i in range(workers)]
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(url, study, trials, i, replay_file, batch, str(log), families, pace_s,
                                              str(profile / f"{study}-{i}.prof") if profile else None))
             for i, log in enumerate(logs)]
    start, busy = time.time(), host_busy_s()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    wall, busy = time.time() - start, host_busy_s() - busy
    if any(p.exitcode for p in procs):
        raise SystemExit(f"a worker failed ({[p.exitcode for p in procs]})")
    asks = [json.loads(line) for log in logs if log.exists() for line in log.read_text().splitlines()]
    locks = [json.loads(line) for log in logs if (lf := Path(str(log) + ".lock")).exists()
             for line in lf.read_text().splitlines()]
    lock = {"ask_lock_wait_share": round(sum(w for w, _ in locks) / (workers * wall), 3),
            "ask_lock_held_share": round(sum(h for _, h in locks) / (workers * wall), 3)}
    drafts = [json.loads(line) for log in logs if (df := Path(str(log) + ".draft")).exists()
              for line in df.read_text().splitlines()]
    late = sorted(1000 * s / n for first, n, s in drafts if n and first >= LATE * trials)
    draft = {"draft_ms_per_trial_median": round(statistics.median(late), 1) if late else None}
    cpu_s = sum(json.loads(Path(str(log) + ".cpu").read_text()) for log in logs)
    cpu = {"workers_cpu_s": round(cpu_s, 1), "workers_cpu_s_per_trial": round(cpu_s / max(1, len(asks)), 4),
           "host_busy_s": round(busy, 1), "host_busy_s_per_trial": round(busy / max(1, len(asks)), 4)}
    return summarize(asks, trials, wall) | draft | lock | cpu | {"workers": workers, "study": study}


def summarize(asks: list[list[float]], trials: int, wall: float) -> dict[str, Any]:
    """Per-ask cost and throughput late in the study (trial numbers >= LATE * trials)."""
    late = [a for a in asks if a[0] >= LATE * trials]
    ms = sorted(1000 * a[1] for a in late)
    ends = [a[2] for a in late]
    span = max(ends) - min(ends) if len(ends) > 1 else 0.0
    return {"asks": len(asks), "late_asks": len(late),
            "ms_per_ask_median": round(statistics.median(ms), 1) if ms else None,
            "ms_per_ask_p90": round(ms[int(0.9 * (len(ms) - 1))], 1) if ms else None,
            "trials_per_min_late": round(60 * (len(late) - 1) / span, 1) if span else None,
            "trials_per_min_overall": round(60 * len(asks) / wall, 1), "wall_s": round(wall, 1)}


def fresh_database(url: str, name: str) -> str:
    """A new, empty database ``name`` on the PostgreSQL server of ``url`` (each run starts with no
    stored outcomes to reuse); its URL."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def git_sha() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "nogit"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--replay", default=str(ROOT / "data" / "sweep-h200.json.gz"))
    ap.add_argument("--families", default="flash_mma,flash_scalar,flash_wgmma",
                    help="the study's families, comma-separated (see the module docstring)")
    ap.add_argument("--pace", type=float, default=0.0, help="seconds each replayed evaluation takes (default 0)")
    ap.add_argument("--pg", default=os.environ.get("EVO_TEST_PG"), help="a PostgreSQL URL (default $EVO_TEST_PG)")
    ap.add_argument("--sqlite", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--out", type=Path, default=ROOT / "dev" / "ask-cost")
    ap.add_argument("--profile", type=Path, help="a folder for each worker's cProfile (<study>-<i>.prof)")
    args = ap.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    runs = []
    load_start = os.getloadavg()[0]  # the host is shared: what else ran shows in the numbers
    with tempfile.TemporaryDirectory(prefix="ask-cost-") as tmp:
        for backend in (["sqlite"] if args.sqlite else []) + (["postgresql"] if args.pg else []):
            for n in sorted({1, args.workers}):
                url = (fresh_database(args.pg, f"ask_cost_{n}_{uuid.uuid4().hex[:8]}") if backend == "postgresql"
                       else f"sqlite:///{tmp}/{backend}-{n}.sqlite")
                got = replay(url, n, args.trials, args.replay, args.batch, Path(tmp),
                             args.families.split(","), args.pace, args.profile) | {"backend": backend}
                print(json.dumps(got), flush=True)
                runs.append(got)
    day = datetime.date.today().strftime("%Y%m%d")
    sha = git_sha()
    report = {"what": "ms per Study.ask and trials per minute late in a replayed study (scripts/ask_cost.py)",
              "git": sha, "date": day, "cpus": os.cpu_count(), "trials": args.trials, "batch": args.batch, "pace_s": args.pace,
              "late_from_trial": int(LATE * args.trials), "replay": Path(args.replay).name,
              "families": args.families, "load_1min": [load_start, os.getloadavg()[0]], "runs": runs}
    args.out.mkdir(parents=True, exist_ok=True)
    paced = f"-paced{args.pace:g}s" if args.pace else ""
    path = args.out / f"ask-cost-cpu-{day}-{sha}{paced}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(path)


if __name__ == "__main__":
    main()

"""Check and measure a study that several workers ran (``evo run --gpus ...``, or many hosts).

    python scripts/scale_check.py --study NAME [--db URL]

One line per worker run (host, pid, GPU, status, trials told, candidates evaluated), then the
checks that must hold however many workers there were -- every Optuna trial finished and
linked once in the store with the same state, no candidate evaluated twice on one device,
every run done -- and the throughput: candidates evaluated per minute, from the first run's
start to the last run's end (so worker start-up counts; compare runs of the same settings).
Exit 1 when a check fails. It only reads: the run of a dead worker that no worker has marked
failed yet shows as ``running (lease expired ...)``.
"""

from __future__ import annotations

import argparse
import collections
import sys

import optuna
from sqlalchemy import select

from evo import paths
from evo.search.resume import counted
from evo.store import open_store
from evo.store.engine import normalize_url
from evo.store.models import EvaluationRow, Trial


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", required=True)
    ap.add_argument("--db", default=None)
    args = ap.parse_args(argv)
    url = normalize_url(args.db or paths.default_db_url())
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    trials = optuna.load_study(study_name=args.study, storage=url).get_trials(deepcopy=False)
    store = open_store(url)
    runs = store.runs(args.study)
    with store._read() as s:
        rows = {r.trial_number: r for r in s.scalars(select(Trial).where(Trial.study == args.study))}
        evals = list(s.execute(select(EvaluationRow.candidate_id, EvaluationRow.device, EvaluationRow.run_id,
                                      EvaluationRow.device_info)
                               .where(EvaluationRow.run_id.in_([r.id for r in runs]))))
    told = collections.Counter(t.system_attrs.get("evo:run") for t in trials if t.state.is_finished())
    measured = collections.Counter(run_id for _, _, run_id, _ in evals)
    print(f"study {args.study}: {len(trials)} trials, {counted(trials)} counted, {len(runs)} worker run(s)")
    for r in runs:
        print(f"  run {r.id}: {r.host} pid {r.device.get('pid')} gpu {r.device.get('gpu')} "
              f"({r.device.get('name')}) {r.status_text}: {told[str(r.id)]} trials told, "
              f"{measured[r.id]} candidates evaluated")
    gpus = collections.Counter((info.get("host"), info.get("gpu_index")) for _, _, _, info in evals)
    print("  evaluations per (host, gpu): " + ", ".join(f"{h}:{g}={n}" for (h, g), n in sorted(gpus.items())))

    problems = []
    if any(not t.state.is_finished() for t in trials):
        problems.append("trials left RUNNING or WAITING")
    mismatched = [t.number for t in trials if t.state.is_finished() and
                  (t.number not in rows or rows[t.number].state != t.state.name)]
    if mismatched:
        problems.append(f"trials not linked once with the same state in the store: {mismatched[:10]}")
    twice = [c for c, n in collections.Counter((c, d) for c, d, _, _ in evals).items() if n > 1]
    if twice:
        problems.append(f"candidates evaluated twice on one device: {len(twice)}")
    if any(r.status != "done" for r in runs):
        problems.append("runs not done: " + ", ".join(f"{r.id} {r.status_text}" for r in runs if r.status != "done"))
    finished = [r.finished for r in runs if r.finished is not None]
    if runs and finished:
        minutes = (max(finished) - min(r.started for r in runs)).total_seconds() / 60
        print(f"throughput: {len(evals)} candidates evaluated in {minutes * 60:.0f} s = "
              f"{len(evals) / minutes:.1f} per minute")
    print("checks: " + ("passed" if not problems else "FAILED: " + "; ".join(problems)))
    store.close()
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

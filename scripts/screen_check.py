"""Issue 35's figures of a study searched in rungs: candidates per GPU-hour and the screen's error.

    python scripts/screen_check.py --study NAME [--db PATH|URL] [--summary RUN.json] [--top 10]
                                   [--time-budget SECONDS] [--out FILE.json]

First, on the GPU, the ``--top`` candidates by screened score (the trials' ``screen``, best first)
that were pruned, so never timed in full, are timed with the full protocol as the search times
a kept candidate (every case of the study, its baseline beside the candidate, quick sampling,
GREEN not again: they passed it), cheapest first in rank order, none started after
``--time-budget`` seconds (0: none at all, the figures of what the search timed). Each such
evaluation is stored like a kept one's, with its ``screen_score`` beside its ``full_score``. The
host's cached baselines from the search are reused (:meth:`evo.store.Store.measured_baselines`).

Then it writes one JSON document (``--out``, else stdout): the run's throughput as ``evo run``
reported it (``--summary``: its ``--summary-json``; ``candidates_per_gpu_hour`` = candidates the
run evaluated / (its search loop's wall time x GPUs)), the screens (screened, pruned, kept), and
the screen's error (screened / full score - 1) over every candidate timed on both rungs, over
the top ones by screen, and for the best by screen and the best by full score. Exit 1 when a
top candidate by screen still has no full score (the time budget ran out), 0 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import optuna

from evo import paths
from evo.analysis.screening import ScreenErrors, ScreenPair, screen_errors
from evo.errors import EvoError
from evo.gpu.suites import fast_cases_by_tag
from evo.results import BuildResult, Evaluation, Status
from evo.scoring import score
from evo.search.evaluators import GpuEvaluator, Job
from evo.search.params import CANDIDATE
from evo.search.pruner import SCREEN_ATTR
from evo.search.screen import OVERALL
from evo.search.study import read_storage, stored_settings
from evo.store import Store, open_store
from evo.toolchain.build import default_arch
from evo.vocab import FULL


def ranked_by_screen(trials: list[optuna.trial.FrozenTrial]) -> list[tuple[str, float]]:
    """(candidate id, screened score) of every screened candidate, best screen first (each once)."""
    seen: dict[str, float] = {}
    for t in trials:
        screen, cid = t.user_attrs.get(SCREEN_ATTR), t.user_attrs.get(CANDIDATE)
        if screen and cid and OVERALL in screen:
            seen[cid] = max(seen.get(cid, 0.0), float(screen[OVERALL]))
    return sorted(seen.items(), key=lambda kv: -kv[1])


def best_by_full(trials: list[optuna.trial.FrozenTrial]) -> str | None:
    """The candidate of the study's best completed trial (its geometric mean), if any."""
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE and CANDIDATE in t.user_attrs]
    if not done:
        return None
    best = max(done, key=lambda t: (sum(t.values) / len(t.values), -t.number))
    return str(best.user_attrs[CANDIDATE])


def time_in_full(store: Store, url: str, study: str, cids: list[str], budget_s: float) -> int:
    """Time ``cids`` with the study's full protocol on the GPU (module docstring); how many were."""
    rdb = read_storage(url)
    settings = (stored_settings(rdb, study) if rdb is not None else None) or {}
    cases = [fast_cases_by_tag()[t] for t in settings["cases"]]
    baseline = settings["baseline"]
    ev = GpuEvaluator(default_arch(), options={"quick": True, "first_failure": True})
    ev.pair(baseline)
    started, jobs = time.monotonic(), []
    try:
        for cid in cids:
            view = store.get(cid).candidate
            rendered = view.rendered()
            (built,) = ev.build([rendered])                   # the search's build, from the build cache
            if isinstance(built, BuildResult) and built.status is Status.BUILT:
                jobs.append((cid, Job(rendered, built, False, tuple(cases), FULL)))
        runs = store.runs(study)
        since = min((r.started for r in runs), default=datetime.now(UTC))
        ev.share(store.measured_baselines(ev.device, ev.host, since))
        done = 0
        with store.recording("screen check", study=study, options={"candidates": cids}) as run_id:
            drawn = (job for _, job in jobs if time.monotonic() - started < budget_s)
            for (cid, _), result in zip(jobs, ev.evaluate(drawn), strict=False):
                if not isinstance(result, Evaluation):
                    continue
                screened = next((e.device_info["screen_score"] for e in store.evaluations(cid, ev.device)
                                 if "screen_score" in e.device_info), None)
                if result.status is Status.FAST and screened is not None:
                    with contextlib.suppress(EvoError):   # a case it could not be timed on: no full score
                        result.device |= {"screen_score": screened,
                                          "full_score": f"{score(result.timings, baseline, cases):.6f}"}
                store.record_evaluation(result, run_id, device=ev.device)
                done += 1
        return done
    finally:
        ev.close()


def errors_of(pairs: list[ScreenPair]) -> dict[str, Any]:
    """The screen's error over ``pairs``: each, and the median and largest |error|."""
    errs = sorted(abs(p.error) for p in pairs)
    return {"n": len(pairs), "median_abs_error": errs[len(errs) // 2] if errs else None,
            "max_abs_error": errs[-1] if errs else None, "within_2pct": sum(e <= 0.02 for e in errs),
            "candidates": [{"candidate_id": p.candidate_id, "screen": p.screen, "full": p.full, "error": p.error}
                           for p in pairs]}


def document(errors: ScreenErrors, ranked: list[tuple[str, float]], top: int, best_full: str | None,
             summary: dict[str, Any] | None, timed_now: int = 0) -> dict[str, Any]:
    """The JSON issue 35's figures are quoted from (module docstring); ``timed_now``: how many
    pruned top candidates this check timed in full."""
    pairs = {p.candidate_id: p for p in errors.pairs}
    tops = [cid for cid, _ in ranked[:top]]
    run = summary or {}
    return {
        "study": errors.study,
        "throughput": {k: run.get(k) for k in ("measured", "wall_s", "gpus", "candidates_per_gpu_hour",
                                               "candidates_per_busy_gpu_hour", "trials", "gpu_s", "gpu_busy_share",
                                               "device", "git_sha")},
        "screens": {"screened": errors.screened, "pruned": errors.pruned, "kept": run.get("kept"),
                    "timed_in_full_by_this_check": timed_now},
        "all": errors.document() | {"pairs": len(errors.pairs)},
        "top_by_screen": errors_of([pairs[c] for c in tops if c in pairs]) | {"asked": len(tops),
                                                                              "missing": [c for c in tops if c not in pairs]},
        "best_by_screen": errors_of([pairs[c] for c in tops[:1] if c in pairs]),
        "best_by_full": errors_of([pairs[best_full]] if best_full in pairs else []),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", required=True)
    ap.add_argument("--db", default=None, help="SQLite file or SQLAlchemy URL (default: $EVO_DB, else EVO_HOME's)")
    ap.add_argument("--summary", type=Path, help="the run's --summary-json")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--time-budget", type=float, default=0.0, help="seconds to start full evaluations in (0: none)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    url = paths.db_url(args.db) if args.db else paths.default_db_url()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        trials = optuna.load_study(study_name=args.study, storage=url).get_trials(deepcopy=False)
    except KeyError:
        print(f"screen_check: no study {args.study!r} in {url}", file=sys.stderr)
        return 2
    store = open_store(url)
    ranked = ranked_by_screen(trials)
    timed = {p.candidate_id for p in screen_errors(store, args.study).pairs}
    todo = [cid for cid, _ in ranked[:args.top] if cid not in timed]
    timed_now = time_in_full(store, url, args.study, todo, args.time_budget) if todo and args.time_budget > 0 else 0
    summary = json.loads(args.summary.read_text()) if args.summary and args.summary.exists() else None
    doc = document(screen_errors(store, args.study), ranked, args.top, best_by_full(trials), summary, timed_now)
    text = json.dumps(doc, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    else:
        print(text)
    return 1 if doc["top_by_screen"]["missing"] else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Compare samplers in replay: evaluations needed to come within 2% of a recording's best.

For each sampler and seed, an in-memory Optuna study runs the same ask-and-tell batches as
``evo run --replay`` (the same samplers, candidate spelling, objective and failure handling:
invalid, failed and unmeasured points are FAIL trials with their status; a repeated
candidate is answered again without counting as an evaluation) until its best score is at
least 98% of the best score in the recording, or the evaluation budget is spent. An
evaluation is one distinct valid candidate looked up (what would cost a build and a GPU
run); invalid proposals are free and not counted. Writes a markdown table (median and IQR
of evaluations per sampler) to docs/sampler-benchmark.md, and every run with its best-so-far
trace to docs/sampler-benchmark.json (which ``evo report`` draws).

CMA-ES is left out: every evo parameter is categorical, which Optuna's CmaEsSampler does not
model (it samples them all with its RandomSampler), so it would measure random search again.

    python scripts/sampler_benchmark.py [--recording data/sweep-h200.json.gz] [--seeds 10]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import TrialState

from evo import paths
from evo.errors import EvoError, InvalidCandidate
from evo.manifest import load_family
from evo.paths import git_sha
from evo.replay import Recording, load_recording, newest_recording, record_key
from evo.results import Shape, Status
from evo.search import objective
from evo.search.params import suggest
from evo.search.samplers import make_sampler
from evo.space import make_candidate
from evo.suites import fast_cases

SAMPLERS = ("evo", "tpe", "random")
TOLERANCE = 0.02


@dataclass
class Result:
    sampler: str
    seed: int
    evaluations: int | None  # None: not reached within the budget
    trials: int
    best: float
    seconds: float
    trace: list[tuple[int, float]]  # (evaluations, best so far) at each improvement and at the end


def score_table(rec: Recording, cases: Sequence[Shape], baseline: str) -> dict[str, float | str]:
    """Per record key: the objective (geometric-mean speedup) or the failure status."""
    out: dict[str, float | str] = {}
    for key, r in rec.records.items():
        if r.status is not Status.FAST:
            out[key] = r.status.value
            continue
        ev = r.evaluation("", cases, {})
        out[key] = "unmeasured" if objective.missing_cases(ev.timings, baseline, cases) else \
            objective.values(ev.timings, baseline, cases, "geomean")[0]
    return out


def run_one(sampler: str, seed: int, families: list, table: dict[str, float | str], target: float,
            budget: int, batch: int, max_trials: int) -> Result:
    """One seeded search; stops once its best reaches ``target`` or the budget is spent."""
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = optuna.create_study(direction="maximize", sampler=make_sampler(sampler, families, seed))
    seen: set[str] = set()
    best, trials = -math.inf, 0
    trace: list[tuple[int, float]] = []
    while len(seen) < budget and trials < max_trials:
        asked = []
        for _ in range(min(batch, max_trials - trials)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                trial = study.ask()
                fam, raw = suggest(trial, families)
            asked.append((trial, fam, raw))
        for trial, fam, raw in asked:  # told after the whole batch is asked, as in evo run
            trials += 1
            try:
                cand = make_candidate(fam, raw)
            except InvalidCandidate:
                trial.set_user_attr("status", "invalid")
                study.tell(trial, state=TrialState.FAIL)
                continue
            key = record_key(cand.family, cand.p)
            seen.add(key)
            outcome = table.get(key, "unmeasured")
            if isinstance(outcome, str):
                trial.set_user_attr("status", outcome)
                study.tell(trial, state=TrialState.FAIL)
                continue
            study.tell(trial, outcome)
            if outcome > best:
                best = outcome
                trace.append((len(seen), best))
                if best >= target:
                    return Result(sampler, seed, len(seen), trials, best, time.perf_counter() - t0, trace)
    trace.append((len(seen), best))  # where the budget ran out
    return Result(sampler, seed, None, trials, best, time.perf_counter() - t0, trace)


def benchmark(rec: Recording, samplers: Sequence[str], seeds: Sequence[int], cases: Sequence[Shape],
              baseline: str = "sdpa_default", batch: int = 8, budget: int | None = None,
              progress=None) -> tuple[list[Result], float, int]:
    """All runs; returns (results, the recording's best score, the evaluation budget)."""
    table = score_table(rec, cases, baseline)
    scores = [v for v in table.values() if not isinstance(v, str)]
    if not scores:
        raise EvoError(f"{rec.name} has no candidate timed on all of {', '.join(s.tag for s in cases)}")
    best = max(scores)
    families = [load_family(f) for f in sorted({r.family for r in rec.records.values()})]
    budget = budget or len(table)
    results = []
    for sampler in samplers:
        for seed in seeds:
            results.append(run_one(sampler, seed, families, table, best * (1 - TOLERANCE), budget, batch,
                                   max_trials=5 * budget))
            if progress:
                progress(results[-1])
    return results, best, budget


def quartiles(xs: Sequence[float]) -> tuple[float, float, float]:
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


def markdown(rec: Recording, results: Sequence[Result], best: float, budget: int, cases: Sequence[Shape],
             baseline: str, batch: int, seeds: Sequence[int]) -> str:
    """The report: one row per sampler (unreached runs count as the budget, shown as >budget)."""
    lines = [
        "# Sampler benchmark (replay)",
        "",
        f"Recording `{rec.name}` ({rec.gpu}, {rec.arch}, {len(rec.records)} candidates), git "
        f"`{(git_sha() or 'unknown')[:12]}`, seeds {seeds[0]}..{seeds[-1]} ({len(seeds)}), batches of {batch}.",
        f"Objective: geometric-mean speedup over {baseline} on {', '.join(s.tag for s in cases)}; "
        f"the recording's best is x{best:.3f}, the target x{best * (1 - TOLERANCE):.3f} (within 2%).",
        "An evaluation is one distinct valid candidate looked up (a build and a GPU run on real hardware); "
        f"invalid proposals and repeats are free. Budget: {budget} evaluations.",
        "",
        "| sampler | reached | evaluations: median | IQR (p25-p75) | trials: median |",
        "| --- | --- | --- | --- | --- |",
    ]
    for sampler in dict.fromkeys(r.sampler for r in results):
        rs = [r for r in results if r.sampler == sampler]
        evals = [float(r.evaluations if r.evaluations is not None else budget + 1) for r in rs]
        p25, med, p75 = quartiles(evals)
        show = lambda x: f">{budget}" if x > budget else f"{x:.0f}"  # noqa: E731
        reached = sum(r.evaluations is not None for r in rs)
        lines.append(f"| {sampler} | {reached}/{len(rs)} | {show(med)} | {show(p25)}-{show(p75)} | "
                     f"{statistics.median(r.trials for r in rs):.0f} |")
    lines += ["", "CMA-ES is not in the table: all evo parameters are categorical, which Optuna's "
              "CmaEsSampler does not model (it falls back to its RandomSampler for every one of them).", ""]
    return "\n".join(lines)


def to_json(rec: Recording, results: Sequence[Result], best: float, budget: int, cases: Sequence[Shape],
            baseline: str, batch: int, seeds: Sequence[int]) -> dict:
    """The same benchmark as data, every run with its best-so-far trace (``evo report`` draws it)."""
    return {"schema": "evo.sampler-benchmark/1", "recording": rec.name, "gpu": rec.gpu, "arch": rec.arch,
            "records": len(rec.records), "git_sha": git_sha() or "unknown", "seeds": list(seeds), "batch": batch,
            "baseline": baseline, "cases": [s.tag for s in cases], "best": best,
            "target": best * (1 - TOLERANCE), "budget": budget,
            "runs": [{"sampler": r.sampler, "seed": r.seed, "evaluations": r.evaluations, "trials": r.trials,
                      "best": r.best, "trace": [list(p) for p in r.trace]} for r in results]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recording", type=Path, default=None, help="default: newest data/sweep-*.json.gz")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--samplers", default=",".join(SAMPLERS))
    ap.add_argument("--cases", default=None, help="FAST selection, e.g. F1,F6 (default: the cases every timed record covers)")
    ap.add_argument("--baseline", default="sdpa_default", choices=objective.BASELINES)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--budget", type=int, default=None, help="evaluations per run (default: all points)")
    ap.add_argument("--out", type=Path, default=paths.root() / "docs" / "sampler-benchmark.md")
    ap.add_argument("--json", type=Path, default=None, help="also write the runs as JSON "
                    "(default: --out with .json; evo report reads it)")
    args = ap.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        path = args.recording or newest_recording(paths.root() / "data")
        if path is None:
            raise EvoError("no recording: pass --recording FILE (or export one to data/)")
        rec = load_recording(path)
        pool = rec.shapes()
        cases = rec.common_shapes() if args.cases is None else [s for s in fast_cases([args.cases]) if s in pool]
        samplers = [s.strip() for s in args.samplers.split(",") if s.strip()]
        seeds = list(range(args.seeds))
        results, best, budget = benchmark(
            rec, samplers, seeds, cases, args.baseline, args.batch, args.budget,
            progress=lambda r: print(f"{r.sampler:7s} seed {r.seed:2d}: "
                                     f"{r.evaluations if r.evaluations is not None else 'not reached':>11} "
                                     f"evaluations, {r.trials} trials, best x{r.best:.3f}, {r.seconds:.1f} s"))
    except EvoError as exc:
        print(f"sampler_benchmark: error: {exc}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(markdown(rec, results, best, budget, cases, args.baseline, args.batch, seeds))
    out_json = args.json or args.out.with_suffix(".json")
    out_json.write_text(json.dumps(to_json(rec, results, best, budget, cases, args.baseline, args.batch, seeds),
                                   indent=1) + "\n")
    print(f"wrote {args.out} and {out_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

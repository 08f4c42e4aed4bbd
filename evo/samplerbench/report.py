"""The benchmark's markdown section and plot, from its runs.

Every figure in a table is an evaluation count or "> budget" (a run that did not reach the
target within its budget; quartiles touching such runs are "> budget" too, never
interpolated). Each table compares one start mode; every sampler is tested against ``evo``
(two-sided Mann-Whitney U), and ``evo`` against the best peer of the table (the other sampler
with the lowest median, then the lowest p75), one-sided: does evo need fewer evaluations?
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evo.family.space import pins_text
from evo.vocab import SCREEN
from evo.samplerbench.entrants import Entrant
from evo.samplerbench.problem import Problem
from evo.samplerbench.run import RunResult
from evo.samplerbench.stats import mann_whitney, quartiles

OVER = "> budget"
HERO = "evo"


def values(runs: Sequence[RunResult]) -> list[float]:
    """Evaluations to the target per run; math.inf for a run that did not reach it."""
    return [math.inf if r.evaluations is None else float(r.evaluations) for r in runs]


def show(x: float) -> str:
    if math.isinf(x):
        return OVER
    return f"{x:.0f}"


def show_p(p: float) -> str:
    return "<0.0001" if p < 1e-4 else f"{p:.4f}" if p < 0.01 else f"{p:.3f}"


@dataclass
class Row:
    name: str
    runs: list[RunResult]
    budget: str

    @property
    def vals(self) -> list[float]:
        return values(self.runs)

    def key(self) -> tuple[float, float]:
        q = quartiles(self.vals)
        return q[1], q[2]


def budget_text(e: Entrant, problem: Problem) -> str:
    cap = e.trial_cap(problem)
    return f"{problem.size} evaluations" + (f" or {cap} trials" if cap is not None else "")


def rows(problem: Problem, entrants: Sequence[Entrant], runs: Sequence[RunResult], mode: str) -> list[Row]:
    out = []
    for e in entrants:
        rs = [r for r in runs if r.sampler == e.name and r.mode == mode]
        if rs:
            out.append(Row(e.name, rs, budget_text(e, problem)))
    return out


def stopped(runs: Sequence[RunResult]) -> str:
    counts: dict[str, int] = {}
    for r in runs:
        if r.evaluations is None:
            counts[r.stopped] = counts.get(r.stopped, 0) + 1
    return ", ".join(f"{n} {why}" for why, n in sorted(counts.items())) or "-"


def best_peer(table: Sequence[Row]) -> Row | None:
    peers = [r for r in table if r.name != HERO]
    return min(peers, key=Row.key) if peers else None


def verdict(table: Sequence[Row]) -> list[str]:
    """evo against the best peer: medians, ratio, one-sided U test, and the issue's bar."""
    hero = next((r for r in table if r.name == HERO), None)
    peer = best_peer(table)
    if hero is None or peer is None:
        return []
    _, a, _ = quartiles(hero.vals)
    _, b, _ = quartiles(peer.vals)
    _, p = mann_whitney(hero.vals, peer.vals, "less")
    ratio = "n/a" if math.isinf(a) or math.isinf(b) else f"{a / b:.2f}"
    met = not math.isinf(a) and (math.isinf(b) or a <= b / 2) and p < 0.05
    return [f"Best peer: **{peer.name}** (median {show(b)}). evo: median {show(a)}, ratio {ratio}; "
            f"one-sided Mann-Whitney U p = {show_p(p)} (H1: evo needs fewer evaluations). "
            f"evo at most half the best peer's median with p < 0.05: **{'yes' if met else 'no'}**."]


def table(problem: Problem, entrants: Sequence[Entrant], runs: Sequence[RunResult], mode: str) -> list[str]:
    t = rows(problem, entrants, runs, mode)
    if not t:
        return []
    hero = next((r for r in t if r.name == HERO), None)
    lines = ["| sampler | reached | evaluations to the best: median | p25-p75 | p vs evo (two-sided) "
             "| unreached runs stopped by | budget per run | trials: median | s per run: median |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in sorted(t, key=lambda r: (r.name != HERO, r.key(), r.name)):
        p25, med, p75 = quartiles(r.vals)
        p = "-" if hero is None or r is hero else show_p(mann_whitney(r.vals, hero.vals)[1])
        reached = sum(x.evaluations is not None for x in r.runs)
        lines.append(f"| {r.name} | {reached}/{len(r.runs)} | {show(med)} | {show(p25)}-{show(p75)} | {p} | "
                     f"{stopped(r.runs)} | {r.budget} | {statistics.median(x.trials for x in r.runs):.0f} | "
                     f"{statistics.median(x.seconds for x in r.runs):.2f} |")
    return lines + [""] + verdict(t)


def subspace(problem: Problem) -> str:
    """One line: the pinned genes of a sub-space problem (``--pin``), and the genes left free."""
    free = [f"{f.name}: {', '.join(n for n, p in f.params.items() if len(p.values) > 1) or 'none'}"
            for f in problem.families if f.name in problem.pins]
    return (f"Sub-space: `--pin {pins_text(problem.pins)}` (each gene held at that one value; the recording's "
            f"points outside it are left out). Free genes: {'; '.join(free)}.")


def section(problem: Problem, entrants: Sequence[Entrant], runs: Sequence[RunResult], seeds: Sequence[int],
            batch: int, seconds: float, sha: str, plot: Path | None) -> str:
    """One recording's part of docs/sampler-benchmark.md."""
    rec = problem.recording
    recorded = sum(problem.outcome(k) != "unmeasured" for k, _ in problem.points)
    fams = ", ".join(f.name for f in problem.families)
    no_warm = [e.name for e in entrants if not e.warm]
    out = [
        f"## `{rec.name}`: {fams}",
        "",
        f"{rec.gpu} ({rec.arch}); {problem.size} valid points, {recorded} of them in the recording; "
        f"objective: geometric-mean speedup over {problem.baseline} on {len(problem.cases)} FAST cases "
        f"({', '.join(s.tag for s in problem.cases)}"
        f"{'; each point at its search screen' if rec.fidelity == SCREEN else ''}). "
        f"Target: {problem.describe_target()}.",
        f"Seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} per sampler and start); Optuna-driven samplers ask "
        f"batches of {batch} trial(s) (as `evo run --batch {batch}`); git `{sha[:12]}`; {len(runs)} runs took "
        f"{seconds / 60:.1f} min of wall time here.",
        "",
        "### Cold start (no defaults; the sampler's own random start)",
        "",
        *table(problem, entrants, runs, "cold"),
        "",
        "### Warm start (the manifest defaults first)",
        "",
        *table(problem, entrants, runs, "warm"),
    ]
    if problem.pins:
        out[4:4] = ["", subspace(problem)]
    if no_warm:
        out += ["", f"Not in the warm table (they take no starting point): {', '.join(no_warm)}."]
    if plot is not None:
        out += ["", f"![best so far and share of runs at the best, against evaluations]({plot.name})"]
    return "\n".join(out) + "\n"

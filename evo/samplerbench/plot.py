"""The benchmark's figure: per recording and start mode, the median best-so-far (relative to
the recording's best) and the share of runs that have evaluated the best point, against
evaluations. matplotlib is optional (``pip install 'evo-kernels[bench]'``)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from evo.samplerbench.problem import Problem
from evo.samplerbench.report import HERO, rows
from evo.samplerbench.entrants import Entrant
from evo.samplerbench.run import RunResult

SHOWN_PEERS = 4  # the best peers of each table drawn besides evo


def available() -> str | None:
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        return f"matplotlib is not installed ({exc}); pip install 'evo-kernels[bench]'"
    return None


def best_so_far(runs: Sequence[RunResult], n: int, best: float) -> list[float]:
    """Median over runs of best-so-far / best after 1..n evaluations (a run that stopped keeps
    its last value: it reached the best, or spent its budget)."""
    out = []
    for i in range(n):
        vals = []
        for r in runs:
            c = r.curve[min(i, len(r.curve) - 1)] if r.curve else -math.inf
            vals.append(0.0 if math.isinf(c) else c / best)
        out.append(statistics.median(vals))
    return out


def reached_share(runs: Sequence[RunResult], n: int) -> list[float]:
    return [sum(r.evaluations is not None and r.evaluations <= i + 1 for r in runs) / len(runs) for i in range(n)]


def draw(panels: Sequence[tuple[Problem, Sequence[Entrant], Sequence[RunResult]]], out: Path) -> Path:
    """One row per (recording, mode): best-so-far on the left, share at the best on the right."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = [(p, e, r, m) for p, e, r in panels for m in ("cold", "warm") if any(x.mode == m for x in r)]
    fig, axes = plt.subplots(len(lines), 2, figsize=(12, 4 * len(lines)), squeeze=False)
    for row, (problem, entrants, runs, mode) in zip(axes, lines, strict=True):
        table = rows(problem, entrants, runs, mode)
        hero = [t for t in table if t.name == HERO]
        peers = sorted((t for t in table if t.name != HERO), key=lambda t: t.key())[:SHOWN_PEERS]
        n = problem.size
        xs = list(range(1, n + 1))
        for t in hero + peers:
            style = {"linewidth": 2.5, "color": "black"} if t.name == HERO else {"linewidth": 1.2}
            row[0].plot(xs, best_so_far(t.runs, n, problem.best), label=t.name, **style)
            row[1].plot(xs, reached_share(t.runs, n), label=t.name, **style)
        title = f"{problem.recording.name} ({', '.join(f.name for f in problem.families)}), {mode} start"
        for ax, ylabel in zip(row, ("median best so far / recording's best", "share of runs at the best point"), strict=True):
            ax.set_xscale("log")
            ax.set_xlim(1, n)
            ax.set_xlabel("evaluations (distinct valid points)")
            ax.set_ylabel(ylabel)
            ax.set_title(title, fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
        row[1].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out

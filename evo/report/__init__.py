"""``evo report``: one self-contained HTML page about a lineage database.

It shows how the search converged (best so far against evaluations, per study and sampler,
with the replay sampler benchmark), which kernel wins on which FAST case against every
backend timed beside it, how close to the GEMM rate each case runs, the lineage graph (select
a node for its genes, source, ptxas report, GREEN checks and timings), the insights tables
and failures by reason. Reading is all it does to the database. Modules:
:mod:`~evo.report.data` (read), :mod:`~evo.report.graph` (layout), :mod:`~evo.report.nodes`
(graph and node details), :mod:`~evo.report.figures` (Plotly figures), :mod:`~evo.report.page`
(HTML).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from evo import paths
from evo.version import __version__
from evo.analysis.lineage import build_lineage
from evo.report import data, figures, nodes
from evo.report.page import render_page
from evo.results import Status
from evo.search.study import study_cases
from evo.store import Store
from evo.store.engine import safe_url
from evo.vocab import DEFAULT_BASELINE

TOP_ROWS = 30  # rows of the moves and resources tables


def build(store: Store, *, study: str | None = None, baseline: str = DEFAULT_BASELINE,
          bench: Sequence[Path] = (), same_gpu: bool = False, sampler_benchmark: Path | None = None) -> str:
    """The report's HTML for ``study`` (every candidate and study when None). ``bench``: evo
    bench records to draw too (only those of the database's GPU when ``same_gpu``)."""
    storage = data.optuna_storage(store)
    trials = data.study_trials(storage, study)
    cases_of_study = study_cases(store.url, study) if study else None
    lin = build_lineage(store, study, baseline, cases_of_study)
    timed = store.latest_timings([n.id for n in lin.nodes.values() if n.status is Status.FAST])
    series = data.progress(store, trials)
    per_case = data.cases(store, lin, timed, baseline)
    records = data.load_bench(bench)
    if same_gpu and per_case["device"]:
        records = [b for b in records if str(b.record["gpu"]) in per_case["device"]]
    samplers = data.load_sampler_benchmark(sampler_benchmark)
    insight = data.insights(store, study, baseline)
    fails = data.failures(store, lin.nodes, trials)
    graph = nodes.graph(store, lin)
    figs = {
        "progress": figures.progress(series),
        "samplers": figures.sampler_reach(samplers),
        "speedups": figures.speedups(per_case),
        "heatmap": figures.heatmap(per_case),
        "roofline": figures.roofline(per_case, records, data.case_key),
        "lineage": figures.lineage(graph),
        "importances": figures.importances(insight),
        "failures": figures.failures(fails),
    }
    run_ids = sorted({r for ts in trials.values() for t in ts if (r := data.run_of(t)) is not None}
                     | {c.first_run_id for c in store.find_candidates(study=study) if c.first_run_id is not None})
    runs = [r for r in (store.get_run(i) for i in run_ids) if r is not None]
    context: dict[str, Any] = {
        "title": f"evo report: {study or 'every study'}",
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "evo_version": __version__, "git_sha": (paths.git_sha() or "unknown")[:12],
        "db": shown_url(store.url), "study": study, "baseline": baseline,
        "counts": data.status_counts(store, lin.nodes), "candidates": len(lin.nodes), "edges": len(graph["edges"]),
        "runs": runs, "studies": list(trials), "reach": data.reach(series), "samplers": samplers,
        "cases": per_case, "bench": [b.name for b in records], "insights": insight, "top": TOP_ROWS,
        "failures": fails,
    }
    return render_page(context, figs, graph)


def shown_url(url: str) -> str:
    """The database as the page names it: no password, and a SQLite file below the current
    folder by its relative path (a committed report should not carry the author's home)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        path = Path(parsed.database).resolve()
        if path.is_relative_to(Path.cwd()):
            return f"sqlite:///{path.relative_to(Path.cwd())}"
    return safe_url(url)


def write(store: Store, out: Path, **kwargs: Any) -> Path:
    """Write the report to ``out`` (its folder must exist); returns the path."""
    html = build(store, **kwargs)
    out.write_text(html, encoding="utf-8")
    return out

"""``evo run`` (start or resume a search), ``evo insights`` and ``evo export-sweep``.

The commands parse options, draw progress and tables with rich, and leave the work to
:mod:`evo.search.driver`, :mod:`evo.insights` and :mod:`evo.replay`.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import optuna
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from evo import insights as insights_mod
from evo import jsondoc
from evo.cli.app import DbOption, app
from evo.replay import export_sweep
from evo.search.driver import RunOptions
from evo.search.fanout import start as run_search
from evo.search.loop import Best, Outcome, RunSummary
from evo.search.samplers import SAMPLERS
from evo.search.study import GRACE_S, HEARTBEAT_S
from evo.store import open_store

console = Console()


class RichReporter:
    """A progress bar of counted trials with the best score so far; notes print above it."""

    def __init__(self) -> None:
        self.progress = Progress(TextColumn("[bold]trials"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[best]}"), TimeElapsedColumn(),
                                 console=console, transient=False)
        self.task = self.progress.add_task("trials", total=None, best="")

    def start(self, total: int, done: int) -> None:
        self.progress.update(self.task, total=total, completed=done)
        self.progress.start()

    def advance(self, number: int, outcome: Outcome, best: Best | None) -> None:
        shown = f"best x{best.score:.3f} {best.label}" if best else "no timed candidate yet"
        self.progress.update(self.task, advance=1, best=shown)

    def note(self, text: str) -> None:
        self.progress.console.print(text)

    def stop(self) -> None:
        self.progress.stop()


def _split(values: list[str] | None) -> list[str] | None:
    return None if not values else [v for s in values for v in s.split(",") if v.strip()]


@app.command("run")
def run_cmd(
    trials: int = typer.Option(100, "--trials", help="the study's total trials (a resumed study runs to this many)"),
    time_budget: float | None = typer.Option(None, "--time-budget", help="stop starting batches after this many seconds"),
    families: list[str] | None = typer.Option(None, "--families", help="families to search (comma-separated; default all)"),
    cases: list[str] | None = typer.Option(None, "--cases", help="FAST cases scored: F1, F3c, F3f, F1-F4 (default all)"),
    sampler: str = typer.Option("evo", "--sampler", help="one of " + ", ".join(SAMPLERS)),
    seed: int | None = typer.Option(None, "--seed", help="sampler seed"),
    db: str | None = DbOption,
    study: str | None = typer.Option(None, "--study", help="study name (continue it if it exists)"),
    replay: Path | None = typer.Option(None, "--replay", help="take measurements from this recording (no GPU)"),
    batch: int = typer.Option(8, "--batch", help="trials asked, built and evaluated together"),
    arch: str | None = typer.Option(None, "--arch", help="nvcc arch (default: the GPU's, or sm_90a)"),
    baseline: str | None = typer.Option(None, "--baseline", help="sdpa_default or sdpa_flash"),
    objective: str | None = typer.Option(None, "--objective", help="geomean, or per-bucket (head_dim x causal)"),
    jobs: int | None = typer.Option(None, "--jobs", help="parallel nvcc processes (default: CPU count)"),
    gpus: str | None = typer.Option(None, "--gpus", help="GPUs to measure on, one worker process each: all, or "
                                    "indices like 0,1 (0,0: two workers on GPU 0) (default: all visible)"),
    heartbeat: int = typer.Option(HEARTBEAT_S, "--heartbeat", help="seconds between a worker's heartbeats"),
    grace: int = typer.Option(GRACE_S, "--grace", help="seconds without a heartbeat before a worker's trial "
                              "is failed and retried by another"),
) -> None:
    """Start or resume an evolution; Ctrl-C stops it and a later run continues the study."""
    opts = RunOptions(trials=trials, time_budget_s=time_budget, families=_split(families), cases=_split(cases),
                      sampler=sampler, seed=seed, db=db, study=study, replay=replay, batch=batch, arch=arch,
                      baseline=baseline, objective=objective, jobs=jobs, heartbeat_s=heartbeat, grace_s=grace)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    reporter = RichReporter()
    try:
        summary = run_search(opts, gpus, reporter)
    finally:
        reporter.stop()
    print_summary(summary)
    if summary.interrupted:
        raise KeyboardInterrupt  # Ctrl-C already handled: typer maps this to exit code 130


def print_summary(s: RunSummary) -> None:
    """Best candidate, counts per status, why the run stopped."""
    console.print(f"study [bold]{s.study}[/] ({s.source}): {s.finished} trial(s) this run, "
                  f"{s.total}/{s.requested} counted in the study; stopped: {s.stopped}")
    if s.best is not None:
        vals = ", ".join(f"{n} x{v:.3f}" for n, v in zip(s.metric_names, s.best.values))
        console.print(f"best: [bold]{s.best.candidate_id[:12]}[/] {s.best.label}  {vals}")
    else:
        console.print("best: none timed yet")
    table = Table("status", "trials", title="this run", title_justify="left")
    for status, n in s.counts.most_common():
        table.add_row(status, str(n))
    if s.reused:
        table.add_row("(answered from the store)", str(s.reused))
    if s.waited:
        table.add_row("(measured by another worker meanwhile)", str(s.waited))
    if s.recovered:
        table.add_row("(re-queued from a dead worker)", str(s.recovered))
    if s.lost:
        table.add_row("(failed as stale before told)", str(s.lost))
    if table.rows:
        console.print(table)
    if s.not_evaluated:
        console.print(f"[yellow]{s.not_evaluated}[/]")
    if s.counts.get("unmeasured"):
        console.print(f"[yellow]{s.counts['unmeasured']} candidate(s) are not in the recording: "
                      f"reported as unmeasured, not invented[/]")


@app.command("insights")
def insights_cmd(
    study: str | None = typer.Option(None, "--study", help="one study (default: every edge in the database)"),
    db: str | None = DbOption,
    baseline: str = typer.Option("sdpa_default", "--baseline", help="speedups against this SDPA backend"),
    top: int = typer.Option(20, "--top", help="rows per table"),
    as_json: bool = typer.Option(False, "--json", help="one JSON document on stdout (every row, not --top)"),
) -> None:
    """Which moves help on which shapes, which params co-occur with resource failures, importances."""
    store = open_store(db)
    report = insights_mod.compute(store, study, baseline=baseline, db_url=db)
    insights_mod.save(store, study, report)
    if as_json:
        sys.stdout.write(jsondoc.dumps(jsondoc.insights_doc(report, study, baseline)))
        return
    _show_insights(report, top)


def _fmt_effect(x: float) -> str:
    return "-" if math.isnan(x) else f"x{x:.3f}"


def _show_insights(r: insights_mod.Report, top: int) -> None:
    t = Table("family", "move", "bucket", "n", "median effect", "wins", "children failed",
              title="moves (child score / parent score)", title_justify="left")
    for m in r.moves[:top]:
        t.add_row(m.family, m.move_text, m.bucket, str(m.n), _fmt_effect(m.median_effect),
                  f"{m.win_rate:.0%}" if m.n else "-", str(m.failed))
    console.print(t)
    t = Table("family", "param=value", "built", "spills", "smem over", "rate",
              title="resources (over built candidates)", title_justify="left")
    for x in r.resources[:top]:
        t.add_row(x.family, f"{x.param}={x.value}", str(x.built), str(x.spills), str(x.smem_over),
                  f"{x.rate:.0%}")
    console.print(t)
    for imp in r.importances:
        if imp.skipped:
            console.print(f"importances for {imp.family}: {imp.skipped}")
            continue
        t = Table("param", "importance", title=f"parameter importances: {imp.family} ({imp.trials} trials)",
                  title_justify="left")
        for name, v in imp.values.items():
            t.add_row(name, f"{v:.3f}")
        console.print(t)


@app.command("export-sweep")
def export_sweep_cmd(
    out: Path | None = typer.Option(None, "--out", help="recording to write or extend "
                                                      "(default: data/sweep-<gpu>.json.gz)"),
    db: str | None = DbOption,
    gpu: str | None = typer.Option(None, "--gpu", help="device name (default: the one with most evaluations)"),
) -> None:
    """Write every candidate with a final status (any study) to a recording, merging into OUT."""
    store = open_store(db)
    rec, added = export_sweep(store, out, gpu)
    console.print(f"{rec.path}: {len(rec.records)} candidate(s) measured on {rec.gpu} ({added} new or updated)")

"""``evo bench-samplers``: regenerate docs/sampler-benchmark.md (the work is in :mod:`evo.search.bench.doc`)."""

from __future__ import annotations

from pathlib import Path

import typer

from evo.cli.app import app
from evo.paths import root
from evo.replay import newest_recording
from evo.search.bench.doc import Options, write
from evo.search.bench.entrants import DEFAULT
from evo.search.bench.run import MODES
from evo.search.objective import BASELINES
from evo.suites import fast_cases


def _list(text: str | None) -> list[str] | None:
    return None if text is None else [s.strip() for s in text.split(",") if s.strip()]


@app.command("bench-samplers")
def bench_samplers_cmd(
    recording: list[str] | None = typer.Option(None, "--recording", help="PATH or PATH:fam1,fam2, repeatable "
                                               "(default: the newest data/sweep-*.json.gz)"),
    seeds: int = typer.Option(50, "--seeds", help="seeded runs per sampler and start mode"),
    samplers: str = typer.Option(",".join(DEFAULT), "--samplers", help="evo's and Optuna's samplers"),
    kt: str | None = typer.Option(None, "--kt", help="Kernel Tuner strategies (default: its built-in set; none: skip)"),
    modes: str = typer.Option(",".join(MODES), "--modes", help="cold and/or warm"),
    cases: str | None = typer.Option(None, "--cases", help="FAST cases (default: those every timed record covers)"),
    baseline: str = typer.Option(BASELINES[0], "--baseline", help=" or ".join(BASELINES)),
    tolerance: float = typer.Option(0.0, "--tolerance", help="target: points within this fraction of the best (0: the best point)"),
    batch: int = typer.Option(1, "--batch", help="trials per batch for Optuna-driven samplers (as evo run --batch; 1: sequential, as Kernel Tuner)"),
    jobs: int | None = typer.Option(None, "--jobs", help="processes (default: CPU count)"),
    out: Path = typer.Option(root() / "docs" / "sampler-benchmark.md", "--out", help="markdown written"),
    plot: Path = typer.Option(root() / "docs" / "sampler-benchmark.png", "--plot", help="figure written"),
    results: Path = typer.Option(root() / "docs" / "sampler-benchmark.json", "--results", help="every run, as JSON"),
) -> None:
    """Compare samplers on recorded sweeps: evaluations to reach the best point, cold and warm."""
    if not recording:
        found = newest_recording(root() / "data")
        recording = [str(found)] if found else []
    kt_list = _list(kt)
    opts = Options(recordings=recording, seeds=seeds, samplers=_list(samplers) or [],
                   kt=[] if kt_list == ["none"] else kt_list, modes=_list(modes) or [],
                   cases=fast_cases(_list(cases)) if cases else None, baseline=baseline, tolerance=tolerance,
                   batch=batch, jobs=jobs, out=out, plot=plot, results=results)
    progress = lambda r: typer.echo(  # noqa: E731
        f"{r.sampler:>26} {r.mode} seed {r.seed:3d}: "
        f"{r.evaluations if r.evaluations is not None else 'not reached':>11} ({r.spent} evaluations, "
        f"{r.trials} trials, {r.seconds:.1f} s)", err=True)
    for path in write(opts, note=lambda s: typer.echo(s, err=True), progress=progress):
        typer.echo(f"wrote {path}")

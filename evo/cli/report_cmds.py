"""``evo report``: write the self-contained HTML report of a database (:mod:`evo.report`)."""

from __future__ import annotations

from pathlib import Path

import click

from evo.cli.app import api, cli, db_option
from evo.cli.output import console
from evo.errors import EvoError
from evo.vocab import DEFAULT_BASELINE, SDPA_BACKENDS


@cli.command("report")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("report.html"),
              show_default=True, metavar="FILE", help="the HTML file to write")
@click.option("--study", metavar="NAME", help="one study (default: every study and candidate)")
@db_option()
@click.option("--baseline", type=click.Choice(SDPA_BACKENDS), default=DEFAULT_BASELINE, show_default=True,
              help="the SDPA backend scores are against")
@click.option("--bench", multiple=True, type=click.Path(path_type=Path), metavar="PATH",
              help="evo bench records, files or folders, repeatable (default: <EVO_HOME>/benchmarks, "
                   "those of the database's GPU)")
@click.option("--sampler-benchmark", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="the sampler benchmark's JSON (default: docs/sampler-benchmark.json when present)")
@click.option("--screenshot", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="also open the page in headless Chromium, check what it drew and save a PNG here")
def report_cmd(out: Path, study: str | None, db: str | None, baseline: str, bench: tuple[Path, ...],
               sampler_benchmark: Path | None, screenshot: Path | None) -> None:
    """One HTML page of a database (no network needed to view it).

    Search progress per study and sampler, speedups per FAST case against every backend,
    TFLOP/s against the GEMM rate, the interactive lineage graph, insights and failures.
    """
    written = api.write_report(out, db=db, study=study, baseline=baseline, bench=bench,
                               sampler_benchmark=sampler_benchmark, screenshot=screenshot)
    console.print(f"wrote {written.path} ({written.megabytes:.1f} MB) from {written.database}; open it in a browser")
    shot = written.screenshot
    if shot is None:
        return
    if not shot.finished:
        raise EvoError(f"{written.path}: the page's script did not finish drawing in headless Chromium; "
                       + "; ".join(shot.errors))
    console.print(f"{shot.path}: {shot.plots} plots drawn, {shot.lineage_nodes} lineage nodes")
    if shot.problems:
        raise EvoError(f"{written.path} did not draw cleanly: " + "; ".join(shot.problems))

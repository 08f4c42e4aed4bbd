"""``evo report``: write the self-contained HTML report of a database (:mod:`evo.report`)."""

from __future__ import annotations

from pathlib import Path

import click
import optuna

from evo import paths
from evo import report as report_mod
from evo.cli.app import cli, db_option, fail_if, require_database
from evo.cli.output import console
from evo.errors import EvoError
from evo.report import browser
from evo.store import open_store
from evo.store.engine import safe_url
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
def report_cmd(out: Path, study: str | None, db: str, baseline: str, bench: tuple[Path, ...],
               sampler_benchmark: Path | None, screenshot: Path | None) -> None:
    """One HTML page of a database (no network needed to view it).

    Search progress per study and sampler, speedups per FAST case against every backend,
    TFLOP/s against the GEMM rate, the interactive lineage graph, insights and failures.
    """
    for path in (out, screenshot):
        fail_if(path is not None and not path.parent.is_dir(), f"folder {path.parent if path else ''} does not exist")
    exe = browser.find_browser() if screenshot else None
    fail_if(bool(screenshot) and exe is None, "--screenshot needs Chromium (Debian: apt-get install chromium)")
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # importances would log every study they make
    url = require_database(db)
    default_bench = paths.home() / "benchmarks"
    default_samplers = paths.root() / "docs" / "sampler-benchmark.json"
    with open_store(url) as store:
        written = report_mod.write(
            store, out, study=study, baseline=baseline,
            bench=list(bench) or ([default_bench] if default_bench.is_dir() else []), same_gpu=not bench,
            sampler_benchmark=sampler_benchmark or (default_samplers if default_samplers.is_file() else None))
    size = written.stat().st_size / 1e6
    console.print(f"wrote {written} ({size:.1f} MB) from {safe_url(url)}; open it in a browser")
    if screenshot and exe:
        _check_in_browser(written, screenshot, exe)


def _check_in_browser(page: Path, png: Path, exe: str) -> None:
    """Load the page headless, say what it drew, save a screenshot from the top down to the end of
    the lineage section; drawing errors fail."""
    check = browser.inspect(page, exe)
    if check.summary is None:
        raise EvoError(f"{page}: the page's script did not finish drawing in headless Chromium; "
                       + "; ".join(check.console_errors))
    height = check.summary["section_bottoms"].get("lineage", browser.SHOT_HEIGHT) + 20  # down to the graph
    errors = check.console_errors + browser.screenshot(page, png, exe, height=height)
    errors += check.summary["errors"]
    plots = check.summary["plots"]
    empty = [name for name, p in plots.items() if not (p["points"] and p["marks"])]
    console.print(f"{png}: {len(plots)} plots drawn, {check.summary['lineage_nodes']} lineage nodes")
    if errors or empty:
        raise EvoError(f"{page} did not draw cleanly: " + "; ".join(errors + [f"plot {n} is empty" for n in empty]))

"""``evo report``: write the self-contained HTML report of a database (:mod:`evo.report`)."""

from __future__ import annotations

from pathlib import Path

import optuna
import typer
from rich.console import Console
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from evo import paths
from evo import report as report_mod
from evo.cli.app import DbOption, app
from evo.report import browser
from evo.errors import EvoError
from evo.store import open_store
from evo.store.engine import safe_url
from evo.timing import BACKENDS

console = Console()


@app.command("report")
def report_cmd(
    out: Path = typer.Option(Path("report.html"), "--out", help="the HTML file to write"),
    study: str | None = typer.Option(None, "--study", help="one study (default: every study and candidate)"),
    db: str | None = DbOption,
    baseline: str = typer.Option("sdpa_default", "--baseline", help=f"scores against: {', '.join(BACKENDS)}"),
    bench: list[Path] = typer.Option([], "--bench", help="evo bench records (files or folders, repeatable; "
                                                         "default: benchmarks/, those of the database's GPU)"),
    sampler_benchmark: Path | None = typer.Option(None, "--sampler-benchmark",
                                                  help="scripts/sampler_benchmark.py's JSON "
                                                       "(default: docs/sampler-benchmark.json when present)"),
    screenshot: Path | None = typer.Option(None, "--screenshot", help="also open the page in headless Chromium, "
                                                                     "check what it drew and save a PNG here"),
) -> None:
    """Write one HTML page (no network needed to view it): search progress, speedups per case,
    TFLOP/s against the GEMM rate, the interactive lineage graph, insights and failures."""
    if baseline not in BACKENDS:
        raise EvoError(f"unknown baseline {baseline!r}; one of {', '.join(BACKENDS)}")
    for path in (out, screenshot):
        if path is not None and not path.parent.is_dir():
            raise EvoError(f"folder {path.parent} does not exist")
    exe = browser.find_browser() if screenshot else None
    if screenshot and exe is None:
        raise EvoError("--screenshot needs Chromium (Debian: apt-get install chromium)")
    url = db or paths.default_db_url()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # importances would log every study they make
    _require_database(url)
    default_bench = paths.root() / "benchmarks"
    default_samplers = paths.root() / "docs" / "sampler-benchmark.json"
    with open_store(url) as store:
        written = report_mod.write(
            store, out, study=study, baseline=baseline,
            bench=bench or ([default_bench] if default_bench.is_dir() else []), same_gpu=not bench,
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


def _require_database(url: str) -> None:
    """A report reads a database: a SQLite path that does not exist is a mistake, not a new file."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise EvoError(f"cannot use database URL {url!r}: not a SQLAlchemy URL") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:") \
            and not Path(parsed.database).expanduser().is_file():
        raise EvoError(f"no database at {parsed.database}: `evo run` creates one; --db or $EVO_DB names another")

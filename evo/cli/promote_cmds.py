"""``evo promote``: write a pip-installable attention package from the winners in the database.

The command parses options and prints the dispatch table; :mod:`evo.promote` does the work.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from evo.cli.app import DbOption, app
from evo.errors import EvoError
from evo.promote import BASELINE, Promoted, promote
from evo.timing import BACKENDS

console = Console()


@app.command("promote")
def promote_cmd(
    name: str = typer.Option(..., "--name", help="package, import and torch.library namespace name"),
    out: Path = typer.Option(..., "--out", help="folder to write the package folder NAME into"),
    study: str | None = typer.Option(None, "--study", help="promote from this study's green candidates"),
    candidate: list[str] = typer.Option([], "--candidate", help="candidate id or unique prefix (repeatable)"),
    db: str | None = DbOption,
    baseline: str = typer.Option(BASELINE, "--baseline", help=f"the SDPA backend to beat: {', '.join(BACKENDS)}"),
    device: str | None = typer.Option(None, "--device",
                                      help="compare timings taken on this GPU (default: the one most "
                                           "candidates were last timed on)"),
    min_speedup: float = typer.Option(1.0, "--min-speedup", help="a bucket's winner must beat SDPA by more than this"),
    version: str = typer.Option("0.1.0", "--version", help="the package version"),
    force: bool = typer.Option(False, "--force", help="replace OUT/NAME if promote wrote it before"),
    no_verify: bool = typer.Option(False, "--no-verify",
                                   help="write without running the kernels over their buckets and the "
                                        "package's tests on the GPU (for machines without one)"),
) -> None:
    """Verify the per-bucket winners (green only) on the GPU, then write OUT/NAME: op, dispatch table, SDPA fallback."""
    if baseline not in BACKENDS:
        raise EvoError(f"unknown baseline {baseline!r}; one of {', '.join(BACKENDS)}")
    result = promote(name, out, db_url=db, study=study, candidate_ids=candidate, baseline=baseline,
                     device=device, min_speedup=min_speedup, version=version, force=force,
                     verify=not no_verify)
    console.print(_routes_table(result))
    v = result.verification
    console.print(f"verified on the GPU: {sum(v['checks'].values())} checks over the dispatch buckets "
                  f"(seed {v['seed']}); package tests: {v.get('package_tests', '-')}" if v.get("verified")
                  else "[yellow]not verified[/] (--no-verify): PROVENANCE.json says so")
    console.print(f"wrote {result.path} ({len(result.shipped)} kernel"
                  f"{'s' if len(result.shipped) != 1 else ''}, timings from {result.device})")
    if result.unused:
        console.print("not shipped (won no bucket): " + ", ".join(i[:12] for i in result.unused))
    console.print(f"install: pip install {result.path}")


def _routes_table(result: Promoted) -> Table:
    table = Table(title="dispatch table", title_justify="left")
    for col in ("head dim", "dtype", "causal", "L", "kernel", "speedup"):
        table.add_column(col, justify="right" if col in ("head dim", "speedup") else "left")
    for r in result.routes:
        d, dt, causal = r.key
        table.add_row(str(d), dt, "yes" if causal else "no", r.bucket.label(),
                      r.winner[:12] if r.winner else "SDPA",
                      f"x{r.speedup:.2f}" if r.speedup is not None else "—")
    return table

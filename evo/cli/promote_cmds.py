"""``evo promote``: write a pip-installable attention package from the winners in the database.

The command parses options and prints the dispatch table; :func:`evo.api.promote_winners`
(:mod:`evo.products.promote`) does the work.
"""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from evo.cli.app import api, cli, db_option
from evo.cli.output import console, table
from evo.vocab import DEFAULT_BASELINE, SDPA_BACKENDS


@cli.command("promote")
@click.option("--name", required=True, metavar="NAME", help="package, import and torch.library namespace name")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="folder to write the package folder NAME into")
@click.option("--study", metavar="NAME", help="promote from this study's green candidates")
@click.option("--candidate", multiple=True, metavar="ID", help="candidate id or unique prefix (repeatable)")
@db_option()
@click.option("--baseline", type=click.Choice(SDPA_BACKENDS), default=DEFAULT_BASELINE, show_default=True,
              help="the SDPA backend to beat")
@click.option("--device", metavar="GPU", help="compare timings taken on this GPU (default: the GPU it verifies "
              "on, if any candidate was timed there, else the one most candidates were last timed on)")
@click.option("--min-speedup", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              metavar="X", help="a bucket's winner must beat the baseline by more than this")
@click.option("--version", "version", default="0.1.0", show_default=True, metavar="VERSION",
              help="the package's version")
@click.option("--force", is_flag=True, help="replace OUT/NAME if promote wrote it before")
@click.option("--no-verify", is_flag=True, help="write without running the kernels over their buckets and the "
              "package's tests on the GPU (for machines without one)")
@click.option("--confirm", is_flag=True, help="time each bucket's winner again beside the baseline it is routed "
              "against, with evo eval's full rounds, and route only on those numbers (docs/promote.md)")
def promote_cmd(name: str, out: Path, study: str | None, candidate: tuple[str, ...], db: str | None, baseline: str,
                device: str | None, min_speedup: float, version: str, force: bool, no_verify: bool,
                confirm: bool) -> None:
    """Verify the winners on the GPU, then build a pip package.

    Per-bucket winners (GREEN on a GPU) are run over their buckets and the package's tests on the
    GPU, then written to OUT/NAME: a torch.library op, its dispatch table and the SDPA fallback.
    Candidates known only from a replayed recording carry no GREEN checks of their own: evaluate
    them on a GPU first (evo eval --id ID).
    """
    result = api.promote_winners(name, out, db=db, study=study, candidate_ids=list(candidate), baseline=baseline,
                                 device=device, min_speedup=min_speedup, version=version, force=force,
                                 verify=not no_verify, confirm=confirm,
                                 note=lambda line: console.print(escape(line)))
    console.print(_routes_table(result))
    v = result.verification
    console.print(f"verified on the GPU: {sum(v['checks'].values())} checks over the dispatch buckets "
                  f"(seed {v['seed']}); package tests: {v.get('package_tests', '-')}" if v.get("verified")
                  else "[yellow]not verified[/] (--no-verify): PROVENANCE.json says so")
    console.print(f"wrote {escape(str(result.path))} ({len(result.shipped)} kernel"
                  f"{'s' if len(result.shipped) != 1 else ''}, timings from {escape(result.device)})")
    for cid, cases in result.confirmed.items():
        console.print(f"timed beside SDPA: {cid[:12]} " + ", ".join(
            f"{tag} {_x(db_x)} in the database, {_x(now)} now" for tag, (db_x, now) in sorted(cases.items())))
    for line in result.rejected:
        console.print(f"failed its verification, stored red, planned again without it: {escape(line)}")
    for x in result.excluded:
        console.print(f"kept out: {escape(x.line())}")
    if result.stale:
        console.print(f"kept out: {len(result.stale)} candidate{'s' if len(result.stale) != 1 else ''} built from "
                      "older template text (today's templates render them differently; evo eval makes a fresh "
                      "build): " + ", ".join(i[:12] for i in result.stale))
    if result.unused:
        console.print("not shipped (won no bucket): " + ", ".join(i[:12] for i in result.unused))
    console.print(f"install: pip install {escape(str(result.path))}")


def _x(speedup: float | None) -> str:
    return "—" if speedup is None else f"x{speedup:.3f}"


def _routes_table(result: api.Promoted) -> Table:
    out = table("head dim", "dtype", "causal", "L", "kernel", "speedup", right=("head dim", "speedup"),
                title="dispatch table")
    for r in result.routes:
        d, dt, causal = r.key
        rows = f"Lq <= {r.max_lq}, " if r.max_lq is not None else ""   # a decode or chunk route
        cache = f"{r.layout} cache, " if r.layout != "contiguous" else ""  # calls with seqlens (block_table)
        out.add_row(str(d), dt, "yes" if causal else "no", cache + rows + r.bucket.label(),
                    r.winner[:12] if r.winner else "SDPA", f"x{r.speedup:.2f}" if r.speedup is not None else "—")
    return out

"""``evo bench-samplers``: regenerate docs/sampler-benchmark.md (the work is :func:`evo.api.bench_samplers`)."""

from __future__ import annotations

from pathlib import Path

import click

from evo.cli.app import api, cli, split_list
from evo.vocab import BASELINES, BENCH_SAMPLERS, START_MODES


def _progress(r: api.SamplerRun) -> None:
    reached = r.evaluations if r.evaluations is not None else "not reached"
    click.echo(f"{r.sampler:>26} {r.mode} seed {r.seed:3d}: {reached:>11} ({r.spent} evaluations, "
               f"{r.trials} trials, {r.seconds:.1f} s)", err=True)


@cli.command("bench-samplers")
@click.option("--recording", multiple=True, metavar="PATH[:FAMILIES]",
              help="a recorded sweep, or PATH:fam1,fam2 for some of its families; repeatable, one section "
                   "each (default: the newest data/sweep-*.json.gz)")
@click.option("--seeds", type=click.IntRange(min=1), default=50, show_default=True, metavar="N",
              help="seeded runs per sampler and start mode")
@click.option("--samplers", multiple=True, metavar="LIST",
              help=f"evo's and Optuna's samplers, comma-separated (default: {','.join(BENCH_SAMPLERS)})")
@click.option("--kt", multiple=True, metavar="LIST|none",
              help="Kernel Tuner strategies, comma-separated (default: its built-in ones but hybrid_vndx; "
                   "none: no Kernel Tuner)")
@click.option("--modes", multiple=True, metavar="LIST", help=f"start modes: {' and/or '.join(START_MODES)} "
              f"(default: both)")
@click.option("--cases", multiple=True, metavar="LIST",
              help="FAST cases scored: F1, F3c, F1-F4, comma-separated (default: those every timed record covers)")
@click.option("--baseline", type=click.Choice(BASELINES), default=BASELINES[0], show_default=True,
              help="the SDPA backend scores are against")
@click.option("--tolerance", type=click.FloatRange(0, 1, max_open=True), default=0.0, show_default=True,
              metavar="FRACTION", help="target: any point within this fraction of the best (0: the best point)")
@click.option("--pin", multiple=True, metavar="LIST",
              help="benchmark a sub-space, these genes held at one value each, comma-separated: FAMILY.GENE=VALUE, "
                   "or GENE=VALUE for the one benchmarked family that has it (a family too large to list needs it)")
@click.option("--batch", type=click.IntRange(min=1), default=1, show_default=True, metavar="N",
              help="trials per batch of the Optuna-driven samplers (as evo run --batch; 1: sequential, "
                   "as Kernel Tuner)")
@click.option("--jobs", type=click.IntRange(min=1), metavar="N", help="processes (default: CPU count)")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="markdown written (default: <EVO_HOME>/docs/sampler-benchmark.md)")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="figure written, when matplotlib is installed (default: beside --out, .png)")
@click.option("--results", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="every run, as JSON; `evo report` reads it (default: beside --out, .json)")
def bench_samplers_cmd(recording: tuple[str, ...], seeds: int, samplers: tuple[str, ...], kt: tuple[str, ...],
                       modes: tuple[str, ...], cases: tuple[str, ...], baseline: str, tolerance: float, batch: int,
                       pin: tuple[str, ...], jobs: int | None, out: Path | None, plot: Path | None,
                       results: Path | None) -> None:
    """Compare samplers on recorded sweeps: evaluations to reach the best point, cold and warm.

    Each sampler runs --seeds times per start mode on the recording (lookups, no GPU); the tables
    give the median and quartiles of the evaluations each run needed and a Mann-Whitney U test
    against evo. Kernel Tuner's strategies (pip install 'evo-kernels[bench]') run in its
    simulation mode on the same recording.
    """
    kt_list = split_list(kt)
    written = api.bench_samplers(list(recording), seeds=seeds, samplers=split_list(samplers),
                                 kt=[] if kt_list == ["none"] else kt_list, modes=split_list(modes),
                                 cases=split_list(cases), baseline=baseline, tolerance=tolerance, batch=batch,
                                 jobs=jobs, out=out, plot=plot, results=results,
                                 note=lambda s: click.echo(s, err=True), progress=_progress,
                                 pins=split_list(pin) or ())
    for path in written:
        click.echo(f"wrote {path}")
